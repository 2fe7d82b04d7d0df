"""The cache bounded in time and work: close() that returns, cancellation, stuck reads,
eviction cost, validated arguments and bounded retrying.

Reads that hang are real: a source whose `read_chunk` blocks a real worker thread
on a condition until the test (or a cancellation) lets it go, bounded by a timeout.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr.core import (
    ArraySource,
    CacheClosedError,
    ChunkCache,
    ChunkedArray,
    ChunkRef,
    ChunkState,
    InlineExecutor,
    LoadCancelledError,
    LoadTimeoutError,
    ManualExecutor,
    RetryPolicy,
)
from napari_lazy_zarr.core.executors import DaemonExecutor
from napari_lazy_zarr.core.storage.retry import classify

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

WAIT = 10.0  # seconds any wait may take before the test fails (never reached when green)
DATA = np.arange(16 * 16, dtype=np.int32).reshape(16, 16)


class HungSource(ArraySource):
    """An `ArraySource` whose reads of the chunks in `hang` block until `release()`.

    Records which reads started and how many are in flight; a hung read gives
    up (raises) after `WAIT` seconds so no test can hang for ever.
    """

    def __init__(self, name: str, hang: Iterable[tuple[int, ...]] = ()) -> None:
        super().__init__(DATA, chunks=(4, 4), name=name)
        self.hang = set(hang)
        self.started: list[tuple[int, ...]] = []
        self.in_flight = 0
        self.released = False
        self.cancelled: set[tuple[int, ...]] = set()
        self.condition = threading.Condition()

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        with self.condition:
            self.started.append(coords)
            self.in_flight += 1
            self.condition.notify_all()
            try:
                if coords in self.hang and not self.condition.wait_for(
                    lambda: self.released or coords in self.cancelled, timeout=WAIT
                ):
                    raise TimeoutError(f"test source: chunk {coords} never released")
                if coords in self.cancelled:
                    self.cancelled.discard(coords)
                    raise LoadCancelledError(f"chunk {coords}: cancelled")
            finally:
                self.in_flight -= 1
                self.condition.notify_all()
        return super().read_chunk(coords)

    def wait_started(self, count: int, timeout: float = WAIT) -> bool:
        """Whether `count` reads have started within `timeout` seconds."""
        with self.condition:
            return self.condition.wait_for(lambda: len(self.started) >= count, timeout)

    def release(self) -> None:
        with self.condition:
            self.released = True
            self.condition.notify_all()


class CancellableHungSource(HungSource):
    """A `HungSource` that is a `CancellableSource`: `cancel_load` ends a hung read."""

    def __init__(self, name: str, hang: Iterable[tuple[int, ...]] = ()) -> None:
        super().__init__(name, hang)
        self.cancel_calls: list[tuple[int, ...]] = []

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        with self.condition:
            self.cancel_calls.append(coords)
            self.cancelled.add(coords)
            self.condition.notify_all()


@pytest.fixture
def new_threads() -> Iterator[list[threading.Thread]]:
    """The worker threads a test starts; they must all end by the test's end."""
    before = set(threading.enumerate())
    started: list[threading.Thread] = []
    yield started
    started.extend(t for t in threading.enumerate() if t not in before)
    for thread in started:
        if thread.name == "lazy-zarr-load":
            thread.join(timeout=WAIT)
            assert not thread.is_alive(), "a worker thread outlived its closed cache"


def moves(cache: ChunkCache, ref: ChunkRef) -> list[tuple[str, str, str]]:
    return [
        (e.previous.name, e.current.name, e.reason) for e in cache.events() if e.key == ref.key
    ]


# -- close() ---------------------------------------------------------------------------


def test_close_returns_at_once_and_wakes_a_blocked_result(
    new_threads: list[threading.Thread],
) -> None:
    source = HungSource("hung", hang={(0, 0)})
    cache = ChunkCache(1 << 20, concurrency=1)
    image = ChunkedArray(source, cache)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            image[:4, :4].result(timeout=WAIT)
        except BaseException as error:
            errors.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    assert source.wait_started(1)
    closer = threading.Thread(target=cache.close)
    closer.start()
    closer.join(timeout=WAIT)
    assert not closer.is_alive(), "close() waited for a read hung in storage"
    reader.join(timeout=WAIT)
    assert not reader.is_alive(), "result() was not woken by close()"
    assert len(errors) == 1
    assert isinstance(errors[0], CacheClosedError)
    # The hung read ends after close: its outcome is dropped, nothing visible changes.
    events = cache.events()
    source.release()
    new_threads.extend(t for t in threading.enumerate() if t.name == "lazy-zarr-load")
    for thread in new_threads:
        thread.join(timeout=WAIT)
    assert cache.events() == events
    assert cache.state(ChunkRef.of(source, (0, 0)).key) is ChunkState.LOADING
    with pytest.raises(CacheClosedError, match="closed"):
        image.result()


def test_close_wakes_landed_and_fails_done(new_threads: list[threading.Thread]) -> None:
    source = HungSource("hung", hang={(1, 1)})
    cache = ChunkCache(1 << 20, concurrency=2)
    request = cache.request([ChunkRef.of(source, c) for c in ((0, 0), (1, 1))])
    landed: list[Any] = []
    errors: list[BaseException] = []

    def iterate() -> None:
        try:
            landed.extend(request.landed(timeout=WAIT))
        except BaseException as error:
            errors.append(error)

    iterating = threading.Thread(target=iterate)
    iterating.start()
    assert source.wait_started(2)
    cache.close()
    iterating.join(timeout=WAIT)
    assert not iterating.is_alive()
    assert [type(e) for e in errors] == [CacheClosedError]
    with pytest.raises(CacheClosedError):
        request.done.result(timeout=WAIT)
    assert not request.complete
    request.release()  # releasing after close is harmless
    source.release()


def test_close_cancels_loads_of_cancellable_sources(
    new_threads: list[threading.Thread],
) -> None:
    source = CancellableHungSource("cancel", hang={(0, 0), (0, 1)})
    plain = HungSource("plain", hang={(0, 0)})
    cache = ChunkCache(1 << 20, concurrency=3)
    refs = [ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (0, 1)), ChunkRef.of(plain, (0, 0))]
    cache.request(refs)
    assert source.wait_started(2)
    assert plain.wait_started(1)
    cache.close()
    # Called on the closing thread, outside the lock; the reads end by themselves.
    assert sorted(source.cancel_calls) == [(0, 0), (0, 1)]
    with source.condition:
        assert source.condition.wait_for(lambda: source.in_flight == 0, timeout=WAIT)
    plain.release()
    assert {cache.state(r.key) for r in refs} == {ChunkState.LOADING}  # dropped, not FAILED


def test_close_with_an_injected_executor_leaves_it_usable() -> None:
    manual = ManualExecutor()
    source = HungSource("m")
    cache = ChunkCache(1 << 20, concurrency=1, executor=manual)
    cache.request([ChunkRef.of(source, (0, 0))])
    cache.close()
    assert manual.run_all() == 1  # the pending task finds the cache closed and stops
    assert source.started == []


def test_close_gives_back_the_memory_of_unpinned_chunks_at_once() -> None:
    """No cyclic collection needed: the arrays of chunks nobody pins are released by close,
    those a live request pins stay readable."""
    cache = ChunkCache(1 << 20, executor=InlineExecutor())
    source = ArraySource(DATA, chunks=(4, 4), name="m")
    loose, held = ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (1, 1))
    cache.request([loose]).release()
    pinning = cache.request([held])
    loose_data = cache.lookup(loose.key)
    assert loose_data is not None
    gone = weakref.ref(loose_data)
    del loose_data
    gc.disable()  # what is released must be released by close, not by a collection
    try:
        cache.close()
        assert gone() is None
    finally:
        gc.enable()
    assert cache.state(loose.key) is ChunkState.EVICTED
    np.testing.assert_array_equal(cache.lookup(held.key), DATA[4:8, 4:8])
    assert cache.statistics.resident_bytes == DATA[4:8, 4:8].nbytes
    pinning.release()  # after close: harmless


@pytest.mark.parametrize("close", [True, False])
def test_the_interpreter_exits_with_a_load_in_flight(close: bool) -> None:
    script = textwrap.dedent(
        f"""
        import threading
        import numpy as np
        from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef

        started = threading.Event()

        class Stuck(ArraySource):
            def read_chunk(self, coords):
                started.set()
                threading.Event().wait()  # storage that never answers

        cache = ChunkCache(1 << 20, concurrency=1)
        cache.request([ChunkRef.of(Stuck(np.zeros(8), chunks=(4,)), (0,))])
        assert started.wait(10)
        if {close}:
            cache.close()
        print("leaving")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "leaving"


# -- cancellation of superseded loads ------------------------------------------------------


def test_a_superseded_loading_chunk_is_cancelled_parked_and_loaded_again() -> None:
    source = CancellableHungSource("c", hang={(0, 0)})
    with ChunkCache(1 << 20, concurrency=1, stalled_after=None) as cache:
        a, b = ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (0, 1))
        first = cache.request([a], view="v")
        assert source.wait_started(1)
        second = cache.request([b], view="v")  # the view moved on
        assert first.done.cancelled()
        second.done.result(timeout=WAIT)  # the worker was freed for the new view
        assert source.cancel_calls == [(0, 0)]
        assert moves(cache, a) == [
            ("NEW", "QUEUED", "requested"),
            ("QUEUED", "LOADING", "started"),
            ("LOADING", "QUEUED", "cancelled"),
        ]
        assert cache.status(a.key).parked
        assert cache.statistics.failures == 0
        # Asked for again, it loads.
        source.hang.clear()
        third = cache.request([a], view="v")
        third.done.result(timeout=WAIT)
        np.testing.assert_array_equal(cache.lookup(a.key), DATA[:4, :4])
        third.release()


def test_any_error_of_a_cancelled_read_is_a_cancellation() -> None:
    """A source that fails its own way when cancelled: the chunk is parked, never FAILED."""

    class Aborting(CancellableHungSource):
        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            try:
                return super().read_chunk(coords)
            except LoadCancelledError:
                raise ConnectionAbortedError("connection closed by the client") from None

    source = Aborting("abort", hang={(0, 0)})
    with ChunkCache(1 << 20, concurrency=1, stalled_after=None) as cache:
        a, b = ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (0, 1))
        cache.request([a], view="v")
        assert source.wait_started(1)
        cache.request([b], view="v").done.result(timeout=WAIT)
        assert moves(cache, a)[-1] == ("LOADING", "QUEUED", "cancelled")
        assert cache.statistics.failures == 0


def test_a_loading_chunk_still_wanted_is_not_cancelled() -> None:
    source = CancellableHungSource("w", hang={(0, 0)})
    with ChunkCache(1 << 20, concurrency=1, stalled_after=None) as cache:
        a, b = ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (1, 1))
        cache.request([a], view="v")
        assert source.wait_started(1)
        cache.request([], view="w", prefetch=[a])  # another view wants it (not pinned)
        pinned = cache.request([a], view="p")  # and a third pins it
        cache.request([b], view="v")  # v moves on: a is still wanted
        assert source.cancel_calls == []
        pinned.release()
        assert source.cancel_calls == []  # w still wants it
        cache.release_view("w")
        assert source.cancel_calls == [(0, 0)]
        with source.condition:
            assert source.condition.wait_for(lambda: source.in_flight == 0, timeout=WAIT)


def test_a_cancelled_load_still_pinned_is_queued_again() -> None:
    """A source may cancel on its own (e.g. a dask cluster restart): a pinned chunk reloads."""
    source = HungSource("self-cancelling")
    source.cancelled.add((0, 0))  # its first read raises LoadCancelledError
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        ref = ChunkRef.of(source, (0, 0))
        with cache.request([ref]) as request:
            assert request.complete
            assert [m[1:] for m in moves(cache, ref)] == [
                ("QUEUED", "requested"),
                ("LOADING", "started"),
                ("QUEUED", "cancelled"),
                ("LOADING", "started"),
                ("READY", "loaded"),
            ]


def test_a_source_names_its_loading_reason() -> None:
    class Computed(ArraySource):
        load_reason = "computing"

    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        ref = ChunkRef.of(Computed(DATA, chunks=(4, 4), name="f"), (0, 0))
        cache.request([ref]).release()
        assert ("QUEUED", "LOADING", "computing") in moves(cache, ref)


# -- one stuck read never blocks other views -------------------------------------------------


def test_a_hung_read_does_not_block_the_chunks_of_another_view() -> None:
    stuck = HungSource("stuck", hang={(0, 0)})
    other = HungSource("other")
    with ChunkCache(1 << 20, concurrency=1, stalled_after=0.05) as cache:
        cache.request([ChunkRef.of(stuck, (0, 0))], view="stuck")
        assert stuck.wait_started(1)
        wanted = [ChunkRef.of(other, (r, c)) for r in range(2) for c in range(2)]
        request = cache.request(wanted, view="other")
        request.done.result(timeout=WAIT)
        assert cache.state(ChunkRef.of(stuck, (0, 0)).key) is ChunkState.LOADING
        assert cache.concurrency == 1
        stuck.release()


def test_stalled_loads_set_aside_are_capped() -> None:
    source = HungSource("many", hang={(r, c) for r in range(4) for c in range(4)})
    with ChunkCache(1 << 20, concurrency=1, stalled_after=0.01) as cache:
        request = cache.request([ChunkRef.of(source, (r, c)) for r in range(4) for c in range(4)])
        # One counted load plus at most max(8, 2 * 1) set aside.
        assert source.wait_started(9)
        assert not source.wait_started(10, timeout=0.5)
        with source.condition:
            assert source.in_flight == 9
        source.release()
        request.done.result(timeout=WAIT)
        assert request.complete
        assert cache.statistics.states[ChunkState.READY] == 16
        request.release()


# -- eviction cost -------------------------------------------------------------------------


def test_eviction_work_stays_linear_when_pinned_chunks_exceed_the_limit() -> None:
    """8,100 pinned chunks over a 10-chunk limit: each landing looks at O(1) LRU entries.

    Counts the entries eviction visits (not wall time): a scan of the whole LRU
    per landing would visit ~n^2 / 2 = 33 million.
    """
    data = np.zeros((360, 360), dtype=np.uint8)
    source = ArraySource(data, chunks=(4, 4), name="big")
    refs = [ChunkRef.of(source, (r, c)) for r in range(90) for c in range(90)]
    with ChunkCache(10 * 16, executor=InlineExecutor()) as cache:
        warm = [
            ChunkRef.of(ArraySource(data, chunks=(4, 4), name="warm"), (0, c)) for c in range(20)
        ]
        cache.request(warm).release()  # 10 unpinned chunks resident, 10 evicted
        with cache.request(refs) as request:
            assert request.complete
            stats = cache.statistics
            assert stats.pinned_bytes == stats.resident_bytes == 8100 * 16
        assert cache.statistics.resident_bytes <= 10 * 16
        visits, evictions = cache._lru_visits, cache.statistics.evictions
    assert visits == evictions  # one visit per chunk evicted, none for pinned ones
    assert evictions == 10 + 10 + 8100 - 10


# -- validated arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [(2.5, TypeError), ("4", TypeError), (True, TypeError), (0, ValueError), (-1, ValueError)],
)
def test_concurrency_must_be_an_int_of_at_least_one(value: Any, error: type) -> None:
    with pytest.raises(error, match=rf"concurrency must be an int >= 1, got {value!r}"):
        ChunkCache(1 << 20, concurrency=value)
    with ChunkCache(1 << 20, concurrency=np.int64(3)) as cache:  # type: ignore[arg-type]
        assert cache.concurrency == 3
        with pytest.raises(error, match="concurrency"):
            cache.concurrency = value
        assert cache.concurrency == 3


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("nan"), TypeError),
        (float("inf"), TypeError),
        (1e9, TypeError),
        ("1GiB", TypeError),
        (None, TypeError),
        (-1, ValueError),
    ],
)
def test_total_bytes_limit_must_be_an_int_of_at_least_zero(value: Any, error: type) -> None:
    with pytest.raises(error, match="total_bytes_limit must be an int >= 0, got"):
        ChunkCache(value)
    with ChunkCache(0) as cache:
        with pytest.raises(error, match="total_bytes_limit"):
            cache.total_bytes_limit = value
        assert cache.total_bytes_limit == 0


# -- retrying, bounded ---------------------------------------------------------------------


class BusyError(ConnectionError):
    """A transient failure carrying a server's Retry-After, as the HTTP store raises it."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"503 Service Unavailable, Retry-After {retry_after} s")
        self.retry_after = retry_after


def test_retry_after_replaces_the_backoff() -> None:
    calls: list[int] = []

    def busy_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ChunkLikeError("chunk c/0: read failed") from BusyError(0.0)
        return "data"

    # A 60-s backoff would make this test time out; the server asked for 0 s.
    policy = RetryPolicy(attempts=2, base_delay=60.0, max_delay=60.0)
    assert policy.call(busy_once) == "data"
    assert len(calls) == 2
    assert RetryPolicy(max_retry_after=0.5).wait_before_retry(1, BusyError(30.0)) == 0.5


class ChunkLikeError(OSError):
    """A wrapping error, as a source raises around the store's."""


def test_a_retry_after_beyond_the_cap_fails_now() -> None:
    calls: list[int] = []

    def busy() -> None:
        calls.append(1)
        raise BusyError(3600.0)

    with pytest.raises(BusyError):
        RetryPolicy(attempts=4, max_retry_after=10.0).call(busy)
    assert len(calls) == 1  # an hour's wait is not held in a worker: it fails at once


def test_retrying_never_outlasts_the_deadline() -> None:
    calls: list[int] = []

    def busy() -> None:
        calls.append(1)
        raise BusyError(5.0)

    with pytest.raises(BusyError):
        RetryPolicy(attempts=10, deadline=1.0).call(busy)
    assert len(calls) == 1  # waiting 5 s would pass the 1-s deadline: not retried


def test_a_load_timeout_is_retried() -> None:
    assert classify(LoadTimeoutError("chunk c/0/0: no byte for 30 s")) == "transient"
    calls: list[int] = []

    def slow_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise LoadTimeoutError("chunk c/0/0: no byte for 30 s")
        return "data"

    assert RetryPolicy(base_delay=0.0).call(slow_once) == "data"


@pytest.mark.parametrize(
    "arguments",
    [{"attempts": 0}, {"attempts": 2.5}, {"deadline": float("nan")}, {"max_retry_after": -1.0}],
)
def test_retry_policy_arguments_are_checked(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=f"RetryPolicy.{next(iter(arguments))}"):
        RetryPolicy(**arguments)


# -- the cache's own workers ---------------------------------------------------------------


def test_daemon_executor_threads_end_when_idle_or_shut_down() -> None:
    executor = DaemonExecutor(name="test-daemon-executor", idle_seconds=0.05)
    ran = threading.Event()
    executor.submit(ran.set)
    assert ran.wait(WAIT)
    (worker,) = [t for t in threading.enumerate() if t.name == "test-daemon-executor"]
    assert worker.daemon
    worker.join(timeout=WAIT)  # idle for 0.05 s: it ends
    assert not worker.is_alive()
    assert executor.threads == 0
    gate = threading.Event()
    executor.submit(lambda: gate.wait(WAIT))
    executor.shutdown()  # returns while the task still runs
    assert executor.threads == 1
    (worker,) = [t for t in threading.enumerate() if t.name == "test-daemon-executor"]
    gate.set()
    worker.join(timeout=WAIT)  # and the thread ends with it
    assert executor.threads == 0
