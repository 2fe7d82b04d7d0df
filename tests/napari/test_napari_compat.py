"""Contract tests: the napari internals `_napari_compat` uses still exist and do what it needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr._napari_compat import (
    clear_thumbnail_copy,
    displayed_ndim,
    set_loading_indicator,
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
