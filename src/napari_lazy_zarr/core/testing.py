"""Chunk sources with injected behaviour, wrapping a real source (for fault and order tests)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Hashable

    import numpy as np
    from zarr_indexing import DimensionGridLike, IndexDomain

    from napari_lazy_zarr.core import ChunkSource


class InjectedFaultError(OSError):
    """The error a `FaultySource` raises for a chosen chunk."""


class FaultySource:
    """Delegates to `inner`, records every read, and raises for the chunks in `failing`.

    `failing` may be changed while the test runs (e.g. to clear a fault before a retry).
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
        with self._lock:
            self.reads.append(tuple(coords))
            fail = tuple(coords) in self.failing
        if fail:
            raise InjectedFaultError(f"injected fault reading chunk {coords}")
        return self.inner.read_chunk(coords)
