"""A failing listener of the cache's signals never ends a load half way: the read it serves
completes with NumPy's pixels on real worker threads, and the error is logged."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray

if TYPE_CHECKING:
    import pytest


def test_a_listener_that_raises_does_not_stall_a_read(caplog: pytest.LogCaptureFixture) -> None:
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    calls: list[int] = []

    def broken(batch: Any) -> None:
        calls.append(len(batch))
        raise ReferenceError("weakly-referenced object no longer exists")

    with ChunkCache(1 << 20, concurrency=2) as cache:
        cache.state_changed.connect(broken)
        cache.statistics_changed.connect(broken)
        array = ChunkedArray(ArraySource(data, chunks=(16, 16), name="listened"), cache)
        with caplog.at_level(logging.ERROR, logger="napari_lazy_zarr.core.cache.cache"):
            np.testing.assert_array_equal(array.result(timeout=30), data)
    assert calls  # the listener was called, and failed
    assert any("a listener of the chunk cache" in r.getMessage() for r in caplog.records)
