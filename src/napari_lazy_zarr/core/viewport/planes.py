"""The next frames of a walk through z or t, built off the viewer's thread.

While napari plays (or a user steps) through z or t, the controller loads the
planes ahead (`prefetch.lookahead_chunks`, `LoadClass.AHEAD`). For the nearest
of them, `PreparedPlanes` also plans the view napari will read there (the same
box, one plane on) and, once every chunk of it is resident, builds its frame
on the controller's dispatch thread (`assembly.first_frame`). napari's read of
the next frame then finds it built: no plan and no copy on napari's thread.

Only 2D views are prepared (a volume is `PreparedVolumes`' work), and only
planes whose every chunk the look-ahead asks for: the memory it holds is at
most `PREPARED_PLANES` frames of the view's own size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.viewport.assembly import first_frame
from napari_lazy_zarr.core.viewport.view_plans import box_view

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from contextlib import AbstractContextManager

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import AxisMap, Box
    from napari_lazy_zarr.core.viewport.frames import ViewFrame, ViewRequest
    from napari_lazy_zarr.core.viewport.prefetch import PlaneMotion

__all__ = ["PREPARED_PLANES", "PreparedPlanes", "planes_ahead"]

PREPARED_PLANES: Final = 2
"""Frames assembled ahead of a walk: the next, and the one after it (napari skips a
step while the previous one has not drawn)."""


def planes_ahead(position: int, direction: int, extent: int, count: int) -> list[int]:
    """The `count` planes after `position` along a walk, wrapping at the ends as napari loops.

    Examples
    --------
    >>> planes_ahead(3, 1, 10, 2)
    [4, 5]
    >>> planes_ahead(0, -1, 10, 2)
    [9, 8]
    >>> planes_ahead(0, 1, 2, 2)  # never the plane shown
    [1]
    """
    planes: list[int] = []
    for step in range(1, count + 1):
        plane = (position + direction * step) % extent
        if plane != position and plane not in planes:
            planes.append(plane)
    return planes


class PreparedPlanes:
    """The frames one controller prepares on the planes ahead of a walk.

    Thread-safe: `follow`/`prepare` and `build` run on the controller's dispatch
    thread, `take` on the reading thread, `wants` on worker threads; `lock`
    (the controller's) guards `staged` and is never held while calling out. A staged frame, once
    built, is never written: it is complete when built.
    """

    def __init__(
        self,
        cache: ChunkCache,
        sources: Sequence[ChunkSource],
        arrays: Sequence[ChunkedArray],
        axis_map: AxisMap,
        *,
        plan: Callable[[ViewRequest, ChunkedArray], ReadPlan],
        lock: AbstractContextManager[Any],
    ) -> None:
        self._cache = cache
        self._sources = sources
        self._arrays = arrays
        self._axis_map = axis_map
        self._plan = plan
        self._lock = lock  # the controller's: held only around `staged`
        self.staged: list[tuple[ViewRequest, ReadPlan, ViewFrame | None]] = []
        """The planes prepared, nearest first: request, plan, and its frame once built."""

    def follow(
        self,
        view: ViewRequest,
        thumbnail: ViewRequest | None,
        motion: PlaneMotion | None,
        ahead: Sequence[ChunkRef],
    ) -> None:
        """`prepare` the frames ahead of the `view` napari was answered with, and of its
        `thumbnail` unless a virtual level's (what that reads follows the view)."""
        requests = [view]
        if thumbnail is not None and not is_derived(self._sources[thumbnail.level]):
            requests.append(thumbnail)
        self.prepare(requests, motion, {ref.key for ref in ahead})

    def prepare(
        self,
        requests: Sequence[ViewRequest],
        motion: PlaneMotion | None,
        ahead: Collection[ChunkKey],
    ) -> None:
        """Stage each of `requests` (the view first, then its thumbnail) on the planes
        next along `motion` from the view's, and on the view's plane if it shows another;
        drop the others (dispatch thread). Their frames are built by `build`.

        A plane is staged only if the look-ahead asked for every chunk of it
        (`ahead`); a request at a level that decimates the walked axis is left out
        (which of its planes napari reads next is napari's rounding). Without
        `motion`, nothing is.
        """
        wanted: list[tuple[ViewRequest, Box]] = []
        if motion is not None and requests:
            axis = motion.axis
            extent = int(self._sources[requests[0].level].shape[axis])
            position = requests[0].box[axis][0]
            # The plane shown too: a thumbnail is read after its view, at the view's plane.
            planes = [position, *planes_ahead(position, motion.direction, extent, PREPARED_PLANES)]
            for request in requests:
                if len(request.spatial) >= 3 or self._sources[request.level].shape[axis] != extent:
                    continue
                for plane in planes:
                    moved = tuple(
                        (plane, plane + 1) if a == axis else span
                        for a, span in enumerate(request.box)
                    )
                    if moved != request.box:  # not what it shows already
                        wanted.append((request, moved))
        keys = {(request.level, box, request.displayed) for request, box in wanted}
        with self._lock:
            self.staged = [entry for entry in self.staged if _identity(entry[0]) in keys]
            have = {_identity(request) for request, _, _ in self.staged}
        for request, box in wanted:
            if (request.level, box, request.displayed) not in have:
                self._stage(request, box, ahead)

    def _stage(self, request: ViewRequest, box: Box, ahead: Collection[ChunkKey]) -> None:
        made = box_view(
            self._arrays, self._axis_map, request.level, box, request.displayed, request.kind
        )
        if made is None or made[0].box != box:
            return
        frame, view = made
        plan = self._plan(frame, view)
        if not all(ref.key in ahead for ref in plan.refs):
            return  # not what the look-ahead loads: it would never be built
        with self._lock:
            self.staged.append((frame, plan, None))

    def wants(self, landed: Collection[ChunkKey]) -> bool:
        """Whether a staged frame still to be built touches one of the `landed` chunks."""
        with self._lock:
            staged = [plan for _, plan, frame in self.staged if frame is None]
        return any(ref.key in landed for plan in staged for ref in plan.refs)

    def build(self) -> None:
        """Build the frames of the staged planes whose every chunk is resident now
        (dispatch thread); the others wait for their chunks."""
        with self._lock:
            pending = [(request, plan) for request, plan, frame in self.staged if frame is None]
        for request, plan in pending:
            keys = [ref.key for ref in plan.refs]
            ready, _ = self._cache.lookup_many(keys, partial=True)
            if len(ready) < len(keys):
                continue
            frame = first_frame(request, plan, self._cache, self._sources)
            if frame.missing:  # evicted meanwhile: built again when it lands
                continue
            with self._lock:
                self.staged = [(r, p, frame if r is request else f) for r, p, f in self.staged]

    def take(self, request: ViewRequest) -> tuple[ReadPlan, ViewFrame] | None:
        """The plan and frame built for exactly `request`'s cells, no longer staged (it is
        shown): napari's read of the next plane of a walk neither plans nor copies."""
        with self._lock:
            for entry in self.staged:
                staged, plan, frame = entry
                if frame is not None and request.same_view(staged):
                    self.staged.remove(entry)
                    return plan, frame
        return None

    def close(self) -> None:
        """Drop every staged frame."""
        with self._lock:
            self.staged = []


def _identity(request: ViewRequest) -> tuple[object, ...]:
    return (request.level, request.box, request.displayed)
