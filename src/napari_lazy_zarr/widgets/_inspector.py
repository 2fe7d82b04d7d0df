"""`ChunkInspector`: the dock widget explaining, live, what each chunk of the view shows and why.

Threading: the cache's events arrive on worker threads and the controller's
`view_read` on its dispatch thread; their slots do the per-chunk work there
(`StateMirror.on_events`, `ViewCells.of`) and only hand results over. A 10 Hz
timer on the main thread applies what arrived with a few NumPy operations and
repaints only what changed; a refresh in which nothing changed touches neither
the cache nor the screen.

Lifecycle (`QLiveWhileShown`): napari never calls `close()` on a docked
widget. The inspector is *live* — timer running, connected to the viewer, the
caches and the inspected layer's controller — only while it is shown. Hiding
it stops the timer and disconnects every signal; showing it again re-reads
the cache once. Removing the dock deletes it.

The parts: the header (`_target_choice`), the chunk map and its legend
(`_chunk_map`), the levels and planes bars (`_residency_bar`), the summary
(`_summary`), and the tabs: rates (`_rates`), state machine (`_machine_tab`),
event log (`_event_log`), controls (`_controls`). What arrives from other
threads is kept by `StateMirror` (`_mirror`) and `ViewReads` (`_view_reads`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from qtpy.QtCore import QTimer
from qtpy.QtWidgets import QLabel, QTabWidget, QVBoxLayout, QWidget

from napari_lazy_zarr._layer_data import LayerLoader, loader_of
from napari_lazy_zarr.core.keys import grid_shape
from napari_lazy_zarr.widgets._chunk_map import QChunkMap, marks_legend, state_legend
from napari_lazy_zarr.widgets._controls import BLOCKING_NOTE, QCacheControls
from napari_lazy_zarr.widgets._displayed import axis_name, displayed_level, undisplayed_axes
from napari_lazy_zarr.widgets._event_log import QEventLog
from napari_lazy_zarr.widgets._explain import describe_chunk
from napari_lazy_zarr.widgets._grid_state import ChunkGridState, Shown
from napari_lazy_zarr.widgets._guarded import logged_once
from napari_lazy_zarr.widgets._lifecycle import QLiveWhileShown
from napari_lazy_zarr.widgets._machine_tab import QMachineTab
from napari_lazy_zarr.widgets._mirror import MAX_GRID_CHUNKS, LayerSources, StateMirror
from napari_lazy_zarr.widgets._names import ChunkNamer
from napari_lazy_zarr.widgets._rates import RateHistory, sparkline_rows
from napari_lazy_zarr.widgets._residency_bar import PlaneBars, QResidencyBar
from napari_lazy_zarr.widgets._sparkline import QSparklines
from napari_lazy_zarr.widgets._summary import level_tooltips, view_summary
from napari_lazy_zarr.widgets._target_choice import DISPLAYED, FOLLOW, QTargetChoice
from napari_lazy_zarr.widgets._text_strip import QTextStrip
from napari_lazy_zarr.widgets._view_cells import (
    ViewCells,
    level_coverage,
    plane_residency,
    stand_in_levels,
)
from napari_lazy_zarr.widgets._view_reads import ViewReads

if TYPE_CHECKING:
    from napari_lazy_zarr.core import ChunkCache
    from napari_lazy_zarr.core.cache import CacheCounters
    from napari_lazy_zarr.core.viewport import ViewController, ViewFrame

__all__ = ["ChunkInspector"]

REFRESH_MS: Final = 100
"""The refresh period: 10 Hz."""
LOG_CAPACITY: Final = 2000
"""Events the log keeps."""
_RATES_EVERY: Final = 5  # the rates chart is redrawn every 5th refresh (2 Hz) at most


class ChunkInspector(QLiveWhileShown):
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
        self._mirrors: dict[int, StateMirror] = {}
        self._layers: list[LayerSources] = []
        self._loader: LayerLoader | None = None
        self._layer_name: str | None = None
        self._level = 0
        self._grids: tuple[ChunkGridState | None, ...] = ()
        self._controller: ViewController | None = None
        self._cells: ViewCells | None = None
        self._reads = ViewReads()
        self._namer = ChunkNamer([], None)
        self._rates = RateHistory()
        self._quiet = False
        self._dirty = True
        self._counters: CacheCounters | None = None
        self.ticks = 0
        self.refreshes = 0

        self.header = QTargetChoice()
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
        self.planes = PlaneBars()
        self.summary = QTextStrip(lines=3)
        self.machine = QMachineTab()
        self.diagram = self.machine.diagram
        self.log = QEventLog(LOG_CAPACITY)
        self.rates_chart = QSparklines(RateHistory().length)
        self._tab = "rates"  # the tab in front (known without asking Qt)
        self.cache_controls = QCacheControls(
            self._cache,
            self._plugin_layers,
            limits_applied=self._on_limits_applied,
            options_applied=self._show_note,
        )
        # The controls, by name (tests and scripts set them as a user would).
        self.controls = self.cache_controls.controls
        self.capacity = self.cache_controls.capacity
        self.concurrency = self.cache_controls.concurrency
        self.prefetch = self.cache_controls.prefetch
        self.mode = self.cache_controls.mode
        self.retry_button = self.cache_controls.retry_button
        self.evict_button = self.cache_controls.evict_button
        self.blocking_note = self.cache_controls.blocking_note
        self._layout()

        self.header.layer_choice.currentTextChanged.connect(self._on_choice)
        self.header.level_choice.currentTextChanged.connect(self._on_choice)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.tick)

    # -- construction --------------------------------------------------------

    def _layout(self) -> None:
        self.marks_legend = marks_legend()
        rates = QWidget()
        rates_layout = QVBoxLayout(rates)
        rates_layout.addWidget(self.rates_chart)
        rates_layout.addStretch(1)
        tabs = QTabWidget()
        tabs.addTab(rates, "rates")
        tabs.addTab(self.machine, "state machine")
        tabs.addTab(self.log, "event log")
        tabs.addTab(self.cache_controls, "controls")
        tabs.currentChanged.connect(self._on_tab)
        self.tabs = tabs
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.note)
        layout.addWidget(self.levels_bar)
        layout.addWidget(self.chunk_map, 4)
        layout.addLayout(self.planes.box)
        layout.addLayout(state_legend())
        layout.addWidget(self.marks_legend)
        layout.addWidget(self.summary)
        layout.addWidget(tabs, 3)

    # -- lifecycle: live only while shown ----------------------------------------

    def _start(self) -> None:
        """Shown: follow the viewer's layers and their caches, the controls; refresh at once."""
        layers = self.viewer.layers
        self._links.connect(layers.events.inserted, self._on_layers_changed)
        self._links.connect(layers.events.removed, self._on_layers_changed)
        self._links.connect(layers.selection.events.active, self._on_active)
        self.cache_controls.connect(self._links.connect)
        self._links.connect(self.retry_button.changed, self.retry_failed)
        self._links.connect(self.evict_button.changed, self.evict_unpinned)
        self._sync_layers()
        self._timer.start()
        self._dirty = True
        self.tick()

    def _stop(self) -> None:
        """Hidden: stop refreshing, disconnect everything, let go of the caches' mirrors."""
        self._timer.stop()
        self._links.clear()
        for mirror in self._mirrors.values():
            mirror.close()
        self._mirrors.clear()
        self._controller = None
        self._loader = None
        self._grids = ()
        self._cells = None
        self._reads.views = {}
        self._reads.drop_arrivals()
        self.chunk_map.set_grid(None)

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
        self.header.set_layers([layer.name for layer in self.viewer.layers])
        self._loader = None  # grids may have changed: look again
        self._retarget()

    def _on_active(self, event: Any = None) -> None:
        if self.header.following_active:
            self._retarget()

    def _on_choice(self, _: str) -> None:
        self._retarget()

    def _on_tab(self, index: int) -> None:
        self._tab = self.tabs.tabText(index)
        self._dirty = True  # the tab now in front shows the latest at the next refresh
        if self._tab == "event log":
            self.log.model.flush()

    def pin(self, layer_name: str | None, level: int | None = None) -> None:
        """Show `layer_name` (None: the active layer) at `level` (None: the displayed one).

        What choosing in the header's two boxes does, in one call: a hook for
        tests, scripts and benchmarks (part of the API, as superqt's `flush()` is).
        """
        self.header.layer_choice.setCurrentText(FOLLOW if layer_name is None else layer_name)
        self._refresh_level_choices()
        self.header.level_choice.setCurrentText(DISPLAYED if level is None else str(level))
        self._retarget()

    def _refresh_level_choices(self) -> None:
        layer = self.header.selected_layer(self.viewer)
        loader = None if layer is None else loader_of(layer)
        self.header.set_levels(0 if loader is None else len(loader.levels))

    @property
    def plane_bars(self) -> list[QResidencyBar]:
        """The bars of the axes the view does not display (hidden ones included)."""
        return self.planes.bars

    @property
    def level(self) -> int:
        """The level shown on the map."""
        return self._level

    def _retarget(self, level: int | None = None) -> None:
        if not self._live:
            return
        self._refresh_level_choices()
        layer = self.header.selected_layer(self.viewer)
        loader = None if layer is None else loader_of(layer)
        if loader is None:
            self._set_target(None, 0)
            self.note.setText(
                "No chunk map: select a layer opened with napari-lazy-zarr."
                if layer is None
                else f"Layer {layer.name!r} is not backed by napari-lazy-zarr: it has no chunks "
                "to show. Select a layer opened with the napari-lazy-zarr reader."
            )
            self.note.setVisible(True)
            return
        if level is None:
            level = (
                displayed_level(self.viewer, loader)
                if self.header.following_displayed
                else self.header.chosen_level
            )
        self._set_target(loader, min(level, len(loader.levels) - 1))
        self._show_note()

    def _show_note(self) -> None:
        loader = self._loader
        if loader is not None and loader.blocking:
            self.note.setText("⚠ " + BLOCKING_NOTE)
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
            self._reads.views = {}
            latest = loader.controller.latest
            if latest is not None and mirror is not None:
                latest_grid = mirror.grid(loader.controller.sources[latest.request.level])
                if latest_grid is not None:
                    self._reads.views["view"] = ViewCells.of(latest, latest_grid)
        self._cells = None
        self._choose_view()
        if not same_layer:
            self._counters = None
            # The controls show the inspected layer's loader options and cache.
            self.cache_controls.show_loader(loader)
        self._dirty = True

    def _set_controller(self, controller: ViewController | None) -> None:
        if controller is self._controller:
            return
        if self._controller is not None:
            self._links.disconnect(self._controller.view_read, self._on_view_read)
        self._controller = controller
        self._reads.drop_arrivals()
        if controller is not None:
            self._links.connect(controller.view_read, self._on_view_read)

    def _on_view_read(self, result: ViewFrame) -> None:
        """The controller's dispatch thread: a read was answered; keep the latest of its kind."""
        self._reads.arrive(result, self._grids)

    def _choose_view(self) -> bool:
        """Pick the read showing the map's level (`ViewReads.choose`); True if it changed."""
        chosen = self._reads.choose(self._level, self._grids)
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
        arrived = self._reads.take()
        loader = self._loader
        if loader is not None and self.header.following_displayed:
            level = displayed_level(self.viewer, loader)
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
        # The Preferences (or a script) may have changed the cache's capacity or loaders:
        # two attribute reads, no lock; the controls repaint only when they did.
        self.cache_controls.follow_cache()
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
            self.machine.show_statistics(cache.statistics)
        elif self._tab == "rates" and (
            self._dirty or not active or self.refreshes % _RATES_EVERY == 0
        ):
            self.rates_chart.set_series(sparkline_rows(self._rates))
        self._dirty = False

    def _cache(self) -> ChunkCache | None:
        if self._loader is not None:
            cache: ChunkCache = self._loader.controller.cache
            return cache
        return next((m.cache for m in self._mirrors.values()), None)

    def _resident_bytes(self, layer: str) -> int:
        return sum(m.resident_bytes(layer) for m in self._mirrors.values())

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
            level_tooltips(coverage, cells.level),
        )
        self._show_planes(plane_residency(cells, grid, self._undisplayed_axes()), grid)
        parked_and_deferred = (
            None if self._loader is None else self._loader.controller.cache.parked_and_deferred
        )
        self.summary.set_text(view_summary(cells, grid, grids, stats, parked_and_deferred))

    def _show_planes(self, planes: list[Any], grid: ChunkGridState | None) -> None:
        self.planes.show(planes, grid, self._axis_name)

    def _undisplayed_axes(self) -> list[int]:
        return undisplayed_axes(self.viewer, self._loader)

    def _axis_name(self, store_axis: int) -> str:
        return axis_name(self._loader, store_axis)

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

    def _on_limits_applied(self) -> None:
        self._dirty = True

    def retry_failed(self, _: Any = None) -> int:
        cache = self._cache()
        return 0 if cache is None else cache.retry_failed()

    def evict_unpinned(self, _: Any = None) -> int:
        cache = self._cache()
        return 0 if cache is None else cache.evict_unpinned()
