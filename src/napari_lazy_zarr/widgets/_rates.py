"""`RateHistory`: load rates, hit rate, queue depth and resident bytes over time.

Qt-free. Sampled by the inspector's refresh while something happens; a quiet
cache adds one last sample and then none, so the sparklines hold still (and
nothing repaints) until work resumes.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

    from napari_lazy_zarr.core import CacheStatistics
    from napari_lazy_zarr.core.cache import CacheCounters

__all__ = ["SERIES", "RateHistory"]

SERIES: Final = ("loaded MiB/s", "chunks/s", "hit rate", "queue depth")
"""The cache-wide series, in display order; then one ``resident: LAYER`` per layer."""


class RateHistory:
    """The latest `length` samples of each series.

    Examples
    --------
    >>> from napari_lazy_zarr.core import ChunkCache
    >>> with ChunkCache(1 << 20) as cache:
    ...     stats = cache.counters()
    >>> history = RateHistory()
    >>> history.add(0.0, 0, 0, stats, {"cells": 0})  # the first sample sets the baseline
    False
    >>> history.add(0.5, 10, 10 << 20, stats, {"cells": 10 << 20})
    True
    >>> history.latest("chunks/s"), history.latest("loaded MiB/s")
    (20.0, 20.0)
    >>> history.add(1.0, 0, 0, stats, {"cells": 10 << 20})  # quiet: one zero sample...
    True
    >>> history.add(1.5, 0, 0, stats, {"cells": 10 << 20})  # ...then nothing
    False
    """

    def __init__(self, length: int = 150) -> None:
        self.length = length
        self.series: dict[str, deque[float]] = {name: deque(maxlen=length) for name in SERIES}
        self._time: float | None = None
        self._hits = 0
        self._misses = 0
        self._last_resident: dict[str, int] = {}
        self._quiet = False

    def latest(self, name: str) -> float:
        values = self.series.get(name)
        return values[-1] if values else math.nan

    def add(
        self,
        now: float,
        loaded_chunks: int,
        loaded_bytes: int,
        stats: CacheCounters | CacheStatistics,
        resident: Mapping[str, int],
    ) -> bool:
        """Record what loaded since the last sample; False if nothing was recorded."""
        if self._time is None:
            self._time, self._hits, self._misses = now, stats.hits, stats.misses
            self._last_resident = dict(resident)
            return False
        hits, misses = stats.hits - self._hits, stats.misses - self._misses
        queue = stats.queued + stats.in_flight
        quiet = (
            not loaded_chunks
            and not hits
            and not misses
            and not queue
            and dict(resident) == self._last_resident
        )
        if quiet and self._quiet:
            self._time = now
            return False
        self._quiet = quiet
        elapsed = max(now - self._time, 1e-6)
        self._time, self._hits, self._misses = now, stats.hits, stats.misses
        self._last_resident = dict(resident)
        self.series["loaded MiB/s"].append(loaded_bytes / elapsed / (1 << 20))
        self.series["chunks/s"].append(loaded_chunks / elapsed)
        self.series["hit rate"].append(hits / (hits + misses) if hits + misses else math.nan)
        self.series["queue depth"].append(float(queue))
        for layer, nbytes in resident.items():
            values = self.series.setdefault(f"resident: {layer}", deque(maxlen=self.length))
            values.append(nbytes / (1 << 20))
        return True
