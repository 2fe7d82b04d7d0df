"""A stateful Hypothesis test of ChunkCache under random requests, loads, faults and capacity.

The chunks come from a stored source and two virtual levels derived from it
(level 1 from the stored chunks, level 2 from level 1; their chunks share
inputs), so derived chunks wait for, share, fail through and park with their
inputs.

Reads may also be cancelled (a `LoadCancelledError`, once per arming).

Invariants after every step: only legal moves happen and each chunk's events
chain; replaying the event log gives the cache's states; resident bytes never
exceed the limit plus the pinned working set, and both are what the states
say; READY data equals the source (a derived chunk: the sampled stored data);
a live request whose chunks all finished is complete; and once the workers
drain, nothing is left QUEUED or LOADING but parked chunks, and no derived
chunk's bookkeeping is left behind.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from napari_lazy_zarr.core import (
    LEGAL_MOVES,
    ArraySource,
    ChunkCache,
    ChunkKey,
    ChunkRef,
    ChunkSource,
    ChunkState,
    ManualExecutor,
    Request,
)
from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.errors import LoadCancelledError
from napari_lazy_zarr.core.keys import grid_shape
from napari_lazy_zarr.core.sources.decimated import DecimatedSource
from napari_lazy_zarr.core.testing import FaultySource

_DATA = np.arange(12 * 12, dtype=np.int32).reshape(12, 12)
_COORDS = [(r, c) for r in range(3) for c in range(3)]  # 4 x 4 chunks of 64 bytes
_CHUNK_BYTES = 4 * 4 * 4
_ITEMSIZE = _DATA.itemsize
# (level, coords): level 0 is stored; level 1 (6 x 6 in 3 x 3 chunks, each sampling
# 2 x 2 stored chunks) and level 2 (3 x 3 in 2 x 2 chunks, from level 1) are derived.
_LEVEL_CHUNKS = {0: _COORDS, 1: [(r, c) for r in range(2) for c in range(2)]}
_LEVEL_CHUNKS[2] = _LEVEL_CHUNKS[1]
_CHUNKS = [(level, c) for level, coords in _LEVEL_CHUNKS.items() for c in coords]


class CancellingSource(FaultySource):
    """A `FaultySource` whose next read of a chunk in `cancel_once` is cancelled (once),
    as a `CancellableSource`'s read is when asked to stop."""

    def __init__(self, inner: ChunkSource) -> None:
        super().__init__(inner)
        self.cancel_once: set[tuple[int, ...]] = set()

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        with self._lock:
            cancel = coords in self.cancel_once
            self.cancel_once.discard(coords)
        if cancel:
            raise LoadCancelledError(f"chunk {coords}: cancelled")
        return super().read_chunk(coords)


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.source = CancellingSource(ArraySource(_DATA, chunks=(4, 4), name="m"))
        level1 = DecimatedSource(self.source, 2, chunk_size=3)
        level2 = DecimatedSource(self.source, 4, parent=level1, chunk_size=2)
        self.levels: list[ChunkSource] = [self.source, level1, level2]
        assert [grid_shape(level) for level in self.levels] == [(3, 3), (2, 2), (2, 2)]
        self.executor = ManualExecutor()
        self.cache = ChunkCache(
            4 * _CHUNK_BYTES, concurrency=2, executor=self.executor, event_log_size=1_000_000
        )
        # Remember 2 evicted chunks: the oldest are forgotten (their entries dropped) often.
        self.cache._residency.evicted_kept = 2
        self.live: list[Request] = []
        self.replayed: dict[ChunkKey, ChunkState] = {}
        self.seen = 0
        self.forgotten = 0  # entries the cache had forgotten at the last check

    def ref(self, chunk: tuple[int, tuple[int, int]]) -> ChunkRef:
        level, coords = chunk
        return ChunkRef.of(self.levels[level], coords)

    @rule(
        view=st.sampled_from(["a", "b", None]),
        needed=st.lists(st.sampled_from(_CHUNKS), max_size=5),
        prefetch=st.lists(st.sampled_from(_CHUNKS), max_size=3),
        level=st.integers(0, 2),
        load_class=st.sampled_from([LoadClass.NEEDED, LoadClass.OVERVIEW]),
    )
    def request(
        self,
        view: Any,
        needed: list[Any],
        prefetch: list[Any],
        level: int,
        load_class: LoadClass,
    ) -> None:
        request = self.cache.request(
            [self.ref(c) for c in needed],
            view=view,
            level=level,
            prefetch=[self.ref(c) for c in prefetch],
            load_class=load_class,
        )
        if view is not None:
            # The newer request for a view supersedes (and unpins) the older one.
            for old in [r for r in self.live if r.view == view]:
                assert old.done.cancelled() or old.done.done()
                self.live.remove(old)
        self.live.append(request)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self.live:
            request = data.draw(st.sampled_from(self.live))
            request.release()
            self.live.remove(request)

    @rule(steps=st.integers(1, 4))
    def run_loads(self, steps: int) -> None:
        for _ in range(steps):
            self.executor.run_next()

    @rule(coords=st.sampled_from(_COORDS), failing=st.booleans())
    def set_fault(self, coords: tuple[int, int], failing: bool) -> None:
        if failing:
            self.source.failing.add(coords)
        else:
            self.source.failing.discard(coords)

    @rule(coords=st.sampled_from(_COORDS))
    def cancel_next_read(self, coords: tuple[int, int]) -> None:
        # The load goes back to QUEUED: loaded again if still wanted, else parked.
        self.source.cancel_once.add(coords)

    @rule(chunk=st.sampled_from(_CHUNKS))
    def retry(self, chunk: tuple[int, tuple[int, int]]) -> None:
        key = self.ref(chunk).key
        was_failed = self.cache.state(key) is ChunkState.FAILED
        assert self.cache.retry(key) == was_failed

    @rule()
    def retry_failed(self) -> None:
        self.cache.retry_failed()

    @rule(chunks=st.integers(0, 8))
    def set_capacity(self, chunks: int) -> None:
        self.cache.total_bytes_limit = chunks * _CHUNK_BYTES

    @rule()
    def evict_unpinned(self) -> None:
        self.cache.evict_unpinned()

    @rule()
    def drain(self) -> None:
        self.executor.run_all()
        states = self.cache.states()
        assert ChunkState.LOADING not in states.values()
        # Nothing a live view needs is left behind: what stays QUEUED was parked because
        # the view that wanted it moved on.
        queued = {k for k, s in states.items() if s is ChunkState.QUEUED}
        stats = self.cache.statistics
        assert len(queued) == stats.parked, "a queued chunk was lost"
        assert stats.deferred == 0, "a derived chunk still waits for inputs nobody loads"
        assert not self.cache._dependents, "bookkeeping of derived chunks leaked"
        needed = {k for r in self.live if not r.done.cancelled() for k in r.keys}
        assert not queued & needed, "a chunk a live request needs was not loaded"

    @rule(level=st.integers(0, 2))
    def discard_level(self, level: int) -> None:
        """A level's data can never be read again (a removed layer): forget what nothing
        holds; asked for again, it is read again."""
        self.cache.discard([self.levels[level].identity])

    @invariant()
    def events_are_legal_and_replay_to_the_states(self) -> None:
        events = self.cache.events()
        states = self.cache.states()
        for event in events[self.seen :]:
            before = self.replayed.get(event.key, ChunkState.NEW)
            if (
                event.previous is ChunkState.NEW
                and before in (ChunkState.EVICTED, ChunkState.QUEUED)
                and self.cache._residency.forgotten > self.forgotten
            ):
                before = ChunkState.NEW  # forgotten (old eviction, or discarded), asked again
            assert event.previous is before, event
            assert event.current in LEGAL_MOVES[event.previous], event
            self.replayed[event.key] = event.current
        self.seen = len(events)
        self.forgotten = self.cache._residency.forgotten
        for key in [k for k in self.replayed if k not in states]:
            # Only chunks nothing holds are forgotten: evicted ones, or parked ones discarded.
            assert self.replayed.pop(key) in (ChunkState.EVICTED, ChunkState.QUEUED), key
        assert self.replayed == {k: s for k, s in states.items() if s is not ChunkState.NEW}

    @invariant()
    def bookkeeping_is_bounded(self) -> None:
        """At most `evicted_kept` EVICTED entries, but for those a stale queue item names."""
        with self.cache._lock:
            residency = self.cache._residency
            evicted = [e for e in residency.entries.values() if e.state is ChunkState.EVICTED]
            assert len(residency.evicted) <= residency.evicted_kept
            assert all(e.key in residency.evicted or e.queue_items for e in evicted)

    @invariant()
    def bytes_are_bounded_and_accounted(self) -> None:
        stats = self.cache.statistics
        states = self.cache.states()
        ready = {
            k: int(np.prod(k.shape)) * _ITEMSIZE
            for k, s in states.items()
            if s is ChunkState.READY
        }
        pinned = {k for r in self.live for k in r.keys}
        assert stats.resident_bytes == sum(ready.values())
        assert stats.pinned_bytes == sum(n for k, n in ready.items() if k in pinned)
        assert stats.resident_bytes <= stats.total_bytes_limit + stats.pinned_bytes
        assert all(self.cache.is_pinned(k) == (k in pinned) for k in states)
        assert stats.states == {s: list(states.values()).count(s) for s in ChunkState}

    @invariant()
    def derived_chunks_wait_only_for_inputs_that_will_load(self) -> None:
        cache = self.cache
        with cache._lock:
            for key, record in cache._deferred.items():
                assert cache._entries[key].state is ChunkState.QUEUED
                assert key not in cache._parked
                for missing in record.missing:
                    assert key in cache._dependents.get(missing, {}), (key, missing)
                    assert cache._entries[missing].state in (ChunkState.QUEUED, ChunkState.LOADING)
                    assert missing not in cache._parked, f"{key} waits for parked {missing}"
            for missing, waiting in cache._dependents.items():
                assert waiting, missing
                for key in waiting:
                    assert missing in cache._deferred[key].missing

    @invariant()
    def ready_data_is_the_source(self) -> None:
        for level, coords in _CHUNKS:
            key = self.ref((level, coords)).key
            if self.cache.state(key) is not ChunkState.READY:
                continue  # `lookup` would mark it used: the check must not change the LRU
            box = tuple(
                slice(lo, hi) for lo, hi in zip(key.inclusive_min, key.exclusive_max, strict=True)
            )
            step = 2**level
            expected = _DATA[::step, ::step][box].copy()
            with self.cache._lock:
                left_out = dict(self.cache._entries[key].left_out or {})
            # A derived chunk combined without failed inputs: their samples at the fill value
            # (0), everything else the source's; blocking reads never get it.
            for out_key in left_out:
                out_level = next(
                    i for i, s in enumerate(self.levels) if s.identity == out_key.source
                )
                ratio = 2 ** (level - out_level)  # this level's cell x samples theirs x * ratio
                rows, cols = (
                    np.arange(lo, hi) * ratio
                    for lo, hi in zip(key.inclusive_min, key.exclusive_max, strict=True)
                )
                (r0, c0), (r1, c1) = out_key.inclusive_min, out_key.exclusive_max
                expected[np.ix_((rows >= r0) & (rows < r1), (cols >= c0) & (cols < c1))] = 0
            np.testing.assert_array_equal(self.cache.lookup(key, partial=True), expected)
            assert (self.cache.lookup(key) is None) == bool(left_out)

    @invariant()
    def finished_requests_are_complete(self) -> None:
        finished = {ChunkState.READY, ChunkState.FAILED}
        for request in self.live:
            if all(self.cache.state(k) in finished for k in request.keys):
                assert request.complete, request

    def teardown(self) -> None:
        self.cache.close()


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
