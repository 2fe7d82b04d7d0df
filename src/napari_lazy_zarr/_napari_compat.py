"""The napari internals the glue relies on, in one place (napari 0.9.2; contract-tested).

napari has no public API yet for these three needs; each use is checked by
`tests/napari/test_napari_compat.py` against the installed napari, so an upgrade
that moves one fails there, by name, instead of silently in the viewer. Each
helper degrades to doing nothing when the attribute is absent.
"""

from __future__ import annotations

from typing import Any

__all__ = ["clear_thumbnail_copy", "displayed_ndim", "set_loading_indicator"]


def displayed_ndim(layer: Any) -> int:
    """How many axes napari displays for `layer` (2 or 3): `layer._slice_input.ndisplay`."""
    return int(getattr(getattr(layer, "_slice_input", None), "ndisplay", 2))


def clear_thumbnail_copy(layer: Any) -> None:
    """Drop napari's cached copy of a 2D multiscale layer's coarsest level.

    napari keeps `np.asarray(data[coarsest])` in `layer._level_materializer` (an
    `lru_cache`); while it holds placeholders, re-slicing would show them again.
    """
    materialized = getattr(layer, "_level_materializer", None)
    if materialized is not None and hasattr(materialized, "cache_clear"):
        materialized.cache_clear()


def set_loading_indicator(layer: Any, loaded: bool) -> None:
    """napari's layer-list loading indicator: `layer._slicing_state._set_loaded`."""
    state = getattr(layer, "_slicing_state", None)
    if state is not None and hasattr(state, "_set_loaded"):
        state._set_loaded(loaded)
