"""`ChunkInspector`: the dock widget showing, live, what the cache holds and what the view needs.

Threading: the cache's signals arrive on worker threads; their slots only queue
(`ChunkGridState.on_events`, `_on_events`). A 30 Hz timer on the main thread
applies what was queued and repaints only what changed, so a storm of
thousands of events a second costs at most one repaint per tick, and painting
never holds the cache lock (the grid keeps its own copy of the states).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from magicgui.widgets import CheckBox, ComboBox, Container, PushButton, SpinBox
from qtpy.QtCore import QTimer
from qtpy.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from napari_lazy_zarr._layer_data import LayerLoader, loader_of
from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.widgets._chunk_map import QChunkMap
from napari_lazy_zarr.widgets._event_log import QEventLog
from napari_lazy_zarr.widgets._grid_state import STATE_COLORS, ChunkGridState
from napari_lazy_zarr.widgets._state_diagram import QStateDiagram

if TYPE_CHECKING:
    from qtpy.QtGui import QCloseEvent

    from napari_lazy_zarr.core import CacheStatistics, ChunkCache, ChunkEvent
    from napari_lazy_zarr.core.view import ViewController, ViewResult

__all__ = ["ChunkInspector"]

_TICK_MS: Final = 33  # repaints at most ~30 times a second
_FOLLOW: Final = "active layer"
_DISPLAYED: Final = "displayed level"
_MIB: Final = 1 << 20


class ChunkInspector(QWidget):
    """The chunk state machine, live, for the active (or a pinned) plugin layer and level.

    Parameters
    ----------
    napari_viewer
        The viewer whose layers are inspected (npe2 passes it).
    """

    def __init__(self, napari_viewer: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = napari_viewer
        self._grid: ChunkGridState | None = None
        self._target: tuple[Any, int] | None = None  # (layer, level)
        self._cache: ChunkCache | None = None
        # The displayed view of the inspected layer, as its controller reports it.
        self._controller: ViewController | None = None
        self._view: ViewResult | None = None
        self._log_lock = threading.Lock()
        self._log_pending: deque[tuple[ChunkEvent, ...]] = deque()
        self._stats_dirty = True
        self.ticks = 0
        self.refreshes = 0
        self._closed = False

        self.layer_choice = QComboBox()
        self.level_choice = QComboBox()
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.chunk_map = QChunkMap()
        self.diagram = QStateDiagram()
        self.log = QEventLog()
        self.resident = QProgressBar()
        self.resident.setFormat("resident %v of %m MiB")
        self.stat_labels: dict[str, QLabel] = {}
        self.controls = self._make_controls()
        self._layout()

        self.layer_choice.currentTextChanged.connect(lambda _: self._retarget())
        self.level_choice.currentTextChanged.connect(lambda _: self._retarget())
        layers = napari_viewer.layers
        layers.events.inserted.connect(self._update_layer_choices)
        layers.events.removed.connect(self._update_layer_choices)
        layers.selection.events.active.connect(self._on_active)
        self._update_layer_choices()
        self._timer = QTimer(self)
        self._timer.setInterval(_TICK_MS)
        self._timer.timeout.connect(self.tick)
        self._timer.start()
        self.tick()

    # -- construction --------------------------------------------------------

    def _make_controls(self) -> Container[Any]:
        self.capacity = SpinBox(label="capacity (MiB)", min=0, max=1_000_000, step=64)
        self.concurrency = SpinBox(label="concurrency", min=1, max=256)
        self.prefetch = CheckBox(label="prefetch neighbours", value=True)
        self.mode = ComboBox(label="loading", choices=["progressive", "blocking"])
        self.retry_button = PushButton(text="Retry all failed")
        self.evict_button = PushButton(text="Evict all unpinned")
        self.capacity.changed.connect(self._apply_capacity)
        self.concurrency.changed.connect(self._apply_concurrency)
        self.prefetch.changed.connect(self._apply_loader_options)
        self.mode.changed.connect(self._apply_loader_options)
        self.retry_button.changed.connect(self.retry_failed)
        self.evict_button.changed.connect(self.evict_unpinned)
        return Container(
            widgets=[
                self.capacity,
                self.concurrency,
                self.prefetch,
                self.mode,
                self.retry_button,
                self.evict_button,
            ]
        )

    def _layout(self) -> None:
        choose = QHBoxLayout()
        choose.addWidget(QLabel("layer"))
        choose.addWidget(self.layer_choice, 1)
        choose.addWidget(QLabel("level"))
        choose.addWidget(self.level_choice)
        legend = QGridLayout()
        for i, state in enumerate(ChunkState):
            swatch = QLabel(state.name)
            r, g, b = STATE_COLORS[state]
            swatch.setStyleSheet(
                f"background: rgb({r},{g},{b}); color: black; padding: 1px 4px; border-radius: 3px"
            )
            legend.addWidget(swatch, 0, i)
        outline = QLabel("white: chunks the view touches · orange: region napari requested")
        outline.setWordWrap(True)
        stats = QFormLayout()
        stats.addRow(self.resident)
        for name in (
            "pinned",
            "hits / misses",
            "in flight / queued",
            "failures / evictions",
            "load latency",
        ):
            label = QLabel()
            self.stat_labels[name] = label
            stats.addRow(name, label)
        machine = QWidget()
        machine_layout = QVBoxLayout(machine)
        machine_layout.addWidget(self.diagram)
        machine_layout.addLayout(stats)
        tabs = QTabWidget()
        tabs.addTab(machine, "state machine")
        tabs.addTab(self.log, "event log")
        tabs.addTab(self.controls.native, "controls")
        self.tabs = tabs
        layout = QVBoxLayout(self)
        layout.addLayout(choose)
        layout.addWidget(self.note)
        layout.addWidget(self.chunk_map, 3)
        layout.addLayout(legend)
        layout.addWidget(outline)
        layout.addWidget(tabs, 4)

    # -- which layer and level -----------------------------------------------

    def _plugin_layers(self) -> list[Any]:
        return [layer for layer in self.viewer.layers if loader_of(layer) is not None]

    def _update_layer_choices(self, event: Any = None) -> None:
        current = self.layer_choice.currentText()
        self.layer_choice.blockSignals(True)
        self.layer_choice.clear()
        self.layer_choice.addItems([_FOLLOW, *(layer.name for layer in self.viewer.layers)])
        index = self.layer_choice.findText(current)
        self.layer_choice.setCurrentIndex(max(index, 0))
        self.layer_choice.blockSignals(False)
        self._retarget()

    def _on_active(self, event: Any = None) -> None:
        if self.layer_choice.currentText() == _FOLLOW:
            self._retarget()

    def pin(self, layer_name: str | None, level: int | None = None) -> None:
        """Show `layer_name` (None: the active layer) at `level` (None: the displayed one)."""
        self.layer_choice.setCurrentText(_FOLLOW if layer_name is None else layer_name)
        self._refresh_level_choices()
        self.level_choice.setCurrentText(_DISPLAYED if level is None else str(level))
        self._retarget()

    def _selected_layer(self) -> Any:
        name = self.layer_choice.currentText()
        if name == _FOLLOW:
            return self.viewer.layers.selection.active
        return next((layer for layer in self.viewer.layers if layer.name == name), None)

    def _refresh_level_choices(self) -> None:
        layer = self._selected_layer()
        loader = None if layer is None else loader_of(layer)
        wanted = [_DISPLAYED] + (
            [] if loader is None else [str(i) for i in range(len(loader.levels))]
        )
        if [self.level_choice.itemText(i) for i in range(self.level_choice.count())] != wanted:
            current = self.level_choice.currentText()
            self.level_choice.blockSignals(True)
            self.level_choice.clear()
            self.level_choice.addItems(wanted)
            self.level_choice.setCurrentIndex(max(self.level_choice.findText(current), 0))
            self.level_choice.blockSignals(False)

    def _retarget(self) -> None:
        if self._closed:
            return
        self._refresh_level_choices()
        layer = self._selected_layer()
        loader = None if layer is None else loader_of(layer)
        if loader is None:
            self._set_target(None, None)
            self._set_controller(None)
            self.note.setText(
                "No chunk map: select a layer opened with napari-lazy-zarr."
                if layer is None
                else f"Layer {layer.name!r} is not backed by napari-lazy-zarr: it has no chunks "
                "to show. Select a layer opened with the Lazy Zarr reader."
            )
            self.note.setVisible(True)
            return
        self.note.setVisible(False)
        choice = self.level_choice.currentText()
        self._set_controller(loader.controller)
        shown = 0 if self._view is None else self._view.request.level
        level = shown if choice in ("", _DISPLAYED) else int(choice)
        self._set_target(layer, loader, min(level, len(loader.levels) - 1))

    def _set_target(self, layer: Any, loader: LayerLoader | None, level: int = 0) -> None:
        target = None if layer is None else (layer, level)
        if target == self._target:
            return
        self._target = target
        if self._grid is not None:
            self._grid.close()
            self._grid = None
        self._set_cache(None if loader is None else loader.cache)
        if loader is not None:
            self._grid = ChunkGridState(loader.cache, loader.levels[level].array.source)
            # The controls show the inspected layer's loader options.
            self.prefetch.value = loader.prefetch
            self.mode.value = "blocking" if loader.blocking else "progressive"
        self.chunk_map.set_grid(self._grid)
        self._stats_dirty = True

    def _set_controller(self, controller: ViewController | None) -> None:
        if controller is self._controller:
            return
        if self._controller is not None:
            self._controller.view_read.disconnect(self._on_view_read)
        self._controller = controller
        with self._log_lock:
            self._view = None if controller is None else controller.latest
        if controller is not None:
            controller.view_read.connect(self._on_view_read)

    def _on_view_read(self, result: ViewResult) -> None:
        """Any thread: the controller answered a read; keep the displayed view's."""
        if result.request.kind == "view":
            with self._log_lock:
                self._view = result

    def _set_cache(self, cache: ChunkCache | None) -> None:
        if cache is self._cache:
            return
        if self._cache is not None:
            self._cache.state_changed.disconnect(self._on_events)
        self._cache = cache
        if cache is not None:
            cache.state_changed.connect(self._on_events)
            self.capacity.value = cache.total_bytes_limit // _MIB
            self.concurrency.value = cache.concurrency

    # -- live updates ---------------------------------------------------------

    def _on_events(self, events: tuple[ChunkEvent, ...]) -> None:
        """Any thread: queue for the next tick."""
        with self._log_lock:
            self._log_pending.append(events)

    def tick(self) -> None:
        """Main thread, ~30 Hz: apply what arrived, repaint what changed."""
        if self._closed:
            return
        self.ticks += 1
        if self.level_choice.currentText() in ("", _DISPLAYED) or self._target is None:
            self._retarget()
        with self._log_lock:
            batches = list(self._log_pending)
            self._log_pending.clear()
        changed = bool(batches) or self._stats_dirty
        if batches:
            self.log.model.add(e for events in batches for e in events)
        if self._grid is not None and self._grid.apply():
            self.chunk_map.refresh()
        self._update_view()
        if changed and self._cache is not None:
            self.refreshes += 1
            stats = self._cache.statistics
            self.diagram.set_counts(stats.states, stats.transitions)
            self._show_statistics(stats)
            self._stats_dirty = False

    def _update_view(self) -> None:
        if self._target is None or self._grid is None:
            return
        layer, level = self._target
        with self._log_lock:
            view = self._view
        keys = (
            frozenset(view.keys)
            if view is not None and view.request.level == level
            else frozenset()
        )
        viewport = None
        if layer.data_level == level and len(self._grid.shape) >= 2:
            corners = layer.corner_pixels  # napari's requested region, at its data level
            source = self._grid.source
            grid = source.grid
            rows, cols = len(self._grid.shape) - 2, len(self._grid.shape) - 1

            def units(axis: int, value: float) -> float:
                g = grid[axis]
                chunk = int(g.index_to_chunk(max(0, min(int(value), source.shape[axis] - 1))))
                start, size = g.chunk_offset(chunk), g.chunk_size(chunk)
                return chunk + (value - start) / size

            viewport = (
                (units(rows, corners[0][rows]), units(cols, corners[0][cols])),
                (units(rows, corners[1][rows] + 1), units(cols, corners[1][cols] + 1)),
            )
            if keys:
                plane = self._plane_index(keys)
                if plane is not None:
                    self.chunk_map.set_plane(plane)
        self.chunk_map.set_view(keys, viewport)

    def _plane_index(self, keys: frozenset[Any]) -> tuple[int | None, ...] | None:
        assert self._grid is not None
        coords = self._grid.coords_of(next(iter(keys)))
        if coords is None:
            return None
        rank = len(coords)
        return tuple(c if axis < rank - 2 else None for axis, c in enumerate(coords))

    def _show_statistics(self, stats: CacheStatistics) -> None:
        self.resident.setMaximum(max(1, stats.total_bytes_limit // _MIB))
        self.resident.setValue(min(stats.resident_bytes // _MIB, self.resident.maximum()))
        hit_rate = "—" if stats.hit_rate != stats.hit_rate else f"{stats.hit_rate:.0%}"
        self.stat_labels["pinned"].setText(f"{stats.pinned_bytes / _MIB:.1f} MiB")
        self.stat_labels["hits / misses"].setText(
            f"{stats.hits:,} / {stats.misses:,} ({hit_rate})"
        )
        self.stat_labels["in flight / queued"].setText(f"{stats.in_flight} / {stats.queued}")
        self.stat_labels["failures / evictions"].setText(
            f"{stats.failures:,} / {stats.evictions:,}"
        )
        mean, p95 = stats.load_latency_mean * 1e3, stats.load_latency_p95 * 1e3
        latency = "—" if mean != mean else f"mean {mean:.1f} ms, p95 {p95:.1f} ms"
        self.stat_labels["load latency"].setText(latency)

    # -- controls --------------------------------------------------------------

    def _apply_capacity(self, value: int) -> None:
        if self._cache is not None and value * _MIB != self._cache.total_bytes_limit:
            self._cache.total_bytes_limit = value * _MIB

    def _apply_concurrency(self, value: int) -> None:
        if self._cache is not None and value != self._cache.concurrency:
            self._cache.concurrency = value

    def _apply_loader_options(self, _: Any = None) -> None:
        for layer in self._plugin_layers():
            loader = loader_of(layer)
            assert loader is not None
            loader.prefetch = bool(self.prefetch.value)
            loader.blocking = self.mode.value == "blocking"

    def retry_failed(self, _: Any = None) -> int:
        return 0 if self._cache is None else self._cache.retry_failed()

    def evict_unpinned(self, _: Any = None) -> int:
        return 0 if self._cache is None else self._cache.evict_unpinned()

    # -- teardown --------------------------------------------------------------

    def cleanup(self) -> None:
        """Disconnect everything (idempotent); called when the widget closes."""
        if self._closed:
            return
        self._closed = True
        self._timer.stop()
        layers = self.viewer.layers
        layers.events.inserted.disconnect(self._update_layer_choices)
        layers.events.removed.disconnect(self._update_layer_choices)
        layers.selection.events.active.disconnect(self._on_active)
        if self._grid is not None:
            self._grid.close()
            self._grid = None
        self._set_cache(None)
        self._set_controller(None)
        self.chunk_map.set_grid(None)

    def closeEvent(self, event: QCloseEvent | None) -> None:
        self.cleanup()
        super().closeEvent(event)
