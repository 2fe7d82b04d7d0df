"""`Counters`: the running statistics of one `ChunkCache`, and the snapshots made of them.

Thread contract
---------------
Every field is read and written only under the owning cache's lock (the
façade's `_transition`, `request`, `lookup_many`, and the helpers the façade
calls with the lock held). `Counters` never takes a lock itself; the
snapshots it makes are immutable and may cross threads.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import fields
from typing import TYPE_CHECKING, Final

import numpy as np

from napari_lazy_zarr.core.cache.snapshots import CacheCounters, CacheStatistics
from napari_lazy_zarr.core.states import ChunkState

if TYPE_CHECKING:
    from napari_lazy_zarr.core.cache._residency import Residency

__all__ = ["Counters"]

_LATENCY_WINDOW: Final = 1024


class Counters:
    """Hits, misses, loads, failures, evictions, load latencies, state and move counts."""

    __slots__ = (
        "evictions",
        "failures",
        "hits",
        "latencies",
        "loads",
        "misses",
        "state_counts",
        "transition_counts",
    )

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.loads = 0
        self.failures = 0
        self.evictions = 0
        self.latencies: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self.state_counts: Counter[ChunkState] = Counter()
        self.transition_counts: Counter[tuple[ChunkState, ChunkState]] = Counter()

    def counters(self, residency: Residency, parked: int, deferred: int) -> CacheCounters:
        """The running counters, O(1) but for the sources that keep bytes."""
        return CacheCounters(
            hits=self.hits,
            misses=self.misses,
            loads=self.loads,
            failures=self.failures,
            evictions=self.evictions,
            resident_bytes=residency.resident,
            pinned_bytes=residency.pinned,
            total_bytes_limit=residency.limit,
            in_flight=self.state_counts[ChunkState.LOADING],
            queued=self.state_counts[ChunkState.QUEUED] - parked - deferred,
            parked=parked,
            deferred=deferred,
            kept_bytes=residency.kept_bytes(),
        )

    def statistics(self, residency: Residency, parked: int, deferred: int) -> CacheStatistics:
        """The counters with the load latencies and the state and move tables."""
        latencies = np.fromiter(self.latencies, dtype=np.float64, count=len(self.latencies))
        counters = self.counters(residency, parked, deferred)
        return CacheStatistics(
            **{field.name: getattr(counters, field.name) for field in fields(CacheCounters)},
            load_latency_mean=float(latencies.mean()) if latencies.size else math.nan,
            load_latency_p95=float(np.percentile(latencies, 95)) if latencies.size else math.nan,
            states={state: self.state_counts[state] for state in ChunkState},
            transitions=dict(self.transition_counts),
        )
