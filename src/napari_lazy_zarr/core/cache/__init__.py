"""Residency: which decoded chunks are in memory, and the workers that fill them.

`ChunkCache` is the byte-bounded, least-recently-used cache of decoded chunks
with its one lock and its state machine; `Request` is one view's live need of
chunks; `CacheStatistics`, `CacheCounters` and `ChunkStatus` are the read-only
snapshots it hands to displays; `schedule` holds the priority rule its workers
take loads in (`LoadClass`, `PriorityQueue`). The cache reads chunks only
through the `ChunkSource` protocol: it never imports a store or a format.
The private `_x.py` modules are the façade's helpers, each holding state only
ever touched under the cache's one lock, and never taking a lock themselves.
"""

from napari_lazy_zarr.core.cache.cache import (
    DEFAULT_STALLED_AFTER,
    DEFAULT_TOTAL_BYTES_LIMIT,
    ChunkCache,
    check_concurrency,
    check_total_bytes_limit,
    default_concurrency,
)
from napari_lazy_zarr.core.cache.request import Request
from napari_lazy_zarr.core.cache.schedule import LoadClass, PriorityQueue, QueueItem, cost_rank
from napari_lazy_zarr.core.cache.snapshots import CacheCounters, CacheStatistics, ChunkStatus

__all__ = [
    "DEFAULT_STALLED_AFTER",
    "DEFAULT_TOTAL_BYTES_LIMIT",
    "CacheCounters",
    "CacheStatistics",
    "ChunkCache",
    "ChunkStatus",
    "LoadClass",
    "PriorityQueue",
    "QueueItem",
    "Request",
    "check_concurrency",
    "check_total_bytes_limit",
    "cost_rank",
    "default_concurrency",
]
