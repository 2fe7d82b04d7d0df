"""The view controller against NumPy: axis map, stand-ins, prefetch sets, the request cycle."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core import (
    ArraySource,
    ChunkCache,
    ChunkedArray,
    ChunkReadError,
    ChunkRef,
    ChunkState,
    InlineExecutor,
    ManualExecutor,
)
from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.keys import grid_shape
from napari_lazy_zarr.core.sources.decimated import DecimatedSource
from napari_lazy_zarr.core.testing import FaultySource
from napari_lazy_zarr.core.viewport import (
    AxisMap,
    MotionTracker,
    PlaneMotion,
    ViewController,
    coarser_fill,
    level_index,
    lookahead_planes,
    playback_level,
    prefetch_chunks,
    view_box,
)

FILL = -1


# -- strategies -----------------------------------------------------------------------------


@st.composite
def arrangements(draw: st.DrawFn) -> dict[str, Any]:
    """A store (2-5 axes, singleton axes allowed), a channel axis anywhere or none, a pyramid
    decimating the last two non-channel axes, chunks, and a napari-like view of one level."""
    rank = draw(st.integers(2, 5))
    shape = [draw(st.integers(1, 3)) for _ in range(rank - 2)] + [
        draw(st.integers(1, 24)) for _ in range(2)
    ]
    channel = draw(st.one_of(st.none(), st.integers(0, rank - 3))) if rank > 2 else None
    if channel is not None:
        shape[channel] = draw(st.integers(1, 3))
    spatial = [a for a in range(rank) if a != channel][-2:]
    levels = draw(st.integers(1, 3))
    chunks = [
        draw(st.integers(1, 3)) if a not in spatial else draw(st.integers(2, 8))
        for a in range(rank)
    ]
    return {
        "shape": tuple(shape),
        "channel": channel,
        "spatial": tuple(spatial),
        "levels": levels,
        "chunks": tuple(chunks),
        "seed": draw(st.integers(0, 2**16)),
        "resident": draw(st.lists(st.floats(0, 1), min_size=3, max_size=3)),
        "view": draw(st.integers(0, 2**16)),
    }


def _pyramid(arrangement: dict[str, Any]) -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(arrangement["seed"])
    base = rng.integers(0, 1000, size=arrangement["shape"]).astype(np.int32)
    out = []
    for level in range(arrangement["levels"]):
        step = [slice(None)] * base.ndim
        for axis in arrangement["spatial"]:
            step[axis] = slice(None, None, 2**level)
        out.append(base[tuple(step)])
    return out


# -- the axis map ---------------------------------------------------------------------------


@given(st.integers(1, 5), st.data())
def test_axis_map_matches_numpy_indexing(rank: int, data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    held = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank - 1))
    fixed = tuple((axis, data.draw(st.integers(0, shape[axis] - 1))) for axis in sorted(held))
    axis_map = AxisMap(rank, fixed=fixed)
    store = np.arange(int(np.prod(shape))).reshape(shape)
    layer = store[axis_map.store_index()]
    assert layer.shape == axis_map.layer_shape(shape)
    assert axis_map.layer_rank == layer.ndim
    for layer_axis in range(axis_map.layer_rank):
        store_axis = axis_map.store_axis(layer_axis)
        assert axis_map.layer_axis(store_axis) == layer_axis
        assert layer.shape[layer_axis] == shape[store_axis]
    for axis, _ in fixed:
        assert axis_map.layer_axis(axis) is None


def test_axis_map_refuses_axes_outside_the_store() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        AxisMap(3, fixed=((3, 0),))
    with pytest.raises(ValueError, match="do not fit"):
        AxisMap(3, fixed=((1, 0), (1, 1)))


# -- stand-ins from coarser levels ----------------------------------------------------------


@given(st.integers(1, 40), st.integers(1, 5))
def test_level_index_of_decimated_levels_is_floor_division(extent: int, k: int) -> None:
    factor = 2**k
    fine = np.arange(extent)
    coarse_extent = len(range(0, extent, factor))  # what base[::factor] has
    assert level_index(fine, extent, coarse_extent).tolist() == (fine // factor).tolist()


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(arrangements())
def test_coarser_fill_equals_numpy_nearest_neighbour(arrangement: dict[str, Any]) -> None:
    pyramid = _pyramid(arrangement)
    if len(pyramid) < 2:
        return
    rng = np.random.default_rng(arrangement["view"])
    sources = [
        ArraySource(level, chunks=arrangement["chunks"], name=f"l{i}")
        for i, level in enumerate(pyramid)
    ]
    resident: dict[Any, np.ndarray[Any, Any]] = {}
    for i, source in enumerate(sources[1:], start=1):
        for coords in itertools.product(*(range(n) for n in grid_shape(source))):
            if rng.random() < arrangement["resident"][i]:
                ref = ChunkRef.of(source, coords)
                resident[ref.key] = source.read_chunk(coords)
    fine = pyramid[0]
    region = tuple(tuple(sorted(rng.integers(0, n + 1, size=2).tolist())) for n in fine.shape)
    region = tuple(
        (lo, max(hi, lo + 1)) if lo < n else (n - 1, n)
        for (lo, hi), n in zip(region, fine.shape, strict=True)
    )
    filled = coarser_fill(region, fine.shape, sources[1:], resident.get, fine.dtype)
    # The oracle: each cell takes the nearest level whose covering chunk is resident.
    shape = tuple(hi - lo for lo, hi in region)
    expected = np.full(shape, FILL, dtype=fine.dtype)
    found = np.zeros(shape, dtype=bool)
    for source, coarse in zip(sources[1:], pyramid[1:], strict=True):
        index = [
            level_index(np.arange(lo, hi), fine.shape[a], coarse.shape[a])
            for a, (lo, hi) in enumerate(region)
        ]
        values = coarse[np.ix_(*index)]
        chunk_index = [
            np.array([int(source.grid[a].index_to_chunk(int(i))) for i in idx], dtype=np.intp)
            for a, idx in enumerate(index)
        ]
        here = np.zeros(shape, dtype=bool)
        for cell in itertools.product(*(range(n) for n in shape)):
            coords = tuple(int(chunk_index[a][c]) for a, c in enumerate(cell))
            here[cell] = ChunkRef.of(source, coords).key in resident
        use = here & ~found
        expected[use] = values[use]
        found |= use
    if not found.any():
        assert filled is None
        return
    assert filled is not None
    values, mask = filled
    np.testing.assert_array_equal(mask, found)
    np.testing.assert_array_equal(values[mask], expected[mask])


# -- prefetch sets --------------------------------------------------------------------------


@settings(max_examples=150)
@given(st.data())
def test_prefetch_is_the_ring_and_the_neighbouring_planes(data: st.DataObject) -> None:
    rank = data.draw(st.integers(2, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 12), min_size=rank, max_size=rank)))
    chunks = tuple(data.draw(st.integers(1, 4)) for _ in range(rank))
    source = ArraySource(np.zeros(shape, dtype=np.uint8), chunks=chunks, name="p")
    displayed = tuple(range(rank - 2, rank))
    planes = tuple(range(rank - 2))
    box = []
    for axis, n in enumerate(shape):
        if axis in displayed:
            lo = data.draw(st.integers(0, n - 1))
            box.append((lo, data.draw(st.integers(lo + 1, n))))
        else:
            at = data.draw(st.integers(0, n - 1))
            box.append((at, at + 1))
    found = prefetch_chunks(tuple(box), displayed, planes, source)
    assert len(found) == len(set(found))
    counts = grid_shape(source)
    needed = [
        range(int(g.index_to_chunk(lo)), int(g.index_to_chunk(hi - 1)) + 1)
        for g, (lo, hi) in zip(source.grid, box, strict=True)
    ]
    needed_set = set(itertools.product(*needed))
    ring = {
        c
        for c in itertools.product(*(range(n) for n in counts))
        if c not in needed_set
        and all(
            (needed[a].start - 1 <= c[a] <= needed[a].stop)
            if a in displayed
            else c[a] in needed[a]
            for a in range(rank)
        )
    }
    neighbours = set()
    for axis in planes:
        for cell in (box[axis][0] - 1, box[axis][1]):
            if 0 <= cell < shape[axis]:
                chunk = int(source.grid[axis].index_to_chunk(cell))
                for coords in needed_set:
                    moved = (*coords[:axis], chunk, *coords[axis + 1 :])
                    if moved not in needed_set:
                        neighbours.add(moved)
    assert set(found) == ring | neighbours


# -- the controller -------------------------------------------------------------------------


def _controller(
    arrangement: dict[str, Any], channel_index: int = 0, *, manual: bool = False
) -> tuple[ViewController, list[np.ndarray[Any, Any]], Any]:
    pyramid = _pyramid(arrangement)
    sources = [
        ArraySource(level, chunks=arrangement["chunks"], name=f"l{i}", fill_value=FILL)
        for i, level in enumerate(pyramid)
    ]
    executor: Any = ManualExecutor() if manual else InlineExecutor()
    cache = ChunkCache(1 << 26, executor=executor)
    channel = arrangement["channel"]
    fixed = (
        () if channel is None else ((channel, min(channel_index, pyramid[0].shape[channel] - 1)),)
    )
    controller = ViewController(
        sources,
        cache,
        axis_map=AxisMap(len(pyramid[0].shape), fixed=fixed),
        prefetch=False,
        dispatch=InlineExecutor(),
    )
    return controller, pyramid, executor


def _napari_view(controller: ViewController, level: int, rng: np.random.Generator) -> Any:
    """What napari reads: slices of the last two layer axes, integers elsewhere."""
    array = controller.arrays[level]
    index: list[Any] = []
    for axis, n in enumerate(array.shape):
        if axis >= array.ndim - 2:
            lo = int(rng.integers(0, n))
            index.append(slice(lo, int(rng.integers(lo + 1, n + 1))))
        else:
            index.append(int(rng.integers(0, n)))
    return array[tuple(index)], tuple(index)


def _show(
    controller: ViewController, level: int, view: Any, kind: Any = "view", dispatch: Any = None
) -> np.ndarray[Any, Any]:
    """What napari shows once it has answered every `view_changed`: read, and read again
    while a read would answer a newer frame (running a manual `dispatch` in between)."""
    data = controller.read(level, view, kind=kind)
    for _ in range(100):
        if dispatch is not None:
            dispatch.run_all()
        if not controller.refresh_pending:
            return data
        data = controller.read(level, view, kind=kind)
    raise AssertionError("the view never stopped changing")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrangements())
def test_controller_reads_equal_numpy_with_stand_ins(arrangement: dict[str, Any]) -> None:
    """Resident cells are exact, missing cells show the nearest resident coarser level or
    the fill value, and the complete view equals NumPy — channel axis anywhere."""
    controller, pyramid, executor = _controller(arrangement, channel_index=1, manual=True)
    try:
        rng = np.random.default_rng(arrangement["view"])
        axis_map = controller.axis_map
        layer_pyramid = [level[axis_map.store_index()] for level in pyramid]
        # Make a random share of every level's chunks resident.
        for level, source in enumerate(controller.sources):
            refs = [
                ChunkRef.of(source, c)
                for c in itertools.product(*(range(n) for n in grid_shape(source)))
                if rng.random() < arrangement["resident"][level]
            ]
            controller.cache.request(refs).release()
        executor.run_all()
        level = int(rng.integers(0, len(pyramid)))
        view, index = _napari_view(controller, level, rng)
        expected = layer_pyramid[level][index]
        for data in (controller.read(level, view, kind="view"), _show(controller, level, view)):
            assert data.shape == expected.shape
            # Cells whose chunk is resident are exact; the others a coarser value or FILL.
            for cell in itertools.product(*(range(n) for n in data.shape)):
                value = data[cell]
                if value == expected[cell]:
                    continue
                candidates = _coarser_values(controller, layer_pyramid, level, index, cell)
                assert value in [*candidates, FILL]
        executor.run_all()
        np.testing.assert_array_equal(_show(controller, level, view), expected)
        assert controller.complete
    finally:
        controller.close()
        controller.cache.close()


def _coarser_values(
    controller: ViewController,
    layer_pyramid: list[np.ndarray[Any, Any]],
    level: int,
    index: tuple[Any, ...],
    cell: tuple[int, ...],
) -> list[Any]:
    layer_cell: list[int] = []
    it = iter(cell)
    for selector in index:
        layer_cell.append(selector if isinstance(selector, int) else selector.start + next(it))
    fine_shape = layer_pyramid[level].shape
    values = []
    for coarse in layer_pyramid[level + 1 :]:
        coarse_cell = tuple(
            int(level_index(np.array([c]), fine_shape[a], coarse.shape[a])[0])
            for a, c in enumerate(layer_cell)
        )
        values.append(coarse[coarse_cell])
    return values


def test_a_channel_layer_of_a_pyramid_reads_with_stand_ins_without_error() -> None:
    """The crash ome-zarr-py's (c, y, x) images gave: stand-ins over a channel view."""
    arrangement = {
        "shape": (3, 16, 16),
        "channel": 0,
        "spatial": (1, 2),
        "levels": 3,
        "chunks": (1, 4, 4),
        "seed": 1,
        "resident": [0.0, 0.0, 1.0],
        "view": 0,
    }
    controller, pyramid, executor = _controller(arrangement, channel_index=2, manual=True)
    try:
        coarsest = controller.sources[2]
        refs = [
            ChunkRef.of(coarsest, c)
            for c in itertools.product(*(range(n) for n in grid_shape(coarsest)))
        ]
        controller.cache.request(refs).release()
        executor.run_all()
        view = controller.arrays[0][2:14, 0:16]
        data = _show(controller, 0, view)
        assert data.shape == (12, 16)
        expected = pyramid[2][2][np.ix_(np.arange(2, 14) // 4, np.arange(16) // 4)]
        np.testing.assert_array_equal(data, expected)
        executor.run_all()
        np.testing.assert_array_equal(_show(controller, 0, view), pyramid[0][2, 2:14])
        np.testing.assert_array_equal(np.asarray(controller.arrays[0]), pyramid[0][2])
    finally:
        controller.close()
        controller.cache.close()


_ONE_LEVEL: dict[str, Any] = {
    "shape": (12, 12),
    "channel": None,
    "spatial": (0, 1),
    "levels": 1,
    "chunks": (4, 4),
    "seed": 3,
    "resident": [0.0, 0.0, 0.0],
    "view": 0,
}


def _one_level(manual: bool = True) -> tuple[ViewController, np.ndarray[Any, Any], Any]:
    controller, pyramid, executor = _controller(_ONE_LEVEL, manual=manual)
    return controller, pyramid[0], executor


def test_view_changed_is_signalled_once_until_the_view_is_read_again() -> None:
    controller, data, executor = _one_level()
    signals: list[None] = []
    controller.view_changed.connect(lambda: signals.append(None))
    try:
        view = controller.arrays[0][0:8, 0:8]
        first = controller.read(0, view)
        assert (first == FILL).all()
        assert not controller.complete
        executor.run_next()
        executor.run_next()
        assert len(signals) == 1  # two chunks landed, one signal: nobody read in between
        controller.read(0, view)
        executor.run_all()
        assert len(signals) == 2
        assert controller.complete
        assert not controller.settled  # nothing applied a slice read after the last landing
        np.testing.assert_array_equal(_show(controller, 0, view), data[0:8, 0:8])
        controller.slice_applied()
        assert controller.settled
    finally:
        controller.close()
        controller.cache.close()


def test_a_frame_handed_out_is_never_written_again() -> None:
    """Real threads: every array a read returned keeps the values it had when returned
    (checked by fingerprint after every chunk landed), is read-only, and a refresh that
    finds nothing new answers the same frame again, without a copy."""
    import queue

    data = np.arange(32 * 32, dtype=np.int32).reshape(32, 32)
    pyramid = [data, data[::2, ::2]]
    cache = ChunkCache(1 << 22)  # its own worker threads
    controller = ViewController(_level_sources(pyramid, (4, 4), "w"), cache, prefetch=False)
    asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
    controller.view_changed.connect(lambda: asks.put(True))
    handed: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
    view = controller.arrays[0][:, :]

    def read() -> None:
        frame = controller.read(0, view)
        handed.append((frame, frame.copy()))
        controller.slice_applied()

    try:
        read()
        while not controller.settled:  # napari's part: read again when asked
            assert asks.get(timeout=30)
            read()
        np.testing.assert_array_equal(handed[-1][0], data)
        assert len(handed) >= 2
        for frame, fingerprint in handed:
            assert not frame.flags.writeable
            np.testing.assert_array_equal(frame, fingerprint)
        with pytest.raises(ValueError, match="read-only"):
            handed[-1][0][0, 0] = 7
        assert controller.read(0, view) is handed[-1][0]  # nothing new: the same frame
    finally:
        controller.close()
        cache.close()


def test_a_failed_chunk_shows_the_placeholder_and_is_reported_once() -> None:
    class Failing(ArraySource):
        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            if coords == (1, 1):
                raise OSError("disk on fire")
            return super().read_chunk(coords)

    base = np.arange(64, dtype=np.int32).reshape(8, 8)
    cache = ChunkCache(1 << 20, executor=InlineExecutor())
    controller = ViewController(
        [Failing(base, chunks=(4, 4), name="f", fill_value=FILL)],
        cache,
        prefetch=False,
        dispatch=InlineExecutor(),
    )
    reported: list[tuple[Any, ...]] = []
    controller.failures_found.connect(reported.append)
    try:
        view = controller.arrays[0][:, :]
        data = _show(controller, 0, view)
        assert (data[4:, 4:] == FILL).all()
        np.testing.assert_array_equal(data[:4], base[:4])
        assert len(reported) == 1
        assert controller.complete  # a FAILED chunk is not waited for
        assert controller.latest is not None
        assert len(controller.latest.failed) == 1
        (key,) = controller.latest.failed
        assert cache.state(key) is ChunkState.FAILED
        controller.slice_applied()
        assert controller.settled  # the placeholder of a failure is final
    finally:
        controller.close()
        cache.close()


def test_an_overview_frame_shows_the_level_without_a_failed_stored_chunk() -> None:
    """A virtual level's chunk combined without a failed stored chunk is READY *partial*:
    a frame shows it (that chunk's cells at the fill value, the rest the data), built
    after the loads (`next_frame`) and from a warm cache (`first_frame`) alike, and the
    view settles on it; the exact door refuses it."""
    # No zero in the data: the fill value (0) shows exactly where the failed chunk was.
    data = np.arange(1, 16 * 16 + 1, dtype=np.int32).reshape(16, 16)
    faulty = FaultySource(ArraySource(data, chunks=(4, 4), name="f"), failing={(1, 1)})
    overview = DecimatedSource(faulty, 2, chunk_size=4)
    expected = data[::2, ::2].copy()
    expected[2:4, 2:4] = 0  # rows and columns 4:8 of the stored level
    cache = ChunkCache(1 << 20, executor=InlineExecutor())
    controllers = [
        ViewController([faulty, overview], cache, prefetch=False, dispatch=InlineExecutor())
        for _ in range(2)
    ]
    try:
        for controller in controllers:  # cold (frames after the loads), then warm
            shown = _show(controller, 1, controller.arrays[1][:, :])
            np.testing.assert_array_equal(shown, expected)
            assert controller.latest is not None
            assert not controller.latest.missing  # the partial chunk is not waited for
            controller.slice_applied()
            assert controller.settled
        with pytest.raises(ChunkReadError, match=r"input chunk .* failed"):
            ChunkedArray(overview, cache).result(timeout=10)
    finally:
        for controller in controllers:
            controller.close()
        cache.close()


def test_view_box_refuses_strided_and_gathered_views() -> None:
    cache = ChunkCache(1 << 20)
    try:
        controller = ViewController(
            [ArraySource(np.zeros((4, 4)), chunks=(2, 2), name="s")], cache
        )
        array = controller.arrays[0]
        assert view_box(array[::2]) is None
        assert view_box(array.oindex[[0, 2], :]) is None
        assert view_box(array[1:3, 2]) == (((1, 3), (2, 3)), (0,))
        controller.close()
    finally:
        cache.close()


def test_requests_are_issued_off_the_reading_thread() -> None:
    """napari's slice call never runs cache events: they fire on the dispatch thread."""
    import threading

    cache = ChunkCache(1 << 20, executor=ManualExecutor())
    controller = ViewController(
        [ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="t")], cache, prefetch=False
    )
    threads: list[str] = []
    cache.state_changed.connect(lambda _: threads.append(threading.current_thread().name))
    read = threading.Event()
    controller.view_read.connect(lambda _: read.set())
    try:
        controller.read(0, controller.arrays[0][:, :])
        assert read.wait(timeout=10)
        assert threads
        assert threading.current_thread().name not in threads
    finally:
        controller.close()
        cache.close()


def test_frames_after_the_first_are_built_off_the_reading_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first read of a view copies what is resident; chunks landing later are copied
    into the next frame by the dispatch thread, and reading it copies nothing on the
    reading thread (a refresh of a 16 MB view is no 16 MB copy on napari's thread)."""
    import threading

    data = (np.arange(12 * 12) % 97).astype(np.int32).reshape(12, 12) + 1
    loads = ManualExecutor()
    cache = ChunkCache(1 << 20, executor=loads)
    controller = ViewController(
        _level_sources([data], (4, 4), "off"), cache, prefetch=False
    )  # its own dispatch thread
    reading = threading.current_thread()
    copiers: list[threading.Thread] = []
    from napari_lazy_zarr.core.reading.plans import StridedPlan

    copy_chunk = StridedPlan.copy_chunk

    def recording(self: StridedPlan, *args: Any) -> None:
        copiers.append(threading.current_thread())
        copy_chunk(self, *args)

    changed, issued = threading.Event(), threading.Event()
    controller.view_changed.connect(changed.set)
    controller.view_read.connect(lambda _: issued.set())
    monkeypatch.setattr(StridedPlan, "copy_chunk", recording)
    view = controller.arrays[0][:, :]
    try:
        cache.request([ChunkRef.of(controller.sources[0], (0, 0))]).release()
        loads.run_all()
        first = controller.read(0, view)
        assert copiers == [reading]  # the one resident chunk, on the reading thread
        assert (first[4:] == FILL).all()
        copiers.clear()
        assert issued.wait(timeout=10)  # the view's chunks are requested
        loads.run_all()  # the other eight land
        assert changed.wait(timeout=10)
        second = controller.read(0, view)
        np.testing.assert_array_equal(second, data)
        assert copiers
        assert reading not in copiers
        assert second is not first
        assert (first[4:] == FILL).all()  # the first frame was not written
    finally:
        controller.close()
        cache.close()


def test_a_read_never_waits_for_a_frame_being_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the dispatch thread builds the next frame (a copy under way), a read answers at
    once with the frame it has: there is no lock between napari's thread and a copy."""
    import threading

    from napari_lazy_zarr.core.reading.plans import StridedPlan

    data = (np.arange(12 * 12) % 97).astype(np.int32).reshape(12, 12) + 1
    loads = ManualExecutor()
    cache = ChunkCache(1 << 20, executor=loads)
    controller = ViewController(_level_sources([data], (4, 4), "busy"), cache, prefetch=False)
    view = controller.arrays[0][:, :]
    building, release = threading.Event(), threading.Event()
    copy_chunk = StridedPlan.copy_chunk
    reader = threading.current_thread()

    def slow(self: StridedPlan, *args: Any) -> None:
        if threading.current_thread() is not reader:
            building.set()
            assert release.wait(timeout=30)
        copy_chunk(self, *args)

    issued = threading.Event()
    controller.view_read.connect(lambda _: issued.set())
    try:
        first = controller.read(0, view)
        assert issued.wait(timeout=10)  # the view's chunks are requested
        monkeypatch.setattr(StridedPlan, "copy_chunk", slow)
        loads.run_all()  # the dispatch thread starts the next frame and stops in a copy
        assert building.wait(timeout=10)
        again = controller.read(0, view)  # would wait if a read could wait for a copy
        assert again is first
        release.set()
    finally:
        release.set()
        controller.close()
        cache.close()


def test_a_refresh_that_finds_nothing_new_is_not_planned_again() -> None:
    """A read of a view already requested, with nothing landed or evicted since, does not ask
    the cache again (its live request pins and queues the same work); a new frame, or the
    eviction of what the view prefetched, does."""
    data = np.arange(144, dtype=np.int32).reshape(12, 12)
    source = ArraySource(data, chunks=(4, 4), name="r", fill_value=FILL)
    executor = ManualExecutor()
    cache = ChunkCache(1 << 20, executor=executor)
    controller = ViewController([source], cache, dispatch=InlineExecutor())
    answered: list[Any] = []
    controller.view_read.connect(answered.append)

    def asked() -> int:
        """Chunks the view's requests asked the cache for (each counts a hit or a miss)."""
        counters = cache.counters()
        return counters.hits + counters.misses

    try:
        view = controller.arrays[0][0:8, 0:8]  # 4 chunks, and a ring of 5 around them
        controller.read(0, view)
        assert asked() == 4
        for _ in range(3):  # refreshes that find nothing new
            controller.read(0, view)
        assert asked() == 4
        assert len(answered) == 4  # every read is still answered (the inspector follows them)
        executor.run_next()  # a chunk of the view lands: its next frame is built
        controller.read(0, view)  # reads it: asked again
        assert asked() == 8
        controller.read(0, view)
        assert asked() == 8
        executor.run_all()
        np.testing.assert_array_equal(_show(controller, 0, view), data[0:8, 0:8])
        asked_now = asked()
        controller.read(0, view)
        assert asked() == asked_now  # complete, nothing new
        loads = cache.counters().loads
        assert cache.evict_unpinned() == 5  # the prefetched ring
        controller.read(0, view)
        assert asked() == asked_now + 4  # asked again: the ring is queued again
        executor.run_all()
        assert cache.counters().loads == loads + 5
        np.testing.assert_array_equal(_show(controller, 0, view), data[0:8, 0:8])
    finally:
        controller.close()
        cache.close()


def test_a_landing_in_the_view_a_read_replaces_asks_for_no_read_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk of the old view lands while napari's read of a new view is under way
    (the switch to 3D: 2D chunks still landing). The read answers the new view; once it
    is applied no refresh is pending (`refresh_pending`), so the glue does not have napari
    read, upload and paint the same volume again."""
    from napari_lazy_zarr.core.viewport.view_plans import ViewPlans

    controller, _, executor = _one_level()
    original = ViewPlans.plan
    during: list[bool] = []

    def landing_meanwhile(self: ViewPlans, *args: Any) -> Any:
        if not during:  # the new view's plan, before it is registered as shown
            during.append(True)
            executor.run_all()  # the old view's chunks land now
        return original(self, *args)

    try:
        controller.read(0, controller.arrays[0][0:8, 0:8])
        monkeypatch.setattr(ViewPlans, "plan", landing_meanwhile)
        controller.read(0, controller.arrays[0][4:12, 4:12])
        assert during  # the old view's chunks landed during the read
        controller.slice_applied()  # napari applies the new view's slice
        assert not controller.refresh_pending
    finally:
        controller.close()
        controller.cache.close()


def test_a_view_landing_before_the_thumbnail_read_keeps_a_refresh_pending() -> None:
    """napari reads the view, then the thumbnail, then applies the slice. A chunk of the
    view landing between the two reads is not in the slice: the refresh stays pending
    (the glue asks napari to read again), and the view's next read clears it."""
    controller, _, executor = _controller({**_ONE_LEVEL, "levels": 2}, manual=True)
    fine, coarse = controller.arrays
    try:
        controller.read(0, fine[0:8, 0:8], kind="view")
        controller.read(1, coarse[:, :], kind="thumbnail")
        controller.slice_applied()
        controller.read(0, fine[0:8, 0:8], kind="view")  # a refresh (stand-ins composed)
        executor.run_next()  # one of the view's chunks lands before the thumbnail's read
        controller.read(1, coarse[:, :], kind="thumbnail")
        controller.slice_applied()
        assert controller.refresh_pending
        controller.read(0, fine[0:8, 0:8], kind="view")  # the refresh
        controller.read(1, coarse[:, :], kind="thumbnail")
        controller.slice_applied()
        assert not controller.refresh_pending
    finally:
        controller.close()
        controller.cache.close()


def test_wait_until_settled_wakes_when_the_viewer_shows_the_last_landing() -> None:
    """Real threads: the cache's workers land chunks, a viewer thread reads again when asked
    and applies the slice; the waiter sleeps until then, and no longer than its timeout."""
    import queue
    import threading

    gate = threading.Event()

    class Gated(ArraySource):
        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            assert gate.wait(timeout=30)
            return super().read_chunk(coords)

    data = np.arange(32 * 32, dtype=np.int32).reshape(32, 32)
    cache = ChunkCache(1 << 20)  # its own worker threads
    controller = ViewController(  # its own dispatch thread
        [Gated(data, chunks=(8, 8), name="w", fill_value=FILL)], cache, prefetch=False
    )
    asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
    controller.view_changed.connect(lambda: asks.put(True))
    view = controller.arrays[0][:, :]
    shown: list[np.ndarray[Any, Any]] = []

    def viewer() -> None:  # napari's part: read again when asked, then show the slice
        while asks.get(timeout=30):
            shown.append(controller.read(0, view))
            controller.slice_applied()

    thread = threading.Thread(target=viewer, daemon=True)
    thread.start()
    try:
        assert controller.wait_until_settled(timeout=0)  # nothing read: nothing to wait for
        first = controller.read(0, view)
        controller.slice_applied()
        assert not controller.wait_until_settled(timeout=0.05)  # the loads wait at the gate
        gate.set()
        assert controller.wait_until_settled(timeout=30)
        assert controller.complete
        assert (first == FILL).all()  # what napari held first never changed
        np.testing.assert_array_equal(shown[-1], data)  # the last frame it read is whole
    finally:
        gate.set()
        asks.put(False)
        thread.join(timeout=30)
        controller.close()
        cache.close()
    assert not thread.is_alive()


# -- time and depth: playback and volumes -------------------------------------------------


@given(
    position=st.integers(0, 60),
    extent=st.integers(1, 61),
    direction=st.sampled_from([1, -1]),
    rate=st.floats(0.5, 60),
    latency=st.floats(0, 1),
    frame_bytes=st.integers(1, 1000),
    budget=st.integers(0, 20_000),
    wrap=st.booleans(),
)
def test_lookahead_planes_lie_ahead_nearest_first_within_the_budget(
    position: int,
    extent: int,
    direction: int,
    rate: float,
    latency: float,
    frame_bytes: int,
    budget: int,
    wrap: bool,
) -> None:
    position = min(position, extent - 1)
    planes = lookahead_planes(
        position,
        direction,
        extent,
        rate=rate,
        latency=latency,
        frame_bytes=frame_bytes,
        budget_bytes=budget,
        wrap=wrap,
    )
    # Each plane is the next step of the walk from the previous one (wrapping or not).
    walk = [position, *planes]
    for before, after in itertools.pairwise(walk):
        assert after == (before + direction) % extent
        assert wrap or after == before + direction
    assert position not in planes
    assert len(set(planes)) == len(planes)
    assert len(planes) * frame_bytes <= budget  # never more than its share of the cache
    # Deep enough for twice the latency plus a second at this rate, unless the budget,
    # the axis or its end (without wrapping) stops it.
    wanted = max(1, math.ceil(rate * (2 * latency + 1.0)))
    room = extent - 1 if wrap else (extent - 1 - position if direction > 0 else position)
    assert len(planes) == min(wanted, budget // frame_bytes, room, extent - 1)


@given(
    chunks=st.lists(st.integers(1, 500), min_size=1, max_size=6).map(
        lambda c: sorted(c, reverse=True)
    ),
    finest=st.integers(0, 5),
    rate=st.floats(0.5, 60),
    latency=st.floats(0.001, 1),
    concurrency=st.integers(1, 64),
)
def test_playback_level_is_the_finest_that_keeps_up(
    chunks: list[int], finest: int, rate: float, latency: float, concurrency: int
) -> None:
    level = playback_level(
        chunks, finest=finest, rate=rate, latency=latency, concurrency=concurrency
    )
    finest = min(finest, len(chunks) - 1)
    assert finest <= level < len(chunks)
    keeps_up = [rate * n * latency <= concurrency for n in chunks]
    if keeps_up[level]:
        assert not any(keeps_up[finest:level])  # none finer keeps up
    else:
        assert level == len(chunks) - 1
        assert not any(keeps_up[finest:])
    # A faster walk or a slower store never asks for a finer level.
    slower = playback_level(
        chunks, finest=finest, rate=rate * 2, latency=latency, concurrency=concurrency
    )
    assert slower >= level


def test_motion_needs_two_steps_one_way_and_forgets_after_a_pause() -> None:
    tracker = MotionTracker(idle=0.5)
    assert tracker.observe({0: 0, 1: 3}, now=0.0) is None
    assert tracker.observe({0: 1, 1: 3}, now=0.1) is None
    motion = tracker.observe({0: 2, 1: 3}, now=0.3)
    assert motion is not None
    assert (motion.axis, motion.direction) == (0, 1)
    assert math.isclose(motion.rate, 5.0)
    assert tracker.observe({0: 2, 1: 3}, now=1.0) is None  # paused longer than `idle`
    assert tracker.observe({0: 2, 1: 2}, now=1.1) is None
    assert tracker.observe({0: 2, 1: 1}, now=1.2) == PlaneMotion(1, -1, 1 / (1.2 - 1.1))
    assert tracker.observe({0: 3, 1: 0}, now=1.3) is None  # a jump along two axes


def _movie(
    frames: int = 6, *, share: float = 0.5, manual: bool = True
) -> tuple[ViewController, list[np.ndarray[Any, Any]], Any]:
    """A (t, y, x) movie with two levels, 2x2 chunks per frame at level 0, one at level 1."""
    data = (np.arange(frames * 8 * 8) % 1000).astype(np.int32).reshape(frames, 8, 8) + 1
    pyramid = [data, data[:, ::2, ::2]]
    executor: Any = ManualExecutor() if manual else InlineExecutor()
    cache = ChunkCache(1 << 20, executor=executor)
    sources = [
        ArraySource(level, chunks=(1, 4, 4), name=f"m{i}", fill_value=FILL)
        for i, level in enumerate(pyramid)
    ]
    controller = ViewController(
        sources, cache, prefetch=True, dispatch=InlineExecutor(), lookahead_share=share
    )
    return controller, pyramid, executor


def _held(controller: ViewController) -> bool:
    latest = controller.latest
    assert latest is not None
    return latest.held


def test_a_step_holds_the_last_complete_frame_until_a_backdrop_is_resident() -> None:
    controller, pyramid, executor = _movie()
    try:
        frame = controller.arrays[0]
        controller.read(0, frame[0])
        executor.run_all()
        shown = _show(controller, 0, frame[0])
        np.testing.assert_array_equal(shown, pyramid[0][0])
        controller.cache.evict_unpinned()  # nothing of t=1 resident, not even prefetched
        held = controller.read(0, frame[1])
        assert _held(controller)
        np.testing.assert_array_equal(held, pyramid[0][0])  # not the fill value
        # The coarse backdrop of t=1 lands first (a coarser level loads before a finer one).
        controller.cache.request([ChunkRef.of(controller.sources[1], (1, 0, 0))]).release()
        executor.run_next()
        backdrop = _show(controller, 0, frame[1])
        assert not _held(controller)
        np.testing.assert_array_equal(backdrop, np.repeat(np.repeat(pyramid[1][1], 2, 0), 2, 1))
        executor.run_all()
        np.testing.assert_array_equal(_show(controller, 0, frame[1]), pyramid[0][1])
        # A pan is not a step: it shows its placeholder cells at once, never an old frame.
        controller.read(0, frame[2, 0:4])
        assert not _held(controller)
    finally:
        controller.close()
        controller.cache.close()


def test_a_walk_loads_ahead_in_its_direction_within_its_share_of_the_cache() -> None:
    # A 1 MiB cache; a frame is 256 bytes at level 0, 64 at level 1 (the coarse backdrop):
    # a share of 256 bytes takes the backdrop of four planes ahead, and nothing more.
    controller, pyramid, executor = _movie(frames=12, share=256 / (1 << 20))
    try:
        frame = controller.arrays[0]
        for t in (7, 6, 5):  # stepping backwards
            controller.read(0, frame[t])
        motion = controller.motion
        assert motion is not None
        assert (motion.axis, motion.direction) == (0, -1)
        cache = controller.cache

        def classes(level: int, t: int) -> set[Any]:
            source = controller.sources[level]
            counts = grid_shape(source)
            return {
                cache.status(ChunkRef.of(source, (t, y, x)).key).load_class
                for y in range(counts[1])
                for x in range(counts[2])
            }

        assert classes(0, 5) == {LoadClass.NEEDED}
        for t in (4, 3, 2, 1):  # the backdrop of four planes ahead
            assert classes(1, t) == {LoadClass.AHEAD}, t
        assert classes(1, 0) == {None}  # beyond the budget
        assert classes(0, 9) == {None}
        assert classes(1, 8) == {None}
        executor.run_all()
        # Stepping on: the frame ahead is presentable at once (its backdrop is resident).
        shown = _show(controller, 0, frame[4])
        assert not _held(controller)
        assert (shown != FILL).all()
        # Stepping back reuses what is resident: the frames seen are complete.
        np.testing.assert_array_equal(_show(controller, 0, frame[6]), pyramid[0][6])
    finally:
        controller.close()
        controller.cache.close()


def test_the_next_frames_of_a_walk_are_built_before_napari_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The frames just ahead of a walk, and their thumbnails, are planned and built once
    their chunks have landed, off the reading thread: napari's reads of the next frame copy
    nothing and show NumPy's values; a step elsewhere still gets a frame of its own, and a
    still view prepares nothing."""
    from napari_lazy_zarr.core.viewport.planes import PREPARED_PLANES

    controller, pyramid, executor = _movie(frames=12)
    levels = controller.arrays

    def staged() -> dict[tuple[int, int], Any]:  # by (level, t): the built frames
        return {(r.level, r.box[0][0]): f for r, _, f in controller._planes.staged}

    try:
        for t in (2, 3, 4):  # a walk forwards, as napari plays: the view and its thumbnail
            controller.read(0, levels[0][t])
            controller.read(1, levels[1][t])
            executor.run_all()
        assert controller.motion is not None
        ahead = range(5, 5 + PREPARED_PLANES)
        assert sorted(staged()) == sorted((level, t) for level in (0, 1) for t in ahead)
        copied_into = _copy_recorder(monkeypatch)
        for t in (5, 6):
            for level in (0, 1):
                prepared = staged()[level, t]
                assert prepared is not None
                assert not prepared.missing  # built once its chunks landed
                shown = controller.read(level, levels[level][t])
                assert shown is prepared.data  # no copy on the reading thread
                np.testing.assert_array_equal(shown, pyramid[level][t])
            executor.run_all()
        copied_into.clear()
        jumped = controller.read(0, levels[0][0])  # not ahead: a frame of its own
        assert sum(np.shares_memory(out, jumped) for out in copied_into) == 4
        np.testing.assert_array_equal(jumped, pyramid[0][0])
        executor.run_all()
        assert controller.motion is None
        controller.read(0, levels[0][0])
        assert controller._planes.staged == []
    finally:
        controller.close()
        controller.cache.close()


def test_a_walk_over_part_of_a_frame_builds_its_whole_thumbnail_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """napari's 2D thumbnail is the coarsest level's whole plane, however little of the frame
    the view shows: ahead of a walk it is loaded and built whole too, so napari's read of
    the next thumbnail copies nothing and needs no second slice (measured: 4 chunks copied on
    its main thread each z step; a third slice each t step, when the thumbnail landed)."""
    data = (np.arange(12 * 16 * 16) % 997).astype(np.int32).reshape(12, 16, 16) + 1
    pyramid = [data, data[:, ::2, ::2]]
    executor = ManualExecutor()
    cache = ChunkCache(1 << 22, executor=executor)
    sources = _level_sources(pyramid, (1, 4, 4), "p")
    controller = ViewController(sources, cache, prefetch=True, dispatch=InlineExecutor())
    view, thumbnail = controller.arrays
    try:
        for t in (2, 3, 4):  # a walk over part of the frame, and the thumbnail
            controller.read(0, view[t, 0:8, 0:12])
            controller.read(1, thumbnail[t])
            executor.run_all()
        assert controller.motion is not None
        copied_into = _copy_recorder(monkeypatch)
        controller.read(0, view[5, 0:8, 0:12])
        shown = controller.read(1, thumbnail[5])
        assert not any(np.shares_memory(out, shown) for out in copied_into)
        np.testing.assert_array_equal(shown, pyramid[1][5])  # whole: nothing left to land
    finally:
        controller.close()
        cache.close()


def test_the_look_ahead_takes_the_whole_thumbnail_only_when_it_costs_no_more_than_the_view() -> (
    None
):
    """A coarsest plane larger than the view (a pyramid of few levels, zoomed in) would take
    the look-ahead's budget from the view's own level: then only the part under the view."""
    from napari_lazy_zarr.core.viewport.frames import ViewRequest
    from napari_lazy_zarr.core.viewport.prefetch import lookahead_chunks

    data = np.zeros((12, 16, 16), dtype=np.int32)
    sources = _level_sources([data, data[:, ::2, ::2]], (1, 4, 4), "b")

    def coarse(box: tuple[tuple[int, int], ...]) -> set[tuple[int, ...]]:
        request = ViewRequest(0, box, (1, 2), 1)
        refs = lookahead_chunks(
            request, PlaneMotion(0, 1, 2.0), sources, latency=0.0, concurrency=1,
            budget_bytes=1 << 20,
        )  # fmt: skip
        coarsest = sources[1].identity  # on the next plane
        return {ref.coords for ref in refs if ref.key.source == coarsest and ref.coords[0] == 5}

    assert coarse(((4, 5), (0, 8), (0, 12))) == {(5, y, x) for y in (0, 1) for x in (0, 1)}
    assert coarse(((4, 5), (0, 4), (0, 4))) == {(5, 0, 0)}  # the view's part of it only


def test_a_prepared_volume_is_built_before_it_is_read() -> None:
    data = (np.arange(8 * 16 * 16) % 997).astype(np.int32).reshape(8, 16, 16)
    pyramid = [data, data[::2, ::2, ::2]]
    cache = ChunkCache(1 << 22, executor=InlineExecutor())
    sources = [
        ArraySource(level, chunks=(4, 4, 4), name=f"v{i}", fill_value=FILL)
        for i, level in enumerate(pyramid)
    ]
    controller = ViewController(sources, cache, prefetch=False, dispatch=InlineExecutor())
    ready: list[int] = []
    controller.volume_ready.connect(ready.append)
    try:
        coarse = _show(controller, 1, controller.arrays[1][:, :, :])
        np.testing.assert_array_equal(coarse, pyramid[1])
        assert not controller.volume_complete(0)
        assert controller.volume_box(0) == ((0, 8), (0, 16), (0, 16))
        controller.prepare_volumes([0])
        assert ready == [0]
        assert controller.volume_complete(0)
        staged = controller._volumes.staged[0][3]
        assert staged is not None
        fine = controller.read(0, controller.arrays[0][:, :, :])
        assert fine is staged.data  # no copy on the reading thread
        np.testing.assert_array_equal(fine, pyramid[0])
        controller.prepare_volumes([])  # releases the volume's chunks
        key = ChunkRef.of(sources[0], (0, 0, 0)).key
        assert cache.is_pinned(key)  # still: the view napari shows pins them
    finally:
        controller.close()
        cache.close()


def test_a_step_in_3d_is_built_off_the_reading_thread_while_the_last_volume_is_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = (np.arange(3 * 8 * 8 * 8) % 991).astype(np.int32).reshape(3, 8, 8, 8) + 1
    cache = ChunkCache(1 << 22, executor=InlineExecutor())
    source = ArraySource(data, chunks=(1, 4, 4, 4), name="t", fill_value=FILL)
    dispatch = ManualExecutor()
    controller = ViewController([source], cache, prefetch=False, dispatch=dispatch)
    volume = controller.arrays[0]
    try:
        controller.read(0, volume[0])
        dispatch.run_all()  # requested and loaded (inline), then built
        np.testing.assert_array_equal(_show(controller, 0, volume[0], dispatch=dispatch), data[0])
        refs = [ChunkRef.of(source, (1, z, y, x)) for z in (0, 1) for y in (0, 1) for x in (0, 1)]
        cache.request(refs).release()  # t=1 all resident, as a look-ahead leaves it
        copied = _copy_counter(monkeypatch)
        held = controller.read(0, volume[1])  # napari's read of the step
        assert copied[0] == 0  # no chunk copied on the reading thread
        assert _held(controller)
        np.testing.assert_array_equal(held, data[0])  # the last whole volume, not the fill
        changed: list[bool] = []
        controller.view_changed.connect(lambda: changed.append(True))
        dispatch.run_all()  # the dispatch thread builds it, then asks for a read
        assert copied[0] == 8
        assert changed == [True]
        copied[0] = 0
        np.testing.assert_array_equal(controller.read(0, volume[1]), data[1])
        assert copied[0] == 0
        assert not _held(controller)
        # Stepped on twice before the dispatch thread ran: only the latest is built.
        for t in (0, 2):
            cache.request([ChunkRef.of(source, (t, *ref.coords[1:])) for ref in refs]).release()
        controller.read(0, volume[0])
        controller.read(0, volume[2])
        assert copied[0] == 0
        dispatch.run_all()
        assert copied[0] == 8
        np.testing.assert_array_equal(controller.read(0, volume[2]), data[2])
    finally:
        controller.close()
        cache.close()


def _level_sources(
    pyramid: list[np.ndarray[Any, Any]], chunks: tuple[int, ...], name: str
) -> list[ArraySource]:
    """A pyramid's levels as sources with the `FILL` placeholder."""
    return [
        ArraySource(level, chunks=chunks, name=f"{name}{i}", fill_value=FILL)
        for i, level in enumerate(pyramid)
    ]


def _copy_counter(monkeypatch: pytest.MonkeyPatch, method: str = "copy_chunk") -> list[int]:
    """Counts `StridedPlan.copy_chunk` calls (the copies frames are built with), or another
    `method`'s (``fill_missing``: the placeholders it writes), in its one cell."""
    from napari_lazy_zarr.core.reading.plans import StridedPlan

    calls = [0]
    original = getattr(StridedPlan, method)

    def counting(self: StridedPlan, *args: Any) -> None:
        calls[0] += 1
        original(self, *args)

    monkeypatch.setattr(StridedPlan, method, counting)
    return calls


def _copy_recorder(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray[Any, Any]]:
    """The buffers `StridedPlan.copy_chunk` copies into, in order."""
    from napari_lazy_zarr.core.reading.plans import StridedPlan

    into: list[np.ndarray[Any, Any]] = []
    original = StridedPlan.copy_chunk

    def recording(self: StridedPlan, out: Any, key: Any, data: Any) -> None:
        into.append(out)
        original(self, out, key, data)

    monkeypatch.setattr(StridedPlan, "copy_chunk", recording)
    return into


def test_a_3d_thumbnail_step_is_held_and_built_off_the_reading_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In 3D napari reads the coarsest level's whole volume as the thumbnail on every t step
    (measured: 16 chunks, 19-33 ms of copies per step on its main thread): it is held and
    built on the dispatch thread, as the view is."""
    data = (np.arange(3 * 8 * 8 * 8) % 991).astype(np.int32).reshape(3, 8, 8, 8) + 1
    pyramid = [data, data[:, ::2, ::2, ::2]]
    cache = ChunkCache(1 << 22, executor=InlineExecutor())
    sources = _level_sources(pyramid, (1, 2, 2, 2), "v")
    dispatch = ManualExecutor()
    controller = ViewController(sources, cache, prefetch=False, dispatch=dispatch)
    view, thumbnail = controller.arrays
    try:
        for _ in range(2):  # requested and loaded (inline), then read whole
            controller.read(0, view[0], kind="view")
            controller.read(1, thumbnail[0], kind="thumbnail")
            dispatch.run_all()
        np.testing.assert_array_equal(controller.read(1, thumbnail[0]), pyramid[1][0])
        _resident(cache, sources, 1)
        copied = _copy_counter(monkeypatch)
        controller.read(0, view[1], kind="view")
        held = controller.read(1, thumbnail[1], kind="thumbnail")  # napari's read of the step
        assert copied[0] == 0  # neither volume copied on the reading thread
        np.testing.assert_array_equal(held, pyramid[1][0])  # the last whole one, not the fill
        dispatch.run_all()  # the dispatch thread builds both
        assert copied[0] == 8**3 // 2**3 + 4**3 // 2**3
        copied[0] = 0
        np.testing.assert_array_equal(controller.read(1, thumbnail[1]), pyramid[1][1])
        np.testing.assert_array_equal(controller.read(0, view[1]), pyramid[0][1])
        assert copied[0] == 0
    finally:
        controller.close()
        cache.close()


def _resident(cache: ChunkCache, sources: list[ArraySource], t: int) -> None:
    """Every level's chunks of plane `t` resident (not pinned), as a look-ahead leaves them."""
    for level, source in enumerate(sources):
        grid = grid_shape(source)
        cache.request(
            [ChunkRef.of(source, (t, *c)) for c in np.ndindex(*grid[1:])], level=level
        ).release()


def _stepped_in_3d(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> tuple[ViewController, ManualExecutor, list[np.ndarray[Any, Any]], list[int]]:
    """A two-level 4D layer shown whole in 3D at t=0, then stepped to t=1 (resident):
    napari's reads of the step answered (held), nothing yet run on the `dispatch`
    thread returned; and the copies of chunks counted from the step on."""
    data = (np.arange(3 * 8 * 8 * 8) % 991).astype(np.int32).reshape(3, 8, 8, 8) + 1
    pyramid = [data, data[:, ::2, ::2, ::2]]
    cache = ChunkCache(1 << 22, executor=InlineExecutor())
    sources = _level_sources(pyramid, (1, 2, 2, 2), name)
    dispatch = ManualExecutor()
    controller = ViewController(sources, cache, prefetch=False, dispatch=dispatch)
    view, thumbnail = controller.arrays
    for _ in range(2):  # requested and loaded (inline), then read whole
        controller.read(0, view[0], kind="view")
        controller.read(1, thumbnail[0], kind="thumbnail")
        dispatch.run_all()
    _resident(cache, sources, 1)
    copied = _copy_counter(monkeypatch)
    controller.read(0, view[1], kind="view")
    controller.read(1, thumbnail[1], kind="thumbnail")
    return controller, dispatch, pyramid, copied


def test_a_3d_step_asks_for_one_read_once_its_view_and_thumbnail_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both volumes of a 3D t step are built on the dispatch thread, the view first;
    napari is asked to read once, when both can be shown. Asked after the view, it read the
    held thumbnail, and the thumbnail's own refresh came 0.6 s later, paced behind the
    upload and paint of the view's volume (measured, a t step complete in 1.0 s, not 0.5)."""
    controller, dispatch, pyramid, _ = _stepped_in_3d(monkeypatch, "one")
    view, thumbnail = controller.arrays
    emitted: list[None] = []
    controller.view_changed.connect(lambda: emitted.append(None))
    shown: list[tuple[bool, bool]] = []  # what napari reads at each ask: view, thumbnail new?
    try:
        while dispatch.run_next():
            if emitted:
                emitted.clear()
                new_view = controller.read(0, view[1], kind="view")
                new_thumbnail = controller.read(1, thumbnail[1], kind="thumbnail")
                shown.append(
                    (
                        np.array_equal(new_view, pyramid[0][1]),
                        np.array_equal(new_thumbnail, pyramid[1][1]),
                    )
                )
        assert shown == [(True, True)]
    finally:
        controller.close()
        controller.cache.close()


def test_volumes_napari_already_reads_are_not_prepared_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a 3D t step the napari glue prepares the volumes of the new planes
    (`prepare_volumes`): the view's level and the coarsest, which napari reads as the view
    and the thumbnail, are built as those and not copied a second time (measured: the
    view's 128 MB copied again, 406 ms of a core while napari painted)."""
    controller, dispatch, pyramid, copied = _stepped_in_3d(monkeypatch, "twice")
    view, thumbnail = controller.arrays
    ready: list[int] = []
    controller.volume_ready.connect(ready.append)
    try:
        controller.prepare_volumes([1, 0])  # as the glue does while the step is held
        dispatch.run_all()
        assert copied[0] == 8**3 // 2**3 + 4**3 // 2**3  # each chunk once
        assert controller.volume_complete(0)
        assert controller.volume_complete(1)
        assert not ready  # none prepared, so none to announce: the views' reads show them
        np.testing.assert_array_equal(controller.read(0, view[1], kind="view"), pyramid[0][1])
        np.testing.assert_array_equal(controller.read(1, thumbnail[1]), pyramid[1][1])
        assert copied[0] == 8**3 // 2**3 + 4**3 // 2**3
    finally:
        controller.close()
        controller.cache.close()


def test_a_held_3d_thumbnail_asks_for_a_read_only_once_it_can_be_shown() -> None:
    """A 3D t step whose view is resident and whose thumbnail is not: the view is shown at
    once, the thumbnail held, and its chunks landing ask napari for no read (each one an
    upload and paint of the same volumes) until the last of them."""
    data = (np.arange(3 * 8 * 8 * 8) % 991).astype(np.int32).reshape(3, 8, 8, 8) + 1
    pyramid = [data, data[:, ::2, ::2, ::2]]
    executor = ManualExecutor()
    cache = ChunkCache(1 << 22, executor=executor)
    sources = _level_sources(pyramid, (1, 2, 2, 2), "w")
    controller = ViewController(sources, cache, prefetch=False, dispatch=InlineExecutor())
    changed: list[None] = []
    controller.view_changed.connect(lambda: changed.append(None))
    view, thumbnail = controller.arrays
    try:
        for _ in range(3):  # requested and loaded, then read whole
            controller.read(0, view[0], kind="view")
            controller.read(1, thumbnail[0], kind="thumbnail")
            executor.run_all()
        grid = grid_shape(sources[0])
        cache.request([ChunkRef.of(sources[0], (1, *c)) for c in np.ndindex(*grid[1:])]).release()
        executor.run_all()  # the view's chunks of t=1 resident, not the thumbnail's
        controller.read(0, view[1], kind="view")
        np.testing.assert_array_equal(
            controller.read(1, thumbnail[1], kind="thumbnail"), pyramid[1][0]
        )
        np.testing.assert_array_equal(controller.read(0, view[1], kind="view"), pyramid[0][1])
        changed.clear()
        for _ in range(4**3 // 2**3 - 1):
            executor.run_next()
            assert not changed  # napari would read the held thumbnail again
        executor.run_next()
        assert len(changed) == 1
        np.testing.assert_array_equal(controller.read(1, thumbnail[1]), pyramid[1][1])
    finally:
        controller.close()
        cache.close()


def test_a_3d_step_onto_a_volume_prepared_but_not_loaded_holds_the_last_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A volume `prepare_volumes` started at the new plane, its chunks still loading, is
    neither copied nor filled with placeholders on the reading thread (measured: 79 ms of
    napari's main thread for a 3D thumbnail): the last whole frame is held meanwhile."""
    data = (np.arange(3 * 8 * 8 * 8) % 991).astype(np.int32).reshape(3, 8, 8, 8) + 1
    pyramid = [data, data[:, ::2, ::2, ::2]]
    loads, dispatch = ManualExecutor(), ManualExecutor()
    cache = ChunkCache(1 << 22, executor=loads)
    sources = _level_sources(pyramid, (1, 2, 2, 2), "p")
    controller = ViewController(sources, cache, prefetch=False, dispatch=dispatch)
    view, thumbnail = controller.arrays
    try:
        for _ in range(3):  # requested, loaded, then read whole
            controller.read(0, view[0], kind="view")
            controller.read(1, thumbnail[0], kind="thumbnail")
            dispatch.run_all()
            loads.run_all()
        dispatch.run_all()
        np.testing.assert_array_equal(controller.read(1, thumbnail[0]), pyramid[1][0])
        controller.read(0, view[1], kind="view")  # the step: the view is held
        controller.prepare_volumes([1])  # as the napari glue does after a 3D read
        dispatch.run_all()  # the view's chunks and the volume at t=1 requested, none loaded
        copied = _copy_counter(monkeypatch)
        filled = _copy_counter(monkeypatch, "fill_missing")
        held = controller.read(1, thumbnail[1], kind="thumbnail")
        assert (copied[0], filled[0]) == (0, 0)  # nothing written on the reading thread
        np.testing.assert_array_equal(held, pyramid[1][0])
        for _ in range(3):
            loads.run_all()
            dispatch.run_all()
        np.testing.assert_array_equal(controller.read(1, thumbnail[1]), pyramid[1][1])
        np.testing.assert_array_equal(controller.read(0, view[1]), pyramid[0][1])
    finally:
        controller.close()
        cache.close()


def test_the_level_napari_leaves_in_3d_is_its_thumbnail_without_a_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Locked to a finer 3D level, napari reads the level it showed until now as the
    thumbnail: that frame is taken over, not built again on its main thread (measured:
    16 chunks, 93 ms of copies at each refinement)."""
    data = (np.arange(8 * 8 * 8) % 991).astype(np.int32).reshape(8, 8, 8) + 1
    pyramid = [data, data[::2, ::2, ::2]]
    cache = ChunkCache(1 << 22, executor=InlineExecutor())
    sources = _level_sources(pyramid, (2, 2, 2), "l")
    controller = ViewController(sources, cache, prefetch=False, dispatch=InlineExecutor())
    copied = _copy_counter(monkeypatch)
    fine, coarse = controller.arrays
    try:
        controller.read(1, coarse[:], kind="view")  # napari's 3D start: the coarsest level
        shown = _show(controller, 1, coarse[:])
        np.testing.assert_array_equal(shown, pyramid[1])
        controller.read(0, fine[:], kind="view")  # napari's slice once locked to the finer level:
        copied[0] = 0
        thumbnail = controller.read(1, coarse[:], kind="thumbnail")  # then its thumbnail
        assert copied[0] == 0
        assert thumbnail is shown
        np.testing.assert_array_equal(_show(controller, 0, fine[:]), pyramid[0])
    finally:
        controller.close()
        cache.close()


@pytest.mark.parametrize("fill", [0, FILL])
def test_a_first_volume_read_answers_the_placeholder_and_builds_off_the_reading_thread(
    monkeypatch: pytest.MonkeyPatch, fill: int
) -> None:
    """napari's first read of a volume (the switch to 3D: no frame to hold), half of its
    chunks resident: the read answers the placeholder, copying nothing (measured: 16-78 ms
    of napari's thread for 6 resident chunks), the resident chunks are copied into a frame
    on the dispatch thread, and napari is asked to read again. The pixels are always
    NumPy's or the placeholder."""
    data = (np.arange(8 * 8 * 8) % 991).astype(np.int32).reshape(1, 8, 8, 8) + 1
    loads, dispatch = ManualExecutor(), ManualExecutor()
    cache = ChunkCache(1 << 22, executor=loads)
    source = ArraySource(data, chunks=(1, 4, 4, 4), name=f"z{fill}", fill_value=fill)
    controller = ViewController([source], cache, prefetch=False, dispatch=dispatch)
    changed: list[None] = []
    controller.view_changed.connect(lambda: changed.append(None))
    copied = _copy_counter(monkeypatch)
    resident = [(0, 0, *c) for c in np.ndindex(2, 2)]  # the upper half in z
    partial = np.full_like(data[0], fill)
    partial[:4] = data[0, :4]
    volume = controller.arrays[0][0]
    try:
        cache.request([ChunkRef.of(source, c) for c in resident]).release()
        loads.run_all()
        got = controller.read(0, volume, kind="view")
        assert copied[0] == 0
        np.testing.assert_array_equal(got, np.full_like(data[0], fill))
        dispatch.run_all()  # the request, then the frame (half of the volume is in)
        assert copied[0] == 4
        assert len(changed) == 1
        got = controller.read(0, volume, kind="view")
        assert copied[0] == 4  # none again on napari's thread
        np.testing.assert_array_equal(got, partial)
        dispatch.run_all()
        loads.run_all()
        np.testing.assert_array_equal(_show(controller, 0, volume, dispatch=dispatch), data[0])
    finally:
        controller.close()
        cache.close()


@pytest.mark.parametrize("inline_bytes", [None, 0])
def test_a_first_volume_read_with_every_chunk_resident_answers_it_whole(
    monkeypatch: pytest.MonkeyPatch, inline_bytes: int | None
) -> None:
    """The switch to 3D once the 2D views loaded the whole coarsest level: napari's first
    read copies the resident chunks itself and answers the volume whole, and is not asked
    to read again (under software rendering each paint of a 1024-deep volume holds its
    thread seconds, and the workers loading the finer level wait for it). Over
    `INLINE_VOLUME_BYTES`, the read answers the placeholder and the dispatch thread builds
    it, as for a volume still loading."""
    from napari_lazy_zarr.core.viewport import controller as controller_module

    if inline_bytes is not None:
        monkeypatch.setattr(controller_module, "INLINE_VOLUME_BYTES", inline_bytes)
    data = (np.arange(8 * 8 * 8) % 991).astype(np.int32).reshape(1, 8, 8, 8) + 1
    loads, dispatch = ManualExecutor(), ManualExecutor()
    cache = ChunkCache(1 << 22, executor=loads)
    source = ArraySource(data, chunks=(1, 4, 4, 4), name="resident", fill_value=0)
    controller = ViewController([source], cache, prefetch=False, dispatch=dispatch)
    changed: list[None] = []
    controller.view_changed.connect(lambda: changed.append(None))
    copied = _copy_counter(monkeypatch)
    volume = controller.arrays[0][0]
    try:
        cache.request([ChunkRef.of(source, c) for c in np.ndindex(1, 2, 2, 2)]).release()
        loads.run_all()
        got = controller.read(0, volume, kind="view")
        if inline_bytes is None:
            assert copied[0] == 8
            np.testing.assert_array_equal(got, data[0])
            dispatch.run_all()
            assert not changed  # nothing for napari to read (and paint) again
        else:
            assert copied[0] == 0
            np.testing.assert_array_equal(got, np.zeros_like(data[0]))
            dispatch.run_all()
            assert (copied[0], len(changed)) == (8, 1)
        np.testing.assert_array_equal(controller.read(0, volume), data[0])
    finally:
        controller.close()
        cache.close()


def test_a_first_volume_read_with_nothing_resident_asks_for_no_read_of_the_same_placeholders() -> (
    None
):
    """The same with no chunk resident: the dispatch thread finds nothing to copy, and napari
    is not asked to read (in 3D: upload and paint) the same placeholders again."""
    data = (np.arange(8 * 8 * 8) % 991).astype(np.int32).reshape(1, 8, 8, 8) + 1
    loads, dispatch = ManualExecutor(), ManualExecutor()
    cache = ChunkCache(1 << 22, executor=loads)
    source = ArraySource(data, chunks=(1, 4, 4, 4), name="cold", fill_value=0)
    controller = ViewController([source], cache, prefetch=False, dispatch=dispatch)
    changed: list[None] = []
    controller.view_changed.connect(lambda: changed.append(None))
    volume = controller.arrays[0][0]
    try:
        np.testing.assert_array_equal(controller.read(0, volume), np.zeros_like(data[0]))
        dispatch.run_all()
        assert not changed
        loads.run_all()
        dispatch.run_all()
        assert changed
        np.testing.assert_array_equal(controller.read(0, volume), data[0])
    finally:
        controller.close()
        cache.close()


def test_a_volume_is_copied_again_only_as_half_of_what_it_lacks_lands() -> None:
    """A volume's next frame copies the whole volume (hundreds of megabytes): it is built
    when half of what the last frame lacked has landed, or all of it — a volume of 16
    chunks landing one by one is copied 5 times, not 16."""
    data = (np.arange(8 * 8 * 8) % 991).astype(np.int32).reshape(8, 8, 8) + 1
    loads = ManualExecutor()
    cache = ChunkCache(1 << 22, executor=loads)
    source = ArraySource(data, chunks=(2, 4, 4), name="halves", fill_value=FILL)
    controller = ViewController([source], cache, prefetch=False, dispatch=InlineExecutor())
    frames: list[np.ndarray[Any, Any]] = []
    volume = controller.arrays[0][:, :, :]
    controller.view_changed.connect(lambda: frames.append(controller.read(0, volume)))
    try:
        controller.read(0, volume)
        while loads.run_next():
            pass
        assert len(frames) == 5  # after 8, 12, 14, 15 and 16 of 16 chunks
        np.testing.assert_array_equal(frames[-1], data)
    finally:
        controller.close()
        cache.close()


def test_stand_ins_are_composed_off_the_reading_thread_into_the_next_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """napari's slice call only copies: the upsampled coarser level is drawn into the next
    frame by the controller's dispatch thread, then `view_changed` asks for a read."""
    import threading

    from napari_lazy_zarr.core.viewport import fallback as view_module

    composers: list[str] = []
    original = view_module.coarser_fill

    def recording(*args: Any, **kwargs: Any) -> Any:
        composers.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(view_module, "coarser_fill", recording)
    data = (np.arange(16 * 16) % 97).astype(np.int32).reshape(16, 16) + 1
    pyramid = [data, data[::2, ::2]]
    executor = ManualExecutor()
    cache = ChunkCache(1 << 20, executor=executor)
    sources = [
        ArraySource(level, chunks=(4, 4), name=f"s{i}", fill_value=FILL)
        for i, level in enumerate(pyramid)
    ]
    controller = ViewController(sources, cache, prefetch=False)  # its own thread
    changed = threading.Event()
    controller.view_changed.connect(changed.set)
    try:
        coarse = [ChunkRef.of(sources[1], c) for c in itertools.product(range(2), range(2))]
        cache.request(coarse).release()
        executor.run_all()
        first = controller.read(0, controller.arrays[0][:, :])
        assert (first == FILL).all()
        assert changed.wait(timeout=10)  # the stand-ins were drawn
        assert composers
        assert threading.current_thread().name not in composers
        upsampled = np.repeat(np.repeat(pyramid[1], 2, 0), 2, 1)
        again = controller.read(0, controller.arrays[0][:, :])
        np.testing.assert_array_equal(again, upsampled)
        assert (first == FILL).all()  # the first frame is as it was handed out
        assert controller.latest is not None
        assert len(controller.latest.provisional) == 16
    finally:
        controller.close()
        cache.close()


def test_a_held_step_asks_for_a_read_only_once_its_plane_can_be_shown() -> None:
    """While a step holds the last frame, a chunk of the new plane landing changes nothing a
    read would answer (the held frame again): napari is asked to read once, when the plane
    can be shown (measured: 2-3 slices a 2D t step, 3-4 a 3D one, each a 3D upload too)."""
    data = (np.arange(3 * 8 * 8) % 997).astype(np.int32).reshape(3, 8, 8) + 1
    executor = ManualExecutor()
    cache = ChunkCache(1 << 20, executor=executor)
    controller = ViewController(
        _level_sources([data], (1, 4, 4), "h"), cache, prefetch=False, dispatch=InlineExecutor()
    )
    changed: list[None] = []
    controller.view_changed.connect(lambda: changed.append(None))
    frame = controller.arrays[0]
    try:
        controller.read(0, frame[0])
        executor.run_all()
        _show(controller, 0, frame[0])  # complete: the frame a step holds
        cache.evict_unpinned()
        changed.clear()
        np.testing.assert_array_equal(controller.read(0, frame[1]), data[0])
        assert _held(controller)
        for _ in range(3):  # three of the plane's four chunks land
            executor.run_next()
            assert not changed  # a read would answer the held frame again
            np.testing.assert_array_equal(controller.read(0, frame[1]), data[0])
            assert _held(controller)
        executor.run_next()  # the last one: the plane can be shown
        assert len(changed) == 1
        assert not controller.settled  # the viewer has not read the whole plane yet
        np.testing.assert_array_equal(controller.read(0, frame[1]), data[1])
        assert not _held(controller)
        controller.slice_applied()
        assert controller.settled
    finally:
        controller.close()
        cache.close()


def test_a_step_to_a_plane_with_a_resident_backdrop_is_shown_once_composed() -> None:
    """The first read of a plane whose coarser level is resident holds the last frame; the
    stand-ins are composed off the reading thread, and the next read shows them."""
    controller, pyramid, executor = _movie()
    changed: list[None] = []
    controller.view_changed.connect(lambda: changed.append(None))
    try:
        frame = controller.arrays[0]
        controller.read(0, frame[0])
        executor.run_all()
        _show(controller, 0, frame[0])  # complete: the frame a step holds
        controller.cache.evict_unpinned()
        controller.cache.request([ChunkRef.of(controller.sources[1], (1, 0, 0))]).release()
        executor.run_all()
        changed.clear()
        first = controller.read(0, frame[1])  # inline dispatch: composed after the read
        assert _held(controller)
        np.testing.assert_array_equal(first, pyramid[0][0])
        assert changed  # ... and the viewer is asked to read again
        backdrop = controller.read(0, frame[1])
        assert not _held(controller)
        np.testing.assert_array_equal(backdrop, np.repeat(np.repeat(pyramid[1][1], 2, 0), 2, 1))
    finally:
        controller.close()
        controller.cache.close()


@pytest.mark.parametrize("ring", [0, 1])
def test_a_source_that_asks_for_no_ring_gets_nothing_beyond_the_view(ring: int) -> None:
    source = ArraySource(np.zeros((3, 12, 12), dtype=np.int32), chunks=(1, 4, 4), name="r")
    source.prefetch_ring = ring  # type: ignore[attr-defined]
    cache = ChunkCache(1 << 20, executor=ManualExecutor())
    controller = ViewController([source], cache, dispatch=InlineExecutor())
    try:
        controller.read(0, controller.arrays[0][1, 4:8, 4:8])
        around = [
            ChunkRef.of(source, c)
            for c in itertools.product(range(3), range(3), range(3))
            if c != (1, 1, 1)
        ]
        classes = {cache.status(ref.key).load_class for ref in around}
        assert classes == ({None} if ring == 0 else {None, LoadClass.PREFETCH})
        assert cache.status(ChunkRef.of(source, (1, 1, 1)).key).load_class is LoadClass.NEEDED
    finally:
        controller.close()
        cache.close()


def test_a_plane_sliced_to_one_cell_is_a_plane_as_napari_reads_it() -> None:
    """napari slices the axes it does not display to one cell (``t:t+1``), not to an index:
    such a read is still a step through t, which holds the last whole frame and is tracked
    as a walk."""
    controller, pyramid, executor = _movie()
    try:
        frame = controller.arrays[0]
        controller.read(0, frame[0:1])
        executor.run_all()
        np.testing.assert_array_equal(_show(controller, 0, frame[0:1]), pyramid[0][0:1])
        controller.cache.evict_unpinned()
        held = controller.read(0, frame[1:2])
        assert _held(controller)
        np.testing.assert_array_equal(held, pyramid[0][0:1])
        controller.read(0, frame[2:3])
        motion = controller.motion
        assert motion is not None
        assert (motion.axis, motion.direction) == (0, 1)
        latest = controller.latest
        assert latest is not None
        assert latest.request.planes == (0,)
        assert latest.request.spatial == (1, 2)
    finally:
        controller.close()
        controller.cache.close()


def test_a_viewer_showing_none_of_the_layer_leaves_nothing_to_wait_for() -> None:
    """napari slices a layer whose extent its point lies outside (a 1-plane image while the
    viewer sits at z=2 of a stack) without reading it: `nothing_shown` leaves the layer
    complete and settled, with no view pinning its chunks (issue 50: the documented wait
    never completed)."""
    controller, _, _ = _one_level()
    try:
        view = controller.arrays[0][0:8, 0:8]
        controller.read(0, view)
        controller.slice_applied()
        assert not controller.complete  # its chunks are queued, not loaded
        controller.nothing_shown()  # the next slice lies outside the layer
        assert controller.complete
        assert controller.settled
        assert controller.latest is None
        key = ChunkRef.of(controller.sources[0], (0, 0)).key
        assert not controller.cache.is_pinned(key)
        np.testing.assert_array_equal(_show(controller, 0, view), np.full((8, 8), FILL))
    finally:
        controller.close()
        controller.cache.close()
