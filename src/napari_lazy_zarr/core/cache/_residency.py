"""`Residency`: which chunks a `ChunkCache` knows, which are in memory, and what goes first.

It owns the per-chunk records (`Entry`), the LRU order of the READY chunks no
live request pins, the pins, the resident, pinned and kept byte counts, and
eviction.

Bounded bookkeeping
-------------------
An entry costs ~700 B whatever its chunk's size, so the records of chunks that
are neither resident, pinned, queued, loading nor failed are not kept for
good: of the EVICTED chunks, only the `EVICTED_KEPT` most recently evicted are
remembered (the inspector shows them EVICTED); an older one is *forgotten*:
its entry is dropped, without an event, and the chunk is NEW again to the
cache (asked for again, it moves NEW -> QUEUED). `forget` drops the unpinned
chunks of sources that can never be read again (`ChunkCache.discard`).

Thread contract
---------------
Every field of `Residency` and of every `Entry` is read and written only under
the owning cache's lock (the one exception: a LOADING entry's `inputs` and
`riders` belong to the worker that took it). `Residency` never takes a lock
itself; where it moves a chunk's state it calls the façade's one
`_transition` with the `Outbox` it is handed.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from napari_lazy_zarr.core.cache._dependencies import input_error
from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.executors import ThreadStartError
from napari_lazy_zarr.core.sources.protocol import KeepingSource, is_derived
from napari_lazy_zarr.core.states import ChunkState, EventReason

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable

    import numpy as np

    from napari_lazy_zarr.core.cache._counters import Counters
    from napari_lazy_zarr.core.cache._outbox import Outbox
    from napari_lazy_zarr.core.cache.schedule import QueueItem
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.sources.protocol import BatchSource, DerivedSource

__all__ = ["EVICTED_KEPT", "Entry", "Residency", "Transition", "not_started"]

EVICTED_KEPT: Final = 4096
"""How many EVICTED chunks a cache remembers (~3 MiB of records); older ones are forgotten."""

type Transition = Callable[[Entry, ChunkState, EventReason, Outbox], None]
"""The façade's `ChunkCache._transition`: the one place a chunk's state moves."""


class Entry:
    """Mutable per-chunk record; every field is guarded by the cache lock."""

    __slots__ = (
        "background",
        "batch",
        "cancelled",
        "coords",
        "cost",
        "data",
        "derived",
        "error",
        "inputs",
        "key",
        "left_out",
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
        # LOADING as a worker task's own load: whether it counts as background work
        # (`Scheduler.background_tasks`); None when not loading or riding another's batch.
        self.background: bool | None = None
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
        # A derived chunk combined without some FAILED inputs (`Dependencies`): their keys
        # and errors, from the moment it is combined until it is evicted. READY so, it
        # shows in views (their region at the fill value); the exact door refuses it.
        self.left_out: dict[ChunkKey, BaseException | None] | None = None
        # The batch this chunk may be read with (`BatchSource`), and while it leads a
        # batched load, the other chunks read with it (riders: never counted as tasks).
        self.batch: Hashable | None = None
        if not self.derived and callable(getattr(ref.source, "read_chunks", None)):
            try:
                self.batch = cast("BatchSource", ref.source).batch_key(ref.coords)
            except Exception:  # a broken batch key only means the chunk is read alone
                self.batch = None
        self.riders: list[Entry] | None = None


class Residency:
    """The entries, the LRU order, the pins and the byte counts of one cache (lock held)."""

    __slots__ = (
        "_counters",
        "_transition",
        "entries",
        "evicted",
        "evicted_kept",
        "forgotten",
        "keepers",
        "limit",
        "lru",
        "lru_visits",
        "pinned",
        "resident",
    )

    def __init__(self, limit: int, counters: Counters, transition: Transition) -> None:
        self._counters = counters
        self._transition = transition
        self.limit = limit
        self.entries: dict[ChunkKey, Entry] = {}
        # READY keys no live request pins, least recently used first: pinned chunks are
        # kept out, so eviction never walks past them.
        self.lru: OrderedDict[ChunkKey, None] = OrderedDict()
        self.lru_visits = 0  # LRU entries eviction has looked at (tests count the work)
        self.resident = 0
        self.pinned = 0
        self.keepers: weakref.WeakSet[KeepingSource] = weakref.WeakSet()  # sources read
        # EVICTED keys that may be forgotten, least recently evicted first (`EVICTED_KEPT`).
        self.evicted: OrderedDict[ChunkKey, None] = OrderedDict()
        self.evicted_kept = EVICTED_KEPT
        self.forgotten = 0  # entries dropped so (a test counts them)

    def entry(self, ref: ChunkRef) -> Entry:
        """The record of `ref`'s chunk, made (NEW) if the cache has not seen it."""
        entry = self.entries.get(ref.key)
        if entry is None:
            entry = self.entries[ref.key] = Entry(ref)
            self._counters.state_counts[ChunkState.NEW] += 1
            if hasattr(type(ref.source), "kept_bytes"):
                self.keepers.add(cast("KeepingSource", ref.source))
        return entry

    def touch(self, key: ChunkKey) -> None:
        """Mark a READY chunk recently used (a pinned one is out of the LRU until unpinned)."""
        if key in self.lru:
            self.lru.move_to_end(key)

    def pin(self, entry: Entry) -> None:
        entry.pins += 1
        if entry.pins == 1 and entry.state is ChunkState.READY:
            self.pinned += entry.nbytes
            del self.lru[entry.key]

    def unpin(self, entry: Entry) -> None:
        entry.pins -= 1
        if entry.pins == 0 and entry.state is ChunkState.READY:
            self.pinned -= entry.nbytes
            self.lru[entry.key] = None  # evictable again, as most recently used

    def hold(self, entry: Entry) -> None:
        """Count a chunk that has just become READY (pinned, or the most recently used)."""
        self.resident += entry.nbytes
        if entry.pins:
            self.pinned += entry.nbytes
        else:
            self.lru[entry.key] = None

    def evict(self, entry: Entry, outbox: Outbox) -> None:
        self._transition(entry, ChunkState.EVICTED, EventReason.EVICTED, outbox)
        del self.lru[entry.key]
        self.resident -= entry.nbytes
        entry.data = None
        entry.left_out = None
        entry.nbytes = 0
        self._counters.evictions += 1
        self.remember_evicted(entry)

    def remember_evicted(self, entry: Entry) -> None:
        """Keep an EVICTED chunk no queue item names among the recent evictions; forget
        the oldest beyond `EVICTED_KEPT`."""
        if entry.queue_items:
            return  # a stale item names it: kept until popped (`Scheduler.pop_runnable`)
        evicted = self.evicted
        evicted[entry.key] = None
        while len(evicted) > self.evicted_kept:
            key, _ = evicted.popitem(last=False)
            self.drop(self.entries[key])

    def requeued(self, entry: Entry) -> None:
        """An EVICTED chunk is asked for again: it is no longer to be forgotten."""
        self.evicted.pop(entry.key, None)

    def drop(self, entry: Entry) -> None:
        """Forget an entry nothing refers to (EVICTED, or NEW, unpinned, unqueued)."""
        del self.entries[entry.key]
        self.evicted.pop(entry.key, None)
        self._counters.state_counts[entry.state] -= 1
        self.forgotten += 1

    def forget(self, identities: frozenset[Hashable], outbox: Outbox) -> int:
        """Evict the unpinned READY chunks of sources whose identity is in `identities` and
        forget them with their EVICTED ones; how many entries were dropped.

        Chunks pinned, queued, loading or failed stay: they are forgotten when evicted
        (and then among the oldest evictions).
        """
        before = self.forgotten
        for key, entry in list(self.entries.items()):
            if key.source not in identities or entry.pins or entry.queue_items:
                continue
            if entry.state is ChunkState.READY:
                self.evict(entry, outbox)
            if entry.state is ChunkState.EVICTED and key in self.entries:
                self.drop(entry)
        return self.forgotten - before

    def kept_bytes(self) -> int:
        """What the sources read keep beside their chunks."""
        return sum(source.kept_bytes for source in self.keepers)

    def evict_over_limit(self, outbox: Outbox) -> None:
        """Evict least recently used unpinned chunks until under the limit (less what the
        sources keep): O(1) each."""
        if not self.lru:
            return  # nothing evictable (a cold read pins all it loads): no keepers to sum
        limit = self.limit - self.kept_bytes() if self.keepers else self.limit
        while self.resident > limit and self.lru:
            self.lru_visits += 1
            self.evict(self.entries[next(iter(self.lru))], outbox)

    def evict_unpinned(self, outbox: Outbox) -> int:
        """Evict every READY chunk no live request pins; how many."""
        before = self._counters.evictions
        for key in list(self.lru):  # only unpinned chunks are in it
            self.evict(self.entries[key], outbox)
        return self._counters.evictions - before

    def lookup(self, key: ChunkKey, partial: bool = False) -> np.ndarray[Any, Any] | None:
        """The decoded chunk if READY (a partial one only with `partial`), else None; marks
        it recently used."""
        entry = self.entries.get(key)
        if entry is None or entry.state is not ChunkState.READY:
            return None
        if entry.left_out and not partial:
            return None
        if key in self.lru:  # `touch`, inline: the hot path of every read
            self.lru.move_to_end(key)
        return entry.data

    def lookup_many(
        self, keys: Iterable[ChunkKey], count_hits: bool, partial: bool = False
    ) -> tuple[dict[ChunkKey, np.ndarray[Any, Any]], set[ChunkKey]]:
        """The READY chunks among `keys` (marked recently used) and the FAILED ones
        (`ChunkCache.lookup_many`; a partial chunk is READY with `partial`, else FAILED)."""
        ready: dict[ChunkKey, np.ndarray[Any, Any]] = {}
        failed: set[ChunkKey] = set()
        entries, lru = self.entries, self.lru
        for key in keys:
            entry = entries.get(key)
            if entry is None:
                continue
            if entry.state is ChunkState.READY:
                if entry.left_out and not partial:
                    failed.add(key)
                    continue
                if key in lru:  # `touch`, inline: this loop runs once per chunk of a view
                    lru.move_to_end(key)
                assert entry.data is not None
                ready[key] = entry.data
            elif entry.state is ChunkState.FAILED and not not_started(entry.error):
                failed.add(key)  # (one that failed for want of a thread is read if asked)
        if count_hits:
            self._counters.hits += len(ready)
        return ready, failed

    def errors(self, keys: Iterable[ChunkKey]) -> dict[ChunkKey, BaseException]:
        """The FAILED chunks among `keys`, with their errors, and the READY derived chunks
        combined without a failed input (`Entry.left_out`), with the input's: what a
        blocking read refuses (nothing partial leaves through it)."""
        found: dict[ChunkKey, BaseException] = {}
        for key in keys:
            entry = self.entries.get(key)
            if entry is None:
                continue
            if entry.state is ChunkState.FAILED and entry.error:
                found[key] = entry.error
            elif entry.state is ChunkState.READY and entry.left_out:
                failed, cause = next(iter(entry.left_out.items()))
                found[key] = input_error(key, failed, cause)
        return found


def not_started(error: BaseException | None) -> bool:
    """Whether a FAILED chunk failed only because no worker thread could start
    (`Demand.fail_unstartable`): a request for it queues it again."""
    return isinstance(error, ChunkReadError) and isinstance(error.__cause__, ThreadStartError)
