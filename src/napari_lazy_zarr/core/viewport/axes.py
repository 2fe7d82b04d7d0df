"""Layer axes and store boxes: how a layer's view maps onto its levels' chunk grids (pure).

A layer may show fewer axes than its store holds (`AxisMap`); every box here
is a `[lo, hi)` interval per *store* axis. Levels relate cell to cell by
`level_index` (nearest neighbour, decimation-aware), and a box to the chunks it
touches by `chunk_ranges`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr_indexing import ConstantMap, DimensionMap

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "AxisMap",
    "Box",
    "box_bytes",
    "chunk_ranges",
    "level_box",
    "level_index",
    "view_box",
]

type Box = tuple[tuple[int, int], ...]
"""A `[lo, hi)` interval per store axis."""


@dataclass(frozen=True, slots=True)
class AxisMap:
    """How a layer's axes relate to its store's axes.

    Attributes
    ----------
    store_rank
        How many axes the store's arrays have.
    fixed
        ``(store axis, index)`` pairs the layer does not show: each is held at
        that index (an OME-Zarr channel axis split into one layer per channel).
        Every other store axis is a layer axis, in the store's order.

    Examples
    --------
    >>> channels = AxisMap(4, fixed=((1, 2),))  # (t, c, y, x) showing channel 2
    >>> channels.layer_axes
    (0, 2, 3)
    >>> channels.store_index()
    (slice(None, None, None), 2)
    >>> channels.layer_shape((5, 3, 64, 64))
    (5, 64, 64)
    >>> channels.layer_axis(1) is None, channels.layer_axis(3)
    (True, 2)
    """

    store_rank: int
    fixed: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        axes = [axis for axis, _ in self.fixed]
        if len(set(axes)) != len(axes) or not all(0 <= a < self.store_rank for a in axes):
            raise ValueError(f"fixed axes {self.fixed} do not fit a rank-{self.store_rank} store")

    @property
    def layer_axes(self) -> tuple[int, ...]:
        """The store axis behind each layer axis, in order."""
        held = {axis for axis, _ in self.fixed}
        return tuple(a for a in range(self.store_rank) if a not in held)

    @property
    def layer_rank(self) -> int:
        return self.store_rank - len(self.fixed)

    def store_index(self) -> tuple[int | slice, ...]:
        """The index that turns a store-shaped array into the layer's array."""
        held = dict(self.fixed)
        if not held:
            return ()
        last = max(held)
        return tuple(held.get(axis, slice(None)) for axis in range(last + 1))

    def layer_shape(self, store_shape: Sequence[int]) -> tuple[int, ...]:
        """The layer's shape for an array of `store_shape`."""
        return tuple(int(store_shape[a]) for a in self.layer_axes)

    def layer_axis(self, store_axis: int) -> int | None:
        """The layer axis showing `store_axis`, or None if the layer holds it fixed."""
        axes = self.layer_axes
        return axes.index(store_axis) if store_axis in axes else None

    def store_axis(self, layer_axis: int) -> int:
        """The store axis behind `layer_axis`."""
        return self.layer_axes[layer_axis]


def view_box(view: ChunkedArray) -> tuple[Box, tuple[int, ...]] | None:
    """The store box and displayed axes of a view made of slices (step 1) and integers.

    None for any other view (strided, gathered, empty): those are read without
    stand-ins or prefetch.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray
    >>> with ChunkCache(1 << 20) as cache:
    ...     array = ChunkedArray(ArraySource(np.zeros((3, 8, 8)), chunks=(1, 4, 4)), cache)
    ...     view_box(array[1, 2:6])
    (((1, 2), (2, 6), (0, 8)), (1, 2))
    """
    bounds = view.bounding_box()
    if bounds is None:
        return None
    displayed: list[int] = []
    for axis, output_map in enumerate(view.transform.output):
        if isinstance(output_map, ConstantMap):
            continue
        if not isinstance(output_map, DimensionMap) or output_map.stride != 1:
            return None
        displayed.append(axis)
    if len(displayed) != view.ndim:
        return None
    return tuple((int(lo), int(hi)) for lo, hi in bounds), tuple(displayed)


def level_index(
    fine: np.ndarray[Any, Any], fine_extent: int, coarse_extent: int
) -> np.ndarray[Any, Any]:
    """The coarse cells covering fine cells `fine` along one axis (nearest neighbour).

    Levels written by decimation (virtual levels, and most pyramid writers) have
    a power-of-two factor f with ``coarse_extent == ceil(fine_extent / f)``
    (striding) or ``floor`` (iterative halving): fine cell i lies in coarse cell
    i // f. The smallest such f is taken, ceil before floor; other shape ratios
    map cell centres.

    Examples
    --------
    >>> import numpy as np
    >>> level_index(np.arange(9), 9, 5).tolist()
    [0, 0, 1, 1, 2, 2, 3, 3, 4]
    >>> level_index(np.arange(9), 9, 3).tolist()  # 9 cells sampled every 4th
    [0, 0, 0, 0, 1, 1, 1, 1, 2]
    >>> level_index(np.arange(3), 3, 3).tolist()
    [0, 1, 2]
    >>> level_index(np.arange(4), 4, 3).tolist()
    [0, 1, 1, 2]
    """
    fine = np.asarray(fine, dtype=np.intp)
    if coarse_extent == fine_extent:
        return fine
    for ceil in (True, False):
        factor = 2
        while factor <= 2 * max(fine_extent, 1):
            if (-(-fine_extent // factor) if ceil else fine_extent // factor) == coarse_extent:
                index: np.ndarray[Any, Any] = np.minimum(fine // factor, coarse_extent - 1)
                return index
            factor *= 2
    centres = ((fine + 0.5) * coarse_extent / fine_extent).astype(np.intp)
    index = np.minimum(centres, coarse_extent - 1)
    return index


def chunk_ranges(box: Box, source: ChunkSource) -> list[range]:
    """Per store axis, the chunk indices of `source`'s grid that `box` touches.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> chunk_ranges(((1, 2), (3, 9)), ArraySource(np.zeros((4, 16)), chunks=(1, 4), name="c"))
    [range(1, 2), range(0, 3)]
    """
    grid = source.grid
    return [
        range(
            int(grid[axis].index_to_chunk(lo)),
            int(grid[axis].index_to_chunk(max(lo, hi - 1))) + 1,
        )
        for axis, (lo, hi) in enumerate(box)
    ]


def level_box(box: Box, fine_shape: Sequence[int], coarse_shape: Sequence[int]) -> Box:
    """The box of a coarser level covering `box` of a finer one (`level_index` per axis).

    Examples
    --------
    >>> level_box(((3, 4), (0, 9), (5, 16)), (8, 16, 16), (8, 8, 8))
    ((3, 4), (0, 5), (2, 8))
    """
    out: list[tuple[int, int]] = []
    for (lo, hi), fine, coarse in zip(box, fine_shape, coarse_shape, strict=True):
        ends = level_index(np.array([lo, max(lo, hi - 1)]), int(fine), int(coarse))
        out.append((int(ends[0]), int(ends[1]) + 1))
    return tuple(out)


def box_bytes(box: Box, source: ChunkSource) -> int:
    """Decoded bytes of the whole chunks of `source` that `box` touches."""
    grid = source.grid
    extents = [
        sum(int(grid[axis].chunk_size(c)) for c in chunks)
        for axis, chunks in enumerate(chunk_ranges(box, source))
    ]
    return math.prod(extents) * source.dtype.itemsize
