"""Real threads: concurrent viewports against one small cache, bounded in time."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr.core import (
    ArraySource,
    ChunkCache,
    ChunkedArray,
    ChunkState,
    executors,
    open_zarr_source,
)
from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.errors import ChunkReadError, LazyZarrError, LoadCancelledError
from napari_lazy_zarr.core.executors import (
    DaemonExecutor,
    InlineExecutor,
    SerialDispatch,
    ThreadStartError,
)
from napari_lazy_zarr.core.sources.decimated import virtual_levels
from napari_lazy_zarr.core.testing import FaultySource

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    MakeStore = Callable[..., tuple[Path, np.ndarray[Any, Any]]]

READERS = 4
DURATION = 2.0  # seconds of concurrent reading; the join below bounds the test


def test_concurrent_viewports_equal_numpy(make_store: MakeStore) -> None:
    path, data = make_store(shape=(300, 400), chunks=(32, 48))
    source = open_zarr_source(path)
    # Room for ~12 of 130 chunks: constant eviction under concurrent pinning.
    with ChunkCache(12 * 32 * 48 * 2, concurrency=3) as cache:
        image = ChunkedArray(source, cache)
        errors: list[BaseException] = []
        reads = [0] * READERS
        stop = time.monotonic() + DURATION

        def reader(index: int) -> None:
            rng = np.random.default_rng(index)
            try:
                while time.monotonic() < stop:
                    y, x = rng.integers(0, 250), rng.integers(0, 350)
                    h, w = rng.integers(1, 120), rng.integers(1, 120)
                    step = int(rng.choice([1, 2, -1]))
                    selection = (slice(y, y + h), slice(x, x + w, step))
                    if index % 2:
                        got = image[selection].result(timeout=30)
                    else:
                        partial = image[selection].read_nonblocking(requester=("reader", index))
                        partial.request.done.result(timeout=30)
                        got = image[selection].result(timeout=30)
                    np.testing.assert_array_equal(got, data[selection])
                    reads[index] += 1
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=DURATION + 60)
        assert not any(t.is_alive() for t in threads), "deadlock: a reader never finished"
        assert not errors, errors[0]
        assert all(count > 0 for count in reads)
        stats = cache.statistics
        assert stats.evictions > 0
        assert stats.resident_bytes <= stats.total_bytes_limit + stats.pinned_bytes
        assert stats.states[ChunkState.LOADING] == 0


def test_faults_under_threads_fail_only_their_chunks(make_store: MakeStore) -> None:
    path, data = make_store(shape=(128, 128), chunks=(16, 16))
    faulty = FaultySource(open_zarr_source(path), failing={(2, 3), (5, 5)})
    with ChunkCache(1 << 20, concurrency=2) as cache:
        image = ChunkedArray(faulty, cache)  # type: ignore[arg-type]
        partial = image.read_nonblocking(placeholder=0)
        partial.request.done.result(timeout=30)
        failed = partial.request.failed()
        assert {k.inclusive_min for k in failed} == {(32, 48), (80, 80)}
        shown = image.read_nonblocking(placeholder=0).data
        expected = data.copy()
        expected[32:48, 48:64] = 0
        expected[80:96, 80:96] = 0
        np.testing.assert_array_equal(shown, expected)
        faulty.failing.clear()
        assert cache.retry_failed() == 2
        np.testing.assert_array_equal(image.result(timeout=30), data)


def test_concurrent_reads_of_virtual_levels_equal_numpy() -> None:
    """Readers of every level share stored chunks and derived chunks under eviction."""
    data = np.arange(200 * 240, dtype=np.int32).reshape(200, 240)
    levels = virtual_levels(
        ArraySource(data, chunks=(16, 24), name="v"), smallest=16, chunk_size=8
    )
    assert len(levels) == 5
    # Room for a few dozen of the 125 stored chunks: inputs are evicted while others wait.
    with ChunkCache(40 * 16 * 24 * 4, concurrency=3) as cache:
        errors: list[BaseException] = []
        reads = [0] * READERS
        stop = time.monotonic() + DURATION

        def reader(index: int) -> None:
            rng = np.random.default_rng(index)
            try:
                while time.monotonic() < stop:
                    k = int(rng.integers(0, len(levels)))
                    level = ChunkedArray(levels[k], cache)
                    expected = data[:: 2**k, :: 2**k]
                    h, w = expected.shape
                    y, x = int(rng.integers(0, h)), int(rng.integers(0, w))
                    selection = (slice(y, y + int(rng.integers(1, 40))), slice(x, None, 2))
                    if index % 2:
                        got = level[selection].result(timeout=30)
                    else:
                        partial = cache.request(
                            level[selection].chunk_refs(),
                            view=("reader", index),
                            level=k,
                            load_class=LoadClass.OVERVIEW if k == 4 else LoadClass.NEEDED,
                        )
                        partial.done.result(timeout=30)
                        got = level[selection].result(timeout=30)
                        partial.release()
                    np.testing.assert_array_equal(got, expected[selection])
                    reads[index] += 1
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=DURATION + 60)
        assert not any(t.is_alive() for t in threads), "deadlock: a reader never finished"
        assert not errors, errors[0]
        assert all(count > 0 for count in reads)
        stats = cache.statistics
        assert stats.evictions > 0
        assert stats.states[ChunkState.LOADING] == 0
        assert stats.deferred == 0


class SlowCancellableSource(ArraySource):
    """Reads take up to `latency` seconds and end at once, cancelled, when asked to."""

    def __init__(self, data: np.ndarray[Any, Any], latency: float) -> None:
        super().__init__(data, chunks=(16, 16), name="slow")
        self.latency = latency
        self._lock = threading.Lock()
        self._cancels: dict[tuple[int, ...], threading.Event] = {}
        self.cancelled = 0
        self.started = 0  # reads begun so far
        self._started_changed = threading.Condition(self._lock)

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        with self._lock:
            event = self._cancels.setdefault(coords, threading.Event())
            self.started += 1
            self._started_changed.notify_all()
        if event.wait(self.latency):  # storage latency, cut short by a cancel
            with self._lock:
                del self._cancels[coords]
                self.cancelled += 1
            raise LoadCancelledError(f"chunk {coords}: cancelled")
        with self._lock:
            self._cancels.pop(coords, None)
        return super().read_chunk(coords)

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        with self._lock:
            event = self._cancels.get(coords)
        if event is not None:
            event.set()

    def wait_for_reads_beyond(self, count: int, timeout: float) -> None:
        """Wait (at most `timeout`) until more than `count` reads have begun."""
        with self._lock:
            self._started_changed.wait_for(lambda: self.started > count, timeout=timeout)


def test_views_moving_on_cancel_loads_and_never_show_wrong_pixels() -> None:
    data = np.arange(256 * 256, dtype=np.int32).reshape(256, 256)
    source = SlowCancellableSource(data, latency=0.02)
    with ChunkCache(64 * 16 * 16 * 4, concurrency=2) as cache:
        image = ChunkedArray(source, cache)
        errors: list[BaseException] = []
        reads = [0] * READERS
        stop = time.monotonic() + DURATION

        def reader(index: int) -> None:
            rng = np.random.default_rng(index)
            try:
                while time.monotonic() < stop:
                    y, x = rng.integers(0, 200, size=2)
                    selection = (slice(y, y + 56), slice(x, x + 56))
                    begun = source.started
                    # Pan: each read supersedes the view's previous one (and its loads).
                    partial = image[selection].read_nonblocking(requester=("pan", index))
                    if reads[index] % 8 == 7:
                        np.testing.assert_array_equal(
                            image[selection].result(timeout=30), data[selection]
                        )
                    elif partial.complete:
                        np.testing.assert_array_equal(partial.data, data[selection])
                    else:
                        # Move on once a read is under way, as a user panning on does:
                        # the next view supersedes it while it is in flight.
                        source.wait_for_reads_beyond(begun, timeout=1.0)
                    reads[index] += 1
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=DURATION + 60)
        assert not any(t.is_alive() for t in threads), "deadlock: a reader never finished"
        assert not errors, errors[0]
        assert source.cancelled > 0, "no load was cancelled: the test did not exercise it"
        stats = cache.statistics
        assert stats.failures == 0  # a cancelled load is never FAILED
        for index in range(READERS):
            cache.release_view(("pan", index))
        np.testing.assert_array_equal(image.result(timeout=60), data)


# -- every load finishes (issue 22) ---------------------------------------------------------

WAIT = 30.0


class _NoThreads(threading.Thread):
    """A thread that cannot start, as under a thread or memory limit.

    A real start failure (RLIMIT_NPROC is per user: it would hit the other processes of
    the machine) cannot be provoked safely here, so this subclass is patched in for
    `threading.Thread` while a test says so.
    """

    def start(self) -> None:
        raise RuntimeError("can't start new thread")


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    """`allow(False)` makes every new thread fail to start, `allow(True)` undoes it; idle
    threads of the shared pool are set aside so the cache needs new ones."""
    monkeypatch.setattr(executors, "_pool", executors.WorkerPool())
    original = threading.Thread

    def allow(allowed: bool) -> None:
        monkeypatch.setattr(threading, "Thread", original if allowed else _NoThreads)

    yield allow
    monkeypatch.setattr(threading, "Thread", original)


def test_a_failed_thread_start_fails_the_read_and_a_later_read_succeeds(
    thread_starts: Callable[[bool], None],
) -> None:
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    source = ArraySource(data, chunks=(16, 16), name="no-threads")
    with ChunkCache(1 << 20, concurrency=2) as cache:
        image = ChunkedArray(source, cache)
        thread_starts(False)
        with pytest.raises(LazyZarrError, match="can't start new thread"):
            image[:32, :32].result(timeout=WAIT)  # an error, at once: no stall
        assert cache._scheduler.active_tasks == 0  # the counts were given back
        assert cache._owned_executor is not None
        assert cache._owned_executor.threads == 0
        key = next(iter(cache.states()))
        error = cache.error(key)
        assert isinstance(error, ChunkReadError)
        assert "no worker thread could start" in str(error)
        thread_starts(True)
        # Asked for again, the chunks that failed for want of a thread are read.
        np.testing.assert_array_equal(image[:32, :32].result(timeout=WAIT), data[:32, :32])
        assert cache.statistics.states[ChunkState.LOADING] == 0


def test_a_failed_thread_start_while_workers_run_fails_nothing(
    thread_starts: Callable[[bool], None],
) -> None:
    """One worker runs: the task that could not start is given back, the worker drains
    the queue."""
    gate = threading.Event()

    class Gated(ArraySource):
        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            gate.wait(WAIT)
            return super().read_chunk(coords)

    data = np.arange(32 * 32, dtype="u2").reshape(32, 32)
    with ChunkCache(1 << 20, concurrency=4) as cache:
        image = ChunkedArray(Gated(data, chunks=(16, 16), name="gated"), cache)
        first = image[:16, :16].read_nonblocking(
            requester="first"
        )  # one worker starts, and waits at the gate
        thread_starts(False)
        rest = image[:, :].read_nonblocking(
            requester="rest"
        )  # more workers wanted: none can start
        thread_starts(True)
        gate.set()
        first.request.done.result(timeout=WAIT)
        rest.request.done.result(timeout=WAIT)
        np.testing.assert_array_equal(image[:, :].result(timeout=WAIT), data)
        assert cache.statistics.failures == 0


def test_daemon_executor_gives_back_a_thread_that_could_not_start(
    thread_starts: Callable[[bool], None],
) -> None:
    executor = DaemonExecutor(name="lazy-zarr-test")
    thread_starts(False)
    with pytest.raises(ThreadStartError, match="can't start new thread"):
        executor.submit(lambda: None)
    assert executor.threads == 0
    thread_starts(True)
    ran = threading.Event()
    executor.submit(ran.set)
    assert ran.wait(WAIT)
    executor.shutdown()


class _Interrupting(ArraySource):
    """Raises `interrupt` for the chunks in `failing`, once each."""

    def __init__(self, data: np.ndarray[Any, Any], interrupt: type[BaseException]) -> None:
        super().__init__(data, chunks=(16, 16), name=f"interrupt-{interrupt.__name__}")
        self.interrupt = interrupt
        self.failing = {(0, 0)}

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        if coords in self.failing:
            self.failing.discard(coords)
            raise self.interrupt("stop")
        return super().read_chunk(coords)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_a_worker_fails_its_chunk_and_the_worker_goes_on(
    interrupt: type[BaseException],
) -> None:
    data = np.arange(32 * 32, dtype="u2").reshape(32, 32)
    source = _Interrupting(data, interrupt)
    with ChunkCache(1 << 20, concurrency=1) as cache:
        image = ChunkedArray(source, cache)
        image[:, :].read_nonblocking().request.done.result(timeout=WAIT)  # every load ends
        with pytest.raises(ChunkReadError, match=f"interrupted \\({interrupt.__name__}"):
            image[:, :].result(timeout=WAIT)  # FAILED, not LOADING for good
        assert cache.statistics.states[ChunkState.LOADING] == 0
        assert cache.statistics.states[ChunkState.READY] == 3  # the worker went on
        assert cache.retry_failed() == 1
        np.testing.assert_array_equal(image[:, :].result(timeout=WAIT), data)


def test_an_interrupt_of_an_inline_read_is_raised_on_the_callers_thread() -> None:
    data = np.arange(32 * 32, dtype="u2").reshape(32, 32)
    source = _Interrupting(data, KeyboardInterrupt)
    with ChunkCache(1 << 20, concurrency=2, executor=InlineExecutor()) as cache:
        image = ChunkedArray(source, cache)
        with pytest.raises(KeyboardInterrupt):
            image[:, :].read_nonblocking()  # Ctrl-C reaches the script
        states = cache.statistics.states
        assert states[ChunkState.LOADING] == 0
        assert states[ChunkState.FAILED] == 1
        assert cache._scheduler.active_tasks == 0  # every task given back
        cache.retry_failed()
        np.testing.assert_array_equal(image[:, :].result(timeout=WAIT), data)


def test_arrays_dropped_without_close_hold_no_threads() -> None:
    """500 open/read/drop cycles: the thread count stays flat (idle threads are shared)."""
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    before = threading.active_count()
    peak = before
    for index in range(500):
        cache = ChunkCache(1 << 20, concurrency=4)
        image = ChunkedArray(ArraySource(data, chunks=(16, 16), name=f"drop-{index}"), cache)
        np.testing.assert_array_equal(image[:, :].result(timeout=WAIT), data)
        del image, cache  # no close()
        peak = max(peak, threading.active_count())
    assert peak - before <= 8, f"threads {before} -> peak {peak} over 500 dropped arrays"
    executors.worker_pool().trim()  # the idle ones end at once (as after a close)


def test_serial_dispatch_that_cannot_start_its_thread_tries_again(
    thread_starts: Callable[[bool], None],
) -> None:
    dispatch = SerialDispatch("lazy-zarr-test-dispatch")
    thread_starts(False)
    with pytest.raises(ThreadStartError, match="can't start new thread"):
        dispatch.submit(lambda: None)
    thread_starts(True)
    ran = threading.Event()
    dispatch.submit(ran.set)  # not wedged by the failed start
    assert ran.wait(WAIT)
    dispatch.close()


# -- the stall watchdog's alarms: one thread for every arming ---------------------------


def _clock() -> executors.AlarmClock:
    return executors.AlarmClock("lazy-zarr-test-alarms", linger=WAIT)


def test_an_alarm_rings_at_its_deadline_and_every_arming_rings_on_one_thread() -> None:
    clock = _clock()
    rings: list[tuple[float, int]] = []
    rang = threading.Semaphore(0)

    def ring() -> None:
        rings.append((time.perf_counter(), threading.get_ident()))
        rang.release()

    alarm = executors.Alarm(ring, clock=clock)
    deadlines = []
    for _ in range(5):
        deadlines.append(time.perf_counter() + 0.01)
        alarm.arm(deadlines[-1])
        assert rang.acquire(timeout=WAIT)
    assert len(rings) == 5
    assert all(at >= deadline for (at, _), deadline in zip(rings, deadlines, strict=True))
    assert len({ident for _, ident in rings}) == 1  # not a thread per alarm
    thread = clock.thread
    assert thread is not None
    assert thread.ident == rings[0][1]
    alarm.close()
    thread.join(WAIT)  # closed with none armed: the thread ends at once, not after linger
    assert not thread.is_alive()


def test_a_disarmed_alarm_never_rings_and_a_later_arm_keeps_the_earlier_deadline() -> None:
    clock = _clock()
    disarmed_rang = threading.Event()
    rang = threading.Event()
    disarmed = executors.Alarm(disarmed_rang.set, clock=clock)
    alarm = executors.Alarm(rang.set, clock=clock)
    now = time.perf_counter()
    disarmed.arm(now + 0.02)
    disarmed.disarm()
    alarm.arm(now + 0.05)
    alarm.arm(now + 10 * WAIT)  # later than the one armed: the earlier stands
    assert rang.wait(WAIT)
    # The clock rings in deadline order: the disarmed deadline (earlier) has been passed.
    assert not disarmed_rang.is_set()
    assert not alarm.armed
    disarmed.close()
    alarm.close()


def test_an_alarm_keeps_no_owner_alive_and_one_dropped_unclosed_lets_the_thread_end() -> None:
    import gc
    import weakref

    clock = _clock()

    class Owner:
        def fire(self) -> None:  # pragma: no cover - never due
            raise AssertionError("rang after its owner was collected")

    owner = Owner()
    alarm = executors.Alarm(owner.fire, clock=clock)
    alarm.arm(time.perf_counter() + 10 * WAIT)
    thread = clock.thread
    assert thread is not None
    assert thread.is_alive()
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None  # the armed alarm did not keep it
    del alarm  # never closed
    gc.collect()
    thread.join(WAIT)
    assert not thread.is_alive()


def test_cold_reads_behind_a_busy_worker_start_no_watchdog_thread_each() -> None:
    """The watchdog is armed about once per cold read here; one thread serves every arming
    (a `threading.Timer` each started a thread per read, ~0.6 ms of a 25-chunk read)."""
    data = np.arange(256 * 256, dtype="u2").reshape(256, 256)
    source = ArraySource(data, chunks=(32, 32), name="watchdog")
    threads = []
    with ChunkCache(1 << 22, concurrency=1) as cache:
        image = ChunkedArray(source, cache)
        for _ in range(10):
            cache.evict_unpinned()
            np.testing.assert_array_equal(image[:, :].result(timeout=WAIT), data)
            threads.append(executors.ALARMS.thread)
    armed = [thread for thread in threads if thread is not None]
    assert armed, "the watchdog was never armed: the test measures nothing"
    assert all(thread is armed[0] for thread in armed)


def test_an_alarm_whose_thread_cannot_start_rings_once_rearmed_after_a_disarm(
    thread_starts: Callable[[bool], None],
) -> None:
    clock = _clock()
    rang = threading.Event()
    alarm = executors.Alarm(rang.set, clock=clock)
    thread_starts(False)
    with pytest.raises(ThreadStartError, match="can't start new thread"):
        alarm.arm(time.perf_counter() + 0.01)
    assert alarm.armed  # armed, with no thread to ring it
    assert clock.thread is None
    thread_starts(True)
    alarm.disarm()  # as the watchdog does when its queue empties
    alarm.arm(time.perf_counter() + 0.01)
    assert rang.wait(WAIT)
    alarm.close()


# -- the one worker pool ------------------------------------------------------------------


def _run_script(code: str) -> str:
    import subprocess
    import sys
    import textwrap

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_interpreter_exits_with_pool_work_still_running() -> None:
    """Daemon threads, never joined at exit: a fan-out's, a dask pool's or a cache's task
    stuck in storage does not hold up the end of the program (a `ThreadPoolExecutor`'s
    would: the interpreter joins its workers)."""
    out = _run_script(
        """
        import threading
        from napari_lazy_zarr.core.executors import DaemonExecutor, PoolExecutor, worker_pool

        forever = threading.Event()
        started = threading.Semaphore(0)

        def stuck():
            started.release()
            forever.wait()

        worker_pool().run(stuck, name="lazy-zarr-stuck")
        DaemonExecutor(name="lazy-zarr-stuck-load").submit(stuck)
        PoolExecutor(2, name="lazy-zarr-stuck-dask").submit(stuck)
        for _ in range(3):
            assert started.acquire(timeout=30)
        print("exiting with 3 tasks running")
        """
    )
    assert "exiting with 3 tasks running" in out


def test_a_forked_child_runs_its_work_on_a_pool_of_its_own() -> None:
    """The parent's parked threads do not exist in a forked child: handed work, they would
    never run it."""
    out = _run_script(
        """
        import os, threading, time, warnings
        from napari_lazy_zarr.core.executors import run_concurrently, worker_pool

        assert run_concurrently(abs, [-1, -2, -3], concurrency=3, name="lazy-zarr-x") == [1, 2, 3]
        deadline = time.monotonic() + 30
        while worker_pool().idle < 2 and time.monotonic() < deadline:
            threading.Event().wait(0.01)  # the fan-out's threads park
        assert worker_pool().idle >= 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            child = os.fork()
        if child == 0:
            ran = threading.Event()
            worker_pool().run(ran.set, name="lazy-zarr-child")
            os._exit(0 if ran.wait(10) else 1)
        _, status = os.waitpid(child, 0)
        print("child", os.waitstatus_to_exitcode(status))
        """
    )
    assert "child 0" in out


def test_a_fan_out_waits_for_every_call_and_raises_the_first_error_in_order() -> None:
    from napari_lazy_zarr.core.executors import run_concurrently

    ended: list[int] = []
    gate = threading.Event()

    def call(item: int) -> int:
        if item == 0:
            gate.wait(WAIT)  # the slowest: the fan-out still waits for it
        elif item == 1:
            gate.set()
            ended.append(item)
            raise ValueError("one")
        elif item == 2:
            ended.append(item)
            raise KeyError("two")
        ended.append(item)
        return item

    with pytest.raises(ValueError, match="one"):
        run_concurrently(call, [0, 1, 2, 3], concurrency=4, name="lazy-zarr-test-fan-out")
    assert sorted(ended) == [0, 1, 2, 3]  # 0 too: it returned before the error was raised
