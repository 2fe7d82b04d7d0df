"""Stores written at test time by other tools, opened in a real napari viewer (Xvfb).

ome-zarr-py (NGFF 0.4 and 0.5, channel axes, per-channel chunks), zarr-python and
TensorStore with their defaults: no exception escapes, every layer finishes
loading, and what napari shows equals the writer's arrays.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot


def _settle(viewer: Any, qtbot: QtBot, layers: list[Any]) -> None:
    viewer.window._qt_viewer.canvas.on_draw(None)  # napari re-slices for the camera on draw
    loaders = [loader_of(layer) for layer in layers]
    assert all(loader is not None for loader in loaders)
    qtbot.waitUntil(lambda: all(loader.settled for loader in loaders), timeout=30_000)


def _shown_equals(layer: Any, level_data: np.ndarray[Any, Any], viewer: Any) -> None:
    """What napari displays for `layer` equals `level_data` (the writer's array at the
    layer's data level, channel already taken) at the current dims position."""
    raw = np.asarray(layer._slice.image.raw)
    displayed = list(viewer.dims.displayed)
    corners = np.asarray(layer.corner_pixels)
    point = layer.world_to_data(viewer.dims.point)
    index: list[Any] = []
    for axis in range(level_data.ndim):
        if axis in displayed:
            index.append(slice(int(corners[0, axis]), int(corners[1, axis]) + 1))
        else:
            scale = layer.downsample_factors[layer.data_level][axis] if layer.multiscale else 1
            index.append(int(np.clip(round(point[axis] / scale), 0, level_data.shape[axis] - 1)))
    expected = level_data[tuple(index)]
    np.testing.assert_array_equal(raw, expected)


AXES_CASES = [
    ("cyx", (3, 150, 220), (1, 64, 64)),
    ("czyx", (2, 4, 96, 130), (1, 1, 32, 32)),
    ("tczyx", (2, 3, 3, 80, 100), (1, 1, 1, 32, 32)),
]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize(("axes", "shape", "chunks"), AXES_CASES, ids=[c[0] for c in AXES_CASES])
def test_ome_zarr_py_images_with_a_channel_axis(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    version: str,
    axes: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
) -> None:
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image

    data = np.random.default_rng(7).integers(0, 60_000, size=shape, dtype=np.uint16)
    path = tmp_path / "image.ome.zarr"
    zarr_format = 2 if version == "0.4" else 3
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    fmt = FormatV04() if version == "0.4" else FormatV05()
    write_image(
        data, group, axes=axes, fmt=fmt, scale_factors=(2, 4), storage_options={"chunks": chunks}
    )
    attrs = dict(zarr.open_group(str(path), mode="r").attrs)
    multiscale = (attrs["ome"] if version == "0.5" else attrs)["multiscales"][0]
    written = [
        np.asarray(zarr.open_array(str(path / d["path"]), mode="r"))
        for d in multiscale["datasets"]
    ]
    np.testing.assert_array_equal(written[0], data)
    channel_axis = axes.index("c")

    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    watch_viewer(viewer)
    layers = viewer.open(str(path), plugin="napari-lazy-zarr")
    assert len(layers) == shape[channel_axis]
    _settle(viewer, qtbot, layers)
    for channel, layer in enumerate(layers):
        loader = loader_of(layer)
        assert loader is not None
        per_level = [np.take(level, channel, axis=channel_axis) for level in written]
        # Full resolution through the layer's own arrays (blocking) equals the writer's.
        np.testing.assert_array_equal(np.asarray(loader.levels[0].array), per_level[0])
        _shown_equals(layer, per_level[layer.data_level], viewer)
    # Zoom into full resolution and step the leading axes: still exact, still no error.
    viewer.scene.camera.zoom = 8
    if len(viewer.dims.range) > 2:
        viewer.dims.set_current_step(0, viewer.dims.nsteps[0] - 1)
    _settle(viewer, qtbot, layers)
    for channel, layer in enumerate(layers):
        per_level = [np.take(level, channel, axis=channel_axis) for level in written]
        assert layer.data_level == 0
        _shown_equals(layer, per_level[0], viewer)


ARRAY_SHAPE = (3, 700, 600)


def _zarr_python(path: Path, zarr_format: int) -> np.ndarray[Any, Any]:
    data = np.random.default_rng(zarr_format).random(ARRAY_SHAPE).astype(np.float32)
    array = zarr.create_array(
        str(path),
        shape=data.shape,
        dtype=data.dtype,
        chunks=(1, 128, 128),
        zarr_format=zarr_format,
    )  # type: ignore[call-overload]
    array[...] = data
    return data


def _tensorstore(path: Path, driver: str) -> np.ndarray[Any, Any]:
    import tensorstore as ts

    data = np.random.default_rng(11).integers(0, 2**15, size=ARRAY_SHAPE, dtype=np.int16)
    spec = {
        "driver": driver,
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {"shape": list(data.shape), "dtype": "<i2" if driver == "zarr" else "int16"},
        "create": True,
        "delete_existing": True,
    }
    if driver == "zarr3":
        spec["metadata"] = {"shape": list(data.shape), "data_type": "int16"}
    store = ts.open(spec).result()
    store[...] = data
    return data


WRITERS: dict[str, Callable[[Path], np.ndarray[Any, Any]]] = {
    "zarr-python-v2": lambda p: _zarr_python(p, 2),
    "zarr-python-v3": lambda p: _zarr_python(p, 3),
    "tensorstore-zarr": lambda p: _tensorstore(p, "zarr"),
    "tensorstore-zarr3": lambda p: _tensorstore(p, "zarr3"),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_arrays_written_with_the_writers_defaults(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, writer: str
) -> None:
    path = tmp_path / "array.zarr"
    data = WRITERS[writer](path)
    if writer == "tensorstore-zarr":
        # TensorStore's default for Zarr v2: no fill value.
        assert json.loads((path / ".zarray").read_text())["fill_value"] is None
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    _settle(viewer, qtbot, [layer])
    loader = loader_of(layer)
    assert loader is not None
    np.testing.assert_array_equal(np.asarray(loader.levels[0].array), data)
    # Virtual levels: level k is the data sampled every 2**k pixels.
    level = layer.data_level
    _shown_equals(layer, data[:, :: 2**level, :: 2**level], viewer)
    viewer.scene.camera.zoom = 6
    viewer.dims.set_current_step(0, 2)
    _settle(viewer, qtbot, [layer])
    assert layer.data_level == 0
    _shown_equals(layer, data, viewer)


def _coins(path: Path, *, omero: bool) -> np.ndarray[Any, Any]:
    """An image named "coins" and its label image "coins" with properties, as ome-zarr-py
    writes them (its ``coins`` sample's layout); label values 3, 7, 12 (not 0, 1, 2)."""
    from ome_zarr.writer import add_metadata, write_image, write_labels

    image = np.zeros((256, 256), dtype=np.uint8)
    image[40:80, 40:80], image[120:200, 60:140] = 180, 90
    labels = np.zeros((256, 256), dtype=np.uint8)
    labels[40:80, 40:80], labels[120:200, 60:140], labels[200:240, 200:240] = 3, 7, 12
    root = zarr.open_group(str(path), mode="w")
    write_image(image, root, axes="yx", name="coins")
    if omero:
        window = {"min": 0, "max": 255, "start": 0, "end": 255}
        channel = {"label": "Channel 0", "color": "FF0000", "window": window}
        add_metadata(root, {"omero": {"channels": [channel]}})
    properties = [
        {"label-value": value, "area": int((labels == value).sum()), "class": kind}
        for value, kind in ((3, "coin"), (7, "coin"), (12, "dust"))
    ]
    write_labels(labels, root, name="coins", axes="yx", label_metadata={"properties": properties})
    return labels


# napari-ome-zarr 0.11 sorts the features with pandas' deprecated `inplace=True`.
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.sort_values")
def test_label_images_open_as_napari_ome_zarr_opens_them(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    import pandas as pd

    path = tmp_path / "coins.ome.zarr"
    labels = _coins(path, omero=True)
    viewer = make_napari_viewer(show=True)
    reference = viewer.open(str(path), plugin="napari-ome-zarr")
    theirs = [(layer.name, type(layer).__name__, layer.visible) for layer in reference]
    their_features = reference[1].features
    for layer in reference:
        viewer.layers.remove(layer)
    ours = viewer.open(str(path), plugin="napari-lazy-zarr")
    # Named, typed and shown as napari-ome-zarr does: the image "coins: Channel 0" (its
    # omero channel's label), never clashing with its labels "coins", hidden at open.
    assert [(layer.name, type(layer).__name__, layer.visible) for layer in ours] == theirs
    assert theirs == [("coins: Channel 0", "Image", True), ("coins", "Labels", False)]
    image, label_layer = ours
    # The label properties are the layer's features, as napari-ome-zarr's, plus napari's
    # "index" (the label value): the row napari shows for the label under the cursor.
    features = label_layer.features
    pd.testing.assert_frame_equal(
        features.drop(columns="index").reset_index(drop=True),
        their_features.reset_index(drop=True),
        check_dtype=False,
    )
    assert features["index"].tolist() == [3, 7, 12]
    _settle(viewer, qtbot, [image])
    _screenshot(viewer, "labels-at-open.png")
    label_layer.visible = True
    _settle(viewer, qtbot, ours)
    np.testing.assert_array_equal(label_layer.data[0].array.result(), labels)
    y, x = 150, 100  # inside label 7 (class "coin", 6400 pixels)
    status = label_layer.get_status((y, x), world=True)["coordinates"]
    assert "area: 6400" in status, status
    viewer.layers.selection.active = label_layer
    _screenshot(viewer, "labels-shown.png")


def test_an_image_and_its_labels_of_one_name_never_clash(tmp_path: Path) -> None:
    from napari_lazy_zarr._reader import read_zarr

    path = tmp_path / "coins.ome.zarr"
    _coins(path, omero=False)  # no omero: both are plainly "coins"
    names = [kwargs["name"] for _, kwargs, _ in read_zarr(str(path))]
    assert names == ["coins", "coins (labels)"]


def _screenshot(viewer: Any, name: str) -> None:
    """Save what the window shows under $LAZY_ZARR_SHOTS (a folder), when it is set."""
    import os

    folder = os.environ.get("LAZY_ZARR_SHOTS")
    if folder:
        viewer.screenshot(os.path.join(folder, name), canvas_only=False, flash=False)
