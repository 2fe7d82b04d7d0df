"""Chunk keys: what names a chunk in the cache (`ChunkKey`), what loads one (`ChunkRef`).

A key holds its source's identity; `CompositeIdentity` is the one composite
sources share (a dask source's among them).

The bottom of the engine: every other module may import this one, and it imports
nothing of the engine at run time (`ChunkSource` is named for type checking only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable, Sequence

    import numpy as np
    from zarr_indexing import DimensionGridLike

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "SHOWN_MEMBERS",
    "ChunkKey",
    "ChunkLookup",
    "ChunkRef",
    "CompositeIdentity",
    "box_text",
    "chunk_bounds",
    "chunk_coords",
    "chunk_key",
    "grid_shape",
    "label_of",
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
    # Hashed ~25 times per chunk loaded (entries, waiters, pins, LRU): once, not 0.8 µs each.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_hash", hash((self.source, self.inclusive_min, self.exclusive_max))
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt, not restored: string hashes differ between processes.
        return ChunkKey, (self.source, self.inclusive_min, self.exclusive_max)

    @property
    def shape(self) -> tuple[int, ...]:
        """The chunk's extent per axis (clipped to the array)."""
        return tuple(
            hi - lo for lo, hi in zip(self.inclusive_min, self.exclusive_max, strict=True)
        )

    def __str__(self) -> str:
        return f"{self.source}{box_text(self.inclusive_min, self.exclusive_max)}"


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """A chunk to load: its key, plus the source and grid coordinates that read it.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
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

    def lookup(self, key: ChunkKey, *, partial: bool = False) -> np.ndarray[Any, Any] | None:
        """The decoded chunk if READY, else None (a partial derived chunk: only with
        `partial`)."""
        ...

    def lookup_many(
        self, keys: Iterable[ChunkKey], *, count_hits: bool = False, partial: bool = False
    ) -> tuple[dict[ChunkKey, np.ndarray[Any, Any]], set[ChunkKey]]:
        """The READY chunks among `keys`, and the FAILED ones (a partial derived chunk is
        READY with `partial`, else FAILED)."""
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


def box_text(lo: Sequence[int], hi: Sequence[int]) -> str:
    """A box ``[lo, hi)`` as slices, the way keys and error messages print it.

    >>> box_text((0, 512), (512, 1024))
    '[0:512, 512:1024]'
    """
    return "[" + ", ".join(f"{a}:{b}" for a, b in zip(lo, hi, strict=True)) + "]"


def chunk_key(source: ChunkSource, coords: Sequence[int]) -> ChunkKey:
    """The cache key of chunk `coords` of `source`."""
    lo, hi = chunk_bounds(source.grid, coords, source.shape)
    return ChunkKey(source.identity, lo, hi)


def chunk_coords(source: ChunkSource, key: ChunkKey) -> tuple[int, ...]:
    """The position in `source`'s read grid of the chunk `key` names (`chunk_key`'s inverse).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource
    >>> source = ArraySource(np.zeros((10, 6)), chunks=(4, 4), name="a")
    >>> chunk_coords(source, chunk_key(source, (2, 1)))
    (2, 1)
    """
    return tuple(
        int(g.index_to_chunk(lo)) for g, lo in zip(source.grid, key.inclusive_min, strict=True)
    )


def grid_shape(source: ChunkSource) -> tuple[int, ...]:
    """Number of chunks along each axis of `source`'s read grid."""
    shape: list[int] = []
    for g, extent in zip(source.grid, source.shape, strict=True):
        shape.append(0 if extent == 0 else int(g.index_to_chunk(extent - 1)) + 1)
    return tuple(shape)


SHOWN_MEMBERS: Final = 3
"""Members named in an identity's text before "+N more"."""


@dataclass(frozen=True, slots=True)
class CompositeIdentity:
    """The identity of a composite source: what it does, with what, to which members.

    Equal composites (same kind, parameters and member identities) have equal
    identities and therefore share cached chunks. Its text is short, for
    messages and chunk-key display.

    Examples
    --------
    >>> identity = CompositeIdentity("concat", (("axis", 0),), ("a.zarr", "b.zarr"))
    >>> str(identity)
    'concat(a.zarr, b.zarr; axis=0)'
    >>> identity == CompositeIdentity("concat", (("axis", 0),), ("a.zarr", "b.zarr"))
    True
    """

    kind: str
    parameters: tuple[tuple[str, Hashable], ...]
    members: tuple[Hashable, ...] = ()
    # Chunk keys are hashed on every cache lookup; a stack of many members hashes once.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.parameters, self.members)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt, not restored: string hashes differ between processes.
        return CompositeIdentity, (self.kind, self.parameters, self.members)

    def __str__(self) -> str:
        shown = [str(m) for m in self.members[:SHOWN_MEMBERS]]
        if len(self.members) > SHOWN_MEMBERS:
            shown.append(f"+{len(self.members) - SHOWN_MEMBERS} more")
        parameters = ", ".join(f"{name}={label_of(value)}" for name, value in self.parameters)
        inside = "; ".join(part for part in (", ".join(shown), parameters) if part)
        return f"{self.kind}({inside})"


def label_of(value: Hashable) -> str:
    """A parameter as shown in an identity's text (functions by their qualified name).

    Examples
    --------
    >>> label_of(len), label_of(0.5)
    ('len', '0.5')
    """
    if callable(value):
        return str(getattr(value, "__qualname__", value))
    return str(value)
