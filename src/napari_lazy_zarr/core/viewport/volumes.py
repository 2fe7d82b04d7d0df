"""Volumes assembled off the viewer's thread, so that a switch to a finer 3D level is instant.

Which level a 3D view shows is chosen by what its volume costs on every axis
(`volume_cost`: whole chunks on the displayed axes, one chunk's depth on the
others), not by voxel count alone: `volume_level` is the finest that fits the
budgets, and `volume_steps` the levels loaded on the way there, coarse to fine,
each markedly cheaper than the next (a level that costs almost as much as the
finer one would only delay it).

`PreparedVolumes` holds, per pyramid level, a volume being loaded (the latest
view's planes at that level, whole on its displayed axes: `volume_box`) and its
live cache request; once every chunk has landed its frame is built, once, on
the controller's dispatch thread (`assembly.first_frame`).
`ViewController.prepare_volumes` is its public face, and a read of a built
volume costs no copy.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.viewport.assembly import first_frame
from napari_lazy_zarr.core.viewport.view_plans import box_view

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Hashable, Sequence
    from contextlib import AbstractContextManager

    from napari_lazy_zarr.core.cache import ChunkCache, Request
    from napari_lazy_zarr.core.executors import Executor
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import AxisMap, Box
    from napari_lazy_zarr.core.viewport.frames import ViewFrame, ViewRequest

__all__ = [
    "PreparedVolumes",
    "level_chunks",
    "volume_box",
    "volume_cost",
    "volume_level",
    "volume_steps",
]

_STEP_RATIO = 4
"""A level is loaded on the way to a finer one only if it costs at most a quarter of it."""


def volume_cost(
    shape: Sequence[int],
    displayed: Sequence[int],
    chunks: Sequence[int] | None = None,
    itemsize: int = 1,
) -> int:
    """Decoded bytes a volume of a level of `shape` costs to load, axis by axis.

    On a `displayed` axis the whole extent, rounded up to whole `chunks`; on
    any other axis (a plane: t, c) one chunk's depth, since a plane is read
    in whole chunks too. Without `chunks`, the volume's own cells.

    Examples
    --------
    >>> volume_cost((1024, 256, 256), (0, 1, 2))  # voxels alone
    67108864
    >>> volume_cost((100, 100, 100), (0, 1, 2), (64, 64, 64))  # 128³: whole chunks
    2097152
    >>> volume_cost((10, 64, 64, 64), (1, 2, 3), (5, 64, 64, 64), itemsize=2)  # t chunk of 5
    2621440
    """
    extents = []
    for axis, extent in enumerate(shape):
        extent = int(extent)
        chunk = extent if chunks is None else max(1, min(int(chunks[axis]), extent))
        if axis in displayed:
            extents.append(math.ceil(extent / chunk) * chunk if chunks is not None else extent)
        else:
            extents.append(chunk if chunks is not None else min(1, extent))
    return math.prod(extents) * itemsize


def level_chunks(sources: Sequence[ChunkSource]) -> list[tuple[int, ...]]:
    """Each level's chunk shape (its grid's first chunk on every axis), for `volume_level`.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> level_chunks([ArraySource(np.zeros((8, 20)), chunks=(4, 16), name="c")])
    [(4, 16)]
    """
    return [
        tuple(int(source.grid[axis].chunk_size(0)) for axis in range(len(source.shape)))
        for source in sources
    ]


def volume_level(
    shapes: Sequence[Sequence[int]],
    displayed: Sequence[int],
    *,
    voxel_budget: int,
    itemsize: int = 1,
    byte_budget: int | None = None,
    chunks: Sequence[Sequence[int]] | None = None,
) -> int:
    """The finest level whose volume fits the budgets (the coarsest when none does).

    `shapes` are the levels' shapes, finest first, and `chunks` their chunk
    shapes. A volume fits when its extent on the `displayed` axes has at most
    `voxel_budget` voxels (what napari holds and uploads) and, if given, what
    it costs to load (`volume_cost`, whole chunks on every axis) is at most
    `byte_budget` bytes (what the cache must hold at once).

    Examples
    --------
    >>> shapes = [(2, 1024, 1024, 1024), (2, 512, 512, 512), (2, 256, 256, 256)]
    >>> volume_level(shapes, (1, 2, 3), voxel_budget=512**3)
    1
    >>> volume_level(shapes, (1, 2, 3), voxel_budget=512**3, byte_budget=64 << 20)
    2
    >>> volume_level(shapes, (1, 2, 3), voxel_budget=2**40)
    0

    A pyramid decimated in y and x only keeps z's extent at every level:

    >>> yx = [(1024, 1024 >> k, 1024 >> k) for k in range(4)]
    >>> volume_level(yx, (0, 1, 2), voxel_budget=512**3)
    2

    Chunks deeper than a plane make each plane cost their depth:

    >>> t = [(64, 256, 256, 256), (64, 128, 128, 128)]
    >>> volume_level(t, (1, 2, 3), voxel_budget=2**30, byte_budget=256 << 20,
    ...              chunks=[(32, 64, 64, 64)] * 2)
    1
    """
    last = len(shapes) - 1
    for level, shape in enumerate(shapes):
        voxels = math.prod(int(shape[a]) for a in displayed)
        if voxels > voxel_budget:
            continue
        chunk = None if chunks is None else chunks[level]
        if byte_budget is None or volume_cost(shape, displayed, chunk, itemsize) <= byte_budget:
            return level
    return last


def volume_steps(
    shapes: Sequence[Sequence[int]],
    displayed: Sequence[int],
    target: int,
    *,
    chunks: Sequence[Sequence[int]] | None = None,
) -> tuple[int, ...]:
    """The levels a 3D view loads on its way to `target`, coarse to fine.

    The coarsest level is napari's own in 3D and not among them. From
    `target` up, a coarser level is a step only when it costs at most a
    quarter of the next finer step (`volume_cost`): it then shows markedly
    sooner; one that costs almost as much would only delay the finer one.

    Examples
    --------
    >>> iso = [(1024 >> k,) * 3 for k in range(4)]
    >>> volume_steps(iso, (0, 1, 2), 1)
    (2, 1)
    >>> volume_steps([(1024, 1024 >> k, 1024 >> k) for k in range(4)], (0, 1, 2), 2)
    (2,)
    >>> near = [(64, 64, 64), (64, 32, 32), (64, 30, 30), (64, 16, 16)]
    >>> volume_steps(near, (0, 1, 2), 0)  # level 2 costs almost what level 1 does
    (1, 0)
    >>> volume_steps(iso, (0, 1, 2), 3)
    ()
    """
    coarsest = len(shapes) - 1
    if target >= coarsest:
        return ()

    def cost(level: int) -> int:
        chunk = None if chunks is None else chunks[level]
        return volume_cost(shapes[level], displayed, chunk)

    steps = [target]
    for level in range(target + 1, coarsest):
        if cost(level) * _STEP_RATIO <= cost(steps[-1]):
            steps.append(level)
    return tuple(reversed(steps))


def volume_box(
    request: ViewRequest, shapes: Sequence[Sequence[int]], level: int
) -> tuple[tuple[int, int], ...]:
    """`request`'s planes at `level`, whole on its displayed spatial axes.

    `shapes` are the levels' shapes, finest first. A plane index is scaled
    when the plane axis is decimated (z/t rarely are).

    Examples
    --------
    >>> from napari_lazy_zarr.core.viewport.frames import ViewRequest
    >>> request = ViewRequest(0, ((3, 4), (0, 16), (8, 16)), (0, 1, 2), 1)
    >>> volume_box(request, [(10, 64, 64), (10, 32, 32)], 1)
    ((3, 4), (0, 32), (0, 32))
    """
    shown_shape = shapes[request.level]
    shape = shapes[level]
    box: list[tuple[int, int]] = []
    for axis, (lo, _) in enumerate(request.box):
        if axis in request.spatial:
            box.append((0, int(shape[axis])))
        else:  # the same plane at that level (z/t are rarely decimated; if so, scaled)
            index = lo * int(shape[axis]) // max(1, int(shown_shape[axis]))
            index = min(index, int(shape[axis]) - 1)
            box.append((index, index + 1))
    return tuple(box)


class PreparedVolumes:
    """The volumes one controller loads in the background, by level, and their frames.

    Thread-safe: `prepare` and `build` run on the controller's dispatch thread,
    the queries on any; `lock` (the controller's) guards `staged` and is never
    held while calling out. When a volume's chunks have all landed, `build` is handed
    to `dispatch` (the controller's dispatch thread); it then calls `ready(level)`.
    """

    def __init__(
        self,
        cache: ChunkCache,
        sources: Sequence[ChunkSource],
        arrays: Sequence[ChunkedArray],
        axis_map: AxisMap,
        *,
        owner: Hashable,
        plan: Callable[[ViewRequest, ChunkedArray], ReadPlan],
        dispatch: Executor,
        ready: Callable[[int], None],
        lock: AbstractContextManager[Any],
    ) -> None:
        self._cache = cache
        self._sources = sources
        self._arrays = arrays
        self._axis_map = axis_map
        self._owner = owner
        self._plan = plan
        self._dispatch = dispatch
        self._ready = ready
        self._lock = lock  # the controller's: held only around `staged`
        self.staged: dict[int, tuple[ViewRequest, ReadPlan, Request, ViewFrame | None]] = {}
        """By level: the volume's request and plan, its live cache request, its frame once
        built (guarded by the lock)."""

    def find(self, request: ViewRequest) -> tuple[ReadPlan, ViewFrame] | None:
        """The plan and built frame showing exactly `request`'s cells, if one is prepared."""
        with self._lock:
            staged = list(self.staged.values())
        for volume, plan, _, frame in staged:
            if frame is not None and request.same_view(volume):
                return plan, frame
        return None

    def complete(
        self, level: int, box: Box | None, shown: Collection[ViewFrame | None] = ()
    ) -> bool:
        """Whether the volume `box` of `level` has a whole frame: one of the frames `shown`
        (napari reads it as a view), else the one prepared."""
        for frame in shown:
            if frame is not None and frame.request.level == level and frame.request.box == box:
                return not frame.missing
        with self._lock:
            staged = self.staged.get(level)
        return (
            staged is not None
            and staged[0].box == box
            and staged[3] is not None
            and not staged[3].missing
        )

    def prepare(
        self, levels: Sequence[int], latest: ViewRequest, shown: Collection[ViewRequest] = ()
    ) -> None:
        """Load the volumes of `levels` at `latest`'s planes; drop the others (dispatch thread).

        A volume napari already reads as one of the `shown` views (the view of the
        locked level, the 3D thumbnail of the coarsest) is not prepared again: its
        frames are the controller's (measured: a second copy of the 128 MB view of
        a t step, 406 ms of a core while napari painted).
        """
        shapes = [source.shape for source in self._sources]
        read = {(request.level, request.box) for request in shown}
        wanted = {level: volume_box(latest, shapes, level) for level in levels}
        wanted = {level: box for level, box in wanted.items() if (level, box) not in read}
        with self._lock:
            kept = {
                level: staged
                for level, staged in self.staged.items()
                if wanted.get(level) == staged[0].box
            }
            dropped = [staged for level, staged in self.staged.items() if level not in kept]
            self.staged = dict(kept)
        for _, _, live, _ in dropped:
            live.release()
        for level, box in wanted.items():
            if level in kept:
                continue  # already loading (or built and announced)
            made = box_view(self._arrays, self._axis_map, level, box, latest.displayed)
            if made is None:
                continue
            volume, view = made
            plan = self._plan(volume, view)
            try:
                live = self._cache.request(
                    plan.refs, view=(self._owner, "volume", level), level=level
                )
            except RuntimeError:  # the cache was closed under us
                return
            with self._lock:
                self.staged[level] = (volume, plan, live, None)
            live.done.add_done_callback(functools.partial(self._landed, level))

    def _landed(self, level: int, _: object) -> None:  # a worker thread
        self._dispatch.submit(functools.partial(self.build, level))

    def build(self, level: int) -> None:
        """Build the frame of `level`'s volume, its chunks having landed (dispatch thread);
        `ready(level)` when it is whole."""
        with self._lock:
            staged = self.staged.get(level)
        if staged is None or staged[3] is not None:
            return
        volume, plan, live, _ = staged
        frame = first_frame(volume, plan, self._cache, self._sources)
        with self._lock:
            if self.staged.get(level) is not staged:
                return  # dropped meanwhile
            self.staged[level] = (volume, plan, live, frame)
        if not frame.missing:
            self._ready(level)

    def close(self) -> None:
        """Release every volume's request (their chunks are unpinned)."""
        with self._lock:
            staged = list(self.staged.values())
            self.staged.clear()
        for _, _, live, _ in staged:
            live.release()
