"""`ChunkCache.request(on_ready=...)`: a loaded chunk is handed over on the thread that
loaded it, before `Request.landed` yields it; a blocking read copies its chunks there."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray, ChunkRef
from napari_lazy_zarr.core.executors import ManualExecutor
from napari_lazy_zarr.core.testing import FaultySource

WAIT = 30.0


def test_on_ready_runs_on_the_loading_thread_before_the_key_lands() -> None:
    data = np.arange(64, dtype="u2").reshape(8, 8)
    source = ArraySource(data, chunks=(4, 4), name="ready")
    refs = [ChunkRef.of(source, (i, j)) for i in range(2) for j in range(2)]
    executor = ManualExecutor()
    handed: list[tuple[Any, np.ndarray[Any, Any], str]] = []

    def on_ready(key: Any, chunk: np.ndarray[Any, Any]) -> None:
        handed.append((key, chunk, threading.current_thread().name))

    with ChunkCache(1 << 20, executor=executor, concurrency=1) as cache:
        request = cache.request(refs[:1])  # one chunk READY before the request below
        executor.run_all()
        request.release()
        with cache.request(refs, on_ready=on_ready) as request:
            landed = request.landed(timeout=WAIT)
            assert next(landed) == refs[0].key  # already READY: lands, never handed over
            assert handed == []
            runner = threading.Thread(target=executor.run_next, name="loader")
            runner.start()
            runner.join(WAIT)
            # The loaded chunk was handed over on the loader's thread, then landed.
            assert [(key, name) for key, _, name in handed] == [(refs[1].key, "loader")]
            np.testing.assert_array_equal(handed[0][1], data[0:4, 4:8])
            assert next(landed) == refs[1].key
            executor.run_all()
            assert [key for key, _, _ in handed] == [ref.key for ref in refs[1:]]
            assert list(landed) == [ref.key for ref in refs[2:]]


def test_a_failed_chunk_lands_without_on_ready_and_a_failing_on_ready_still_lands() -> None:
    data = np.arange(32, dtype="u2").reshape(4, 8)
    source = FaultySource(ArraySource(data, chunks=(4, 4), name="faulty"), failing={(0, 1)})
    refs = [ChunkRef.of(source, (0, j)) for j in range(2)]
    executor = ManualExecutor()
    calls: list[Any] = []

    def on_ready(key: Any, chunk: np.ndarray[Any, Any]) -> None:
        calls.append(key)
        raise RuntimeError("a bug in the reader's copy")

    with (
        ChunkCache(1 << 20, executor=executor) as cache,
        cache.request(refs, on_ready=on_ready) as request,
    ):
        executor.run_all()
        assert sorted(request.landed(timeout=WAIT), key=str) == sorted(
            [ref.key for ref in refs], key=str
        )
        request.done.result(timeout=WAIT)
        assert calls == [refs[0].key]  # the READY one only, its error logged
        assert set(request.failed()) == {refs[1].key}


def test_blocking_reads_copy_on_the_workers_pixel_for_pixel() -> None:
    """Two workers copying into one output while loading: every view equals NumPy's."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 60_000, size=(300, 260), dtype="u2")
    source = ArraySource(data, chunks=(32, 48), name="copies")
    with ChunkCache(1 << 26, concurrency=2) as cache:
        array = ChunkedArray(source, cache)
        for selection in (
            np.s_[:, :],
            np.s_[17:283, 5:251],
            np.s_[::-3, 7::5],
            np.s_[100, :],
            np.s_[40:41, 30:200:7],
        ):
            cache.evict_unpinned()
            np.testing.assert_array_equal(array[selection].result(timeout=WAIT), data[selection])
        points = (rng.integers(0, 300, 500), rng.integers(0, 260, 500))
        cache.evict_unpinned()
        np.testing.assert_array_equal(array.vindex[points].result(timeout=WAIT), data[points])


def test_landed_at_once_waits_for_the_whole_request_or_its_first_failure() -> None:
    """`landed(at_once=True)` yields nothing while a needed chunk is still loading (a
    blocking read's thread is woken once), then every key in landing order; a FAILED
    chunk wakes it at once."""
    data = np.arange(96, dtype="u2").reshape(4, 24)
    source = FaultySource(ArraySource(data, chunks=(4, 4), name="once"), failing={(0, 4)})
    refs = [ChunkRef.of(source, (0, j)) for j in range(3)]
    executor = ManualExecutor()
    with ChunkCache(1 << 20, executor=executor, concurrency=1) as cache:
        with cache.request(refs) as request:
            assert executor.run_next()  # one of three loaded
            with pytest.raises(TimeoutError):  # per chunk, it would yield the one landed
                next(request.landed(timeout=0, at_once=True))
            executor.run_all()
            landed = list(request.landed(timeout=0, at_once=True))
            assert sorted(landed, key=str) == sorted([r.key for r in refs], key=str)
        failing = [ChunkRef.of(source, (0, j)) for j in (4, 5)]
        with cache.request(failing, center=(2.0, 18.0)) as request:  # (0, 4) loads first
            assert executor.run_next()  # (0, 4) fails; (0, 5) still queued
            landed = request.landed(timeout=0, at_once=True)
            assert next(landed) == failing[0].key
            with pytest.raises(TimeoutError):
                next(landed)
