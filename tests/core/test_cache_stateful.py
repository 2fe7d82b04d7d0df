"""A stateful Hypothesis test of ChunkCache under random requests, loads, faults and capacity.

Invariants after every step: only legal moves happen and each chunk's events
chain; replaying the event log gives the cache's states; resident bytes never
exceed the limit plus the pinned working set, and both are what the states
say; READY data equals the source; a live request whose chunks all finished is
complete; and once the workers drain, nothing is left QUEUED or LOADING.
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
    ChunkState,
    ManualExecutor,
    Request,
)
from tests.sources import FaultySource

_DATA = np.arange(12 * 12, dtype=np.int32).reshape(12, 12)
_COORDS = [(r, c) for r in range(3) for c in range(3)]  # 4 x 4 chunks of 64 bytes
_CHUNK_BYTES = 4 * 4 * 4


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.source = FaultySource(ArraySource(_DATA, chunks=(4, 4), name="m"))
        self.executor = ManualExecutor()
        self.cache = ChunkCache(
            4 * _CHUNK_BYTES, concurrency=2, executor=self.executor, event_log_size=1_000_000
        )
        self.live: list[Request] = []
        self.replayed: dict[ChunkKey, ChunkState] = {}
        self.seen = 0

    def ref(self, coords: tuple[int, int]) -> ChunkRef:
        return ChunkRef.of(self.source, coords)  # type: ignore[arg-type]

    @rule(
        view=st.sampled_from(["a", "b", None]),
        needed=st.lists(st.sampled_from(_COORDS), max_size=5),
        prefetch=st.lists(st.sampled_from(_COORDS), max_size=3),
        level=st.integers(0, 2),
    )
    def request(self, view: Any, needed: list[Any], prefetch: list[Any], level: int) -> None:
        request = self.cache.request(
            [self.ref(c) for c in needed],
            view=view,
            level=level,
            prefetch=[self.ref(c) for c in prefetch],
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
    def retry(self, coords: tuple[int, int]) -> None:
        key = self.ref(coords).key
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
        assert len(queued) == self.cache.statistics.parked, "a queued chunk was lost"
        needed = {k for r in self.live if not r.done.cancelled() for k in r.keys}
        assert not queued & needed, "a chunk a live request needs was not loaded"

    @invariant()
    def events_are_legal_and_replay_to_the_states(self) -> None:
        events = self.cache.events()
        for event in events[self.seen :]:
            before = self.replayed.get(event.key, ChunkState.NEW)
            assert event.previous is before, event
            assert event.current in LEGAL_MOVES[event.previous], event
            self.replayed[event.key] = event.current
        self.seen = len(events)
        assert self.replayed == {
            k: s for k, s in self.cache.states().items() if s is not ChunkState.NEW
        }

    @invariant()
    def bytes_are_bounded_and_accounted(self) -> None:
        stats = self.cache.statistics
        states = self.cache.states()
        ready = [k for k, s in states.items() if s is ChunkState.READY]
        pinned = {k for r in self.live for k in r.keys}
        assert stats.resident_bytes == len(ready) * _CHUNK_BYTES
        assert stats.pinned_bytes == len([k for k in ready if k in pinned]) * _CHUNK_BYTES
        assert stats.resident_bytes <= stats.total_bytes_limit + stats.pinned_bytes
        assert all(self.cache.is_pinned(k) == (k in pinned) for k in states)
        assert stats.states == {s: list(states.values()).count(s) for s in ChunkState}

    @invariant()
    def ready_data_is_the_source(self) -> None:
        for coords in _COORDS:
            key = self.ref(coords).key
            data = self.cache.lookup(key)
            if data is not None:
                np.testing.assert_array_equal(data, self.source.inner.read_chunk(coords))

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
