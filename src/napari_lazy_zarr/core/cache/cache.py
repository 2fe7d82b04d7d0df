"""`ChunkCache`: the byte-bounded chunk cache, its state machine, and the workers that fill it.

Threading contract
------------------
One lock guards every entry, the LRU order, the pins, the load queue, the
derived chunks' bookkeeping and the statistics. Every state move goes through
`_transition`, checked against `LEGAL_MOVES`. Workers read and decode chunks
(or combine a derived chunk's inputs) *outside* the lock and change state only
through `_finish_load`. Events are collected under the lock and emitted
(psygnal signals, request futures, executor submissions) only after it is
released, so a slot may call back into the cache.

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
FAILED, with a `ChunkReadError` naming the input). An input parked because its
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
to QUEUED (reason ``"cancelled"``), parked like superseded queued work, never
FAILED; a view
asking for it again queues it again. A source whose reads are cheap to finish
but costly to redo (a download nearly done: `ZarrChunkSource`) sets
``cancel_superseded = False``: its reads are then cancelled only by `close()`.
`close()` cancels every LOADING chunk of a cancellable source the same way,
and wakes every caller waiting on a request with `CacheClosedError`. Loads
asked for without a `view` are never cancelled (no newer request can supersede
them). A source may name its LOADING reason (e.g.
``"computing"``) with a `load_reason` attribute.

Eviction
--------
Only READY chunks no live request pins are in the LRU order; pinning takes a
chunk out and unpinning puts it back as most recently used. A landing over the
limit therefore evicts from the front of the LRU in O(1) per chunk evicted,
however many pinned chunks exceed the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import numbers
import os
import queue
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from concurrent import futures
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, cast, overload

import numpy as np
from psygnal import Signal

from napari_lazy_zarr.core.cache.schedule import LoadClass, PriorityQueue, QueueItem
from napari_lazy_zarr.core.errors import CacheClosedError, ChunkReadError, LoadCancelledError
from napari_lazy_zarr.core.executors import DaemonExecutor, Executor
from napari_lazy_zarr.core.source import CancellableSource, KeepingSource, is_derived
from napari_lazy_zarr.core.states import (
    LEGAL_MOVES,
    ChunkEvent,
    ChunkState,
    IllegalTransitionError,
)

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable, Iterator, Sequence

    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.source import BatchSource, DerivedSource

__all__ = [
    "DEFAULT_STALLED_AFTER",
    "DEFAULT_TOTAL_BYTES_LIMIT",
    "CacheCounters",
    "CacheStatistics",
    "ChunkCache",
    "ChunkStatus",
    "Request",
    "check_concurrency",
    "check_total_bytes_limit",
    "default_concurrency",
]

DEFAULT_TOTAL_BYTES_LIMIT: Final = 1 << 30
"""1 GiB: TensorStore's usual cache pool size for interactive viewing."""

DEFAULT_STALLED_AFTER: Final = 1.0
"""Seconds after which a running load stops counting against `concurrency`."""

_LATENCY_WINDOW: Final = 1024
_QUEUE_COUNT_LIMIT: Final = 10_000  # `status` stops counting the loads ahead here
# The most chunks one batched load (`BatchSource.read_chunks`) takes: a 4096² shard of
# 512² inner chunks has 64; this keeps one worker's batch (and its memory) bounded.
_BATCH_LIMIT: Final = 256


def default_concurrency() -> int:
    """Worker threads for local stores: one per core (decoding is CPU-bound), at least 2."""
    return max(2, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    """A snapshot of the cache's counters (immutable; safe to hand to any thread)."""

    hits: int
    misses: int
    loads: int
    failures: int
    evictions: int
    resident_bytes: int
    pinned_bytes: int
    total_bytes_limit: int
    in_flight: int
    queued: int
    """QUEUED chunks waiting for a worker (parked and deferred ones excluded)."""
    parked: int
    """QUEUED chunks dropped from the queue because their view moved on (not fetched)."""
    deferred: int
    """QUEUED derived chunks out of the queue, waiting for their inputs to load."""
    load_latency_mean: float
    """Seconds, over the last loads (NaN before the first)."""
    load_latency_p95: float
    states: dict[ChunkState, int]
    transitions: dict[tuple[ChunkState, ChunkState], int]
    kept_bytes: int = 0
    """Bytes its sources keep beside the chunks (shard indexes), counted in the limit."""

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else math.nan


@dataclass(frozen=True, slots=True)
class ChunkStatus:
    """Why one chunk is where it is: its state and the cache's bookkeeping about it.

    A snapshot taken under the cache's lock (`ChunkCache.status`); immutable, so
    safe to hand to any thread.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.executors import ManualExecutor
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> from napari_lazy_zarr.core.source import ArraySource
    >>> source = ArraySource(np.zeros((8,)), chunks=(2,), name="s")
    >>> cache = ChunkCache(1 << 20, concurrency=1, executor=ManualExecutor())
    >>> request = cache.request([ChunkRef.of(source, (i,)) for i in range(4)])
    >>> last = cache.status(ChunkRef.of(source, (3,)).key)
    >>> last.state.name, last.queue_ahead, last.pins
    ('QUEUED', 3, 1)
    >>> cache.status(ChunkRef.of(source, (1,)).key).queue_ahead  # nearest the centre
    0
    >>> request.release(); cache.close()
    """

    key: ChunkKey
    state: ChunkState
    """Its state (NEW for a chunk the cache has never seen)."""
    pins: int
    """How many live requests pin it (a pinned chunk is never evicted)."""
    nbytes: int
    """Decoded bytes held (0 unless READY)."""
    cost: int
    """Stored chunk reads a load of it stands for (1 for a stored chunk)."""
    queue_ahead: int | None
    """QUEUED and in the load queue: how many other chunks will be taken before it
    (counted up to 10,000). None when it is not in the queue."""
    load_class: LoadClass | None
    """The priority class of its most urgent queue item (None when not in the queue)."""
    stale: bool
    """Its queue items all belong to views that have moved on: when it reaches the
    front it is parked rather than loaded."""
    parked: bool
    """QUEUED but out of the queue: its view moved on; it loads only when asked again."""
    inputs_missing: int
    """A derived chunk deferred until its inputs load: how many are still missing."""
    loading_seconds: float | None
    """LOADING: how long ago a worker took it."""
    error: BaseException | None
    """FAILED: what it failed with."""


@dataclass(frozen=True, slots=True)
class CacheCounters:
    """The cache's running counters: `CacheStatistics` without latencies and tables.

    Taken in O(1) under the lock (`ChunkCache.counters`), for displays that
    refresh often; immutable, safe to hand to any thread.

    Examples
    --------
    >>> with ChunkCache(1 << 20) as cache:
    ...     counters = cache.counters()
    >>> counters.hits, counters.queued, counters.total_bytes_limit
    (0, 0, 1048576)
    """

    hits: int
    """Chunks requested that were READY."""
    misses: int
    """Chunks requested that were not (queued, loading or FAILED)."""
    loads: int
    """Chunks that became READY."""
    failures: int
    """Chunks that became FAILED."""
    evictions: int
    """Chunks evicted."""
    resident_bytes: int
    """Decoded bytes held by READY chunks."""
    pinned_bytes: int
    """Of those, bytes of chunks pinned by live requests."""
    total_bytes_limit: int
    """The capacity."""
    in_flight: int
    """LOADING chunks."""
    queued: int
    """QUEUED chunks waiting for a worker (parked and deferred ones excluded)."""
    parked: int
    """QUEUED chunks dropped from the queue because their view moved on."""
    deferred: int
    """QUEUED derived chunks waiting for their inputs."""
    kept_bytes: int = 0
    """Bytes its sources keep beside the chunks (shard indexes), counted in the limit."""


class _Entry:
    """Mutable per-chunk record; every field is guarded by the cache lock."""

    __slots__ = (
        "batch",
        "cancelled",
        "coords",
        "cost",
        "data",
        "derived",
        "error",
        "inputs",
        "key",
        "nbytes",
        "pins",
        "queue_items",
        "riders",
        "source",
        "started",
        "state",
        "wants",
    )

    def __init__(self, ref: ChunkRef) -> None:
        self.key = ref.key
        self.source = ref.source
        self.coords = ref.coords
        self.state = ChunkState.NEW
        self.data: np.ndarray[Any, Any] | None = None
        self.error: BaseException | None = None
        self.nbytes = 0
        self.pins = 0
        self.queue_items = 0  # items in the load queue naming this chunk
        self.started = 0.0
        # The latest queue item of each view that asked for it since it was last
        # queued: a LOADING chunk none of them still wants may be cancelled.
        self.wants: dict[Hashable, QueueItem] = {}
        self.cancelled = False  # LOADING, and its source was asked to cancel the read
        self.derived = is_derived(ref.source)
        self.cost = 1  # stored chunk reads a load stands for (scheduling only)
        if self.derived:
            try:
                self.cost = max(1, int(cast("DerivedSource", ref.source).chunk_cost(ref.coords)))
            except Exception:  # a broken estimate only affects ordering; the load reports
                self.cost = 1
        # A derived chunk's gathered input arrays, once complete (QUEUED, ready to
        # combine, or LOADING: then only its worker reads them).
        self.inputs: dict[ChunkKey, np.ndarray[Any, Any]] | None = None
        # The batch this chunk may be read with (`BatchSource`), and while it leads a
        # batched load, the other chunks read with it (riders: never counted as tasks).
        self.batch: Hashable | None = None
        if not self.derived and callable(getattr(ref.source, "read_chunks", None)):
            try:
                self.batch = cast("BatchSource", ref.source).batch_key(ref.coords)
            except Exception:  # a broken batch key only means the chunk is read alone
                self.batch = None
        self.riders: list[_Entry] | None = None


class _Deferred:
    """A derived chunk waiting for inputs (QUEUED, out of the queue); guarded by the lock."""

    __slots__ = ("gathered", "item", "missing")

    def __init__(self, inputs: Sequence[ChunkRef], item: QueueItem) -> None:
        self.item = item  # the queue item it was last taken with; its inputs inherit it
        self.missing: dict[ChunkKey, ChunkRef] = {ref.key: ref for ref in inputs}
        self.gathered: dict[ChunkKey, np.ndarray[Any, Any]] = {}


class Request:
    """One view's need: the chunks it touches (pinned while the request is live).

    `done` resolves when every needed chunk is READY or FAILED; it is cancelled
    if the request is superseded or released first, and fails with
    `CacheClosedError` if the cache closes first. Release the request (or use
    it as a context manager) when the view no longer needs its chunks; a newer
    request for the same `view` releases it automatically.
    """

    __slots__ = (
        "_cache",
        "_landed",
        "_released",
        "_remaining",
        "done",
        "generation",
        "keys",
        "view",
    )

    def __init__(
        self, cache: ChunkCache, keys: tuple[ChunkKey, ...], view: Hashable, generation: int
    ) -> None:
        self._cache = cache
        self.keys = keys
        self.view = view
        self.generation = generation
        self.done: Future[None] = Future()
        self._remaining = 0
        self._released = False
        # Each needed key, once, as it is (or already was) READY or FAILED; None
        # when the cache closes first.
        self._landed: queue.SimpleQueue[ChunkKey | None] = queue.SimpleQueue()

    def landed(self, timeout: float | None = None) -> Iterator[ChunkKey]:
        """Yield each needed chunk's key once, as soon as it is READY or FAILED.

        Chunks already finished when the request was made come first. Lets a
        reader copy chunks while the others still load. Raises `TimeoutError`
        if the whole iteration takes longer than `timeout` seconds, and
        `CacheClosedError` as soon as the cache closes with chunks still missing.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in range(len(self.keys)):
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                key = self._landed.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError(f"{self!r}: chunks still loading after {timeout} s") from None
            if key is None:
                raise CacheClosedError(f"{self!r}: the chunk cache closed while chunks loaded")
            yield key

    @property
    def complete(self) -> bool:
        """Whether every needed chunk has finished loading (READY or FAILED)."""
        done = self.done
        return done.done() and not done.cancelled() and done.exception() is None

    def failed(self) -> dict[ChunkKey, BaseException]:
        """The needed chunks that FAILED, with their errors."""
        return self._cache._errors(self.keys)

    def release(self) -> None:
        """Unpin the chunks; idempotent."""
        self._cache._release(self)

    def __enter__(self) -> Request:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"Request(view={self.view!r}, generation={self.generation}, "
            f"chunks={len(self.keys)}, complete={self.complete})"
        )


class _Outbox:
    """What to do once the lock is released."""

    __slots__ = ("cancels", "events", "finished", "starts", "superseded", "watchdog")

    def __init__(self) -> None:
        self.events: list[ChunkEvent] = []
        self.finished: list[Request] = []
        self.superseded: list[Request] = []
        self.starts = 0
        self.cancels: list[_Entry] = []  # LOADING chunks whose source is to cancel the read
        self.watchdog: threading.Timer | None = None  # to start


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
    >>> from napari_lazy_zarr.core.source import ArraySource
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
        self._limit = check_total_bytes_limit(total_bytes_limit)
        self._concurrency = check_concurrency(
            default_concurrency() if concurrency is None else concurrency
        )
        if stalled_after is not None and (
            isinstance(stalled_after, bool)
            or not isinstance(stalled_after, int | float)
            or not stalled_after > 0  # NaN too
        ):
            raise ValueError(f"stalled_after must be None or seconds > 0, got {stalled_after!r}")
        self._owned_executor: DaemonExecutor | None = None
        if executor is None:
            # The active-task count, not the pool, enforces `concurrency`.
            self._owned_executor = DaemonExecutor(name="lazy-zarr-load")
            executor = self._owned_executor
        self._executor: Executor = executor
        self._one_load_per_task = bool(getattr(executor, "one_load_per_task", False))
        # Only the cache's own workers may be outnumbered: an injected executor's
        # tasks run where its owner decides (inline, or stepped by a test).
        self._stalled_after = stalled_after if self._owned_executor is not None else None
        self._lock = threading.Lock()
        self._entries: dict[ChunkKey, _Entry] = {}
        # READY keys no live request pins, least recently used first: pinned chunks are
        # kept out, so eviction never walks past them.
        self._lru: OrderedDict[ChunkKey, None] = OrderedDict()
        self._loading: dict[ChunkKey, _Entry] = {}  # LOADING, in the order they started
        self._stalled: set[ChunkKey] = set()  # of those, not counted against concurrency
        self._riding: set[ChunkKey] = set()  # of those, read in another chunk's batch
        # QUEUED chunks of batchable sources, by (source, batch key): a worker taking one
        # takes the others a view still wants with it (`_take_riders`).
        self._batches: dict[tuple[Hashable, Hashable], dict[ChunkKey, _Entry]] = {}
        self._watchdog: threading.Timer | None = None
        self._lru_visits = 0  # LRU entries eviction has looked at (tests count the work)
        self._queue = PriorityQueue()
        self._fetch_superseded = fetch_superseded
        self._parked: set[ChunkKey] = set()  # QUEUED chunks dropped from the queue
        self._deferred: dict[ChunkKey, _Deferred] = {}  # derived chunks awaiting inputs
        # input key -> the deferred chunks waiting for it (dicts: deterministic order)
        self._dependents: dict[ChunkKey, dict[ChunkKey, None]] = {}
        self._waiting: dict[ChunkKey, list[Request]] = {}
        self._views: dict[Hashable, Request] = {}
        self._generations: dict[Hashable, int] = {}
        self._log: deque[ChunkEvent] = deque(maxlen=event_log_size)
        # Events made under the lock wait here to be emitted in the order they happened.
        self._unemitted: list[ChunkEvent] = []
        self._emit_lock = threading.RLock()
        self._state_counts: Counter[ChunkState] = Counter()
        self._transition_counts: Counter[tuple[ChunkState, ChunkState]] = Counter()
        self._latencies: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self._resident = 0
        self._keepers: weakref.WeakSet[KeepingSource] = weakref.WeakSet()  # sources read
        self._pinned = 0
        self._hits = 0
        self._misses = 0
        self._loads = 0
        self._failures = 0
        self._evictions = 0
        self._active_tasks = 0
        self._closed = False

    # -- configuration -----------------------------------------------------

    @property
    def total_bytes_limit(self) -> int:
        return self._limit

    @total_bytes_limit.setter
    def total_bytes_limit(self, value: int) -> None:
        """Set the capacity (an int >= 0); evicts at once what no longer fits."""
        limit = check_total_bytes_limit(value)
        outbox = _Outbox()
        with self._lock:
            self._limit = limit
            self._evict_over_limit(outbox)
        self._flush(outbox)

    @property
    def concurrency(self) -> int:
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        """Set how many chunks load at once (an int >= 1); more start at once if queued."""
        concurrency = check_concurrency(value)
        outbox = _Outbox()
        with self._lock:
            self._concurrency = concurrency
            self._schedule_starts(outbox)
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
        load_class: LoadClass = LoadClass.NEEDED,
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
        load_class
            The priority class of `chunks` (and of the inputs of derived ones):
            `LoadClass.NEEDED` for what the view displays, `LoadClass.OVERVIEW`
            for overview work such as napari's thumbnail read of the coarsest
            level, which then never delays a displayed chunk. See
            `PriorityQueue` for the whole ordering rule.
        """
        if load_class is LoadClass.STALE:
            raise ValueError("LoadClass.STALE is the cache's own class for superseded work")
        needed = _unique(chunks)
        needed_keys = {ref.key for ref in needed}
        extra = [ref for ref in _unique(prefetch) if ref.key not in needed_keys]
        if center is None:
            center = _bbox_center([ref.key for ref in needed])
        outbox = _Outbox()
        with self._lock:
            self._check_open()
            generation = self._generations.get(view, 0) + 1 if view is not None else 0
            if view is not None:
                self._generations[view] = generation
            request = Request(self, tuple(ref.key for ref in needed), view, generation)
            if view is not None:
                previous = self._views.pop(view, None)
                if previous is not None:
                    self._unpin(previous, outbox)
                    outbox.superseded.append(previous)
                self._views[view] = request
            for ref in needed:
                entry = self._entry(ref)
                self._pin(entry)  # a READY chunk leaves the LRU while pinned
                if entry.state is ChunkState.READY:
                    self._hits += 1
                    request._landed.put(entry.key)
                    continue
                self._misses += 1
                self._enqueue(entry, load_class, level, center, view, generation, outbox)
                if entry.state is ChunkState.FAILED:
                    request._landed.put(entry.key)
                else:
                    self._waiting.setdefault(entry.key, []).append(request)
                    request._remaining += 1
            for ref in extra:
                entry = self._entry(ref)
                self._enqueue(entry, LoadClass.PREFETCH, level, center, view, generation, outbox)
            if request._remaining == 0:
                outbox.finished.append(request)
            if view is not None:
                self._cancel_unwanted(outbox)  # the superseded request's loads
            self._schedule_starts(outbox)
        self._flush(outbox)
        return request

    def lookup(self, key: ChunkKey) -> np.ndarray[Any, Any] | None:
        """The decoded chunk if READY (read-only array), else None. Marks it recently used."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.state is not ChunkState.READY:
                return None
            self._touch(key)
            return entry.data

    @property
    def closed(self) -> bool:
        """Whether `close` was called (a closed cache serves no reads)."""
        return self._closed

    def lookup_many(
        self, keys: Iterable[ChunkKey], *, count_hits: bool = False
    ) -> tuple[dict[ChunkKey, np.ndarray[Any, Any]], set[ChunkKey]]:
        """The READY chunks among `keys` (marked recently used) and the FAILED ones.

        One lock acquisition for a whole view: a thread that reads many chunks
        (napari's, for a volume) does not queue for the lock once per chunk.
        `count_hits` counts the READY ones as cache hits (a read served from them;
        its missing chunks are counted as misses when requested).
        """
        ready: dict[ChunkKey, np.ndarray[Any, Any]] = {}
        failed: set[ChunkKey] = set()
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is None:
                    continue
                if entry.state is ChunkState.READY:
                    self._touch(key)
                    assert entry.data is not None
                    ready[key] = entry.data
                elif entry.state is ChunkState.FAILED:
                    failed.add(key)
            if count_hits:
                self._hits += len(ready)
        return ready, failed

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
        """The exception a FAILED chunk failed with."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.error

    def events(self) -> tuple[ChunkEvent, ...]:
        """The most recent events, oldest first (bounded by `event_log_size`)."""
        with self._lock:
            return tuple(self._log)

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
            entry = self._entries.get(key)
            if entry is None:
                return ChunkStatus(
                    key=key,
                    state=ChunkState.NEW,
                    pins=0,
                    nbytes=0,
                    cost=1,
                    queue_ahead=None,
                    load_class=None,
                    stale=False,
                    parked=False,
                    inputs_missing=0,
                    loading_seconds=None,
                    error=None,
                )
            ahead: int | None = None
            load_class: LoadClass | None = None
            stale = False
            if entry.state is ChunkState.QUEUED and entry.queue_items:
                heap = self._queue.items()
                mine = [item for item in heap if item.key == key]
                live = [i for i in mine if not self._queue.is_stale(i, self._current_generation)]
                if mine:
                    # Stale items are skipped when they reach the front: the chunk's place
                    # in line is its most urgent live item's.
                    best = min(live or mine)
                    load_class = LoadClass(best.load_class)
                    stale = not live
                    ahead = self._count_ahead(heap, best)
            record = self._deferred.get(key)
            return ChunkStatus(
                key=key,
                state=entry.state,
                pins=entry.pins,
                nbytes=entry.nbytes,
                cost=entry.cost,
                queue_ahead=ahead,
                load_class=load_class,
                stale=stale,
                parked=key in self._parked,
                inputs_missing=0 if record is None else len(record.missing),
                loading_seconds=(
                    time.perf_counter() - entry.started
                    if entry.state is ChunkState.LOADING
                    else None
                ),
                error=entry.error if entry.state is ChunkState.FAILED else None,
            )

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
            return CacheCounters(
                hits=self._hits,
                misses=self._misses,
                loads=self._loads,
                failures=self._failures,
                evictions=self._evictions,
                resident_bytes=self._resident,
                pinned_bytes=self._pinned,
                total_bytes_limit=self._limit,
                in_flight=self._state_counts[ChunkState.LOADING],
                queued=self._state_counts[ChunkState.QUEUED]
                - len(self._parked)
                - len(self._deferred),
                parked=len(self._parked),
                deferred=len(self._deferred),
                kept_bytes=self._kept_bytes(),
            )
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

    def _count_ahead(self, heap: list[QueueItem], item: QueueItem) -> int:
        """Distinct QUEUED chunks, other than `item`'s, whose live items sort before it.

        In a binary heap every item sorting before `item` has only such items
        above it, so the walk visits just them (lock held; stops at a cap).
        """
        ahead: set[ChunkKey] = set()
        stack = [0] if heap else []
        while stack and len(ahead) < _QUEUE_COUNT_LIMIT:
            index = stack.pop()
            node = heap[index]
            if not node < item:
                continue
            entry = self._entries.get(node.key)
            if (
                node.key != item.key
                and entry is not None
                and entry.state is ChunkState.QUEUED
                and not self._queue.is_stale(node, self._current_generation)
            ):
                ahead.add(node.key)
            stack.extend(child for child in (2 * index + 1, 2 * index + 2) if child < len(heap))
        return len(ahead)

    @property
    def statistics(self) -> CacheStatistics:
        with self._lock:
            return self._statistics()

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
            request = self._views.get(view)
        if request is not None:
            request.release()

    def evict_unpinned(self) -> int:
        """Evict every READY chunk no live request pins; returns how many."""
        outbox = _Outbox()
        with self._lock:
            before = self._evictions
            for key in list(self._lru):  # only unpinned chunks are in it
                self._evict(self._entries[key], outbox)
            count = self._evictions - before
        self._flush(outbox)
        return count

    def close(self) -> None:
        """Stop loading, at once, whatever storage does (idempotent; any thread).

        Drops the queue, asks the sources of LOADING chunks to cancel their
        reads (`CancellableSource`), and wakes every caller waiting on a
        request (`Request.landed`, `Request.done`, `ChunkedArray.result`) with
        `CacheClosedError`. Never waits for a running load: the cache's own
        workers are daemon threads, and a load finishing after `close` is
        dropped. Resident chunks stay readable with `lookup`; new requests
        raise `CacheClosedError`.
        """
        cancels: list[_Entry] = []
        waiting: list[Request] = []
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._deferred.clear()
            self._dependents.clear()
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
            for entry in self._loading.values():
                if not entry.cancelled and _cancellable(entry):
                    entry.cancelled = True
                    cancels.append(entry)
            seen: set[int] = set()
            for requests in self._waiting.values():
                for request in requests:
                    if id(request) not in seen:
                        seen.add(id(request))
                        waiting.append(request)
            self._waiting.clear()
        if self._owned_executor is not None:
            self._owned_executor.shutdown()
        for request in waiting:
            request._landed.put(None)
            error = CacheClosedError(f"{request!r}: the chunk cache closed before it completed")
            # A release may resolve it meanwhile (then set_exception raises InvalidStateError).
            with contextlib.suppress(InvalidStateError):
                request.done.set_exception(error)
        _cancel_loads(cancels)

    def __enter__(self) -> ChunkCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals (lock held unless stated) -------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CacheClosedError("the chunk cache is closed")

    def _touch(self, key: ChunkKey) -> None:
        """Mark a READY chunk recently used (a pinned one is out of the LRU until unpinned)."""
        if key in self._lru:
            self._lru.move_to_end(key)

    def _entry(self, ref: ChunkRef) -> _Entry:
        entry = self._entries.get(ref.key)
        if entry is None:
            entry = self._entries[ref.key] = _Entry(ref)
            self._state_counts[ChunkState.NEW] += 1
            if hasattr(type(ref.source), "kept_bytes"):
                self._keepers.add(cast("KeepingSource", ref.source))
        return entry

    def _transition(
        self, entry: _Entry, current: ChunkState, reason: str, outbox: _Outbox
    ) -> None:
        previous = entry.state
        if current not in LEGAL_MOVES[previous]:
            raise IllegalTransitionError(
                f"chunk {entry.key}: illegal move {previous.name} -> {current.name} ({reason})"
            )
        entry.state = current
        if entry.batch is not None:
            if previous is ChunkState.QUEUED:
                batch = (entry.key.source, entry.batch)
                members = self._batches.get(batch)
                if members is not None:
                    members.pop(entry.key, None)
                    if not members:
                        del self._batches[batch]
            elif current is ChunkState.QUEUED:
                self._batches.setdefault((entry.key.source, entry.batch), {})[entry.key] = entry
        self._state_counts[previous] -= 1
        self._state_counts[current] += 1
        self._transition_counts[previous, current] += 1
        event = ChunkEvent(entry.key, previous, current, reason, time.monotonic())
        self._log.append(event)
        self._unemitted.append(event)
        outbox.events.append(event)

    def _enqueue(
        self,
        entry: _Entry,
        load_class: LoadClass,
        level: int,
        center: Sequence[float] | None,
        view: Hashable,
        generation: int,
        outbox: _Outbox,
    ) -> None:
        if entry.state in (ChunkState.NEW, ChunkState.EVICTED):
            reason = "prefetch" if load_class is LoadClass.PREFETCH else "requested"
            self._transition(entry, ChunkState.QUEUED, reason, outbox)
        elif entry.state not in (ChunkState.QUEUED, ChunkState.LOADING):
            return  # READY, or FAILED (no retry storms)
        item = self._queue.make(
            entry.key,
            load_class=load_class,
            level=level,
            distance=_distance(entry.key, center),
            view=view,
            generation=generation,
            cost=entry.cost,
        )
        if entry.state is ChunkState.LOADING:
            entry.wants[view] = item  # wanted again: not to be cancelled (or re-queued if it is)
            return
        self._push(entry, item)
        self._queue.push_item(item)

    def _enqueue_input(self, entry: _Entry, item: QueueItem, outbox: _Outbox) -> None:
        """Queue an input of a derived chunk with that chunk's `item` (unless it is loading)."""
        if entry.state in (ChunkState.NEW, ChunkState.EVICTED):
            reason = "prefetch" if item.load_class == LoadClass.PREFETCH else "requested"
            self._transition(entry, ChunkState.QUEUED, reason, outbox)
        elif entry.state is ChunkState.LOADING:
            # It lands soon and reports to its dependents; wanted, not to be cancelled.
            entry.wants[item.view] = replace(item, key=entry.key)
            return
        elif entry.state is not ChunkState.QUEUED:
            return
        own = replace(item, key=entry.key)
        self._push(entry, own)
        self._queue.push_item(own)

    def _pin(self, entry: _Entry) -> None:
        entry.pins += 1
        if entry.pins == 1 and entry.state is ChunkState.READY:
            self._pinned += entry.nbytes
            del self._lru[entry.key]

    def _unpin(self, request: Request, outbox: _Outbox) -> None:
        if request._released:
            return
        request._released = True
        for key in request.keys:
            entry = self._entries[key]
            entry.pins -= 1
            if entry.pins == 0 and entry.state is ChunkState.READY:
                self._pinned -= entry.nbytes
                self._lru[key] = None  # evictable again, as most recently used
            waiting = self._waiting.get(key)
            if waiting is not None and request in waiting:
                waiting.remove(request)
                if not waiting:
                    del self._waiting[key]
        if self._views.get(request.view) is request:
            del self._views[request.view]
            # Released, not replaced: its queued chunks are superseded too.
            self._generations[request.view] = self._generations.get(request.view, 0) + 1
        if not self._closed:
            self._evict_over_limit(outbox)

    def _release(self, request: Request) -> None:
        outbox = _Outbox()
        with self._lock:
            if not request._released:
                self._unpin(request, outbox)
                outbox.superseded.append(request)
                self._cancel_unwanted(outbox)
        self._flush(outbox)

    def _evict(self, entry: _Entry, outbox: _Outbox) -> None:
        self._transition(entry, ChunkState.EVICTED, "evicted", outbox)
        del self._lru[entry.key]
        self._resident -= entry.nbytes
        entry.data = None
        entry.nbytes = 0
        self._evictions += 1

    def _kept_bytes(self) -> int:
        """What the sources read keep beside their chunks (lock held)."""
        return sum(source.kept_bytes for source in self._keepers)

    def _evict_over_limit(self, outbox: _Outbox) -> None:
        """Evict least recently used unpinned chunks until under the limit (less what the
        sources keep): O(1) each."""
        limit = self._limit - self._kept_bytes() if self._keepers else self._limit
        while self._resident > limit and self._lru:
            self._lru_visits += 1
            self._evict(self._entries[next(iter(self._lru))], outbox)

    def _schedule_starts(self, outbox: _Outbox) -> None:
        if self._closed:
            return
        wanted = min(self._concurrency, len(self._queue)) - self._active_tasks
        if wanted > 0:
            self._active_tasks += wanted
            outbox.starts += wanted
        self._arm_watchdog(outbox)

    # -- stalled and cancelled loads (lock held) ----------------------------

    def _stall_cap(self) -> int:
        return max(8, 2 * self._concurrency)

    def _arm_watchdog(self, outbox: _Outbox) -> None:
        """Wake up when the oldest counted load becomes stalled, if work waits behind it.

        One timer at a time, armed only while chunks are queued and every
        worker is busy: an idle cache runs no timer.
        """
        if (
            self._stalled_after is None
            or self._watchdog is not None
            or self._closed
            or not self._queue
            or self._active_tasks < self._concurrency
            or len(self._stalled) >= self._stall_cap()
        ):
            return
        oldest = next(
            (
                e.started
                for e in self._loading.values()
                if e.key not in self._stalled and not e.derived and e.key not in self._riding
            ),
            None,
        )
        if oldest is None:
            return
        delay = max(0.0, oldest + self._stalled_after - time.perf_counter())
        timer = threading.Timer(delay, self._on_watchdog)
        timer.name = "lazy-zarr-watchdog"
        timer.daemon = True  # cancelled by close; never holds up the interpreter's exit
        self._watchdog = outbox.watchdog = timer

    def _on_watchdog(self) -> None:
        """Set stalled loads aside so new workers start (runs on the timer's thread)."""
        outbox = _Outbox()
        with self._lock:
            if self._watchdog is None or self._closed:
                return
            self._watchdog = None
            assert self._stalled_after is not None
            now = time.perf_counter()
            for entry in self._loading.values():
                if len(self._stalled) >= self._stall_cap():
                    break
                if (
                    entry.key not in self._stalled
                    and not entry.derived  # combining is CPU work: more threads do not help
                    and entry.key not in self._riding  # not a task: its leader counts
                    and now - entry.started >= self._stalled_after
                ):
                    self._stalled.add(entry.key)
                    self._active_tasks -= 1  # its worker no longer counts
            self._schedule_starts(outbox)
        self._flush(outbox)

    def _wanted(self, entry: _Entry) -> bool:
        """Whether anyone still wants a chunk being read, or about to be (if not, its read
        may be cancelled, and it does not ride along in another chunk's batch)."""
        if entry.pins or self._fetch_superseded:
            return True
        if any(
            not self._queue.is_stale(i, self._current_generation) for i in entry.wants.values()
        ):
            return True
        for key in self._dependents.get(entry.key, {}):
            dependent = self._entries[key]
            if dependent.pins or dependent.queue_items or self._awaits_inputs(dependent):
                return True
        return False

    def _cancel_unwanted(self, outbox: _Outbox) -> None:
        """Ask to cancel the reads of LOADING chunks nobody wants any more.

        Looks only at the loads in flight (a few: about `concurrency`).
        """
        for entry in self._loading.values():
            if (
                not entry.cancelled
                and _cancellable(entry)
                and getattr(entry.source, "cancel_superseded", True)
                and not self._wanted(entry)
            ):
                entry.cancelled = True
                outbox.cancels.append(entry)

    def _return_cancelled(self, entry: _Entry, outbox: _Outbox) -> None:
        """A cancelled load goes back to QUEUED: queued again if wanted, else parked."""
        self._transition(entry, ChunkState.QUEUED, "cancelled", outbox)
        live = [
            item
            for item in entry.wants.values()
            if not self._queue.is_stale(item, self._current_generation)
        ]
        entry.wants.clear()
        for item in live:
            self._push(entry, item)
            self._queue.push_item(item)
        if not live and entry.pins:
            # A live request still pins it, but no view queued it: queue it as needed.
            self._queue_as_needed(entry)
        if entry.queue_items == 0:
            self._park(entry)  # parks (or re-queues) the derived chunks waiting for it

    def _queue_as_needed(self, entry: _Entry) -> None:
        """Queue a QUEUED chunk no view asked for (a retry, a pinned cancelled load) as
        needed now (lock held)."""
        item = self._queue.make(
            entry.key,
            load_class=LoadClass.NEEDED,
            level=0,
            distance=0.0,
            view=None,
            generation=0,
            cost=entry.cost,
        )
        self._push(entry, item)
        self._queue.push_item(item)

    def _current_generation(self, view: Hashable) -> int | None:
        return self._generations.get(view)

    def _retry(self, keys: Iterable[ChunkKey]) -> int:
        outbox = _Outbox()
        count = 0
        with self._lock:
            self._check_open()
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None:
                    count += self._requeue_failed(entry, outbox)
            self._schedule_starts(outbox)
        self._flush(outbox)
        return count

    def _requeue_failed(self, entry: _Entry, outbox: _Outbox) -> int:
        """Re-queue `entry` if FAILED, with its FAILED inputs if derived; how many moved."""
        if entry.state is not ChunkState.FAILED:
            return 0
        entry.error = None
        self._transition(entry, ChunkState.QUEUED, "retry", outbox)
        self._queue_as_needed(entry)
        count = 1
        if entry.derived:
            # It failed because an input did, typically: retrying it alone would fail again.
            try:
                inputs = cast("DerivedSource", entry.source).chunk_inputs(entry.coords)
            except Exception:
                inputs = ()  # the chunk fails again when taken, naming the cause
            for ref in inputs:
                found = self._entries.get(ref.key)
                if found is not None:
                    count += self._requeue_failed(found, outbox)
        return count

    def _errors(self, keys: Iterable[ChunkKey]) -> dict[ChunkKey, BaseException]:
        with self._lock:
            found: dict[ChunkKey, BaseException] = {}
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None and entry.state is ChunkState.FAILED and entry.error:
                    found[key] = entry.error
            return found

    def _statistics(self) -> CacheStatistics:
        latencies = np.fromiter(self._latencies, dtype=np.float64, count=len(self._latencies))
        return CacheStatistics(
            hits=self._hits,
            misses=self._misses,
            loads=self._loads,
            failures=self._failures,
            evictions=self._evictions,
            resident_bytes=self._resident,
            pinned_bytes=self._pinned,
            total_bytes_limit=self._limit,
            in_flight=self._state_counts[ChunkState.LOADING],
            queued=self._state_counts[ChunkState.QUEUED] - len(self._parked) - len(self._deferred),
            parked=len(self._parked),
            deferred=len(self._deferred),
            load_latency_mean=float(latencies.mean()) if latencies.size else math.nan,
            load_latency_p95=float(np.percentile(latencies, 95)) if latencies.size else math.nan,
            kept_bytes=self._kept_bytes(),
            states={state: self._state_counts[state] for state in ChunkState},
            transitions=dict(self._transition_counts),
        )

    # -- worker side -------------------------------------------------------

    def _work(self) -> None:
        """One worker task: load the most urgent queued chunks, reading outside the lock.

        The task keeps taking the next chunk (in the same locked section that
        finishes the previous one) until the queue is empty, instead of
        submitting a new task per chunk. An executor that sets
        `one_load_per_task` (`ManualExecutor`) gets one chunk per task, so
        tests can step loads.
        """
        outbox = _Outbox()
        with self._lock:
            entry = self._take_next(outbox)
            self._schedule_starts(outbox)  # taking a derived chunk may have queued inputs
        self._flush(outbox)
        while entry is not None:
            # A LOADING entry's `inputs` and `riders` are only this worker's until it finishes.
            if entry.riders is not None:
                entry = self._finish_loads(_read_batch([entry, *entry.riders]))
                continue
            try:
                inputs = entry.inputs
                if inputs is None:
                    raw = entry.source.read_chunk(entry.coords)
                else:
                    raw = cast("DerivedSource", entry.source).combine(entry.coords, inputs)
                data = _checked(entry, raw)
            except (Exception, asyncio.CancelledError) as error:  # the latter is no Exception
                entry = self._finish_load(entry, None, error)
            else:
                entry = self._finish_load(entry, data, None)

    def _push(self, entry: _Entry, item: QueueItem) -> None:
        """Account for one more queue item naming `entry` (the caller pushes `item`)."""
        entry.queue_items += 1
        entry.wants[item.view] = item
        self._parked.discard(entry.key)

    def _spawn_then_work(self, others: int) -> None:
        """A worker task that first submits `others` more worker tasks, then works."""
        for _ in range(others):
            self._executor.submit(self._work)
        self._work()

    def _take_next(self, outbox: _Outbox) -> _Entry | None:
        """Move the most urgent QUEUED chunk to LOADING, or retire this task (lock held)."""
        if not self._closed and self._active_tasks <= self._concurrency:
            # While loads of a source are stalled, its storage is likely stuck: chunks of
            # other sources go first, so one stuck store never holds up another view.
            slow = {self._entries[k].key.source for k in self._stalled if k in self._entries}
            for avoid in (slow, set()) if slow else (set(),):
                skipped: list[QueueItem] = []
                try:
                    while (item := self._queue.pop()) is not None:
                        entry = self._entries[item.key]
                        entry.queue_items -= 1
                        if entry.state is not ChunkState.QUEUED:
                            continue
                        if self._queue.is_stale(item, self._current_generation):
                            if self._fetch_superseded:
                                entry.queue_items += 1
                                self._queue.push_demoted(item)
                            elif entry.queue_items == 0 and not self._awaits_inputs(entry):
                                self._park(entry)  # no view wants it any more
                            continue
                        if avoid and entry.key.source in avoid:
                            entry.queue_items += 1  # still queued: put back below
                            skipped.append(item)
                            continue
                        if (
                            entry.derived
                            and entry.inputs is None
                            and not self._gather(entry, item, outbox)
                        ):
                            continue  # deferred until its inputs land, or failed
                        reason = getattr(entry.source, "load_reason", None) or "started"
                        self._transition(entry, ChunkState.LOADING, reason, outbox)
                        entry.started = time.perf_counter()
                        entry.cancelled = False
                        self._loading[entry.key] = entry
                        if entry.batch is not None:
                            self._take_riders(entry, reason, outbox)
                        return entry
                finally:
                    for item in skipped:
                        self._queue.push_item(item)
        self._active_tasks -= 1
        return None

    def _take_riders(self, leader: _Entry, reason: str, outbox: _Outbox) -> None:
        """Move the QUEUED chunks of `leader`'s batch a view still wants to LOADING with it.

        They are read by `leader`'s worker in one `read_chunks` call and count as
        one task; their queue items stay in the queue and are skipped when popped
        (no longer QUEUED). Parked chunks (no view wants them) stay behind (lock held).
        """
        members = self._batches.get((leader.key.source, leader.batch))
        if not members:
            return
        riders: list[_Entry] = []
        for entry in list(members.values()):
            if len(riders) + 1 >= _BATCH_LIMIT:
                break
            if entry.key in self._parked or not self._wanted(entry):
                continue
            self._transition(entry, ChunkState.LOADING, reason, outbox)
            entry.started = leader.started
            entry.cancelled = False
            self._loading[entry.key] = entry
            self._riding.add(entry.key)
            riders.append(entry)
        if riders:
            leader.riders = riders

    def _gather(self, entry: _Entry, item: QueueItem, outbox: _Outbox) -> bool:
        """Collect a derived chunk's READY inputs; True when all are there (lock held).

        Missing inputs are queued with `item` and the chunk is deferred until
        the last one lands; a FAILED input fails it. Input arrays are read-only,
        so holding them needs no pin.
        """
        record = self._deferred.get(entry.key)
        if record is None:
            try:
                inputs = tuple(cast("DerivedSource", entry.source).chunk_inputs(entry.coords))
                for ref in inputs:
                    if ref.key.source == entry.key.source:
                        raise ChunkReadError(
                            f"chunk {entry.key}: a derived chunk cannot be its own source's "
                            f"input ({ref.key})"
                        )
            except Exception as error:
                self._fail_unstarted(entry, error, outbox)
                return False
            record = self._deferred[entry.key] = _Deferred(inputs, item)
        else:
            record.item = item  # asked for again: its inputs now inherit this item
        for key, ref in list(record.missing.items()):
            found = self._entry(ref)
            if found.state is ChunkState.READY:
                assert found.data is not None
                record.gathered[key] = found.data
                self._touch(key)
                del record.missing[key]
                self._forget_dependent(key, entry.key)
            elif found.state is ChunkState.FAILED:
                self._fail_unstarted(entry, _input_error(entry.key, key, found.error), outbox)
                return False
            else:
                self._dependents.setdefault(key, {})[entry.key] = None
                self._enqueue_input(found, item, outbox)
        if record.missing:
            return False
        del self._deferred[entry.key]
        entry.inputs = record.gathered
        return True

    def _awaits_inputs(self, entry: _Entry) -> bool:
        """Whether `entry` is deferred for a view that still wants it (lock held)."""
        record = self._deferred.get(entry.key)
        return record is not None and not self._queue.is_stale(
            record.item, self._current_generation
        )

    def _forget_dependent(self, input_key: ChunkKey, dependent: ChunkKey) -> None:
        waiting = self._dependents.get(input_key)
        if waiting is not None:
            waiting.pop(dependent, None)
            if not waiting:
                del self._dependents[input_key]

    def _drop_deferred(self, entry: _Entry) -> None:
        """Forget `entry`'s deferral and gathered inputs, if any (lock held)."""
        entry.inputs = None
        record = self._deferred.pop(entry.key, None)
        if record is not None:
            for key in record.missing:
                self._forget_dependent(key, entry.key)

    def _park(self, entry: _Entry) -> None:
        """Leave a QUEUED chunk out of the queue until a view asks again (lock held).

        Derived chunks waiting for it are parked too (their gathered inputs are
        dropped), unless queued again meanwhile; then they re-gather when taken.
        """
        self._parked.add(entry.key)
        entry.wants.clear()
        self._drop_deferred(entry)
        for key in self._dependents.pop(entry.key, {}):
            dependent = self._entries[key]
            record = self._deferred[key]
            self._drop_deferred(dependent)
            if dependent.queue_items:
                continue
            if self._queue.is_stale(record.item, self._current_generation):
                self._park(dependent)
            else:  # still wanted: queue it again, it re-queues its inputs
                self._push(dependent, record.item)
                self._queue.push_item(record.item)

    def _fail_unstarted(self, entry: _Entry, error: BaseException, outbox: _Outbox) -> None:
        """Fail a QUEUED derived chunk without reading it: QUEUED -> LOADING -> FAILED."""
        self._drop_deferred(entry)
        self._transition(entry, ChunkState.LOADING, "started", outbox)
        self._complete(entry, None, error, outbox)

    def _finish_load(
        self, entry: _Entry, data: np.ndarray[Any, Any] | None, error: BaseException | None
    ) -> _Entry | None:
        """Record a load's outcome; returns the next chunk for this worker, if it continues.

        After `close` the outcome is dropped and the worker stops.
        """
        return self._finish_loads([(entry, data, error)])

    def _finish_loads(self, outcomes: Sequence[_Outcome]) -> _Entry | None:
        """Record the outcomes of one task's loads (one chunk, or a batch); returns the
        next chunk for this worker, if it continues.
        """
        outbox = _Outbox()
        with self._lock:
            if self._closed:
                return None
            for entry, data, error in outcomes:
                entry.inputs = None
                entry.riders = None
                self._riding.discard(entry.key)
                del self._loading[entry.key]
                if entry.key in self._stalled:
                    self._stalled.discard(entry.key)
                    self._active_tasks += 1  # counts again; retires below if over `concurrency`
                # After a cancel the cache asked for, any error is the cancel's doing: a
                # FAILED chunk would stay failed although only the user's view moved on.
                if error is not None and (entry.cancelled or _is_cancellation(error)):
                    self._return_cancelled(entry, outbox)
                else:
                    self._latencies.append(time.perf_counter() - entry.started)
                    self._complete(entry, data, error, outbox)
            if self._one_load_per_task:
                self._active_tasks -= 1
                following = None
            else:
                following = self._take_next(outbox)
            self._schedule_starts(outbox)
        self._flush(outbox)
        return following

    def _complete(
        self,
        entry: _Entry,
        data: np.ndarray[Any, Any] | None,
        error: BaseException | None,
        outbox: _Outbox,
    ) -> None:
        """Move a LOADING chunk to READY (`data`) or FAILED (`error`) and tell who waits."""
        entry.wants.clear()
        entry.cancelled = False
        if data is not None:
            data.flags.writeable = False
            entry.data = data
            entry.nbytes = int(data.nbytes)
            self._transition(entry, ChunkState.READY, "loaded", outbox)
            self._loads += 1
            self._resident += entry.nbytes
            if entry.pins:
                self._pinned += entry.nbytes
            else:
                self._lru[entry.key] = None
        else:
            entry.error = error
            self._transition(entry, ChunkState.FAILED, f"failed: {error}", outbox)
            self._failures += 1
        for request in self._waiting.pop(entry.key, ()):
            request._landed.put(entry.key)
            request._remaining -= 1
            if request._remaining == 0:
                outbox.finished.append(request)
        for key in self._dependents.pop(entry.key, {}):
            dependent = self._entries[key]
            if data is None:
                self._fail_unstarted(dependent, _input_error(key, entry.key, error), outbox)
                continue
            record = self._deferred[key]
            del record.missing[entry.key]
            # Held by reference: evicting the input below does not lose it.
            record.gathered[entry.key] = data
            if not record.missing:
                del self._deferred[key]
                dependent.inputs = record.gathered
                self._push(dependent, record.item)
                self._queue.push_item(record.item)
        if data is not None:
            self._evict_over_limit(outbox)

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
                self.state_changed.emit(batch)
                if stats is not None:
                    self.statistics_changed.emit(stats)

    def _flush(self, outbox: _Outbox) -> None:
        """Emit what a locked section collected, in order. Called without the lock.

        Events go out before anything that can make newer events (request
        callbacks, submitted loads, which an inline executor runs right here),
        so listeners see every chunk's moves in order.
        """
        if outbox.events:
            self._emit_pending()
        for request in outbox.superseded:
            request.done.cancel()
        for request in outbox.finished:
            if not request.done.done():
                request.done.set_result(None)
        if outbox.starts == 1:
            self._executor.submit(self._work)
        elif outbox.starts > 1:
            # Starting a pool thread costs ~1 ms; 32 of them would stall the requesting
            # thread (napari's main thread). The first worker starts the others.
            self._executor.submit(functools.partial(self._spawn_then_work, outbox.starts - 1))
        if outbox.watchdog is not None:
            outbox.watchdog.start()
        _cancel_loads(outbox.cancels)


def _check_int(name: str, value: object, minimum: int) -> int:
    # bool is an int to Python, but `concurrency=True` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})"
        )
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


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


def _cancellable(entry: _Entry) -> bool:
    """Whether a LOADING chunk's read can be cancelled (its source is a `CancellableSource`).

    Duck-typed like `is_derived` (cheaper than a runtime protocol check); a
    derived chunk's `combine` has no cancel hook.
    """
    return not entry.derived and callable(getattr(entry.source, "cancel_load", None))


def _cancel_loads(entries: Iterable[_Entry]) -> None:
    """Ask the sources to cancel these reads (without the cache lock)."""
    for entry in entries:
        try:
            cast("CancellableSource", entry.source).cancel_load(entry.coords)
        except Exception:  # a failed cancel only means the read runs to its end
            logging.getLogger(__name__).exception("cancel_load(%s) failed", entry.key)


def _is_cancellation(error: BaseException) -> bool:
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


type _Outcome = tuple[_Entry, np.ndarray[Any, Any] | None, BaseException | None]


def _read_batch(entries: Sequence[_Entry]) -> list[_Outcome]:
    """Read a batch with one `read_chunks` call (no lock held); each chunk's outcome."""
    source = cast("BatchSource", entries[0].source)
    try:
        results = source.read_chunks([entry.coords for entry in entries])
        if len(results) != len(entries):
            raise ChunkReadError(
                f"{source!r}: read_chunks returned {len(results)} results "
                f"for {len(entries)} chunks"
            )
    except (Exception, asyncio.CancelledError) as error:  # the latter is no Exception
        return [(entry, None, error) for entry in entries]
    outcomes: list[_Outcome] = []
    for entry, result in zip(entries, results, strict=True):
        if isinstance(result, BaseException):
            outcomes.append((entry, None, result))
            continue
        try:
            outcomes.append((entry, _checked(entry, result), None))
        except ChunkReadError as error:
            outcomes.append((entry, None, error))
    return outcomes


def _checked(entry: _Entry, data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Refuse a chunk whose shape or dtype would put wrong pixels on screen."""
    array = np.asarray(data)
    dtype = entry.source.dtype
    if array.shape != entry.key.shape:
        raise ChunkReadError(
            f"chunk {entry.key}: source returned shape {array.shape}, expected {entry.key.shape}"
        )
    if array.dtype != dtype:
        raise ChunkReadError(
            f"chunk {entry.key}: source returned dtype {array.dtype}, expected {dtype}"
        )
    return array


def _input_error(
    dependent: ChunkKey, failed: ChunkKey, cause: BaseException | None
) -> ChunkReadError:
    error = ChunkReadError(f"chunk {dependent}: input chunk {failed} failed: {cause}")
    error.__cause__ = cause
    return error


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


def _distance(key: ChunkKey, center: Sequence[float] | None) -> float:
    if center is None or len(center) != len(key.inclusive_min):
        return 0.0
    return math.fsum(
        ((lo + hi) / 2 - c) ** 2
        for lo, hi, c in zip(key.inclusive_min, key.exclusive_max, center, strict=True)
    )
