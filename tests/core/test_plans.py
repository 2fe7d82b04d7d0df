"""Point-gather plans: the regular-grid plan groups points exactly as zarr-indexing's joint
table does, and reads what NumPy reads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr_indexing import plan_chunks

from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray, ConcatSource
from napari_lazy_zarr.core.executors import InlineExecutor
from napari_lazy_zarr.core.reading.plans import PointPlan


def _pieces(plan: PointPlan) -> list[tuple[Any, ...]]:
    """Each chunk's key, chunk-local selector and output positions, in the plan's order."""
    found = []
    for ref in plan.refs:
        selector, positions = plan._pieces[ref.key]
        found.append(
            (
                ref.key,
                tuple(s if isinstance(s, int) else s.tolist() for s in selector),
                positions.tolist(),
            )
        )
    return found


@st.composite
def gathers(draw: st.DrawFn) -> tuple[np.ndarray[Any, Any], tuple[int, ...], tuple[Any, ...]]:
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=rank, max_size=rank)))
    chunks = tuple(draw(st.integers(1, n + 3)) for n in shape)
    count = draw(st.integers(2, 200))  # one point is a constant map: a basic read
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scalar_axis = draw(st.integers(-1, rank - 1)) if rank > 1 else -1
    selection: list[Any] = []
    for axis, extent in enumerate(shape):
        if axis == scalar_axis:
            selection.append(int(rng.integers(0, extent)))
        else:
            points = rng.integers(0, extent, count)
            if draw(st.booleans()):
                points = points - extent  # negative indices count from the end
            selection.append(points)
    data = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    return data, chunks, tuple(selection)


@settings(max_examples=150, deadline=None)
@given(gathers())
def test_the_regular_grid_plan_is_the_joint_table_plan(
    case: tuple[np.ndarray[Any, Any], tuple[int, ...], tuple[Any, ...]],
) -> None:
    data, chunks, selection = case
    with ChunkCache(1 << 24, executor=InlineExecutor()) as cache:
        source = ArraySource(data, chunks=chunks)
        image = ChunkedArray(source, cache)
        points = image.vindex[selection]
        plan = points.plan()
        assert isinstance(plan, PointPlan)
        regular = PointPlan.on_regular_grid(points.transform, source, points.shape)
        assert regular is not None
        if points.transform.index_array_structure == "general":  # not 1-d fancy indexing
            general = PointPlan.from_partition(
                plan_chunks(points.transform, source.grid).partition(), source, points.shape
            )
            assert _pieces(regular) == _pieces(general)
        np.testing.assert_array_equal(points.result(), data[selection])


def test_a_grid_of_more_than_65536_chunks_numbers_them_wider() -> None:
    data = np.arange(300 * 300, dtype=np.int32).reshape(300, 300)
    rng = np.random.default_rng(3)
    ys, xs = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    with ChunkCache(1 << 24, executor=InlineExecutor()) as cache:
        source = ArraySource(data, chunks=(1, 1))  # 90,000 chunks
        points = ChunkedArray(source, cache).vindex[ys, xs]
        regular = PointPlan.on_regular_grid(points.transform, source, points.shape)
        assert regular is not None
        general = PointPlan.from_partition(
            plan_chunks(points.transform, source.grid).partition(), source, points.shape
        )
        assert _pieces(regular) == _pieces(general)
        np.testing.assert_array_equal(points.result(), data[ys, xs])


def test_other_grids_and_gathers_take_the_general_plan() -> None:
    data = np.arange(30 * 20, dtype=np.int32).reshape(30, 20)
    with ChunkCache(1 << 24, executor=InlineExecutor()) as cache:
        # Uneven members: the composite's grid along axis 0 is irregular.
        concat = ConcatSource(
            [ArraySource(data[:7], chunks=(4, 8)), ArraySource(data[7:], chunks=(5, 8))], axis=0
        )
        points = ChunkedArray(concat, cache).vindex[[0, 6, 7, 29, 3], [1, 19, 0, 5, 1]]
        assert PointPlan.on_regular_grid(points.transform, concat, points.shape) is None
        assert isinstance(points.plan(), PointPlan)
        np.testing.assert_array_equal(points.result(), data[[0, 6, 7, 29, 3], [1, 19, 0, 5, 1]])
        # An orthogonal gather is not a point gather.
        source = ArraySource(data, chunks=(4, 8))
        outer = ChunkedArray(source, cache).oindex[[0, 6], [1, 19, 3]]
        assert PointPlan.on_regular_grid(outer.transform, source, outer.shape) is None
        np.testing.assert_array_equal(outer.result(), data[np.ix_([0, 6], [1, 19, 3])])


def test_points_outside_the_array_are_an_index_error() -> None:
    data = np.zeros((10, 10), dtype=np.int32)
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(ArraySource(data, chunks=(4, 4)), cache)
        with pytest.raises(IndexError):
            image.vindex[[0, 10], [1, 2]].result()
