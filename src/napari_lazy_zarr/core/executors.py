"""Executors: what runs the cache's load tasks (`Executor`), and four that do.

`DaemonExecutor` is the cache's default (daemon worker threads); `InlineExecutor`
and `ManualExecutor` run tasks on the caller's thread, for tests and scripts;
`SerialDispatch` runs tasks in order on one thread that lives while there is work
(a view controller's dispatch and compose threads).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DaemonExecutor",
    "Executor",
    "InlineExecutor",
    "ManualExecutor",
    "SerialDispatch",
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
    recurses. Useful for scripts and deterministic tests.

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
        try:
            while pending:
                pending.popleft()()
        finally:
            self._local.pending = None


class DaemonExecutor:
    """Runs submitted tasks on daemon threads it starts on demand and lets idle ones go.

    `ChunkCache`'s own workers. Unlike `concurrent.futures.ThreadPoolExecutor`,
    nothing ever waits for a running task: `shutdown` returns at once, and the
    interpreter exits with tasks still running (its threads are daemons and it
    registers no exit hook), so a read stuck in storage cannot hold up
    `ChunkCache.close` or the end of the program. The caller bounds how many
    tasks run at once; `max_workers` is only a safety net.

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
        self._name = name
        self._idle_seconds = idle_seconds
        self._condition = threading.Condition(threading.Lock())
        self._tasks: deque[Callable[[], Any]] = deque()
        self._threads = 0
        self._idle = 0
        self._shutdown = False

    @property
    def threads(self) -> int:
        """Threads alive now (running a task or idle)."""
        with self._condition:
            return self._threads

    def submit(self, fn: Callable[[], Any], /) -> None:
        """Run `fn()` on a worker thread soon; dropped after `shutdown`."""
        with self._condition:
            if self._shutdown:
                return
            self._tasks.append(fn)
            if len(self._tasks) > self._idle and self._threads < self._max_workers:
                self._threads += 1
                start = True
            else:
                self._condition.notify()
                start = False
        if start:
            # Started outside the lock: a thread start costs ~0.1-1 ms.
            threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def shutdown(self) -> None:
        """Drop the tasks not yet started and let every thread end; never waits."""
        with self._condition:
            self._shutdown = True
            self._tasks.clear()
            self._condition.notify_all()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._tasks and not self._shutdown:
                    self._idle += 1
                    woken = self._condition.wait(self._idle_seconds)
                    self._idle -= 1
                    if not woken and not self._tasks:
                        break  # idle too long: a quiet cache holds no threads
                if not self._tasks:
                    self._threads -= 1
                    return
                task = self._tasks.popleft()
            try:
                task()
            except BaseException:  # a task's bug must not kill the thread uncounted
                logging.getLogger(__name__).exception("a chunk loading task failed")


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
        with self._ready:
            if self._closed:
                return
            self._tasks.append(fn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._ready.notify()

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
