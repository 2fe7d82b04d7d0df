"""A view as the controller keeps it between reads: its live buffer and what it lacks.

`Shown` is shared by the controller and the volumes and frames it prepares
(`volumes.py`, `planes.py`), `ViewPlans` keeps the plans of all three; private
to the package.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core.viewport._coarser import CoarserPlan, view_plan
from napari_lazy_zarr.core.viewport.axes import view_box
from napari_lazy_zarr.core.viewport.fallback import covered, stand_ins
from napari_lazy_zarr.core.viewport.frames import ViewRequest
from napari_lazy_zarr.core.viewport.prefetch import overview_shown

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Hashable, Iterator, Sequence

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import AxisMap, Box
    from napari_lazy_zarr.core.viewport.frames import ViewFrame, ViewKind

__all__ = ["Shown", "ViewPlans", "box_view"]

_YIELD_SECONDS: Final = 0.5
"""Longest an assembly off napari's thread waits, between two chunks, for a read to pass."""

_RESIDENT_SECONDS: Final = 0.025
"""Longest a first read of a volume with every chunk resident copies them in on its own thread
(`Shown.defers`); what is left then is assembled off it."""


class Shown:
    """The latest read of one view kind (or a prepared volume): its buffer, and what it lacks.

    `lock` guards every field and every write into `buffer`: chunks that land
    are copied in by worker threads, stand-ins by the compose thread, and a
    stand-in must never overwrite a chunk that landed. napari's read takes it
    through `reading`, ahead of an assembly off its thread (`assemble_apart`).
    """

    __slots__ = (
        "_gate",
        "_readers",
        "assembling",
        "backdrop",
        "buffer",
        "coarser",
        "composing",
        "deferred",
        "failed",
        "held",
        "issued",
        "landings",
        "lock",
        "missing",
        "placeholder",
        "plan",
        "prefilled",
        "provisional",
        "request",
        "requested",
        "unfilled",
    )

    def __init__(
        self,
        request: ViewRequest,
        plan: ReadPlan,
        buffer: np.ndarray[Any, Any],
        coarser: frozenset[Hashable],
        placeholder: Any,
        *,
        prefilled: bool = False,
    ) -> None:
        self.lock = threading.Lock()
        self._gate = threading.Condition(threading.Lock())  # guards `_readers`
        self._readers = 0  # reads waiting for `lock` or holding it (`reading`)
        self.request = request
        self.plan = plan
        self.buffer = buffer
        self.coarser = coarser  # identities of the coarser levels' sources
        self.placeholder = placeholder  # what cells show without data: the level's fill value
        self.missing: set[ChunkKey] = {ref.key for ref in plan.refs}
        self.provisional: set[ChunkKey] = set()
        self.failed: set[ChunkKey] = set()
        self.unfilled = True  # missing cells not yet given placeholders
        self.prefilled = prefilled  # every cell of `buffer` holds the placeholder already
        self.assembling = False  # its resident chunks being copied in off napari's thread
        self.composing = False  # stand-ins queued on the compose thread
        self.backdrop = False  # the composed stand-ins cover every cell still waiting
        self.landings = 0  # how many times chunks landed in it (READY, FAILED or retried)
        self.held = False  # its latest read was answered with a held frame of another plane
        # What the latest cache request for it was made on (`ViewController._issue`).
        self.issued: tuple[object, ...] | None = None
        # A virtual thumbnail: the chunks the latest request asked for (None: all), and
        # those left out of it (`overview_shown`), not waited for.
        self.requested: frozenset[ChunkKey] | None = None
        self.deferred: frozenset[ChunkKey] = frozenset()

    @classmethod
    def blank(cls, request: ViewRequest, plan: ReadPlan, sources: Sequence[ChunkSource]) -> Shown:
        """A new view of `request`, every chunk of `plan` missing.

        When the level's fill value is zero (most images), its buffer is zeroed:
        fresh pages the kernel zeroes when first written, at no cost to the read
        that makes it, and then no placeholder is written at all (measured: the
        first read of a 3D volume spent 29 ms of napari's thread writing
        placeholders into the 10 of its 16 chunks not yet resident). Otherwise it
        is uninitialized, and its first assembly writes the placeholders.
        """
        coarser = frozenset(source.identity for source in sources[request.level + 1 :])
        source = sources[request.level]
        zero = _zero(source.fill_value, source.dtype)
        buffer = plan.new_buffer(zeros=zero)
        return cls(request, plan, buffer, coarser, source.fill_value, prefilled=zero)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold `lock` for napari's read, ahead of `assemble_apart`, which waits between
        two chunks while a read waits. Python's lock is not fair: an assembly taking it
        chunk after chunk kept a read of a 3D thumbnail waiting 41 ms, for all 16 chunks,
        where it should wait for one chunk at most."""
        with self._gate:
            self._readers += 1
        try:
            with self.lock:
                yield
        finally:
            with self._gate:
                self._readers -= 1
                self._gate.notify_all()

    @property
    def waiting(self) -> bool:
        """Whether chunks it lacks are still to land (FAILED ones, and those deferred,
        are not waited for)."""
        if self.deferred:
            return bool(self.missing - self.failed - self.deferred)
        return len(self.missing) > len(self.failed)

    def defers(self, stepped: bool, cache: ChunkCache) -> bool:
        """Whether a read leaves its assembly to the dispatch thread (`lock` held): a volume
        lacking chunks, new or prepared ahead (10s of MB of copies and page faults), when
        the read has a frame to hold (a z/t step, `stepped`) or its placeholders cost
        nothing (`prefilled`: the read answers them meanwhile; measured, the switch to 3D
        copied the 6 resident chunks of its first volume on napari's thread, 16-78 ms).

        Except a read with no frame to hold of a volume whose every chunk is resident
        (the switch to 3D after the 2D views loaded the coarsest level): it copies them in
        itself, for `_RESIDENT_SECONDS` at most. Answered with only some in, the volume
        is read again once whole, and napari paints it twice; under software rendering
        each paint of a 1024-deep volume held napari's thread 2.2-4.2 s and starved the
        workers loading the finer level (measured: y/x pyramid, 16 MB coarsest volume,
        6-9 ms of copies).
        """
        if not (
            len(self.request.spatial) >= 3
            and (stepped or self.prefilled)
            and (self.assembling or bool(self.unfilled and self.missing))
        ):
            return False
        return stepped or self.assembling or not self._copy_resident(cache)

    def _copy_resident(self, cache: ChunkCache) -> bool:
        """Copy every chunk it lacks in (`lock` held), for `_RESIDENT_SECONDS` at most, if all
        are READY or FAILED now; whether nothing is left to copy."""
        ready, failed = cache.lookup_many(self.missing, partial=True)
        if len(ready) + len(failed) < len(self.missing):
            return False  # some still load: it is read again when they land anyway
        self._take(failed, {}, failed)
        deadline = time.perf_counter() + _RESIDENT_SECONDS
        for key, data in ready.items():  # held: a block is recycled only once let go
            if time.perf_counter() >= deadline:
                break
            self._take((key,), {key: data}, set())
        return not self.missing - self.failed

    @property
    def presentable(self) -> bool:
        """Whether a read may show it (`lock` held): not being assembled, and nothing left
        to wait for or a complete backdrop composed."""
        return not self.assembling and (not self.waiting or self.backdrop)

    def still_held(self) -> bool:
        """Whether its latest read was answered with a held frame and a read now would be
        too (it is not `presentable` yet)."""
        with self.lock:
            return self.held and not self.presentable

    def follow(
        self, view: ViewFrame | None, sources: Sequence[ChunkSource]
    ) -> tuple[list[ChunkRef], bool]:
        """A virtual thumbnail's chunks under the displayed `view` (`overview_shown`), the
        others deferred (not waited for); and whether that changed what it waits for."""
        shown = None if view is None else view.request
        refs = overview_shown(self.request, self.plan.refs, shown, sources)
        keys = frozenset(ref.key for ref in refs)
        with self.lock:
            changed, self.requested = keys != self.requested, keys
            self.deferred = frozenset(ref.key for ref in self.plan.refs) - keys
        return refs, changed

    def follows(self, view: ViewFrame, sources: Sequence[ChunkSource]) -> bool:
        """Whether it is a virtual thumbnail, now to be asked for other chunks (`follow`)."""
        return self.requested is not None and self.follow(view, sources)[1]

    @property
    def prefetches(self) -> bool:
        """Whether its ring is worth loading: not when served from a coarser level (the ring
        of a view over its bounds, at its own level, would be as unbounded as the view)."""
        return not isinstance(self.plan, CoarserPlan)

    def composes(self, levels: int) -> bool:
        """Whether it gets stand-ins: it waits for chunks and a coarser level of `levels` exists.

        Never a volume (three spatial axes): upsampling a 512³ volume costs
        seconds and gigabytes; in 3D the coarsest complete level is shown instead
        (`LayerLoader`), so a volume is presentable only when complete.
        """
        request = self.request
        if isinstance(self.plan, CoarserPlan):  # already a coarser level's cells
            return False
        return self.waiting and request.level < levels - 1 and len(request.spatial) < 3

    def compose(
        self,
        request: ViewRequest,
        waiting: Collection[ChunkKey],
        sources: Sequence[ChunkSource],
        lookup: Callable[[ChunkKey], np.ndarray[Any, Any] | None],
    ) -> bool:
        """Give the cells of the `waiting` chunks still missing coarser levels' values.

        The upsampling (`stand_ins`) runs without the lock; only the copy into
        the buffer holds it, and skips chunks that landed meanwhile. Returns
        whether anything was drawn.
        """
        drawn = stand_ins(request, waiting, sources, lookup)
        if drawn is None:
            return False
        stand_in, region, found = drawn
        fill_value = sources[request.level].fill_value
        with self.lock:
            still = (self.missing - self.failed) & set(waiting)  # not landed meanwhile
            for key in still:
                self.plan.fill_missing(self.buffer, key, fill_value, stand_in)
            # Provisional: the chunks whose every cell shows a coarser level's value.
            self.provisional = {key for key in still if covered(key, region, found)}
            self.backdrop = bool(found.all())
        return bool(still)

    def answer(self, snapshot: bool) -> np.ndarray[Any, Any]:
        """Its view's array (`lock` held): the live buffer, or with `snapshot` a copy while
        chunks are still to land in it (a complete buffer never changes again)."""
        data = self.plan.finish(self.buffer)
        return data.copy() if snapshot and self.missing else data

    def assemble(self, cache: ChunkCache) -> bool:
        """Copy the READY chunks it lacks in, and at its first assembly give the others
        placeholders (`lock` held). Returns whether chunks landed in it."""
        changed = self.take_landed(cache)
        if self.unfilled and not self.prefilled:
            if len(self.missing) == len(self.plan.refs):
                self.buffer.fill(self.placeholder)  # a cold view: one contiguous fill
            else:
                for key in self.missing - self.failed:
                    self.plan.fill_missing(self.buffer, key, self.placeholder, None)
        self.unfilled = False
        return changed

    def assemble_apart(self, cache: ChunkCache, current: Callable[[], bool]) -> bool:
        """`assemble` off napari's thread (`lock` not held), one chunk per hold of `lock`,
        its placeholder too: a read meanwhile waits for one chunk's copy or fill at most
        (and answers a held frame while `assembling`; measured: a read waiting for the
        whole fill of a 3D thumbnail, 83 ms), and lets a waiting read (`reading`) go
        first. Stops, returning False, once it is not `current` (the viewer stepped on);
        True when assembled.
        """
        if not self._apart(cache, current, fill=True):
            return False
        with self.lock:
            self.take_landed(cache)  # what landed since its turn (filled meanwhile)
            self.unfilled = self.assembling = False
        return True

    def take_apart(self, cache: ChunkCache) -> bool:
        """`take_landed` off napari's thread as `assemble_apart` copies (measured: a
        prepared volume's 100+ MB copied in one hold of `lock`, 250-590 ms); whether it is
        complete."""
        self._apart(cache, lambda: True, fill=False)
        with self.lock:
            return not self.missing

    def _apart(self, cache: ChunkCache, current: Callable[[], bool], *, fill: bool) -> bool:
        """Each chunk it lacks copied in, and with `fill` (at its first assembly) the
        placeholder of one not resident: one chunk per hold of `lock`, after any read
        waiting for it (`reading`). False, stopped, once it is not `current`."""
        with self.lock:
            pending = list(self.missing)
        for key in pending:
            with self._gate:  # a read waiting for the lock, or holding it, goes first
                self._gate.wait_for(lambda: not self._readers, _YIELD_SECONDS)
            with self.lock:
                if not current():  # checked under the lock a read re-showing it takes
                    self.assembling = False  # so that such a read starts it anew
                    return False
                landed = self.take_landed(cache, (key,))
                empty = fill and self.unfilled and not self.prefilled and key not in self.failed
                if not landed and empty and key in self.missing:
                    self.plan.fill_missing(self.buffer, key, self.placeholder, None)
        return True

    def take_landed(self, cache: ChunkCache, among: Collection[ChunkKey] | None = None) -> bool:
        """Copy the chunks it lacks that are now READY into its buffer (`lock` held).

        FAILED ones get the explicit placeholder instead of a stand-in, so a
        failure is never disguised. Only `among` are looked at, if given.
        Returns whether anything changed.
        """
        keys = self.missing if among is None else self.missing.intersection(among)
        if not keys:
            return False
        ready, failed = cache.lookup_many(keys, partial=True)
        return self._take(keys, ready, failed)

    def _take(
        self,
        keys: Collection[ChunkKey],
        ready: dict[ChunkKey, np.ndarray[Any, Any]],
        failed: set[ChunkKey],
    ) -> bool:
        """`take_landed` of what the cache said about `keys`: `ready` and `failed`."""
        for key, data in ready.items():
            self.plan.copy_chunk(self.buffer, key, data)
        self.missing.difference_update(ready)
        self.provisional.difference_update(ready)
        retried = self.failed.intersection(keys) - failed
        newly_failed = failed - self.failed
        for key in newly_failed:
            self.plan.fill_missing(self.buffer, key, self.placeholder, None)
        self.provisional.difference_update(newly_failed)
        self.failed = (self.failed - retried) | failed
        changed = bool(ready or newly_failed or retried)
        if changed:
            self.landings += 1
        return changed


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


def _zero(value: Any, dtype: np.dtype[Any]) -> bool:
    """Whether `value` as `dtype` is all zero bytes: what a zeroed buffer holds (-0.0 is
    not, NaN is not).

    >>> _zero(0, np.dtype("u2")), _zero(0.0, np.dtype("f4")), _zero(-0.0, np.dtype("f4"))
    (True, True, False)
    >>> _zero(float("nan"), np.dtype("f8")), _zero(7, np.dtype("u1"))
    (False, False)
    """
    try:
        return not np.asarray(value, dtype=dtype).tobytes().strip(b"\0")
    except (TypeError, ValueError, OverflowError):
        return False


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
