"""Virtual pyramid levels for arrays stored without one.

napari reads only the visible region of a layer when it is multiscale with at
least two levels; a single-level layer is read whole-plane. An array without
a stored pyramid is therefore presented as a pyramid of *decimated* levels:
level k is the base array sampled with step 2^k on its last two axes, planned
through zarr-indexing like any other strided view.

A `DecimatedSource` is a `ChunkSource` of its own (its chunks are cached under
their own keys, a few KiB each), so a coarse level never keeps full-resolution
chunks resident: each of its chunks is built by reading the base chunks it
samples straight from the base source, keeping every 2^k-th pixel and
dropping the rest. The coarsest level of an array of N chunks therefore reads
all N base chunks once — the unavoidable price of a first overview of data
that has no pyramid — spread over several level chunks so that workers share it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from zarr_indexing import FixedDimension

from napari_lazy_zarr.core.array import _lazy_for
from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.plans import plan_read
from napari_lazy_zarr.core.source import SourceFields, chunk_bounds

if TYPE_CHECKING:
    from collections.abc import Hashable

    import numpy as np
    from zarr_indexing import DimensionGridLike

    from napari_lazy_zarr.core.source import ChunkSource

__all__ = ["DecimatedSource", "virtual_levels"]

_MIN_LEVEL_CHUNK = 128
MAX_BASE_CHUNKS = 65_536
"""Stored chunks one virtual-level chunk may read (beyond that it FAILS, visibly)."""


class DecimatedSource(SourceFields):
    """`base` sampled every `factor` pixels along `axes`: one virtual pyramid level.

    Parameters
    ----------
    base
        The full-resolution source.
    factor
        The sampling step (level k of a power-of-two pyramid has factor 2^k).
    axes
        The decimated axes (by default the last two).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.source import ArraySource
    >>> base = ArraySource(np.arange(64).reshape(8, 8), chunks=(4, 4), name="b")
    >>> level = DecimatedSource(base, 2)
    >>> level.shape
    (4, 4)
    >>> level.read_chunk((0, 0))
    array([[ 0,  2,  4,  6],
           [16, 18, 20, 22],
           [32, 34, 36, 38],
           [48, 50, 52, 54]])
    """

    def __init__(
        self, base: ChunkSource, factor: int, axes: tuple[int, ...] | None = None
    ) -> None:
        if factor < 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        rank = len(base.shape)
        self._base = base
        self._factor = int(factor)
        self._axes = tuple(range(max(0, rank - 2), rank)) if axes is None else tuple(axes)
        self._shape = tuple(
            math.ceil(extent / factor) if axis in self._axes else extent
            for axis, extent in enumerate(base.shape)
        )
        grid: list[DimensionGridLike] = []
        for axis, (g, extent) in enumerate(zip(base.grid, self._shape, strict=True)):
            if axis in self._axes:
                base_chunk = int(g.chunk_size(0)) if extent else 1
                size = max(_MIN_LEVEL_CHUNK, base_chunk // self._factor, 1)
                grid.append(FixedDimension(size=min(size, max(extent, 1)), extent=extent))
            else:
                grid.append(g)
        self._grid = tuple(grid)
        self._base_view = _lazy_for(base)

    @property
    def identity(self) -> Hashable:
        return (self._base.identity, "decimated", self._factor, self._axes)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._base.dtype

    @property
    def fill_value(self) -> Any:
        return self._base.fill_value

    @property
    def factor(self) -> int:
        return self._factor

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        selection = tuple(
            slice(a * self._factor, b * self._factor, self._factor)
            if axis in self._axes
            else slice(a, b)
            for axis, (a, b) in enumerate(zip(lo, hi, strict=True))
        )
        # The strided plan over the base grid names the base chunks this level chunk
        # samples and where each lands; they are read directly, not cached.
        plan = plan_read(self._base_view[selection], self._base)
        if len(plan.refs) > MAX_BASE_CHUNKS:
            raise ChunkReadError(
                f"chunk {coords} of the virtual level 1/{self._factor} of "
                f"{self._base.identity}: it samples {len(plan.refs):,} stored chunks (at most "
                f"{MAX_BASE_CHUNKS:,}); this array has no pyramid and chunks too small for "
                "an overview"
            )
        out = plan.new_buffer()
        for ref in plan.refs:
            plan.copy_chunk(out, ref.key, self._base.read_chunk(ref.coords))
        return plan.finish(out)

    def __repr__(self) -> str:
        return f"DecimatedSource({self._base!r}, factor={self._factor}, axes={self._axes})"


def virtual_levels(
    base: ChunkSource, *, axes: tuple[int, ...] | None = None, smallest: int = 512
) -> list[ChunkSource]:
    """`base` followed by decimated levels (factors 2, 4, ...) down to `smallest` pixels.

    Levels stop once every decimated axis is at most `smallest` long; an array
    already that small gets no extra level.
    """
    rank = len(base.shape)
    decimated = tuple(range(max(0, rank - 2), rank)) if axes is None else axes
    levels: list[ChunkSource] = [base]
    factor = 1
    while any(math.ceil(base.shape[a] / factor) > smallest for a in decimated):
        factor *= 2
        levels.append(DecimatedSource(base, factor, decimated))
    return levels
