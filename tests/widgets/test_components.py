"""The inspector's parts driven by an engine stepped by hand: map, diagram, log, retry."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, ChunkState, ManualExecutor
from napari_lazy_zarr.widgets._chunk_map import QChunkMap
from napari_lazy_zarr.widgets._event_log import QEventLog
from napari_lazy_zarr.widgets._grid_state import STATE_COLORS, ChunkGridState, rgb_blocks
from tests.sources import FaultySource

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pytestqt.qtbot import QtBot


@pytest.fixture
def stepped() -> Iterator[tuple[ChunkCache, ManualExecutor, FaultySource]]:
    executor = ManualExecutor()
    source = FaultySource(ArraySource(np.zeros((32, 48)), chunks=(4, 4), name="grid"))
    with ChunkCache(1 << 20, concurrency=1, executor=executor) as cache:
        yield cache, executor, source


def _colors(view: QChunkMap, cells: list[tuple[int, int]]) -> set[tuple[int, int, int]]:
    return {view.cell_color(*cell) for cell in cells}


def test_map_colours_and_outlines_follow_the_cache_step_by_step(
    qtbot: QtBot, stepped: tuple[ChunkCache, ManualExecutor, FaultySource]
) -> None:
    cache, executor, source = stepped
    grid = ChunkGridState(cache, source)  # type: ignore[arg-type]
    view = QChunkMap()
    qtbot.addWidget(view)
    view.resize(480, 320)  # 12 x 8 chunks: 40 px cells, no aggregation
    view.set_grid(grid)
    assert grid.shape == (8, 12)
    assert view.cell_color(0, 0) == STATE_COLORS[ChunkState.NEW]
    cells = [(1, 1), (1, 2), (2, 1)]
    source.failing = {(2, 1)}
    request = cache.request([ChunkRef.of(source, c) for c in cells])  # type: ignore[arg-type]
    view.set_view(request.keys, None)
    assert view.touched == set(cells)
    assert grid.apply()
    view.refresh()
    assert _colors(view, cells) == {STATE_COLORS[ChunkState.QUEUED]}
    executor.run_next()  # the most urgent chunk loads
    grid.apply()
    view.refresh()
    assert sorted(view.cell_color(*c) == STATE_COLORS[ChunkState.READY] for c in cells) == [
        False,
        False,
        True,
    ]
    executor.run_all()
    grid.apply()
    view.refresh()
    assert view.cell_color(1, 1) == STATE_COLORS[ChunkState.READY]
    assert view.cell_color(2, 1) == STATE_COLORS[ChunkState.FAILED]
    request.release()
    cache.evict_unpinned()
    grid.apply()
    view.refresh()
    assert view.cell_color(1, 2) == STATE_COLORS[ChunkState.EVICTED]
    assert view.cell_color(5, 5) == STATE_COLORS[ChunkState.NEW]
    assert grid.counts() == {
        ChunkState.NEW: 93,
        ChunkState.QUEUED: 0,
        ChunkState.LOADING: 0,
        ChunkState.READY: 0,
        ChunkState.FAILED: 1,
        ChunkState.EVICTED: 2,
    }
    assert "injected fault" in view.describe((2, 1))
    grid.close()


def test_retry_from_the_map_requeues_exactly_the_failed_chunk(
    qtbot: QtBot, stepped: tuple[ChunkCache, ManualExecutor, FaultySource]
) -> None:
    cache, executor, source = stepped
    source.failing = {(3, 3)}
    cache.request([ChunkRef.of(source, (r, c)) for r in range(4) for c in range(4)]).release()  # type: ignore[arg-type]
    executor.run_all()
    grid = ChunkGridState(cache, source)  # type: ignore[arg-type]
    view = QChunkMap()
    qtbot.addWidget(view)
    view.set_grid(grid)
    assert not view.retry((0, 0))  # READY: nothing to retry
    assert view.retry((3, 3))
    states = cache.states()
    assert [k for k, s in states.items() if s is ChunkState.QUEUED] == [
        ChunkRef.of(source, (3, 3)).key  # type: ignore[arg-type]
    ]
    assert sum(s is ChunkState.READY for s in states.values()) == 15
    grid.close()


def test_large_grids_aggregate_into_blocks_showing_the_mix() -> None:
    codes = np.zeros((256, 256), dtype=np.uint8)  # 65,536 chunks
    codes[:, 128:] = list(ChunkState).index(ChunkState.READY)
    codes[0:2, 0:2] = [[1, 3], [3, 1]]  # a 2 x 2 block half QUEUED, half READY
    image, block = rgb_blocks(codes, (128, 128))
    assert block == (2, 2)
    assert image.shape == (128, 128, 3)
    assert tuple(image[5, 10]) == STATE_COLORS[ChunkState.NEW]  # chunks 10-11 x 20-21
    assert tuple(image[5, 100]) == STATE_COLORS[ChunkState.READY]  # chunks 10-11 x 200-201
    mix = (np.array(STATE_COLORS[ChunkState.QUEUED]) + STATE_COLORS[ChunkState.READY]) / 2
    np.testing.assert_allclose(image[0, 0], mix, atol=1)


def test_event_log_rows_match_the_cache_and_filter(
    qtbot: QtBot, stepped: tuple[ChunkCache, ManualExecutor, FaultySource]
) -> None:
    cache, executor, source = stepped
    log = QEventLog(capacity=100)
    qtbot.addWidget(log)
    cache.state_changed.connect(log.model.add)
    source.failing = {(0, 1)}
    cache.request([ChunkRef.of(source, (0, c)) for c in range(3)]).release()  # type: ignore[arg-type]
    executor.run_all()
    events = cache.events()
    rows = log.visible_rows()
    assert len(rows) == len(events) == 9
    assert [(r[1], r[2], r[3]) for r in rows] == [
        (str(e.key), e.previous.name, e.current.name) for e in reversed(events)
    ]
    log.state_filter.setCurrentText("FAILED")
    (failed,) = log.visible_rows()
    assert failed[3] == "FAILED"
    assert "injected fault" in failed[4]
    log.state_filter.setCurrentText("any state")
    log.chunk_filter.setText("[0:4, 8:12]")
    assert {r[1] for r in log.visible_rows()} == {"('faulty', 'grid')[0:4, 8:12]"}
    # Bounded: the model keeps the newest `capacity` rows whatever arrives.
    for _ in range(40):
        cache.request([ChunkRef.of(source, (5, c)) for c in range(3)]).release()  # type: ignore[arg-type]
        executor.run_all()
        cache.evict_unpinned()
    log.chunk_filter.setText("")
    assert len(log.visible_rows()) == 100
    cache.state_changed.disconnect(log.model.add)
