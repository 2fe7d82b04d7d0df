"""Load scheduling: the priority queue the cache's workers pull from, and executors.

The queue is not thread-safe by itself: `ChunkCache` owns it and touches it
only while holding its one lock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from napari_lazy_zarr.core.state import ChunkKey

__all__ = [
    "DaemonExecutor",
    "Executor",
    "InlineExecutor",
    "LoadClass",
    "ManualExecutor",
    "PriorityQueue",
    "QueueItem",
    "cost_rank",
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


class LoadClass(IntEnum):
    """Coarse priority classes, most urgent first."""

    NEEDED = 0
    """A chunk the current view needs."""
    OVERVIEW = 1
    """Overview work: a chunk a view wants but does not display at its level (napari's
    thumbnail of the coarsest level), and every input of such a chunk."""
    PREFETCH = 2
    """A neighbour of the current view (ring, adjacent planes)."""
    STALE = 3
    """Queued for a view the user has since left (superseded by a newer request)."""


def cost_rank(cost: int) -> int:
    """The order of magnitude of a load's cost in stored chunk reads: ceil(log2(cost)).

    A stored chunk (cost 1) ranks 0, as does a derived chunk built from one
    stored chunk; a chunk built from 64 stored chunks ranks 6.

    Examples
    --------
    >>> [cost_rank(c) for c in (1, 2, 3, 4, 5, 64)]
    [0, 1, 2, 2, 3, 6]
    """
    return max(0, int(cost) - 1).bit_length()


@dataclass(frozen=True, slots=True, order=True)
class QueueItem:
    """One queued load. Ordered by its first five fields; the rest ride along."""

    load_class: int
    cost_rank: int
    """`cost_rank` of the stored chunk reads behind this load (see `PriorityQueue`)."""
    level_rank: int
    """Minus the pyramid level: coarser levels sort first."""
    distance: float
    """Squared distance of the chunk's centre from the view centre."""
    sequence: int
    """Push order; an input queued for a derived chunk shares that chunk's number."""
    key: ChunkKey = field(compare=False)
    view: Hashable = field(compare=False)
    generation: int = field(compare=False)


class PriorityQueue:
    """Queued chunk loads, most urgent first.

    The priority rule, field by field (`QueueItem`'s order):

    1. **Class**: `LoadClass.NEEDED` before `OVERVIEW` before `PREFETCH` before
       `STALE`. Overview work (a thumbnail of a virtual level, whose chunks each
       cost many stored reads) never delays a chunk the displayed view needs.
    2. **Cost**: within a class, cheaper loads first, by `cost_rank` (the order of
       magnitude of the stored chunk reads a load stands for). A stored chunk costs
       1; a virtual-level chunk costs the stored chunks under it. Among equally
       cheap loads the next two rules decide; an expensive derived chunk never goes
       before cheap stored chunks merely because it is coarser.
    3. **Level**: coarser levels first (a cheap coarse chunk covers more screen).
    4. **Distance** from the view centre, nearest first; then push order.

    The inputs a derived chunk waits for inherit its whole item (class, cost,
    level, distance, push order, view and generation): work done on behalf of
    an expensive or overview chunk stays in that chunk's place, and a chunk's
    inputs go before those of chunks queued after it (so it completes early).

    Superseding is lazy: when an item whose view has moved on to a newer
    generation reaches the front, the cache drops it (or, if it fetches
    superseded work, demotes it below all current work). Duplicates are
    allowed; the cache skips items whose chunk is no longer QUEUED.

    Examples
    --------
    >>> from napari_lazy_zarr.core.state import ChunkKey
    >>> queue = PriorityQueue()
    >>> def push(name, load_class, cost, level):
    ...     queue.push(ChunkKey(name, (0,), (1,)), load_class=load_class, cost=cost,
    ...                level=level, distance=0.0, view=None, generation=0)
    >>> push("thumbnail", LoadClass.OVERVIEW, 1, 5)
    >>> push("virtual", LoadClass.NEEDED, 64, 5)
    >>> push("stored-fine", LoadClass.NEEDED, 1, 0)
    >>> push("stored-coarse", LoadClass.NEEDED, 1, 1)
    >>> [queue.pop().key.source for _ in range(len(queue))]
    ['stored-coarse', 'stored-fine', 'virtual', 'thumbnail']
    """

    def __init__(self) -> None:
        self._heap: list[QueueItem] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def make(
        self,
        key: ChunkKey,
        *,
        load_class: LoadClass,
        level: int,
        distance: float,
        view: Hashable,
        generation: int,
        cost: int = 1,
    ) -> QueueItem:
        """A new item for a load of `key` (numbered in push order), not queued yet."""
        return QueueItem(
            int(load_class),
            cost_rank(cost),
            -level,
            distance,
            next(self._sequence),
            key,
            view,
            generation,
        )

    def push(
        self,
        key: ChunkKey,
        *,
        load_class: LoadClass,
        level: int,
        distance: float,
        view: Hashable,
        generation: int,
        cost: int = 1,
    ) -> QueueItem:
        """Queue a load of `key`; `cost` is in stored chunk reads (1 for a stored chunk)."""
        item = self.make(
            key,
            load_class=load_class,
            level=level,
            distance=distance,
            view=view,
            generation=generation,
            cost=cost,
        )
        heapq.heappush(self._heap, item)
        return item

    def push_item(self, item: QueueItem, key: ChunkKey | None = None) -> None:
        """Queue `item` again as it is, or for `key` in its place (an input inheriting it)."""
        heapq.heappush(self._heap, item if key is None else replace(item, key=key))

    def pop(self) -> QueueItem | None:
        """The most urgent item, or None when the queue is empty."""
        return heapq.heappop(self._heap) if self._heap else None

    @staticmethod
    def is_stale(item: QueueItem, current_generation: Callable[[Hashable], int | None]) -> bool:
        """Whether `item` was queued for a view that has since moved on to a newer generation.

        An item already demoted to `LoadClass.STALE` is not stale again: it waited its
        turn below all current work and loads now.
        """
        if item.load_class >= LoadClass.STALE or item.view is None:
            return False
        current = current_generation(item.view)
        return current is not None and current != item.generation

    def push_demoted(self, item: QueueItem) -> None:
        """Queue `item` again below all current work."""
        heapq.heappush(self._heap, replace(item, load_class=int(LoadClass.STALE)))

    def items(self) -> list[QueueItem]:
        """The queued items in heap order (a copy, for inspection: `heapq` invariants hold)."""
        return list(self._heap)

    def clear(self) -> None:
        self._heap.clear()
