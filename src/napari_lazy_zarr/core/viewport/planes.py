"""The next frames of a walk through z or t, assembled off the viewer's thread.

While napari plays (or a user steps) through z or t, the controller loads the
planes ahead (`prefetch.lookahead_chunks`, `LoadClass.AHEAD`). For the nearest
of them, `PreparedPlanes` also plans the view napari will read there (the same
box, one plane on) and copies its chunks into that view's buffer as they land,
on worker threads. napari's read of the next frame then finds its buffer
assembled (`ViewController._answer`): no plan and no copy on napari's thread,
where each chunk copied cost a release and a re-acquisition of the GIL against
32 loaders.

Only 2D views are prepared (a volume is `PreparedVolumes`' work), and only
planes whose every chunk the look-ahead asks for: the memory it holds is at
most `PREPARED_PLANES` buffers of the view's own size.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.viewport._shown import Shown, box_view

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import AxisMap, Box
    from napari_lazy_zarr.core.viewport.frames import ViewRequest
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
    """The views one controller assembles on the planes ahead of a walk.

    Thread-safe: `prepare` runs on the controller's dispatch thread, `landed`
    on worker threads, `take` on the reading thread; `lock` guards `staged`
    and is never held while calling out (each view's own lock guards its
    buffer).
    """

    def __init__(
        self,
        cache: ChunkCache,
        sources: Sequence[ChunkSource],
        arrays: Sequence[ChunkedArray],
        axis_map: AxisMap,
        *,
        plan: Callable[[ViewRequest, ChunkedArray], ReadPlan],
        lock: threading.Lock | None = None,
    ) -> None:
        self._cache = cache
        self._sources = sources
        self._arrays = arrays
        self._axis_map = axis_map
        self._plan = plan
        self._lock = lock if lock is not None else threading.Lock()
        self.staged: list[Shown] = []
        """The views being assembled, nearest plane first (guarded by the lock)."""

    def follow(
        self,
        view: ViewRequest,
        thumbnail: Shown | None,
        motion: PlaneMotion | None,
        ahead: Sequence[ChunkRef],
    ) -> None:
        """`prepare` the frames ahead of the `view` napari was answered with, and of its
        `thumbnail` unless a virtual level's (what that reads follows the view)."""
        requests = [view]
        if thumbnail is not None and not is_derived(self._sources[thumbnail.request.level]):
            requests.append(thumbnail.request)
        self.prepare(requests, motion, {ref.key for ref in ahead})

    def prepare(
        self,
        requests: Sequence[ViewRequest],
        motion: PlaneMotion | None,
        ahead: Collection[ChunkKey],
    ) -> None:
        """Assemble each of `requests` (the view first, then its thumbnail) on the planes
        next along `motion` from the view's, and on the view's plane if it shows another;
        drop the others (dispatch thread).

        A plane is assembled only if the look-ahead asked for every chunk of it
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
            self.staged = [
                shown
                for shown in self.staged
                if (shown.request.level, shown.request.box, shown.request.displayed) in keys
            ]
            have = {(s.request.level, s.request.box, s.request.displayed) for s in self.staged}
        for request, box in wanted:
            if (request.level, box, request.displayed) not in have:
                self._assemble(request, box, ahead)

    def _assemble(self, request: ViewRequest, box: Box, ahead: Collection[ChunkKey]) -> None:
        made = box_view(
            self._arrays, self._axis_map, request.level, box, request.displayed, request.kind
        )
        if made is None or made[0].box != box:
            return
        frame, view = made
        plan = self._plan(frame, view)
        if not all(ref.key in ahead for ref in plan.refs):
            return  # not what the look-ahead loads: nothing would land in it
        shown = Shown.blank(frame, plan, self._sources)
        with shown.lock:
            # Staged before it looks for landed chunks: one landing from here on finds it in
            # `landed` (and waits for this lock), one landed before is READY now.
            with self._lock:
                self.staged.append(shown)
            shown.take_landed(self._cache)

    def take(self, request: ViewRequest) -> Shown | None:
        """The view assembled for exactly `request`'s cells, no longer staged (it is shown)."""
        with self._lock:
            for shown in self.staged:
                if request.same_view(shown.request):
                    self.staged.remove(shown)
                    return shown
        return None

    def landed(self, landed: Collection[ChunkKey]) -> None:
        """Copy landed chunks into the views being assembled (worker threads)."""
        with self._lock:
            staged = list(self.staged)
        for shown in staged:
            with shown.lock:
                shown.take_landed(self._cache, landed)

    def close(self) -> None:
        """Drop every view being assembled."""
        with self._lock:
            self.staged = []
