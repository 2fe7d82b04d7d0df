"""`FailureLog`: a layer's failed chunks, each failure reported once, none lost.

Real chunk sources (`FaultySource` over an `ArraySource`, a virtual pyramid over it)
and a real cache run inline, so every failure lands before the call returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, InlineExecutor
from napari_lazy_zarr.core.sources.decimated import virtual_levels
from napari_lazy_zarr.core.testing import FaultySource, InjectedFaultError
from napari_lazy_zarr.core.viewport import FailureLog, ViewController


def _base(failing: set[tuple[int, ...]]) -> FaultySource:
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    return FaultySource(ArraySource(data, chunks=(16, 16), name="base"), failing)


def test_a_chunk_and_the_virtual_levels_built_from_it_are_one_failure() -> None:
    levels = virtual_levels(_base({(1, 2)}), smallest=16, chunk_size=16)
    assert len(levels) == 3
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        log = FailureLog(levels, cache)
        cache.state_changed.connect(log.observe)
        # The coarsest level first: its one chunk is built from every stored chunk.
        cache.request([ChunkRef.of(levels[2], (0, 0))]).release()
        cache.request([ChunkRef.of(levels[1], (0, 1))]).release()
        (failure,) = log.take()
        assert failure.chunk == "L0 (1, 2) [16:32, 32:48]"
        assert isinstance(failure.cause, InjectedFaultError)
        assert "injected fault reading chunk (1, 2)" in str(failure.error)
        assert not failure.again
        # The stored chunk alone: the virtual levels leave it out (its region at the fill
        # value) rather than failing with it.
        assert cache.statistics.failures == 1


def test_each_distinct_failure_is_reported_once_and_other_sources_are_ignored() -> None:
    base = _base({(0, 0), (3, 3)})
    other = _base({(0, 0)})
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        log = FailureLog([base], cache)
        cache.state_changed.connect(log.observe)
        refs = [ChunkRef.of(base, (y, x)) for y in range(4) for x in range(4)]
        cache.request(refs).release()
        cache.request(refs).release()  # FAILED stays FAILED: nothing new
        cache.request([ChunkRef.of(other.inner, (0, 0))]).release()
        assert sorted(f.coords for f in log.take()) == [(0, 0), (3, 3)]
        assert log.take() == ()


def test_a_retry_that_fails_again_is_reported_again_once() -> None:
    class SharedError(FaultySource):
        """Fails every chunk with one exception, as a plate field that cannot be opened."""

        error = OSError("field differs from the template")

        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            raise self.error

    source = SharedError(_base(set()).inner)
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        log = FailureLog([source], cache)
        cache.state_changed.connect(log.observe)
        refs = [ChunkRef.of(source, (0, x)) for x in range(4)]
        with cache.request(refs):
            (first,) = log.take()  # four chunks, one cause: one report
            assert not first.again
            assert cache.retry(refs[2].key)  # one chunk retried alone, failing the same way
            (again,) = log.take()
            assert again.again
            assert again.coords == (0, 2)
            assert cache.retry_failed() == 4  # all of them: one report again, not four
            assert [f.again for f in log.take()] == [True]


def test_a_failure_made_before_anything_listened_waits_to_be_taken() -> None:
    """The controller emits `failures_found` with nobody connected: nothing is lost."""
    base = _base({(1, 1)})
    cache = ChunkCache(1 << 20, executor=InlineExecutor())
    controller = ViewController([base], cache, prefetch=True, dispatch=InlineExecutor())
    try:
        controller.read(0, controller.arrays[0][:16, :16])  # (1, 1) is only prefetched
        assert controller.latest is not None
        assert not controller.latest.failed  # not on screen
        (failure,) = controller.failures.take()
        assert failure.coords == (1, 1)
        reported: list[Any] = []
        controller.failures_found.connect(reported.append)
        controller.read(0, controller.arrays[0][:16, :16])
        assert reported == []  # already reported
    finally:
        controller.close()
        cache.close()


def test_chunks_failed_before_the_log_existed_are_adopted_once() -> None:
    base = _base({(2, 0)})
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        ref = ChunkRef.of(base, (2, 0))
        cache.request([ref]).release()  # another layer of a shared cache failed it
        log = FailureLog([base], cache)
        (failure,) = log.adopt([ref.key])
        assert failure.coords == (2, 0)
        assert log.adopt([ref.key]) == ()
        assert log.take() == (failure,)
