"""The napari internals the glue relies on, in one place (napari 0.9.2; contract-tested).

napari has no public API yet for these needs; each use is checked by
`tests/napari/test_napari_compat.py` against the installed napari, so an upgrade
that moves one fails there, by name, instead of silently in the viewer. Each
helper degrades to doing nothing when the attribute is absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

    from napari_lazy_zarr.core.viewport import ViewKind

__all__ = [
    "clear_thumbnail_copy",
    "display_read",
    "displayed_ndim",
    "set_loading_indicator",
    "shows_nothing",
]


def displayed_ndim(layer: Any) -> int:
    """How many axes napari displays for `layer` (2 or 3): `layer._slice_input.ndisplay`."""
    return int(getattr(getattr(layer, "_slice_input", None), "ndisplay", 2))


def clear_thumbnail_copy(layer: Any) -> None:
    """Drop napari's cached copy of a 2D multiscale layer's coarsest level.

    napari keeps `np.asarray(data[coarsest])` in `layer._level_materializer` (an
    `lru_cache`): without this, a refresh would show the thumbnail's first frame
    again instead of reading its newer one.
    """
    materialized = getattr(layer, "_level_materializer", None)
    if materialized is not None and hasattr(materialized, "cache_clear"):
        materialized.cache_clear()


def shows_nothing(layer: Any) -> bool:
    """Whether napari's latest slice of `layer` is empty: `layer._slice.empty`, set when
    the slice lies outside the layer (a 1-plane image while the viewer sits at z=2 of a
    stack), in which case napari read none of the layer's data for it."""
    return bool(getattr(getattr(layer, "_slice", None), "empty", False))


def set_loading_indicator(layer: Any, loaded: bool) -> None:
    """napari's layer-list loading indicator: `layer._slicing_state._set_loaded`."""
    state = getattr(layer, "_slicing_state", None)
    if state is not None and hasattr(state, "_set_loaded"):
        state._set_loaded(loaded)


_SLICE_REQUEST = "_ScalarFieldSliceRequest._project_thick_slice"
"""napari's slice request reading a level: ``np.asarray(data[slices])``, on napari's main
thread or its slicing thread (``napari/layers/_scalar_field/_slice.py``)."""

_MATERIALIZER = "_make_level_materializer.<locals>._materializer"
"""napari's read of a 2D multiscale layer's thumbnail level: ``np.asarray(data[level])``
(``napari/layers/_scalar_field/scalar_field.py``)."""


def display_read(caller: FrameType, array: object, layer: Any) -> ViewKind | None:
    """The view kind napari's display reads `array` for, if the function calling its
    ``__array__`` (`caller`'s frame) is napari slicing a layer; None for any other reader.

    `array` is what is read: a slice of the level napari's request holds.

    napari's display reads a layer's level in exactly two places, both through
    ``np.asarray`` (a C call: the frame calling ``__array__`` is napari's own): the
    slice request (`_ScalarFieldSliceRequest._project_thick_slice`, which every image
    and labels layer uses, at construction, on each refresh, and on napari's slicing
    thread under async slicing) and the thumbnail of a 2D multiscale layer
    (`_make_level_materializer`'s inner function). The kind: a slice of the request's
    ``data_at_thumbnail_level`` read while napari shows another level is the
    ``"thumbnail"``, everything else the ``"view"``; the materializer reads the
    ``"view"`` when `layer` (None while napari constructs it) shows that level.
    Recognised by the functions' qualified names in napari's modules.
    """
    code = caller.f_code
    if not caller.f_globals.get("__name__", "").startswith("napari.layers."):
        return None
    if code.co_qualname == _SLICE_REQUEST:
        request, data = caller.f_locals.get("self"), caller.f_locals.get("data")
        thumbnail = (
            data is getattr(request, "data_at_thumbnail_level", None)
            and getattr(request, "multiscale", False)
            and getattr(request, "data_level", None) != getattr(request, "thumbnail_level", None)
        )
        return "thumbnail" if thumbnail else "view"
    if code.co_qualname == _MATERIALIZER:
        level = caller.f_locals.get("level")
        if layer is None:
            return "thumbnail"
        locked = getattr(layer, "locked_data_level", None)
        shown = locked if locked is not None else getattr(layer, "data_level", None)
        return "view" if shown == level else "thumbnail"
    return None
