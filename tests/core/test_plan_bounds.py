"""A view's work bounded before any chunk is listed (issue 22, item 1).

`count_chunks` counts a selection's chunks by grid arithmetic; `plan_read` refuses a
view over its bounds with `PlanTooLargeError` without calling zarr-indexing's
`plan_chunks` (which lists every chunk index of the selection), so a 200-byte
``.zarray`` can no longer decide the work.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_lazy_zarr import PlanTooLargeError as PublicPlanTooLargeError
from napari_lazy_zarr.core import LazyZarrError, PlanTooLargeError, open_array
from napari_lazy_zarr.core.cache import ChunkCache
from napari_lazy_zarr.core.reading import (
    MAX_VIEW_CHUNKS,
    ChunkedArray,
    count_chunks,
    lazy_for,
    plan_read,
)
from napari_lazy_zarr.core.reading import plans as plans_module
from napari_lazy_zarr.core.sources.protocol import ArraySource

if TYPE_CHECKING:
    from pathlib import Path


def write_metadata(path: Path, shape: list[int], chunks: list[int], dtype: str = "|u1") -> str:
    """A zarr v2 array of only its metadata: every chunk missing (fill value 0)."""
    path.mkdir()
    meta = {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": dtype,
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    (path / ".zarray").write_text(json.dumps(meta))
    return str(path)


# -- the count by arithmetic equals the plan's chunks -------------------------


@st.composite
def grids(draw: Any) -> tuple[tuple[int, ...], list[Any]]:
    """A small shape and, per axis, a regular chunk size or rectilinear edges."""
    rank = draw(st.integers(1, 3))
    shape, chunks = [], []
    for _ in range(rank):
        extent = draw(st.integers(1, 24))
        shape.append(extent)
        if draw(st.booleans()):
            chunks.append(draw(st.integers(1, extent)))
        else:
            edges, left = [], extent
            while left > 0:
                edge = draw(st.integers(1, left))
                edges.append(edge)
                left -= edge
            chunks.append(tuple(edges))
    return tuple(shape), chunks


@st.composite
def basic_selections(draw: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    selection: list[Any] = []
    for extent in shape:
        if draw(st.integers(0, 4)) == 0:
            selection.append(draw(st.integers(-extent, extent - 1)))
            continue
        step = draw(st.integers(1, extent + 2)) * draw(st.sampled_from([1, -1]))
        start = draw(st.none() | st.integers(-extent - 2, extent + 2))
        stop = draw(st.none() | st.integers(-extent - 2, extent + 2))
        selection.append(slice(start, stop, step))
    return tuple(selection)


def _source(shape: tuple[int, ...], chunks: list[Any]) -> ArraySource:
    data = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    regular = all(isinstance(c, int) for c in chunks)
    spelled = chunks if not regular else tuple(chunks)
    if not regular:  # a rectilinear grid spells every axis as edges
        spelled = [
            c if isinstance(c, tuple) else (c,) * (n // c) + ((n % c,) if n % c else ())
            for c, n in zip(chunks, shape, strict=True)
        ]
    return ArraySource(data, chunks=spelled, name="p")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_count_equals_the_plans_chunks_for_basic_selections(data: Any) -> None:
    shape, chunks = data.draw(grids())
    source = _source(shape, chunks)
    selection = data.draw(basic_selections(shape))
    lazy = lazy_for(source)[selection]
    plan = plan_read(lazy, source)
    assert count_chunks(lazy.transform, source.grid) == len(plan.refs)
    with ChunkCache(1 << 20) as cache:  # and the pixels are NumPy's
        view = ChunkedArray(source, cache)[selection]
        np.testing.assert_array_equal(view.result(timeout=30), source._array[selection])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_count_bounds_the_chunks_of_gathers(data: Any) -> None:
    shape, chunks = data.draw(grids())
    source = _source(shape, chunks)
    points = [data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=12)) for n in shape]
    with ChunkCache(1 << 20) as cache:
        array = ChunkedArray(source, cache)
        orthogonal = array.oindex[tuple(np.array(p) for p in points)]
        count = count_chunks(orthogonal.transform, source.grid)
        assert len(orthogonal.chunk_refs()) <= count
        np.testing.assert_array_equal(
            orthogonal.result(timeout=30), source._array[np.ix_(*points)]
        )
        length = min(len(p) for p in points)
        joint = tuple(np.array(p[:length]) for p in points)
        vectorized = array.vindex[joint]
        count = count_chunks(vectorized.transform, source.grid)
        assert len(vectorized.chunk_refs()) <= count <= length
        np.testing.assert_array_equal(vectorized.result(timeout=30), source._array[joint])


def test_the_count_is_arithmetic_on_a_regular_grid() -> None:
    source = ArraySource(np.zeros((100, 100), np.uint8), chunks=(10, 7), name="r")
    lazy = lazy_for(source)
    assert count_chunks(lazy[5:95:3, ::-1].transform, source.grid) == 10 * 15
    assert count_chunks(lazy[::20, 3].transform, source.grid) == 5  # a step over a chunk
    assert count_chunks(lazy[0:0].transform, source.grid) == 0


# -- over the bound: refused before anything is listed ------------------------


@pytest.fixture
def no_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if zarr-indexing is asked to list a selection's chunks."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("plan_chunks listed the chunks of a refused view")

    monkeypatch.setattr(plans_module, "plan_chunks", refuse)


def test_a_trillion_chunk_slice_is_refused_at_once(tmp_path: Path, no_listing: None) -> None:
    array = open_array(write_metadata(tmp_path / "a.zarr", [10**12], [1]))
    try:
        view = array[0 : 10**7]
        started = time.perf_counter()
        with pytest.raises(PlanTooLargeError) as caught:
            view.read_nonblocking()
        assert time.perf_counter() - started < 1.0  # microseconds here; a generous bound
        message = str(caught.value)
        assert "a.zarr" in message
        assert "(10000000,)" in message
        assert "10,000,000 chunks" in message
        assert f"{MAX_VIEW_CHUNKS:,}" in message
        assert "smaller region" in message
        assert "max_view_chunks" in message
        with pytest.raises(PlanTooLargeError):
            view.result(timeout=1)
        with pytest.raises(PlanTooLargeError):
            np.asarray(view)
        with pytest.raises(PlanTooLargeError):
            array.chunk_refs()  # the whole array: 10**12 chunks
    finally:
        array.cache.close()


def test_a_2_to_the_62_squared_array_is_refused_not_a_memory_error(
    tmp_path: Path, no_listing: None
) -> None:
    array = open_array(write_metadata(tmp_path / "b.zarr", [2**62, 2**62], [1, 1]))
    try:
        for read in (
            lambda: array.result(timeout=1),
            lambda: np.asarray(array),
            lambda: array.read_nonblocking(),
            lambda: array[:: 2**40, :: 2**40].read_nonblocking(),
            lambda: array[:1000, :1000].read_nonblocking(),  # 10**6 chunks, 1 MB
        ):
            with pytest.raises(PlanTooLargeError) as caught:
                read()
            assert isinstance(caught.value, LazyZarrError)
            assert isinstance(caught.value, ValueError)
            assert "b.zarr" in str(caught.value)
        assert PublicPlanTooLargeError is PlanTooLargeError
    finally:
        array.cache.close()


def test_a_small_view_of_a_huge_grid_reads(tmp_path: Path) -> None:
    array = open_array(write_metadata(tmp_path / "c.zarr", [10**6, 10**6], [1, 1]))
    try:
        view = array[500_000:500_016, 7:23]
        np.testing.assert_array_equal(view.result(timeout=30), np.zeros((16, 16), np.uint8))
        assert len(view.chunk_refs()) == 256
    finally:
        array.cache.close()


def test_the_bounds_are_keywords(tmp_path: Path) -> None:
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    source = ArraySource(data, chunks=(8, 8), name="k")
    with ChunkCache(1 << 20) as cache:
        array = ChunkedArray(source, cache, max_view_chunks=16)
        np.testing.assert_array_equal(array[:32, :32].result(timeout=30), data[:32, :32])
        with pytest.raises(PlanTooLargeError, match="up to 25 chunks"):
            array[:33, :33].result(timeout=30)  # 5 x 5 = 25 chunks
        small = ChunkedArray(source, cache, max_view_bytes=100)
        with pytest.raises(PlanTooLargeError, match="8,192 bytes"):
            small.read_nonblocking()
        np.testing.assert_array_equal(small[:5, :5].result(timeout=30), data[:5, :5])
    with ChunkCache(0) as cache, pytest.raises(ValueError, match="max_view_chunks"):
        ChunkedArray(source, cache, max_view_chunks=0)
    with pytest.raises(TypeError, match="max_view_bytes"):
        open_array(str(tmp_path), max_view_bytes=1.5)  # type: ignore[arg-type]
    array = open_array(write_metadata(tmp_path / "d.zarr", [10**6], [1]), max_view_chunks=10**6)
    try:
        assert len(array[: 10**5].chunk_refs()) == 10**5
    finally:
        array.cache.close()


# -- napari's path: a view over its bounds is served coarser ------------------


def test_virtual_levels_of_one_pixel_chunks_sample_the_base(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.sources.decimated import MAX_BASE_CHUNKS, virtual_levels

    array = open_array(write_metadata(tmp_path / "v.zarr", [10**6, 10**6], [1, 1]))
    try:
        started = time.perf_counter()
        levels = virtual_levels(array.source)
        coarsest = levels[-1]
        assert coarsest.shape == (245, 245)
        # Every level samples the base: its chunks cost one stored chunk per pixel,
        # never every stored chunk under them (10**12 / 64 for the coarsest's).
        for level in levels[1:]:
            assert level.parent is None
            assert level.chunk_cost((0, 0)) <= 32 * 32
            assert len(level.chunk_inputs((0, 0))) == level.chunk_cost((0, 0))
        assert math.prod(coarsest.shape) <= MAX_BASE_CHUNKS
        assert time.perf_counter() - started < 5.0  # arithmetic: ~1 ms here
    finally:
        array.cache.close()


def test_a_view_over_its_bounds_is_served_from_a_coarser_level(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.sources.decimated import virtual_levels
    from napari_lazy_zarr.core.viewport import ViewController
    from napari_lazy_zarr.core.viewport._coarser import VIEW_CHUNKS, VIEW_STORED_CHUNKS

    store = write_metadata(tmp_path / "w.zarr", [10**6, 10**6], [1, 1])
    path = tmp_path / "w.zarr"
    (path / "0.0").write_bytes(bytes([200]))
    array = open_array(store)
    levels = virtual_levels(array.source)
    controller = ViewController(levels, array.cache, prefetch=False)
    try:
        fine = controller.arrays[0][0:1080, 0:1920]  # a canvas at full resolution
        data = controller.read(0, fine)
        assert data.shape == (1080, 1920)
        frame = controller.latest
        assert frame is not None
        sources = {key.source for key in frame.keys}
        assert array.source.identity not in sources  # not 2 * 10**6 stored chunks
        assert len(frame.keys) <= VIEW_CHUNKS
        (identity,) = sources
        (level,) = [s for s in levels if s.identity == identity]
        assert len(frame.keys) * level.chunk_cost((0, 0)) <= VIEW_STORED_CHUNKS
        # The level's chunk (0, 0) samples the stored chunk (0, 0) (read without the cache).
        assert level.read_chunk((0, 0))[0, 0] == 200
        whole = controller.arrays[0][:, :]  # level 0 locked, zoomed out: a 10**12-byte frame
        with pytest.raises(PlanTooLargeError, match="a frame may hold"):
            controller.read(0, whole)
        small = controller.arrays[0][0:16, 0:16]  # within bounds: level 0 itself
        controller.read(0, small)
        frame = controller.latest
        assert frame is not None
        assert {key.source for key in frame.keys} == {array.source.identity}
        assert len(frame.keys) == 256
        expected = np.zeros((16, 16), np.uint8)
        expected[0, 0] = 200
        np.testing.assert_array_equal(array[0:16, 0:16].result(timeout=60), expected)
    finally:
        controller.close()
        array.cache.close()


def test_a_coarser_plan_shows_the_coarse_levels_pixels_upsampled() -> None:
    from napari_lazy_zarr.core.executors import InlineExecutor
    from napari_lazy_zarr.core.reading import ViewBounds
    from napari_lazy_zarr.core.sources.decimated import virtual_levels
    from napari_lazy_zarr.core.viewport import ViewController
    from tests.viewing import read_settled

    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    base = ArraySource(data, chunks=(8, 8), name="u")
    levels = virtual_levels(base, smallest=16, chunk_size=16)  # 64², 32², 16²
    with ChunkCache(1 << 24, executor=InlineExecutor()) as cache:
        # Level 0's 8 x 8 chunks are over a bound of 4.
        controller = ViewController(
            levels, cache, prefetch=False, bounds=ViewBounds(view_chunks=4)
        )
        try:
            view = controller.arrays[0][5:61, 3:50]
            controller.read(0, view)
            ChunkedArray(levels[1], cache).result(timeout=30)  # the coarse level resident
            shown = read_settled(controller, 0, view)
            frame = controller.latest
            assert frame is not None
            # The finest level within 4 chunks: level 1 (32², its 2 x 2 chunks of 16²).
            assert {key.source for key in frame.keys} == {levels[1].identity}
            assert len(frame.keys) == 4
            rows, columns = np.arange(5, 61) // 2 * 2, np.arange(3, 50) // 2 * 2
            np.testing.assert_array_equal(shown, data[np.ix_(rows, columns)])
        finally:
            controller.close()
