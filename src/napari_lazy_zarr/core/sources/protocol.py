"""The `ChunkSource` protocol: what the engine needs from anything that yields chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

import numpy as np

from napari_lazy_zarr.core.keys import chunk_bounds

if TYPE_CHECKING:
    from collections.abc import Hashable, Mapping, Sequence

    from numpy.typing import DTypeLike
    from zarr_indexing import DimensionGridLike, IndexDomain

    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef

__all__ = [
    "ArraySource",
    "BatchSource",
    "CancellableSource",
    "ChunkSource",
    "DerivedSource",
    "KeepingSource",
    "SourceFields",
    "fill_value_of",
    "is_derived",
]


class ChunkSource(Protocol):
    """A read-only array answered one chunk at a time (a TensorStore-driver analog).

    Implementations must be safe to call `read_chunk` on from several worker
    threads at once; they do I/O and decoding and hold no engine lock.

    Attributes
    ----------
    identity
        A hashable name for this source, used in chunk keys and messages (for a
        zarr array: its store URL and path). Two sources with equal identity
        must hold the same data on the same grid.
    domain
        The array's index domain (zero-origin).
    shape, dtype
        As for a zarr array.
    fill_value
        What a chunk absent from storage holds: a scalar of `dtype`, never None
        (see `fill_value_of`).
    grid
        The read grid: one `DimensionGridLike` per axis (irregular allowed).

    Optional attributes the engine reads when present: ``load_reason`` (the
    LOADING reason in events, e.g. ``"computing"``), ``prefetch_ring`` (chunks of
    neighbours a view prefetches around itself, 1 by default, 0 for costly
    computations: `napari_lazy_zarr.core.viewport.prefetch_ring`) and
    ``cancel_superseded`` (False: in-flight reads are cancelled only on close).
    """

    @property
    def identity(self) -> Hashable: ...

    @property
    def domain(self) -> IndexDomain: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    @property
    def fill_value(self) -> Any: ...

    @property
    def grid(self) -> tuple[DimensionGridLike, ...]: ...

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """Return the decoded chunk at grid `coords`, clipped to the array's extent.

        A chunk absent from storage is returned filled with `fill_value`.
        Raises an exception naming the chunk when it cannot be read or decoded.
        """
        ...


class DerivedSource(ChunkSource, Protocol):
    """A `ChunkSource` whose chunks are computed from chunks of other sources.

    `ChunkCache` schedules such a chunk in two steps: it first loads the
    chunk's *inputs* as ordinary cache entries (shared with every other view
    of their sources, each read once), then calls `combine` on a worker with
    their data. `read_chunk` stays a standalone, direct read for callers
    without a cache.

    `chunk_inputs` and `chunk_cost` are called while the cache's lock is held:
    they must be cheap, pure arithmetic (no I/O, no call into the cache).
    Inputs must come from other sources (a finer level), never from this one.
    """

    def chunk_inputs(self, coords: tuple[int, ...]) -> Sequence[ChunkRef]:
        """The chunks chunk `coords` is computed from (each listed once)."""
        ...

    def chunk_cost(self, coords: tuple[int, ...]) -> int:
        """Stored chunk reads building chunk `coords` from nothing costs (>= 1; an
        estimate, used to schedule it behind cheaper loads)."""
        ...

    def combine(
        self, coords: tuple[int, ...], inputs: Mapping[ChunkKey, np.ndarray[Any, Any]]
    ) -> np.ndarray[Any, Any]:
        """Chunk `coords` computed from its inputs' data, keyed by their chunk keys.

        The input arrays are read-only. Called on a worker thread, outside any lock.
        """
        ...


@runtime_checkable
class CancellableSource(ChunkSource, Protocol):
    """A `ChunkSource` whose in-flight `read_chunk` calls can be cancelled.

    The cache calls `cancel_load(coords)` (from any thread, never holding its
    lock) when nobody wants a LOADING chunk any more: every view that asked
    for it moved on, or the cache closed. The `read_chunk` call for `coords`
    running on a worker should then return promptly by raising
    `LoadCancelledError`; the cache puts the chunk back to QUEUED (parked),
    never FAILED. Cancelling a chunk that is not loading does nothing.
    """

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        """Ask the in-flight read of chunk `coords` (if any) to stop."""
        ...


@runtime_checkable
class BatchSource(ChunkSource, Protocol):
    """A `ChunkSource` that reads some chunks together cheaper than one by one.

    A sharded array over HTTP is one: the inner chunks of one shard that a
    view needs are fetched with one ranged request per run of adjacent byte
    ranges, instead of one request each. Chunks with the same non-None
    `batch_key` may be handed to one `read_chunks` call: when a worker takes
    such a chunk, the cache moves every other QUEUED chunk of that batch that
    a view still wants to LOADING with it. A `batch_key` of None reads the
    chunk alone (`read_chunk`).

    A source may also say ``batch_share = True``: its batches save per-chunk
    work only (a local directory's), so a worker takes no more of a batch
    than its share of the queued chunks, and no other worker is left idle.
    """

    def batch_key(self, coords: tuple[int, ...]) -> Hashable | None:
        """The batch chunk `coords` may be read with (e.g. its shard), or None."""
        ...

    def read_chunks(
        self, coords: Sequence[tuple[int, ...]]
    ) -> list[np.ndarray[Any, Any] | BaseException]:
        """Each chunk of `coords`, in order: its data, or the error that failed it alone.

        A `LoadCancelledError` (the cache cancelled the reads) may be raised for all.
        """
        ...


@runtime_checkable
class KeepingSource(ChunkSource, Protocol):
    """A `ChunkSource` that keeps decoded data of its own beside the chunks it returns.

    A sharded zarr array is one: it keeps the shard indexes it has read, so
    each is read once. Every cache that reads the source counts `kept_bytes`
    in its byte budget (`ChunkCache.total_bytes_limit`) and evicts chunks to
    make room for them; the source bounds them itself.
    """

    @property
    def kept_bytes(self) -> int:
        """Bytes kept now (read from any thread, without a lock: a recent value will do)."""
        ...


def is_derived(source: ChunkSource) -> TypeGuard[DerivedSource]:
    """Whether `source` is a `DerivedSource` (its chunks have inputs).

    Examples
    --------
    >>> is_derived(ArraySource(np.zeros(4), chunks=(2,)))
    False
    """
    return all(
        callable(getattr(source, name, None)) for name in ("chunk_inputs", "chunk_cost", "combine")
    )


def fill_value_of(value: Any, dtype: DTypeLike) -> Any:
    """`value` as a scalar of `dtype`: what a chunk absent from storage holds.

    None (Zarr v2's ``"fill_value": null``, TensorStore's default) is the dtype's
    zero, as zarr-python reads it; NaN and the infinities are kept.

    Examples
    --------
    >>> fill_value_of(None, "uint16"), fill_value_of(None, "bool")
    (np.uint16(0), np.False_)
    >>> fill_value_of(float("nan"), "float32"), fill_value_of(-float("inf"), "float64")
    (np.float32(nan), np.float64(-inf))
    >>> fill_value_of(7, "int8")
    np.int8(7)
    """
    dtype = np.dtype(dtype)
    if value is None:
        return np.zeros((), dtype=dtype)[()]
    return np.asarray(value, dtype=dtype)[()]


class SourceFields:
    """The `ChunkSource` attributes, read from `_identity`, `_shape`, `_dtype`, `_fill_value`
    and `_grid` (set by the subclass's constructor)."""

    _identity: Hashable
    _shape: tuple[int, ...]
    _dtype: np.dtype[Any]
    _fill_value: Any
    _grid: tuple[DimensionGridLike, ...]

    @property
    def identity(self) -> Hashable:
        return self._identity

    @property
    def domain(self) -> IndexDomain:
        from zarr_indexing import IndexDomain

        return IndexDomain.from_shape(self._shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def fill_value(self) -> Any:
        return self._fill_value

    @property
    def grid(self) -> tuple[DimensionGridLike, ...]:
        return self._grid


class ArraySource(SourceFields):
    """A `ChunkSource` over an in-memory array, split on a chosen grid.

    For tests, examples and computed data that already sits in memory. Each
    chunk is copied out, so later changes to `array` do not alter cached chunks.

    Examples
    --------
    >>> import numpy as np
    >>> source = ArraySource(np.arange(10), chunks=(4,), name="x")
    >>> source.read_chunk((2,))
    array([8, 9])
    """

    def __init__(
        self,
        array: np.ndarray[Any, Any],
        *,
        chunks: Sequence[int] | Sequence[Sequence[int]],
        name: Hashable | None = None,
        fill_value: Any = 0,
    ) -> None:
        from zarr_indexing import dimension_grids_from_chunks

        self._array = np.asarray(array)
        self._grid = dimension_grids_from_chunks(chunks, self._array.shape)
        self._identity = name if name is not None else f"array-{id(self):x}"
        self._shape = tuple(int(n) for n in self._array.shape)
        self._dtype = np.dtype(self._array.dtype)
        self._fill_value = fill_value_of(fill_value, self._dtype)

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        lo, hi = chunk_bounds(self._grid, coords, self.shape)
        region = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        return np.array(self._array[region], copy=True)
