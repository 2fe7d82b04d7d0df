"""Virtual pyramid levels: pixels, one read per stored chunk, scheduling, faults, superseding."""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
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
from napari_lazy_zarr.core.sources.decimated import (
    MIN_LEVEL_EXTENT,
    DecimatedSource,
    virtual_levels,
)
from napari_lazy_zarr.core.sources.protocol import ChunkSource, is_derived
from napari_lazy_zarr.core.testing import FaultySource

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from napari_lazy_zarr.core import ChunkKey

TIMEOUT = 30  # seconds; a bound on waits, never a measured time


class CountingSource(ArraySource):
    """An `ArraySource` that counts `read_chunk` calls per chunk (thread-safe)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: Counter[tuple[int, ...]] = Counter()
        self._lock = threading.Lock()

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        with self._lock:
            self.reads[tuple(coords)] += 1
        return super().read_chunk(coords)


def decimated(data: np.ndarray[Any, Any], factor: int | Sequence[int], axes: Sequence[int]) -> Any:
    """The NumPy oracle: `data` sampled every `factor` cells along `axes` (one factor for
    all, or one per axis)."""
    steps = dict(
        zip(axes, [factor] * len(axes) if isinstance(factor, int) else factor, strict=True)
    )
    return data[tuple(slice(None, None, steps.get(a, 1)) for a in range(data.ndim))]


def level_factors(shape: Sequence[int], axes: Sequence[int], k: int) -> list[int]:
    """Level `k`'s factor along each of `axes`, by the rule: every level halves each axis
    that stays at least 2 pixels long (`MIN_LEVEL_EXTENT`)."""
    factors = []
    for axis in axes:
        factor = 1
        for _ in range(k):
            if math.ceil(shape[axis] / (2 * factor)) >= MIN_LEVEL_EXTENT:
                factor *= 2
        factors.append(factor)
    return factors


def all_refs(source: ChunkSource) -> list[ChunkRef]:
    return [ChunkRef.of(source, c) for c in np.ndindex(*grid_shape(source))]


def closure(refs: Iterable[ChunkRef]) -> set[ChunkKey]:
    """The keys of `refs` and, transitively, of every input they are derived from."""
    keys: set[ChunkKey] = set()
    pending = list(refs)
    while pending:
        ref = pending.pop()
        if ref.key in keys:
            continue
        keys.add(ref.key)
        if is_derived(ref.source):
            pending.extend(ref.source.chunk_inputs(ref.coords))
    return keys


def loading(cache: ChunkCache) -> list[ChunkKey]:
    return [e.key for e in cache.events() if e.current is ChunkState.LOADING]


# -- structure ---------------------------------------------------------------------


def test_levels_are_chained_and_each_chunk_waits_for_a_few_finer_chunks() -> None:
    """The measured case: 16384² stored in 512² chunks (nothing is read here)."""
    base = ArraySource(np.broadcast_to(np.uint16(0), (16384, 16384)), chunks=(512, 512))
    levels = virtual_levels(base)
    assert [level.shape[0] for level in levels] == [16384, 8192, 4096, 2048, 1024, 512]
    for finer, level in itertools.pairwise(levels):
        assert isinstance(level, DecimatedSource)
        assert level.parent is (finer if isinstance(finer, DecimatedSource) else None)
        inputs = [level.chunk_inputs(c) for c in np.ndindex(*grid_shape(level))]
        assert max(len(refs) for refs in inputs) <= 4
        assert {ref.source for refs in inputs for ref in refs} == {finer}
    coarsest = levels[-1]
    # A coarsest chunk stands for 64 stored reads; the level needs each stored chunk once.
    assert {coarsest.chunk_cost(c) for c in np.ndindex(*grid_shape(coarsest))} == {64}  # type: ignore[attr-defined]
    stored = {k for k in closure(all_refs(coarsest)) if k.source == base.identity}
    assert len(stored) == 32 * 32


def test_a_decimated_source_alone_still_reads_its_base_directly() -> None:
    data = np.arange(30 * 20).reshape(30, 20)
    base = ArraySource(data, chunks=(4, 6), name="b")
    level = DecimatedSource(base, 4, (0, 1))
    assert level.parent is None
    assert level.identity == ("b", "decimated", 4, (0, 1))
    np.testing.assert_array_equal(level.read_chunk((0, 0)), data[::4, ::4])
    # In a cache, the same pixels come from the base chunks holding a sample: every row
    # chunk, and the column chunks holding 0, 4, 8, 12, 16 (not [18, 20)).
    assert {ref.coords for ref in level.chunk_inputs((0, 0))} == {
        (r, c) for r in range(8) for c in range(3)
    }
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        np.testing.assert_array_equal(ChunkedArray(level, cache).result(), data[::4, ::4])


def test_a_parent_must_be_a_finer_level_of_the_same_base() -> None:
    base = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="b")
    other = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="o")
    with pytest.raises(ValueError, match="not a finer decimation"):
        DecimatedSource(base, 4, parent=DecimatedSource(other, 2))
    with pytest.raises(ValueError, match="not a finer decimation"):
        DecimatedSource(base, 6, parent=DecimatedSource(base, 4))


# -- pixels ------------------------------------------------------------------------


@st.composite
def pyramids(draw: st.DrawFn) -> tuple[np.ndarray[Any, Any], list[ChunkSource], tuple[int, ...]]:
    rank = draw(st.sampled_from([2, 3]))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=rank, max_size=rank)))
    chunks = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    axes = draw(st.sampled_from([None, (0, 2)] if rank == 3 else [None]))
    data = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    base = ArraySource(data, chunks=chunks, name="base")
    levels = virtual_levels(
        base,
        axes=axes,
        smallest=draw(st.integers(1, 8)),
        chunk_size=draw(st.none() | st.integers(1, 7)),
    )
    return data, levels, tuple(range(rank - 2, rank)) if axes is None else axes


@given(pyramids())
@settings(max_examples=60)
def test_virtual_level_pixels_equal_the_sampled_base(
    pyramid: tuple[np.ndarray[Any, Any], list[ChunkSource], tuple[int, ...]],
) -> None:
    data, levels, axes = pyramid
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        # Coarsest first: its chunks are built from every finer level.
        for k, level in reversed(list(enumerate(levels))):
            expected = decimated(data, level_factors(data.shape, axes, k), axes)
            array = ChunkedArray(level, cache)
            np.testing.assert_array_equal(array.result(timeout=TIMEOUT), expected)
            if k:
                ref = all_refs(level)[-1]
                np.testing.assert_array_equal(cache.lookup(ref.key), level.read_chunk(ref.coords))


@given(pyramids())
@settings(max_examples=15)
def test_virtual_level_pixels_through_non_blocking_reads_on_threads(
    pyramid: tuple[np.ndarray[Any, Any], list[ChunkSource], tuple[int, ...]],
) -> None:
    data, levels, axes = pyramid
    with ChunkCache(1 << 20, concurrency=3) as cache:
        partials = [
            ChunkedArray(level, cache).read_nonblocking(requester=("level", k))
            for k, level in enumerate(levels)
        ]
        for k, (level, partial) in enumerate(zip(levels, partials, strict=True)):
            partial.request.done.result(timeout=TIMEOUT)
            assert not partial.request.failed()
            again = ChunkedArray(level, cache).read_nonblocking()
            assert again.complete
            expected = decimated(data, level_factors(data.shape, axes, k), axes)
            np.testing.assert_array_equal(again.data, expected)


def test_a_cache_that_keeps_nothing_still_builds_every_level() -> None:
    """Inputs are held by the waiting chunk, not pinned: evicting them at once is harmless."""
    data = np.arange(48 * 40, dtype=np.int32).reshape(48, 40)
    levels = virtual_levels(ArraySource(data, chunks=(5, 7)), smallest=4, chunk_size=3)
    with ChunkCache(0, executor=InlineExecutor()) as cache:
        for k, level in enumerate(levels):
            np.testing.assert_array_equal(
                ChunkedArray(level, cache).result(timeout=TIMEOUT), data[:: 2**k, :: 2**k]
            )
        assert cache.statistics.resident_bytes == 0


# -- reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [False, True], ids=["inline", "threads"])
def test_each_stored_chunk_is_read_once_for_all_levels(threads: bool) -> None:
    data = np.arange(96 * 80, dtype=np.uint16).reshape(96, 80)
    base = CountingSource(data, chunks=(8, 8), name="counted")
    levels = virtual_levels(base, smallest=8, chunk_size=8)
    assert len(levels) == 5
    executor = None if threads else InlineExecutor()
    with ChunkCache(64 << 20, concurrency=4, executor=executor) as cache:
        # Coarsest first (napari's thumbnail), then every finer level, then the base.
        for k, level in reversed(list(enumerate(levels))):
            np.testing.assert_array_equal(
                ChunkedArray(level, cache).result(timeout=TIMEOUT), data[:: 2**k, :: 2**k]
            )
    assert sorted(base.reads) == [(r, c) for r in range(12) for c in range(10)]
    assert set(base.reads.values()) == {1}


# -- scheduling ----------------------------------------------------------------------


@pytest.fixture
def manual() -> ManualExecutor:
    return ManualExecutor()


@pytest.fixture
def manual_cache(manual: ManualExecutor) -> Any:
    with ChunkCache(64 << 20, concurrency=1, executor=manual) as cache:
        yield cache


@pytest.mark.parametrize("displayed_level", [0, 1])
def test_overview_work_waits_for_every_displayed_chunk(
    manual_cache: ChunkCache, manual: ManualExecutor, displayed_level: int
) -> None:
    data = np.arange(64 * 64, dtype=np.int32).reshape(64, 64)
    levels = virtual_levels(ArraySource(data, chunks=(8, 8), name="d"), smallest=8, chunk_size=8)
    level = levels[displayed_level]
    # The visible region: the central half of the level.
    visible = ChunkedArray(level, manual_cache)[
        tuple(slice(n // 4, 3 * n // 4) for n in level.shape)
    ]
    displayed_refs = visible.chunk_refs()
    thumbnail_refs = all_refs(levels[-1])
    display = manual_cache.request(displayed_refs, view="display", level=displayed_level)
    thumbnail = manual_cache.request(
        thumbnail_refs, view="thumbnail", level=len(levels) - 1, load_class=LoadClass.OVERVIEW
    )
    while not display.done.done():
        assert manual.run_next()
    # Everything loaded so far was for the displayed chunks.
    assert set(loading(manual_cache)) <= closure(displayed_refs)
    assert not thumbnail.done.done()
    manual.run_all()
    assert thumbnail.complete
    assert not thumbnail.failed()
    np.testing.assert_array_equal(
        ChunkedArray(levels[-1], manual_cache).read_nonblocking().data, data[::8, ::8]
    )
    display.release()
    thumbnail.release()


def test_a_cheap_coarse_overview_waits_for_the_displayed_chunks_too(
    manual_cache: ChunkCache, manual: ManualExecutor
) -> None:
    """Coarse-first alone would load a stored coarse level first; its class does not."""
    data = np.arange(32 * 32, dtype=np.int32).reshape(32, 32)
    fine = ArraySource(data, chunks=(8, 8), name="fine")
    coarse = ArraySource(data[::4, ::4], chunks=(4, 4), name="coarse")
    displayed = [ChunkRef.of(fine, (r, c)) for r in (1, 2) for c in (1, 2)]
    overview = all_refs(coarse)
    manual_cache.request(overview, view="thumbnail", level=2, load_class=LoadClass.OVERVIEW)
    manual_cache.request(displayed, view="display", level=0)
    manual.run_all()
    order = loading(manual_cache)
    assert set(order[:4]) == {ref.key for ref in displayed}
    assert set(order[4:]) == {ref.key for ref in overview}


def test_an_expensive_virtual_chunk_waits_for_cheap_stored_chunks(
    manual_cache: ChunkCache, manual: ManualExecutor
) -> None:
    base = ArraySource(np.zeros((64, 64), dtype=np.int32), chunks=(8, 8), name="e")
    levels = virtual_levels(base, smallest=8, chunk_size=8)
    coarse = ChunkRef.of(levels[3], (0, 0))  # one chunk over all 64 stored chunks
    assert levels[3].chunk_cost((0, 0)) == 64  # type: ignore[attr-defined]
    stored = [ChunkRef.of(base, (7, c)) for c in range(4)]
    # Both NEEDED, the expensive coarse chunk asked for first.
    manual_cache.request([coarse], view="overview", level=3)
    manual_cache.request(stored, view="detail", level=0)
    manual.run_all()
    order = loading(manual_cache)
    assert set(order[:4]) == {ref.key for ref in stored}
    assert order[-1] == coarse.key
    assert manual_cache.state(coarse.key) is ChunkState.READY


def test_cheap_derived_chunks_keep_coarse_first(
    manual_cache: ChunkCache, manual: ManualExecutor
) -> None:
    base = ArraySource(np.zeros((32, 32), dtype=np.int32), chunks=(8, 8), name="c")
    level1 = DecimatedSource(base, 2, chunk_size=4)  # one stored chunk per level chunk
    assert level1.chunk_cost((1, 1)) == 1
    manual_cache.request([ChunkRef.of(base, (0, 0))], view="fine", level=0)
    manual_cache.request([ChunkRef.of(level1, (1, 1))], view="coarse", level=1)
    manual.run_all()
    assert loading(manual_cache)[0] == ChunkRef.of(base, (1, 1)).key  # the coarse chunk's input


def test_the_stale_class_is_not_for_callers(manual_cache: ChunkCache) -> None:
    base = ArraySource(np.zeros((4, 4)), chunks=(2, 2))
    with pytest.raises(ValueError, match="STALE"):
        manual_cache.request([ChunkRef.of(base, (0, 0))], load_class=LoadClass.STALE)


# -- failures ------------------------------------------------------------------------


def test_a_failed_stored_chunk_is_left_out_of_the_levels_above_and_a_retry_restores_it() -> None:
    # No zero in the data: the fill value (0) shows exactly where the failed chunk was.
    data = np.arange(1, 16 * 16 + 1, dtype=np.int32).reshape(16, 16)
    faulty = FaultySource(ArraySource(data, chunks=(4, 4), name="f"), failing={(1, 1)})
    level1 = DecimatedSource(faulty, 2, chunk_size=4)
    level2 = DecimatedSource(faulty, 4, parent=level1, chunk_size=4)
    broken_input = ChunkRef.of(faulty, (1, 1)).key  # rows and columns 4:8
    partial = ChunkRef.of(level1, (0, 0)).key
    top = ChunkRef.of(level2, (0, 0)).key
    # NumPy's decimation with the failed chunk's samples at the fill value, and only those.
    expected1, expected2 = data[::2, ::2].copy(), data[::4, ::4].copy()
    expected1[2:4, 2:4] = 0
    expected2[1, 1] = 0
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        for level, expected in ((level1, expected1), (level2, expected2)):
            ChunkedArray(level, cache).read_nonblocking(placeholder=-1).request.release()
            shown = ChunkedArray(level, cache).read_nonblocking(placeholder=-1)
            np.testing.assert_array_equal(shown.data, expected)  # what a view shows
            shown.request.release()
        assert [cache.state(k) for k in (broken_input, partial, top)] == [
            ChunkState.FAILED,
            ChunkState.READY,
            ChunkState.READY,
        ]
        assert cache.statistics.failures == 1  # the stored chunk alone
        # A blocking read (the exact door) never returns the partial chunks: it names the
        # stored chunk left out, also two levels up.
        for level in (level1, level2):
            with pytest.raises(
                ChunkReadError, match=rf"input chunk {re_escape(broken_input)} failed"
            ):
                ChunkedArray(level, cache).result(timeout=TIMEOUT)
        # The fault is gone; a view still showing the partial chunk pins it while it is
        # retried: it is evicted when released, and combined again when asked for.
        faulty.failing.clear()
        held = cache.request([ChunkRef.of(level1, (0, 0))])
        assert cache.retry_failed() == 1
        assert cache.state(broken_input) is ChunkState.READY
        assert cache.state(top) is ChunkState.EVICTED  # unpinned: at once
        assert cache.state(partial) is ChunkState.READY  # pinned: kept while shown
        held.release()
        assert cache.state(partial) is ChunkState.EVICTED
        np.testing.assert_array_equal(ChunkedArray(level2, cache).result(), data[::4, ::4])
        np.testing.assert_array_equal(ChunkedArray(level1, cache).result(), data[::2, ::2])
        assert faulty.reads.count((1, 1)) == 2
        assert faulty.reads.count((0, 0)) == 1


def test_a_coarse_chunk_whose_inputs_all_failed_fails() -> None:
    data = np.arange(16 * 16, dtype=np.int32).reshape(16, 16)
    failing = {(y, x) for y in range(2) for x in range(2)}  # all four under level 1's (0, 0)
    faulty = FaultySource(ArraySource(data, chunks=(4, 4), name="f"), failing=failing)
    level1 = DecimatedSource(faulty, 2, chunk_size=4)
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        with pytest.raises(ChunkReadError, match=r"input chunk .* failed: injected fault"):
            ChunkedArray(level1, cache)[0:4, 0:4].result(timeout=TIMEOUT)
        assert cache.state(ChunkRef.of(level1, (0, 0)).key) is ChunkState.FAILED
        np.testing.assert_array_equal(  # the chunks beside it are whole
            ChunkedArray(level1, cache)[4:8, 4:8].result(timeout=TIMEOUT), data[8::2, 8::2]
        )


def re_escape(key: ChunkKey) -> str:
    import re

    return re.escape(str(key))


def test_a_chunk_that_cannot_list_its_inputs_fails_visibly() -> None:
    class Broken(DecimatedSource):
        def chunk_inputs(self, coords: tuple[int, ...]) -> list[ChunkRef]:
            raise ChunkReadError(f"no inputs for {coords}")

    level = Broken(ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="b"), 2)
    with (
        ChunkCache(1 << 20, executor=InlineExecutor()) as cache,
        pytest.raises(ChunkReadError, match=r"no inputs for \(0, 0\)"),
    ):
        ChunkedArray(level, cache).result(timeout=TIMEOUT)


# -- superseding -----------------------------------------------------------------------


def test_superseding_a_view_parks_inputs_and_asking_again_completes(
    manual_cache: ChunkCache, manual: ManualExecutor
) -> None:
    data = np.arange(16 * 20, dtype=np.int32).reshape(16, 20)
    base = CountingSource(data, chunks=(4, 4), name="p")
    level1 = DecimatedSource(base, 2, chunk_size=4)
    level2 = DecimatedSource(base, 4, parent=level1, chunk_size=4)
    top = ChunkRef.of(level2, (0, 0))
    wanted = closure([top])
    assert len(wanted) == 1 + 4 + 16
    first = manual_cache.request([top], view="layer", level=2)
    for _ in range(3):
        manual.run_next()  # three stored chunks load
    assert sum(base.reads.values()) == 3
    # The user moves on: the rest of the overview is not fetched.
    elsewhere = manual_cache.request([ChunkRef.of(base, (0, 4))], view="layer")
    assert first.done.cancelled()
    manual.run_all()
    assert elsewhere.complete
    assert sum(base.reads.values()) == 4
    stats = manual_cache.statistics
    assert (stats.queued, stats.deferred) == (0, 0)
    assert stats.parked == stats.states[ChunkState.QUEUED] > 0
    assert manual_cache.state(top.key) is ChunkState.QUEUED
    assert not manual_cache._dependents  # no bookkeeping left behind
    # Asked for again, the overview completes, reading only what it had not read.
    again = manual_cache.request([top], view="layer", level=2)
    manual.run_all()
    assert again.complete
    assert manual_cache.statistics.parked == 0
    np.testing.assert_array_equal(manual_cache.lookup(top.key), data[::4, ::4][:4, :4])
    assert set(base.reads.values()) == {1}
    assert len(base.reads) == 16 + 1
    again.release()
    elsewhere.release()


def test_a_deferred_chunk_asked_for_by_a_newer_view_is_not_parked(
    manual_cache: ChunkCache, manual: ManualExecutor
) -> None:
    data = np.arange(16 * 16, dtype=np.int32).reshape(16, 16)
    base = ArraySource(data, chunks=(4, 4), name="n")
    level1 = DecimatedSource(base, 2, chunk_size=4)
    chunk = ChunkRef.of(level1, (0, 0))
    manual_cache.request([chunk], view="layer", level=1)
    manual.run_next()  # the chunk is deferred; one input loads
    # The same view asks again (a pan that keeps the chunk): the stale items must not
    # park the chunk the new request waits for.
    newer = manual_cache.request([chunk, ChunkRef.of(level1, (1, 1))], view="layer", level=1)
    manual.run_all()
    assert newer.complete
    assert not newer.failed()
    np.testing.assert_array_equal(manual_cache.lookup(chunk.key), data[:8:2, :8:2])
    stats = manual_cache.statistics
    assert (stats.queued, stats.deferred, stats.parked) == (0, 0, 0)
    newer.release()


class GatedSource(ArraySource):
    """Reading a `gated` chunk signals `started`, then blocks until `gate` is set."""

    def __init__(self, *args: Any, gated: set[tuple[int, ...]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gated = gated
        self.started = threading.Event()
        self.gate = threading.Event()

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        if tuple(coords) in self.gated:
            self.started.set()
            assert self.gate.wait(TIMEOUT), "the test never opened the gate"
        return super().read_chunk(coords)


def test_a_stale_request_of_a_waiting_chunk_does_not_park_it(
    manual_cache: ChunkCache, manual: ManualExecutor
) -> None:
    """Two workers: one loads the only input, the other pops a superseded duplicate."""
    data = np.arange(16 * 16, dtype=np.int32).reshape(16, 16)
    base = GatedSource(data, chunks=(4, 4), name="g", gated={(0, 0)})
    level1 = DecimatedSource(base, 2, chunk_size=2)  # one stored chunk per level chunk
    chunk = ChunkRef.of(level1, (0, 0))
    manual_cache.concurrency = 2
    shown = manual_cache.request([chunk], view="display", level=1)
    # Needed by a second view (overview work would wait: no background task starts while
    # a visible chunk is queued).
    manual_cache.request([chunk], view="thumbnail", level=1)
    assert len(manual) == 2
    # Worker 1 takes the displayed chunk, queues its input, and blocks reading it.
    worker = threading.Thread(target=manual.run_next)
    worker.start()
    assert base.started.wait(TIMEOUT)
    # The thumbnail goes away; worker 2 pops its superseded duplicate of the chunk.
    manual_cache.release_view("thumbnail")
    assert manual.run_next()
    assert manual_cache.statistics.parked == 0
    base.gate.set()
    worker.join(TIMEOUT)
    assert not worker.is_alive()
    manual.run_all()
    assert shown.complete
    np.testing.assert_array_equal(manual_cache.lookup(chunk.key), data[:4:2, :4:2])
