"""Chunk keys: what names a chunk in the cache (`ChunkKey`), what loads one (`ChunkRef`).

The bottom of the engine: every other module may import this one, and it imports
nothing of the engine at run time (`ChunkSource` is named for type checking only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable, Sequence

    import numpy as np
    from zarr_indexing import DimensionGridLike

    from napari_lazy_zarr.core.source import ChunkSource

__all__ = [
    "ChunkKey",
    "ChunkLookup",
    "ChunkRef",
    "chunk_bounds",
    "chunk_key",
    "grid_shape",
]


@dataclass(frozen=True, slots=True)
class ChunkKey:
    """Identifies cached data: the source's identity and the chunk's domain.

    The domain, not bare grid coordinates, is part of the key so that two grids
    over one source never collide.

    Examples
    --------
    >>> key = ChunkKey("a.zarr", (0, 512), (512, 1024))
    >>> key.shape
    (512, 512)
    >>> str(key)
    'a.zarr[0:512, 512:1024]'
    """

    source: Hashable
    inclusive_min: tuple[int, ...]
    exclusive_max: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """The chunk's extent per axis (clipped to the array)."""
        return tuple(
            hi - lo for lo, hi in zip(self.inclusive_min, self.exclusive_max, strict=True)
        )

    def __str__(self) -> str:
        box = ", ".join(
            f"{lo}:{hi}" for lo, hi in zip(self.inclusive_min, self.exclusive_max, strict=True)
        )
        return f"{self.source}[{box}]"


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """A chunk to load: its key, plus the source and grid coordinates that read it.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.source import ArraySource
    >>> ref = ChunkRef.of(ArraySource(np.zeros((6,)), chunks=(4,), name="z"), (1,))
    >>> str(ref.key)
    'z[4:6]'
    """

    key: ChunkKey
    source: ChunkSource = field(compare=False)
    coords: tuple[int, ...]

    @classmethod
    def of(cls, source: ChunkSource, coords: Sequence[int]) -> ChunkRef:
        coords_t = tuple(int(c) for c in coords)
        return cls(chunk_key(source, coords_t), source, coords_t)


class ChunkLookup(Protocol):
    """What reading needs from a cache: the READY chunks among some keys.

    `ChunkCache` satisfies it; a read plan takes one, so planning a read does
    not depend on the cache itself.
    """

    def lookup(self, key: ChunkKey) -> np.ndarray[Any, Any] | None:
        """The decoded chunk if READY, else None."""
        ...

    def lookup_many(
        self, keys: Iterable[ChunkKey], *, count_hits: bool = False
    ) -> tuple[dict[ChunkKey, np.ndarray[Any, Any]], set[ChunkKey]]:
        """The READY chunks among `keys`, and the FAILED ones."""
        ...


def chunk_bounds(
    grid: Sequence[DimensionGridLike], coords: Sequence[int], shape: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The `[inclusive_min, exclusive_max)` box of chunk `coords`, clipped to `shape`.

    Examples
    --------
    >>> from zarr_indexing import dimension_grids_from_chunks
    >>> grid = dimension_grids_from_chunks((4, 4), shape=(10, 6))
    >>> chunk_bounds(grid, (2, 1), (10, 6))
    ((8, 4), (10, 6))
    """
    lo = tuple(int(g.chunk_offset(int(c))) for g, c in zip(grid, coords, strict=True))
    hi = tuple(
        min(start + int(g.chunk_size(int(c))), extent)
        for g, c, start, extent in zip(grid, coords, lo, shape, strict=True)
    )
    return lo, hi


def chunk_key(source: ChunkSource, coords: Sequence[int]) -> ChunkKey:
    """The cache key of chunk `coords` of `source`."""
    lo, hi = chunk_bounds(source.grid, coords, source.shape)
    return ChunkKey(source.identity, lo, hi)


def grid_shape(source: ChunkSource) -> tuple[int, ...]:
    """Number of chunks along each axis of `source`'s read grid."""
    shape: list[int] = []
    for g, extent in zip(source.grid, source.shape, strict=True):
        shape.append(0 if extent == 0 else int(g.index_to_chunk(extent - 1)) + 1)
    return tuple(shape)
