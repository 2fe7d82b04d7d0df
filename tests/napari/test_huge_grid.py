"""A 10⁶ x 10⁶ store of 1-pixel chunks in a real viewer: every view bounded (issue 22).

Only the metadata and one chunk are written. Structural facts only (timings on a
shared 2-core machine would flake; `python -m bench.huge_grid` measures them):
the layer gets virtual levels down to 245² pixels, every view napari reads plans at
most `VIEW_CHUNKS` chunks costing at most `VIEW_STORED_CHUNKS` stored chunks, at a
coarse level, also zoomed in to level 0 — and nothing raises.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer
from napari_lazy_zarr.core.viewport import ViewController
from napari_lazy_zarr.core.viewport._coarser import VIEW_CHUNKS, VIEW_STORED_CHUNKS
from napari_lazy_zarr.widgets._grid_state import MAX_CELLS, STATE_CODES, ChunkGridState
from tests.redteam.stores import metadata_only

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest
    from pytestqt.qtbot import QtBot


def test_a_trillion_chunk_store_opens_with_bounded_views(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = metadata_only(tmp_path / "huge.zarr", [10**6, 10**6], [1, 1])
    (path / "0.0").write_bytes(bytes([200]))
    frames: list[Any] = []
    read = ViewController.read

    def recorded(self: ViewController, *args: Any, **kwargs: Any) -> Any:
        data = read(self, *args, **kwargs)
        frames.append((self, self.latest))
        return data

    monkeypatch.setattr(ViewController, "read", recorded)
    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    # Docked: its map of level 0 has 10**12 chunks.
    _, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    loader.prefetch = False
    sources = loader.controller.sources
    assert len(sources) == 13
    assert sources[-1].shape == (245, 245)
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: len(frames) >= 2, timeout=30_000)
    # Zoomed in on the top-left corner: napari reads level 0.
    viewer.scene.camera.center = (500, 500)
    viewer.scene.camera.zoom = 1.0
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: any(f.request.level == 0 for _, f in frames if f), timeout=30_000)
    by_identity = {source.identity: source for source in sources}
    for _controller, frame in frames:
        if frame is None:
            continue
        served = {key.source for key in frame.keys}
        assert len(served) == 1
        (identity,) = served
        level = by_identity[identity]
        assert len(frame.keys) <= VIEW_CHUNKS
        assert len(frame.keys) * level.chunk_cost((0, 0)) <= VIEW_STORED_CHUNKS
        if frame.request.level == 0:
            assert identity != sources[0].identity  # served from a coarser level
    qtbot.waitUntil(lambda: inspector.live, timeout=10_000)
    inspector.pin(layer.name, 0)  # the map of level 0: 10**12 chunks, in aggregated cells
    inspector.tick()
    grid = inspector.chunk_map.grid
    assert grid is not None
    assert math.prod(grid.shape) <= MAX_CELLS


def test_a_trillion_chunk_grid_is_kept_in_aggregated_cells(tmp_path: Path) -> None:
    from napari_lazy_zarr.core import ChunkRef, ChunkState, open_array

    path = metadata_only(tmp_path / "grid.zarr", [10**6, 10**6], [1, 1])
    array = open_array(str(path))
    try:
        started = time.perf_counter()
        grid = ChunkGridState(array.source)
        assert grid.chunks == (10**6, 10**6)
        assert grid.block == (512, 512)
        assert grid.shape == (1954, 1954)
        assert math.prod(grid.shape) <= MAX_CELLS
        key = ChunkRef.of(array.source, (1030, 7)).key
        assert grid.coords_of(key) == (2, 0)  # chunk row 1030 lies in cell row 1030 // 512
        grid.update({grid.flat_of(key): STATE_CODES[ChunkState.READY]})
        assert grid.state_at((2, 0)) is ChunkState.READY
        assert grid.key_at((2, 0)) == ChunkRef.of(array.source, (1024, 0)).key
        assert grid.chunk_range(0, 1030, 1031) == (2, 3)
        assert time.perf_counter() - started < 5.0  # ~10 ms here: no per-chunk work
    finally:
        array.cache.close()
