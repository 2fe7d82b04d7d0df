"""`ChunkInspector`: the dock widget explaining, live, what each chunk of the view shows and why.

Threading: the cache's events arrive on worker threads and the controller's
`view_read` on its dispatch thread; their slots do the per-chunk work there
(`StateMirror.on_events`, `ViewCells.of`) and only hand results over. A 10 Hz
timer on the main thread applies what arrived with a few NumPy operations and
repaints only what changed; a refresh in which nothing changed touches neither
the cache nor the screen.

Lifecycle: napari never calls `close()` on a docked widget. The inspector is
*live* — timer running, connected to the viewer, the caches and the inspected
layer's controller — only while it is shown. Hiding it (its dock hidden, a
tab in front of it, the viewer closing) stops the timer and disconnects every
signal; showing it again re-reads the cache once. Removing the dock
(`remove_dock_widget`, the dock's close button) re-parents the widget to
nothing: it then deletes itself. If the widget is destroyed by other means,
its `destroyed` signal undoes the connections (they are kept apart from the
widget, holding it only weakly).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, Container, PushButton, SpinBox
from qtpy.QtCore import QEvent, QTimer
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
from napari_lazy_zarr._preferences import write_preference
from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.core.keys import grid_shape
from napari_lazy_zarr.widgets._chunk_map import QChunkMap
from napari_lazy_zarr.widgets._event_log import QEventLog
from napari_lazy_zarr.widgets._explain import describe_chunk, size_text
from napari_lazy_zarr.widgets._grid_state import (
    MARKER_COLORS,
    STATE_CODES,
    STATE_COLORS,
    ChunkGridState,
    Shown,
)
from napari_lazy_zarr.widgets._guarded import logged_once
from napari_lazy_zarr.widgets._mirror import MAX_GRID_CHUNKS, LayerSources, StateMirror
from napari_lazy_zarr.widgets._names import ChunkNamer
from napari_lazy_zarr.widgets._rates import RateHistory
from napari_lazy_zarr.widgets._residency_bar import QResidencyBar
from napari_lazy_zarr.widgets._sparkline import QSparklines, Series
from napari_lazy_zarr.widgets._state_diagram import QStateDiagram
from napari_lazy_zarr.widgets._text_strip import QTextStrip
from napari_lazy_zarr.widgets._view_cells import (
    ViewCells,
    level_coverage,
    plane_residency,
    stand_in_levels,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from qtpy.QtGui import QHideEvent, QShowEvent

    from napari_lazy_zarr.core import CacheStatistics, ChunkCache
    from napari_lazy_zarr.core.cache import CacheCounters
    from napari_lazy_zarr.core.viewport import ViewController, ViewFrame

__all__ = ["ChunkInspector"]

REFRESH_MS: Final = 100
"""The refresh period: 10 Hz."""
_FOLLOW: Final = "active layer"
_DISPLAYED: Final = "displayed level"
_MIB: Final = 1 << 20
LOG_CAPACITY: Final = 2000
"""Events the log keeps."""
_BLOCKING_NOTE: Final = (
    "Blocking loading is a debugging mode: every read napari makes waits for its "
    "chunks on napari's main thread, so the window freezes while they load."
)
_RATES_EVERY: Final = 5  # the rates chart is redrawn every 5th refresh (2 Hz) at most
_SPARK_COLORS: Final = {
    "loaded MiB/s": (70, 190, 110),
    "chunks/s": (86, 132, 230),
    "hit rate": (245, 200, 50),
    "queue depth": (230, 120, 60),
}


class _Subscriptions:
    """Signal connections to undo together.

    Holds each slot weakly (the widget's bound methods), so it can outlive the
    widget — it is what the widget's `destroyed` signal calls — without
    keeping the widget alive.
    """

    def __init__(self) -> None:
        self._pairs: list[tuple[Any, weakref.WeakMethod[Callable[..., Any]]]] = []

    def connect(self, signal: Any, slot: Callable[..., Any]) -> None:
        """Connect a psygnal signal or a napari event emitter to a bound method."""
        signal.connect(slot)
        self._pairs.append((signal, weakref.WeakMethod(slot)))

    def disconnect(self, signal: Any, slot: Callable[..., Any]) -> None:
        kept = []
        for pair in self._pairs:
            if pair[0] is signal and pair[1]() == slot:
                with contextlib.suppress(Exception):
                    signal.disconnect(slot)
            else:
                kept.append(pair)
        self._pairs = kept

    def clear(self, *_: Any) -> None:
        """Undo every connection whose slot still exists (idempotent)."""
        pairs, self._pairs = self._pairs, []
        for signal, weak in reversed(pairs):
            slot = weak()
            if slot is not None:
                with contextlib.suppress(Exception):  # a signal already torn down by its owner
                    signal.disconnect(slot)

    def __len__(self) -> int:
        return len(self._pairs)


class ChunkInspector(QWidget):
    """Why the view looks the way it does: every chunk of the displayed level, explained.

    Parameters
    ----------
    napari_viewer
        The viewer whose layers are inspected (npe2 passes it).

    The inspector follows the active layer and the level napari displays (or a
    layer and level chosen in its header). It shows, live: the levels resident
    under the view, the chunk map (state colours; a mark on each chunk of the
    view that is not final yet), residency along the axes the view does not
    display, a summary of why the view is not final, rates over time, the
    state machine with its counters, the event log, and the cache's controls.
    """

    def __init__(self, napari_viewer: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # npe2 hands plugins the viewer inside napari's PublicOnlyProxy, which wraps every
        # object reached through it afresh: our own loaders and caches would lose their
        # identity (and `is` checks with them). The wrapped viewer is the real one.
        self.viewer = getattr(napari_viewer, "__wrapped__", napari_viewer)
        self._links = _Subscriptions()
        # Undo the connections even if the widget is deleted without being hidden first.
        self.destroyed.connect(functools.partial(_on_destroyed, self._links, weakref.ref(self)))
        self._live = False
        self._closed = False
        self._docked = False
        self._mirrors: dict[int, StateMirror] = {}
        self._layers: list[LayerSources] = []
        self._loader: LayerLoader | None = None
        self._layer_name: str | None = None
        self._level = 0
        self._grids: tuple[ChunkGridState | None, ...] = ()
        self._controller: ViewController | None = None
        self._cells: ViewCells | None = None
        self._cells_lock = threading.Lock()
        # The latest read of each kind, from the dispatch thread; then as applied.
        self._arrived: dict[str, ViewCells] = {}
        self._previous: dict[str, ViewCells] = {}  # the dispatch thread's latest, per kind
        self._views: dict[str, ViewCells] = {}
        self._namer = ChunkNamer([], None)
        self._rates = RateHistory()
        self._quiet = False
        self._dirty = True
        self._bar = (0, 0)  # the resident bar's (maximum, value)
        self._counters: CacheCounters | None = None
        self.ticks = 0
        self.refreshes = 0

        self.layer_choice = QComboBox()
        self.level_choice = QComboBox()
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setVisible(False)
        self.levels_bar = QResidencyBar("levels")
        self.levels_bar.setToolTip(
            "How much of the region under the view is resident at each level "
            "(orange: the level shown)"
        )
        self.chunk_map = QChunkMap()
        self.chunk_map.set_explainer(self._explain_chunk)
        self.plane_bars: list[QResidencyBar] = []
        self._planes_box = QVBoxLayout()
        self._planes_box.setSpacing(1)
        self.summary = QTextStrip(lines=3)
        self.diagram = QStateDiagram()
        self.log = QEventLog(LOG_CAPACITY)
        self.resident = QProgressBar()
        self.resident.setFormat("resident %v of %m MiB")
        self.stat_labels: dict[str, QLabel] = {}
        self.rates_chart = QSparklines(RateHistory().length)
        self._texts: dict[int, str] = {}  # id(label) -> the text it shows
        self._tab = "rates"  # the tab in front (known without asking Qt)
        self.controls = self._make_controls()
        self._layout()

        self.layer_choice.currentTextChanged.connect(self._on_choice)
        self.level_choice.currentTextChanged.connect(self._on_choice)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.tick)

    # -- construction --------------------------------------------------------

    def _make_controls(self) -> Container[Any]:
        self.capacity = SpinBox(label="capacity (MiB)", min=0, max=1_000_000, step=64)
        self.concurrency = SpinBox(label="concurrency", min=1, max=256)
        self.prefetch = CheckBox(label="prefetch neighbours", value=True)
        self.mode = ComboBox(
            label="loading",
            choices=[
                ("progressive", "progressive"),
                ("blocking (debugging: freezes napari)", "blocking"),
            ],
            tooltip=_BLOCKING_NOTE,
        )
        self.retry_button = PushButton(text="Retry all failed")
        self.evict_button = PushButton(text="Evict all unpinned")
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
        legend.setSpacing(3)
        for i, state in enumerate(ChunkState):
            swatch = QLabel(state.name)
            r, g, b = STATE_COLORS[state]
            swatch.setStyleSheet(
                f"background: rgb({r},{g},{b}); color: black; padding: 1px 4px; border-radius: 3px"
            )
            legend.addWidget(swatch, i // 3, i % 3)
        marks = QLabel(
            "In the view: "
            + " · ".join(
                f"<span style='background:#5a6478;color:{_hex(MARKER_COLORS[shown])}'>&nbsp;■"
                f"&nbsp;</span> {text}"
                for shown, text in (
                    (Shown.PROVISIONAL, "provisional (a coarser level)"),
                    (Shown.FILL, "fill value"),
                )
            )
            + " · no mark: final. <span style='color:#ffffff'>White</span>: the view's "
            "chunks; <span style='color:#ff8c00'>orange</span>: the region napari asked for."
        )
        marks.setWordWrap(True)
        self.marks_legend = marks
        stats = QFormLayout()
        stats.addRow(self.resident)
        for name in (
            "pinned",
            "shard indexes",
            "hits / misses",
            "in flight / queued",
            "parked / deferred",
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
        rates = QWidget()
        rates_layout = QVBoxLayout(rates)
        rates_layout.addWidget(self.rates_chart)
        rates_layout.addStretch(1)
        self.blocking_note = QLabel(_BLOCKING_NOTE)
        self.blocking_note.setWordWrap(True)
        self.blocking_note.setStyleSheet("color: rgb(245, 200, 50)")
        self.blocking_note.setVisible(False)
        controls = QWidget()
        controls_layout = QVBoxLayout(controls)
        controls_layout.addWidget(self.controls.native)
        controls_layout.addWidget(self.blocking_note)
        controls_layout.addStretch(1)
        tabs = QTabWidget()
        tabs.addTab(rates, "rates")
        tabs.addTab(machine, "state machine")
        tabs.addTab(self.log, "event log")
        tabs.addTab(controls, "controls")
        tabs.currentChanged.connect(self._on_tab)
        self.tabs = tabs
        layout = QVBoxLayout(self)
        layout.addLayout(choose)
        layout.addWidget(self.note)
        layout.addWidget(self.levels_bar)
        layout.addWidget(self.chunk_map, 4)
        layout.addLayout(self._planes_box)
        layout.addLayout(legend)
        layout.addWidget(marks)
        layout.addWidget(self.summary)
        layout.addWidget(tabs, 3)

    # -- lifecycle: live only while shown ----------------------------------------

    @property
    def live(self) -> bool:
        """Whether the timer runs and the signals are connected (while shown)."""
        return self._live

    def showEvent(self, event: QShowEvent | None) -> None:
        super().showEvent(event)
        self._go_live()

    def hideEvent(self, event: QHideEvent | None) -> None:
        self._go_idle()
        super().hideEvent(event)

    def event(self, event: QEvent | None) -> bool:
        if event is not None and event.type() == QEvent.Type.ParentChange:
            if self.parent() is not None:
                self._docked = True
            elif self._docked:
                # napari's remove_dock_widget (and the dock's close button) only
                # re-parents the widget: it would linger, orphaned. It is gone for good.
                self.cleanup()
                self.deleteLater()
        return super().event(event)

    def _go_live(self) -> None:
        if self._live or self._closed:
            return
        self._live = True
        layers = self.viewer.layers
        self._links.connect(layers.events.inserted, self._on_layers_changed)
        self._links.connect(layers.events.removed, self._on_layers_changed)
        self._links.connect(layers.selection.events.active, self._on_active)
        for signal, slot in (
            (self.capacity.changed, self._apply_capacity),
            (self.concurrency.changed, self._apply_concurrency),
            (self.prefetch.changed, self._apply_loader_options),
            (self.mode.changed, self._apply_loader_options),
            (self.retry_button.changed, self.retry_failed),
            (self.evict_button.changed, self.evict_unpinned),
        ):
            self._links.connect(signal, slot)
        self._sync_layers()
        self._timer.start()
        self._dirty = True
        self.tick()

    def _go_idle(self) -> None:
        if not self._live:
            return
        self._live = False
        self._timer.stop()
        self._links.clear()
        for mirror in self._mirrors.values():
            mirror.close()
        self._mirrors.clear()
        self._controller = None
        self._loader = None
        self._grids = ()
        self._cells = None
        self._views = {}
        with self._cells_lock:
            self._arrived = {}
            self._previous = {}
        self.chunk_map.set_grid(None)

    def cleanup(self) -> None:
        """Stop for good: timer stopped, every signal disconnected (idempotent).

        Not needed in napari (hiding or removing the dock does it); for
        inspectors made by hand.
        """
        self._go_idle()
        self._closed = True

    # -- which layer and level -----------------------------------------------

    def _plugin_layers(self) -> list[Any]:
        return [layer for layer in self.viewer.layers if loader_of(layer) is not None]

    def _on_layers_changed(self, event: Any = None) -> None:
        self._sync_layers()

    def _sync_layers(self) -> None:
        """Follow the caches of the viewer's plugin layers; refresh the layer choices."""
        by_cache: dict[int, tuple[ChunkCache, list[LayerSources]]] = {}
        self._layers = []
        for layer in self._plugin_layers():
            loader = loader_of(layer)
            assert loader is not None
            controller = loader.controller
            sources = LayerSources(
                layer.name, tuple(controller.sources), controller.axis_map.fixed
            )
            self._layers.append(sources)
            by_cache.setdefault(id(controller.cache), (controller.cache, []))[1].append(sources)
        for key in [k for k in self._mirrors if k not in by_cache]:
            self._mirrors.pop(key).close()
        for key, (cache, layers) in by_cache.items():
            mirror = self._mirrors.get(key)
            if mirror is None:
                mirror = self._mirrors[key] = StateMirror(cache, LOG_CAPACITY)
                mirror.track(layers)
                mirror.connect(self._links.connect)
            else:
                mirror.track(layers)
        current = self.layer_choice.currentText()
        self.layer_choice.blockSignals(True)
        self.layer_choice.clear()
        self.layer_choice.addItems([_FOLLOW, *(layer.name for layer in self.viewer.layers)])
        self.layer_choice.setCurrentIndex(max(self.layer_choice.findText(current), 0))
        self.layer_choice.blockSignals(False)
        self._loader = None  # grids may have changed: look again
        self._retarget()

    def _on_active(self, event: Any = None) -> None:
        if self.layer_choice.currentText() == _FOLLOW:
            self._retarget()

    def _on_choice(self, _: str) -> None:
        self._retarget()

    def _on_tab(self, index: int) -> None:
        self._tab = self.tabs.tabText(index)
        self._dirty = True  # the tab now in front shows the latest at the next refresh
        if self._tab == "event log":
            self.log.model.flush()

    def pin(self, layer_name: str | None, level: int | None = None) -> None:
        """Show `layer_name` (None: the active layer) at `level` (None: the displayed one)."""
        self.layer_choice.setCurrentText(_FOLLOW if layer_name is None else layer_name)
        self._refresh_level_choices()
        self.level_choice.setCurrentText(_DISPLAYED if level is None else str(level))
        self._retarget()

    def _selected_layer(self) -> Any:
        name = self.layer_choice.currentText()
        if name in ("", _FOLLOW):
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

    @property
    def following_displayed(self) -> bool:
        return self.level_choice.currentText() in ("", _DISPLAYED)

    @property
    def level(self) -> int:
        """The level shown on the map."""
        return self._level

    def _retarget(self, level: int | None = None) -> None:
        if not self._live:
            return
        self._refresh_level_choices()
        layer = self._selected_layer()
        loader = None if layer is None else loader_of(layer)
        if loader is None:
            self._set_target(None, 0)
            self.note.setText(
                "No chunk map: select a layer opened with napari-lazy-zarr."
                if layer is None
                else f"Layer {layer.name!r} is not backed by napari-lazy-zarr: it has no chunks "
                "to show. Select a layer opened with the Lazy Zarr reader."
            )
            self.note.setVisible(True)
            return
        if level is None:
            level = (
                _displayed_level(self.viewer, loader)
                if self.following_displayed
                else int(self.level_choice.currentText())
            )
        self._set_target(loader, min(level, len(loader.levels) - 1))
        self._show_note()

    def _show_note(self) -> None:
        loader = self._loader
        if loader is not None and loader.blocking:
            self.note.setText("⚠ " + _BLOCKING_NOTE)
            self.note.setVisible(True)
        else:
            self.note.setVisible(False)

    def _set_target(self, loader: LayerLoader | None, level: int) -> None:
        if loader is self._loader and level == self._level and loader is not None:
            return
        same_layer = loader is self._loader
        self._loader, self._level = loader, level
        self._set_controller(None if loader is None else loader.controller)
        layer = None if loader is None else loader.layer
        self._layer_name = None if layer is None else layer.name
        self._namer = ChunkNamer(self._layers, self._layer_name)
        self.log.model.set_namer(self._namer)
        if loader is None:
            self._grids = ()
            self._cells = None
            self.chunk_map.set_grid(None)
            self._dirty = True
            return
        mirror = self._mirrors.get(id(loader.controller.cache))
        self._grids = tuple(
            None if mirror is None else mirror.grid(s) for s in loader.controller.sources
        )
        grid = self._grids[level]
        count = math.prod(grid_shape(loader.controller.sources[level]))
        self.chunk_map.set_grid(
            grid,
            loader.controller.cache,
            message=f"level {level} has {count:,} chunks: too many to map "
            f"(at most {MAX_GRID_CHUNKS:,})",
        )
        if not same_layer:
            self._views = {}
            latest = loader.controller.latest
            if latest is not None and mirror is not None:
                latest_grid = mirror.grid(loader.controller.sources[latest.request.level])
                if latest_grid is not None:
                    self._views["view"] = ViewCells.of(latest, latest_grid)
        self._cells = None
        self._choose_view()
        if not same_layer:
            self._counters = None
            # The controls show the inspected layer's loader options and cache.
            self.prefetch.value = loader.prefetch
            self.mode.value = "blocking" if loader.blocking else "progressive"
            self.capacity.value = loader.controller.cache.total_bytes_limit // _MIB
            self.concurrency.value = loader.controller.cache.concurrency
        self._dirty = True

    def _set_controller(self, controller: ViewController | None) -> None:
        if controller is self._controller:
            return
        if self._controller is not None:
            self._links.disconnect(self._controller.view_read, self._on_view_read)
        self._controller = controller
        with self._cells_lock:
            self._arrived = {}
            self._previous = {}
        if controller is not None:
            self._links.connect(controller.view_read, self._on_view_read)

    def _on_view_read(self, result: ViewFrame) -> None:
        """The controller's dispatch thread: a read was answered; keep the latest of its kind."""
        grids, level = self._grids, result.request.level
        grid = grids[level] if level < len(grids) else None
        if grid is None or (result.keys and result.keys[0].source != grid.identity):
            return
        kind = result.request.kind
        with self._cells_lock:
            previous = self._arrived.get(kind) or self._previous.get(kind)
        cells = ViewCells.of(result, grid, previous)  # the per-chunk work, off the main thread
        with self._cells_lock:
            self._arrived[kind] = self._previous[kind] = cells

    def _choose_view(self) -> bool:
        """Pick the read showing the map's level; True if it changed.

        napari reads a multiscale layer twice: its view at the displayed level and,
        for the thumbnail, the whole coarsest level — which is also what it shows
        when the coarsest level is displayed (from its own copy, without reading
        again). When no read of the map's level is known, the coarsest level's
        whole plane stands for it: it has no stand-ins, so each chunk shows its
        data or the fill value.
        """
        grid = self._grids[self._level] if self._level < len(self._grids) else None
        chosen = None
        if grid is not None:
            for kind in ("view", "thumbnail"):
                cells = self._views.get(kind)
                if cells is not None and cells.level == self._level:
                    chosen = cells
                    break
            if chosen is None and self._level == len(self._grids) - 1:
                chosen = ViewCells.whole_plane(grid, self._level, self._views.get("view"))
        if chosen is self._cells or (
            chosen is not None
            and self._cells is not None
            and chosen.request == self._cells.request
            and np.array_equal(chosen.shown, self._cells.shown)
        ):
            return False
        self._cells = chosen
        self.chunk_map.set_view(chosen)
        return True

    # -- refreshing (main thread, 10 Hz while shown) ------------------------------

    @logged_once
    def tick(self) -> None:
        """Apply what arrived since the last refresh; repaint only what changed."""
        if not self._live:
            return
        self.ticks += 1
        changed_grids: set[ChunkGridState] = set()
        loaded_chunks = loaded_bytes = 0
        for mirror in self._mirrors.values():
            applied = mirror.apply()
            changed_grids |= applied.grids
            loaded_chunks += applied.loaded_chunks
            loaded_bytes += applied.loaded_bytes
            if applied.events:
                self.log.model.add(applied.events)
        with self._cells_lock:
            arrived, self._arrived = self._arrived, {}
        self._views.update(arrived)
        loader = self._loader
        if loader is not None and self.following_displayed:
            level = _displayed_level(self.viewer, loader)
            if level != self._level:
                self._set_target(loader, level)
                self._dirty = True
        view_changed = self._choose_view()
        grid = self.chunk_map.grid
        if not view_changed and grid is not None and grid in changed_grids:
            self.chunk_map.refresh()
        shown_changed = view_changed or bool(changed_grids.intersection(self._grids))
        if self._tab == "event log":
            self.log.model.flush()
        active = bool(changed_grids or loaded_chunks or arrived or self._dirty)
        if not active and self._quiet:
            return  # nothing happened: no lock taken, nothing repainted
        cache = self._cache()
        if cache is None:
            self._dirty = False
            return
        self.refreshes += 1
        # O(1), and never waiting for the cache's lock: while a request of thousands of
        # chunks holds it, the previous counters do (the statistics: state machine only).
        counters = cache.counters(wait=False) or self._counters or cache.counters()
        self._counters = counters
        if shown_changed or self._dirty:
            self._show_view(counters)
        resident = {layer.name: self._resident_bytes(layer.name) for layer in self._layers}
        self._quiet = (
            not self._rates.add(time.monotonic(), loaded_chunks, loaded_bytes, counters, resident)
            and not active
        )
        # Only the tab in front is updated (each call into Qt may wait for the GIL).
        if self._tab == "state machine":
            stats = cache.statistics
            self.diagram.set_counts(stats.states, stats.transitions)
            self._show_statistics(stats)
        elif self._tab == "rates" and (
            self._dirty or not active or self.refreshes % _RATES_EVERY == 0
        ):
            self._show_rates()
        self._dirty = False

    def _cache(self) -> ChunkCache | None:
        if self._loader is not None:
            cache: ChunkCache = self._loader.controller.cache
            return cache
        return next((m.cache for m in self._mirrors.values()), None)

    def _resident_bytes(self, layer: str) -> int:
        return sum(m.resident_bytes(layer) for m in self._mirrors.values())

    def _set_text(self, label: QLabel, text: str) -> None:
        if self._texts.get(id(label)) != text:
            self._texts[id(label)] = text
            label.setText(text)

    def _show_view(self, stats: CacheCounters) -> None:
        """The level strip, the plane bars and the summary of the view (when it changed)."""
        cells, grids = self._cells, self._grids
        grid = grids[self._level] if self._level < len(grids) else None
        if cells is None or grid is None:
            self.levels_bar.set_fractions(
                "levels", [None] * len(grids), self._level, [f"L{i}" for i in range(len(grids))]
            )
            self.summary.set_text("" if self._loader is None else "no view read yet")
            self._show_planes([], None)
            return
        coverage = level_coverage(cells.request, grids)
        self.levels_bar.set_fractions(
            "levels",
            coverage,
            cells.level,
            [f"L{i}" for i in range(len(grids))],
            [
                f"level {i}: "
                + ("no grid" if f is None else f"{f:.0%} of the chunks under the view resident")
                + (" (shown)" if i == cells.level else "")
                for i, f in enumerate(coverage)
            ],
        )
        self._show_planes(plane_residency(cells, grid, self._undisplayed_axes()), grid)
        self.summary.set_text(self._summary(cells, grid, stats))

    def _show_planes(self, planes: Sequence[Any], grid: ChunkGridState | None) -> None:
        while len(self.plane_bars) < len(planes):
            bar = QResidencyBar()
            self.plane_bars.append(bar)
            self._planes_box.addWidget(bar)
        for bar, plane in zip(self.plane_bars, planes, strict=False):
            assert grid is not None
            name = self._axis_name(plane.axis)
            extent = grid.source.shape[plane.axis]
            ends = [*plane.starts.tolist()[1:], extent]
            bar.set_fractions(
                name,
                plane.fractions.tolist(),
                plane.current,
                tooltips=[
                    f"{name} {lo}"
                    + (f"–{hi - 1}" if hi - lo > 1 else "")
                    + f": {f:.0%} of the view's chunks resident"
                    for lo, hi, f in zip(plane.starts.tolist(), ends, plane.fractions, strict=True)
                ],
            )
            bar.setVisible(True)
        for bar in self.plane_bars[len(planes) :]:
            bar.setVisible(False)

    def _undisplayed_axes(self) -> list[int]:
        """The store axes napari does not display for the inspected layer (z, t, channel).

        From napari's dims (a read of one plane may still slice the plane's axis).
        """
        loader = self._loader
        layer = None if loader is None else loader.layer
        if loader is None or layer is None:
            return []
        axis_map = loader.controller.axis_map
        offset = self.viewer.dims.ndim - layer.ndim
        shown = {
            axis_map.store_axis(d - offset) for d in self.viewer.dims.displayed if d >= offset
        }
        return [axis for axis in range(axis_map.store_rank) if axis not in shown]

    def _axis_name(self, store_axis: int) -> str:
        loader = self._loader
        if loader is None:
            return f"axis {store_axis}"
        layer_axis = loader.controller.axis_map.layer_axis(store_axis)
        layer = loader.layer
        if layer_axis is None:
            return f"axis {store_axis}"
        labels = getattr(layer, "axis_labels", None)
        if labels is not None and layer_axis < len(labels):
            return str(labels[layer_axis])
        return f"axis {store_axis}"

    def _summary(self, cells: ViewCells, grid: ChunkGridState, stats: CacheCounters) -> str:
        shown = cells.shown_now(grid)
        total = int(shown.size)
        counts = np.bincount(shown.ravel(), minlength=len(Shown))
        parts = [f"{counts[Shown.FINAL]:,} final"]
        if counts[Shown.PROVISIONAL]:
            levels = stand_in_levels(cells, self._grids)
            found = sorted({int(v) for v in np.unique(levels[shown == Shown.PROVISIONAL])} - {-1})
            source = (
                f" from level {found[0]}"
                if len(found) == 1
                else f" from levels {', '.join(map(str, found))}"
                if found
                else ""
            )
            parts.append(f"{counts[Shown.PROVISIONAL]:,} provisional{source}")
        if counts[Shown.FILL] + counts[Shown.FAILED]:
            parts.append(f"{counts[Shown.FILL] + counts[Shown.FAILED]:,} fill value")
        text = f"View at level {cells.level}: {total:,} chunks — " + ", ".join(parts) + "."
        reasons = self._reasons(cells, grid, shown, stats)
        if reasons:
            text += "\nNot final: " + ", ".join(f"{n:,} {why}" for why, n in reasons.items()) + "."
        return text

    def _reasons(
        self,
        cells: ViewCells,
        grid: ChunkGridState,
        shown: np.ndarray[Any, Any],
        stats: CacheCounters,
    ) -> dict[str, int]:
        """How many of the view's chunks that are not final wait for each reason."""
        waiting = shown != Shown.FINAL
        if not waiting.any():
            return {}
        codes = grid.codes[cells.block]
        by_state = np.bincount(codes[waiting], minlength=len(STATE_CODES))
        counts: dict[str, int] = {}
        queued = int(by_state[STATE_CODES[ChunkState.QUEUED]])
        if queued and self._loader is not None and (stats.parked or stats.deferred):
            # Parked and deferred chunks are QUEUED too: told apart by the cache's sets.
            is_queued = waiting & (codes == STATE_CODES[ChunkState.QUEUED])
            for keys, reason in zip(
                self._loader.controller.cache.parked_and_deferred(),
                ("parked", "deferred"),
                strict=True,
            ):
                n = int(np.count_nonzero(_mask_of(keys, grid, cells) & is_queued))
                if n:
                    counts[reason] = n
                    queued -= n
        evicted = "not admitted" if stats.pinned_bytes >= stats.total_bytes_limit else "evicted"
        for reason, n in (
            ("queued", queued),
            ("in flight", by_state[STATE_CODES[ChunkState.LOADING]]),
            ("failed", by_state[STATE_CODES[ChunkState.FAILED]]),
            (evicted, by_state[STATE_CODES[ChunkState.EVICTED]]),
            ("not requested", by_state[STATE_CODES[ChunkState.NEW]]),
        ):
            if n:
                counts[reason] = int(n)
        order = list(REASON_WORDS)
        return {REASON_WORDS[k]: counts[k] for k in sorted(counts, key=order.index)}

    def _show_statistics(self, stats: CacheStatistics) -> None:
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

    def _show_rates(self) -> None:
        rows: list[Series] = []
        for name, values in self._rates.series.items():
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
            color = _SPARK_COLORS.get(name, (160, 120, 200))
            rows.append((name, tuple(values), text, color))
        self.rates_chart.set_series(rows)

    # -- hover -------------------------------------------------------------------

    def _explain_chunk(self, coords: tuple[int, ...]) -> str:
        grid, loader = self.chunk_map.grid, self._loader
        if grid is None or loader is None:
            return ""
        cache = loader.controller.cache
        key = grid.key_at(coords)
        status = cache.status(key)
        stats = cache.counters()
        shown, stand_in = Shown.OUTSIDE, None
        cells = self._cells
        if cells is not None and all(
            a <= c < b for c, a, b in zip(coords, cells.start, cells.stop, strict=True)
        ):
            relative = tuple(c - a for c, a in zip(coords, cells.start, strict=True))
            shown = Shown(int(cells.shown_now(grid)[relative]))
            if shown is Shown.PROVISIONAL:
                stand_in = int(stand_in_levels(cells, self._grids)[relative])
        history = [e for e in cache.events() if e.key == key][-4:]
        extent = " · ".join(
            f"{self._axis_name(axis)} {lo}:{hi}"
            for axis, (lo, hi) in enumerate(zip(key.inclusive_min, key.exclusive_max, strict=True))
        )
        return describe_chunk(
            self._namer(key), extent, status, stats, shown, stand_in, history, time.monotonic()
        )

    # -- controls --------------------------------------------------------------

    # The cache controls write to napari's Preferences too, so a choice outlives the session.
    def _apply_capacity(self, value: int) -> None:
        cache = self._cache()
        if cache is not None and value * _MIB != cache.total_bytes_limit:
            write_preference("total_bytes_limit_mib", max(1, value))
            cache.total_bytes_limit = value * _MIB
            self._dirty = True

    def _apply_concurrency(self, value: int) -> None:
        cache = self._cache()
        if cache is not None and value != cache.concurrency:
            write_preference("concurrency", value)
            cache.concurrency = value
            self._dirty = True

    def _apply_loader_options(self, _: Any = None) -> None:
        blocking = self.mode.value == "blocking"
        self.blocking_note.setVisible(blocking)
        for layer in self._plugin_layers():
            loader = loader_of(layer)
            assert loader is not None
            loader.prefetch = bool(self.prefetch.value)
            loader.blocking = blocking
        self._show_note()

    def retry_failed(self, _: Any = None) -> int:
        cache = self._cache()
        return 0 if cache is None else cache.retry_failed()

    def evict_unpinned(self, _: Any = None) -> int:
        cache = self._cache()
        return 0 if cache is None else cache.evict_unpinned()


REASON_WORDS: Final = {
    "queued": "queued",
    "in flight": "in flight",
    "parked": "parked (view moved on)",
    "deferred": "waiting for finer chunks",
    "failed": "failed",
    "evicted": "evicted under the budget",
    "not admitted": "not admitted (pinned bytes exceed the budget)",
    "not requested": "not requested yet",
}
"""How the summary words each reason (the keys of `REASONS`)."""


def _mask_of(
    keys: Any, grid: ChunkGridState, cells: ViewCells
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The chunks of the view's block among `keys` (keys of other sources ignored)."""
    mask = np.zeros(cells.shown.shape, dtype=bool)
    mine = [k for k in keys if k.source == grid.identity]
    if not mine:
        return mask
    flat = np.fromiter((grid.flat_of(k) for k in mine), dtype=np.int64, count=len(mine))
    coords = np.unravel_index(flat, grid.shape)
    relative = [c - s for c, s in zip(coords, cells.start, strict=True)]
    inside = np.ones(len(flat), dtype=bool)
    for axis, r in enumerate(relative):
        inside &= (r >= 0) & (r < mask.shape[axis])
    mask[tuple(r[inside] for r in relative)] = True
    return mask


def _on_destroyed(links: _Subscriptions, widget: weakref.ref[ChunkInspector], *_: Any) -> None:
    """The widget's C++ object is gone: undo its connections, free its Python side.

    napari's dock stores itself on the docked widget (`widget._parent`) while
    holding the widget: a reference cycle only the garbage collector would
    break, keeping the widget's Python side (and what it connected) alive
    until then. Dropping napari's back-reference lets it go at once.
    """
    links.clear()
    inspector = widget()
    if inspector is not None:
        vars(inspector).pop("_parent", None)


def _displayed_level(viewer: Any, loader: LayerLoader) -> int:
    """The level napari displays for the loader's layer (main thread).

    A locked level if set; in 3D the coarsest (napari's rule for multiscale
    volumes); in 2D the level napari chose for the zoom (`data_level`).
    """
    layer, last = loader.layer, len(loader.levels) - 1
    if layer is None or not getattr(layer, "multiscale", False):
        return 0
    locked = getattr(layer, "locked_data_level", None)
    if locked is not None:
        return int(locked)
    if viewer.dims.ndisplay == 3:
        return last
    return min(int(layer.data_level), last)


def _hex(color: tuple[int, int, int] | None) -> str:
    r, g, b = color or (0, 0, 0)
    return f"#{r:02x}{g:02x}{b:02x}"
