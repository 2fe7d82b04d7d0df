"""Batched loads (`BatchSource`): the cache reads a batch's wanted chunks in one call, and a
sharded zarr array read that way (`coalesce=True`) gives NumPy's pixels."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core import ChunkCache, ChunkReadError, ChunkRef, ChunkState
from napari_lazy_zarr.core.executors import ManualExecutor
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.sources.protocol import ArraySource, BatchSource
from napari_lazy_zarr.core.sources.zarr import open_zarr_source

if TYPE_CHECKING:
    from collections.abc import Hashable, Sequence
    from pathlib import Path


class RowBatches(ArraySource):
    """An in-memory source whose chunks batch by pairs of grid rows; records each call."""

    def __init__(self, array: np.ndarray[Any, Any], *, broken: tuple[int, ...] = ()) -> None:
        super().__init__(array, chunks=(2, 2), name="rows")
        self.calls: list[list[tuple[int, ...]]] = []
        self.broken = broken
        self._lock = threading.Lock()

    def batch_key(self, coords: tuple[int, ...]) -> Hashable | None:
        return coords[0] // 2

    def read_chunks(
        self, coords: Sequence[tuple[int, ...]]
    ) -> list[np.ndarray[Any, Any] | BaseException]:
        with self._lock:
            self.calls.append(list(coords))
        return [
            ChunkReadError(f"chunk {one} is broken")
            if one == self.broken
            else self.read_chunk(one)
            for one in coords
        ]


def _refs(source: ArraySource, coords: Sequence[tuple[int, int]]) -> list[ChunkRef]:
    return [ChunkRef.of(source, one) for one in coords]


def test_a_batch_is_read_in_one_call_and_each_chunk_once() -> None:
    data = np.arange(8 * 8, dtype=np.uint16).reshape(8, 8)
    source = RowBatches(data)
    assert isinstance(source, BatchSource)
    executor = ManualExecutor()
    cache = ChunkCache(concurrency=1, executor=executor)
    coords = [(r, c) for r in range(4) for c in range(4)]
    request = cache.request(_refs(source, coords), view="v")
    executor.run_all()
    assert request.complete
    assert sorted(one for call in source.calls for one in call) == sorted(coords)
    assert len(source.calls) == 2  # grid rows 0-1, then rows 2-3
    for call in source.calls:
        assert len({one[0] // 2 for one in call}) == 1
    for one in coords:
        key = ChunkRef.of(source, one).key
        assert cache.state(key) is ChunkState.READY
        lo = (one[0] * 2, one[1] * 2)
        np.testing.assert_array_equal(
            cache.lookup(key), data[lo[0] : lo[0] + 2, lo[1] : lo[1] + 2]
        )
    # Every chunk moved QUEUED -> LOADING -> READY once (the table checks each move).
    loading = [e for e in cache.events() if e.current is ChunkState.LOADING]
    assert len(loading) == len(coords)


def test_a_chunk_that_fails_in_a_batch_fails_alone() -> None:
    data = np.ones((4, 8), dtype=np.uint8)
    source = RowBatches(data, broken=(1, 2))
    executor = ManualExecutor()
    cache = ChunkCache(concurrency=1, executor=executor)
    coords = [(r, c) for r in range(2) for c in range(4)]
    cache.request(_refs(source, coords), view="v")
    executor.run_all()
    states = {one: cache.state(ChunkRef.of(source, one).key) for one in coords}
    assert states.pop((1, 2)) is ChunkState.FAILED
    assert set(states.values()) == {ChunkState.READY}
    assert "(1, 2) is broken" in str(cache.error(ChunkRef.of(source, (1, 2)).key))


def test_superseded_chunks_do_not_ride_along() -> None:
    data = np.zeros((8, 8), dtype=np.uint8)
    source = RowBatches(data)
    executor = ManualExecutor()
    cache = ChunkCache(concurrency=1, executor=executor)
    old = [(0, c) for c in range(4)]
    cache.request(_refs(source, old), view="v")
    new = [(1, 0)]  # same batch (rows 0-1), a newer view of the same layer
    cache.request(_refs(source, new), view="v")
    executor.run_all()
    assert source.calls == []  # read alone: the superseded row-0 chunks were not taken with it
    assert cache.state(ChunkRef.of(source, (1, 0)).key) is ChunkState.READY
    for one in old:
        assert cache.state(ChunkRef.of(source, one).key) is ChunkState.QUEUED  # parked


def test_a_batched_load_is_one_task_for_concurrency() -> None:
    data = np.zeros((16, 16), dtype=np.uint8)
    started = threading.Event()
    release = threading.Event()
    gate_calls: list[int] = []

    class Gated(RowBatches):
        def read_chunks(
            self, coords: Sequence[tuple[int, ...]]
        ) -> list[np.ndarray[Any, Any] | BaseException]:
            gate_calls.append(len(coords))
            started.set()
            assert release.wait(timeout=10)
            return super().read_chunks(coords)

    source = Gated(data)
    with ChunkCache(concurrency=1) as cache:
        request = cache.request(
            _refs(source, [(r, c) for r in range(8) for c in range(8)]), view="v"
        )
        assert started.wait(timeout=10)
        try:
            assert cache.counters().in_flight == 16  # one task: two grid rows of 8 chunks
        finally:
            release.set()
        request.done.result(timeout=10)
    assert gate_calls == [16, 16, 16, 16]


# -- a sharded zarr array read in batches, against NumPy -------------------------------


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray[Any, Any]]:
    """A 100x90 uint16 array in 40x30 shards of 10x10 inner chunks, written by zarr-python,
    with some inner chunks all fill value (not stored) and one shard absent."""
    path = tmp_path_factory.mktemp("batch") / "s.zarr"
    rng = np.random.default_rng(7)
    data = rng.integers(1, 60_000, size=(100, 90), dtype=np.uint16)
    data[0:10, 10:30] = 0  # two inner chunks of the first shard are fill: not stored
    data[40:80, 30:60] = 0  # a whole shard is fill: not stored
    array = zarr.create_array(
        str(path), shape=data.shape, chunks=(10, 10), shards=(40, 30), dtype="u2", fill_value=0
    )
    array[...] = data
    return path, data


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    box=st.tuples(st.integers(0, 99), st.integers(1, 100), st.integers(0, 89), st.integers(1, 90)),
    gap=st.sampled_from([0, 1, 10_000]),
)
def test_coalesced_reads_equal_numpy(
    sharded: tuple[Path, np.ndarray[Any, Any]], box: tuple[int, int, int, int], gap: int
) -> None:
    path, data = sharded
    y0, height, x0, width = box
    window = (slice(y0, min(100, y0 + height)), slice(x0, min(90, x0 + width)))
    source = open_zarr_source(path, coalesce=True, coalesce_gap=gap)
    assert source.batch_key((3, 4)) == (0, 1)
    grid = [
        (r, c)
        for r in range(window[0].start // 10, (window[0].stop - 1) // 10 + 1)
        for c in range(window[1].start // 10, (window[1].stop - 1) // 10 + 1)
    ]
    for one, got in zip(grid, source.read_chunks(grid), strict=True):
        assert not isinstance(got, BaseException)
        np.testing.assert_array_equal(
            got, data[one[0] * 10 : one[0] * 10 + 10, one[1] * 10 : one[1] * 10 + 10]
        )
    with ChunkCache(concurrency=2) as cache:
        np.testing.assert_array_equal(
            ChunkedArray(source, cache)[window].result(timeout=30), data[window]
        )


def test_local_stores_read_chunks_alone_unless_asked(
    sharded: tuple[Path, np.ndarray[Any, Any]],
) -> None:
    path, _ = sharded
    assert open_zarr_source(path).batch_key((0, 0)) is None
    unsharded = path.parent / "plain.zarr"
    zarr.create_array(str(unsharded), shape=(4,), chunks=(2,), dtype="u1")
    assert open_zarr_source(unsharded, coalesce=True).batch_key((0,)) is None


@pytest.mark.parametrize("gap", [-1, 1.5, True])
def test_coalesce_gap_must_be_bytes(sharded: tuple[Path, np.ndarray[Any, Any]], gap: Any) -> None:
    with pytest.raises(ValueError, match="coalesce_gap"):
        open_zarr_source(sharded[0], coalesce_gap=gap)
