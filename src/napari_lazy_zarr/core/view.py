"""The view controller: one layer's whole request cycle, Qt-free.

A viewer asks a layer for a region of one pyramid level many times a second.
`ViewController` answers each ask at once and keeps the answer converging:

```
read(level, view)                     any thread (napari's main or slicing thread)
  -> ViewRequest(level, box over the STORE axes, displayed axes, generation)   immutable
  -> plan (cached per view) -> copy READY chunks into the view's buffer
  -> ViewResult(array in the layer's axes, missing, provisional)               immutable
  -> hand the request to the controller's dispatch thread, return the array
dispatch thread: cache.request(needed, prefetch=prefetch_chunks(...))  (cache events fire here)
compose thread:  coarser-level stand-ins (`coarser_fill`, pure) written into the same buffer
worker threads:  chunk events -> view_changed, at most once until the view is read again
```

The reading thread (napari's main thread) only copies resident chunks and
fills placeholders: stand-ins upsampled from coarser levels are composed on the
controller's compose thread, when the view is first read and again when a
coarser chunk lands, and written into the buffer the viewer already holds,
followed by `view_changed` (measured: composing them inside napari's slice call
took up to 174 ms of the main thread per playback step).

A repeated read of the same view copies only the chunks that landed since the
previous read into the same buffer: each chunk is copied once into what the
viewer displays, however many times the view is refreshed (a 512³ volume is
not copied again for every chunk that lands).

**One axis map.** A layer may show fewer axes than its store holds (an
OME-Zarr image with a channel axis becomes one layer per channel). `AxisMap`
is the one place that relates the layer's axes to the store's; requests,
fallbacks and prefetch sets are always boxes over the *store's* axes.

Thread contract: `read` may run on any thread and never waits on storage nor
emits cache events. Cache requests are issued from the dispatch executor
(one thread per controller by default; injectable so tests run it inline).
`view_changed` and `failures_found` are emitted from worker or dispatch
threads; connect them with `thread="main"` (psygnal) to touch a GUI.

Failures are followed for every chunk of the layer's levels, not only those
on screen (`core.failures.FailureLog`): the reports wait in `failures` until
taken, so those made before anything listened are not lost.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
from psygnal import Signal
from zarr_indexing import ConstantMap, DimensionMap

from napari_lazy_zarr.core.array import ChunkedArray, lazy_for
from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.failures import FailureLog
from napari_lazy_zarr.core.keys import ChunkRef, grid_shape
from napari_lazy_zarr.core.plans import ReadPlan, plan_read
from napari_lazy_zarr.core.source import is_derived
from napari_lazy_zarr.core.states import ChunkState

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Hashable, Sequence

    from napari_lazy_zarr.core.cache import ChunkCache, Request
    from napari_lazy_zarr.core.executors import Executor
    from napari_lazy_zarr.core.failures import ChunkFailure
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.source import ChunkSource
    from napari_lazy_zarr.core.states import ChunkEvent

__all__ = [
    "AxisMap",
    "MotionTracker",
    "PlaneMotion",
    "ViewController",
    "ViewKind",
    "ViewRequest",
    "ViewResult",
    "chunk_ranges",
    "coarser_fill",
    "level_box",
    "lookahead_planes",
    "playback_level",
    "prefetch_chunks",
    "prefetch_ring",
    "volume_level",
]

type ViewKind = Literal["view", "thumbnail"]
"""napari reads two views of a multiscale layer: the displayed region and, for its
thumbnail, the whole plane of the coarsest level. Neither supersedes the other."""

type Box = tuple[tuple[int, int], ...]
"""A `[lo, hi)` interval per store axis."""

_PLAN_CACHE: Final = 8  # plans kept per controller (views revisited while panning back)


@dataclass(frozen=True, slots=True)
class AxisMap:
    """How a layer's axes relate to its store's axes.

    Attributes
    ----------
    store_rank
        How many axes the store's arrays have.
    fixed
        ``(store axis, index)`` pairs the layer does not show: each is held at
        that index (an OME-Zarr channel axis split into one layer per channel).
        Every other store axis is a layer axis, in the store's order.

    Examples
    --------
    >>> channels = AxisMap(4, fixed=((1, 2),))  # (t, c, y, x) showing channel 2
    >>> channels.layer_axes
    (0, 2, 3)
    >>> channels.store_index()
    (slice(None, None, None), 2)
    >>> channels.layer_shape((5, 3, 64, 64))
    (5, 64, 64)
    >>> channels.layer_axis(1) is None, channels.layer_axis(3)
    (True, 2)
    """

    store_rank: int
    fixed: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        axes = [axis for axis, _ in self.fixed]
        if len(set(axes)) != len(axes) or not all(0 <= a < self.store_rank for a in axes):
            raise ValueError(f"fixed axes {self.fixed} do not fit a rank-{self.store_rank} store")

    @property
    def layer_axes(self) -> tuple[int, ...]:
        """The store axis behind each layer axis, in order."""
        held = {axis for axis, _ in self.fixed}
        return tuple(a for a in range(self.store_rank) if a not in held)

    @property
    def layer_rank(self) -> int:
        return self.store_rank - len(self.fixed)

    def store_index(self) -> tuple[int | slice, ...]:
        """The index that turns a store-shaped array into the layer's array."""
        held = dict(self.fixed)
        if not held:
            return ()
        last = max(held)
        return tuple(held.get(axis, slice(None)) for axis in range(last + 1))

    def layer_shape(self, store_shape: Sequence[int]) -> tuple[int, ...]:
        """The layer's shape for an array of `store_shape`."""
        return tuple(int(store_shape[a]) for a in self.layer_axes)

    def layer_axis(self, store_axis: int) -> int | None:
        """The layer axis showing `store_axis`, or None if the layer holds it fixed."""
        axes = self.layer_axes
        return axes.index(store_axis) if store_axis in axes else None

    def store_axis(self, layer_axis: int) -> int:
        """The store axis behind `layer_axis`."""
        return self.layer_axes[layer_axis]


@dataclass(frozen=True, slots=True)
class ViewRequest:
    """One read of one view: what the viewer asked for, over the store's axes.

    Attributes
    ----------
    level
        The pyramid level, 0 the finest.
    box
        ``[lo, hi)`` per store axis at that level.
    displayed
        The store axes the result keeps (sliced, not held at one index), in order.
    generation
        Increases with every read of the controller; a result of an older
        generation of the same view is stale.
    kind
        ``"view"`` (the displayed region) or ``"thumbnail"``.
    """

    level: int
    box: Box
    displayed: tuple[int, ...]
    generation: int
    kind: ViewKind = "view"

    @property
    def shape(self) -> tuple[int, ...]:
        """The result's shape (the box's extent on the displayed axes)."""
        return tuple(self.box[a][1] - self.box[a][0] for a in self.displayed)

    @property
    def planes(self) -> tuple[int, ...]:
        """The store axes the view shows one index of: held at an index, or sliced to one.

        napari slices the axes it does not display (z, t) to one cell rather than
        indexing them, so an axis of extent 1 counts as a plane.
        """
        return tuple(
            a for a, (lo, hi) in enumerate(self.box) if a not in self.displayed or hi - lo == 1
        )

    @property
    def spatial(self) -> tuple[int, ...]:
        """The displayed store axes that are not planes: the view's image or volume axes.

        Examples
        --------
        >>> request = ViewRequest(0, ((3, 4), (0, 64), (0, 64)), (0, 1, 2), 1)
        >>> request.planes, request.spatial
        ((0,), (1, 2))
        """
        planes = self.planes
        return tuple(a for a in self.displayed if a not in planes)

    def same_view(self, other: ViewRequest | None) -> bool:
        """Whether `other` asks for exactly the same cells (any generation)."""
        return (
            other is not None
            and other.level == self.level
            and other.box == self.box
            and other.displayed == self.displayed
        )


@dataclass(frozen=True, slots=True)
class ViewResult:
    """What a read returned, at once.

    Attributes
    ----------
    request
        The read it answers.
    data
        The view's values in the layer's axes: final where chunks were
        resident, a coarser level's values (upsampled) or the placeholder elsewhere.
    keys
        Every chunk the view touches.
    missing
        Chunks that were not resident (queued, loading, or FAILED).
    provisional
        Missing chunks whose cells show a coarser level's values.
    failed
        Missing chunks that FAILED (they show the placeholder until retried).
    held
        `data` is the last presentable frame of another plane, held while this
        plane lacks a complete backdrop (a z/t step during playback).
    """

    request: ViewRequest
    data: np.ndarray[Any, Any] = field(repr=False)
    keys: tuple[ChunkKey, ...]
    missing: frozenset[ChunkKey]
    provisional: frozenset[ChunkKey]
    failed: frozenset[ChunkKey]
    held: bool = False

    @property
    def complete(self) -> bool:
        """True when nothing was missing: `data` is exactly the stored values."""
        return not self.missing


def view_box(view: ChunkedArray) -> tuple[Box, tuple[int, ...]] | None:
    """The store box and displayed axes of a view made of slices (step 1) and integers.

    None for any other view (strided, gathered, empty): those are read without
    stand-ins or prefetch.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray
    >>> with ChunkCache(1 << 20) as cache:
    ...     array = ChunkedArray(ArraySource(np.zeros((3, 8, 8)), chunks=(1, 4, 4)), cache)
    ...     view_box(array[1, 2:6])
    (((1, 2), (2, 6), (0, 8)), (1, 2))
    """
    bounds = view.bounding_box()
    if bounds is None:
        return None
    displayed: list[int] = []
    for axis, output_map in enumerate(view.transform.output):
        if isinstance(output_map, ConstantMap):
            continue
        if not isinstance(output_map, DimensionMap) or output_map.stride != 1:
            return None
        displayed.append(axis)
    if len(displayed) != view.ndim:
        return None
    return tuple((int(lo), int(hi)) for lo, hi in bounds), tuple(displayed)


def level_index(
    fine: np.ndarray[Any, Any], fine_extent: int, coarse_extent: int
) -> np.ndarray[Any, Any]:
    """The coarse cells covering fine cells `fine` along one axis (nearest neighbour).

    Levels written by decimation (virtual levels, and most pyramid writers) have
    a power-of-two factor f with ``coarse_extent == ceil(fine_extent / f)``
    (striding) or ``floor`` (iterative halving): fine cell i lies in coarse cell
    i // f. The smallest such f is taken, ceil before floor; other shape ratios
    map cell centres.

    Examples
    --------
    >>> import numpy as np
    >>> level_index(np.arange(9), 9, 5).tolist()
    [0, 0, 1, 1, 2, 2, 3, 3, 4]
    >>> level_index(np.arange(9), 9, 3).tolist()  # 9 cells sampled every 4th
    [0, 0, 0, 0, 1, 1, 1, 1, 2]
    >>> level_index(np.arange(3), 3, 3).tolist()
    [0, 1, 2]
    >>> level_index(np.arange(4), 4, 3).tolist()
    [0, 1, 1, 2]
    """
    fine = np.asarray(fine, dtype=np.intp)
    if coarse_extent == fine_extent:
        return fine
    for ceil in (True, False):
        factor = 2
        while factor <= 2 * max(fine_extent, 1):
            if (-(-fine_extent // factor) if ceil else fine_extent // factor) == coarse_extent:
                index: np.ndarray[Any, Any] = np.minimum(fine // factor, coarse_extent - 1)
                return index
            factor *= 2
    centres = ((fine + 0.5) * coarse_extent / fine_extent).astype(np.intp)
    index = np.minimum(centres, coarse_extent - 1)
    return index


def coarser_fill(
    region: Box,
    fine_shape: Sequence[int],
    levels: Sequence[ChunkSource],
    lookup: Callable[[ChunkKey], np.ndarray[Any, Any] | None],
    dtype: np.dtype[Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """Stand-ins for `region` of a level from resident chunks of coarser `levels`.

    `region` is a box over the store's axes of a level of shape `fine_shape`;
    `levels` are the coarser levels to try, nearest first. Each fine cell takes
    the value of the coarse cell covering it (nearest neighbour); a cell takes
    the nearest level that has its chunk resident. Returns the values and the
    mask of cells found (both shaped like the box), or None when no coarser
    level had anything resident. Pure: reads only through `lookup`.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.source import ArraySource
    >>> coarse = ArraySource(np.arange(16).reshape(4, 4), chunks=(2, 2), name="c")
    >>> resident = {}
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> key = ChunkRef.of(coarse, (0, 0)).key
    >>> resident[key] = coarse.read_chunk((0, 0))
    >>> values, found = coarser_fill(((0, 4), (0, 4)), (8, 8), [coarse], resident.get,
    ...                              np.dtype(int))
    >>> values[:4, :4]
    array([[0, 0, 1, 1],
           [0, 0, 1, 1],
           [4, 4, 5, 5],
           [4, 4, 5, 5]])
    >>> bool(found.all())
    True
    """
    shape = tuple(hi - lo for lo, hi in region)
    values: np.ndarray[Any, Any] | None = None
    found: np.ndarray[Any, Any] | None = None
    for coarse in levels:
        selection: list[slice] = []
        takes: list[np.ndarray[Any, Any]] = []
        for axis, (lo, hi) in enumerate(region):
            fine_extent, coarse_extent = int(fine_shape[axis]), int(coarse.shape[axis])
            index = level_index(np.arange(lo, hi), fine_extent, coarse_extent)
            start = int(index[0])
            selection.append(slice(start, int(index[-1]) + 1))
            takes.append(index - start)
        plan = plan_read(lazy_for(coarse)[tuple(selection)], coarse)
        chunks = [(ref.key, lookup(ref.key)) for ref in plan.refs]
        if not any(data is not None for _, data in chunks):
            continue  # nothing resident at this level
        data = plan.new_buffer()
        here = np.zeros(data.shape, dtype=bool)
        for key, chunk in chunks:
            if chunk is not None:
                plan.copy_chunk(data, key, chunk)
                plan.fill_missing(here, key, True, None)
        up, up_here = plan.finish(data), here
        for axis, index in enumerate(takes):
            up = np.take(up, index, axis=axis)
            up_here = np.take(up_here, index, axis=axis)
        if values is None or found is None:
            values = np.empty(shape, dtype=dtype)
            found = np.zeros(shape, dtype=bool)
        use = up_here & ~found
        values[use] = up[use]
        found |= use
        if found.all():
            break
    if values is None or found is None:
        return None
    return values, found


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
    >>> from napari_lazy_zarr.core.source import ArraySource
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
    >>> from napari_lazy_zarr.core.source import ArraySource
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


def chunk_ranges(box: Box, source: ChunkSource) -> list[range]:
    """Per store axis, the chunk indices of `source`'s grid that `box` touches.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.source import ArraySource
    >>> chunk_ranges(((1, 2), (3, 9)), ArraySource(np.zeros((4, 16)), chunks=(1, 4), name="c"))
    [range(1, 2), range(0, 3)]
    """
    grid = source.grid
    return [
        range(
            int(grid[axis].index_to_chunk(lo)),
            int(grid[axis].index_to_chunk(max(lo, hi - 1))) + 1,
        )
        for axis, (lo, hi) in enumerate(box)
    ]


def level_box(box: Box, fine_shape: Sequence[int], coarse_shape: Sequence[int]) -> Box:
    """The box of a coarser level covering `box` of a finer one (`level_index` per axis).

    Examples
    --------
    >>> level_box(((3, 4), (0, 9), (5, 16)), (8, 16, 16), (8, 8, 8))
    ((3, 4), (0, 5), (2, 8))
    """
    out: list[tuple[int, int]] = []
    for (lo, hi), fine, coarse in zip(box, fine_shape, coarse_shape, strict=True):
        ends = level_index(np.array([lo, max(lo, hi - 1)]), int(fine), int(coarse))
        out.append((int(ends[0]), int(ends[1]) + 1))
    return tuple(out)


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

    def __init__(self, *, window: int = 6, idle: float = 1.0) -> None:
        self.window = window
        self.idle = idle
        self._lock = threading.Lock()
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


def volume_level(
    shapes: Sequence[Sequence[int]],
    displayed: Sequence[int],
    *,
    voxel_budget: int,
    itemsize: int = 1,
    byte_budget: int | None = None,
) -> int:
    """The finest level whose volume (its extent on the `displayed` axes) fits the budgets.

    `shapes` are the levels' shapes, finest first. A volume fits when it has at
    most `voxel_budget` voxels and, if given, at most `byte_budget` bytes. When
    none fits, the coarsest.

    Examples
    --------
    >>> shapes = [(2, 1024, 1024, 1024), (2, 512, 512, 512), (2, 256, 256, 256)]
    >>> volume_level(shapes, (1, 2, 3), voxel_budget=512**3)
    1
    >>> volume_level(shapes, (1, 2, 3), voxel_budget=512**3, byte_budget=64 << 20)
    2
    >>> volume_level(shapes, (1, 2, 3), voxel_budget=2**40)
    0
    """
    last = len(shapes) - 1
    for level, shape in enumerate(shapes):
        voxels = math.prod(int(shape[a]) for a in displayed)
        if voxels <= voxel_budget and (byte_budget is None or voxels * itemsize <= byte_budget):
            return level
    return last


def _plane_step(before: ViewRequest, after: ViewRequest) -> bool:
    """Whether `after` shows the same region as `before` on another z/t plane."""
    return (
        before.level == after.level
        and before.displayed == after.displayed
        and before.spatial == after.spatial
        and all(before.box[a] == after.box[a] for a in after.spatial)
        and before.box != after.box
    )


def _waiting_region(box: Box, waiting: Collection[ChunkKey]) -> Box | None:
    """The part of `box` under the `waiting` chunks' bounding box (None if empty)."""
    region = tuple(
        (
            max(lo, min(k.inclusive_min[axis] for k in waiting)),
            min(hi, max(k.exclusive_max[axis] for k in waiting)),
        )
        for axis, (lo, hi) in enumerate(box)
    )
    return region if all(lo < hi for lo, hi in region) else None


def _covered(key: ChunkKey, region: Box, found: np.ndarray[Any, Any]) -> bool:
    """Whether `found` (a mask over `region`) is true on all of chunk `key`'s cells in it."""
    where = tuple(
        slice(max(lo, start) - lo, max(min(hi, stop), max(lo, start)) - lo)
        for (lo, hi), start, stop in zip(region, key.inclusive_min, key.exclusive_max, strict=True)
    )
    return bool(found[where].all())


def _box_bytes(box: Box, source: ChunkSource) -> int:
    """Decoded bytes of the whole chunks of `source` that `box` touches."""
    grid = source.grid
    extents = [
        sum(int(grid[axis].chunk_size(c)) for c in chunks)
        for axis, chunks in enumerate(chunk_ranges(box, source))
    ]
    return math.prod(extents) * source.dtype.itemsize


class _Shown:
    """The latest read of one view kind: its buffer, and what it still lacks.

    `lock` guards every field and every write into `buffer`: chunks that land
    are copied in by worker threads, stand-ins by the compose thread, and a
    stand-in must never overwrite a chunk that landed.
    """

    __slots__ = (
        "backdrop",
        "buffer",
        "coarser",
        "composing",
        "failed",
        "lock",
        "missing",
        "plan",
        "provisional",
        "request",
        "unfilled",
    )

    def __init__(
        self,
        request: ViewRequest,
        plan: ReadPlan,
        buffer: np.ndarray[Any, Any],
        coarser: frozenset[Hashable],
    ) -> None:
        self.lock = threading.Lock()
        self.request = request
        self.plan = plan
        self.buffer = buffer
        self.coarser = coarser  # identities of the coarser levels' sources
        self.missing: set[ChunkKey] = {ref.key for ref in plan.refs}
        self.provisional: set[ChunkKey] = set()
        self.failed: set[ChunkKey] = set()
        self.unfilled = True  # missing cells not yet given placeholders
        self.composing = False  # stand-ins queued on the compose thread
        self.backdrop = False  # the composed stand-ins cover every cell still waiting

    @property
    def waiting(self) -> bool:
        """Whether chunks it lacks are still to land (FAILED ones are not waited for)."""
        return len(self.missing) > len(self.failed)


class ViewController:
    """One layer's request cycle: non-blocking reads, stand-ins, loading, change signals.

    Parameters
    ----------
    levels
        The layer's pyramid levels as chunk sources over the store's axes,
        finest first.
    cache
        The chunk cache the levels are read through.
    axis_map
        How the layer's axes relate to the store's (default: the same axes).
    name
        For messages.
    prefetch
        Load the ring around the view and the neighbouring planes at low
        priority, as far as the levels allow (`prefetch_ring`), and the planes
        ahead of a walk through z or t.
    blocking
        Make every read wait for its chunks (a debugging mode: it blocks the caller).
    dispatch
        Where cache requests are issued from and stand-ins composed (default:
        two threads of the controller's own, one for each). `InlineExecutor()`
        does both in the reading thread.
    hold
        On a z/t step, keep answering with the last presentable frame while the
        new plane lacks a complete backdrop (its own chunks or a coarser
        level's), so playback never shows placeholder cells.
    lookahead_share
        The share of the cache's capacity that loading ahead of a walk through
        z or t (playback) may take; the rest keeps the planes already seen.

    Signals
    -------
    view_changed()
        Something a shown view lacked has landed: read it again. Emitted at most
        once until the next read, from worker or dispatch threads.
    failures_found(tuple[ChunkFailure, ...])
        Chunks of the layer's levels failed — on screen, prefetched or read
        ahead; each failure once, and again after a retry that fails again.
        The same reports wait in `failures` until taken
        (`FailureLog.take`): a consumer that may connect late takes them
        instead of relying on the payload.
    view_read(ViewResult)
        A read was answered (emitted from the dispatch thread, after its request).
    volume_ready(int)
        A volume asked for by `prepare_volumes` is resident and assembled: a
        viewer may switch to that level now without waiting (worker thread).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, InlineExecutor
    >>> data = np.arange(64).reshape(8, 8)
    >>> cache = ChunkCache(1 << 20, executor=InlineExecutor())
    >>> controller = ViewController(
    ...     [ArraySource(data, chunks=(4, 4), name="d")], cache, dispatch=InlineExecutor()
    ... )
    >>> view = controller.arrays[0][2:6, 2:6]
    >>> first = controller.read(0, view)  # inline executors: loaded during the read
    >>> bool(controller.complete), np.array_equal(controller.read(0, view), data[2:6, 2:6])
    (True, True)
    >>> controller.close()
    """

    view_changed = Signal()
    failures_found = Signal(tuple)
    view_read = Signal(object)
    volume_ready = Signal(int)

    def __init__(
        self,
        levels: Sequence[ChunkSource],
        cache: ChunkCache,
        *,
        axis_map: AxisMap | None = None,
        name: str = "",
        prefetch: bool = True,
        blocking: bool = False,
        dispatch: Executor | None = None,
        hold: bool = True,
        lookahead_share: float = 0.5,
    ) -> None:
        if not levels:
            raise ValueError("a layer needs at least one level")
        rank = len(levels[0].shape)
        self.axis_map = axis_map if axis_map is not None else AxisMap(rank)
        if any(len(source.shape) != self.axis_map.store_rank for source in levels):
            raise ValueError("every level must have the axis map's store rank")
        self.sources = list(levels)
        # The smallest ring any level asks for: a virtual level over an expensive
        # source (dask blocks) is as expensive as the chunks under it.
        self._ring = min(prefetch_ring(source) for source in self.sources)
        self.cache = cache
        self.name = name
        self.prefetch = prefetch
        self.blocking = blocking
        self.hold = hold
        self.lookahead_share = lookahead_share
        self.motion: PlaneMotion | None = None
        """The walk through z or t the latest reads make (None when the view is still)."""
        self._tracker = MotionTracker()
        self._presentable: ViewResult | None = None
        # Volumes loading for `prepare_volumes`, by level: (assembled view, live request).
        self._staged: dict[int, tuple[_Shown, Request]] = {}
        index = self.axis_map.store_index()
        # The layer's levels: each store level seen through the axis map.
        self.arrays = [ChunkedArray(source, cache)[index] for source in self.sources]
        self._id = next(_controller_ids)
        self._owned_dispatch: SerialDispatch | None = None
        if dispatch is None:
            self._owned_dispatch = SerialDispatch(f"lazy-zarr-view-{name}")
            dispatch = self._owned_dispatch
        self._dispatch: Executor = dispatch
        # Stand-ins are composed on a thread of their own: a large one must not delay
        # the next view's requests. An injected `dispatch` runs both.
        self._owned_composer: SerialDispatch | None = None
        composer: Executor = dispatch
        if self._owned_dispatch is not None:
            self._owned_composer = SerialDispatch(f"lazy-zarr-compose-{name}")
            composer = self._owned_composer
        self._composer = composer
        self._lock = threading.Lock()
        self._generation = 0
        self._plans: dict[tuple[int, Box, tuple[int, ...]], ReadPlan] = {}
        self._shown: dict[ViewKind, _Shown] = {}
        self._signalled = False  # view_changed emitted, not yet followed by a read
        self._refresh_pending = False  # a landing not yet shown by an applied slice
        self._refresh_asked_at = 0
        self._closed = False
        self.reads = 0
        self.latest: ViewResult | None = None
        """The latest answered read of the displayed view (not the thumbnail)."""
        self.failures = FailureLog(self.sources, cache)
        """The layer's failed chunks, reported once each (see `failures_found`)."""
        cache.state_changed.connect(self._on_events)

    # -- what a layer shows ---------------------------------------------------

    @property
    def view_level(self) -> int:
        """The level of the latest displayed view (0 before any read)."""
        latest = self.latest
        return 0 if latest is None else latest.request.level

    @property
    def view_keys(self) -> frozenset[ChunkKey]:
        """The chunks the latest displayed view touches."""
        latest = self.latest
        return frozenset() if latest is None else frozenset(latest.keys)

    @property
    def complete(self) -> bool:
        """Whether the latest reads lacked nothing, or everything they lacked has landed."""
        with self._lock:
            shown_views = list(self._shown.values())
        return not any(shown.waiting for shown in shown_views)

    @property
    def settled(self) -> bool:
        """Complete, and a slice read after the last landing was applied: the screen is final."""
        with self._lock:
            pending = self._refresh_pending
        return self.complete and not pending

    # -- reading (any thread) -------------------------------------------------

    def read(
        self, level: int, view: ChunkedArray, *, kind: ViewKind | None = None
    ) -> np.ndarray[Any, Any]:
        """The values of `view` (a view of `arrays[level]`) now; never waits on storage.

        `kind` says which of napari's reads this is; by default a read of the
        coarsest level of a pyramid is the thumbnail, every other the view.
        """
        with self._lock:
            self.reads += 1
            self._signalled = False
            self._generation += 1
            generation = self._generation
        if self.blocking:
            return view.result()
        if kind is None:
            kind = (
                "thumbnail" if len(self.sources) > 1 and level == len(self.sources) - 1 else "view"
            )
        found = view_box(view)
        if found is None:  # not a viewport: no stand-ins, no prefetch
            partial = view.read_nonblocking(view=(self._id, kind), level=level)
            return partial.data
        box, displayed = found
        request = ViewRequest(level, box, displayed, generation, kind)
        if kind == "view":
            held = {axis for axis, _ in self.axis_map.fixed}
            planes = {a: box[a][0] for a in request.planes if a not in held}
            self.motion = self._tracker.observe(planes)
        result = self._answer(request, view)
        self._dispatch.submit(lambda: self._issue(result))
        return result.data

    def _plan(self, request: ViewRequest, view: ChunkedArray) -> ReadPlan:
        key = (request.level, request.box, request.displayed)
        with self._lock:
            plan = self._plans.get(key)
        if plan is None:
            plan = view.plan()
            with self._lock:
                self._plans[key] = plan
                while len(self._plans) > _PLAN_CACHE:
                    del self._plans[next(iter(self._plans))]
        return plan

    def _answer(self, request: ViewRequest, view: ChunkedArray) -> ViewResult:
        """Assemble the view from what is resident (reusing the last buffer of the same view).

        Only copies: the resident chunks not yet in the buffer, placeholders for
        the others. Stand-ins are composed later, off this thread (`_compose`).
        """
        kind = request.kind
        with self._lock:
            shown = self._shown.get(kind)
            presentable = self._presentable if kind == "view" and self.hold else None
            staged = [s for s, _ in self._staged.values()]
        if shown is None or not request.same_view(shown.request):
            # A volume `prepare_volumes` assembled off this thread, else a new buffer.
            shown = next((s for s in staged if request.same_view(s.request)), None)
            if shown is None:
                plan = self._plan(request, view)
                coarser = frozenset(s.identity for s in self.sources[request.level + 1 :])
                shown = _Shown(request, plan, plan.new_buffer(), coarser)
        with shown.lock:
            shown.request = request
            self._take_landed(shown)
            if shown.unfilled:
                shown.unfilled = False
                placeholder = self.sources[request.level].fill_value
                if len(shown.missing) == len(shown.plan.refs):
                    shown.buffer.fill(placeholder)  # a cold view: one contiguous fill
                else:
                    for key in shown.missing - shown.failed:
                        shown.plan.fill_missing(shown.buffer, key, placeholder, None)
                compose = self._composes(shown)
            else:
                compose = False
            # Presentable: nothing left to wait for, or a complete backdrop composed.
            ready = not shown.waiting or shown.backdrop
            held = (
                presentable.data
                if presentable is not None
                and not ready
                and _plane_step(presentable.request, request)
                else None
            )
            result = ViewResult(
                request,
                shown.plan.finish(shown.buffer) if held is None else held,
                tuple(ref.key for ref in shown.plan.refs),
                frozenset(shown.missing),
                frozenset(shown.provisional),
                frozenset(shown.failed),
                held=held is not None,
            )
        with self._lock:
            self._shown[kind] = shown
            if kind == "view" or len(self.sources) == 1:
                self.latest = result
            if kind == "view" and ready:
                self._presentable = result
        if compose:
            self._compose_later(shown)
        return result

    def _composes(self, shown: _Shown) -> bool:
        """Whether `shown` gets stand-ins: it waits for chunks and has coarser levels.

        Never a volume (three spatial axes): upsampling a 512³ volume costs
        seconds and gigabytes; in 3D the coarsest complete level is shown instead
        (`LayerLoader`), so a volume is presentable only when complete.
        """
        request = shown.request
        return shown.waiting and request.level < len(self.sources) - 1 and len(request.spatial) < 3

    def _take_landed(self, shown: _Shown, among: Collection[ChunkKey] | None = None) -> bool:
        """Copy chunks of `shown` that are now READY into its buffer (its lock held).

        FAILED ones get the explicit placeholder instead of a stand-in, so a
        failure is never disguised. Returns whether anything changed.
        """
        keys = shown.missing if among is None else shown.missing.intersection(among)
        if not keys:
            return False
        ready, failed = self.cache.lookup_many(keys)
        for key, data in ready.items():
            shown.plan.copy_chunk(shown.buffer, key, data)
        shown.missing.difference_update(ready)
        shown.provisional.difference_update(ready)
        retried = shown.failed.intersection(keys) - failed
        newly_failed = failed - shown.failed
        placeholder = self.sources[shown.request.level].fill_value
        for key in newly_failed:
            shown.plan.fill_missing(shown.buffer, key, placeholder, None)
        shown.provisional.difference_update(newly_failed)
        shown.failed = (shown.failed - retried) | failed
        return bool(ready or newly_failed or retried)

    # -- stand-ins (compose thread) -------------------------------------------

    def _compose_later(self, shown: _Shown) -> None:
        """Queue `shown`'s stand-ins on the compose thread (at most one queued per view)."""
        with shown.lock:
            if shown.composing:
                return
            shown.composing = True
        self._composer.submit(functools.partial(self._compose, shown))

    def _compose(self, shown: _Shown) -> None:
        """Give the cells of chunks still loading coarser levels' values, in place.

        The upsampling (`coarser_fill`) runs without any lock; only the copy
        into the buffer holds the view's lock, and skips chunks that landed
        meanwhile. Signals `view_changed` when anything was drawn.
        """
        with shown.lock:
            shown.composing = False
            request = shown.request
            waiting = shown.missing - shown.failed
        with self._lock:
            current = any(shown is other for other in self._shown.values())
        if self._closed or not current or not waiting:
            return  # the viewer has moved on, or everything landed
        region = _waiting_region(request.box, waiting)
        if region is None:
            return
        source = self.sources[request.level]
        filled = coarser_fill(
            region,
            source.shape,
            self.sources[request.level + 1 :],
            self.cache.lookup,
            source.dtype,
        )
        if filled is None:
            return
        values, found = filled
        values[~found] = source.fill_value
        stand_in = np.empty(request.shape, dtype=source.dtype)
        # The region's box, in the result's axes (held axes have extent 1).
        where = tuple(
            slice(region[a][0] - request.box[a][0], region[a][1] - request.box[a][0])
            for a in request.displayed
        )
        stand_in[where] = values.reshape(stand_in[where].shape)
        with shown.lock:
            still = (shown.missing - shown.failed) & waiting  # not landed meanwhile
            for key in still:
                shown.plan.fill_missing(shown.buffer, key, source.fill_value, stand_in)
            # Provisional: the chunks whose every cell shows a coarser level's value.
            shown.provisional = {key for key in still if _covered(key, region, found)}
            shown.backdrop = bool(found.all())
        if still:
            self._signal_change()

    # -- issuing (dispatch thread) --------------------------------------------

    def _issue(self, result: ViewResult) -> None:
        """Request the view's chunks (events fire here, not in the reader's thread)."""
        if self._closed:
            return
        request = result.request
        with self._lock:
            shown = self._shown.get(request.kind)
        if shown is None or shown.request.generation != request.generation:
            return  # a newer read of this view already answered (and will issue)
        source = self.sources[request.level]
        prefetch: list[ChunkRef] = []
        if self.prefetch and request.kind == "view":
            held = {axis for axis, _ in self.axis_map.fixed}
            planes = [a for a in request.planes if a not in held]
            prefetch = [
                ChunkRef.of(source, coords)
                for coords in prefetch_chunks(
                    request.box, request.spatial, planes, source, ring=self._ring
                )
            ]
            motion = self.motion
            if motion is not None and motion.axis in planes:
                prefetch.extend(self._lookahead(request, motion))
        load_class = LoadClass.NEEDED
        if request.kind == "thumbnail" and is_derived(source):
            # A virtual coarsest level costs every stored chunk under it: overview work
            # must never starve the chunks of the displayed view.
            load_class = LoadClass.OVERVIEW
        center = tuple((lo + hi) / 2 for lo, hi in request.box)
        try:
            self.cache.request(
                shown.plan.refs,
                view=(self._id, request.kind),
                level=request.level,
                center=center,
                prefetch=prefetch,
                load_class=load_class,
            )
        except RuntimeError:  # the cache was closed under us (viewer closing)
            return
        self.view_read.emit(result)
        # Chunks that landed between the read and the request had no shown view to
        # land in: look for them now.
        self._landed(result.missing)
        if result.failed:  # FAILED before this controller followed the cache (a shared one)
            self._report(self.failures.adopt(result.failed))

    def _lookahead(self, request: ViewRequest, motion: PlaneMotion) -> list[ChunkRef]:
        """The view's chunks on the planes ahead of a walk (`lookahead_planes`).

        The coarsest stored level (the cheapest complete backdrop), then the
        finest level that loads as fast as the walk shows frames
        (`playback_level`, from the measured load latency and the cache's
        workers), then the view's own level, all within `lookahead_share` of
        the cache, each taking what the previous left. The cache loads coarser
        levels first, and all of it after what the view displays.
        """
        fine = self.sources[request.level]
        boxes = [level_box(request.box, fine.shape, source.shape) for source in self.sources]
        frame_chunks: list[int] = []
        for box, source in zip(boxes, self.sources, strict=True):
            count = math.prod(len(r) for r in chunk_ranges(box, source))
            if is_derived(source) and frame_chunks:
                count = max(count, frame_chunks[-1])  # a virtual level reads what is under it
            frame_chunks.append(count)
        latency = self._load_latency()
        backdrop = playback_level(
            frame_chunks,
            finest=request.level,
            rate=motion.rate,
            latency=latency,
            concurrency=self.cache.concurrency,
        )
        budget = int(self.cache.total_bytes_limit * self.lookahead_share)
        refs: list[ChunkRef] = []
        seen: set[ChunkKey] = set()
        # The coarsest stored level first: the cheapest complete backdrop there is.
        stored = [i for i, source in enumerate(self.sources) if not is_derived(source)]
        coarsest = max(stored[-1], request.level)
        for level in dict.fromkeys((coarsest, backdrop, request.level)):
            source = self.sources[level]
            frame_bytes = _box_bytes(boxes[level], source)
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
                for coords in itertools.product(*chunk_ranges(box, source)):
                    ref = ChunkRef.of(source, coords)
                    if ref.key not in seen:
                        seen.add(ref.key)
                        refs.append(ref)
        return refs

    def _load_latency(self) -> float:
        """The cache's mean load time of a chunk, in seconds (0 before any load)."""
        latency = float(self.cache.statistics.load_latency_mean)
        return latency if math.isfinite(latency) else 0.0

    # -- volumes (3D at a finer level) ----------------------------------------

    def volume_box(self, level: int) -> Box | None:
        """The latest view's planes at `level`, whole on its displayed axes (None before reads)."""
        latest = self.latest
        if latest is None:
            return None
        request = latest.request
        shown_shape = self.sources[request.level].shape
        shape = self.sources[level].shape
        box: list[tuple[int, int]] = []
        for axis, (lo, _) in enumerate(request.box):
            if axis in request.spatial:
                box.append((0, int(shape[axis])))
            else:  # the same plane at that level (z/t are rarely decimated; if so, scaled)
                index = lo * int(shape[axis]) // max(1, int(shown_shape[axis]))
                index = min(index, int(shape[axis]) - 1)
                box.append((index, index + 1))
        return tuple(box)

    def volume_complete(self, level: int) -> bool:
        """Whether the volume of `level` at the latest view's planes is resident and assembled."""
        box = self.volume_box(level)
        with self._lock:
            candidates = [self._shown.get("view")] + [s for s, _ in self._staged.values()]
        for shown in candidates:
            if shown is None:
                continue
            with shown.lock:
                if shown.request.level == level and shown.request.box == box:
                    return not shown.missing
        return False

    def prepare_volumes(self, levels: Sequence[int]) -> None:
        """Load and assemble the volumes of `levels` in the background (any thread).

        Each is the latest view's planes at that level, whole on the displayed
        axes (`volume_box`): what napari reads for a level locked in 3D. Chunks
        land into the volume's buffer on worker threads; `volume_ready(level)`
        follows when it is complete, and a read of it then costs no copy.
        Replaces the previous call's volumes (their chunks are released);
        ``prepare_volumes(())`` stops preparing any.
        """
        wanted = tuple(levels)
        self._dispatch.submit(lambda: self._prepare(wanted))

    def _prepare(self, levels: tuple[int, ...]) -> None:
        if self._closed:
            return
        latest = self.latest
        if latest is None:
            return
        displayed = latest.request.displayed
        wanted = {level: box for level in levels if (box := self.volume_box(level)) is not None}
        with self._lock:
            kept = {
                level: staged
                for level, staged in self._staged.items()
                if wanted.get(level) == staged[0].request.box
            }
            dropped = [staged for level, staged in self._staged.items() if level not in kept]
            self._staged = dict(kept)
        for _, live in dropped:
            live.release()
        for level, box in wanted.items():
            if level in kept:
                continue  # already loading (or ready and announced)
            index = tuple(
                slice(*box[axis]) if axis in displayed else box[axis][0]
                for axis in self.axis_map.layer_axes
            )
            view = self.arrays[level][index]
            found = view_box(view)
            if found is None:
                continue
            volume = ViewRequest(level, found[0], found[1], 0, "view")
            plan = self._plan(volume, view)
            coarser = frozenset(s.identity for s in self.sources[level + 1 :])
            shown = _Shown(volume, plan, plan.new_buffer(), coarser)
            try:
                live = self.cache.request(plan.refs, view=(self._id, "volume", level), level=level)
            except RuntimeError:  # the cache was closed under us
                return
            with self._lock:
                self._staged[level] = (shown, live)
            live.done.add_done_callback(functools.partial(self._volume_done, level))

    def _volume_done(self, level: int, _: object) -> None:
        self._volume_landed(level)

    def _volume_landed(self, level: int) -> None:
        """Copy what landed into a prepared volume; say so when it is complete."""
        with self._lock:
            staged = self._staged.get(level)
        if staged is None:
            return
        shown = staged[0]
        with shown.lock:
            self._take_landed(shown)
            complete = not shown.missing
        if complete and not self._closed:
            self.volume_ready.emit(level)

    # -- landing chunks (worker threads) --------------------------------------

    def _on_events(self, events: tuple[ChunkEvent, ...]) -> None:
        # Failures first: a read meeting a derived chunk FAILED meanwhile (`_issue` adopts
        # it) would otherwise name it before the stored chunk whose failure failed it.
        failures = self.failures.observe(events)
        landed = {e.key for e in events if e.current in (ChunkState.READY, ChunkState.FAILED)}
        if landed:
            self._landed(landed)
        self._report(failures)

    def _report(self, failures: tuple[ChunkFailure, ...]) -> None:
        if failures and not self._closed:
            self.failures_found.emit(failures)

    def _landed(self, landed: Collection[ChunkKey]) -> None:
        """Copy landed chunks into the shown views; signal the change (any thread)."""
        with self._lock:
            shown_views = list(self._shown.items())
            staged = [s for s, _ in self._staged.values()]
        for volume in staged:  # assembled off napari's thread, before napari reads it
            if all(volume is not shown for _, shown in shown_views):
                with volume.lock:
                    self._take_landed(volume, landed)
        changed = False
        for _, shown in shown_views:
            with shown.lock:
                if self._take_landed(shown, landed):
                    changed = True
                # A coarser level's chunk improves the stand-ins of a view still loading.
                recompose = (
                    not shown.unfilled
                    and self._composes(shown)
                    and any(key.source in shown.coarser for key in landed)
                )
            if recompose:
                self._compose_later(shown)
        if changed:
            self._signal_change()

    def _signal_change(self) -> None:
        """Emit `view_changed`, unless it was emitted and the view not read since."""
        with self._lock:
            emit = not self._signalled and not self._closed
            if emit:
                self._signalled = True
                self._refresh_pending = True
                self._refresh_asked_at = self.reads
        if emit:
            self.view_changed.emit()

    # -- the viewer's side ----------------------------------------------------

    def slice_applied(self) -> None:
        """The viewer now shows a slice: if it was read after the last change, it is final."""
        with self._lock:
            if self.reads > self._refresh_asked_at:
                self._refresh_pending = False

    def refresh_skipped(self) -> None:
        """The viewer will not read again (layer hidden): stop waiting for it."""
        with self._lock:
            self._refresh_pending = False
            self._signalled = False

    def close(self) -> None:
        """Stop following the cache and release the views' pinned chunks (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.cache.state_changed.disconnect(self._on_events)
        for owned in (self._owned_dispatch, self._owned_composer):
            if owned is not None:
                owned.close()
        with self._lock:
            staged, self._staged = list(self._staged.values()), {}
        for _, request in staged:
            request.release()
        for kind in ("view", "thumbnail"):
            self.cache.release_view((self._id, kind))


_controller_ids = itertools.count()
_log = logging.getLogger(__name__)


class SerialDispatch:
    """Runs submitted callables in order on one thread that exists only while there is work.

    The thread starts on the first submission and ends after `idle` seconds
    without any, so a controller nobody closes leaves no thread behind, and a
    burst of reads (panning) reuses one thread instead of starting one per read.

    Examples
    --------
    >>> import threading
    >>> done = threading.Event()
    >>> dispatch = SerialDispatch("example")
    >>> dispatch.submit(done.set)
    >>> done.wait(timeout=10)
    True
    >>> dispatch.close()
    """

    def __init__(self, name: str, idle: float = 1.0) -> None:
        self._name = name
        self._idle = idle
        self._tasks: deque[Callable[[], Any]] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, fn: Callable[[], Any], /) -> None:
        with self._ready:
            if self._closed:
                return
            self._tasks.append(fn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._tasks and not self._closed:
                    self._ready.wait(self._idle)
                if not self._tasks or self._closed:
                    self._thread = None
                    self._tasks.clear()
                    return
                task = self._tasks.popleft()
            try:
                task()
            except Exception:  # a failed request must not stop later ones
                _log.exception("napari-lazy-zarr: issuing a view request failed")

    def close(self, timeout: float = 1.0) -> None:
        """Drop queued work and let the thread end (waits at most `timeout` seconds)."""
        with self._ready:
            self._closed = True
            thread = self._thread
            self._ready.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
