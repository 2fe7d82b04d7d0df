"""The dock widget in a real viewer: follows layers and views, absorbs storms, leaks nothing."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import shared_cache, watch_viewer
from napari_lazy_zarr.core import ArraySource, ChunkRef, ChunkState
from napari_lazy_zarr.core.sample import write_sample_ome_zarr
from napari_lazy_zarr.widgets import ChunkInspector

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

CHUNK = 256


@pytest.fixture
def cells_store(tmp_path: Path) -> Path:
    path = tmp_path / "cells.ome.zarr"
    write_sample_ome_zarr(path, size=2048, chunk=CHUNK, smallest=512)
    return path


def _setup(
    make_napari_viewer: Callable[..., Any], path: Path
) -> tuple[Any, Any, Any, ChunkInspector]:
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(1300, 800)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    loader.prefetch = False
    inspector = ChunkInspector(viewer)
    viewer.window.add_dock_widget(inspector, name="Chunk inspector")
    return viewer, layer, loader, inspector


def _settle(qtbot: QtBot, viewer: Any, loader: Any, inspector: ChunkInspector) -> None:
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    ticks = inspector.ticks
    qtbot.waitUntil(lambda: inspector.ticks >= ticks + 2, timeout=5_000)  # the timer applied it


def _viewport_chunks(layer: Any) -> set[tuple[int, int]]:
    (y0, x0), (y1, x1) = layer.corner_pixels
    return {
        (cy, cx)
        for cy in range(int(y0) // CHUNK, int(y1) // CHUNK + 1)
        for cx in range(int(x0) // CHUNK, int(x1) // CHUNK + 1)
    }


def test_follows_the_displayed_level_and_outlines_the_view_while_panning(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, layer, loader, inspector = _setup(make_napari_viewer, cells_store)
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, 500 * 0.25, 500 * 0.25)
    _settle(qtbot, viewer, loader, inspector)
    assert layer.data_level == 0
    assert inspector.chunk_map.grid is not None
    assert inspector.chunk_map.grid.source is layer.data[0].array.source
    before = inspector.chunk_map.touched
    assert before == _viewport_chunks(layer)
    viewer.scene.camera.center = (0, 500 * 0.25, 1300 * 0.25)  # pan right
    _settle(qtbot, viewer, loader, inspector)
    after = inspector.chunk_map.touched
    assert after == _viewport_chunks(layer)
    assert after != before
    # Every outlined chunk is drawn READY: the view completed.
    assert {inspector.chunk_map.cell_color(*c) for c in after} == {(70, 190, 110)}
    stats = shared_cache().statistics
    assert inspector.diagram.counts == stats.states
    assert inspector.diagram.transitions[ChunkState.QUEUED, ChunkState.LOADING] == stats.loads
    # Pinning another level shows that level's grid.
    inspector.pin(layer.name, 2)
    assert inspector.chunk_map.grid is not None
    assert inspector.chunk_map.grid.source is layer.data[2].array.source
    inspector.close()


def test_a_layer_not_backed_by_the_plugin_is_explained(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, layer, _loader, inspector = _setup(make_napari_viewer, cells_store)
    viewer.add_image(np.zeros((8, 8)), name="plain numpy")
    inspector.tick()
    assert not inspector.note.isHidden(), (inspector.note.text(), viewer.layers.selection.active)
    assert "not backed by napari-lazy-zarr" in inspector.note.text()
    assert inspector.chunk_map.grid is None
    viewer.layers.selection.active = layer
    inspector.tick()
    assert inspector.note.isHidden()
    assert inspector.chunk_map.grid is not None
    inspector.close()


def test_a_storm_of_events_costs_bounded_repaints(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, _layer, loader, inspector = _setup(make_napari_viewer, cells_store)
    _settle(qtbot, viewer, loader, inspector)
    cache = loader.cache
    source = ArraySource(np.zeros((200, 250), dtype=np.uint8), chunks=(2, 2), name="storm")
    refs = [ChunkRef.of(source, (r, c)) for r in range(100) for c in range(125)]  # 12,500
    start_transitions = sum(cache.statistics.transitions.values())
    done = threading.Event()

    def storm() -> (
        None
    ):  # 4 moves per chunk: NEW/EVICTED -> QUEUED -> LOADING -> READY (-> EVICTED)
        with cache.request(refs) as request:
            request.done.result(timeout=60)
        cache.evict_unpinned()
        done.set()

    ticks, paints, refreshes = inspector.ticks, inspector.chunk_map.paints, inspector.refreshes
    started = time.monotonic()
    threading.Thread(target=storm, daemon=True).start()
    qtbot.waitUntil(done.is_set, timeout=60_000)
    qtbot.waitUntil(lambda: inspector.log.model.rowCount() == 2000, timeout=10_000)
    elapsed = time.monotonic() - started
    moves = sum(cache.statistics.transitions.values()) - start_transitions
    assert moves >= 50_000
    new_ticks = inspector.ticks - ticks
    # At most one statistics refresh per timer tick, at most ~30 ticks a second.
    assert inspector.refreshes - refreshes <= new_ticks
    assert new_ticks <= elapsed * 1000 / 33 + 2
    assert inspector.chunk_map.paints - paints <= new_ticks + 2
    inspector.close()


def test_controls_apply_live(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer, _layer, loader, inspector = _setup(make_napari_viewer, cells_store)
    inspector.tick()
    cache = loader.cache
    inspector.capacity.value = 300
    assert cache.total_bytes_limit == 300 << 20
    inspector.concurrency.value = 5
    assert cache.concurrency == 5
    assert inspector.prefetch.value is False  # shows the layer's setting
    inspector.prefetch.value = True
    assert loader.prefetch
    inspector.mode.value = "blocking"
    assert loader.blocking
    inspector.mode.value = "progressive"
    assert not loader.blocking
    _settle(qtbot, viewer, loader, inspector)
    viewer.scene.camera.zoom = 4.0  # a new view: the first one's chunks are no longer pinned
    _settle(qtbot, viewer, loader, inspector)
    assert inspector.evict_unpinned() > 0
    stats = cache.statistics
    assert stats.resident_bytes == stats.pinned_bytes > 0  # only what is displayed stays
    inspector.close()


def test_closing_disconnects_everything(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(cells_store), plugin="napari-lazy-zarr")
    cache = loader_of(layer).cache
    baseline = (
        len(cache.state_changed),
        len(viewer.layers.events.inserted.callbacks),
        len(viewer.layers.selection.events.active.callbacks),
    )
    inspector = ChunkInspector(viewer)
    inspector.tick()
    assert len(cache.state_changed) > baseline[0]
    inspector.close()
    assert (
        len(cache.state_changed),
        len(viewer.layers.events.inserted.callbacks),
        len(viewer.layers.selection.events.active.callbacks),
    ) == baseline
    assert not inspector._timer.isActive()
    inspector.deleteLater()
