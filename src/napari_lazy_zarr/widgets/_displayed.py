"""What napari displays of a plugin layer: the level it shows, the axes it does not, their names.

Read on the main thread from napari's layer and dims and from the layer's
`AxisMap` (store axes vs the layer's axes: a fixed axis has no layer axis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from napari_lazy_zarr._layer_data import LayerLoader

__all__ = ["axis_name", "displayed_level", "undisplayed_axes"]


def displayed_level(viewer: Any, loader: LayerLoader) -> int:
    """The level napari displays for the loader's layer (main thread).

    A locked level if set; in 3D the coarsest (napari's rule for multiscale
    volumes); in 2D the level napari chose for the zoom (`data_level`).
    """
    layer, last = loader.layer, len(loader.levels) - 1
    if layer is None or not getattr(layer, "multiscale", False):
        return 0
    locked = getattr(layer, "locked_data_level", None)
    if locked is not None:
        return int(locked)
    if viewer.dims.ndisplay == 3:
        return last
    return min(int(layer.data_level), last)


def undisplayed_axes(viewer: Any, loader: LayerLoader | None) -> list[int]:
    """The store axes napari does not display for the loader's layer (z, t, channel).

    From napari's dims (a read of one plane may still slice the plane's axis).
    """
    layer = None if loader is None else loader.layer
    if loader is None or layer is None:
        return []
    axis_map = loader.controller.axis_map
    offset = viewer.dims.ndim - layer.ndim
    shown = {axis_map.store_axis(d - offset) for d in viewer.dims.displayed if d >= offset}
    return [axis for axis in range(axis_map.store_rank) if axis not in shown]


def axis_name(loader: LayerLoader | None, store_axis: int) -> str:
    """The layer's label of a store axis (``axis N`` without a label or a layer axis)."""
    if loader is None:
        return f"axis {store_axis}"
    layer_axis = loader.controller.axis_map.layer_axis(store_axis)
    layer = loader.layer
    if layer_axis is None:
        return f"axis {store_axis}"
    labels = getattr(layer, "axis_labels", None)
    if labels is not None and layer_axis < len(labels):
        return str(labels[layer_axis])
    return f"axis {store_axis}"
