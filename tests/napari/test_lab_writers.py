"""A lab's stores in a real napari viewer (Xvfb): SpatialData roots, OME development versions
and invalid optional rendering metadata, and what the user is told about them (issue 23).

Stores are written at test time by spatialdata and ome-zarr-py; pixels are
compared with the writers' arrays. The notices are napari's notifications of
our `MetadataWarning`s, as the napari application shows them (its
notification manager's warning hook installed).
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr.core.errors import MetadataWarning

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from pytestqt.qtbot import QtBot


@pytest.fixture
def notices(notices: list[str]) -> Iterator[list[str]]:
    """napari's notifications (conftest), with the warnings raised meanwhile among them, as
    the application shows them."""
    from napari.utils.notifications import notification_manager

    with warnings.catch_warnings():
        warnings.simplefilter("always", MetadataWarning)
        notification_manager.install_hooks()
        try:
            yield notices
        finally:
            notification_manager.restore_hooks()


def _level0(layer: Any) -> np.ndarray[Any, Any]:
    loader = loader_of(layer)
    assert loader is not None
    return np.asarray(loader.levels[0].array)


def test_a_spatialdata_root_opens_as_its_elements(
    make_napari_viewer: Callable[..., Any], tmp_path: Path, notices: list[str]
) -> None:
    import spatialdata as sd
    from spatialdata.models import Image2DModel, Labels2DModel
    from spatialdata.transformations import Scale

    rng = np.random.default_rng(4)
    image = Image2DModel.parse(
        rng.integers(0, 999, (2, 50, 70), dtype=np.uint16),
        dims=("c", "y", "x"),
        c_coords=["DAPI", "GFP"],
        transformations={"global": Scale([0.5, 0.25], axes=("y", "x"))},
    )
    labels = Labels2DModel.parse(rng.integers(0, 4, (50, 70), dtype=np.uint8), dims=("y", "x"))
    written = sd.SpatialData(images={"raw": image}, labels={"cells": labels})
    path = tmp_path / "blobs.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # dask's, under spatialdata
        written.write(str(path))

    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(path), plugin="napari-lazy-zarr")
    assert [(layer.name, type(layer).__name__) for layer in layers] == [
        ("raw: DAPI", "Image"),
        ("raw: GFP", "Image"),
        ("cells", "Labels"),
    ]
    raw = np.asarray(written.images["raw"].values)
    for channel, layer in enumerate(layers[:2]):
        np.testing.assert_array_equal(_level0(layer), raw[channel])
        assert tuple(layer.scale) == (0.5, 0.25)  # the element's "global" transform
    np.testing.assert_array_equal(_level0(layers[2]), np.asarray(written.labels["cells"].values))
    development = [m for m in notices if "'0.5-dev-spatialdata' is a development version" in m]
    assert len(development) == 2, notices  # one per element, naming it
    assert any("blobs.zarr/images/raw" in m for m in development)


def _ome_zarr_py_image(path: Path) -> np.ndarray[Any, Any]:
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_image
    from ome_zarr_models.common.omero import Omero

    data = np.random.default_rng(6).integers(100, 2000, (2, 64, 64), dtype=np.uint16)
    window = {"min": 0, "max": 65535, "start": 0, "end": 60000}
    omero = {
        "channels": [
            {"label": "DAPI", "color": "0000FF", "window": window},
            {"label": "GFP", "color": "00FF00", "window": window},
        ]
    }
    write_image(
        data,
        zarr.open_group(str(path), mode="w", zarr_format=3),
        axes="cyx",
        fmt=FormatV05(),
        scale_factors=(2,),
        storage_options={"chunks": (1, 32, 32)},
        omero=Omero.model_validate(omero),
    )
    return data


def test_invalid_omero_opens_with_defaults_and_a_notice(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    path = tmp_path / "cells.ome.zarr"
    data = _ome_zarr_py_image(path)
    document = json.loads((path / "zarr.json").read_text())
    channels = document["attributes"]["ome"]["omero"]["channels"]
    channels[0]["color"] = "red"  # not RRGGBB
    del channels[1]["window"]["start"]  # a window without start
    (path / "zarr.json").write_text(json.dumps(document))

    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(path), plugin="napari-lazy-zarr")
    assert [layer.name for layer in layers] == ["image: DAPI", "image: GFP"]
    assert layers[0].colormap.name == "gray"  # the default for a colour it cannot read
    assert layers[1].colormap.name == "green"
    for channel, layer in enumerate(layers):
        np.testing.assert_array_equal(_level0(layer), data[channel])
        # No usable window: the limits come from the data, not from the other channel's window.
        low, high = layer.contrast_limits
        assert 100 <= low < high < 2000
    (notice,) = [m for m in notices if "invalid optional omero" in m]
    assert "omero.channels.0.color: must be RRGGBB" in notice
    assert "omero.channels.1.window.start: Field required" in notice
