"""`RateHistory`: load rates, hit rate, queue depth and resident bytes over time; its chart rows.

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
    from napari_lazy_zarr.widgets._sparkline import Series

__all__ = ["SERIES", "SPARK_COLORS", "RateHistory", "sparkline_rows"]

SERIES: Final = ("loaded MiB/s", "chunks/s", "hit rate", "queue depth")
"""The cache-wide series, in display order; then one ``resident: LAYER`` per layer."""

SPARK_COLORS: Final = {
    "loaded MiB/s": (70, 190, 110),
    "chunks/s": (86, 132, 230),
    "hit rate": (245, 200, 50),
    "queue depth": (230, 120, 60),
}
"""Each cache-wide series' colour (the resident series share one)."""


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


def sparkline_rows(history: RateHistory) -> list[Series]:
    """The rows the rates chart draws: name, values, the latest value in words, colour.

    Examples
    --------
    >>> history = RateHistory(length=3)
    >>> history.series["queue depth"].extend([4.0, 9.0, 2.0])
    >>> [row for row in sparkline_rows(history) if row[0] == "queue depth"]
    [('queue depth', (4.0, 9.0, 2.0), '2 (peak 9)', (230, 120, 60))]
    """
    rows: list[Series] = []
    for name, values in history.series.items():
        finite = [v for v in values if not math.isnan(v)]
        latest, peak = (finite[-1], max(finite)) if finite else (math.nan, math.nan)
        if not finite:
            text = "—"
        elif name == "hit rate":
            text = f"{latest:.0%}"
        elif name == "queue depth":
            text = f"{latest:,.0f} (peak {peak:,.0f})"
        elif name.startswith("resident"):
            text = f"{latest:,.1f} MiB"
        else:
            text = f"{latest:,.1f} (peak {peak:,.1f})"
        color = SPARK_COLORS.get(name, (160, 120, 200))
        rows.append((name, tuple(values), text, color))
    return rows
