"""Batched loads (`BatchSource`): the cache reads a batch's wanted chunks in one call, and a
zarr array read that way (a sharded one with `coalesce=True`, a local directory's runs of
adjacent chunks) gives NumPy's pixels."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core import ChunkCache, ChunkReadError, ChunkRef, ChunkState, LoadClass
from napari_lazy_zarr.core.executors import ManualExecutor
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.sources.protocol import ArraySource, BatchSource
from napari_lazy_zarr.core.sources.zarr import LOCAL_BATCH, open_zarr_source

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


def test_a_coalesced_read_fills_only_the_absent_chunks(
    sharded: tuple[Path, np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's stored inner chunks come back decoded, with no fill-value chunk made for
    them: once one was made (and dropped) for every chunk read, 512 KB per 512² uint16."""
    path, data = sharded
    source = open_zarr_source(path, coalesce=True)
    grid = [(r, c) for r in range(4) for c in range(3)]  # the first shard, two absent
    fills: list[tuple[int, ...]] = []
    real_full = np.full

    def full(shape: Any, *args: Any, **kwargs: Any) -> np.ndarray[Any, Any]:
        fills.append(tuple(shape))
        return real_full(shape, *args, **kwargs)

    monkeypatch.setattr(np, "full", full)
    found = source.read_chunks(grid)
    monkeypatch.undo()
    for (r, c), got in zip(grid, found, strict=True):
        assert not isinstance(got, BaseException)
        np.testing.assert_array_equal(got, data[r * 10 : r * 10 + 10, c * 10 : c * 10 + 10])
    assert fills == [(10, 10), (10, 10)]  # (0, 1) and (0, 2), not stored


def test_a_local_directory_batches_runs_of_adjacent_chunks(
    sharded: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    plain = tmp_path / "plain.zarr"
    zarr.create_array(str(plain), shape=(8, 40), chunks=(2, 2), dtype="u1")
    unsharded = open_zarr_source(plain)  # runs of LOCAL_BATCH along the last axis
    assert unsharded.batch_share
    assert unsharded.batch_key((3, 8)) == unsharded.batch_key((3, 11)) == (3, 2)
    assert unsharded.batch_key((3, 12)) == (3, 3)
    assert unsharded.batch_key((2, 8)) != unsharded.batch_key((3, 8))
    zipped = shutil.make_archive(str(tmp_path / "plain.zarr"), "zip", root_dir=plain)
    assert open_zarr_source(zipped).batch_key((3, 8)) is None  # a zip file: read alone
    path, _ = sharded
    assert open_zarr_source(path).batch_key((3, 4)) is None  # a local shard: read alone
    assert not open_zarr_source(path).batch_share
    assert open_zarr_source(path, coalesce=True).batch_key((3, 4)) == (0, 1)  # whole shard
    assert not open_zarr_source(path, coalesce=True).batch_share


@pytest.fixture(scope="module")
def blosc_v2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray[Any, Any]]:
    """A 45x70 uint16 Zarr v2 array in 10x10 blosc-lz4 chunks written by zarr-python (edge
    chunks clipped), one chunk all fill value (not stored)."""
    path = tmp_path_factory.mktemp("batch") / "v2.zarr"
    rng = np.random.default_rng(11)
    data = rng.integers(1, 60_000, size=(45, 70), dtype=np.uint16)
    data[10:20, 30:40] = 0
    array = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=(10, 10),
        dtype="u2",
        fill_value=0,
        zarr_format=2,
        compressors=numcodecs.Blosc(cname="lz4", clevel=1, shuffle=numcodecs.Blosc.SHUFFLE),
    )
    array[...] = data
    assert not (path / "1.3").exists()
    return path, data


@pytest.mark.parametrize("store", ["blosc_v2", "sharded"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    box=st.tuples(st.integers(0, 44), st.integers(1, 45), st.integers(0, 69), st.integers(1, 70))
)
def test_local_batches_read_numpy_pixels(
    request: pytest.FixtureRequest, store: str, box: tuple[int, int, int, int]
) -> None:
    path, data = request.getfixturevalue(store)
    y0, height, x0, width = box
    window = (slice(y0, min(45, y0 + height)), slice(x0, min(70, x0 + width)))
    source = open_zarr_source(path)
    calls: list[int] = []
    read_chunks = source.read_chunks

    def spy(coords: Sequence[tuple[int, ...]]) -> list[np.ndarray[Any, Any] | BaseException]:
        calls.append(len(coords))
        return read_chunks(coords)

    source.read_chunks = spy  # type: ignore[method-assign]
    with ChunkCache(concurrency=1) as cache:
        view = ChunkedArray(source, cache)[window]
        np.testing.assert_array_equal(view.result(timeout=30), data[window])
        runs = Counter(source.batch_key(ref.coords) for ref in view.chunk_refs())
    # One worker: each run of the view's chunks is read in one call, a lone chunk alone;
    # a local shard's inner chunks always alone.
    if store == "sharded":
        assert calls == []
    else:
        assert sorted(calls) == sorted(n for n in runs.values() if n > 1)
        assert all(n <= LOCAL_BATCH for n in calls)


def test_a_corrupt_chunk_in_a_local_batch_fails_alone_and_is_named(
    blosc_v2: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    copy = tmp_path / "v2.zarr"
    shutil.copytree(blosc_v2[0], copy)
    (copy / "2.1").write_bytes(b"not blosc at all, but long enough for a header")
    source = open_zarr_source(copy)
    results = source.read_chunks([(2, 0), (2, 1), (2, 2), (2, 3)])
    error = results.pop(1)
    assert isinstance(error, ChunkReadError)
    assert "'2.1'" in str(error)
    data = blosc_v2[1]
    for column, got in zip((0, 2, 3), results, strict=True):
        assert not isinstance(got, BaseException)
        np.testing.assert_array_equal(got, data[20:30, column * 10 : column * 10 + 10])


class SharedRowBatches(RowBatches):
    """`RowBatches` whose batches save per-chunk work only (as a local directory's)."""

    batch_share = True


def _shared(
    concurrency: int,
) -> tuple[SharedRowBatches, ManualExecutor, ChunkCache, np.ndarray[Any, Any]]:
    """A 4x4-chunk `SharedRowBatches`, a stepped cache reading it, and its pixels."""
    data = np.arange(8 * 8, dtype=np.uint16).reshape(8, 8)
    executor = ManualExecutor()
    cache = ChunkCache(concurrency=concurrency, executor=executor)
    return SharedRowBatches(data), executor, cache, data


def test_a_shared_batch_leaves_work_for_the_other_workers() -> None:
    source, executor, cache, data = _shared(concurrency=2)
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]  # one batch (grid rows 0-1)
    request = cache.request(_refs(source, coords), view="v")
    executor.run_all()
    assert request.complete
    # The first worker takes its share, half of the four; not the whole batch.
    assert source.calls
    assert max(len(call) for call in source.calls) == 2
    for one in coords:
        lo = (one[0] * 2, one[1] * 2)
        np.testing.assert_array_equal(
            cache.lookup(ChunkRef.of(source, one).key), data[lo[0] : lo[0] + 2, lo[1] : lo[1] + 2]
        )


def test_a_shared_batch_carries_no_background_chunk_with_visible_work() -> None:
    source, executor, cache, _ = _shared(concurrency=1)
    shown = [(0, 0), (0, 1)]
    overview = [(1, 0), (1, 1)]  # the same batch (grid rows 0-1), wanted as background
    cache.request(_refs(source, overview), view="thumbnail", load_class=LoadClass.OVERVIEW)
    cache.request(_refs(source, shown), view="v")
    executor.run_all()
    assert sorted(map(sorted, source.calls)) == [shown, overview]
    for one in shown + overview:
        assert cache.state(ChunkRef.of(source, one).key) is ChunkState.READY


@pytest.mark.parametrize("gap", [-1, 1.5, True])
def test_coalesce_gap_must_be_bytes(sharded: tuple[Path, np.ndarray[Any, Any]], gap: Any) -> None:
    with pytest.raises(ValueError, match="coalesce_gap"):
        open_zarr_source(sharded[0], coalesce_gap=gap)
