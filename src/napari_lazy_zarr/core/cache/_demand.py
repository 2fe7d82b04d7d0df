"""`Demand`: which chunks the live requests of a `ChunkCache` need, and who waits for which.

It owns each view's live `Request`, and per chunk the requests waiting for it
to land; it pins a request's chunks when the request is made and unpins them
when it is released or superseded; and when a load ends it lands the chunk
(READY or FAILED) and tells whoever waits: requests, and derived chunks; a retry
asks for FAILED chunks again.

Thread contract
---------------
Every field (and every request's `_remaining` and `_released`) is read and
written only under the owning cache's lock. `Demand` never takes a lock
itself; it queues chunks through the scheduler, moves states through the
façade's one `_transition`, and puts what must happen after the lock (finished
and superseded requests) into the `Outbox` it is handed.
"""

from __future__ import annotations

import asyncio
import time
from concurrent import futures
from typing import TYPE_CHECKING, Any, cast

from napari_lazy_zarr.core.cache._residency import not_started
from napari_lazy_zarr.core.cache.schedule import LoadClass
from napari_lazy_zarr.core.errors import ChunkReadError, LoadCancelledError
from napari_lazy_zarr.core.states import ChunkState, EventReason

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable, Sequence

    import numpy as np

    from napari_lazy_zarr.core.cache._counters import Counters
    from napari_lazy_zarr.core.cache._dependencies import Dependencies
    from napari_lazy_zarr.core.cache._outbox import Outbox
    from napari_lazy_zarr.core.cache._residency import Entry, Residency, Transition
    from napari_lazy_zarr.core.cache._scheduler import Scheduler
    from napari_lazy_zarr.core.cache.request import Request
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.sources.protocol import DerivedSource

__all__ = ["Demand", "is_cancellation"]


class Demand:
    """The live request of each view and the requests waiting for each chunk (lock held).

    It tells `dependencies` how to fail a derived chunk (`fail_unstarted`).
    """

    __slots__ = (
        "_counters",
        "_dependencies",
        "_residency",
        "_scheduler",
        "_transition",
        "views",
        "waiting",
    )

    def __init__(
        self,
        residency: Residency,
        scheduler: Scheduler,
        dependencies: Dependencies,
        counters: Counters,
        transition: Transition,
    ) -> None:
        self._residency = residency
        self._scheduler = scheduler
        self._dependencies = dependencies
        dependencies.fail = self.fail_unstarted
        self._counters = counters
        self._transition = transition
        self.views: dict[Hashable, Request] = {}
        self.waiting: dict[ChunkKey, list[Request]] = {}

    def admit(
        self,
        request: Request,
        needed: Sequence[ChunkRef],
        extra: Sequence[ChunkRef],
        load_class: LoadClass,
        level: int,
        center: Sequence[float] | None,
        outbox: Outbox,
        ahead: Sequence[ChunkRef] = (),
    ) -> None:
        """Make `request` its view's live one: pin `needed`, queue the missing chunks, the
        `ahead` ones (`LoadClass.AHEAD`) and the `extra` ones (prefetch), and release the
        request it supersedes."""
        residency, scheduler, counters = self._residency, self._scheduler, self._counters
        view, generation = request.view, request.generation
        if view is not None:
            previous = self.views.pop(view, None)
            if previous is not None:
                self.unpin(previous, outbox)
                outbox.superseded.append(previous)
            self.views[view] = request
        for ref in needed:
            entry = residency.entry(ref)
            residency.pin(entry)  # a READY chunk leaves the LRU while pinned
            if entry.state is ChunkState.FAILED and not_started(entry.error):
                self.requeue_failed(entry, outbox)  # no thread could read it: asked again
            if entry.state is ChunkState.READY:
                counters.hits += 1
                request._land(entry.key)
                continue
            counters.misses += 1
            scheduler.enqueue(entry, load_class, level, center, view, generation, outbox)
            if entry.state is ChunkState.FAILED:
                request._land(entry.key, failed=True)
            else:
                self.waiting.setdefault(entry.key, []).append(request)
                request._remaining += 1
        # What is ahead loads in the order given (the next frame whole before the one after;
        # a distance from the view's centre would take the centres of every frame first).
        for refs, extra_class in ((ahead, LoadClass.AHEAD), (extra, LoadClass.PREFETCH)):
            for index, ref in enumerate(refs):
                entry = residency.entry(ref)
                if entry.state is ChunkState.FAILED and not_started(entry.error):
                    self.requeue_failed(entry, outbox)
                scheduler.enqueue(
                    entry,
                    extra_class,
                    level,
                    center,
                    view,
                    generation,
                    outbox,
                    rank=float(index) if extra_class is LoadClass.AHEAD else None,
                )
        if request._remaining == 0:
            outbox.finished.append(request)
        if view is not None:
            scheduler.cancel_unwanted(outbox)  # the superseded request's loads
        scheduler.schedule_starts(outbox)

    def unpin(self, request: Request, outbox: Outbox) -> None:
        """Release `request`'s pins (idempotent); its view's queued chunks go stale."""
        if request._released:
            return
        request._released = True
        residency, entries, all_waiting = self._residency, self._residency.entries, self.waiting
        stale = self._dependencies.stale
        for key in request.keys:
            entry = entries[key]
            residency.unpin(entry)
            if stale and entry.pins == 0:
                self._dependencies.unpinned(entry, outbox)
            waiting = all_waiting.get(key)
            if waiting is not None and request in waiting:
                waiting.remove(request)
                if not waiting:
                    del all_waiting[key]
        if self.views.get(request.view) is request:
            del self.views[request.view]
            # Released, not replaced: its queued chunks are superseded too.
            self._scheduler.supersede(request.view)
        if not self._scheduler.closed:
            residency.evict_over_limit(outbox)

    def record(
        self,
        entry: Entry,
        data: np.ndarray[Any, Any] | None,
        error: BaseException | None,
        outbox: Outbox,
    ) -> None:
        """Record the outcome of a load a worker finished: READY, FAILED, or (cancelled)
        back to QUEUED."""
        self._scheduler.finished(entry)
        # After a cancel the cache asked for, any error is the cancel's doing: a
        # FAILED chunk would stay failed although only the user's view moved on.
        if error is not None and (entry.cancelled or is_cancellation(error)):
            self._scheduler.return_cancelled(entry, outbox)
        else:
            self._counters.latencies.append(time.perf_counter() - entry.started)
            self.complete(entry, data, error, outbox)

    def complete(
        self,
        entry: Entry,
        data: np.ndarray[Any, Any] | None,
        error: BaseException | None,
        outbox: Outbox,
    ) -> None:
        """Move a LOADING chunk to READY (`data`) or FAILED (`error`) and tell who waits."""
        entry.wants.clear()
        entry.cancelled = False
        if data is not None:
            data.flags.writeable = False
            entry.data = data
            entry.nbytes = int(data.nbytes)
            self._transition(entry, ChunkState.READY, EventReason.LOADED, outbox)
            self._counters.loads += 1
            self._residency.hold(entry)
            if entry.left_out:
                self._dependencies.partial_landed(entry, outbox)
        else:
            entry.left_out = None
            entry.error = error
            self._transition(entry, ChunkState.FAILED, EventReason.FAILED, outbox)
            self._counters.failures += 1
        key = entry.key
        # A partial derived chunk is FAILED to whoever waits (views read it with `partial`).
        failed = data is None or bool(entry.left_out)
        for request in self.waiting.pop(key, ()):
            if data is not None and not failed and request.on_ready is not None:
                outbox.deliveries.append((request, key, data))  # on_ready, then landed
            else:
                request._land(key, failed=failed)
            request._remaining -= 1
            if request._remaining == 0:
                outbox.finished.append(request)
        if self._dependencies.dependents:  # derived chunks wait for inputs
            self._dependencies.landed(entry, data, error, outbox)
        if data is not None:
            self._residency.evict_over_limit(outbox)

    def fail_unstarted(self, entry: Entry, error: BaseException, outbox: Outbox) -> None:
        """Fail a QUEUED derived chunk without reading it: QUEUED -> LOADING -> FAILED."""
        self._dependencies.drop_deferred(entry)
        self._transition(entry, ChunkState.LOADING, EventReason.STARTED, outbox)
        self.complete(entry, None, error, outbox)

    def fail_unstartable(self, cause: BaseException, outbox: Outbox) -> None:
        """No worker task runs and none could start (`cause`): fail the QUEUED chunks
        someone wants, so nobody waits for good.

        Each fails with a `ChunkReadError` naming `cause` (QUEUED -> LOADING ->
        FAILED); the derived chunks waiting for them fail with them. A later
        request for such a chunk queues it again by itself (`not_started`);
        chunks nobody wants stay queued, parked when they reach the front.
        """
        scheduler, entries = self._scheduler, self._residency.entries
        seen: set[ChunkKey] = set()
        for item in scheduler.queue.items():
            entry = entries.get(item.key)
            if (
                entry is None
                or item.key in seen
                or entry.state is not ChunkState.QUEUED
                or item.key in scheduler.parked
            ):
                continue
            seen.add(item.key)
            if not scheduler.wanted(entry):
                continue
            error = ChunkReadError(
                f"chunk {entry.key}: not read: no worker thread could start ({cause}); "
                "asked for again, it is read once threads can start"
            )
            error.__cause__ = cause
            self.fail_unstarted(entry, error, outbox)

    def retry(self, keys: Iterable[ChunkKey], outbox: Outbox) -> int:
        """Ask again for the FAILED chunks among `keys` (`ChunkCache.retry`): re-queue them;
        how many."""
        count = 0
        for key in keys:
            entry = self._residency.entries.get(key)
            if entry is not None:
                count += self.requeue_failed(entry, outbox)
        self._scheduler.schedule_starts(outbox)
        return count

    def requeue_failed(self, entry: Entry, outbox: Outbox) -> int:
        """Re-queue `entry` if FAILED, with its FAILED inputs if derived; how many moved."""
        if entry.state is not ChunkState.FAILED:
            return 0
        entry.error = None
        self._transition(entry, ChunkState.QUEUED, EventReason.RETRY, outbox)
        self._scheduler.queue_as_needed(entry)
        if self._dependencies.partial:
            self._dependencies.input_retried(entry.key, outbox)
        count = 1
        if entry.derived:
            # It failed because an input did, typically: retrying it alone would fail again.
            try:
                inputs = cast("DerivedSource", entry.source).chunk_inputs(entry.coords)
            except Exception:
                inputs = ()  # the chunk fails again when taken, naming the cause
            for ref in inputs:
                found = self._residency.entries.get(ref.key)
                if found is not None:
                    count += self.requeue_failed(found, outbox)
        return count

    def close(self) -> list[Request]:
        """Forget who waits: the requests waiting for chunks, each once."""
        waiting: list[Request] = []
        seen: set[int] = set()
        for requests in self.waiting.values():
            for request in requests:
                if id(request) not in seen:
                    seen.add(id(request))
                    waiting.append(request)
        self.waiting.clear()
        return waiting


def is_cancellation(error: BaseException) -> bool:
    """Whether a load failed because it was cancelled: `LoadCancelledError` (maybe
    wrapped), or the cancellation of the asyncio task or future it waited on."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(
            current, LoadCancelledError | asyncio.CancelledError | futures.CancelledError
        ):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False
