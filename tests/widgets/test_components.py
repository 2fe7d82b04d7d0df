"""The inspector's parts driven by an engine stepped by hand: map, marks, diagram, log, mirror."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from qtpy.QtCore import QRectF

from napari_lazy_zarr.core import (
    ArraySource,
    ChunkCache,
    ChunkRef,
    ChunkState,
    InlineExecutor,
    ManualExecutor,
)
from napari_lazy_zarr.core.testing import FaultySource
from napari_lazy_zarr.core.viewport import ViewController
from napari_lazy_zarr.widgets._chunk_map import QChunkMap
from napari_lazy_zarr.widgets._event_log import QEventLog
from napari_lazy_zarr.widgets._grid_state import (
    MARKER_COLORS,
    STATE_CODES,
    STATE_COLORS,
    Shown,
    cell_image,
)
from napari_lazy_zarr.widgets._mirror import LayerSources, StateMirror
from napari_lazy_zarr.widgets._names import ChunkNamer
from napari_lazy_zarr.widgets._sparkline import polygon_of
from napari_lazy_zarr.widgets._state_diagram import MOVES, QStateDiagram
from napari_lazy_zarr.widgets._view_cells import ViewCells, level_coverage, stand_in_levels

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pytestqt.qtbot import QtBot

    from napari_lazy_zarr.core.viewport import ViewFrame


@pytest.fixture
def stepped() -> Iterator[tuple[ChunkCache, ManualExecutor, FaultySource]]:
    executor = ManualExecutor()
    source = FaultySource(ArraySource(np.zeros((32, 48)), chunks=(4, 4), name="grid"))
    with ChunkCache(1 << 20, concurrency=1, executor=executor) as cache:
        yield cache, executor, source


def _colors(view: QChunkMap, cells: list[tuple[int, int]]) -> set[tuple[int, int, int]]:
    return {view.cell_color(*cell) for cell in cells}


def test_map_colours_follow_the_cache_step_by_step(
    qtbot: QtBot, stepped: tuple[ChunkCache, ManualExecutor, FaultySource]
) -> None:
    cache, executor, source = stepped
    mirror = StateMirror(cache)
    mirror.track([LayerSources("grid", (source,))])  # type: ignore[arg-type]
    mirror.connect()
    grid = mirror.grid(source)  # type: ignore[arg-type]
    assert grid is not None
    view = QChunkMap()
    qtbot.addWidget(view)
    view.resize(480, 320)  # 12 x 8 chunks: 40 px cells
    view.set_grid(grid, cache)
    assert grid.shape == (8, 12)
    assert view.cell_color(0, 0) == STATE_COLORS[ChunkState.NEW]
    cells = [(1, 1), (1, 2), (2, 1)]
    source.failing = {(2, 1)}
    request = cache.request([ChunkRef.of(source, c) for c in cells])  # type: ignore[arg-type]

    def step() -> None:
        assert mirror.apply().grids == {grid}
        view.refresh()

    step()
    assert _colors(view, cells) == {STATE_COLORS[ChunkState.QUEUED]}
    executor.run_next()  # the most urgent chunk loads
    step()
    assert sorted(view.cell_color(*c) == STATE_COLORS[ChunkState.READY] for c in cells) == [
        False,
        False,
        True,
    ]
    executor.run_all()
    step()
    assert view.cell_color(1, 1) == STATE_COLORS[ChunkState.READY]
    assert view.cell_color(2, 1) == STATE_COLORS[ChunkState.FAILED]
    request.release()
    cache.evict_unpinned()
    step()
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
    assert "FAILED" in view.describe((2, 1))
    assert view.retry((2, 1))
    mirror.close()


def test_marks_show_fill_then_stand_ins_then_final_data(qtbot: QtBot) -> None:
    """A two-level pyramid read through a real controller, its loads stepped by hand."""
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    fine = ArraySource(data, chunks=(8, 8), name="fine")
    coarse = ArraySource(data[::2, ::2], chunks=(8, 8), name="coarse")
    executor = ManualExecutor()
    results: list[ViewFrame] = []
    with ChunkCache(8 << 20, concurrency=1, executor=executor) as cache:
        controller = ViewController(
            [fine, coarse], cache, dispatch=InlineExecutor(), prefetch=False
        )
        controller.view_read.connect(results.append)
        mirror = StateMirror(cache)
        mirror.track([LayerSources("image", (fine, coarse))])
        mirror.connect()
        grids = [mirror.grid(fine), mirror.grid(coarse)]
        assert grids[0] is not None
        view = QChunkMap()
        qtbot.addWidget(view)
        view.resize(400, 400)  # 8 x 8 chunks: 50 px each, marks drawn
        view.set_grid(grids[0], cache)
        window = controller.arrays[0][16:40, 8:32]  # chunks rows 2-4, columns 1-3

        def read() -> ViewCells:
            # As napari does: read the view and the thumbnail, and again while a newer
            # frame waits (`view_changed`).
            controller.read(0, window, kind="view")
            for _ in range(10):
                if not controller.refresh_pending:
                    break
                controller.read(1, controller.arrays[1][:, :], kind="thumbnail")
                controller.read(0, window, kind="view")
            assert not controller.refresh_pending
            mirror.apply()
            cells = ViewCells.of(results[-1], grids[0])  # type: ignore[arg-type]
            view.set_view(cells)
            return cells

        def marks() -> set[tuple[int, int, int] | None]:
            return {view.mark_color(*cell) for cell in view.touched}

        controller.read(1, controller.arrays[1][:, :], kind="thumbnail")  # all of level 1
        cells = read()
        assert view.touched == {(r, c) for r in range(2, 5) for c in range(1, 4)}
        assert marks() == {MARKER_COLORS[Shown.FILL]}  # nothing resident anywhere
        assert view.mark_color(0, 0) is None  # outside the view: no mark
        # The coarse level's 16 chunks load first (coarser levels first).
        for _ in range(16):
            executor.run_next()
        assert mirror.apply().grids == {grids[1]}
        cells = read()
        assert marks() == {MARKER_COLORS[Shown.PROVISIONAL]}
        levels = stand_in_levels(cells, grids)
        assert set(levels[cells.shown == Shown.PROVISIONAL].tolist()) == {1}
        assert level_coverage(cells.request, grids) == [0.0, 1.0]
        executor.run_all()
        cells = read()
        assert marks() == {None}  # final: no mark
        assert level_coverage(cells.request, grids) == [1.0, 1.0]
        np.testing.assert_array_equal(np.asarray(results[-1].data), data[16:40, 8:32])
        mirror.close()
        controller.close()


def test_large_grids_aggregate_into_blocks_showing_the_mix() -> None:
    codes = np.zeros((256, 256), dtype=np.uint8)  # 65,536 chunks
    codes[:, 128:] = STATE_CODES[ChunkState.READY]
    codes[0:2, 0:2] = [[1, 3], [3, 1]]  # a 2 x 2 block half QUEUED, half READY
    image, per_chunk, block = cell_image(codes, None, (128, 128))
    assert (per_chunk, block) == (1, (2, 2))
    assert image.shape == (128, 128, 3)
    assert tuple(image[5, 10]) == STATE_COLORS[ChunkState.NEW]
    assert tuple(image[5, 100]) == STATE_COLORS[ChunkState.READY]
    mix = (np.array(STATE_COLORS[ChunkState.QUEUED]) + STATE_COLORS[ChunkState.READY]) / 2
    np.testing.assert_allclose(image[0, 0], mix, atol=1)


def test_event_log_names_chunks_relative_to_the_store_and_filters(
    qtbot: QtBot, stepped: tuple[ChunkCache, ManualExecutor, FaultySource]
) -> None:
    cache, executor, source = stepped
    log = QEventLog(capacity=100)
    qtbot.addWidget(log)
    log.model.set_namer(ChunkNamer([LayerSources("grid", (source,))], inspected="grid"))  # type: ignore[arg-type]
    cache.state_changed.connect(log.model.add)
    source.failing = {(0, 1)}
    cache.request([ChunkRef.of(source, (0, c)) for c in range(3)]).release()  # type: ignore[arg-type]
    executor.run_all()
    events = cache.events()
    rows = log.visible_rows()
    assert len(rows) == len(events) == 9
    assert [(r[1], r[2]) for r in rows] == [
        (f"L0 (0, {e.key.inclusive_min[1] // 4})", f"{e.previous.name} → {e.current.name}")
        for e in reversed(events)
    ]
    log.state_filter.setCurrentText("FAILED")
    (failed,) = log.visible_rows()
    assert failed[2].endswith("FAILED")
    assert "injected fault" in failed[3]
    log.state_filter.setCurrentText("any state")
    log.chunk_filter.setText("(0, 2)")
    assert {r[1] for r in log.visible_rows()} == {"L0 (0, 2)"}
    log.chunk_filter.setText("[0:4, 8:12]")  # the full key matches too
    assert {r[1] for r in log.visible_rows()} == {"L0 (0, 2)"}
    # Bounded: the model keeps the newest `capacity` rows whatever arrives.
    for _ in range(40):
        cache.request([ChunkRef.of(source, (5, c)) for c in range(3)]).release()  # type: ignore[arg-type]
        executor.run_all()
        cache.evict_unpinned()
    log.chunk_filter.setText("")
    assert len(log.visible_rows()) == 100
    cache.state_changed.disconnect(log.model.add)


@pytest.mark.parametrize("size", [(340, 180), (360, 200), (420, 220), (640, 260)])
def test_state_diagram_counts_fit_without_overlapping(qtbot: QtBot, size: tuple[int, int]) -> None:
    diagram = QStateDiagram()
    qtbot.addWidget(diagram)
    diagram.resize(*size)
    counts = dict.fromkeys(ChunkState, 123_456)
    diagram.set_counts(counts, {move: 10_000 + 7_919 * i for i, move in enumerate(MOVES)})
    nodes = list(diagram.node_rects().values())
    labels = diagram.label_rects()
    bounds = QRectF(0, 0, *size)
    placed: list[QRectF] = []
    for move, rect in labels.items():
        assert bounds.contains(rect), (move, rect)
        assert not any(rect.intersects(node) for node in nodes), (move, rect)
        assert not any(rect.intersects(other) for other in placed), (move, rect)
        placed.append(rect)
    diagram.grab()
    assert diagram.paints == 1


def test_the_mirror_matches_the_cache_after_a_threaded_storm() -> None:
    """Events from several worker threads end in the cache's own states and byte counts."""
    sources = [
        ArraySource(np.zeros((64, 64), dtype=np.uint16), chunks=(4, 4), name=f"s{i}")
        for i in range(2)
    ]
    with ChunkCache(200 << 10, concurrency=4) as cache:  # small: evictions happen
        mirror = StateMirror(cache)
        mirror.track([LayerSources("a", (sources[0],)), LayerSources("b", (sources[1],))])
        mirror.connect()
        threads = []

        def load(source: ArraySource, rows: range) -> None:
            for row in rows:
                with cache.request([ChunkRef.of(source, (row, c)) for c in range(16)]) as r:
                    r.done.result(timeout=30)

        for source in sources:
            for rows in (range(8), range(8, 16)):
                thread = threading.Thread(target=load, args=(source, rows))
                threads.append(thread)
                thread.start()
        for thread in threads:
            thread.join(timeout=60)
        mirror.apply()
        states = cache.states()
        for source in sources:
            grid = mirror.grid(source)
            assert grid is not None
            expected = np.zeros(grid.shape, dtype=np.uint8)
            for key, state in states.items():
                if key.source == source.identity:
                    expected[grid.coords_of(key)] = STATE_CODES[state]
            np.testing.assert_array_equal(grid.codes, expected)
        resident = mirror.resident_bytes("a") + mirror.resident_bytes("b")
        assert resident == cache.statistics.resident_bytes > 0
        mirror.close()


def test_a_shared_source_splits_its_bytes_between_channel_layers() -> None:
    data = np.zeros((3, 16, 16), dtype=np.uint8)
    source = ArraySource(data, chunks=(1, 8, 8), name="channels")
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        mirror = StateMirror(cache)
        layers: list[Any] = [LayerSources(f"c{c}", (source,), fixed=((0, c),)) for c in range(3)]
        mirror.track(layers)
        mirror.connect()
        cache.request([ChunkRef.of(source, (1, r, c)) for r in range(2) for c in range(2)])
        cache.request([ChunkRef.of(source, (2, 0, 0))])
        mirror.apply()
        assert [mirror.resident_bytes(f"c{c}") for c in range(3)] == [0, 256, 64]
        mirror.close()


def test_a_sparkline_polygon_holds_exactly_its_points() -> None:
    """Read through QDataStream, the same in every binding: NumPy's points, in order."""
    rng = np.random.default_rng(5)
    for n in (0, 1, 150):
        xs, ys = rng.normal(size=n) * 1e3, rng.normal(size=n)
        polygon = polygon_of(xs, ys)
        got = np.array([(polygon.at(i).x(), polygon.at(i).y()) for i in range(polygon.size())])
        np.testing.assert_array_equal(got.reshape(n, 2), np.column_stack([xs, ys]))


def test_a_chunk_outside_the_view_is_never_described_as_needed_by_it() -> None:
    """The map shows the view napari read; the cache hears of it a moment later (the
    dispatch thread). A chunk the map shows outside the view is not "needed by the view"
    in the same tooltip, whatever the cache has heard (issue 46: a test failed under load)."""
    from napari_lazy_zarr.widgets._explain import describe_chunk

    source = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="left")
    with ChunkCache(1 << 20, executor=ManualExecutor()) as cache:
        request = cache.request([ChunkRef.of(source, (0, 0))])
        key = ChunkRef.of(source, (0, 0)).key
        status, counters = cache.status(key), cache.counters()
        inside = describe_chunk("c", "[0:4]", status, counters, Shown.FILL, None, (), 0.0)
        outside = describe_chunk("c", "[0:4]", status, counters, Shown.OUTSIDE, None, (), 0.0)
        request.release()
    assert "needed by the view" in inside
    assert "not in the view" in outside
    assert "needed by the view" not in outside
    assert "queued for a view you left" in outside
