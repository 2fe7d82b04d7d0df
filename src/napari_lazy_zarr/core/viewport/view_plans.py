"""The plans of the views a controller shows, and the view of a box as napari reads it.

`ViewPlans` plans the views a controller shows, served coarser when over their
bounds (`_coarser.view_plan`), keeping only those (a view's own plan is its
array's, kept once in that array's memo); `box_view` makes the view
napari would read for a box, for the frames a controller prepares ahead of
napari (`volumes`, `planes`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS
from napari_lazy_zarr.core.viewport._coarser import CoarserPlan, view_plan
from napari_lazy_zarr.core.viewport.axes import view_box
from napari_lazy_zarr.core.viewport.frames import ViewRequest

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from contextlib import AbstractContextManager

    from zarr_indexing import IndexTransform

    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.bounds import ViewBounds
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
    """The plans of the views a controller shows (thread-safe).

    A view within `bounds` is planned by its array (`ChunkedArray.plan`, whose
    memo the layer's arrays share, keyed by index transform): that plan is not
    kept twice. A view over them is served from a coarser level (`view_plan`),
    and those plans are kept here, the `kept` latest, by level and index
    transform, so views revisited while panning back are not planned again.
    """

    def __init__(
        self,
        sources: Sequence[ChunkSource],
        bounds: ViewBounds = DEFAULT_BOUNDS,
        kept: int = 8,
        *,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self._sources = list(sources)
        self.bounds = bounds
        self._kept = kept
        # The owner's lock when given (a controller's), held only around `_served`.
        self._lock = lock if lock is not None else threading.Lock()
        self._served: dict[tuple[int, IndexTransform], ReadPlan] = {}

    def plan(self, request: ViewRequest, view: ChunkedArray) -> ReadPlan:
        """The plan of `view`, which shows exactly `request`'s cells."""
        key = (request.level, view.transform)
        with self._lock:
            plan = self._served.get(key)
        if plan is not None:
            return plan
        plan = view_plan(request.level, request.box, view, self._sources, self.bounds)
        if isinstance(plan, CoarserPlan):
            with self._lock:
                self._served[key] = plan
                while len(self._served) > self._kept:
                    del self._served[next(iter(self._served))]
        return plan
