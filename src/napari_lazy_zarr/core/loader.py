"""Load scheduling: the priority queue the cache's workers pull from, and executors.

The queue is not thread-safe by itself: `ChunkCache` owns it and touches it
only while holding its one lock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from napari_lazy_zarr.core.state import ChunkKey

__all__ = [
    "Executor",
    "InlineExecutor",
    "LoadClass",
    "ManualExecutor",
    "PriorityQueue",
    "QueueItem",
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
    PREFETCH = 1
    """A neighbour of the current view (ring, adjacent planes)."""
    STALE = 2
    """Queued for a view the user has since left (superseded by a newer request)."""


@dataclass(frozen=True, slots=True, order=True)
class QueueItem:
    load_class: int
    level_rank: int
    distance: float
    sequence: int
    key: ChunkKey
    view: Hashable
    generation: int


class PriorityQueue:
    """Queued chunk loads ordered by (class, coarser level first, distance from view centre).

    Superseding is lazy: when an item whose view has moved on to a newer
    generation reaches the front, the cache drops it (or, if it fetches
    superseded work, demotes it below all current work). Duplicates are
    allowed; the cache skips items whose chunk is no longer QUEUED.
    """

    def __init__(self) -> None:
        self._heap: list[QueueItem] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(
        self,
        key: ChunkKey,
        *,
        load_class: LoadClass,
        level: int,
        distance: float,
        view: Hashable,
        generation: int,
    ) -> None:
        heapq.heappush(
            self._heap,
            QueueItem(
                int(load_class), -level, distance, next(self._sequence), key, view, generation
            ),
        )

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
        heapq.heappush(
            self._heap,
            QueueItem(
                int(LoadClass.STALE),
                item.level_rank,
                item.distance,
                item.sequence,
                item.key,
                item.view,
                item.generation,
            ),
        )

    def clear(self) -> None:
        self._heap.clear()
