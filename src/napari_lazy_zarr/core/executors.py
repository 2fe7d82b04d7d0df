"""Executors and the one worker pool: where the engine's background work runs.

Every thread the engine starts for work is a worker of the process's
`WorkerPool` (`worker_pool`), in the shape of zarr-python's `_get_pool`: made
once per process, shared by everything, never shut down, and its threads are
daemons, never joined at exit (a read hung in storage never holds up the end of
the program). On it run `DaemonExecutor` (the cache's workers: a bounded queue),
`SerialDispatch` (one task at a time, in order), `PoolExecutor` (a
`concurrent.futures` executor, for dask's local scheduler) and
`run_concurrently` (fan-outs: metadata opened or fetched at once).
`InlineExecutor` and `ManualExecutor` run tasks on the caller's thread, for
tests and scripts. Every deadline rings on one thread, the `AlarmClock`
(`ALARMS`, the caches' stall watchdogs).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from concurrent import futures
from typing import TYPE_CHECKING, Any, Protocol

from napari_lazy_zarr.core.errors import LazyZarrError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "ALARMS",
    "Alarm",
    "AlarmClock",
    "DaemonExecutor",
    "Executor",
    "InlineExecutor",
    "ManualExecutor",
    "PoolExecutor",
    "SerialDispatch",
    "ThreadStartError",
    "WorkerPool",
    "run_concurrently",
    "worker_pool",
]


class Executor(Protocol):
    """What the cache needs from an executor: `submit(fn)` runs `fn()` some time later.

    `concurrent.futures.ThreadPoolExecutor` satisfies it; so do the two
    test/script executors below.
    """

    def submit(self, fn: Callable[[], Any], /) -> Any: ...


class InlineExecutor:
    """Runs each submitted task synchronously in the submitting thread.

    Tasks submitted while a task runs are queued and run after it, in order,
    by the outermost `submit` (a trampoline), so a long chain of loads never
    recurses. Useful for scripts and deterministic tests. A task that raises
    (a `KeyboardInterrupt` in a read) does not drop the tasks queued behind it
    (a cache counts them as running): they run, then the first error is raised.

    Examples
    --------
    >>> ran = []
    >>> InlineExecutor().submit(lambda: ran.append(1))
    >>> ran
    [1]
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def submit(self, fn: Callable[[], Any], /) -> None:
        pending: deque[Callable[[], Any]] | None = getattr(self._local, "pending", None)
        if pending is not None:
            pending.append(fn)
            return
        pending = deque([fn])
        self._local.pending = pending
        raised: BaseException | None = None
        try:
            while pending:
                try:
                    pending.popleft()()
                except BaseException as error:  # the tasks queued behind it still run
                    if raised is None:
                        raised = error
        finally:
            self._local.pending = None
        if raised is not None:
            raise raised


class ThreadStartError(LazyZarrError, RuntimeError):
    """A worker thread could not be started (``RuntimeError: can't start new thread``:
    a thread or memory limit); the task submitted was not taken. Retryable."""


class WorkerPool:
    """The process's worker threads: daemons started on demand, parked idle for reuse.

    `run` hands a callable to a parked thread, else starts one. A thread that
    has run its callable parks (at most `limit` do; more end at once) and ends
    after `idle_seconds` with nothing to run, so a quiet process holds no
    thread, and executors made and dropped one after another (an array opened,
    read and forgotten, 500 times) reuse the same few. It keeps the name of the
    work it last ran. Nothing ever waits for a thread of the pool: they are
    daemons and the pool registers no exit hook. A parked thread holds nothing
    that keeps an executor or a cache alive.

    Get the process's pool with `worker_pool`.
    """

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._ready = threading.Condition(threading.Lock())
        self._handoffs: deque[tuple[Callable[[], Any], str, float]] = deque()
        self._idle = 0
        self._trims = 0

    @property
    def idle(self) -> int:
        """Threads parked now."""
        with self._ready:
            return self._idle

    def run(self, fn: Callable[[], Any], *, name: str, idle_seconds: float = 10.0) -> None:
        """Run `fn()` on a thread named `name`: a parked one, else a new one.

        The thread parks `idle_seconds` afterwards. An exception from `fn` is
        logged. Raises `ThreadStartError` when a thread is needed and none can
        start (a thread or memory limit): `fn` is then not run.
        """
        with self._ready:
            if self._idle > len(self._handoffs):
                self._handoffs.append((fn, name, idle_seconds))
                self._ready.notify()
                return
            trims = self._trims
        thread = threading.Thread(
            target=self._serve, args=((fn, name, idle_seconds), trims), name=name, daemon=True
        )
        try:
            thread.start()
        except RuntimeError as error:  # "can't start new thread"
            raise ThreadStartError(
                f"could not start a {name!r} worker thread: {error} "
                "(a limit on threads or memory); retry once threads can start"
            ) from error

    def trim(self) -> None:
        """End the parked threads now, and the busy ones when their work ends (an executor
        shut down: a closed cache leaves no thread behind)."""
        with self._ready:
            self._trims += 1
            self._ready.notify_all()

    def _serve(self, job: tuple[Callable[[], Any], str, float] | None, trims: int) -> None:
        """Run `job`, then the ones handed over, until idle too long or trimmed: a trim
        after `trims` (as the thread started) ends it, even one while a handed-over job
        waited for it to wake."""
        while job is not None:
            fn, name, idle_seconds = job
            job = None
            threading.current_thread().name = name
            try:
                fn()
            except BaseException:  # a task's bug (or a stray interrupt) must not kill the pool
                logging.getLogger(__name__).exception("a %s task failed", name)
            del fn  # a parked thread keeps nothing alive
            with self._ready:
                if self._trims != trims or self._idle >= self.limit:
                    return  # trimmed while it ran, or enough threads wait
                self._idle += 1
                try:
                    while not self._handoffs:
                        if self._trims != trims:
                            return  # trimmed: parked threads end
                        if not self._ready.wait(idle_seconds) and not self._handoffs:
                            return  # idle too long: a quiet process holds no threads
                    job = self._handoffs.popleft()
                finally:
                    self._idle -= 1


_pool = WorkerPool()


def worker_pool() -> WorkerPool:
    """The process's `WorkerPool` (a forked child makes its own: the parent's threads are
    not in it)."""
    return _pool


def _new_pool_after_fork() -> None:
    global _pool
    _pool = WorkerPool()


os.register_at_fork(after_in_child=_new_pool_after_fork)

# The executor whose tasks the current thread is running, if any (`SerialDispatch.close`).
_serving = threading.local()


class DaemonExecutor:
    """Runs submitted tasks on threads of the worker pool, at most `max_workers` at once.

    `ChunkCache`'s own workers. Unlike `concurrent.futures.ThreadPoolExecutor`,
    nothing ever waits for a running task: `shutdown` returns at once, and the
    interpreter exits with tasks still running (the pool's threads are daemons),
    so a read stuck in storage cannot hold up `ChunkCache.close` or the end of
    the program. The caller bounds how many tasks run at once; `max_workers`
    is only a safety net.

    A pool thread serves an executor only while it has tasks, then parks in
    the pool for `idle_seconds`, so an executor nobody uses any more (an array
    dropped without `close`) holds no thread, and a new one reuses the parked
    threads. After `shutdown` its threads end once their task does, and the
    parked ones with them (`WorkerPool.trim`).

    `submit` raises `ThreadStartError` (a `LazyZarrError`) when no thread can
    be started (a thread or memory limit) and none is idle: the task is then
    dropped, and the count of threads is as before, so a later `submit`
    starts one again once threads can start.

    A task raising anything (`KeyboardInterrupt` and `SystemExit` included:
    they are meant for the main thread, and a worker's would only end the
    thread uncounted) is logged and the thread goes on.

    Thread contract: `submit`, `shutdown` and `wait_idle` may be called from
    any thread.

    Examples
    --------
    >>> done = threading.Event()
    >>> executor = DaemonExecutor()
    >>> executor.submit(done.set)
    True
    >>> done.wait(timeout=10)
    True
    >>> executor.shutdown()  # the tasks not started yet
    []
    >>> executor.submit(done.set)  # after shutdown: dropped
    False
    """

    def __init__(
        self,
        max_workers: int = 256,
        *,
        name: str = "lazy-zarr-load",
        idle_seconds: float = 10.0,
    ) -> None:
        self._max_workers = max_workers
        self.name = name
        self._idle_seconds = idle_seconds
        self._lock = threading.Condition(threading.Lock())  # notified when threads reach 0
        self._tasks: deque[Callable[[], Any]] = deque()
        self._threads = 0  # serving this executor: running a task or about to take one
        self._coming = 0  # of those, handed over but not yet taking tasks
        self._shutdown = False

    @property
    def threads(self) -> int:
        """Threads serving this executor now (running its tasks, or about to)."""
        with self._lock:
            return self._threads

    def submit(self, fn: Callable[[], Any], /) -> bool:
        """Run `fn()` on a worker thread soon; whether it was taken (False after `shutdown`).

        Raises `ThreadStartError` if a thread was needed and none could start.
        """
        with self._lock:
            if self._shutdown:
                return False
            self._tasks.append(fn)
            if len(self._tasks) <= self._coming or self._threads >= self._max_workers:
                return True  # a thread on its way, or one busy here, takes it
            self._threads += 1
            self._coming += 1
        try:
            # Outside the lock: a thread start costs ~0.1-1 ms.
            worker_pool().run(self._drain, name=self.name, idle_seconds=self._idle_seconds)
        except ThreadStartError:
            with self._lock:
                self._threads -= 1
                self._coming -= 1
                taken = True
                for index in range(len(self._tasks) - 1, -1, -1):
                    if self._tasks[index] is fn:
                        del self._tasks[index]
                        taken = False
                        break
                if not self._threads:
                    self._lock.notify_all()
            if not taken:
                raise  # nobody will run it: the caller must know
        return True

    def shutdown(self) -> list[Callable[[], Any]]:
        """Drop the tasks not yet started and let every thread go; never waits.

        Returns the tasks dropped.
        """
        dropped = self._stop()
        worker_pool().trim()
        return dropped

    def _stop(self) -> list[Callable[[], Any]]:
        """Take no more tasks; the queued ones, dropped."""
        with self._lock:
            self._shutdown = True
            dropped = list(self._tasks)
            self._tasks.clear()
        return dropped

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no thread runs this executor's tasks; False if `timeout` passes first."""
        with self._lock:
            return self._lock.wait_for(lambda: self._threads == 0, timeout)

    def _drain(self) -> None:
        """Run tasks on this (pool) thread until none is left (or `shutdown`)."""
        _serving.executor = self
        try:
            with self._lock:
                self._coming -= 1
            while True:
                with self._lock:
                    if not self._tasks or self._shutdown:
                        self._threads -= 1
                        if not self._threads:
                            self._lock.notify_all()
                        return
                    task = self._tasks.popleft()
                try:
                    task()
                except BaseException:  # a task's bug (or a stray interrupt) must not end it
                    logging.getLogger(__name__).exception("a %s task failed", self.name)
                del task  # nothing done is kept alive while the thread waits
        finally:
            _serving.executor = None


class ManualExecutor:
    """Holds submitted tasks until a test runs them one at a time with `run_next`.

    Examples
    --------
    >>> executor = ManualExecutor()
    >>> executor.submit(lambda: print("loaded"))
    >>> len(executor)
    1
    >>> executor.run_next()
    loaded
    True
    >>> executor.run_next()
    False
    """

    one_load_per_task = True
    """Tells `ChunkCache` to give each task one chunk, so `run_next` steps one load."""

    def __init__(self) -> None:
        self._tasks: deque[Callable[[], Any]] = deque()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any], /) -> None:
        with self._lock:
            self._tasks.append(fn)

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks)

    def run_next(self) -> bool:
        """Run the oldest pending task; False when there was none."""
        with self._lock:
            if not self._tasks:
                return False
            task = self._tasks.popleft()
        task()
        return True

    def run_all(self, limit: int = 1_000_000) -> int:
        """Run tasks (including ones they submit) until none is left; returns how many ran."""
        count = 0
        while count < limit and self.run_next():
            count += 1
        return count


class SerialDispatch(DaemonExecutor):
    """Runs submitted callables in order, one at a time, on a thread of the worker pool.

    A `DaemonExecutor` of one worker: the thread serves it while there is work
    and parks after `idle` seconds without any, so a controller nobody closes
    leaves no thread behind, and a burst of reads (panning) reuses one thread
    instead of starting one per read.

    Examples
    --------
    >>> import threading
    >>> done = threading.Event()
    >>> dispatch = SerialDispatch("example")
    >>> dispatch.submit(done.set)
    True
    >>> done.wait(timeout=10)
    True
    >>> dispatch.close()
    """

    def __init__(self, name: str, idle: float = 1.0) -> None:
        super().__init__(1, name=name, idle_seconds=idle)

    def close(self, timeout: float = 1.0) -> None:
        """Drop queued work and wait for the running task (at most `timeout` seconds).

        The pool's parked threads stay (closing a layer's dispatch need not end the
        threads other layers' work reuses): its own parks `idle` seconds, then ends.
        """
        self._stop()
        if getattr(_serving, "executor", None) is not self:  # not from its own task
            self.wait_idle(timeout)


class PoolExecutor(futures.Executor):
    """A `concurrent.futures.Executor` on the worker pool, at most `max_workers` tasks at once.

    For what takes an executor (dask's local scheduler) and for fan-outs that
    want futures. Unlike `ThreadPoolExecutor`, its threads are the pool's
    daemons: the interpreter never waits for them, and a dropped executor holds
    none. `shutdown(cancel_futures=True)` cancels the queued tasks; `timeout`
    bounds the wait for the running ones.

    Examples
    --------
    >>> executor = PoolExecutor(2, name="lazy-zarr-example")
    >>> executor.submit(pow, 2, 10).result(timeout=10)
    1024
    >>> executor.shutdown()
    """

    def __init__(self, max_workers: int, *, name: str) -> None:
        self._max_workers = max_workers  # read by dask.threaded.get
        self._tasks = DaemonExecutor(max_workers, name=name)
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        if self._closed or not self._tasks.submit(_Call(future, fn, args, kwargs)):
            raise RuntimeError("cannot schedule new futures after shutdown")
        return future

    def shutdown(
        self, wait: bool = True, *, cancel_futures: bool = False, timeout: float | None = None
    ) -> None:
        """Take no more tasks (`cancel_futures`: cancel the queued ones); `wait`: for the
        running ones (and the queued ones, unless cancelled), at most `timeout` seconds."""
        self._closed = True
        if cancel_futures:
            for call in self._tasks.shutdown():
                if isinstance(call, _Call):
                    call.future.cancel()
        if wait:
            self._tasks.wait_idle(timeout)


class _Call:
    """One `PoolExecutor` task: `fn(*args, **kwargs)` into `future`."""

    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(
        self,
        future: futures.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.future, self.fn, self.args, self.kwargs = future, fn, args, kwargs

    def __call__(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as error:  # every end is the call's outcome
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


def run_concurrently[T, R](
    fn: Callable[[T], R], items: Sequence[T], *, concurrency: int, name: str
) -> list[R]:
    """``[fn(item) for item in items]``, at most `concurrency` calls at once on the worker pool.

    Waits for every call, then raises the first exception in `items`' order
    (as ``list(ThreadPoolExecutor.map(...))`` does). One item, or a
    `concurrency` of 1, runs on the calling thread. Raises `ThreadStartError`
    when no thread can start.

    Examples
    --------
    >>> run_concurrently(abs, [-1, 2, -3], concurrency=2, name="lazy-zarr-example")
    [1, 2, 3]
    """
    if len(items) <= 1 or concurrency <= 1:
        return [fn(item) for item in items]
    executor = PoolExecutor(min(concurrency, len(items)), name=name)
    calls: list[futures.Future[R]] = []
    try:
        calls.extend(executor.submit(fn, item) for item in items)
    finally:
        futures.wait(calls)
    return [call.result() for call in calls]


class AlarmClock:
    """The one thread that calls every `Alarm` of the process at its deadline.

    `threading.Timer` starts a thread per alarm (0.1-1 ms of the arming
    thread's time, and a context switch); the cache's stall watchdog is armed
    about once per view read that queues chunks behind busy workers, so every
    `Alarm` shares this clock's thread instead. The thread starts at the first
    `Alarm.arm`; it ends when an alarm is closed or collected while none is
    armed, or after `linger` seconds with none armed. A closed cache therefore
    leaves no thread behind, and 500 caches dropped unclosed share one.

    Re-arming for a later deadline than the one the thread waits for (the
    usual case: the oldest load's start plus a constant) wakes nothing.
    """

    def __init__(self, name: str, linger: float = 2.0) -> None:
        self.name = name
        self.linger = linger
        # Re-entrant: an alarm collected unclosed is forgotten wherever the collector runs.
        self.ready = threading.Condition(threading.RLock())
        self.heap: list[tuple[float, int, int, weakref.ref[Alarm]]] = []  # stale ones too
        self.changed = time.perf_counter()  # last armed, disarmed or rung
        self.wake = 0.0  # when the thread looks again by itself (0: without waiting)
        self.thread: threading.Thread | None = None
        self._order = itertools.count()  # ties in the heap never compare alarms

    def push(self, deadline: float, token: int, alarm: weakref.ref[Alarm]) -> None:
        """Have `alarm` rung at `deadline` if its token is still `token` (lock held)."""
        heapq.heappush(self.heap, (deadline, next(self._order), token, alarm))
        self.changed = time.perf_counter()
        if self.thread is None:
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            try:
                thread.start()
            except RuntimeError as error:  # "can't start new thread"
                raise ThreadStartError(
                    f"could not start the {self.name!r} thread: {error} "
                    "(a limit on threads or memory)"
                ) from error
            self.wake = 0.0
            self.thread = thread
        elif deadline < self.wake:
            self.ready.notify()

    def forget(self) -> None:
        """An alarm was closed or collected: with none armed, the thread ends now (as a
        closed cache's idle workers do, `WorkerPool.trim`); the next `arm` starts one."""
        with self.ready:
            if not any(
                (alarm := ref()) is not None and alarm.token == token
                for _, _, token, ref in self.heap
            ):
                self.heap.clear()  # only stale deadlines are left
                self.changed = -math.inf  # no linger
                self.ready.notify()

    def _run(self) -> None:
        ready = self.ready
        with ready:
            try:
                while True:
                    now = time.perf_counter()
                    if self._ring_due(now):
                        continue
                    if self.heap:
                        until = self.heap[0][0]
                    else:
                        until = self.changed + self.linger
                        if now >= until:
                            return  # none armed for long: a quiet process holds no thread
                    self.wake = until
                    ready.wait(until - now)
            finally:
                self.thread = None

    def _ring_due(self, now: float) -> bool:
        """Ring the alarms due (lock held; released while they ring); whether any was."""
        heap = self.heap
        due: list[Alarm] = []
        while heap and heap[0][0] <= now:
            _, _, token, ref = heapq.heappop(heap)
            alarm = ref()
            if alarm is not None and alarm.token == token:
                alarm.deadline = None
                due.append(alarm)
        if not due:
            return False
        self.wake = 0.0  # an `arm` while they ring is seen after
        self.ready.release()
        try:
            for alarm in due:
                alarm.ring()
        finally:
            self.ready.acquire()
        self.changed = time.perf_counter()
        return True  # its locals go: no alarm is kept alive by this thread


ALARMS: AlarmClock = AlarmClock("lazy-zarr-watchdog")
"""The thread every `Alarm` of the process rings on (the caches' stall watchdogs)."""


class Alarm:
    """Calls `fn()` at a deadline, on the process's `AlarmClock` thread.

    `arm` keeps the earliest deadline asked for since the last `disarm` (a
    stale `arm` arriving late can only make `fn` run early, never late): `fn`
    must check for itself whether there is anything to do. It runs without any
    lock of the clock's; an exception from it is logged. A bound method is held
    weakly, so an alarm keeps no cache alive.

    Examples
    --------
    >>> rang = threading.Event()
    >>> alarm = Alarm(rang.set)
    >>> alarm.arm(time.perf_counter() + 0.01)
    >>> rang.wait(timeout=10)
    True
    >>> alarm.close()
    """

    __slots__ = ("__weakref__", "_clock", "_closed", "_fn", "_forget", "_ref", "deadline", "token")

    def __init__(self, fn: Callable[[], Any], *, clock: AlarmClock | None = None) -> None:
        self._fn: Callable[[], Callable[[], Any] | None]
        if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
            self._fn = weakref.WeakMethod(fn)
        else:
            self._fn = lambda: fn
        self._clock = ALARMS if clock is None else clock
        self._closed = False
        self._ref = weakref.ref(self)
        self.deadline: float | None = None  # armed for (the clock's lock guards both)
        self.token = 0  # bumped by every arm and disarm: older heap entries are stale
        self._forget = weakref.finalize(self, self._clock.forget)
        self._forget.atexit = False

    def arm(self, deadline: float) -> None:
        """Call `fn` at `deadline` (a `time.perf_counter` time) or at an earlier one armed.

        Raises `ThreadStartError` if the clock's thread is needed and cannot
        start: the deadline then stays armed with no thread to ring it, and the
        first `arm` after a `disarm` tries to start one again (the watchdog
        disarms when its queue empties).
        """
        clock = self._clock
        with clock.ready:
            if self._closed or (self.deadline is not None and self.deadline <= deadline):
                return
            self.deadline = deadline
            self.token += 1
            clock.push(deadline, self.token, self._ref)

    def disarm(self) -> None:
        """Call nothing at the deadline armed; never waits."""
        clock = self._clock
        with clock.ready:
            self.deadline = None
            self.token += 1
            clock.changed = time.perf_counter()  # the linger counts from here

    @property
    def armed(self) -> bool:
        """Whether a deadline is armed."""
        with self._clock.ready:
            return self.deadline is not None

    def close(self) -> None:
        """Disarm for good; never waits (the clock's thread ends if no alarm is left armed)."""
        with self._clock.ready:
            self._closed = True
            self.deadline = None
            self.token += 1
        self._forget()

    def ring(self) -> None:
        """Call `fn` now (the clock's thread, no lock held)."""
        fn = self._fn()
        if fn is None:
            return  # its owner is gone
        try:
            fn()
        except Exception:
            logging.getLogger(__name__).exception("a %s alarm failed", self._clock.name)
