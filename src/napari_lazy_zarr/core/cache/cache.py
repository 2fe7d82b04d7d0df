"""`ChunkCache`: the byte-bounded chunk cache, its state machine, and the workers that fill it.

Threading contract
------------------
One lock guards every entry, the LRU order, the pins, the load queue, the
derived chunks' bookkeeping and the statistics. Every state move goes through
`_transition`, checked against `LEGAL_MOVES`. Workers (`_workers`) read and
decode chunks (or combine a derived chunk's inputs) *outside* the lock
(`_reads`) and change state only through `Workers.finish`. Events are collected under the lock and
emitted (psygnal signals, request futures, executor submissions) only after it
is released, so a slot may call back into the cache.

`ChunkCache` is a façade holding that lock, the `_transition`, the worker loop
and the emission. The state lives in helpers that are only ever touched under
the lock and never take a lock themselves: `_residency` (entries, LRU, pins,
bytes, eviction), `_scheduler` (queue, generations, parking, batches, stalls,
cancellation), `_dependencies` (deferred derived chunks), `_demand` (live
requests, who waits for which chunk, landing a load, retries) and `_counters`; what
must happen after the lock goes into an `_outbox.Outbox`.

Derived chunks
--------------
A chunk of a `DerivedSource` (a virtual pyramid level) is computed from
*input* chunks of other sources. When a worker takes such a QUEUED chunk and
all its inputs are READY, it takes their (read-only) arrays under the lock,
moves the chunk to LOADING and combines them outside the lock. Otherwise the
missing inputs are queued as ordinary loads with the chunk's own queue item
(so they inherit its class, cost, level, distance, view and generation), and
the chunk is *deferred*: it stays QUEUED, out of the queue, holding the input
arrays gathered so far, until its last input lands READY and it is queued
again. An input that FAILS fails its deferred dependents (QUEUED -> LOADING ->
FAILED, with a `ChunkReadError` naming the input), unless their source leaves
failed inputs out (``leaves_out_failed_inputs``: a virtual level): they are then
combined from the inputs that loaded and become READY *partial* — returned to
views (``lookup(..., partial=True)``), refused to blocking reads (FAILED to
them, with the input's error), and evicted when the input is retried
(`_dependencies`). An input parked because its
view moved on parks the dependents waiting for it (their gathered arrays are
dropped); asking for a dependent again drives it, and its inputs, again.

Bounded in time
---------------
The cache's own workers are daemon threads (`DaemonExecutor`): `close()`
returns at once whatever storage does, and the interpreter can exit with loads
in flight. A load that runs longer than `stalled_after` seconds stops counting
against `concurrency` (up to `max(8, 2 * concurrency)` such loads), so one read
hung in storage never keeps the chunks of other views waiting.

Cancellation
------------
When nobody wants a LOADING chunk any more (every view that asked for it moved
on or was released, no live request pins it, no derived chunk a live view
wants waits for it), the cache calls `cancel_load(coords)` on its source if the
source is a `CancellableSource`, outside the lock. A `read_chunk` that then
raises (`LoadCancelledError`, or any error once cancelled) sends the chunk back
to QUEUED (`EventReason.CANCELLED`), parked like superseded queued work, never
FAILED; a view
asking for it again queues it again. A source whose reads are cheap to finish
but costly to redo (a download nearly done: `ZarrChunkSource`) sets
``cancel_superseded = False``: its reads are then cancelled only by `close()`.
`close()` cancels every LOADING chunk of a cancellable source the same way,
and wakes every caller waiting on a request with `CacheClosedError`. Loads
asked for without a `view` are never cancelled (no newer request can supersede
them). A source may name its LOADING reason (e.g.
`EventReason.COMPUTING`) with a `load_reason` attribute.

Eviction
--------
Only READY chunks no live request pins are in the LRU order; pinning takes a
chunk out and unpinning puts it back as most recently used. A landing over the
limit therefore evicts from the front of the LRU in O(1) per chunk evicted,
however many pinned chunks exceed the limit.
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Final, overload

import numpy as np
from psygnal import Signal

from napari_lazy_zarr.core.cache._counters import Counters
from napari_lazy_zarr.core.cache._demand import Demand
from napari_lazy_zarr.core.cache._dependencies import Dependencies
from napari_lazy_zarr.core.cache._events import EventLog
from napari_lazy_zarr.core.cache._outbox import Outbox, cancel_loads
from napari_lazy_zarr.core.cache._residency import Entry, Residency
from napari_lazy_zarr.core.cache._scheduler import Scheduler
from napari_lazy_zarr.core.cache._status import chunk_status
from napari_lazy_zarr.core.cache._workers import Workers
from napari_lazy_zarr.core.cache.request import Request
from napari_lazy_zarr.core.cache.schedule import LoadClass
from napari_lazy_zarr.core.executors import DaemonExecutor, Executor
from napari_lazy_zarr.core.states import (
    LEGAL_MOVES,
    ChunkEvent,
    ChunkState,
    EventReason,
    IllegalTransitionError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Sequence

    from napari_lazy_zarr.core.cache.snapshots import CacheCounters, CacheStatistics, ChunkStatus
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef

__all__ = [
    "DEFAULT_STALLED_AFTER",
    "DEFAULT_TOTAL_BYTES_LIMIT",
    "ChunkCache",
    "check_concurrency",
    "check_total_bytes_limit",
    "default_concurrency",
]

_LOG = logging.getLogger(__name__)

DEFAULT_TOTAL_BYTES_LIMIT: Final = 1 << 30
"""1 GiB: TensorStore's usual cache pool size for interactive viewing."""

DEFAULT_STALLED_AFTER: Final = 1.0
"""Seconds after which a running load stops counting against `concurrency`."""


def default_concurrency() -> int:
    """Worker threads for local stores: one per core (decoding is CPU-bound), at least 2."""
    return max(2, os.cpu_count() or 1)


class ChunkCache:
    """A byte-bounded, least-recently-used cache of decoded chunks, filled by worker threads.

    Parameters
    ----------
    total_bytes_limit
        Capacity in bytes of decoded chunk data, an int >= 0, less what the
        sources read keep beside their chunks (`KeepingSource.kept_bytes`: the
        shard indexes of sharded arrays). Chunks pinned by live requests may
        exceed it; nothing else does.
    concurrency
        How many chunks load at once (worker threads), an int >= 1.
    executor
        Where loads run; the cache's own daemon worker threads
        (`DaemonExecutor`) by default. Pass `InlineExecutor()` to load
        synchronously, or `ManualExecutor()` to step loads by hand in tests.
        An executor passed in is not shut down by `close()`.
    stalled_after
        Seconds after which a running load of the cache's own workers stops
        counting against `concurrency`, so that a read hung in storage does
        not hold up other chunks (at most ``max(8, 2 * concurrency)`` loads
        are set aside so). None: never. Ignored with an `executor` passed in.
    event_log_size
        How many recent `ChunkEvent`s the log keeps.
    fetch_superseded
        Whether chunks queued for a view the user has left still load (after
        all current work). By default they are dropped when they reach the
        front of the queue: they stay QUEUED, *parked*, and load only if a view
        asks for them again — nothing is downloaded for views nobody looks at.

    Raises
    ------
    TypeError, ValueError
        A bad argument (e.g. ``concurrency=2.5``, ``total_bytes_limit=-1``):
        programming errors, so Python's builtin types, naming the argument.

    Signals
    -------
    state_changed(tuple[ChunkEvent, ...])
        A batch of state moves, emitted from whichever thread made them.
    statistics_changed(CacheStatistics)
        After each batch, only computed when something is connected.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.executors import InlineExecutor
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> source = ArraySource(np.arange(10), chunks=(4,), name="x")
    >>> cache = ChunkCache(1 << 20, executor=InlineExecutor())
    >>> with cache.request([ChunkRef.of(source, (0,))]) as request:
    ...     request.complete
    True
    >>> cache.state(ChunkRef.of(source, (0,)).key)
    <ChunkState.READY: 'ready'>
    >>> cache.statistics.loads
    1
    """

    state_changed = Signal(tuple)
    statistics_changed = Signal(object)

    def __init__(
        self,
        total_bytes_limit: int = DEFAULT_TOTAL_BYTES_LIMIT,
        *,
        concurrency: int | None = None,
        executor: Executor | None = None,
        event_log_size: int = 10_000,
        fetch_superseded: bool = False,
        stalled_after: float | None = DEFAULT_STALLED_AFTER,
    ) -> None:
        limit = check_total_bytes_limit(total_bytes_limit)
        concurrency = check_concurrency(
            default_concurrency() if concurrency is None else concurrency
        )
        _check_stalled_after(stalled_after)
        self._owned_executor: DaemonExecutor | None = None
        if executor is None:
            # The active-task count, not the pool, enforces `concurrency`.
            self._owned_executor = DaemonExecutor(name="lazy-zarr-load")
            executor = self._owned_executor
        self._lock = threading.Lock()
        # The helpers own the state; each is touched only under `_lock` (their thread
        # contract), and every state move they make goes through `_transition`.
        self._counters = Counters()
        self._residency = Residency(limit, self._counters, self._transition)
        self._dependencies = Dependencies(self._residency)
        self._scheduler = Scheduler(
            self._residency,
            self._dependencies,
            self._transition,
            concurrency=concurrency,
            fetch_superseded=fetch_superseded,
            # Only the cache's own workers may be outnumbered: an injected executor's
            # tasks run where its owner decides (inline, or stepped by a test).
            stalled_after=stalled_after if self._owned_executor is not None else None,
            on_watchdog=self._on_watchdog,
        )
        self._demand = Demand(
            self._residency, self._scheduler, self._dependencies, self._counters, self._transition
        )
        self._workers = Workers(executor, self._lock, self._scheduler, self._demand, self._flush)
        # The helpers' tables under the names the tests' invariants read (the same objects).
        self._entries = self._residency.entries
        self._parked = self._scheduler.parked
        self._deferred = self._dependencies.deferred
        self._dependents = self._dependencies.dependents
        self._log = EventLog(event_log_size)  # columns: events kept as objects cost GC time
        # Events made under the lock wait here to be emitted in the order they happened.
        self._unemitted: list[ChunkEvent] = []
        self._emit_lock = threading.RLock()

    # -- configuration -----------------------------------------------------

    @property
    def total_bytes_limit(self) -> int:
        return self._residency.limit

    @total_bytes_limit.setter
    def total_bytes_limit(self, value: int) -> None:
        """Set the capacity (an int >= 0); evicts at once what no longer fits."""
        limit = check_total_bytes_limit(value)
        outbox = Outbox()
        with self._lock:
            self._residency.limit = limit
            self._residency.evict_over_limit(outbox)
        self._flush(outbox)

    @property
    def concurrency(self) -> int:
        return self._scheduler.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        """Set how many chunks load at once (an int >= 1); more start at once if queued."""
        concurrency = check_concurrency(value)
        outbox = Outbox()
        with self._lock:
            self._scheduler.concurrency = concurrency
            self._scheduler.schedule_starts(outbox)
        self._flush(outbox)

    # -- requests ----------------------------------------------------------

    def request(
        self,
        chunks: Iterable[ChunkRef],
        *,
        view: Hashable = None,
        level: int = 0,
        center: Sequence[float] | None = None,
        prefetch: Iterable[ChunkRef] = (),
        ahead: Iterable[ChunkRef] = (),
        load_class: LoadClass = LoadClass.NEEDED,
        on_ready: Callable[[ChunkKey, np.ndarray[Any, Any]], None] | None = None,
    ) -> Request:
        """Pin `chunks`, queue the missing ones, and return the live `Request`.

        Parameters
        ----------
        chunks
            The chunks the view needs. READY ones count as hits; NEW and
            EVICTED ones are queued; FAILED ones are *not* re-read (use `retry`).
        view
            Identifies the view (e.g. a layer); a newer request for the same view
            supersedes this one: its pins are released, its future cancelled, and
            its still-queued chunks drop below all current work.
        level
            Pyramid level, 0 the finest; coarser levels load first.
        center
            The view centre in storage coordinates; chunks nearer it load first.
            Defaults to the centre of the needed chunks' bounding box.
        prefetch
            Chunks to load at low priority and without pinning (neighbours of
            the view, adjacent planes). Prefetch never evicts pinned chunks.
        ahead
            Chunks about to be shown, loaded without pinning as `LoadClass.AHEAD`:
            after `chunks`, but with the visible budget rather than the background
            one (the planes ahead of a walk through z or t, which playback shows
            next).
        load_class
            The priority class of `chunks` (and of the inputs of derived ones):
            `LoadClass.NEEDED` for what the view displays, `LoadClass.OVERVIEW`
            for overview work such as napari's thumbnail read of the coarsest
            level, which then never delays a displayed chunk. See
            `PriorityQueue` for the whole ordering rule.
        on_ready
            Called as ``on_ready(key, data)`` for each needed chunk that loads READY
            after the request is made, on the thread that loaded it, without the
            cache's lock, before `Request.landed` yields the key: a blocking read
            copies the chunk out there, on the worker that decoded it (its data still
            in that core's cache, the copies of two workers in parallel). Chunks
            already READY or FAILED, and failures, only land. `done` may resolve
            while another worker's call still runs; `landed` never yields early.
        """
        if load_class is LoadClass.STALE:
            raise ValueError("LoadClass.STALE is the cache's own class for superseded work")
        needed = _unique(chunks)
        needed_keys = {ref.key for ref in needed}
        soon = [ref for ref in _unique(ahead) if ref.key not in needed_keys]
        needed_keys.update(ref.key for ref in soon)
        extra = [ref for ref in _unique(prefetch) if ref.key not in needed_keys]
        if center is None:
            center = _bbox_center([ref.key for ref in needed])
        outbox = Outbox()
        with self._lock:
            self._scheduler.check_open()
            generation = self._scheduler.next_generation(view)
            keys = tuple(ref.key for ref in needed)
            request = Request(self, keys, view, generation, on_ready)
            self._demand.admit(
                request, needed, extra, load_class, level, center, outbox, ahead=soon
            )
        self._flush(outbox)
        return request

    def lookup(self, key: ChunkKey, *, partial: bool = False) -> np.ndarray[Any, Any] | None:
        """The READY chunk (read-only; if partial, only with `partial`), else None; touches it."""
        with self._lock:
            return self._residency.lookup(key, partial)

    @property
    def closed(self) -> bool:
        """Whether `close` was called (a closed cache serves no reads)."""
        return self._scheduler.closed

    def lookup_many(
        self, keys: Iterable[ChunkKey], *, count_hits: bool = False, partial: bool = False
    ) -> tuple[dict[ChunkKey, np.ndarray[Any, Any]], set[ChunkKey]]:
        """The READY chunks among `keys` (marked recently used) and the FAILED ones.

        One lock acquisition for a whole view: a thread that reads many chunks
        (napari's, for a volume) does not queue for the lock once per chunk.
        `count_hits` counts the READY ones as cache hits (a read served from them;
        its missing chunks are counted as misses when requested). A partial derived
        chunk is READY with `partial` (a view's read), else FAILED (`error` says why).
        """
        with self._lock:
            return self._residency.lookup_many(keys, count_hits, partial)

    # -- inspection --------------------------------------------------------

    def state(self, key: ChunkKey) -> ChunkState:
        """The chunk's state (NEW for a chunk the cache has never seen)."""
        with self._lock:
            entry = self._entries.get(key)
            return ChunkState.NEW if entry is None else entry.state

    def states(self) -> dict[ChunkKey, ChunkState]:
        """A snapshot of every known chunk's state."""
        with self._lock:
            return {key: entry.state for key, entry in self._entries.items()}

    def error(self, key: ChunkKey) -> BaseException | None:
        """The exception a FAILED chunk failed with (a partial derived chunk: its input's)."""
        with self._lock:
            return self._residency.errors((key,)).get(key)

    def events(self) -> tuple[ChunkEvent, ...]:
        """The most recent events, oldest first (bounded by `event_log_size`)."""
        with self._lock:
            return self._log.events()

    def is_pinned(self, key: ChunkKey) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and entry.pins > 0

    def status(self, key: ChunkKey) -> ChunkStatus:
        """Everything the cache knows about one chunk, in one locked section (read-only).

        Counting the loads ahead of a queued chunk walks only the part of the
        queue's heap that sorts before it (capped), so it is cheap near the front.
        """
        with self._lock:
            return chunk_status(key, self._residency, self._scheduler, self._dependencies)

    @overload
    def counters(self) -> CacheCounters: ...
    @overload
    def counters(self, *, wait: bool) -> CacheCounters | None: ...

    def counters(self, *, wait: bool = True) -> CacheCounters | None:
        """The running counters, in O(1) per source that keeps bytes (read-only; `statistics`
        adds latencies and tables).

        With ``wait=False`` it returns None rather than wait for the lock (a UI
        thread refreshing a display keeps its previous counters instead of
        waiting behind a request of thousands of chunks).
        """
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            return self._counters.counters(self._residency, len(self._parked), len(self._deferred))
        finally:
            self._lock.release()

    def parked_and_deferred(self) -> tuple[frozenset[ChunkKey], frozenset[ChunkKey]]:
        """The QUEUED chunks no worker will take now: parked ones and deferred ones.

        Parked: their view moved on (they load only when asked again). Deferred:
        derived chunks waiting for their inputs. Read-only, one locked section.

        Examples
        --------
        >>> with ChunkCache(1 << 20) as cache:
        ...     cache.parked_and_deferred()
        (frozenset(), frozenset())
        """
        with self._lock:
            return frozenset(self._parked), frozenset(self._deferred)

    @property
    def statistics(self) -> CacheStatistics:
        with self._lock:
            return self._statistics()

    @property
    def _lru_visits(self) -> int:
        """LRU entries eviction has looked at (a test counts the work)."""
        return self._residency.lru_visits

    # -- control -----------------------------------------------------------

    def retry(self, key: ChunkKey) -> bool:
        """Re-queue one FAILED chunk; False if it is not FAILED.

        A FAILED derived chunk re-queues its FAILED inputs with it.
        """
        return self._retry([key]) > 0

    def retry_failed(self) -> int:
        """Re-queue every FAILED chunk; returns how many."""
        with self._lock:
            keys = [k for k, e in self._entries.items() if e.state is ChunkState.FAILED]
        return self._retry(keys)

    def release_view(self, view: Hashable) -> None:
        """Release the live request of `view`, if any (unpins its chunks; queued ones go stale)."""
        with self._lock:
            request = self._demand.views.get(view)
        if request is not None:
            request.release()

    def evict_unpinned(self) -> int:
        """Evict every READY chunk no live request pins; returns how many."""
        outbox = Outbox()
        with self._lock:
            count = self._residency.evict_unpinned(outbox)
        self._flush(outbox)
        return count

    def discard(self, identities: Iterable[Hashable]) -> int:
        """Evict and forget the chunks of the sources with these identities (`ChunkKey.source`)
        that nothing holds; how many chunks were forgotten.

        For data that can never be read again (napari's removed layer: a reopened
        store has a new identity). READY and EVICTED chunks no live request pins,
        and QUEUED ones parked, are dropped from the cache; pinned, loading and
        failed ones stay. Asked for again, a forgotten chunk is read again
        (NEW -> QUEUED): discarding data still in use only costs a re-read.
        """
        wanted = frozenset(identities)
        outbox = Outbox()
        with self._lock:
            count = self._scheduler.forget_parked(wanted) + self._residency.forget(wanted, outbox)
        self._flush(outbox)
        return count

    def close(self) -> None:
        """Stop loading, at once, whatever storage does (idempotent; any thread).

        Drops the queue, asks the sources of LOADING chunks to cancel their
        reads (`CancellableSource`), and wakes every caller waiting on a
        request (`Request.landed`, `Request.done`, `ChunkedArray.result`) with
        `CacheClosedError`. Never waits for a running load: the cache's own
        workers are daemon threads, and a load finishing after `close` is
        dropped. New requests raise `CacheClosedError`.

        READY chunks no live request pins are evicted, their memory given back
        at once (else it waits for a cyclic collection, and a next cache
        cannot reuse its blocks); pinned ones stay readable with `lookup`.
        """
        outbox = Outbox()
        with self._lock:
            if self._scheduler.closed:
                return
            cancels = self._scheduler.close()
            waiting = self._demand.close()
            self._residency.evict_unpinned(outbox)
        self._flush(outbox)
        if self._owned_executor is not None:
            self._owned_executor.shutdown()
        for request in waiting:
            request._wake_closed()
        cancel_loads(cancels)

    def __enter__(self) -> ChunkCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals (lock held unless stated) -------------------------------

    def _transition(
        self, entry: Entry, current: ChunkState, reason: EventReason, outbox: Outbox
    ) -> None:
        """Move `entry` to `current` (lock held): the one place a chunk's state changes."""
        previous = entry.state
        if current not in LEGAL_MOVES[previous]:
            raise IllegalTransitionError(
                f"chunk {entry.key}: illegal move {previous.name} -> {current.name} ({reason})"
            )
        entry.state = current
        if entry.batch is not None:
            self._scheduler.batch_moved(entry, previous, current)
        counters = self._counters  # inline: three moves per chunk loaded
        counters.state_counts[previous] -= 1
        counters.state_counts[current] += 1
        counters.transition_counts[previous, current] += 1
        error = entry.error if current is ChunkState.FAILED else None  # set before the move
        event = ChunkEvent(entry.key, previous, current, reason, time.monotonic(), error)
        self._log.append(event)
        self._unemitted.append(event)
        outbox.events.append(event)

    def _release(self, request: Request) -> None:
        """Unpin a request's chunks (`Request.release`; lock not held)."""
        outbox = Outbox()
        with self._lock:
            if not request._released:
                self._demand.unpin(request, outbox)
                outbox.superseded.append(request)
                self._scheduler.cancel_unwanted(outbox)
        self._flush(outbox)

    def _on_watchdog(self) -> None:
        """Set stalled loads aside so new workers start (the timer's thread; lock not held)."""
        outbox = Outbox()
        with self._lock:
            self._scheduler.watchdog_fired(outbox)
        self._flush(outbox)

    def _retry(self, keys: Iterable[ChunkKey]) -> int:
        outbox = Outbox()
        with self._lock:
            self._scheduler.check_open()
            count = self._demand.retry(keys, outbox)
        self._flush(outbox)
        return count

    def _errors(self, keys: Iterable[ChunkKey]) -> dict[ChunkKey, BaseException]:
        """The FAILED chunks among `keys` (`Request.failed`; lock not held)."""
        with self._lock:
            return self._residency.errors(keys)

    def _statistics(self) -> CacheStatistics:
        return self._counters.statistics(self._residency, len(self._parked), len(self._deferred))

    def _emit_pending(self) -> None:
        """Emit every unemitted event, in order, from this thread (without the cache lock).

        Emission is serialized by its own lock, so two threads never deliver
        events out of order; a storm of moves arrives as a few large batches.
        """
        with self._emit_lock:
            while True:
                with self._lock:
                    if not self._unemitted:
                        return
                    batch = tuple(self._unemitted)
                    self._unemitted.clear()
                    stats = self._statistics() if len(self.statistics_changed) > 0 else None
                # psygnal's emit has no fast path for no listeners (its lock, an emission
                # context: ~5 µs, once per chunk loaded): a batch nobody hears is dropped.
                if len(self.state_changed) > 0:
                    _emit(self.state_changed, batch)
                if stats is not None:
                    _emit(self.statistics_changed, stats)

    def _flush(self, outbox: Outbox) -> None:
        """Emit what a locked section collected, in order. Called without the lock.

        Events go out before anything that can make newer events (request
        callbacks, submitted loads, which an inline executor runs right here),
        so listeners see every chunk's moves in order.
        """
        if outbox.events:
            self._emit_pending()
        if outbox.deliveries:  # before `done` resolves: a landed chunk is copied out first
            outbox.deliver()
        if outbox.superseded or outbox.finished:  # calls only when needed: once per load
            outbox.resolve_requests()
        if outbox.starts:
            self._workers.start(outbox.starts)
        if outbox.watchdog is not None or outbox.cancels:
            outbox.start_watchdog_and_cancel()


def _emit(signal: Any, value: object) -> None:
    """Emit `value`; a listener's error is logged, never raised into the emitting thread.

    Events are emitted from workers and from the threads that read: an error
    there (a listener's bug, or psygnal's ReferenceError for a weakly held
    listener collected while the batch went out) would end a load half way,
    and the requests waiting on it would never complete.
    """
    try:
        signal.emit(value)
    except Exception:
        _LOG.exception("a listener of the chunk cache's %s failed", signal.name)


def _check_int(name: str, value: object, minimum: int) -> int:
    # bool is an int to Python, but `concurrency=True` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})"
        )
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_stalled_after(value: float | None) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0  # NaN too
    ):
        raise ValueError(f"stalled_after must be None or seconds > 0, got {value!r}")


def check_concurrency(value: object) -> int:
    """`value` as a valid `concurrency`: an int >= 1 (bool, float and str are refused).

    Bad values are programming errors, so they raise Python's builtin
    `TypeError` (wrong type) or `ValueError` (out of range), naming the argument.

    Examples
    --------
    >>> check_concurrency(4)
    4
    >>> check_concurrency(2.5)
    Traceback (most recent call last):
    ...
    TypeError: concurrency must be an int >= 1, got 2.5 (float)
    >>> check_concurrency(0)
    Traceback (most recent call last):
    ...
    ValueError: concurrency must be an int >= 1, got 0
    """
    return _check_int("concurrency", value, 1)


def check_total_bytes_limit(value: object) -> int:
    """`value` as a valid `total_bytes_limit`: an int >= 0 (NaN, inf, floats, str refused).

    Raises `TypeError` or `ValueError` naming the argument, as `check_concurrency`.

    Examples
    --------
    >>> check_total_bytes_limit(1 << 20)
    1048576
    >>> check_total_bytes_limit(float("inf"))
    Traceback (most recent call last):
    ...
    TypeError: total_bytes_limit must be an int >= 0, got inf (float)
    """
    return _check_int("total_bytes_limit", value, 0)


def _unique(refs: Iterable[ChunkRef]) -> list[ChunkRef]:
    seen: dict[ChunkKey, ChunkRef] = {}
    for ref in refs:
        seen.setdefault(ref.key, ref)
    return list(seen.values())


def _bbox_center(keys: Sequence[ChunkKey]) -> tuple[float, ...] | None:
    if not keys:
        return None
    lo = np.min([k.inclusive_min for k in keys], axis=0)
    hi = np.max([k.exclusive_max for k in keys], axis=0)
    return tuple(float(v) for v in (lo + hi) / 2)
