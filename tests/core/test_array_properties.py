"""Selections through the cache equal NumPy: zarr-indexing's own state machine, and ours.

`ChainedIndexingStateMachine` (zarr-indexing's harness) composes basic,
orthogonal and vectorized steps and checks `result()` and the parts assembly
against NumPy after every step; here it runs with `CacheReader` serving every
part from a real cache, over an in-memory source and a real zarr store.
`ChunkedArrayIndexing` runs the same strategies through `ChunkedArray`'s own
read paths: blocking, non-blocking with a placeholder, and the point-gather
path for `vindex`.
"""

from __future__ import annotations

import tempfile
from typing import Any, ClassVar

import numpy as np
import pytest
import zarr
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from zarr_indexing.testing import (
    DEFAULT_DATA,
    DEFAULT_SETTINGS,
    ChainedIndexingStateMachine,
    apply_selection,
    basic_selections,
    orthogonal_selections,
    slice_selections,
    state_machine_test,
    vectorized_selections,
)

from napari_lazy_zarr.core import (
    ArraySource,
    CacheClosedError,
    CacheReader,
    ChunkCache,
    ChunkedArray,
    ChunkReadError,
    InlineExecutor,
    ManualExecutor,
    open_zarr_source,
)
from napari_lazy_zarr.core.reading.array import PLANS_KEPT
from napari_lazy_zarr.core.testing import FaultySource

# Caches shared by a machine class's examples: inline executors start no threads.
_CACHE = ChunkCache(16 << 20, executor=InlineExecutor())
_GRID = (3, 2, 3)


class CacheReaderOverArraySource(ChainedIndexingStateMachine):
    source = ArraySource(DEFAULT_DATA, chunks=_GRID, name="default-data")
    readers: ClassVar[Any] = [CacheReader(_CACHE, source, blocking=True)]

    def make_source(self, data: Any) -> Any:
        return ChunkedArray(self.source, _CACHE)


def _zarr_copy(data: np.ndarray[Any, Any]) -> str:
    path = tempfile.mkdtemp(prefix="lazy-zarr-props-") + "/data.zarr"
    array = zarr.create_array(path, shape=data.shape, chunks=_GRID, dtype=data.dtype)
    array[...] = data
    return path


class CacheReaderOverZarr(ChainedIndexingStateMachine):
    source = open_zarr_source(_zarr_copy(DEFAULT_DATA))
    readers: ClassVar[Any] = [CacheReader(_CACHE, source, blocking=True)]

    def make_source(self, data: Any) -> Any:
        return ChunkedArray(self.source, _CACHE)


_SETTINGS = settings(DEFAULT_SETTINGS, max_examples=120)

TestCacheReaderOverArraySource = state_machine_test(CacheReaderOverArraySource, config=_SETTINGS)
TestCacheReaderOverZarr = state_machine_test(CacheReaderOverZarr, config=_SETTINGS)


_PLACEHOLDER = -1  # DEFAULT_DATA is non-negative, so a placeholder cell is recognizable


class ChunkedArrayIndexing(RuleBasedStateMachine):
    """Chained selections on `ChunkedArray`; every read path must agree with NumPy."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = DEFAULT_DATA
        self.chain: list[Any] = []

    @initialize(
        grid=st.sampled_from([(3, 2, 3), (7, 5, 4), (2, 2, 2), ((3, 3, 1), (2, 3), (1, 3))])
    )
    def choose_grid(self, grid: Any) -> None:
        self.source = ArraySource(DEFAULT_DATA, chunks=grid, name=("grid", str(grid)))
        self.view = ChunkedArray(self.source, _CACHE)
        self.chain.append(("grid", grid))

    def _indexable(self) -> bool:
        return self.model.ndim > 0 and self.model.size > 0

    def _step(self, mode: str, selection: tuple[Any, ...]) -> None:
        self.chain.append((mode, selection))
        self.model = apply_selection(self.model, selection, mode)  # type: ignore[arg-type]
        if mode == "basic":
            self.view = self.view[selection]
        elif mode == "orthogonal":
            self.view = self.view.oindex[selection]
        else:
            self.view = self.view.vindex[selection]

    @precondition(lambda self: self._indexable())
    @rule(data=st.data())
    def basic(self, data: st.DataObject) -> None:
        self._step("basic", data.draw(basic_selections(self.model.shape)))

    @precondition(lambda self: self._indexable())
    @rule(data=st.data())
    def orthogonal(self, data: st.DataObject) -> None:
        self._step("orthogonal", data.draw(orthogonal_selections(self.model.shape)))

    @precondition(lambda self: self._indexable())
    @rule(data=st.data())
    def vectorized(self, data: st.DataObject) -> None:
        self._step("vectorized", data.draw(vectorized_selections(self.model.shape)))

    @precondition(lambda self: self._indexable())
    @rule(data=st.data())
    def slices_only(self, data: st.DataObject) -> None:
        self._step("orthogonal", data.draw(slice_selections(self.model.shape)))

    @rule()
    def evict_everything_unpinned(self) -> None:
        """Reads after eviction must load again and still agree (always enabled)."""
        _CACHE.evict_unpinned()
        self.chain.append(("evict",))

    @rule(data=st.data())
    def evict_all_but_some(self, data: st.DataObject) -> None:
        """Leave some of the view's chunks resident: the next read copies those and loads
        the rest."""
        refs = self.view.chunk_refs()
        kept = data.draw(st.lists(st.sampled_from(refs), unique=True) if refs else st.just([]))
        with _CACHE.request(kept):  # pinned chunks survive the eviction
            _CACHE.evict_unpinned()
        self.chain.append(("evict all but", [str(ref.key) for ref in kept]))

    @invariant()
    def shape_matches(self) -> None:
        assert self.view.shape == self.model.shape, self.chain

    @invariant()
    def blocking_result_matches(self) -> None:
        np.testing.assert_array_equal(self.view.result(), self.model, err_msg=str(self.chain))
        np.testing.assert_array_equal(np.asarray(self.view), self.model, err_msg=str(self.chain))

    @invariant()
    def nonblocking_shows_data_or_placeholder_then_completes(self) -> None:
        with ChunkCache(1 << 20, executor=(manual := ManualExecutor())) as cold:
            view = ChunkedArray(self.source, cold)[self.view.transform]
            partial = view.read_nonblocking(placeholder=_PLACEHOLDER)
            data = partial.data
            shown = data != _PLACEHOLDER
            # Never a wrong pixel: each cell is the model's value or the placeholder.
            np.testing.assert_array_equal(data[shown], self.model[shown], err_msg=str(self.chain))
            assert partial.complete == (self.model.size == 0), self.chain
            manual.run_all()
            assert partial.request.complete
            again = view.read_nonblocking(placeholder=_PLACEHOLDER)
            assert again.complete, self.chain
            np.testing.assert_array_equal(again.data, self.model, err_msg=str(self.chain))
            again.request.release()


TestChunkedArrayIndexing = state_machine_test(ChunkedArrayIndexing, config=_SETTINGS)


# -- the blocking read's resident-first path and its plan memo ------------------------


def test_a_partly_resident_view_loads_only_its_missing_chunks() -> None:
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(ArraySource(data, chunks=(16, 16)), cache)
        np.testing.assert_array_equal(image[5:30, 5:30].result(), data[5:30, 5:30])
        loads = cache.statistics.loads
        assert loads == 4
        np.testing.assert_array_equal(image[5:30, 5:60].result(), data[5:30, 5:60])
        assert cache.statistics.loads - loads == 4  # the two chunk columns not yet resident
        np.testing.assert_array_equal(image[::-3, 7].result(), data[::-3, 7])


def test_a_failed_chunk_beside_resident_ones_is_named_and_not_read_again() -> None:
    source = FaultySource(ArraySource(np.ones((8, 8)), chunks=(4, 4), name="img"), {(1, 1)})
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(source, cache)
        np.testing.assert_array_equal(image[:4].result(), np.ones((4, 8)))
        for _ in range(2):  # loading it fails; then it is FAILED, and stays so
            with pytest.raises(ChunkReadError, match=r"\[4:8, 4:8\] failed") as raised:
                image.result()
            assert raised.value.__cause__ is not None
        assert cache.statistics.failures == 1


def test_a_closed_cache_serves_no_read_even_of_resident_chunks() -> None:
    cache = ChunkCache(1 << 20, executor=InlineExecutor())
    image = ChunkedArray(ArraySource(np.ones((8, 8)), chunks=(4, 4), name="img"), cache)
    image.result()
    cache.close()
    with pytest.raises(CacheClosedError, match="closed"):
        image.result()


def test_views_of_one_selection_share_one_plan_and_few_plans_are_kept() -> None:
    data = np.arange(100 * 100).reshape(100, 100)
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(ArraySource(data, chunks=(16, 16)), cache)
        first = image[3:50, 7:90].plan()
        assert image[3:50][:, 7:90].plan() is first  # same transform, another route
        assert image[3:50, 7:91].plan() is not first
        assert ChunkedArray(image.source, cache)[3:50, 7:90].plan() is not first
        for start in range(PLANS_KEPT):
            image[start : start + 10].plan()
        assert image[3:50, 7:90].plan() is not first  # the oldest plans are dropped
        points = image.vindex[[1, 2], [3, 4]]
        assert points.plan() is points.plan()  # a gather's plan is kept by its view
        assert image.vindex[[1, 2], [3, 4]].plan() is not points.plan()
        np.testing.assert_array_equal(image[3:50, 7:90].result(), data[3:50, 7:90])
