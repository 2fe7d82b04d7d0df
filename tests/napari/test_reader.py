"""The npe2 reader on real stores: what napari gets, and what it refuses."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import LayerLevel
from napari_lazy_zarr._reader import napari_get_reader, read_zarr
from napari_lazy_zarr.core import MetadataError, NotAZarrStoreError, UnsafeDataError
from tests.napari.conftest import omero

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from pytestqt.qtbot import QtBot

    OmeStore = Callable[..., tuple[Path, list[np.ndarray[Any, Any]]]]

YX = [
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]
CYX = [{"name": "c", "type": "channel"}, *YX]


def _plain(
    tmp_path: Path, name: str, zarr_format: int, shards: Any = None
) -> np.ndarray[Any, Any]:
    data = (np.arange(1500 * 1300) % 4093).astype(np.uint16).reshape(1500, 1300)
    array = zarr.create_array(
        str(tmp_path / name),
        shape=data.shape,
        chunks=(128, 128),
        shards=shards,
        dtype=data.dtype,
        zarr_format=zarr_format,  # type: ignore[arg-type]
    )
    array[...] = data
    return data


@pytest.mark.parametrize(("zarr_format", "shards"), [(2, None), (3, None), (3, (512, 512))])
def test_single_array_becomes_a_virtual_pyramid(
    tmp_path: Path, zarr_format: int, shards: Any
) -> None:
    data = _plain(tmp_path, "plain.zarr", zarr_format, shards)
    reader = napari_get_reader(str(tmp_path / "plain.zarr"))
    assert reader is read_zarr
    ((levels, kwargs, layer_type),) = reader(str(tmp_path / "plain.zarr"))
    assert layer_type == "image"
    assert kwargs["multiscale"] is True
    assert all(isinstance(level, LayerLevel) for level in levels)
    # 1500 -> 750 -> 375: decimated by 2 until at most 512 px.
    assert [level.shape for level in levels] == [(1500, 1300), (750, 650), (375, 325)]
    np.testing.assert_array_equal(levels[2].array.result(), data[::4, ::4])
    np.testing.assert_array_equal(levels[0][100:300, 7:9].array.result(), data[100:300, 7:9])
    low, high = kwargs["contrast_limits"]
    assert low < high


def test_the_display_never_waits_and_its_frames_never_change(tmp_path: Path) -> None:
    """napari's display door (the controller's read) answers at once from what is resident;
    the frame it answered never changes as chunks land; a later read has them."""
    from tests.viewing import read_settled

    data = _plain(tmp_path, "plain.zarr", 3)
    ((levels, _, _),) = read_zarr(str(tmp_path / "plain.zarr"))
    controller = levels[0].loader.controller
    region = (slice(1000, 1200), slice(1000, 1200))
    view = levels[0][region]
    # The contrast sample read chunks spread over level 0: start from a cold cache.
    view.array.result(timeout=30)
    view.array.cache.evict_unpinned()
    shown = controller.read(0, view.array, kind="view")  # what napari does: returns at once
    first = shown.copy()
    # Each pixel is the data, the fill value, or resident coarser data (upsampled).
    allowed = [data[region], np.zeros((200, 200), data.dtype)]
    for level in levels[1:]:
        ratio = level.shape[0] / data.shape[0]
        index = np.minimum(((np.arange(1000, 1200) + 0.5) * ratio).astype(int), level.shape[0] - 1)
        coarse = level.array.result()
        allowed.append(coarse[np.ix_(index, index)])
    assert np.logical_or.reduce([first == a for a in allowed]).all()
    assert not np.array_equal(first, data[region])  # the fine chunks were not resident yet
    np.testing.assert_array_equal(read_settled(controller, 0, view.array), data[region])
    np.testing.assert_array_equal(shown, first)  # the frame answered first never changed
    np.testing.assert_array_equal(np.asarray(view), data[region])  # the exact door
    controller.close()


def test_plain_group_gives_a_layer_per_array(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("a", shape=(64, 64), dtype="u1")[...] = 1
    group.create_array("b", shape=(32, 32), dtype="f4")[...] = 2.5
    layers = read_zarr(str(tmp_path / "g.zarr"))
    assert [kwargs["name"] for _, kwargs, _ in layers] == ["a", "b"]
    assert np.asarray(layers[1][0].array.result()).dtype == np.float32


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_ome_zarr_channels_transforms_and_labels(ome_store: OmeStore, zarr_format: int) -> None:
    rng = np.random.default_rng(0)
    data = rng.integers(0, 4000, size=(2, 1024, 768), dtype=np.uint16)
    labels = (np.arange(1024 * 768).reshape(1024, 768) // 5000).astype(np.uint32)
    path, pyramid = ome_store(
        data=data,
        levels=3,
        chunks=(1, 256, 256),
        axes=CYX,
        zarr_format=zarr_format,
        omero=omero(["FF0000", "00FF00"], [(10, 3000), (20, 2000)]),
        scale=[1.0, 0.5, 0.25],
        translate=[0.0, 10.0, 20.0],
        labels={"cells": labels[None]},
    )
    assert napari_get_reader(str(path)) is read_zarr
    layers = read_zarr(str(path))
    images = [layer for layer in layers if layer[2] == "image"]
    label_layers = [layer for layer in layers if layer[2] == "labels"]
    # Named as napari-ome-zarr names them: the multiscales name (the writer's "image.ome"), then
    # the channel's label.
    assert [kwargs["name"] for _, kwargs, _ in images] == ["image.ome: ch0", "image.ome: ch1"]
    red, green = images
    assert red[1]["scale"] == (0.5, 0.25)
    assert red[1]["translate"] == (10.0, 20.0)
    assert red[1]["axis_labels"] == ("y", "x")
    assert red[1]["units"] == ("micrometer", "micrometer")
    assert red[1]["contrast_limits"] == (10, 3000)
    assert red[1]["blending"] == "additive"
    assert (red[1]["colormap"], green[1]["colormap"]) == ("red", "green")  # napari's names
    assert [level.shape for level in green[0]] == [(1024, 768), (512, 384), (256, 192)]
    np.testing.assert_array_equal(green[0][1].array.result(), pyramid[1][1])
    ((label_levels, label_kwargs, _),) = label_layers
    assert label_kwargs["name"] == "cells"
    np.testing.assert_array_equal(label_levels[0].array.result(), labels)  # c (size 1) dropped


def test_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "image.tif").write_bytes(b"II*\x00")
    (tmp_path / "empty.zarr").mkdir()
    assert napari_get_reader(str(tmp_path / "image.tif")) is None
    assert napari_get_reader(str(tmp_path / "empty.zarr")) is None
    assert napari_get_reader(str(tmp_path / "missing.zarr")) is None
    assert napari_get_reader([str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]) is None
    assert napari_get_reader("\x00bad") is None


def _folder_of(kind: str, folder: Path) -> Path:
    """A folder a user may open in napari that is not a zarr store: TIFFs, PNGs, or nothing."""
    import imageio.v3 as iio
    import tifffile

    folder.mkdir()
    frames = np.arange(3 * 32 * 32, dtype=np.uint8).reshape(3, 32, 32)
    for index, frame in enumerate(frames if kind != "empty" else []):
        if kind == "tiff":
            tifffile.imwrite(folder / f"frame{index}.tif", frame)
        else:
            iio.imwrite(folder / f"frame{index}.png", frame)
    return folder


@pytest.mark.parametrize("kind", ["tiff", "png", "empty"])
def test_a_folder_that_is_not_zarr_is_not_claimed(
    tmp_path: Path, qtbot: QtBot, make_napari_viewer: Callable[..., Any], kind: str
) -> None:
    from napari._qt.dialogs.qt_reader_dialog import QtReaderDialog
    from napari.plugins import _npe2

    viewer = make_napari_viewer()
    folder = _folder_of(kind, tmp_path / kind)
    assert napari_get_reader(str(folder)) is None
    # npe2 offers every folder to every reader accepting folders (it matches no pattern
    # against a folder), so napari asks which reader: its dialog must not preselect ours.
    readers = _npe2.get_readers(str(folder))
    assert "napari-lazy-zarr" in readers
    dialog = QtReaderDialog(pth=str(folder), readers=readers)
    qtbot.addWidget(dialog)
    assert dialog._get_plugin_choice() == readers["napari"]  # napari's own reader
    if kind != "empty":  # ... which reads it (a stack of its images)
        (layer,) = viewer.open(str(folder), plugin="napari", stack=False)
        assert layer.data.shape == (3, 32, 32)
    with pytest.raises(ValueError, match="refused"):  # and ours never pretends to
        viewer.open(str(folder), plugin="napari-lazy-zarr")


def test_broken_store_raises_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.zarr"
    broken.mkdir()
    (broken / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array"')
    reader = napari_get_reader(str(broken))
    assert reader is read_zarr  # it looks like zarr ...
    with pytest.raises(MetadataError, match=r"broken\.zarr"):  # ... but says what is wrong
        reader(str(broken))
    group = tmp_path / "hollow.zarr"
    zarr.open_group(str(group), mode="w")
    with pytest.raises(NotAZarrStoreError, match=r"hollow\.zarr"):
        read_zarr(str(group))
    bad_ome = tmp_path / "bad.ome.zarr"
    zarr.open_group(str(bad_ome), mode="w", zarr_format=2).attrs["multiscales"] = [{"datasets": 5}]
    with pytest.raises(MetadataError, match=r"bad\.ome\.zarr"):
        read_zarr(str(bad_ome))


def test_manifest_is_valid_and_its_commands_import() -> None:
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-lazy-zarr")
    manifest.validate_imports()
    assert {c.id for c in manifest.contributions.commands or []} >= {
        "napari-lazy-zarr.get_reader",
        "napari-lazy-zarr.sample",
    }
    (reader,) = manifest.contributions.readers or []
    assert "*.zarr" in reader.filename_patterns
    assert reader.accepts_directories


@pytest.mark.parametrize(
    ("path", "offered"),
    [
        ("https://example.org/image.ome.zarr/labels/cells", True),  # a node inside a store
        ("https://example.org/image.zarr", True),
        ("http://127.0.0.1:8000/data/image/", True),  # any store URL ending in "/"
        ("s3://bucket/image.zarr", True),
        ("https://example.org/photo.tif", False),  # napari's own reader, unopposed
        ("refs.json", True),
        ("image.zarr.zip", True),
        ("image.tif", False),
    ],
)
def test_napari_offers_the_plugin_for_zarr_names_and_urls(path: str, offered: bool) -> None:
    from npe2 import PluginManager

    manager = PluginManager.instance()
    manager.discover()
    readers = {reader.plugin_name for reader in manager.iter_compatible_readers([path])}
    assert ("napari-lazy-zarr" in readers) is offered


def test_sample_data_is_generated_once_and_read_lazily(tmp_path: Path) -> None:
    from napari_lazy_zarr._sample_data import sample_path

    path = sample_path(1024, tmp_path)
    written = (path / "zarr.json").stat().st_mtime_ns
    assert sample_path(1024, tmp_path) == path  # reused, not rewritten
    assert (path / "zarr.json").stat().st_mtime_ns == written
    ((levels, kwargs, layer_type),) = read_zarr(str(path))
    assert layer_type == "image"
    assert [level.shape for level in levels] == [(1024, 1024), (512, 512)]
    assert kwargs["contrast_limits"] == (100, 20000)  # from the omero window


# -- what the hook claims ---------------------------------------------------------


def test_the_hook_claims_zarr_folders_whatever_their_name(
    tmp_path: Path, recorded_reads: list[Any]
) -> None:
    import tifffile

    group = zarr.open_group(str(tmp_path / "experiment"), mode="w")  # no .zarr suffix
    group.create_array("raw", shape=(64, 64), chunks=(32, 32), dtype="u2")[...] = 7
    _plain(tmp_path, "scan", 2)
    tiffs = tmp_path / "tiffs"
    tiffs.mkdir()
    for index in range(3):
        tifffile.imwrite(tiffs / f"plane{index}.tif", np.full((32, 32), index, np.uint16))
    (tmp_path / "settings.json").write_text('{"theme": "dark"}')
    assert napari_get_reader(str(tmp_path / "experiment")) is read_zarr
    assert napari_get_reader(str(tmp_path / "scan")) is read_zarr
    assert napari_get_reader(str(tiffs)) is None  # napari's own reader takes it
    assert napari_get_reader(str(tiffs / "plane0.tif")) is None
    assert napari_get_reader(str(tmp_path)) is None  # a folder holding stores is not one
    assert napari_get_reader(str(tmp_path / "settings.json")) is None
    assert recorded_reads == []  # from metadata alone: no chunk read
    ((levels, kwargs, _),) = read_zarr(str(tmp_path / "experiment"))
    assert kwargs["name"] == "raw"
    assert int(levels.array.result().max()) == 7


@pytest.fixture
def served_stores(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A server on 127.0.0.1 serving a v3 group, a v2 group, an OME-Zarr image and a TIFF."""
    from tests.remote.server import FaultyServer

    for zarr_format, name in [(3, "g3.zarr"), (2, "g2.zarr")]:
        group = zarr.open_group(str(tmp_path / name), mode="w", zarr_format=zarr_format)  # type: ignore[arg-type]
        group.create_array("raw", shape=(40, 50), chunks=(16, 16), dtype="u2")[...] = np.arange(
            2000, dtype=np.uint16
        ).reshape(40, 50)
    _ome_zarr_py_store(tmp_path / "image.ome.zarr", "0.5", window=True)
    (tmp_path / "photo.tif").write_bytes(b"II*\x00")
    with FaultyServer(tmp_path) as server:
        yield server, tmp_path


def test_the_hook_claims_urls_by_their_metadata(
    served_stores: tuple[Any, Path], recorded_reads: list[Any]
) -> None:
    server, _ = served_stores
    url = server.url
    claimed = [
        f"{url}/g3.zarr/raw",  # an array inside a group: not named *.zarr
        f"{url}/g2.zarr/raw",
        f"{url}/g3.zarr/raw/",
        f"{url}/image.ome.zarr/labels/cells",
        f"{url}/g3.zarr",
    ]
    refused = [f"{url}/g3.zarr/missing", f"{url}/photo.tif", f"{url}/", "http://127.0.0.1:9/x"]
    for location in claimed:
        assert napari_get_reader(location) is read_zarr, location
    for location in refused:
        assert napari_get_reader(location) is None, location
    documents = {key.rsplit("/", 1)[-1] for key in server.faults.requests}
    assert documents <= {"zarr.json", ".zarray", ".zgroup"}  # no chunk was requested
    assert recorded_reads == []
    ((levels, kwargs, _),) = read_zarr(f"{url}/g2.zarr/raw")
    assert kwargs["name"] == "raw"
    np.testing.assert_array_equal(
        levels.array.result(timeout=30), np.arange(2000, dtype=np.uint16).reshape(40, 50)
    )
    ((_, label_kwargs, layer_type),) = read_zarr(f"{url}/image.ome.zarr/labels/cells")
    assert (label_kwargs["name"], layer_type) == ("cells", "labels")
    np.testing.assert_allclose(label_kwargs["colormap"].color_dict[1], [1, 0, 0, 1])


# -- kerchunk references, as napari opens them ---------------------------------------


@pytest.fixture
def hermetic_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from napari_lazy_zarr.core.settings import SETTINGS_VARIABLE
    from napari_lazy_zarr.core.storage.policy import (
        ALLOWED_REMOTES_VARIABLE,
        ALLOWED_ROOTS_VARIABLE,
    )

    path = tmp_path / "config" / "settings.toml"
    monkeypatch.setenv(SETTINGS_VARIABLE, str(path))
    monkeypatch.delenv(ALLOWED_ROOTS_VARIABLE, raising=False)
    monkeypatch.delenv(ALLOWED_REMOTES_VARIABLE, raising=False)
    return path


def _hdf5_with_kerchunk(folder: Path, manifest: Path) -> np.ndarray[Any, Any]:
    """An HDF5 file written by h5py in `folder`, and kerchunk's references to it in `manifest`."""
    h5py = pytest.importorskip("h5py")
    from kerchunk.hdf import SingleHdf5ToZarr

    data = (np.arange(300 * 200) % 3001).astype(np.uint16).reshape(300, 200)
    folder.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "scan.h5", "w") as handle:
        handle.create_dataset("image", data=data, chunks=(100, 100), compression="gzip")
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(SingleHdf5ToZarr(str(folder / "scan.h5")).translate()))
    return data


def test_kerchunk_output_opens_beside_its_file_and_elsewhere_once_allowed(
    tmp_path: Path, hermetic_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from napari_lazy_zarr.core.storage.policy import ALLOWED_ROOTS_VARIABLE

    data = _hdf5_with_kerchunk(tmp_path / "h5", tmp_path / "h5" / "scan.json")
    assert napari_get_reader(str(tmp_path / "h5" / "scan.json")) is read_zarr
    ((levels, kwargs, _),) = read_zarr(str(tmp_path / "h5" / "scan.json"))
    assert kwargs["name"] == "image"
    np.testing.assert_array_equal(levels.array.result(timeout=30), data)

    _hdf5_with_kerchunk(tmp_path / "h5", tmp_path / "refs" / "scan.json")
    with pytest.raises(UnsafeDataError) as refused:
        read_zarr(str(tmp_path / "refs" / "scan.json"))
    message = str(refused.value)
    assert f"reference {str(tmp_path / 'h5' / 'scan.h5')!r} is outside" in message
    assert "add that folder to Allowed folders in napari's Preferences" in message
    assert f"to the environment variable {ALLOWED_ROOTS_VARIABLE}" in message
    assert f"allowed_roots in {hermetic_settings}" in message
    hermetic_settings.parent.mkdir()
    hermetic_settings.write_text(
        f"[references]\nallowed_roots = [{json.dumps(str(tmp_path / 'h5'))}]\n"
    )
    ((levels, _, _),) = read_zarr(str(tmp_path / "refs" / "scan.json"))
    np.testing.assert_array_equal(levels.array.result(timeout=30), data)
    hermetic_settings.unlink()
    monkeypatch.setenv(ALLOWED_ROOTS_VARIABLE, str(tmp_path / "h5"))
    ((levels, _, _),) = read_zarr(str(tmp_path / "refs" / "scan.json"))
    np.testing.assert_array_equal(levels.array.result(timeout=30), data)


def test_a_refused_reference_reaches_the_napari_user(
    make_napari_viewer: Callable[..., Any], tmp_path: Path, hermetic_settings: Path
) -> None:
    _hdf5_with_kerchunk(tmp_path / "h5", tmp_path / "refs" / "scan.json")
    viewer = make_napari_viewer()
    with pytest.raises(Exception) as refused:  # noqa: PT011 - napari may wrap it
        viewer.open(str(tmp_path / "refs" / "scan.json"), plugin="napari-lazy-zarr")
    chain: list[BaseException] = []
    error: BaseException | None = refused.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or getattr(error, "original_error", None)
    unsafe = [e for e in chain if isinstance(e, UnsafeDataError)]
    assert unsafe, chain
    assert "NAPARI_LAZY_ZARR_ALLOWED_ROOTS" in str(unsafe[0])
    assert len(viewer.layers) == 0


# -- colours and contrast ----------------------------------------------------------


def _ome_zarr_py_store(
    path: Path, version: str, *, window: bool, colors: tuple[str, str] = ("FF00FF", "00FF00")
) -> np.ndarray[Any, Any]:
    """An OME-Zarr image (2 channels) with a label image, written by ome-zarr-py."""
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image, write_labels
    from ome_zarr_models.common.omero import Omero

    data = np.random.default_rng(3).integers(100, 4000, size=(2, 256, 320), dtype=np.uint16)
    data[1] //= 3
    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(str(path), mode="w", zarr_format=fmt.zarr_format)  # type: ignore[arg-type]
    metadata: dict[str, Any] = {}
    if window:
        metadata["omero"] = Omero.model_validate(
            {
                "channels": [
                    {
                        "label": f"ch{i}",
                        "color": color,
                        "window": {"min": 0, "max": 65535, "start": 10 * (i + 1), "end": 3000},
                    }
                    for i, color in enumerate(colors)
                ]
            }
        )
    write_image(data, group, axes="cyx", fmt=fmt, scale_factors=(2, 4), **metadata)
    cells = (np.arange(256 * 320).reshape(256, 320) // 9000).astype(np.uint32)
    write_labels(
        cells,
        group,
        name="cells",
        axes="yx",
        fmt=fmt,
        scale_factors=(2,),
        label_metadata={
            "colors": [
                {"label-value": 1, "rgba": [255, 0, 0, 255]},
                {"label-value": 3, "rgba": [0, 0, 255, 128]},
            ]
        },
    )
    return data


def _label_colors(layer: Any) -> dict[Any, tuple[float, ...]]:
    return {key: tuple(np.round(value, 4)) for key, value in layer.colormap.color_dict.items()}


@pytest.mark.filterwarnings("ignore:color_dict did not provide a default color:UserWarning")
@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("window", [True, False], ids=["omero-window", "no-omero"])
def test_colours_and_contrast_agree_with_napari_ome_zarr(
    make_napari_viewer: Callable[..., Any], tmp_path: Path, version: str, window: bool
) -> None:
    path = tmp_path / "image.ome.zarr"
    _ome_zarr_py_store(path, version, window=window)
    viewer = make_napari_viewer()
    ours = viewer.open(str(path), plugin="napari-lazy-zarr")
    theirs = viewer.open(str(path), plugin="napari-ome-zarr")
    our_images = [layer for layer in ours if layer._type_string == "image"]
    their_images = [layer for layer in theirs if layer._type_string == "image"]
    assert len(our_images) == len(their_images) == 2
    for mine, reference in zip(our_images, their_images, strict=True):
        assert mine.colormap.name == reference.colormap.name
        np.testing.assert_allclose(mine.contrast_limits, reference.contrast_limits)
    if window:
        assert [layer.colormap.name for layer in our_images] == ["magenta", "green"]
        assert [tuple(layer.contrast_limits) for layer in our_images] == [(10, 3000), (20, 3000)]
    (our_labels,) = [layer for layer in ours if layer._type_string == "labels"]
    (their_labels,) = [layer for layer in theirs if layer._type_string == "labels"]
    assert _label_colors(our_labels) == _label_colors(their_labels)
    assert _label_colors(our_labels)[1] == (1.0, 0.0, 0.0, 1.0)
    np.testing.assert_allclose(our_labels.get_color(3), [0, 0, 1, 128 / 255], atol=1e-6)


def test_a_labels_read_never_changes_under_napari_as_chunks_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """napari's labels colouring reads each cell twice (numba's direct colormap): the array
    a labels layer's display is answered with must not change under it. Every frame is
    immutable, labels and images alike: a read taken before its chunks land keeps its
    placeholders, a later read has them."""
    import threading

    from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource
    from tests.viewing import read_settled

    # No chunk lands before the first reads (the image's contrast sample loads chunks too).
    gate = threading.Event()
    original = ZarrChunkSource.read_chunk

    def gated(self: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
        assert gate.wait(60), "the test never opened the gate"
        return original(self, coords)

    monkeypatch.setattr(ZarrChunkSource, "read_chunk", gated)
    path = tmp_path / "image.ome.zarr"
    _ome_zarr_py_store(path, "0.5", window=False)
    try:
        layers = read_zarr(str(path))
        (labels,) = [data for data, _, kind in layers if kind == "labels"]
        image = next(data for data, _, kind in layers if kind == "image")
        expected = (np.arange(256 * 320).reshape(256, 320) // 9000).astype(np.uint32)
        firsts = []
        for level in (labels[0], image[0]):
            first = level.loader.controller.read(0, level.array[...], kind="view")
            assert (first == 0).all()  # placeholders: nothing could land yet
            assert not first.flags.writeable
            firsts.append(first)
    finally:
        gate.set()
    for level, first in zip((labels[0], image[0]), firsts, strict=True):
        controller = level.loader.controller
        second = read_settled(controller, 0, level.array[...])
        if level is labels[0]:
            np.testing.assert_array_equal(second, expected)
        assert (first == 0).all()  # unchanged
        assert not np.shares_memory(first, second)
        controller.close()


@pytest.mark.parametrize(
    ("color", "name"),
    [("FF00FF", "magenta"), ("00FF00", "green"), ("FFFFFF", "gray"), ("0000FF", "blue")],
)
def test_ome_colours_take_napari_colormap_names(tmp_path: Path, color: str, name: str) -> None:
    path = tmp_path / "image.ome.zarr"
    _ome_zarr_py_store(path, "0.5", window=True, colors=(color, "123456"))
    first, second = (layer for layer in read_zarr(str(path)) if layer[2] == "image")
    assert first[1]["colormap"] == name
    from napari.utils.colormaps import AVAILABLE_COLORMAPS

    custom = AVAILABLE_COLORMAPS[second[1]["colormap"]]  # registered by napari, by colour
    np.testing.assert_allclose(custom.colors[-1], [0x12 / 255, 0x34 / 255, 0x56 / 255, 1])


def test_contrast_limits_sample_a_stack_throughout_within_a_budget(
    tmp_path: Path, recorded_reads: list[Any]
) -> None:
    from napari_lazy_zarr import _reader

    # 16 planes, each brighter than the one before: the middle plane alone would
    # saturate the last ones and leave the first ones dark.
    planes, side = 16, 1024
    base = (np.arange(side * side) % 997).astype(np.uint16).reshape(side, side)
    data = base[None] + (1000 * np.arange(planes, dtype=np.uint16))[:, None, None]
    array = zarr.create_array(
        str(tmp_path / "stack.zarr"), shape=data.shape, chunks=(1, 256, 256), dtype=data.dtype
    )
    array[...] = data
    chunk_bytes = 256 * 256 * 2
    stored_chunks = planes * (side // 256) ** 2
    assert stored_chunks > _reader._CONTRAST_CHUNKS  # the budget, not the level, bounds it
    ((levels, kwargs, _),) = read_zarr(str(tmp_path / "stack.zarr"))
    assert len(levels) > 1  # a virtual pyramid over the one stored level
    assert kwargs["contrast_limits"] == (0.0, 65535.0)  # provisional: the dtype's range
    sample = _reader.contrast_sample(levels[0].loader)
    assert sample is not None
    assert sample.future.result(timeout=30) == (float(data.min()), float(data.max()))
    assert 0 < len(recorded_reads) <= _reader._CONTRAST_CHUNKS
    assert len(recorded_reads) * chunk_bytes <= _reader._CONTRAST_BYTES
    assert len(set(recorded_reads)) == len(recorded_reads)  # each stored chunk read once
    planes_read = {coords[0] for _, coords in recorded_reads}
    assert {0, planes - 1} <= planes_read
    assert len(planes_read) > 2


def test_contrast_limits_of_a_small_top_level_are_napari_s(
    tmp_path: Path, recorded_reads: list[Any]
) -> None:
    """The whole coarsest stored level is read when it fits: the same limits as napari's."""
    from napari.layers.utils.layer_utils import calc_data_range

    path = tmp_path / "image.ome.zarr"
    data = _ome_zarr_py_store(path, "0.4", window=False)
    layers = [layer for layer in read_zarr(str(path)) if layer[2] == "image"]
    from napari_lazy_zarr._reader import contrast_sample

    for channel, (levels, _, _) in enumerate(layers):
        sample = contrast_sample(levels[0].loader)
        assert sample is not None
        limits = sample.future.result(timeout=30)
        top = levels[-1].array.result(timeout=30)
        assert top.shape == data[channel, ::4, ::4].shape
        assert limits == tuple(calc_data_range(top))
    read_levels = {str(identity).rsplit("/", 1)[-1] for identity, _ in recorded_reads}
    assert read_levels == {"s2"}  # only the coarsest level


def test_arithmetic_failures_in_metadata_name_the_store(tmp_path: Path) -> None:
    """Issue 50: a scale of 10**400 in an OME 0.5-dev ``sequence`` (SpatialData's draft)
    raised a raw ``OverflowError`` out of `read_zarr`; now a `MetadataError` naming it."""
    import warnings

    from napari_lazy_zarr.core.errors import MetadataWarning

    path = tmp_path / "dev.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("0", shape=(4, 4), dtype="u1")
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    sequence = {
        "type": "sequence",
        "output": {"name": "global"},
        "transformations": [{"type": "scale", "scale": [12345.0, 1.0]}],
    }
    dataset = {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0]}]}
    root.attrs["ome"] = {
        "version": "0.5-dev",
        "multiscales": [
            {"axes": axes, "datasets": [dataset], "coordinateTransformations": [sequence]}
        ],
    }
    text = (path / "zarr.json").read_text()
    (path / "zarr.json").write_text(text.replace("12345.0", "1" + "0" * 400))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetadataWarning)
        with pytest.raises(MetadataError, match=rf"{path.name}"):
            read_zarr(str(path))
