"""`QMachineTab`: the inspector's state machine tab (the live state diagram, the statistics).

Fed one `CacheStatistics` per refresh while the tab is in front; a label is
written only when its text changed, and the resident bar only when its
MiB changed (each call into Qt may wait for the GIL behind loading workers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from qtpy.QtWidgets import QFormLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from napari_lazy_zarr.widgets._explain import size_text
from napari_lazy_zarr.widgets._state_diagram import QStateDiagram

if TYPE_CHECKING:
    from napari_lazy_zarr.core import CacheStatistics

__all__ = ["STATISTICS", "QMachineTab"]

_MIB: Final = 1 << 20
STATISTICS: Final = (
    "pinned",
    "shard indexes",
    "hits / misses",
    "in flight / queued",
    "parked / deferred",
    "failures / evictions",
    "load latency",
)
"""The rows under the resident bar, in order."""


class QMachineTab(QWidget):
    """The six states with their counts and moves (`diagram`), then the cache's statistics."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.diagram = QStateDiagram()
        self.resident = QProgressBar()
        self.resident.setFormat("resident %v of %m MiB")
        self.stat_labels: dict[str, QLabel] = {}
        self._bar = (0, 0)  # the resident bar's (maximum, value)
        self._texts: dict[int, str] = {}  # id(label) -> the text it shows
        stats = QFormLayout()
        stats.addRow(self.resident)
        for name in STATISTICS:
            label = QLabel()
            self.stat_labels[name] = label
            stats.addRow(name, label)
        layout = QVBoxLayout(self)
        layout.addWidget(self.diagram)
        layout.addLayout(stats)

    def show_statistics(self, stats: CacheStatistics) -> None:
        """Show `stats`: the diagram's counts, the resident bar and every row."""
        self.diagram.set_counts(stats.states, stats.transitions)
        limit = max(1, stats.total_bytes_limit // _MIB)
        bar = (limit, min(stats.resident_bytes // _MIB, limit))
        if bar != self._bar:
            self._bar = bar
            self.resident.setMaximum(bar[0])
            self.resident.setValue(bar[1])
        hit_rate = "—" if stats.hit_rate != stats.hit_rate else f"{stats.hit_rate:.0%}"
        mean, p95 = stats.load_latency_mean * 1e3, stats.load_latency_p95 * 1e3
        texts = {
            "pinned": size_text(stats.pinned_bytes),
            "shard indexes": size_text(stats.kept_bytes),
            "hits / misses": f"{stats.hits:,} / {stats.misses:,} ({hit_rate})",
            "in flight / queued": f"{stats.in_flight:,} / {stats.queued:,}",
            "parked / deferred": f"{stats.parked:,} / {stats.deferred:,}",
            "failures / evictions": f"{stats.failures:,} / {stats.evictions:,}",
            "load latency": "—" if mean != mean else f"mean {mean:.1f} ms, p95 {p95:.1f} ms",
        }
        for name, text in texts.items():
            self._set_text(self.stat_labels[name], text)

    def _set_text(self, label: QLabel, text: str) -> None:
        if self._texts.get(id(label)) != text:
            self._texts[id(label)] = text
            label.setText(text)
