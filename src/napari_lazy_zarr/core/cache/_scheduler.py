"""`Scheduler`: which QUEUED chunk a worker of a `ChunkCache` takes next, and when to stop.

It owns the load queue (`PriorityQueue`), each view's generation and live
request, the parked chunks, the batches of batchable sources, the LOADING
chunks (with the stalled ones and the riders of batched loads), the count of
active worker tasks, the stall watchdog and the cancellation of loads nobody
wants any more.

Thread contract
---------------
Every field is read and written only under the owning cache's lock; the one
exception is the watchdog's thread (an `Alarm`'s clock, which never holds its
own lock while it takes the cache's), which calls `watchdog_fired` through the
façade, with the lock held. `Scheduler` never
takes the cache's lock itself; where it moves a chunk's state it calls the
façade's one `_transition` with the `Outbox` it is handed, and what must
happen after the lock (starting workers, arming the watchdog, cancelling
reads) goes into that outbox.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from operator import add, sub
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.cache.schedule import (
    LoadClass,
    PriorityQueue,
    background_budget,
    is_background,
)
from napari_lazy_zarr.core.errors import CacheClosedError
from napari_lazy_zarr.core.executors import Alarm
from napari_lazy_zarr.core.states import ChunkState, EventReason

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

    from napari_lazy_zarr.core.cache._dependencies import Dependencies
    from napari_lazy_zarr.core.cache._outbox import Outbox
    from napari_lazy_zarr.core.cache._residency import Entry, Residency, Transition
    from napari_lazy_zarr.core.cache.schedule import QueueItem
    from napari_lazy_zarr.core.keys import ChunkKey

__all__ = ["Scheduler", "cancellable", "distance", "loading_reason"]

# The most chunks one batched load (`BatchSource.read_chunks`) takes: a 4096² shard of
# 512² inner chunks has 64; this keeps one worker's batch (and its memory) bounded.
_BATCH_LIMIT: Final = 256


class Scheduler:
    """The queue, the views' generations, parking, batches, stalls and cancellation (lock held).

    `dependencies` is told of this scheduler: the two call each other.
    """

    __slots__ = (
        "_dependencies",
        "_residency",
        "_transition",
        "active_tasks",
        "alarm",
        "background_tasks",
        "batches",
        "closed",
        "concurrency",
        "fetch_superseded",
        "generations",
        "loading",
        "parked",
        "queue",
        "riding",
        "stalled",
        "stalled_after",
        "visible_tasks",
        "watchdog",
    )

    def __init__(
        self,
        residency: Residency,
        dependencies: Dependencies,
        transition: Transition,
        *,
        concurrency: int,
        fetch_superseded: bool,
        stalled_after: float | None,
        on_watchdog: Callable[[], None],
    ) -> None:
        self._residency = residency
        self._dependencies = dependencies
        dependencies.scheduler = self
        self._transition = transition
        # One alarm thread for every arming, not a `threading.Timer` (a thread start) each:
        # the watchdog is armed about once per view read that queues behind busy workers.
        self.alarm = Alarm(on_watchdog)
        self.concurrency = concurrency
        self.fetch_superseded = fetch_superseded
        self.stalled_after = stalled_after
        self.closed = False
        self.queue = PriorityQueue()
        self.generations: dict[Hashable, int] = {}
        self.parked: set[ChunkKey] = set()  # QUEUED chunks dropped from the queue
        self.loading: dict[ChunkKey, Entry] = {}  # LOADING, in the order they started
        self.stalled: set[ChunkKey] = set()  # of those, not counted against concurrency
        self.riding: set[ChunkKey] = set()  # of those, read in another chunk's batch
        # QUEUED chunks of batchable sources, by (source, batch key): a worker taking one
        # takes the others a view still wants with it (`take_riders`).
        self.batches: dict[tuple[Hashable, Hashable], dict[ChunkKey, Entry]] = {}
        self.watchdog: float | None = None  # the deadline `alarm` is armed for
        self.active_tasks = 0
        # Of the tasks loading a chunk of their own (not riders), those on background work
        # (`is_background`: overview, prefetch, superseded) and those on visible work. The
        # background ones have their own, smaller budget (`background_room`) beside
        # `concurrency`, which visible work always has whole.
        self.background_tasks = 0
        self.visible_tasks = 0

    # -- queueing ----------------------------------------------------------

    def check_open(self) -> None:
        """Refuse new work once the cache is closed (`CacheClosedError`)."""
        if self.closed:
            raise CacheClosedError("the chunk cache is closed")

    def current_generation(self, view: Hashable) -> int | None:
        return self.generations.get(view)

    def next_generation(self, view: Hashable) -> int:
        """A new request's generation: `view`'s next one (0 for a request of no view)."""
        if view is None:
            return 0
        generation = self.generations[view] = self.generations.get(view, 0) + 1
        return generation

    def supersede(self, view: Hashable) -> None:
        """`view`'s request was released: what it queued is stale."""
        self.generations[view] = self.generations.get(view, 0) + 1

    def is_stale(self, item: QueueItem) -> bool:
        """Whether `item` was queued for a view that has since moved on."""
        return self.queue.is_stale(item, self.current_generation)

    def enqueue(
        self,
        entry: Entry,
        load_class: LoadClass,
        level: int,
        center: Sequence[float] | None,
        view: Hashable,
        generation: int,
        outbox: Outbox,
        rank: float | None = None,
    ) -> None:
        """Queue `entry` (NEW, EVICTED or QUEUED; a LOADING one is marked wanted) for
        `view`, nearest `center` first, or in the order `rank` gives among its class."""
        if entry.state in (ChunkState.NEW, ChunkState.EVICTED):
            reason = (
                EventReason.PREFETCH
                if load_class in (LoadClass.PREFETCH, LoadClass.AHEAD)
                else EventReason.REQUESTED
            )
            self._residency.requeued(entry)
            self._transition(entry, ChunkState.QUEUED, reason, outbox)
        elif entry.state not in (ChunkState.QUEUED, ChunkState.LOADING):
            return  # READY, or FAILED (no retry storms)
        item = self.queue.make(
            entry.key,
            load_class=load_class,
            level=level,
            distance=distance(entry.key, center) if rank is None else rank,
            view=view,
            generation=generation,
            cost=entry.cost,
        )
        if entry.state is ChunkState.LOADING:
            entry.wants[view] = item  # wanted again: not to be cancelled (or re-queued if it is)
            return
        self.push(entry, item)
        self.queue.push_item(item)

    def enqueue_input(self, entry: Entry, item: QueueItem, outbox: Outbox) -> None:
        """Queue an input of a derived chunk with that chunk's `item` (unless it is loading)."""
        if entry.state in (ChunkState.NEW, ChunkState.EVICTED):
            reason = (
                EventReason.PREFETCH
                if item.load_class in (LoadClass.PREFETCH, LoadClass.AHEAD)
                else EventReason.REQUESTED
            )
            self._residency.requeued(entry)
            self._transition(entry, ChunkState.QUEUED, reason, outbox)
        elif entry.state is ChunkState.LOADING:
            # It lands soon and reports to its dependents; wanted, not to be cancelled.
            entry.wants[item.view] = replace(item, key=entry.key)
            return
        elif entry.state is not ChunkState.QUEUED:
            return
        own = replace(item, key=entry.key)
        self.push(entry, own)
        self.queue.push_item(own)

    def push(self, entry: Entry, item: QueueItem) -> None:
        """Account for one more queue item naming `entry` (the caller pushes `item`)."""
        entry.queue_items += 1
        entry.wants[item.view] = item
        self.parked.discard(entry.key)

    def queue_as_needed(self, entry: Entry) -> None:
        """Queue a QUEUED chunk no view asked for (a retry, a pinned cancelled load) as
        needed now."""
        item = self.queue.make(
            entry.key,
            load_class=LoadClass.NEEDED,
            level=0,
            distance=0.0,
            view=None,
            generation=0,
            cost=entry.cost,
        )
        self.push(entry, item)
        self.queue.push_item(item)

    def park(self, entry: Entry) -> None:
        """Leave a QUEUED chunk out of the queue until a view asks again.

        Derived chunks waiting for it are parked too (their gathered inputs are
        dropped), unless queued again meanwhile; then they re-gather when taken.
        """
        self.parked.add(entry.key)
        entry.wants.clear()
        self._dependencies.drop_deferred(entry)
        self._dependencies.park_dependents(entry)

    def batch_moved(self, entry: Entry, previous: ChunkState, current: ChunkState) -> None:
        """Keep `batches` to the QUEUED chunks of batchable sources (from `_transition`)."""
        if previous is ChunkState.QUEUED:
            batch = (entry.key.source, entry.batch)
            members = self.batches.get(batch)
            if members is not None:
                members.pop(entry.key, None)
                if not members:
                    del self.batches[batch]
        elif current is ChunkState.QUEUED:
            self.batches.setdefault((entry.key.source, entry.batch), {})[entry.key] = entry

    def forget_parked(self, identities: frozenset[Hashable]) -> int:
        """Forget the parked chunks of these sources nothing refers to (`ChunkCache.discard`):
        unpinned, no queue item, no derived chunk waiting; how many."""
        dependencies, residency = self._dependencies, self._residency
        forgotten = 0
        for key in [k for k in self.parked if k.source in identities]:
            entry = residency.entries[key]
            if (
                entry.pins
                or entry.queue_items
                or key in dependencies.deferred
                or key in dependencies.dependents
            ):
                continue
            self.parked.discard(key)
            if entry.batch is not None:
                self.batch_moved(entry, ChunkState.QUEUED, ChunkState.NEW)
            residency.drop(entry)
            forgotten += 1
        return forgotten

    # -- workers -----------------------------------------------------------

    def schedule_starts(self, outbox: Outbox) -> None:
        if self.closed:
            return
        if self.watchdog is not None and not self.queue:
            # Nothing waits behind the loads: no timer (a cache dropped unclosed keeps
            # none, nor is it kept alive by one).
            self.alarm.disarm()  # never waits
            self.watchdog = None
        # Visible work gets up to `concurrency` tasks; background work, on top, what is left
        # of its own budget. A task started takes whatever is most urgent within them.
        queue = self.queue
        foreground = self.active_tasks - self.background_tasks
        background = min(queue.background, max(0, self.background_room()))
        wanted = max(0, min(self.concurrency, queue.needed) - foreground) + background
        if foreground > self.concurrency:
            wanted -= foreground - self.concurrency  # lowered concurrency: fewer, not more
        if wanted > 0:
            self.active_tasks += wanted
            outbox.starts += wanted
        self.arm_watchdog(outbox)

    def take_next(self, outbox: Outbox, *, retire: bool = False) -> Entry | None:
        """Move the most urgent QUEUED chunk to LOADING, or retire this task (at once
        with `retire`: an executor running one load per task, `ManualExecutor`)."""
        if not retire and not self.closed:
            entries = self._residency.entries
            # This task counts as visible work until it takes a background chunk: with
            # every visible task taken, it may serve only the background budget.
            background_only = self.active_tasks - self.background_tasks > self.concurrency
            # While loads of a source are stalled, its storage is likely stuck: chunks of
            # other sources go first, so one stuck store never holds up another view.
            slow = {entries[k].key.source for k in self.stalled if k in entries}
            refused = False
            for avoid in (slow, set()) if slow else (set(),):
                skipped: list[QueueItem] = []
                try:
                    while (item := self.pop_runnable(avoid, skipped, background_only)) is not None:
                        entry = entries[item.key]
                        background = is_background(item.load_class)
                        if background and self.background_room() <= 0:
                            # Over the background budget (none while visible work is
                            # queued or loading): it stays queued; this task retires.
                            entry.queue_items += 1
                            skipped.append(item)
                            refused = True
                            break
                        if (
                            entry.derived
                            and entry.inputs is None
                            and not self._dependencies.gather(entry, item, outbox)
                        ):
                            continue  # deferred until its inputs land, or failed
                        # QUEUED -> LOADING for this worker, with its batch's riders if any.
                        named = getattr(entry.source, "load_reason", None)
                        reason = loading_reason(named) if named else EventReason.STARTED
                        self._transition(entry, ChunkState.LOADING, reason, outbox)
                        entry.started = time.perf_counter()
                        entry.cancelled = False
                        self.loading[entry.key] = entry
                        entry.background = background
                        if background:
                            self.background_tasks += 1
                        else:
                            self.visible_tasks += 1
                        if entry.batch is not None:
                            self.take_riders(entry, reason, outbox)
                        return entry
                finally:
                    for item in skipped:
                        self.queue.push_item(item)
                if refused:
                    break  # not again without `avoid`
        self.active_tasks -= 1
        return None

    def background_room(self) -> int:
        """How many more tasks may take background work now, less those already on it:
        none while a visible chunk is QUEUED or LOADING (no worker, nor a store's
        connection, is taken from it), else the background budget (`background_budget`)."""
        if self.queue.needed or self.visible_tasks:
            return -self.background_tasks
        return background_budget(self.concurrency) - self.background_tasks

    def pop_runnable(
        self, avoid: set[Hashable], skipped: list[QueueItem], background_only: bool = False
    ) -> QueueItem | None:
        """Pop the most urgent item of a QUEUED chunk a live view wants, or None
        (of background work only, with `background_only`).

        On the way, items of chunks no longer QUEUED are dropped; stale ones are
        demoted (`fetch_superseded`) or their chunk parked; items of the sources
        in `avoid` go to `skipped`, for the caller to push back.
        """
        queue = self.queue
        entries = self._residency.entries
        while (item := queue.pop(background_only=background_only)) is not None:
            entry = entries[item.key]
            entry.queue_items -= 1
            if entry.state is not ChunkState.QUEUED:
                if entry.state is ChunkState.EVICTED and not entry.queue_items:
                    self._residency.remember_evicted(entry)  # its last stale item is gone
                continue
            if queue.is_stale(item, self.current_generation):
                if self.fetch_superseded:
                    entry.queue_items += 1
                    queue.push_demoted(item)
                elif entry.queue_items == 0 and not self._dependencies.awaits_inputs(entry):
                    self.park(entry)  # no view wants it any more
                continue
            if avoid and entry.key.source in avoid:
                entry.queue_items += 1  # still queued: put back below
                skipped.append(item)
                continue
            return item
        return None

    def take_riders(self, leader: Entry, reason: EventReason, outbox: Outbox) -> None:
        """Move the QUEUED chunks of `leader`'s batch a view still wants to LOADING with it.

        They are read by `leader`'s worker in one `read_chunks` call and count as
        one task; their queue items stay in the queue and are skipped when popped
        (no longer QUEUED). Parked chunks (no view wants them) stay behind. A source
        with a true `batch_share` gets at most this worker's share of the queued
        chunks of the leader's kind (visible or background; an upper bound), and only
        chunks wanted as that kind.
        """
        members = self.batches.get((leader.key.source, leader.batch))
        if not members:
            return
        shared = bool(getattr(leader.source, "batch_share", False))
        limit = _share(self.queue, self.concurrency, leader) if shared else _BATCH_LIMIT
        riders: list[Entry] = []
        for entry in list(members.values()):
            if len(riders) + 1 >= limit:
                break
            if entry.key in self.parked or not self.wanted(entry):
                continue
            if shared and not _wanted_as(self, entry, bool(leader.background)):
                continue  # visible work carries no background chunk, nor the other way
            self._transition(entry, ChunkState.LOADING, reason, outbox)
            entry.started = leader.started
            entry.cancelled = False
            self.loading[entry.key] = entry
            self.riding.add(entry.key)
            riders.append(entry)
        if riders:
            leader.riders = riders

    def finished(self, entry: Entry) -> None:
        """A load of `entry` ended (whatever its outcome): it no longer counts as loading."""
        entry.inputs = None
        entry.riders = None
        if entry.background is not None:
            if entry.key not in self.stalled:  # a stalled one no longer counts
                if entry.background:
                    self.background_tasks -= 1
                else:
                    self.visible_tasks -= 1
            entry.background = None
        self.riding.discard(entry.key)
        del self.loading[entry.key]
        if entry.key in self.stalled:
            self.stalled.discard(entry.key)
            self.active_tasks += 1  # counts again; retires later if over `concurrency`

    # -- stalled and cancelled loads ---------------------------------------

    def stall_cap(self) -> int:
        return max(8, 2 * self.concurrency)

    def arm_watchdog(self, outbox: Outbox) -> None:
        """Wake up when the oldest counted load becomes stalled, if work waits behind it.

        One deadline at a time, armed only while chunks are queued and every
        worker is busy; the process's one alarm thread (`executors.ALARMS`)
        rings it, and ends when a cache closes with none armed, or after a
        while with none armed.
        """
        if (
            self.stalled_after is None
            or self.watchdog is not None
            or self.closed
            or not self.queue
            or self.active_tasks < self.concurrency
            or len(self.stalled) >= self.stall_cap()
        ):
            return
        oldest = next(
            (
                e.started
                for e in self.loading.values()
                if e.key not in self.stalled and not e.derived and e.key not in self.riding
            ),
            None,
        )
        if oldest is None:
            return
        self.watchdog = oldest + self.stalled_after
        outbox.watchdog = (self.alarm, self.watchdog)  # armed after the lock

    def watchdog_fired(self, outbox: Outbox) -> None:
        """Set stalled loads aside so new workers start (the timer's thread, lock held)."""
        if self.watchdog is None or self.closed:
            return
        self.watchdog = None
        assert self.stalled_after is not None
        now = time.perf_counter()
        for entry in self.loading.values():
            if len(self.stalled) >= self.stall_cap():
                break
            if (
                entry.key not in self.stalled
                and not entry.derived  # combining is CPU work: more threads do not help
                and entry.key not in self.riding  # not a task: its leader counts
                and now - entry.started >= self.stalled_after
            ):
                self.stalled.add(entry.key)
                self.active_tasks -= 1  # its worker no longer counts, as either kind
                if entry.background:
                    self.background_tasks -= 1
                elif entry.background is not None:
                    self.visible_tasks -= 1
        self.schedule_starts(outbox)

    def wanted(self, entry: Entry) -> bool:
        """Whether anyone still wants a chunk being read, or about to be (if not, its read
        may be cancelled, and it does not ride along in another chunk's batch)."""
        if entry.pins or self.fetch_superseded:
            return True
        if any(not self.is_stale(i) for i in entry.wants.values()):
            return True
        return self._dependencies.wanted_by_dependents(entry)

    def cancel_unwanted(self, outbox: Outbox) -> None:
        """Ask to cancel the reads of LOADING chunks nobody wants any more.

        Looks only at the loads in flight (a few: about `concurrency`).
        """
        for entry in self.loading.values():
            if (
                not entry.cancelled
                and cancellable(entry)
                and getattr(entry.source, "cancel_superseded", True)
                and not self.wanted(entry)
            ):
                entry.cancelled = True
                outbox.cancels.append(entry)

    def return_cancelled(self, entry: Entry, outbox: Outbox) -> None:
        """A cancelled load goes back to QUEUED: queued again if wanted, else parked."""
        self._transition(entry, ChunkState.QUEUED, EventReason.CANCELLED, outbox)
        live = [item for item in entry.wants.values() if not self.is_stale(item)]
        entry.wants.clear()
        for item in live:
            self.push(entry, item)
            self.queue.push_item(item)
        if not live and entry.pins:
            # A live request still pins it, but no view queued it: queue it as needed.
            self.queue_as_needed(entry)
        if entry.queue_items == 0:
            self.park(entry)  # parks (or re-queues) the derived chunks waiting for it

    def close(self) -> list[Entry]:
        """Stop scheduling: drop the queue, the deferred chunks and the watchdog; the loads
        to cancel."""
        self.closed = True
        self.queue.clear()
        self._dependencies.clear()
        self.alarm.close()  # never waits; its thread ends
        self.watchdog = None
        cancels: list[Entry] = []
        for entry in self.loading.values():
            if not entry.cancelled and cancellable(entry):
                entry.cancelled = True
                cancels.append(entry)
        return cancels


def cancellable(entry: Entry) -> bool:
    """Whether a LOADING chunk's read can be cancelled (its source is a `CancellableSource`).

    Duck-typed like `is_derived` (cheaper than a runtime protocol check); a
    derived chunk's `combine` has no cancel hook.
    """
    return not entry.derived and callable(getattr(entry.source, "cancel_load", None))


def _share(queue: PriorityQueue, concurrency: int, leader: Entry) -> int:
    """The most chunks a batch that only saves per-chunk work (local reads) may take: this
    worker's share of what is queued of the leader's kind. One worker reading a batch while
    the others have nothing left would cost more than the batch saves."""
    queued = queue.background if leader.background else queue.needed
    return min(_BATCH_LIMIT, math.ceil((queued + 1) / max(1, concurrency)))


def _wanted_as(scheduler: Scheduler, entry: Entry, background: bool) -> bool:
    """Whether a live view wants `entry` as background work (else as visible work)."""
    return any(
        is_background(item.load_class) == background and not scheduler.is_stale(item)
        for item in entry.wants.values()
    )


def loading_reason(named: str) -> EventReason:
    """The reason of a chunk's move to LOADING for a source whose `load_reason` is `named`:
    that reason when it is one of the vocabulary (a dask source: `EventReason.COMPUTING`),
    else STARTED."""
    try:
        return EventReason(named)
    except ValueError:  # not in the closed vocabulary: the move is a plain start
        return EventReason.STARTED


def distance(key: ChunkKey, center: Sequence[float] | None) -> float:
    """Squared distance of `key`'s centre from `center` (0 without one)."""
    if center is None or len(center) != len(key.inclusive_min):
        return 0.0
    # Twice the offsets, in C (one per chunk queued: a generator cost 62 bytecodes).
    twice = tuple(
        map(sub, map(add, key.inclusive_min, key.exclusive_max), map(add, center, center))
    )
    return math.sumprod(twice, twice) / 4
