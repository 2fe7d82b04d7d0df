"""ChunkCache: states, priorities, superseding, pins, eviction, failures, statistics, signals."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr.core import (
    LEGAL_MOVES,
    ArraySource,
    CacheClosedError,
    ChunkCache,
    ChunkEvent,
    ChunkRef,
    ChunkState,
    IllegalTransitionError,
    InlineExecutor,
    ManualExecutor,
)
from napari_lazy_zarr.core.testing import FaultySource, InjectedFaultError

if TYPE_CHECKING:
    from collections.abc import Iterator

CHUNK_BYTES = 4 * 4 * 8  # a 4 x 4 float64 chunk


@pytest.fixture
def source() -> ArraySource:
    return ArraySource(
        np.arange(16 * 16, dtype=np.float64).reshape(16, 16), chunks=(4, 4), name="s"
    )


@pytest.fixture
def manual() -> ManualExecutor:
    return ManualExecutor()


@pytest.fixture
def cache(manual: ManualExecutor) -> Iterator[ChunkCache]:
    with ChunkCache(10 * CHUNK_BYTES, concurrency=1, executor=manual) as cache:
        yield cache


def refs(source: ArraySource, *coords: tuple[int, int]) -> list[ChunkRef]:
    return [ChunkRef.of(source, c) for c in coords]


def loaded_order(cache: ChunkCache) -> list[tuple[int, ...]]:
    return [e.key.inclusive_min for e in cache.events() if e.current is ChunkState.LOADING]


def test_legal_moves_are_exactly_the_design() -> None:
    s = ChunkState
    assert {(a, b) for a, targets in LEGAL_MOVES.items() for b in targets} == {
        (s.NEW, s.QUEUED),
        (s.QUEUED, s.LOADING),
        (s.LOADING, s.READY),
        (s.LOADING, s.FAILED),
        (s.LOADING, s.QUEUED),  # a cancelled load: back to the queue, never FAILED
        (s.READY, s.EVICTED),
        (s.FAILED, s.QUEUED),
        (s.EVICTED, s.QUEUED),
    }


def test_an_illegal_move_raises(cache: ChunkCache, source: ArraySource) -> None:
    from napari_lazy_zarr.core.cache._outbox import Outbox
    from napari_lazy_zarr.core.cache._residency import Entry

    entry = Entry(ChunkRef.of(source, (0, 0)))
    with pytest.raises(IllegalTransitionError, match=r"NEW -> READY"):
        cache._transition(entry, ChunkState.READY, "loaded", Outbox())


def test_request_queues_then_loads_through_every_state(
    cache: ChunkCache, manual: ManualExecutor, source: ArraySource
) -> None:
    (ref,) = refs(source, (1, 2))
    request = cache.request([ref])
    assert cache.state(ref.key) is ChunkState.QUEUED
    assert not request.done.done()
    assert manual.run_all() == 1
    assert request.complete
    assert cache.state(ref.key) is ChunkState.READY
    np.testing.assert_array_equal(cache.lookup(ref.key), source.read_chunk((1, 2)))
    assert [(e.previous, e.current) for e in cache.events()] == [
        (ChunkState.NEW, ChunkState.QUEUED),
        (ChunkState.QUEUED, ChunkState.LOADING),
        (ChunkState.LOADING, ChunkState.READY),
    ]
    request.release()


def test_cached_data_is_read_only(inline_cache: ChunkCache, source: ArraySource) -> None:
    (ref,) = refs(source, (0, 0))
    with inline_cache.request([ref]):
        data = inline_cache.lookup(ref.key)
        assert data is not None
        with pytest.raises(ValueError, match="read-only"):
            data[0, 0] = 1


def test_needed_before_prefetch_coarse_before_fine_centre_outward(
    cache: ChunkCache, manual: ManualExecutor
) -> None:
    fine = ArraySource(np.zeros((16, 16)), chunks=(4, 4), name="fine")
    coarse = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="coarse")
    # Fine level: a 3 x 3 view centred on chunk (1, 1), with one prefetch neighbour.
    cache.request(
        refs(fine, *[(r, c) for r in range(3) for c in range(3)]),
        view="fine",
        level=0,
        prefetch=refs(fine, (3, 3)),
    )
    cache.request(refs(coarse, (0, 0), (1, 1)), view="coarse", level=1)
    manual.run_all()
    order = [
        (e.key.source, e.key.inclusive_min)
        for e in cache.events()
        if e.current is ChunkState.LOADING
    ]
    # Coarser level first.
    assert [o[0] for o in order[:2]] == ["coarse", "coarse"]
    # Then the fine view's centre chunk, then its edge neighbours, then the corners.
    fine_order = [o[1] for o in order[2:11]]
    assert fine_order[0] == (4, 4)
    assert set(fine_order[1:5]) == {(0, 4), (4, 0), (4, 8), (8, 4)}
    assert set(fine_order[5:9]) == {(0, 0), (0, 8), (8, 0), (8, 8)}
    # Prefetch last.
    assert order[-1] == ("fine", (12, 12))


def test_newer_request_supersedes_queued_work(
    cache: ChunkCache, manual: ManualExecutor, source: ArraySource
) -> None:
    old = cache.request(refs(source, (0, 0), (0, 1), (0, 2)), view="layer")
    manual.run_next()  # (0, 1) -- the centre -- loads for the old view
    new = cache.request(refs(source, (3, 3), (3, 2)), view="layer")
    assert old.done.cancelled()
    assert new.generation == old.generation + 1
    manual.run_all()
    order = loaded_order(cache)
    # Only the new view's chunks load; the old view's leftovers are not fetched ...
    assert sorted(order[1:]) == [(12, 8), (12, 12)]
    assert new.complete
    leftovers = [ChunkRef.of(source, c).key for c in ((0, 0), (0, 2))]
    # ... they stay QUEUED, parked, and nothing pins them any more.
    assert [cache.state(k) for k in leftovers] == [ChunkState.QUEUED] * 2
    assert cache.statistics.parked == 2
    assert cache.statistics.queued == 0
    assert not any(cache.is_pinned(k) for k in leftovers)
    # A view that wants one of them again gets it loaded.
    back = cache.request(refs(source, (0, 0)), view="layer")
    assert cache.statistics.parked == 1
    manual.run_all()
    assert back.complete
    assert cache.state(leftovers[0]) is ChunkState.READY
    back.release()
    new.release()


def test_superseded_work_can_be_fetched_after_current_work(
    manual: ManualExecutor, source: ArraySource
) -> None:
    with ChunkCache(1 << 20, concurrency=1, executor=manual, fetch_superseded=True) as cache:
        cache.request(refs(source, (0, 0), (0, 1), (0, 2)), view="layer")
        manual.run_next()
        new = cache.request(refs(source, (3, 3), (3, 2)), view="layer")
        manual.run_all()
        order = loaded_order(cache)
        assert sorted(order[1:3]) == [(12, 8), (12, 12)]  # current work first ...
        assert sorted(order[3:]) == [(0, 0), (0, 8)]  # ... then the left view's leftovers
        assert cache.statistics.parked == 0
        new.release()


def test_releasing_a_view_drops_its_queued_work(
    cache: ChunkCache, manual: ManualExecutor, source: ArraySource
) -> None:
    request = cache.request(refs(source, (1, 1), (1, 2)), view="layer")
    cache.release_view("layer")
    assert request.done.cancelled()
    manual.run_all()
    assert loaded_order(cache) == []
    assert cache.statistics.parked == 2


def test_failure_is_kept_and_not_retried_until_asked(source: ArraySource) -> None:
    faulty = FaultySource(source, failing={(1, 1)})
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        wanted = refs(faulty, (1, 0), (1, 1), (1, 2))  # type: ignore[arg-type]
        with cache.request(wanted) as request:
            assert request.complete
            assert set(request.failed()) == {wanted[1].key}
            assert isinstance(request.failed()[wanted[1].key], InjectedFaultError)
        assert [cache.state(r.key) for r in wanted] == [
            ChunkState.READY,
            ChunkState.FAILED,
            ChunkState.READY,
        ]
        # Asking again does not re-read the failed chunk (no retry storm).
        for _ in range(5):
            cache.request(wanted).release()
        assert faulty.reads.count((1, 1)) == 1
        # Retry after the fault clears recovers exactly that chunk.
        faulty.failing.clear()
        assert cache.retry(wanted[1].key)
        assert cache.state(wanted[1].key) is ChunkState.READY
        assert faulty.reads.count((1, 1)) == 2
        assert faulty.reads.count((1, 0)) == 1
        assert cache.statistics.failures == 1


def test_retry_failed_requeues_every_failed_chunk(source: ArraySource) -> None:
    faulty = FaultySource(source, failing={(0, 0), (2, 2)})
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        cache.request(refs(faulty, (0, 0), (2, 2), (3, 3))).release()  # type: ignore[arg-type]
        faulty.failing.clear()
        assert cache.retry_failed() == 2
        assert cache.statistics.states[ChunkState.FAILED] == 0
        assert cache.statistics.states[ChunkState.READY] == 3
        assert not cache.retry(ChunkRef.of(faulty, (3, 3)).key)  # type: ignore[arg-type]


def test_lru_eviction_respects_bytes_and_pins(source: ArraySource) -> None:
    with ChunkCache(3 * CHUNK_BYTES, executor=InlineExecutor()) as cache:
        a, b, c, d = refs(source, (0, 0), (0, 1), (0, 2), (0, 3))
        for ref in (a, b, c):
            cache.request([ref]).release()
        cache.lookup(a.key)  # a is now most recently used
        pinned = cache.request([b])  # b is pinned
        cache.request([d]).release()
        # Over the limit by one chunk: the least recently used unpinned chunk (c) goes.
        assert cache.state(c.key) is ChunkState.EVICTED
        assert {cache.state(r.key) for r in (a, b, d)} == {ChunkState.READY}
        stats = cache.statistics
        assert stats.resident_bytes == 3 * CHUNK_BYTES
        assert stats.pinned_bytes == CHUNK_BYTES
        assert stats.evictions == 1
        # Shrinking the capacity evicts everything unpinned, never the pinned chunk.
        cache.total_bytes_limit = 0
        assert cache.state(b.key) is ChunkState.READY
        assert cache.statistics.resident_bytes == CHUNK_BYTES
        pinned.release()
        assert cache.state(b.key) is ChunkState.EVICTED
        assert cache.statistics.resident_bytes == 0
        # An evicted chunk loads again on demand.
        with cache.request([c]):
            assert cache.state(c.key) is ChunkState.READY


def test_pinned_working_set_may_exceed_the_limit(source: ArraySource) -> None:
    with ChunkCache(2 * CHUNK_BYTES, executor=InlineExecutor()) as cache:
        view = refs(source, *[(0, c) for c in range(4)])
        with cache.request(view) as request:
            assert request.complete
            assert cache.statistics.resident_bytes == 4 * CHUNK_BYTES
            assert cache.statistics.pinned_bytes == 4 * CHUNK_BYTES
        assert cache.statistics.resident_bytes <= 2 * CHUNK_BYTES


def test_prefetch_never_evicts_the_current_view(source: ArraySource) -> None:
    with ChunkCache(4 * CHUNK_BYTES, executor=InlineExecutor()) as cache:
        view = refs(source, *[(1, c) for c in range(4)])
        ring = refs(source, *[(0, c) for c in range(4)])
        with cache.request(view, view="v", prefetch=ring):
            assert all(cache.state(r.key) is ChunkState.READY for r in view)
            # The ring loaded too, but was evicted right away: the view filled the capacity.
            assert all(cache.state(r.key) is ChunkState.EVICTED for r in ring)


def test_statistics_count_hits_misses_and_latency(
    inline_cache: ChunkCache, source: ArraySource
) -> None:
    wanted = refs(source, (0, 0), (0, 1))
    inline_cache.request(wanted).release()
    inline_cache.request(wanted).release()
    stats = inline_cache.statistics
    assert (stats.hits, stats.misses, stats.loads) == (2, 2, 2)
    assert stats.hit_rate == 0.5
    assert stats.in_flight == 0
    assert stats.load_latency_mean > 0
    assert stats.load_latency_p95 >= stats.load_latency_mean * 0.5
    assert stats.transitions[ChunkState.QUEUED, ChunkState.LOADING] == 2


def test_reads_of_a_chunked_array_count_hits_and_misses(
    inline_cache: ChunkCache, source: ArraySource
) -> None:
    from napari_lazy_zarr.core.reading.array import ChunkedArray

    array = ChunkedArray(source, inline_cache)
    view = array[:, : source.shape[1] // 2]
    touched = len(view.chunk_refs())
    view.result(timeout=10)
    assert (inline_cache.statistics.hits, inline_cache.statistics.misses) == (0, touched)
    array.result(timeout=10)  # half of it resident: hits, the rest misses
    stats = inline_cache.statistics
    assert (stats.hits, stats.misses) == (touched, len(array.chunk_refs()))


def test_event_log_is_bounded(source: ArraySource) -> None:
    with ChunkCache(1 << 20, executor=InlineExecutor(), event_log_size=5) as cache:
        cache.request(refs(source, *[(0, c) for c in range(4)])).release()
        events = cache.events()
        assert len(events) == 5
        assert all(isinstance(e, ChunkEvent) for e in events)
        assert events[-1].current is ChunkState.READY


def test_signals_are_emitted_outside_the_lock(
    inline_cache: ChunkCache, source: ArraySource
) -> None:
    """A slot may call back into the cache: it would deadlock if emitted under the lock."""
    batches: list[tuple[ChunkEvent, ...]] = []
    stats_seen: list[Any] = []

    def on_events(events: tuple[ChunkEvent, ...]) -> None:
        batches.append(events)
        inline_cache.states()  # takes the lock

    inline_cache.state_changed.connect(on_events)
    inline_cache.statistics_changed.connect(stats_seen.append)
    inline_cache.request(refs(source, (2, 2))).release()
    moves = [(e.previous, e.current) for batch in batches for e in batch]
    assert moves == [
        (ChunkState.NEW, ChunkState.QUEUED),
        (ChunkState.QUEUED, ChunkState.LOADING),
        (ChunkState.LOADING, ChunkState.READY),
    ]
    assert stats_seen[-1].loads == 1


def test_wrong_shaped_chunk_fails_instead_of_showing_wrong_pixels(
    inline_cache: ChunkCache,
) -> None:
    class Truncating(ArraySource):
        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            return super().read_chunk(coords)[:-1]

    source = Truncating(np.zeros((8, 8)), chunks=(4, 4), name="t")
    (ref,) = refs(source, (0, 0))
    with inline_cache.request([ref]) as request:
        assert "source returned shape (3, 4), expected (4, 4)" in str(request.failed()[ref.key])


def test_closed_cache_refuses_requests(source: ArraySource) -> None:
    cache = ChunkCache(1 << 20)
    cache.close()
    cache.close()  # idempotent
    with pytest.raises(CacheClosedError, match="closed"):
        cache.request(refs(source, (0, 0)))
    with pytest.raises(CacheClosedError, match="closed"):
        cache.retry_failed()


def test_pinned_chunks_leave_the_lru_and_return_as_most_recent(source: ArraySource) -> None:
    """Eviction only walks unpinned chunks; an unpinned chunk counts as just used."""
    with ChunkCache(3 * CHUNK_BYTES, executor=InlineExecutor()) as cache:
        a, b, c, d = refs(source, (0, 0), (0, 1), (0, 2), (0, 3))
        pinned = cache.request([a])
        cache.request([b, c]).release()
        cache.lookup(a.key)  # pinned: not in the LRU order, nothing to update
        pinned.release()  # a is now the most recently used
        cache.request([d]).release()
        assert [cache.state(r.key) for r in (a, b, c, d)] == [
            ChunkState.READY,
            ChunkState.EVICTED,
            ChunkState.READY,
            ChunkState.READY,
        ]


def test_a_large_resident_view_is_copied_on_two_threads_and_equals_numpy() -> None:
    from napari_lazy_zarr.core.reading import array as array_module
    from napari_lazy_zarr.core.reading.array import ChunkedArray

    data = np.random.default_rng(5).integers(0, 2**31, size=(1100, 1100), dtype=np.uint32)
    assert data[3:1097, 1:].nbytes >= array_module._SPLIT_COPY_BYTES  # the split path runs
    source = ArraySource(data, chunks=(256, 256))
    with ChunkCache(64 << 20, executor=InlineExecutor()) as cache:
        array = ChunkedArray(source, cache)
        np.testing.assert_array_equal(array[3:1097, 1:].result(timeout=10), data[3:1097, 1:])
        np.testing.assert_array_equal(array[3:1097, 1:].result(timeout=10), data[3:1097, 1:])
