"""`Workers`: the worker side of a `ChunkCache`: starting tasks, and what each task does.

A task takes the most urgent QUEUED chunk, reads it outside the lock
(`_reads`), records the outcome and takes the next one in the same locked
section, until the queue is empty. Every load finishes: a read raising
anything fails its chunk (an interrupt is re-raised on the task's thread
once recorded, after the task gave back its count), and a task that cannot
start (`ThreadStartError`, which `DaemonExecutor` raises when no thread could
start and it dropped the task; another executor's errors propagate) gives back its count; if
then no task runs, the QUEUED chunks a view wants fail with a `ChunkReadError`
naming the cause, which a later request re-queues by itself.

Thread contract
---------------
`start` is called without the cache's lock (from `ChunkCache._flush`); `work`
runs on the executor's threads (or inline) and takes the lock only to move
states, through the helpers it is handed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from napari_lazy_zarr.core.cache._outbox import Outbox
from napari_lazy_zarr.core.cache._reads import interruption, read_batch, read_one
from napari_lazy_zarr.core.executors import ThreadStartError

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Sequence

    from napari_lazy_zarr.core.cache._demand import Demand
    from napari_lazy_zarr.core.cache._reads import Outcome
    from napari_lazy_zarr.core.cache._residency import Entry
    from napari_lazy_zarr.core.cache._scheduler import Scheduler
    from napari_lazy_zarr.core.executors import Executor

__all__ = ["Workers"]


class Workers:
    """Starts a cache's worker tasks on its executor and runs them (see the module)."""

    __slots__ = ("_demand", "_executor", "_flush", "_lock", "_one_load_per_task", "_scheduler")

    def __init__(
        self,
        executor: Executor,
        lock: threading.Lock,
        scheduler: Scheduler,
        demand: Demand,
        flush: Callable[[Outbox], None],
    ) -> None:
        self._executor = executor
        self._one_load_per_task = bool(getattr(executor, "one_load_per_task", False))
        self._lock = lock
        self._scheduler = scheduler
        self._demand = demand
        self._flush = flush

    def start(self, count: int) -> None:
        """Submit `count` tasks the scheduler counted (lock not held).

        Starting a pool thread costs ~1 ms; 32 of them would stall the requesting
        thread (napari's main thread): the first task starts the others.
        """
        task = self.work if count == 1 else functools.partial(self.work, count - 1)
        try:
            self._executor.submit(task)
        except ThreadStartError as error:  # the task was dropped: nothing will run it
            self._not_started(count, error)

    def _not_started(self, count: int, error: ThreadStartError) -> None:
        """`count` counted tasks did not start: uncount them; fail the queue if none runs."""
        outbox = Outbox()
        with self._lock:
            scheduler = self._scheduler
            scheduler.active_tasks -= count
            if scheduler.active_tasks <= 0 and not scheduler.closed:
                self._demand.fail_unstartable(error, outbox)
        self._flush(outbox)

    def work(self, others: int = 0) -> None:
        """One worker task: load the most urgent queued chunks, reading outside the lock.

        The task keeps taking the next chunk (in the same locked section that
        finishes the previous one) until the queue is empty, instead of
        submitting a new task per chunk. An executor that sets
        `one_load_per_task` (`ManualExecutor`) gets one chunk per task, so
        tests can step loads. A task first submits `others` more worker tasks.
        """
        for index in range(others):
            try:
                self._executor.submit(self.work)
            except ThreadStartError as error:  # this one runs; the others are given back
                self._not_started(others - index, error)
                break
        outbox = Outbox()
        with self._lock:
            entry = self._scheduler.take_next(outbox)
            self._scheduler.schedule_starts(outbox)  # a derived chunk may have queued inputs
        self._flush(outbox)
        while entry is not None:
            # A LOADING entry's `inputs` and `riders` are only this worker's until it finishes.
            if entry.riders is not None:
                outcomes = read_batch([entry, *entry.riders])
            else:
                outcomes = [read_one(entry)]
            interrupt = interruption(outcomes)
            entry = self.finish(outcomes, retire=interrupt is not None)
            if interrupt is not None:
                # Recorded (FAILED) and this task retired: the interrupt goes where it was
                # meant to, the thread that ran the read (a daemon worker logs it and goes on).
                raise interrupt

    def finish(self, outcomes: Sequence[Outcome], *, retire: bool = False) -> Entry | None:
        """Record the outcomes of one task's loads (one chunk, or a batch); returns the
        next chunk for this worker, if it continues (not with `retire`).

        After `close` the outcomes are dropped and the worker stops.
        """
        outbox = Outbox()
        scheduler = self._scheduler
        with self._lock:
            if scheduler.closed:
                return None
            for entry, data, error in outcomes:
                self._demand.record(entry, data, error, outbox)
            following = scheduler.take_next(outbox, retire=retire or self._one_load_per_task)
            scheduler.schedule_starts(outbox)
        self._flush(outbox)
        return following
