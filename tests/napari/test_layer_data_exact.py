"""Two doors (issue 46): every reader of layer data but napari's display gets exact pixels.

napari's display reads a layer progressively (a frame at once, coarser levels or the
fill value standing in); a plugin, a script or napari's console doing
``np.asarray(layer.data[0][...])`` gets the stored pixels on the first call, blocking
as a dask array would, or the error: a failed chunk raises `ChunkReadError`, a read over
the plan bounds `PlanTooLargeError` — never partial pixels, never zeros for a failure.
Stores written at test time by zarr-python and ngff-zarr; NumPy is the oracle.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr.core.errors import ChunkReadError, PlanTooLargeError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _npe2_layers(path: Path) -> list[Any]:
    """The layer data tuples of the plugin's reader, as any script gets them (no viewer)."""
    import npe2

    return list(npe2.read([str(path)], plugin_name="napari-lazy-zarr", stack=False))


def _zarr_array(path: Path, data: np.ndarray[Any, Any], chunks: tuple[int, ...]) -> None:
    array = zarr.create_array(str(path), shape=data.shape, chunks=chunks, dtype=data.dtype)
    array[...] = data


def _levels(data: Any) -> list[Any]:
    return list(data) if isinstance(data, list) else [data]


def test_layer_data_is_exact_on_the_first_call_without_a_viewer(tmp_path: Path) -> None:
    """The calls of issue 46 on arrays written by zarr-python: a region of a 2000x3000
    array, a whole small array, a z-plane and an x-z cut of a 6x700x900 volume."""
    rng = np.random.default_rng(46)
    plane = rng.integers(0, 60_000, size=(2000, 3000), dtype=np.uint16)
    small = rng.integers(0, 60_000, size=(300, 400), dtype=np.uint16)
    volume = rng.integers(0, 255, size=(6, 700, 900), dtype=np.uint8)
    _zarr_array(tmp_path / "plane.zarr", plane, (256, 256))
    _zarr_array(tmp_path / "small.zarr", small, (64, 64))
    _zarr_array(tmp_path / "volume.zarr", volume, (2, 128, 128))
    ((data, _, _),) = _npe2_layers(tmp_path / "plane.zarr")
    region = np.asarray(_levels(data)[0][100:1900, 100:2900])
    np.testing.assert_array_equal(region, plane[100:1900, 100:2900])
    ((data, _, _),) = _npe2_layers(tmp_path / "small.zarr")
    np.testing.assert_array_equal(np.asarray(_levels(data)[0]), small)
    ((data, _, _),) = _npe2_layers(tmp_path / "volume.zarr")
    level = _levels(data)[0]
    np.testing.assert_array_equal(np.asarray(level[3]), volume[3])
    np.testing.assert_array_equal(np.asarray(level[:, 350, :]), volume[:, 350, :])


def test_layer_data_of_an_ngff_zarr_pyramid_is_exact_right_after_open(
    make_napari_viewer: Callable[..., Any], tmp_path: Path
) -> None:
    """In a real viewer, right after `viewer.open`, while napari's display is still filling
    in: what a plugin reads from `layer.data` is the stored pixels (67% were wrong before),
    and what the display shows is never written under it."""
    import ngff_zarr as nz

    rng = np.random.default_rng(7)
    data = rng.integers(0, 4000, size=(2048, 3072), dtype=np.uint16)
    path = tmp_path / "ngff.ome.zarr"
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", DeprecationWarning)  # the writer's own dependencies'
        warnings.simplefilter("ignore", FutureWarning)
        image = nz.to_ngff_image(data, dims=["y", "x"], name="img")
        multiscales = nz.to_multiscales(image, scale_factors=[2, 4], chunks=256)
        nz.to_ngff_zarr(str(path), multiscales, version="0.4")
    viewer = make_napari_viewer()
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    shown = layer._slice.image.raw  # what napari's display got: progressive, immutable
    before = np.array(shown, copy=True)
    got = np.asarray(layer.data[0][500:1500, 1000:2500])
    np.testing.assert_array_equal(got, data[500:1500, 1000:2500])
    np.testing.assert_array_equal(shown, before)  # the display's frame was not written
    assert not shown.flags.writeable


def test_a_failed_chunk_raises_and_never_reads_as_zeros(tmp_path: Path) -> None:
    data = np.arange(512 * 512, dtype=np.uint16).reshape(512, 512) + 1
    path = tmp_path / "broken.zarr"
    _zarr_array(path, data, (128, 128))
    (path / "c" / "1" / "2").write_bytes(b"not zstd at all")
    ((levels, _, _),) = _npe2_layers(path)
    level = _levels(levels)[0]
    np.testing.assert_array_equal(np.asarray(level[:128, :]), data[:128, :])  # no bad chunk
    with pytest.raises(ChunkReadError, match=r"c/1/2"):
        np.asarray(level[100:300, 200:400])


def test_a_read_over_the_plan_bounds_is_refused_by_name(tmp_path: Path) -> None:
    """A whole level of a huge sparse array (metadata only: nothing written) is refused,
    not read as fill values nor planned for minutes."""
    path = tmp_path / "huge.zarr"
    zarr.create_array(str(path), shape=(200_000, 200_000), chunks=(64, 64), dtype=np.uint8)
    ((levels, _, _),) = _npe2_layers(path)
    level = _levels(levels)[0]
    with pytest.raises(PlanTooLargeError):
        np.asarray(level)
    np.testing.assert_array_equal(np.asarray(level[:10, :10]), np.zeros((10, 10), np.uint8))
