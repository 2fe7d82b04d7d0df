"""`CacheReader`: a zarr-indexing `Reader` that serves `LazyArray` parts from the chunk cache.

Also `lazy_for`, the `LazyArray` over a source partitioned on its read grid
that every read starts from. The reader needs of a cache only lookups and,
when it must load a chunk itself, requests (`ChunkLoader`): it imports
neither the cache nor the plans above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from zarr_indexing import (
    ConstantMap,
    DimensionMap,
    FixedDimension,
    IndexTransform,
    LazyArray,
    ReadContext,
    numpy_reader,
)

from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.keys import ChunkKey, ChunkLookup, ChunkRef, grid_shape

if TYPE_CHECKING:
    from collections.abc import Iterable

    from napari_lazy_zarr.core.cache import Request
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["CacheReader", "ChunkLoader", "apply_transform", "lazy_for"]


class ChunkLoader(ChunkLookup, Protocol):
    """What a `CacheReader` needs of a cache: lookups, and a request to load and pin
    chunks when a part's chunk was not requested first. `ChunkCache` is one."""

    def request(self, chunks: Iterable[ChunkRef], /) -> Request:
        """Pin `chunks` and queue the missing ones (a context manager releasing them)."""
        ...


class _GridAdapter:
    """The array-like `LazyArray` wraps: shape and dtype only; reads go through `CacheReader`."""

    __slots__ = ("dtype", "shape")

    def __init__(self, source: ChunkSource) -> None:
        self.shape = source.shape
        self.dtype = source.dtype

    def __getitem__(self, key: Any) -> Any:
        raise TypeError("chunked arrays are read through the chunk cache, not by slicing")


def lazy_for(source: ChunkSource) -> LazyArray:
    """A `LazyArray` over `source` partitioned exactly on its read grid."""
    lazy = LazyArray(_GridAdapter(source))
    grid = source.grid
    if all(isinstance(g, FixedDimension) for g in grid):
        return lazy.with_parts(tuple(int(g.size) for g in grid if isinstance(g, FixedDimension)))
    # Per-axis sizes must tile the extent exactly: clip each axis's last chunk (a
    # FixedDimension declares its full size even where the array ends).
    sizes = [
        [min(int(g.chunk_size(i)), extent - int(g.chunk_offset(i))) for i in range(n)]
        for g, n, extent in zip(grid, grid_shape(source), source.shape, strict=True)
    ]
    return lazy.with_parts_per_axis(sizes)


def _box_selection(transform: IndexTransform) -> tuple[int | slice, ...] | None:
    """Basic NumPy selectors for a transform that is a plain box, else None.

    The common viewport part: every output map is a constant or a unit-stride
    map of its own input axis, in order. Those copy with one slicing operation.
    """
    domain = transform.domain
    selectors: list[int | slice] = []
    last_input = -1
    for output_map in transform.output:
        if isinstance(output_map, ConstantMap):
            selectors.append(output_map.offset)
        elif (
            isinstance(output_map, DimensionMap)
            and output_map.stride == 1
            and output_map.input_dimension > last_input
        ):
            axis = output_map.input_dimension
            last_input = axis
            start = output_map.offset + domain.inclusive_min[axis]
            selectors.append(slice(start, start + domain.shape[axis]))
        else:
            return None
    # Every input axis must be consumed by one map, or the result rank differs.
    consumed = sum(isinstance(m, DimensionMap) for m in transform.output)
    return tuple(selectors) if consumed == domain.ndim else None


def apply_transform(
    data: np.ndarray[Any, Any], transform: IndexTransform, out: np.ndarray[Any, Any]
) -> None:
    """Fill `out` with `data` selected through `transform` (zero-origin into `out`).

    A box is one slice-and-copy; anything else goes through zarr-indexing's
    NumPy reader, which handles strides, reversals and gathers exactly.
    """
    selection = _box_selection(transform)
    if selection is not None:
        np.copyto(out, data[selection], casting="unsafe")
    else:
        numpy_reader.read_into(data, ReadContext(transform), out)


class CacheReader:
    """Fills `LazyArray` parts from a `ChunkCache`, consuming the plan it is handed.

    Each part's `context.projection` names the chunk (its domain is the cache
    key) and carries the chunk-local transform; nothing is re-planned. The
    reader never loads: the caller requests (and pins) the chunks before
    resolving parts, so a part's chunk is either READY or missing.

    Parameters
    ----------
    cache, source
        Where the chunks live (a `ChunkCache`, or any `ChunkLoader`) and which
        source they belong to.
    blocking
        If True, a missing chunk is an error (the caller waited for it).
        If False, a missing chunk's cells get the placeholder and its key is
        recorded in `missing`.
    placeholder
        The value for missing cells (default: the source's fill value).
    fallback
        An array of the whole view's shape whose values stand in for missing
        cells (e.g. a coarser level, upsampled); takes precedence over
        `placeholder`.

    Thread contract: one instance serves one read; parts may be resolved from
    several threads (the `missing` set is only appended to).

    Examples
    --------
    >>> import numpy as np
    >>> from zarr_indexing import LazyArray
    >>> from napari_lazy_zarr.core.cache import ChunkCache
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> cache = ChunkCache(1 << 20)
    >>> source = ArraySource(np.arange(8), chunks=(4,), name="x")
    >>> reader = CacheReader(cache, source, blocking=False, placeholder=-1)
    >>> view = LazyArray(np.zeros(8, dtype=int)).with_parts((4,)).with_reader(reader)[2:6]
    >>> view.result()
    array([-1, -1, -1, -1])
    >>> len(reader.missing)
    2
    >>> cache.close()
    """

    __slots__ = ("_blocking", "_cache", "_fallback", "_placeholder", "_source", "missing")

    def __init__(
        self,
        cache: ChunkLoader,
        source: ChunkSource,
        *,
        blocking: bool,
        placeholder: Any = None,
        fallback: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self._cache = cache
        self._source = source
        self._blocking = blocking
        self._placeholder = source.fill_value if placeholder is None else placeholder
        self._fallback = fallback
        self.missing: set[ChunkKey] = set()

    def key(self, context: ReadContext) -> ChunkKey:
        projection = context.projection
        if projection is None:
            raise ValueError("CacheReader reads planned parts only (context.projection is None)")
        domain = projection.chunk_domain
        return ChunkKey(self._source.identity, domain.inclusive_min, domain.exclusive_max)

    def read_into(self, source: Any, context: ReadContext, out: np.ndarray[Any, Any], /) -> None:
        key = self.key(context)
        projection = context.projection
        assert projection is not None  # checked by key()
        data = self._cache.lookup(key, partial=not self._blocking)
        if data is not None:
            apply_transform(data, projection.chunk_transform, out)
        elif self._blocking:
            self._read_blocking(key, context, out)
        else:
            self.missing.add(key)
            if self._fallback is not None:
                apply_transform(self._fallback, projection.cell_transform, out)
            else:
                out[...] = self._placeholder

    def _read_blocking(
        self, key: ChunkKey, context: ReadContext, out: np.ndarray[Any, Any]
    ) -> None:
        """A part whose chunk the caller did not request first: load it and wait.

        `ChunkedArray` always requests (and pins) a view's chunks before
        resolving its parts, so this serves other callers: a `LazyArray`
        carrying this reader directly. A part on a foreign partitioning (its
        box is not one of the source's chunks) is re-partitioned on the
        source's grid (`lazy_for`), its chunks requested together, and read
        through this reader; that is the only place the reader plans.
        """
        projection = context.projection
        assert projection is not None
        ref = ChunkRef.of(self._source, projection.chunk_coords)
        if ref.key == key:
            with self._cache.request([ref]) as request:
                # Woken with CacheClosedError if the cache closes meanwhile.
                request.done.result()
                failed = request.failed()
                if key in failed:
                    # The cache keeps the error: raise a new one, not the shared instance.
                    raise ChunkReadError(f"chunk {key} failed: {failed[key]}") from failed[key]
                data = self._cache.lookup(key)
                assert data is not None  # pinned READY
                apply_transform(data, projection.chunk_transform, out)
            return
        view = lazy_for(self._source).with_reader(self)[context.transform]
        parts = list(view.parts())
        refs = {ChunkRef.of(self._source, p.projection.chunk_coords): None for p in parts}
        with self._cache.request(list(refs)) as request:
            request.done.result()  # every chunk at once, as a view's read loads them
            failed = request.failed()
            for ref in refs:
                if ref.key in failed:
                    error = failed[ref.key]
                    raise ChunkReadError(f"chunk {ref.key} failed: {error}") from error
            # Pinned READY: each part is now served from the cache by this reader.
            out[...] = view.result(parts=parts)
