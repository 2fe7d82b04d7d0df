"""The cache's bookkeeping is bounded: chunks nothing holds are forgotten (issue 22).

An entry costs ~700 B whatever its chunk's size: a cache that kept one per chunk ever
touched grew without bound under a small byte limit. Of the EVICTED chunks only the most
recent `EVICTED_KEPT` are remembered, and `ChunkCache.discard` forgets a removed layer's.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from napari_lazy_zarr.core import (
    ArraySource,
    ChunkCache,
    ChunkedArray,
    ChunkKey,
    ChunkRef,
    ChunkState,
)
from napari_lazy_zarr.core.cache._events import EventLog
from napari_lazy_zarr.core.cache._residency import EVICTED_KEPT
from napari_lazy_zarr.core.executors import InlineExecutor, ManualExecutor
from napari_lazy_zarr.core.states import ChunkEvent, EventReason

WAIT = 30.0


def test_touched_chunks_under_a_small_limit_leave_bounded_bookkeeping() -> None:
    """20,000 chunks of 64 B read through a 4 KiB cache: entries stay at EVICTED_KEPT plus
    what is resident, and the memory with them."""
    rows = 20_000
    data = np.arange(rows * 16, dtype="u4").reshape(rows, 16)
    source = ArraySource(data, chunks=(1, 16), name="touched")
    with ChunkCache(4096, executor=InlineExecutor()) as cache:
        image = ChunkedArray(source, cache)
        tracemalloc.start()
        try:
            base, _ = tracemalloc.get_traced_memory()
            for start in range(0, rows, 100):
                np.testing.assert_array_equal(
                    image[start : start + 100].result(timeout=WAIT), data[start : start + 100]
                )
            grown, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        states = cache.states()
        assert len(states) <= EVICTED_KEPT + 4096 // 64 + 1
        assert sum(s is ChunkState.EVICTED for s in states.values()) <= EVICTED_KEPT
        assert cache.statistics.states[ChunkState.EVICTED] <= EVICTED_KEPT
        assert cache._residency.forgotten >= rows - len(states)
        # ~700 B an entry: 20,000 kept would be ~14 MiB; 4,096 are ~3 MiB.
        assert grown - base < 6 << 20, f"+{(grown - base) / 2**20:.1f} MiB of bookkeeping"
        # A forgotten chunk is read again when asked for.
        np.testing.assert_array_equal(image[:3].result(timeout=WAIT), data[:3])


def test_discard_forgets_a_removed_sources_chunks_but_not_what_is_held() -> None:
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    gone = ArraySource(data, chunks=(16, 16), name="removed-layer")
    kept = ArraySource(data, chunks=(16, 16), name="other-layer")
    executor = ManualExecutor()
    with ChunkCache(1 << 20, executor=executor) as cache:
        ChunkedArray(gone, cache)[:, :].read_nonblocking(requester="old")
        ChunkedArray(kept, cache)[:, :].read_nonblocking(requester="other")
        executor.run_all()
        cache.release_view("old")
        pinned = cache.request([ChunkRef.of(gone, (0, 0))])  # still held by a live request
        assert cache.discard([gone.identity]) == 15
        states = cache.states()
        assert {k for k in states if k.source == gone.identity} == {pinned.keys[0]}
        assert sum(k.source == kept.identity for k in states) == 16
        assert cache.statistics.resident_bytes == 17 * 16 * 16 * 2
        assert cache.statistics.states[ChunkState.READY] == 17
        pinned.release()
        # Added back (napari's `viewer.add_layer(layer)`), it is read again.
        again = ChunkedArray(gone, cache)[:, :].read_nonblocking(requester="again")
        executor.run_all()
        again.request.done.result(timeout=WAIT)
        np.testing.assert_array_equal(ChunkedArray(gone, cache)[:, :].result(timeout=WAIT), data)


def test_discard_forgets_parked_chunks() -> None:
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    gone = ArraySource(data, chunks=(16, 16), name="parked-layer")
    executor = ManualExecutor()
    with ChunkCache(1 << 20, concurrency=1, executor=executor) as cache:
        ChunkedArray(gone, cache)[:, :].read_nonblocking(requester="view")
        cache.release_view("view")  # its queued chunks go stale: parked when popped
        executor.run_all()
        assert cache.statistics.parked == 16
        assert cache.discard([gone.identity]) == 16
        assert cache.states() == {}
        assert cache.statistics.parked == 0
        assert cache.statistics.states[ChunkState.QUEUED] == 0


# -- the event log keeps columns, not event objects ------------------------------------


def _live_events() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, ChunkEvent))


def test_the_event_log_keeps_no_event_object_alive() -> None:
    """Kept as objects, the log's last 10,000 events reached the collector's oldest generation
    and brought on full collections (10.6-12.7 µs a chunk, measured); as columns, an event
    object lives only until it is emitted, and `events()` makes equal ones again."""
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    source = ArraySource(data, chunks=(4, 4), name="logged")  # 256 chunks
    heard: list[ChunkEvent] = []
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        cache.state_changed.connect(heard.extend)
        np.testing.assert_array_equal(ChunkedArray(source, cache)[:, :].result(timeout=WAIT), data)
        cache.state_changed.disconnect(heard.extend)
        logged = cache.events()
        assert logged == tuple(heard)  # equal events, in order
        assert len(logged) == 3 * 256  # NEW -> QUEUED -> LOADING -> READY per chunk
        del logged, heard
        gc.collect()
        assert _live_events() == 0, "the cache keeps ChunkEvent objects alive"


def test_the_event_log_keeps_the_latest_in_order() -> None:
    key = ChunkKey("s", (0,), (4,))

    def event(t: float) -> ChunkEvent:
        return ChunkEvent(key, ChunkState.NEW, ChunkState.QUEUED, EventReason.REQUESTED, t)

    for size in (0, 1, 3):
        log = EventLog(size)
        for t in range(7):
            log.append(event(float(t)))
            kept = [e.time for e in log.events()]
            assert kept == [float(x) for x in range(max(0, t + 1 - size), t + 1)]
            assert len(log) == len(kept)
    failed = ChunkEvent(key, ChunkState.LOADING, ChunkState.FAILED, EventReason.FAILED, 1.0,
                        OSError("disk"))  # fmt: skip
    log = EventLog(2)
    log.append(failed)
    (again,) = log.events()
    assert again == failed
    assert again.error is failed.error
    with pytest.raises(ValueError, match="event_log_size"):
        EventLog(-1)
