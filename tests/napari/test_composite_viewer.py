"""Composite sources in a real napari viewer: a stack file and kerchunk references open
through the plugin's reader, pan, and complete with exactly the data, like a plain store."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tifffile
import zarr

from napari_lazy_zarr._reader import napari_get_reader, read_zarr
from napari_lazy_zarr.core.sources.composite import StackSource
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from tests.conftest import smooth_data
from tests.napari.test_viewer import _open, _settle

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

SIZE = 1024


@pytest.fixture
def movie(tmp_path: Path) -> tuple[Path, np.ndarray[Any, Any]]:
    """A stack file of three 1024² zarr arrays, each chunked differently."""
    planes = []
    for t, chunks in enumerate([(128, 128), (96, 160), (256, 256)]):
        data = smooth_data((SIZE, SIZE)) + 7 * t
        array = zarr.create_array(
            str(tmp_path / f"t{t}.zarr"), shape=data.shape, chunks=chunks, dtype=data.dtype
        )
        array[...] = data
        planes.append(data)
    path = tmp_path / "movie.zstack.json"
    path.write_text(
        json.dumps(
            {
                "zstack": 1,
                "mode": "stack",
                "arrays": ["t0.zarr", "t1.zarr", "t2.zarr"],
                "axis_names": ["t", "y", "x"],
            }
        )
    )
    return path, np.stack(planes)


@pytest.fixture
def tiff_references(tmp_path: Path) -> tuple[Path, np.ndarray[Any, Any]]:
    """kerchunk references (written by tifffile) to the tiles of a zlib-compressed TIFF."""
    data = smooth_data((SIZE, 1200))
    tifffile.imwrite(tmp_path / "scan.tif", data, tile=(128, 128), compression="zlib")
    with tifffile.TiffFile(tmp_path / "scan.tif") as tif, tif.aszarr() as store:
        store.write_fsspec(str(tmp_path / "scan.json"), url=".", version=1)
    return tmp_path / "scan.json", data


def _shown(layer: Any) -> tuple[np.ndarray[Any, Any], tuple[slice, ...]]:
    """What the layer displays (level-0 pixels), and where that is in the data's last two axes."""
    corners = np.asarray(layer.corner_pixels)[:, -2:].astype(int)
    (y0, x0), (y1, x1) = corners
    return np.asarray(layer._slice.image.raw), (slice(y0, y1 + 1), slice(x0, x1 + 1))


def test_reader_opens_stack_files_and_references(
    movie: tuple[Path, Any], tiff_references: tuple[Path, Any], tmp_path: Path
) -> None:
    (tmp_path / "settings.json").write_text('{"theme": "dark"}')
    assert napari_get_reader(str(tmp_path / "settings.json")) is None
    for path, expected in (movie, tiff_references):
        assert napari_get_reader(str(path)) is read_zarr
        ((levels, kwargs, kind),) = read_zarr(str(path))
        assert kind == "image"
        assert kwargs["multiscale"]
        assert levels[0].shape == expected.shape
        np.testing.assert_array_equal(
            levels[0].array[..., 500:700, 900:].result(), expected[..., 500:700, 900:]
        )
    ((levels, kwargs, _),) = read_zarr(str(movie[0]))
    assert (kwargs["name"], kwargs["axis_labels"]) == ("movie", ("t", "y", "x"))
    assert isinstance(levels[0].array.source, StackSource)
    ((levels, kwargs, _),) = read_zarr(str(tiff_references[0]))
    assert kwargs["name"] == "scan"
    assert isinstance(levels[0].array.source, ManifestSource)


def test_a_stack_pans_and_completes_like_a_plain_store(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, movie: tuple[Path, Any]
) -> None:
    path, expected = movie
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer, loader = _open(viewer, path)
    assert layer.data[0].shape == (3, SIZE, SIZE)
    viewer.dims.set_point(0, 1)  # the plane whose chunks (96 x 160) differ from the others'
    viewer.scene.camera.zoom = 2.0
    viewer.scene.camera.center = (0, 300, 400)
    for center in ((0, 300, 400), (0, 300, 700), (0, 700, 700)):  # pan right, then down
        viewer.scene.camera.center = center
        _settle(qtbot, loader)
        assert layer.data_level == 0
        assert loader.complete
        shown, where = _shown(layer)
        np.testing.assert_array_equal(shown, expected[1][where])
    viewer.dims.set_point(0, 2)  # another plane: another member, read and shown as well
    _settle(qtbot, loader)
    shown, where = _shown(layer)
    np.testing.assert_array_equal(shown, expected[2][where])


def test_kerchunk_references_pan_and_complete(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tiff_references: tuple[Path, Any]
) -> None:
    path, expected = tiff_references
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer, loader = _open(viewer, path)
    viewer.scene.camera.zoom = 2.0
    for center in ((300, 400), (300, 900), (800, 900)):
        viewer.scene.camera.center = (0, *center)
        _settle(qtbot, loader)
        assert layer.data_level == 0
        shown, where = _shown(layer)
        np.testing.assert_array_equal(shown, expected[where])
