"""Executors: what runs the cache's load tasks (`Executor`), and four that do.

`DaemonExecutor` is the cache's default (daemon worker threads); `InlineExecutor`
and `ManualExecutor` run tasks on the caller's thread, for tests and scripts;
`SerialDispatch` runs tasks in order on one thread that lives while there is work
(a view controller's dispatch and compose threads); `Alarm` calls back at a
deadline on a thread kept between alarms (the cache's stall watchdog).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from napari_lazy_zarr.core.errors import LazyZarrError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ALARMS",
    "IDLE_THREADS",
    "Alarm",
    "AlarmClock",
    "DaemonExecutor",
    "Executor",
    "IdleThreads",
    "InlineExecutor",
    "ManualExecutor",
    "SerialDispatch",
    "ThreadStartError",
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


class IdleThreads:
    """The idle worker threads every `DaemonExecutor` of the process shares.

    A thread serves one executor while it has tasks, then comes here and waits
    (for the idle time of the executor it last served) to be handed to any
    executor that needs a thread. So executors made and dropped one after
    another (an array opened, read and forgotten, 500 times) reuse the same few
    threads instead of each keeping its own until its idle time runs out. At
    most `limit` threads wait here; more end at once. Holds no executor while
    idle, so it keeps none alive.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ready = threading.Condition(threading.Lock())
        self._handoffs: deque[DaemonExecutor] = deque()
        self._idle = 0
        self._trims = 0

    def trim(self) -> None:
        """End every idle thread now (an executor shut down: a closed cache leaves none)."""
        with self._ready:
            self._trims += 1
            self._ready.notify_all()

    @property
    def idle(self) -> int:
        """Threads waiting here now."""
        with self._ready:
            return self._idle

    def dispatch(self, executor: DaemonExecutor) -> None:
        """Give `executor` a thread: an idle one, else a new one (`ThreadStartError`)."""
        with self._ready:
            if self._idle > len(self._handoffs):
                self._handoffs.append(executor)
                self._ready.notify()
                return
        thread = threading.Thread(target=self._serve, args=(executor,), daemon=True)
        thread.name = executor.name
        try:
            thread.start()
        except RuntimeError as error:  # "can't start new thread"
            raise ThreadStartError(
                f"could not start a {executor.name!r} worker thread: {error} "
                "(a limit on threads or memory); retry once threads can start"
            ) from error

    def _serve(self, executor: DaemonExecutor | None) -> None:
        while executor is not None:
            threading.current_thread().name = executor.name
            idle_seconds = executor.drain()
            executor = None  # an idle thread keeps no executor alive
            with self._ready:
                if idle_seconds is None or self._idle >= self.limit:
                    return  # its executor was shut down (a closed cache), or enough wait
                self._idle += 1
                trims = self._trims
                try:
                    while not self._handoffs:
                        if self._trims != trims:
                            return  # an executor shut down: idle threads end with it
                        if not self._ready.wait(idle_seconds) and not self._handoffs:
                            return  # idle too long: a quiet process holds no threads
                    executor = self._handoffs.popleft()
                finally:
                    self._idle -= 1


IDLE_THREADS: IdleThreads = IdleThreads(limit=64)
"""The idle worker threads of every `DaemonExecutor` of the process."""


class DaemonExecutor:
    """Runs submitted tasks on daemon threads it takes on demand and lets go when idle.

    `ChunkCache`'s own workers. Unlike `concurrent.futures.ThreadPoolExecutor`,
    nothing ever waits for a running task: `shutdown` returns at once, and the
    interpreter exits with tasks still running (its threads are daemons and it
    registers no exit hook), so a read stuck in storage cannot hold up
    `ChunkCache.close` or the end of the program. The caller bounds how many
    tasks run at once; `max_workers` is only a safety net.

    A thread serves an executor only while it has tasks; idle threads wait in a
    pool every executor of the process shares (at most 64, each for
    `idle_seconds`), so an executor nobody uses any more (an array dropped
    without `close`) holds no thread, and a new one reuses the idle threads.
    After `shutdown` its threads end once their task does, and the idle ones
    with them (`IdleThreads.trim`).

    `submit` raises `ThreadStartError` (a `LazyZarrError`) when no thread can
    be started (a thread or memory limit) and none is idle: the task is then
    dropped, and the count of threads is as before, so a later `submit`
    starts one again once threads can start.

    A task raising anything (`KeyboardInterrupt` and `SystemExit` included:
    they are meant for the main thread, and a worker's would only end the
    thread uncounted) is logged and the thread goes on.

    Thread contract: `submit` and `shutdown` may be called from any thread.

    Examples
    --------
    >>> done = threading.Event()
    >>> executor = DaemonExecutor()
    >>> executor.submit(done.set)
    >>> done.wait(timeout=10)
    True
    >>> executor.shutdown()
    >>> executor.submit(done.set)  # after shutdown: dropped
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
        self._lock = threading.Lock()
        self._tasks: deque[Callable[[], Any]] = deque()
        self._threads = 0  # serving this executor: running a task or about to take one
        self._coming = 0  # of those, handed over but not yet taking tasks
        self._shutdown = False

    @property
    def threads(self) -> int:
        """Threads serving this executor now (running its tasks, or about to)."""
        with self._lock:
            return self._threads

    def submit(self, fn: Callable[[], Any], /) -> None:
        """Run `fn()` on a worker thread soon; dropped after `shutdown`.

        Raises `ThreadStartError` if a thread was needed and none could start.
        """
        with self._lock:
            if self._shutdown:
                return
            self._tasks.append(fn)
            if len(self._tasks) <= self._coming or self._threads >= self._max_workers:
                return  # a thread on its way, or one busy here, takes it
            self._threads += 1
            self._coming += 1
        try:
            # Outside the lock: a thread start costs ~0.1-1 ms.
            IDLE_THREADS.dispatch(self)
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
            if not taken:
                raise  # nobody will run it: the caller must know

    def shutdown(self) -> None:
        """Drop the tasks not yet started and let every thread go; never waits."""
        with self._lock:
            self._shutdown = True
            self._tasks.clear()
        IDLE_THREADS.trim()

    def drain(self) -> float | None:
        """Run tasks on this (pool) thread until none is left; how long the thread waits
        idle then (None after `shutdown`: it ends)."""
        with self._lock:
            self._coming -= 1
        while True:
            with self._lock:
                if not self._tasks or self._shutdown:
                    self._threads -= 1
                    return None if self._shutdown else self._idle_seconds
                task = self._tasks.popleft()
            try:
                task()
            except BaseException:  # a task's bug (or a stray interrupt) must not kill the thread
                logging.getLogger(__name__).exception("a %s task failed", self.name)


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
        """Run `fn()` on the thread, after what is queued (`ThreadStartError` if the thread
        cannot start: `fn` is dropped, and the next `submit` tries again)."""
        with self._ready:
            if self._closed:
                return
            self._tasks.append(fn)
            if self._thread is not None:
                self._ready.notify()
                return
            thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            try:
                thread.start()
            except RuntimeError as error:  # "can't start new thread": try again next time
                self._tasks.pop()
                raise ThreadStartError(
                    f"could not start the {self._name!r} thread: {error} "
                    "(a limit on threads or memory)"
                ) from error
            self._thread = thread

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
                logging.getLogger(__name__).exception(
                    "napari-lazy-zarr: issuing a view request failed"
                )

    def close(self, timeout: float = 1.0) -> None:
        """Drop queued work and let the thread end (waits at most `timeout` seconds)."""
        with self._ready:
            self._closed = True
            thread = self._thread
            self._ready.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


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
        closed cache's idle workers do, `IdleThreads.trim`); the next `arm` starts one."""
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
