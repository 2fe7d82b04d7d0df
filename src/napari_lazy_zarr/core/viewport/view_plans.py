"""The plans of the views a controller shows, and the view of a box as napari reads it.

`ViewPlans` keeps the plans of the views a controller showed lately, served
coarser when over bounds (`_coarser.view_plan`); `box_view` makes the view
napari would read for a box, for the frames a controller prepares ahead of
napari (`volumes`, `planes`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from napari_lazy_zarr.core.viewport._coarser import view_plan
from napari_lazy_zarr.core.viewport.axes import view_box
from napari_lazy_zarr.core.viewport.frames import ViewRequest

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import AxisMap, Box
    from napari_lazy_zarr.core.viewport.frames import ViewKind

__all__ = ["ViewPlans", "box_view"]


def box_view(
    arrays: Sequence[ChunkedArray],
    axis_map: AxisMap,
    level: int,
    box: Box,
    displayed: Collection[int],
    kind: ViewKind = "view",
) -> tuple[ViewRequest, ChunkedArray] | None:
    """The view of `box` at `level` as napari reads it (the `displayed` axes sliced, the
    others indexed) over the layer's `arrays`, and its request (None: not a viewport)."""
    index = tuple(
        slice(*box[axis]) if axis in displayed else box[axis][0] for axis in axis_map.layer_axes
    )
    view = arrays[level][index]
    found = view_box(view)
    if found is None:
        return None
    return ViewRequest(level, found[0], found[1], 0, kind), view


class ViewPlans:
    """The read plans of the views a controller showed lately (thread-safe).

    Keyed by level, box and displayed axes, the `kept` latest: views revisited
    while panning back are not planned again.
    """

    def __init__(self, sources: Sequence[ChunkSource], kept: int = 8) -> None:
        self._sources = list(sources)
        self._kept = kept
        self._lock = threading.Lock()
        self._plans: dict[tuple[int, Box, tuple[int, ...]], ReadPlan] = {}

    def plan(self, request: ViewRequest, view: ChunkedArray) -> ReadPlan:
        """The plan of `view`, which shows exactly `request`'s cells."""
        key = (request.level, request.box, request.displayed)
        with self._lock:
            plan = self._plans.get(key)
        if plan is None:
            # A view over its bounds is served from a coarser level (`view_plan`).
            plan = view_plan(request.level, request.box, view, self._sources)
            with self._lock:
                self._plans[key] = plan
                while len(self._plans) > self._kept:
                    del self._plans[next(iter(self._plans))]
        return plan
