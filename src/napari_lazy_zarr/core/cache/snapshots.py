"""What `ChunkCache` tells displays: immutable snapshots taken under its lock.

`CacheStatistics` (the counters with latencies and tables), `CacheCounters`
(the counters alone, in O(1)) and `ChunkStatus` (one chunk). Each is frozen,
so it is safe to hand to any thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from napari_lazy_zarr.core.cache.schedule import LoadClass
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.states import ChunkState

__all__ = ["CacheCounters", "CacheStatistics", "ChunkStatus"]


@dataclass(frozen=True, slots=True)
class ChunkStatus:
    """Why one chunk is where it is: its state and the cache's bookkeeping about it.

    A snapshot taken under the cache's lock (`ChunkCache.status`); immutable, so
    safe to hand to any thread.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.cache import ChunkCache
    >>> from napari_lazy_zarr.core.executors import ManualExecutor
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
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
    >>> from napari_lazy_zarr.core.cache import ChunkCache
    >>> with ChunkCache(1 << 20) as cache:
    ...     counters = cache.counters()
    >>> counters.hits, counters.queued, counters.total_bytes_limit
    (0, 0, 1048576)
    """

    hits: int
    """Chunks requested that were READY (and those a read served with
    ``lookup_many(count_hits=True)``)."""
    misses: int
    """Chunks requested that were not READY (queued, loading or FAILED)."""
    loads: int
    """Chunks that became READY."""
    failures: int
    """Chunks that became FAILED."""
    evictions: int
    """Chunks evicted (READY -> EVICTED)."""
    resident_bytes: int
    """Decoded bytes held by READY chunks."""
    pinned_bytes: int
    """Of those, bytes of chunks pinned by live requests (never evicted)."""
    total_bytes_limit: int
    """The capacity in bytes (`ChunkCache.total_bytes_limit`)."""
    in_flight: int
    """LOADING chunks."""
    queued: int
    """QUEUED chunks waiting for a worker (parked and deferred ones excluded)."""
    parked: int
    """QUEUED chunks dropped from the queue because their view moved on (not fetched)."""
    deferred: int
    """QUEUED derived chunks out of the queue, waiting for their inputs to load."""
    kept_bytes: int = 0
    """Bytes its sources keep beside the chunks (shard indexes), counted in the limit."""

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``; NaN before the first request."""
        total = self.hits + self.misses
        return self.hits / total if total else math.nan


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheStatistics(CacheCounters):
    """A snapshot of the cache's counters, load latencies and state tables.

    `CacheCounters` with what costs more than O(1) to take (`ChunkCache.statistics`,
    and the `statistics_changed` signal); immutable, safe to hand to any thread.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.cache import ChunkCache
    >>> from napari_lazy_zarr.core.executors import InlineExecutor
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> from napari_lazy_zarr.core.states import ChunkState
    >>> source = ArraySource(np.zeros(8), chunks=(4,), name="s")
    >>> with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
    ...     cache.request([ChunkRef.of(source, (0,))]).release()
    ...     stats = cache.statistics
    >>> stats.loads, stats.hit_rate, stats.states[ChunkState.READY]
    (1, 0.0, 1)
    """

    load_latency_mean: float
    """Seconds a load took, on average over the last 1,024 loads (NaN before the first)."""
    load_latency_p95: float
    """The 95th percentile of those, in seconds (NaN before the first)."""
    states: dict[ChunkState, int]
    """How many chunks are in each state (every state, NEW included)."""
    transitions: dict[tuple[ChunkState, ChunkState], int]
    """How many times each move was made, by (previous, current)."""
