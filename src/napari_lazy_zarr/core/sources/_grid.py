"""Read-grid helpers shared by the sources: grids from chunk sizes or cell boundaries.

Pure functions over zarr-indexing grids, shared by the sources (and by the plate
mosaic of `formats.plate`); they import nothing of the engine.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from zarr_indexing import (
    DimensionGridLike,
    FixedDimension,
    VaryingDimension,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


__all__ = [
    "boundaries",
    "grid_from_boundaries",
    "grid_from_sizes",
]


def grid_from_sizes(sizes: Sequence[int], extent: int) -> DimensionGridLike:
    """A compact grid for one axis: `FixedDimension` when regular, else explicit edges."""
    if len(sizes) == 0:
        return FixedDimension(size=1, extent=0)
    first = int(sizes[0])
    if all(int(s) == first for s in sizes[:-1]) and int(sizes[-1]) <= first:
        return FixedDimension(size=first, extent=extent)
    return VaryingDimension(edges=tuple(int(s) for s in sizes), extent=extent)


def boundaries(grid: DimensionGridLike, extent: int) -> list[int]:
    """The cell boundaries of one axis of a read grid, clipped: ``[0, ..., extent]``."""
    if extent == 0:
        return [0]
    count = int(grid.index_to_chunk(extent - 1)) + 1
    return [int(grid.chunk_offset(i)) for i in range(count)] + [extent]


def grid_from_boundaries(per_axis: Sequence[Sequence[int]]) -> tuple[DimensionGridLike, ...]:
    """A read grid with the given cell boundaries along each axis.

    Regular axes become `FixedDimension`s only when every axis is regular:
    `ChunkedArray` partitions a grid with any irregular axis by each axis's
    declared chunk sizes, which must then be exact (a fixed axis declares its
    last, partial chunk at full size).
    """
    sizes = [[b - a for a, b in itertools.pairwise(cuts)] for cuts in per_axis]
    grid = tuple(grid_from_sizes(s, cuts[-1]) for s, cuts in zip(sizes, per_axis, strict=True))
    if all(isinstance(g, FixedDimension) for g in grid):
        return grid
    return tuple(
        VaryingDimension(edges=s, extent=cuts[-1]) if s else g
        for s, cuts, g in zip(sizes, per_axis, grid, strict=True)
    )
