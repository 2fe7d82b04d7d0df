"""Test aids for code built on the engine: executors run by hand, and a chunk source with faults.

Shipped (as ``zarr_indexing.testing`` is) so that tests of the plugin, of
scripts and of other sources can drive a `ChunkCache` deterministically:

- `InlineExecutor` runs each load on the calling thread, `ManualExecutor`
  holds loads until the test runs them one at a time (both live in
  `napari_lazy_zarr.core.executors` and are re-exported here);
- `FaultySource` wraps any `ChunkSource`, records every read and raises
  `InjectedFaultError` for the chunks chosen to fail.

Importing this module imports neither pytest nor hypothesis.

Examples
--------
>>> import numpy as np
>>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, ChunkState
>>> source = FaultySource(ArraySource(np.arange(8), chunks=(4,)), failing={(1,)})
>>> executor = ManualExecutor()
>>> with ChunkCache(executor=executor) as cache:
...     request = cache.request([ChunkRef.of(source, (0,)), ChunkRef.of(source, (1,))])
...     executor.run_all()
...     [cache.state(key).name for key in request.keys]
2
['READY', 'FAILED']
>>> source.reads
[(0,), (1,)]
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.executors import InlineExecutor, ManualExecutor

if TYPE_CHECKING:
    from collections.abc import Hashable

    import numpy as np
    from zarr_indexing import DimensionGridLike, IndexDomain

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["FaultySource", "InjectedFaultError", "InlineExecutor", "ManualExecutor"]


class InjectedFaultError(OSError):
    """The error a `FaultySource` raises for a chosen chunk.

    An `OSError`, as a failing store's read would raise, so the cache treats it
    as any storage failure: the chunk goes FAILED and may be retried.
    """


class FaultySource:
    """Delegates to `inner`, records every read, and raises for the chunks in `failing`.

    A `ChunkSource` (its identity is new: ``("faulty", inner.identity)``, so its
    chunks never share cache entries with `inner`'s).

    Parameters
    ----------
    inner
        The source whose chunks are read.
    failing
        Grid coordinates of the chunks whose reads raise `InjectedFaultError`.
        The set may be changed while a test runs (e.g. to clear a fault before a
        retry).

    Attributes
    ----------
    failing : set of tuple of int
        The chunks failing now.
    reads : list of tuple of int
        Every read, in order, failed ones included.

    Notes
    -----
    Thread contract: `read_chunk` may be called from any thread (the cache's
    workers); `reads` is appended to under a lock.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource
    >>> source = FaultySource(ArraySource(np.arange(6), chunks=(3,)), failing={(0,)})
    >>> source.read_chunk((1,))
    array([3, 4, 5])
    >>> source.read_chunk((0,))
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.testing.InjectedFaultError: injected fault reading chunk (0,)
    >>> source.failing.clear()
    >>> source.read_chunk((0,))
    array([0, 1, 2])
    >>> source.reads
    [(1,), (0,), (0,)]
    """

    def __init__(self, inner: ChunkSource, failing: set[tuple[int, ...]] | None = None) -> None:
        self.inner = inner
        self.failing: set[tuple[int, ...]] = set(failing or ())
        self.reads: list[tuple[int, ...]] = []
        self._lock = threading.Lock()

    @property
    def identity(self) -> Hashable:
        return ("faulty", self.inner.identity)

    @property
    def domain(self) -> IndexDomain:
        return self.inner.domain

    @property
    def shape(self) -> tuple[int, ...]:
        return self.inner.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.inner.dtype

    @property
    def fill_value(self) -> Any:
        return self.inner.fill_value

    @property
    def grid(self) -> tuple[DimensionGridLike, ...]:
        return self.inner.grid

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """Record the read; raise `InjectedFaultError` if `coords` is failing, else read it."""
        with self._lock:
            self.reads.append(tuple(coords))
            fail = tuple(coords) in self.failing
        if fail:
            raise InjectedFaultError(f"injected fault reading chunk {coords}")
        return self.inner.read_chunk(coords)
