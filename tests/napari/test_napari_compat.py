"""Contract tests: the napari internals `_napari_compat` uses still exist and do what it needs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr._napari_compat import (
    clear_thumbnail_copy,
    display_read,
    displayed_ndim,
    set_loading_indicator,
    shows_nothing,
)

if TYPE_CHECKING:
    from collections.abc import Callable


def test_slice_input_gives_the_displayed_ndim(make_napari_viewer: Callable[..., Any]) -> None:
    viewer = make_napari_viewer()
    layer = viewer.add_image(np.zeros((4, 8, 8), dtype=np.uint8))
    assert displayed_ndim(layer) == 2
    viewer.dims.ndisplay = 3
    assert layer._slice_input.ndisplay == 3
    assert displayed_ndim(layer) == 3


class _Level:
    """An array-like that records, at each read, which door `display_read` opens."""

    def __init__(self, data: np.ndarray[Any, Any], reads: list[str | None]) -> None:
        self.data, self.reads, self.layer = data, reads, None
        self.shape, self.dtype, self.ndim, self.size = data.shape, data.dtype, data.ndim, data.size

    def __getitem__(self, key: Any) -> _Level:
        level = _Level(self.data[key], self.reads)
        level.layer = self.layer
        return level

    def __len__(self) -> int:
        return len(self.data)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        self.reads.append(display_read(sys._getframe(1), self, self.layer))
        return self.data


def test_napari_slicing_is_told_from_every_other_reader(
    make_napari_viewer: Callable[..., Any],
) -> None:
    """`display_read`: napari's slices — at the layer's construction, on refresh, in 3D with
    a finer level locked — read the "view" and the "thumbnail"; a script's
    ``np.asarray(layer.data[0][...])`` is not napari's display (None)."""
    viewer = make_napari_viewer()
    reads: list[str | None] = []
    levels = [
        _Level(np.zeros((4, 64, 64), np.uint8), reads),
        _Level(np.ones((4, 32, 32), np.uint8), reads),
    ]
    layer = viewer.add_image(levels, multiscale=True)
    assert reads  # read at construction and when added
    assert None not in reads
    reads.clear()
    layer.refresh()
    # 3 axes, 2 displayed (no materializer): the thumbnail is read when napari shows level 0.
    assert set(reads) == ({"view", "thumbnail"} if layer.data_level == 0 else {"view"})
    viewer.dims.ndisplay = 3
    layer.locked_data_level = 0  # a finer level locked: the coarsest is the thumbnail
    reads.clear()
    layer.refresh()
    assert set(reads) == {"view", "thumbnail"}
    reads.clear()
    np.asarray(layer.data[0][0, :4, :4])  # a script's read
    assert reads == [None]


def test_a_2d_thumbnail_is_told_apart_through_the_materializer(
    make_napari_viewer: Callable[..., Any],
) -> None:
    """A 2D multiscale layer reads its thumbnail through napari's `_level_materializer`."""
    viewer = make_napari_viewer()
    reads: list[str | None] = []
    levels = [
        _Level(np.zeros((64, 64), np.uint8), reads),
        _Level(np.ones((32, 32), np.uint8), reads),
    ]
    layer = viewer.add_image(levels, multiscale=True)
    for level in levels:
        level.layer = layer
    assert layer._level_materializer is not None
    viewer.scene.camera.zoom = 8  # zoomed in: napari shows level 0, the coarsest is the thumbnail
    layer._level_materializer.cache_clear()
    reads.clear()
    layer.refresh()
    assert layer.data_level == 0
    assert set(reads) == {"view", "thumbnail"}
    reads.clear()
    np.asarray(layer.data[1])
    assert reads == [None]


def test_level_materializer_caches_the_coarsest_level_and_clears(
    make_napari_viewer: Callable[..., Any],
) -> None:
    viewer = make_napari_viewer()
    layer = viewer.add_image([np.zeros((8, 8)), np.zeros((4, 4))], multiscale=True)
    materializer = layer._level_materializer
    assert materializer is not None
    materializer(1)
    assert materializer.cache_info().currsize == 1
    clear_thumbnail_copy(layer)
    assert materializer.cache_info().currsize == 0


def test_slicing_state_sets_the_loading_indicator(make_napari_viewer: Callable[..., Any]) -> None:
    viewer = make_napari_viewer()
    layer = viewer.add_image(np.zeros((8, 8), dtype=np.uint8))
    set_loading_indicator(layer, False)
    assert layer.loaded is False
    set_loading_indicator(layer, True)
    assert layer.loaded is True


def test_a_slice_outside_the_layer_is_empty(make_napari_viewer: Callable[..., Any]) -> None:
    """`shows_nothing`: napari's slice of a 1-plane layer while the viewer sits at z=2 of a
    5-plane stack is its empty response (`layer._slice.empty`); back at z=0 it is not."""
    viewer = make_napari_viewer()
    viewer.add_image(np.zeros((5, 8, 8), dtype=np.uint8))
    plane = viewer.add_image(np.ones((1, 8, 8), dtype=np.uint8))
    viewer.dims.set_current_step(0, 2)
    assert shows_nothing(plane)
    viewer.dims.set_current_step(0, 0)
    assert not shows_nothing(plane)
