"""Shared fixtures: real zarr stores made with zarr-python, and caches that clean up."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, settings

from napari_lazy_zarr.core import ChunkCache, InlineExecutor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def smooth_data(shape: tuple[int, ...], dtype: Any = np.uint16) -> np.ndarray[Any, Any]:
    """Distinct, position-dependent values: a misplaced cell always shows."""
    return (np.arange(int(np.prod(shape)), dtype=np.int64) % 65521).astype(dtype).reshape(shape)


@pytest.fixture
def make_store(tmp_path: Path) -> Callable[..., tuple[Path, np.ndarray[Any, Any]]]:
    """Write `data` (or distinct values) as a real zarr array; returns (path, data)."""
    counter = iter(range(1_000_000))

    def make(
        shape: tuple[int, ...] = (37, 53),
        chunks: tuple[int, ...] = (8, 16),
        *,
        shards: tuple[int, ...] | None = None,
        zarr_format: int = 3,
        dtype: Any = np.uint16,
        data: np.ndarray[Any, Any] | None = None,
        compressors: Any = "auto",
        fill_value: Any = 0,
    ) -> tuple[Path, np.ndarray[Any, Any]]:
        values = smooth_data(shape, dtype) if data is None else data
        path = tmp_path / f"store{next(counter)}.zarr"
        array = zarr.create_array(
            store=str(path),
            shape=values.shape,
            chunks=chunks,
            shards=shards,
            dtype=values.dtype,
            zarr_format=zarr_format,  # type: ignore[arg-type]
            compressors=compressors,
            fill_value=fill_value,
        )
        array[...] = values
        return path, values

    return make


@pytest.fixture
def inline_cache() -> Iterator[ChunkCache]:
    """A cache that loads synchronously in the requesting thread."""
    with ChunkCache(64 << 20, executor=InlineExecutor()) as cache:
        yield cache


@pytest.fixture
def threaded_cache() -> Iterator[ChunkCache]:
    """A cache with its own worker threads (2), closed after the test."""
    with ChunkCache(64 << 20, concurrency=2) as cache:
        yield cache


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Every test must stop the work it started (close its caches).

    A thread the test started still running work of ours 5 s after the test is a leak. The
    worker pool's parked threads are not: it ends them now (`trim`), and the busy ones
    when their task ends. A thread not started yet (in `threading`'s limbo, as a deadline
    watchdog started at the test's last moment can be) is not a leak to join either.
    """
    from napari_lazy_zarr.core.executors import worker_pool

    before = set(threading.enumerate())
    yield
    worker_pool().trim()
    leaked = [
        t for t in threading.enumerate() if t not in before and t.name.startswith("lazy-zarr")
    ]
    for thread in leaked:
        if thread.is_alive():  # False before it started: `join` would raise RuntimeError
            thread.join(timeout=5)
    alive = [t.name for t in leaked if t.is_alive()]
    assert not alive, f"worker threads left running: {alive}"
