"""What to load before it is asked for: the ring, the planes ahead of a walk, levels (pure).

`prefetch_chunks` is the ring around a view and its neighbouring planes;
`MotionTracker` infers a walk through z or t (`PlaneMotion`) from successive
reads; `lookahead_planes` and `playback_level` say how far ahead to load and at
which level, and `lookahead_chunks` turns that into chunks. (The 3D level is
`volumes.volume_level`'s.)
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.keys import ChunkRef, grid_shape
from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.viewport.axes import box_bytes, chunk_ranges, level_box

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from contextlib import AbstractContextManager

    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import Box
    from napari_lazy_zarr.core.viewport.frames import ViewRequest

__all__ = [
    "MotionTracker",
    "PlaneMotion",
    "lookahead_chunks",
    "lookahead_planes",
    "overview_shown",
    "playback_level",
    "prefetch_chunks",
    "prefetch_ring",
    "view_prefetch",
]


def overview_shown(
    thumbnail: ViewRequest,
    refs: Sequence[ChunkRef],
    view: ViewRequest | None,
    sources: Sequence[ChunkSource],
) -> list[ChunkRef]:
    """The chunks of a virtual thumbnail (`refs`, read by `thumbnail`) worth loading now:
    those under the displayed `view`, and only while it shows a virtual level itself.

    A virtual coarsest level costs every stored chunk under it (1,024 for a 16384²
    array of 512² chunks, issue 24): a view zoomed in on a stored level does not pay
    for the overview at all, one on a virtual level pays for its own part of it, and
    the whole image shown fills the whole overview in.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.decimated import virtual_levels
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> from napari_lazy_zarr.core.viewport.frames import ViewRequest
    >>> levels = virtual_levels(ArraySource(np.zeros((64, 64)), chunks=(8, 8), name="o"),
    ...                         smallest=16, chunk_size=8)
    >>> thumbnail = ViewRequest(2, ((0, 16), (0, 16)), (0, 1), 1, "thumbnail")
    >>> refs = [ChunkRef.of(levels[2], (r, c)) for r in range(2) for c in range(2)]
    >>> zoomed_in = ViewRequest(0, ((0, 16), (0, 16)), (0, 1), 2)
    >>> overview_shown(thumbnail, refs, zoomed_in, levels)
    []
    >>> corner = ViewRequest(1, ((0, 16), (0, 16)), (0, 1), 3)
    >>> [ref.coords for ref in overview_shown(thumbnail, refs, corner, levels)]
    [(0, 0)]
    """
    if view is None or not is_derived(sources[view.level]):
        return []
    box = level_box(view.box, sources[view.level].shape, sources[thumbnail.level].shape)
    axes = thumbnail.spatial
    return [
        ref
        for ref in refs
        if all(
            ref.key.inclusive_min[a] < box[a][1] and box[a][0] < ref.key.exclusive_max[a]
            for a in axes
        )
    ]


def prefetch_ring(source: ChunkSource) -> int:
    """How many chunks beyond a view of `source` to load before they are asked for.

    A source says so with an integer attribute ``prefetch_ring`` (no attribute:
    1, the ring of neighbouring chunks and planes). A source whose chunks are
    expensive to make says 0: nothing beyond the view is loaded for it, except
    the planes ahead of a walk through z or t (playback asks for those). dask
    sources do (`DaskSource.prefetch_ring`): a neighbouring block is a whole
    computation, and on dask's local scheduler a running one cannot be
    cancelled when the view moves the other way.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> source = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="r")
    >>> prefetch_ring(source)
    1
    >>> source.prefetch_ring = 0
    >>> prefetch_ring(source)
    0
    """
    ring = getattr(source, "prefetch_ring", 1)
    return max(0, int(ring)) if isinstance(ring, int) else 1


def prefetch_chunks(
    box: Box,
    displayed: Sequence[int],
    planes: Sequence[int],
    source: ChunkSource,
    *,
    ring: int = 1,
) -> list[tuple[int, ...]]:
    """The chunks worth loading before they are asked for, nearest first.

    The `ring` chunks around the view on its `displayed` store axes, and the
    view's chunks moved one plane up and down each of the `planes` store axes
    (the axes a user steps through: z, t — never an axis the layer holds fixed).
    Nothing when `ring` is 0.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> source = ArraySource(np.zeros((4, 8, 8)), chunks=(1, 4, 4), name="v")
    >>> sorted(prefetch_chunks(((1, 2), (0, 4), (0, 4)), (1, 2), (0,), source))
    [(0, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1), (2, 0, 0)]
    >>> prefetch_chunks(((1, 2), (0, 4), (0, 4)), (1, 2), (0,), source, ring=0)
    []
    """
    if ring <= 0:
        return []
    grid = source.grid
    counts = grid_shape(source)
    needed_ranges = chunk_ranges(box, source)
    needed = set(itertools.product(*needed_ranges))
    ring_ranges = [
        range(max(r.start - ring, 0), min(r.stop + ring, counts[axis])) if axis in displayed else r
        for axis, r in enumerate(needed_ranges)
    ]
    found: list[tuple[int, ...]] = [c for c in itertools.product(*ring_ranges) if c not in needed]
    seen = set(found) | needed
    for axis in planes:
        lo, hi = box[axis]
        for cell in (lo - 1, hi):
            if not 0 <= cell < source.shape[axis]:
                continue
            chunk = int(grid[axis].index_to_chunk(cell))
            for coords in itertools.product(*needed_ranges):
                moved = (*coords[:axis], chunk, *coords[axis + 1 :])
                if moved not in seen:
                    seen.add(moved)
                    found.append(moved)
    return found


@dataclass(frozen=True, slots=True)
class PlaneMotion:
    """A steady walk through one plane axis: napari playing its dims, or a user stepping.

    Attributes
    ----------
    axis
        The store axis walked (z or t).
    direction
        +1 forwards, -1 backwards.
    rate
        Steps per second (measured between the latest steps).
    """

    axis: int
    direction: int
    rate: float


class MotionTracker:
    """Infers `PlaneMotion` from the plane indices of successive reads (thread-safe).

    Two steps of one plane in the same direction along one axis, each within
    `idle` seconds of the previous, make a motion; its rate is the mean over the
    last `window` steps. A pause longer than `idle`, a move along another axis, a
    jump of several planes or a change of direction starts over (a reversed step
    counts as the first of a new walk; a jump is not a step).

    Examples
    --------
    >>> tracker = MotionTracker()
    >>> tracker.observe({0: 4}, now=0.0) is None
    True
    >>> tracker.observe({0: 5}, now=0.1) is None  # one step: a direction, no rate yet
    True
    >>> tracker.observe({0: 6}, now=0.2)
    PlaneMotion(axis=0, direction=1, rate=10.0)
    >>> tracker.observe({0: 6}, now=0.25)  # the same plane read again (a refresh)
    PlaneMotion(axis=0, direction=1, rate=10.0)
    >>> tracker.observe({0: 5}, now=0.3) is None  # reversed: a new walk begins
    True
    >>> tracker.observe({0: 9}, now=0.4) is None  # a jump (a click on the slider): no walk
    True
    """

    def __init__(
        self,
        *,
        window: int = 6,
        idle: float = 1.0,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.window = window
        self.idle = idle
        # The owner's lock when given (a controller's: one lock for its whole state).
        self._lock = lock if lock is not None else threading.Lock()
        self._planes: dict[int, int] = {}
        self._steps: deque[tuple[float, int, int]] = deque(maxlen=window + 1)

    def observe(self, planes: dict[int, int], *, now: float | None = None) -> PlaneMotion | None:
        """Record a read at `planes` ({store axis: index}) and return the motion, if any."""
        now = time.perf_counter() if now is None else now
        with self._lock:
            moved = [a for a, i in planes.items() if self._planes.get(a, i) != i]
            steps = self._steps
            if steps and now - steps[-1][0] > self.idle:
                steps.clear()
            if len(moved) == 1 and abs(planes[moved[0]] - self._planes[moved[0]]) == 1:
                axis = moved[0]
                direction = 1 if planes[axis] > self._planes[axis] else -1
                if steps and (steps[-1][1], steps[-1][2]) != (axis, direction):
                    steps.clear()
                steps.append((now, axis, direction))
            elif moved:  # a jump (several planes, or along several axes): not a walk
                steps.clear()
            self._planes = dict(planes)
            if len(steps) < 2 or steps[-1][0] <= steps[0][0]:
                return None
            rate = (len(steps) - 1) / (steps[-1][0] - steps[0][0])
            return PlaneMotion(steps[-1][1], steps[-1][2], rate)

    def reset(self) -> None:
        with self._lock:
            self._planes.clear()
            self._steps.clear()


def lookahead_planes(
    position: int,
    direction: int,
    extent: int,
    *,
    rate: float,
    latency: float,
    frame_bytes: int,
    budget_bytes: int,
    lead: float = 1.0,
    wrap: bool = True,
) -> list[int]:
    """The planes to load ahead of `position` along a walk, nearest first.

    Deep enough to cover the time a load takes, twice over, plus `lead`
    seconds, at `rate` steps a second: ``ceil(rate * (2 * latency + lead))``
    planes, at least one; never more than `budget_bytes` // `frame_bytes`
    planes (look-ahead never takes more than its share of the cache), nor
    more than the axis holds. With `wrap` the walk continues from the other
    end (napari's default loop mode); without it, it stops at the end.

    Examples
    --------
    >>> lookahead_planes(3, 1, 50, rate=10, latency=0.1, frame_bytes=1, budget_bytes=100)
    [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    >>> lookahead_planes(1, -1, 50, rate=10, latency=0.0, frame_bytes=40, budget_bytes=100)
    [0, 49]
    >>> lookahead_planes(48, 1, 50, rate=5, latency=0.0, frame_bytes=1, budget_bytes=9,
    ...                  wrap=False)
    [49]
    """
    if extent <= 1 or rate <= 0 or direction not in (1, -1):
        return []
    latency = latency if math.isfinite(latency) and latency > 0 else 0.0
    depth = max(1, math.ceil(rate * (2 * latency + lead)))
    if frame_bytes > 0:
        depth = min(depth, budget_bytes // frame_bytes)
    depth = min(depth, extent - 1)
    planes: list[int] = []
    for step in range(1, depth + 1):
        plane = position + direction * step
        if not 0 <= plane < extent:
            if not wrap:
                break
            plane %= extent
        planes.append(plane)
    return planes


def playback_level(
    frame_chunks: Sequence[int],
    *,
    finest: int,
    rate: float,
    latency: float,
    concurrency: int,
) -> int:
    """The finest level, no finer than `finest`, whose frames load as fast as they are shown.

    A frame at level ``l`` needs ``frame_chunks[l]`` chunk loads; `concurrency`
    workers each taking `latency` seconds per load sustain
    ``concurrency / latency`` loads a second, so the level keeps up with `rate`
    frames a second when ``rate * frame_chunks[l] * latency <= concurrency``.
    When none does, the coarsest. Without a measured latency, `finest`.

    Examples
    --------
    >>> playback_level([64, 16, 4, 1], finest=0, rate=10, latency=0.1, concurrency=8)
    2
    >>> playback_level([64, 16, 4, 1], finest=0, rate=10, latency=0.0, concurrency=8)
    0
    >>> playback_level([64, 16, 4, 1], finest=1, rate=100, latency=1.0, concurrency=1)
    3
    """
    last = len(frame_chunks) - 1
    if not (math.isfinite(latency) and latency > 0 and rate > 0):
        return min(finest, last)
    for level in range(min(finest, last), last + 1):
        if rate * frame_chunks[level] * latency <= concurrency:
            return level
    return last


def _whole_on(box: Box, shape: Sequence[int], axes: Collection[int]) -> Box:
    """`box` widened to the whole of `shape` on `axes`."""
    return tuple((0, int(shape[a])) if a in axes else span for a, span in enumerate(box))


def lookahead_chunks(
    request: ViewRequest,
    motion: PlaneMotion,
    sources: Sequence[ChunkSource],
    *,
    latency: float,
    concurrency: int,
    budget_bytes: int,
) -> list[ChunkRef]:
    """The chunks of `request`'s view on the planes ahead of a walk (`lookahead_planes`).

    The coarsest stored level of `sources` (the cheapest complete backdrop),
    then the finest level that loads as fast as the walk shows frames
    (`playback_level`, from the measured load `latency` and the cache's
    `concurrency`), then the view's own level, all within `budget_bytes`,
    each taking what the previous left. The cache loads coarser levels first,
    and all of it after what the view displays.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> from napari_lazy_zarr.core.viewport.frames import ViewRequest
    >>> source = ArraySource(np.zeros((10, 8, 8)), chunks=(1, 8, 8), name="t")
    >>> request = ViewRequest(0, ((3, 4), (0, 8), (0, 8)), (0, 1, 2), 1)
    >>> refs = lookahead_chunks(request, PlaneMotion(0, 1, 2.0), [source], latency=0.0,
    ...                         concurrency=1, budget_bytes=1 << 20)
    >>> [ref.coords for ref in refs]
    [(4, 0, 0), (5, 0, 0)]
    """
    fine = sources[request.level]
    boxes = [level_box(request.box, fine.shape, source.shape) for source in sources]
    frame_chunks: list[int] = []
    for box, source in zip(boxes, sources, strict=True):
        count = math.prod(len(r) for r in chunk_ranges(box, source))
        if is_derived(source) and frame_chunks:
            count = max(count, frame_chunks[-1])  # a virtual level reads what is under it
        frame_chunks.append(count)
    backdrop = playback_level(
        frame_chunks,
        finest=request.level,
        rate=motion.rate,
        latency=latency,
        concurrency=concurrency,
    )
    budget = budget_bytes
    refs: list[ChunkRef] = []
    seen: set[ChunkKey] = set()
    # The coarsest stored level first: the cheapest complete backdrop there is. When it is
    # the pyramid's last, napari reads its whole plane as the thumbnail of every 2D frame:
    # ahead, the whole plane, so that frame's thumbnail is assembled ahead too (if it costs
    # no more than the view's own frame: never at the expense of the view's look-ahead).
    stored = [i for i, source in enumerate(sources) if not is_derived(source)]
    coarsest = max(stored[-1], request.level)
    thumbnail = coarsest == len(sources) - 1 > request.level and len(request.spatial) < 3
    if thumbnail:
        whole = _whole_on(boxes[coarsest], sources[coarsest].shape, request.spatial)
        thumbnail = box_bytes(whole, sources[coarsest]) <= box_bytes(request.box, fine)
        if thumbnail:
            boxes[coarsest] = whole
    for level in dict.fromkeys((coarsest, backdrop, request.level)):
        source = sources[level]
        frame_bytes = box_bytes(boxes[level], source)
        planes = lookahead_planes(
            request.box[motion.axis][0],
            motion.direction,
            fine.shape[motion.axis],
            rate=motion.rate,
            latency=latency,
            frame_bytes=frame_bytes,
            budget_bytes=budget,
        )
        budget -= frame_bytes * len(planes)
        for plane in planes:
            moved = tuple(
                (plane, plane + 1) if axis == motion.axis else span
                for axis, span in enumerate(request.box)
            )
            box = level_box(moved, fine.shape, source.shape)
            if thumbnail and level == coarsest:
                box = _whole_on(box, source.shape, request.spatial)
            for coords in itertools.product(*chunk_ranges(box, source)):
                ref = ChunkRef.of(source, coords)
                if ref.key not in seen:
                    seen.add(ref.key)
                    refs.append(ref)
    return refs


def view_prefetch(
    request: ViewRequest,
    sources: Sequence[ChunkSource],
    *,
    held: Collection[int],
    ring: int,
    motion: PlaneMotion | None,
    latency: Callable[[], float],
    concurrency: int,
    budget_bytes: int,
) -> tuple[list[ChunkRef], list[ChunkRef]]:
    """What to load before `request`'s view asks for it, nearest first: the ring, and
    what is ahead.

    The `ring` around the view and its neighbouring planes (`prefetch_chunks`)
    on the plane axes the layer does not hold fixed (`held`) are background work
    (`LoadClass.PREFETCH`). When `motion` walks one of those axes, the planes
    ahead of it (`lookahead_chunks`; `latency()` is asked for only then) are the
    frames about to be shown (`LoadClass.AHEAD`).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> from napari_lazy_zarr.core.viewport.frames import ViewRequest
    >>> source = ArraySource(np.zeros((4, 8, 8)), chunks=(1, 8, 8), name="p")
    >>> request = ViewRequest(0, ((1, 2), (0, 8), (0, 8)), (0, 1, 2), 1)
    >>> ring, ahead = view_prefetch(request, [source], held=(), ring=1, motion=None,
    ...                             latency=lambda: 0.0, concurrency=1, budget_bytes=0)
    >>> [ref.coords for ref in ring], ahead
    ([(0, 0, 0), (2, 0, 0)], [])
    """
    source = sources[request.level]
    planes = [a for a in request.planes if a not in held]
    refs = [
        ChunkRef.of(source, coords)
        for coords in prefetch_chunks(request.box, request.spatial, planes, source, ring=ring)
    ]
    if motion is None or motion.axis not in planes:
        return refs, []
    ahead = lookahead_chunks(
        request,
        motion,
        sources,
        latency=latency(),
        concurrency=concurrency,
        budget_bytes=budget_bytes,
    )
    return refs, ahead
