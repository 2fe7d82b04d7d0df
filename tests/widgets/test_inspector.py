"""The dock widget in a real viewer: right level, what each chunk shows and why, leak-free.

Loads are held at a gate (`ZarrChunkSource.read_chunk` waits until its level is
released), so each state the inspector explains is reached deterministically.
"""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from qtpy.compat import isalive
from qtpy.QtCore import Qt
from qtpy.QtWidgets import QApplication

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer
from napari_lazy_zarr.core import ArraySource, ChunkRef, ChunkState
from napari_lazy_zarr.core.sample import write_sample_ome_zarr
from napari_lazy_zarr.core.sources.zarr import LOCAL_BATCH, ZarrChunkSource
from napari_lazy_zarr.widgets import ChunkInspector
from napari_lazy_zarr.widgets._chunk_map import BACKGROUND
from napari_lazy_zarr.widgets._grid_state import MARKER_COLORS, STATE_COLORS, Shown
from tests.napari.conftest import write_ome_pyramid
from tests.widgets.conftest import connections_to_ours, deleted

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from pytestqt.qtbot import QtBot

CHUNK = 256


@pytest.fixture
def cells_store(tmp_path: Path) -> Path:
    path = tmp_path / "cells.ome.zarr"
    write_sample_ome_zarr(path, size=2048, chunk=CHUNK, smallest=512)  # levels 8², 4², 2² chunks
    return path


class Gate:
    """Holds chunk reads of chosen levels until released (worker threads wait at it)."""

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self.failing: set[tuple[str, tuple[int, ...]]] = set()

    def _event(self, level: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(level, threading.Event())

    def hold(self, *levels: int) -> None:
        for level in levels:
            self._event(str(level)).clear()
            self._held.add(str(level))

    def release(self, *levels: int) -> None:
        for level in levels:
            self._event(str(level)).set()

    def release_all(self) -> None:
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()

    def pass_through(self, level: str, coords: tuple[int, ...]) -> None:
        """Called by a worker before reading a chunk of `level`."""
        if level in self._held:
            assert self._event(level).wait(timeout=60), "a held read was never released"
        if (level, coords) in self.failing:
            raise OSError(f"injected fault at {coords}")


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    """Chunk reads pass the gate; whatever is held is released after the test."""
    gate = Gate()
    original = ZarrChunkSource.read_chunk

    def gated(self: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
        gate.pass_through(str(self.identity).rsplit("/", 1)[-1], tuple(coords))
        return original(self, coords)

    monkeypatch.setattr(ZarrChunkSource, "read_chunk", gated)
    yield gate
    gate.release_all()


def _open(
    make_napari_viewer: Callable[..., Any], path: Path, prefetch: bool = False
) -> tuple[Any, Any, Any, ChunkInspector]:
    """A shown viewer with the store opened and the inspector docked the way napari does it."""
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(1400, 900)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    loader.prefetch = prefetch
    _, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    assert isinstance(inspector, ChunkInspector)
    QApplication.processEvents()  # the dock is shown: the inspector goes live
    assert inspector.live
    return viewer, layer, loader, inspector


def _draw(viewer: Any) -> None:
    viewer.window._qt_viewer.canvas.on_draw(None)


def _settle(qtbot: QtBot, viewer: Any, loader: Any, inspector: ChunkInspector) -> None:
    _draw(viewer)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    ticks = inspector.ticks
    qtbot.waitUntil(lambda: inspector.ticks >= ticks + 2, timeout=5_000)  # applied by the timer


def _viewport_chunks(layer: Any) -> set[tuple[int, int]]:
    (y0, x0), (y1, x1) = layer.corner_pixels
    return {
        (cy, cx)
        for cy in range(int(y0) // CHUNK, (int(y1) - 1) // CHUNK + 1)
        for cx in range(int(x0) // CHUNK, (int(x1) - 1) // CHUNK + 1)
    }


def _marks(inspector: ChunkInspector) -> dict[tuple[int, int], Shown]:
    """What the map marks on each chunk of the view, as a user sees the centre of each cell."""
    chunk_map = inspector.chunk_map
    colors = {MARKER_COLORS[s]: s for s in (Shown.PROVISIONAL, Shown.FILL)}
    return {
        cell: colors.get(chunk_map.mark_color(*cell), Shown.FINAL)  # type: ignore[arg-type]
        for cell in chunk_map.touched
    }


def test_shows_the_level_napari_displays_at_every_zoom(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, layer, loader, inspector = _open(make_napari_viewer, cells_store)
    visited = []
    for zoom in (4.0, 1.2, 0.6, 0.05, 4.0):  # finest, ..., coarsest, finest again
        viewer.scene.camera.zoom = zoom
        viewer.scene.camera.center = (0, 1000 * 0.25, 1000 * 0.25)
        _settle(qtbot, viewer, loader, inspector)
        level = layer.data_level
        visited.append(level)
        qtbot.waitUntil(lambda level=level: inspector.level == level, timeout=5_000)
        grid = inspector.chunk_map.grid
        assert grid is not None
        assert grid.source is layer.data[level].array.source
        assert inspector.levels_bar.current == level
        assert f"View at level {level}:" in inspector.summary.text()
        if level == 0:
            assert inspector.chunk_map.touched == _viewport_chunks(layer)
        if level == 2:
            # napari shows the coarsest level from its own copy (no new read): the
            # inspector shows that level's whole plane, the read napari made of it.
            assert inspector.chunk_map.touched == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert {0, 2} <= set(visited)  # the coarsest level was displayed: the case
    assert inspector.levels_bar.labels == ("L0", "L1", "L2")


def test_each_chunk_of_the_view_shows_what_it_displays_and_why(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path, gate: Gate
) -> None:
    gate.hold(0, 1, 2)  # nothing loads yet
    viewer, layer, loader, inspector = _open(make_napari_viewer, cells_store)
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, 1000 * 0.25, 1000 * 0.25)
    _draw(viewer)
    qtbot.waitUntil(
        lambda: inspector.level == 0 and bool(inspector.chunk_map.touched), timeout=10_000
    )
    view = _viewport_chunks(layer)
    # Nothing is resident at any level: every chunk of the view shows the fill value.
    qtbot.waitUntil(lambda: set(_marks(inspector).values()) == {Shown.FILL}, timeout=10_000)
    assert set(_marks(inspector)) == view
    summary = inspector.summary.text()
    assert f"{len(view)} chunks" in summary
    assert f"{len(view)} fill value" in summary
    assert f"Not final: {len(view)} queued." in summary  # the workers wait on level 2 first
    grid = inspector.chunk_map.grid
    assert grid is not None
    texts = {cell: inspector.chunk_map.describe(cell) for cell in view}
    assert all(texts[c].startswith("L0 (") for c in view)  # named relative to the store
    assert all("shown: the fill value (nothing resident" in text for text in texts.values())
    unplaced = [text for text in texts.values() if not re.search(r"position \d+", text)]
    assert not unplaced, unplaced[:3]  # (seen once under load, PyQt5: kept for diagnosis)
    positions = sorted(
        int(re.search(r"position (\d+)", text)[1])  # type: ignore[index]
        for text in texts.values()
    )
    # Each chunk has its own place in line, behind the coarsest level's chunks.
    assert positions == list(range(positions[0], positions[0] + len(view)))
    assert positions[0] > 1

    # The coarsest level lands: the view shows it, upsampled, as provisional stand-ins,
    # and the workers move on to the view's own chunks.
    gate.release(2)
    qtbot.waitUntil(lambda: set(_marks(inspector).values()) == {Shown.PROVISIONAL}, timeout=20_000)
    assert "provisional from level 2" in inspector.summary.text()
    assert inspector.levels_bar.fractions[2] == 1.0
    assert inspector.levels_bar.fractions[0] == 0.0
    source = layer.data[0].array.source

    def batches_loading() -> int:  # each worker holds one run of adjacent chunks (a batch)
        return len({source.batch_key(c) for c in view if grid.state_at(c) is ChunkState.LOADING})

    qtbot.waitUntil(lambda: batches_loading() == 2, timeout=10_000)
    texts = {cell: inspector.chunk_map.describe(cell) for cell in view}
    loading = [c for c in view if grid.state_at(c) is ChunkState.LOADING]
    assert 2 <= len(loading) <= 2 * LOCAL_BATCH
    queued = [c for c in view if grid.state_at(c) is ChunkState.QUEUED]
    for cell in loading:
        assert "loading on a worker for" in texts[cell]
    for cell in view:
        assert "shown: provisional, level 2 upsampled" in texts[cell]
    positions = sorted(
        int(re.search(r"position (\d+)", texts[c])[1])  # type: ignore[index]
        for c in queued
    )
    assert positions == list(range(1, len(queued) + 1))
    qtbot.waitUntil(lambda: f"{len(loading)} in flight" in inspector.summary.text(), timeout=5_000)

    # One chunk fails: it shows the fill value (never a stand-in), and says what to do.
    failing = sorted(view)[0]
    gate.failing.add(("0", failing))
    gate.release(0, 1)
    _settle(qtbot, viewer, loader, inspector)
    qtbot.waitUntil(lambda: _marks(inspector).get(failing) == Shown.FILL, timeout=10_000)
    assert {s for c, s in _marks(inspector).items() if c != failing} == {Shown.FINAL}
    assert grid.state_at(failing) is ChunkState.FAILED
    assert inspector.chunk_map.cell_color(*failing) == STATE_COLORS[ChunkState.FAILED]
    text = inspector.chunk_map.describe(failing)
    assert "injected fault" in text
    assert "after 1 attempt" in text
    assert "next: the stored data cannot be read as it is" in text
    assert "click to retry" in text
    assert "1 failed" in inspector.summary.text()
    # Retried, it loads.
    gate.failing.clear()
    assert inspector.chunk_map.retry(failing)
    qtbot.waitUntil(lambda: grid.state_at(failing) is ChunkState.READY, timeout=10_000)
    _settle(qtbot, viewer, loader, inspector)
    assert set(_marks(inspector).values()) == {Shown.FINAL}
    assert "Not final" not in inspector.summary.text()


def test_parked_evicted_and_not_admitted_chunks_are_explained(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path, gate: Gate
) -> None:
    viewer, layer, loader, inspector = _open(make_napari_viewer, cells_store)
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, 1000 * 0.25, 1000 * 0.25)
    _settle(qtbot, viewer, loader, inspector)
    first_view = _viewport_chunks(layer)
    grid = inspector.chunk_map.grid
    assert grid is not None
    # Pan while level 0 is held: the first view's chunks are READY; the new view's wait.
    gate.hold(0)
    viewer.scene.camera.center = (0, 1000 * 0.25, 1800 * 0.25)
    _draw(viewer)
    second_view = _viewport_chunks(layer)
    qtbot.waitUntil(lambda: inspector.chunk_map.touched == second_view, timeout=10_000)
    waiting = sorted(c for c in second_view - first_view if grid.state_at(c) is ChunkState.QUEUED)
    assert waiting
    # ...and pan back: the chunks queued for the view in between are for a view left behind.
    viewer.scene.camera.center = (0, 1000 * 0.25, 1000 * 0.25)
    _draw(viewer)
    qtbot.waitUntil(lambda: inspector.chunk_map.touched == first_view, timeout=10_000)
    left = [c for c in waiting if c not in first_view]
    assert left
    assert "queued for a view you left" in inspector.chunk_map.describe(left[0]) or (
        "parked" in inspector.chunk_map.describe(left[0])
    )
    gate.release(0)
    _settle(qtbot, viewer, loader, inspector)
    # Evicted under the budget: the view's chunks stay (pinned), the others go.
    assert inspector.evict_unpinned() > 0
    gone = next(
        c
        for c in sorted(second_view - first_view)
        if loader.controller.cache.state(grid.key_at(c)) is ChunkState.EVICTED
    )
    qtbot.waitUntil(lambda: grid.state_at(gone) is ChunkState.EVICTED, timeout=5_000)
    assert inspector.chunk_map.cell_color(*gone) == STATE_COLORS[ChunkState.EVICTED]
    assert "evicted: the least recently used chunk" in inspector.chunk_map.describe(gone)
    # A budget smaller than what the view pins: a chunk no view pins is not admitted.
    inspector.capacity.value = 0
    assert loader.controller.cache.total_bytes_limit == 0
    text = inspector.chunk_map.describe(gone)
    assert "not admitted: chunks pinned by views take" in text


def test_new_chunks_show_the_grid_extent_against_the_background(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path, gate: Gate
) -> None:
    gate.hold(0, 1, 2)
    _viewer, layer, _loader, inspector = _open(make_napari_viewer, cells_store)
    inspector.pin(layer.name, 0)  # level 0: nothing of it requested, every chunk NEW
    qtbot.waitUntil(lambda: inspector.chunk_map.grid is not None, timeout=5_000)
    chunk_map = inspector.chunk_map
    assert chunk_map.cell_color(0, 0) == STATE_COLORS[ChunkState.NEW]
    new = np.array(STATE_COLORS[ChunkState.NEW])
    background = np.array(BACKGROUND.getRgb()[:3])
    assert np.abs(new - background).sum() >= 150  # not grey on grey
    # The grid's extent as a user sees it: the non-background pixels form an 8 x 8 grid's square.
    image = chunk_map.grab().toImage()
    pixels = np.array(
        [
            [image.pixelColor(x, y).getRgb()[:3] for x in range(image.width())]
            for y in range(0, image.height(), 4)
        ]
    )
    rows, cols = np.nonzero(np.abs(pixels - background).sum(axis=-1) > 60)
    side = chunk_map._side() * 8
    assert abs((cols.max() - cols.min()) - side) <= 3
    assert abs((rows.max() - rows.min()) * 4 - side) <= 6


def test_event_log_names_chunks_by_level_and_keeps_the_reason_on_screen(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, _layer, loader, inspector = _open(make_napari_viewer, cells_store)
    viewer.scene.camera.zoom = 4.0
    _settle(qtbot, viewer, loader, inspector)
    inspector.tabs.setCurrentWidget(inspector.log)
    qtbot.waitUntil(lambda: len(inspector.log.visible_rows()) > 0, timeout=5_000)
    rows = inspector.log.visible_rows()
    assert all(re.fullmatch(r"L[0-2] \(\d+, \d+\)", chunk) for _, chunk, _, _ in rows), rows[:3]
    assert any(reason == "loaded" for *_, reason in rows)
    # In the dock as napari sizes it, the reason column starts on screen with room to read.
    viewport = inspector.log.table.viewport()
    assert viewport is not None
    left, _right = inspector.log.column_spans()[-1]
    assert left < viewport.width() - 60, (inspector.log.column_spans(), viewport.width())
    # The full key is one hover away.
    shown = inspector.log.table.model()
    assert shown is not None
    tooltip = shown.data(shown.index(0, 1), Qt.ItemDataRole.ToolTipRole)
    assert "cells.ome.zarr/" in str(tooltip)


def test_rates_and_residency_along_the_axes_not_displayed(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    data = (np.arange(6 * 512 * 512, dtype=np.uint16) % 4001).reshape(6, 512, 512)
    store = tmp_path / "stack.ome.zarr"
    write_ome_pyramid(
        store,
        data,
        levels=2,
        chunks=(1, 128, 128),
        axes=[
            {"name": "z", "type": "space"},
            {"name": "y", "type": "space"},
            {"name": "x", "type": "space"},
        ],
        zarr_format=3,
    )
    viewer, layer, loader, inspector = _open(make_napari_viewer, store, prefetch=True)
    viewer.dims.set_current_step(0, 3)
    viewer.scene.camera.zoom = 4.0
    _settle(qtbot, viewer, loader, inspector)
    qtbot.waitUntil(
        lambda: bool(inspector.plane_bars) and inspector.plane_bars[0].isVisible(), timeout=5_000
    )
    bar = inspector.plane_bars[0]
    assert bar.title == "z"
    assert bar.current == 3
    # Only the view's plane stays once everything no view pins is evicted...
    inspector.evict_unpinned()
    qtbot.waitUntil(lambda: bar.fractions == (0.0, 0.0, 0.0, 1.0, 0.0, 0.0), timeout=10_000)
    # ...then one step up: that plane is read, the next one prefetched (two steps within
    # a second are a walk: the look-ahead may also load planes past the end, wrapped).
    viewer.dims.set_current_step(0, 4)
    _settle(qtbot, viewer, loader, inspector)
    qtbot.waitUntil(lambda: bar.fractions[3:] == (1.0, 1.0, 1.0), timeout=10_000)
    assert bar.current == 4
    assert "z 5: 100% of the view's chunks resident" in bar.tooltips[5]
    # Rates: chunks were loaded, so the sparklines hold a sample above zero; per layer too.
    chart = inspector.rates_chart
    assert max(chart.series("chunks/s")) > 0
    assert max(chart.series("loaded MiB/s")) > 0
    # The look-ahead may still be landing planes: the chart catches up with the cache.
    qtbot.waitUntil(
        lambda: (
            chart.series(f"resident: {layer.name}")[-1]
            == pytest.approx(
                loader.controller.cache.statistics.resident_bytes / (1 << 20), rel=0.01
            )
        ),
        timeout=10_000,
    )


def test_nothing_repaints_when_nothing_changed_and_storms_cost_bounded_refreshes(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, _layer, loader, inspector = _open(make_napari_viewer, cells_store)
    viewer.scene.camera.zoom = 4.0
    _settle(qtbot, viewer, loader, inspector)
    ticks = inspector.ticks
    qtbot.waitUntil(lambda: inspector.ticks >= ticks + 3, timeout=5_000)  # rates settle

    def paints() -> list[int]:
        widgets: list[Any] = [
            inspector.chunk_map,
            inspector.diagram,
            inspector.levels_bar,
            inspector.rates_chart,
            *inspector.plane_bars,
        ]
        return [w.paints for w in widgets]

    before, refreshes, ticks = paints(), inspector.refreshes, inspector.ticks
    qtbot.waitUntil(lambda: inspector.ticks >= ticks + 5, timeout=5_000)
    assert paints() == before
    assert inspector.refreshes == refreshes  # not even the cache's statistics were read

    # A storm: 12,500 chunks of another source, 4 moves each, from a worker thread.
    cache = loader.controller.cache
    source = ArraySource(np.zeros((200, 250), dtype=np.uint8), chunks=(2, 2), name="storm")
    refs = [ChunkRef.of(source, (r, c)) for r in range(100) for c in range(125)]
    start_transitions = sum(cache.statistics.transitions.values())
    done = threading.Event()

    def storm() -> None:
        with cache.request(refs) as request:
            request.done.result(timeout=60)
        cache.evict_unpinned()
        done.set()

    ticks, builds, refreshes = inspector.ticks, inspector.chunk_map.builds, inspector.refreshes
    started = time.monotonic()
    threading.Thread(target=storm, daemon=True).start()
    qtbot.waitUntil(done.is_set, timeout=60_000)
    inspector.tabs.setCurrentWidget(inspector.log)
    qtbot.waitUntil(lambda: inspector.log.model.rowCount() == 2000, timeout=10_000)
    elapsed = time.monotonic() - started
    assert sum(cache.statistics.transitions.values()) - start_transitions >= 50_000
    new_ticks = inspector.ticks - ticks
    assert new_ticks <= elapsed * 10 + 2  # 10 Hz
    assert inspector.refreshes - refreshes <= new_ticks
    assert inspector.chunk_map.builds - builds <= 1  # the storm's chunks are not this map's


def test_blocking_mode_is_labelled_as_a_debugging_mode(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    _viewer, _layer, loader, inspector = _open(make_napari_viewer, cells_store)
    assert inspector.mode.value == "progressive"
    assert "debugging" in inspector.mode.native.itemText(1)
    assert inspector.blocking_note.isHidden()
    inspector.mode.value = "blocking"
    assert loader.blocking
    assert not inspector.blocking_note.isHidden()
    assert "freezes" in inspector.blocking_note.text()
    assert "debugging mode" in inspector.note.text()
    assert not inspector.note.isHidden()
    inspector.mode.value = "progressive"
    assert not loader.blocking
    assert inspector.note.isHidden()


def test_controls_apply_live(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, _layer, loader, inspector = _open(make_napari_viewer, cells_store)
    cache = loader.controller.cache
    inspector.capacity.value = 300
    assert cache.total_bytes_limit == 300 << 20
    inspector.concurrency.value = 5
    assert cache.concurrency == 5
    assert inspector.prefetch.value is False  # shows the layer's setting
    inspector.prefetch.value = True
    assert loader.prefetch
    _settle(qtbot, viewer, loader, inspector)
    viewer.scene.camera.zoom = 4.0  # a new view: the first one's chunks are no longer pinned
    _settle(qtbot, viewer, loader, inspector)
    assert inspector.evict_unpinned() > 0
    stats = cache.statistics
    assert stats.resident_bytes == stats.pinned_bytes > 0  # only what is displayed stays


# -- lifecycle: what napari does, not close() ------------------------------------------


def _baseline(viewer: Any, cache: Any) -> tuple[int, ...]:
    layers = viewer.layers
    return (
        len(cache.state_changed),
        len(layers.events.inserted.callbacks),
        len(layers.events.removed.callbacks),
        len(layers.selection.events.active.callbacks),
    )


def test_removing_the_dock_deletes_the_inspector_and_disconnects_everything(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(cells_store), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    controller = loader.controller
    baseline = _baseline(viewer, loader.controller.cache)
    view_read = len(controller.view_read)
    for removal in ("remove_dock_widget", "close button"):
        dock, inspector = viewer.window.add_plugin_dock_widget(
            "napari-lazy-zarr", "Chunk inspector"
        )
        qtbot.waitUntil(lambda inspector=inspector: inspector.live, timeout=5_000)
        timer = inspector._timer
        assert timer.isActive()
        assert _baseline(viewer, loader.controller.cache) != baseline
        assert len(controller.view_read) == view_read + 1
        if removal == "remove_dock_widget":
            viewer.window.remove_dock_widget(inspector)
        else:
            dock.title.close_button.click()  # what a user does: the dock's x
        # At once, without waiting for any garbage collection:
        assert not inspector.live
        assert not timer.isActive()
        assert _baseline(viewer, loader.controller.cache) == baseline
        assert len(controller.view_read) == view_read
        assert connections_to_ours() == []
        # ...and the orphaned widget is deleted, not left as a hidden top-level window.
        qtbot.waitUntil(lambda inspector=inspector: deleted(inspector), timeout=5_000)


def test_hiding_the_dock_pauses_the_inspector_and_showing_it_catches_up(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, layer, loader, inspector = _open(make_napari_viewer, cells_store)
    _settle(qtbot, viewer, loader, inspector)
    dock = inspector.parent()
    baseline_after = _baseline(viewer, loader.controller.cache)
    dock.hide()
    assert not inspector.live
    assert not inspector._timer.isActive()
    assert connections_to_ours() == []
    assert _baseline(viewer, loader.controller.cache) != baseline_after
    ticks = inspector.ticks
    viewer.scene.camera.zoom = 4.0  # chunks load while the inspector is hidden
    _draw(viewer)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    assert inspector.ticks == ticks
    dock.show()
    qtbot.waitUntil(lambda: inspector.live and inspector.level == layer.data_level, timeout=5_000)
    qtbot.waitUntil(lambda: inspector.chunk_map.touched == _viewport_chunks(layer), timeout=5_000)
    grid = inspector.chunk_map.grid
    assert grid is not None
    assert all(grid.state_at(c) is ChunkState.READY for c in _viewport_chunks(layer))


def test_closing_the_viewer_stops_the_inspector(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, _layer, loader, inspector = _open(make_napari_viewer, cells_store)
    _settle(qtbot, viewer, loader, inspector)
    cache = loader.controller.cache
    timer = inspector._timer
    viewer.close()
    assert not isalive(timer) or not timer.isActive()
    assert len(cache.state_changed) == 0 or connections_to_ours() == []
    qtbot.waitUntil(lambda: deleted(inspector), timeout=5_000)


def test_a_user_docks_the_inspector_shows_every_tab_zooms_and_removes_it(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    """The whole lifecycle in a real viewer, under the binding of the run (.ci/qt-bindings
    runs it under PyQt5 and PySide6 too): every widget paints, no exception reaches
    the event loop (pytest-qt) or the paint and timer guard (`_fail_on_guarded_errors`)."""
    viewer, layer, loader, inspector = _open(make_napari_viewer, cells_store)
    viewer.scene.camera.zoom = 4.0  # level 0: chunks load, events are logged
    _settle(qtbot, viewer, loader, inspector)
    shown = {
        "rates": lambda: inspector.rates_chart.paints > 0 and bool(inspector.rates_chart.rows),
        "state machine": lambda: (
            inspector.diagram.paints > 0 and inspector.diagram.counts[ChunkState.READY] > 0
        ),
        "event log": lambda: bool(inspector.log.visible_rows()),
        "controls": lambda: inspector.controls.native.isVisible(),
    }
    tabs = inspector.tabs
    assert [tabs.tabText(i) for i in range(tabs.count())] == list(shown)
    for index, done in enumerate(shown.values()):
        tabs.setCurrentIndex(index)
        qtbot.waitUntil(lambda index=index: tabs.widget(index).isVisible(), timeout=5_000)
        qtbot.waitUntil(done, timeout=5_000)  # the tab shows what happened
    for zoom in (0.05, 4.0):  # the coarsest level, then the finest again
        paints = inspector.chunk_map.paints
        viewer.scene.camera.zoom = zoom
        _settle(qtbot, viewer, loader, inspector)
        qtbot.waitUntil(lambda: inspector.level == layer.data_level, timeout=5_000)
        qtbot.waitUntil(lambda paints=paints: inspector.chunk_map.paints > paints, timeout=5_000)
    assert {inspector.levels_bar.paints, inspector.summary.paints} != {0}
    viewer.window.remove_dock_widget(inspector)
    assert not inspector.live
    qtbot.waitUntil(lambda: deleted(inspector), timeout=5_000)


def test_docking_shows_the_planes_bar_in_place_from_the_first_paint(
    make_napari_viewer: Callable[..., Any], tmp_path: Path
) -> None:
    """The bar of an axis the view does not show (z) is made when the inspector first
    refreshes: it must be laid out before it paints. It kept a new widget's 640x480 and
    covered the whole inspector, striped, for ~0.3 s after docking."""
    path = tmp_path / "stack.zarr"
    array = zarr.create_array(str(path), shape=(16, 512, 512), chunks=(1, 256, 256), dtype="u2")
    array[...] = 7
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(1400, 900)
    watch_viewer(viewer)
    viewer.open(str(path), plugin="napari-lazy-zarr")
    _, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    QApplication.processEvents()  # shown: live, its first refresh made the z bar
    assert inspector.live
    (bar,) = [b for b in inspector.plane_bars if b.isVisible()]
    geometry = bar.geometry()
    assert geometry.height() == bar.sizeHint().height()  # its row, not 480 pixels
    assert geometry.top() > inspector.chunk_map.geometry().bottom()  # below the map
    assert geometry.right() < inspector.width()
