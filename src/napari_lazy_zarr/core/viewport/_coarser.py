"""A view over its bound served from a coarser level: the plan a controller shows instead.

napari picks the level it reads by the canvas, not by what the level costs: a
1920 x 1080 canvas over level 0 of a store of 1-pixel chunks asks for 2 x 10^6
chunks, and a virtual level sampling such a store costs one stored chunk per
pixel. `view_plan` counts what the requested level's view would cost by grid
arithmetic (`count_chunks`, and the stored chunks under one chunk of a derived
level, `chunk_cost`) and, over `ViewBounds.view_chunks` chunks or
`ViewBounds.view_stored_chunks` stored reads, plans the same region at the finest
coarser level within both,
else the coarsest: a `CoarserPlan`, whose buffer is the coarse region and whose
frame is that region upsampled (nearest neighbour) to the requested view.
Planning stays a few milliseconds of napari's main thread whatever the grid.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core.errors import PlanTooLargeError
from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS
from napari_lazy_zarr.core.reading.cache_reader import lazy_for
from napari_lazy_zarr.core.reading.plans import ReadPlan, count_chunks, plan_read
from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.viewport.axes import level_index

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.reading.bounds import ViewBounds
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import Box

__all__ = [
    "VIEW_BYTES",
    "VIEW_CHUNKS",
    "VIEW_STORED_CHUNKS",
    "CoarserPlan",
    "view_cost",
    "view_plan",
    "within",
]

VIEW_CHUNKS: Final = DEFAULT_BOUNDS.view_chunks
"""Chunks one napari view may plan at its level by default (`ViewBounds.view_chunks`)."""

VIEW_STORED_CHUNKS: Final = DEFAULT_BOUNDS.view_stored_chunks
"""Stored chunks one napari view may cost by default (`ViewBounds.view_stored_chunks`)."""

VIEW_BYTES: Final = DEFAULT_BOUNDS.view_bytes
"""The largest frame of a view served coarser, by default (`ViewBounds.view_bytes`)."""


def view_cost(source: ChunkSource, box: Box) -> tuple[int, int]:
    """The chunks of `source` a view of `box` touches and the stored chunks they cost.

    By arithmetic only: a derived (virtual) level's chunk costs `chunk_cost` of
    its first chunk (its chunks are alike).
    """
    lazy = lazy_for(source)[tuple(slice(lo, hi) for lo, hi in box)]
    chunks = count_chunks(lazy.transform, source.grid)
    if chunks and is_derived(source):
        return chunks, chunks * max(1, int(source.chunk_cost(tuple(0 for _ in box))))
    return chunks, chunks


def within(bounds: ViewBounds, chunks: int, stored: int) -> bool:
    """Whether a view of `chunks` chunks costing `stored` stored chunks is within `bounds`."""
    return chunks <= bounds.view_chunks and stored <= bounds.view_stored_chunks


def view_plan(
    level: int,
    box: Box,
    view: ChunkedArray,
    sources: Sequence[ChunkSource],
    bounds: ViewBounds = DEFAULT_BOUNDS,
) -> ReadPlan:
    """`view` (the box `box` of `sources[level]`) planned (the array's own plan, kept by
    its plan memo), or served coarser if over `bounds`."""
    chunks, stored = view_cost(sources[level], box)
    if within(bounds, chunks, stored):
        return view.plan()
    nbytes = math.prod(view.shape) * sources[level].dtype.itemsize
    if nbytes > bounds.view_bytes:  # no level can answer: the frame itself is too large
        raise PlanTooLargeError(
            f"{sources[level].identity}: a view of level {level} of shape {view.shape} is "
            f"{nbytes:,} bytes, over the {bounds.view_bytes:,} a frame may hold; show a smaller "
            "region, or let napari choose the level (do not lock a fine one)"
        )
    fine_shape = sources[level].shape
    chosen = len(sources) - 1
    for coarse in range(level + 1, len(sources)):
        region = _coarse_region(box, fine_shape, sources[coarse].shape)
        chunks, stored = view_cost(sources[coarse], region)
        if within(bounds, chunks, stored):
            chosen = coarse
            break
    if chosen == level:  # the coarsest level itself is over: planned as it is (bounded)
        return view.plan()
    coarse_shape = sources[chosen].shape
    region = _coarse_region(box, fine_shape, coarse_shape)
    takes = [
        level_index(np.arange(lo, hi), int(fine), int(coarse)) - start
        for (lo, hi), fine, coarse, (start, _) in zip(
            box, fine_shape, coarse_shape, region, strict=True
        )
    ]
    return CoarserPlan(sources[chosen], chosen, region, takes, view.shape)


def _coarse_region(box: Box, fine_shape: Sequence[int], coarse_shape: Sequence[int]) -> Box:
    """The coarse box covering `box` (from its first and last cells: O(rank))."""
    region: list[tuple[int, int]] = []
    for (lo, hi), fine, coarse in zip(box, fine_shape, coarse_shape, strict=True):
        ends = level_index(np.array([lo, hi - 1]), int(fine), int(coarse))
        region.append((int(ends[0]), int(ends[1]) + 1))
    return tuple(region)


class CoarserPlan(ReadPlan):
    """A view served from coarser level `level`: its chunks, upsampled to the view's shape.

    The buffer (`new_buffer`) holds the coarse `region`; chunks are copied and
    filled there as in the coarse level's own plan, and `finish` upsamples it
    (nearest neighbour, `takes` per axis) into a fresh array of `shape`.
    Fallback arrays (stand-ins of the finer view's shape) are not used: the
    coarse level is already the stand-in.
    """

    def __init__(
        self,
        source: ChunkSource,
        level: int,
        region: Box,
        takes: list[np.ndarray[Any, Any]],
        shape: tuple[int, ...],
    ) -> None:
        self.level = level
        self.region = region
        self._coarse = plan_read(
            lazy_for(source)[tuple(slice(lo, hi) for lo, hi in region)], source
        )
        super().__init__(source, tuple(hi - lo for lo, hi in region))
        self._takes = takes
        self._view_shape = shape
        self.refs = self._coarse.refs

    def finish(self, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        up = out
        for axis, index in enumerate(self._takes):
            if len(index) != up.shape[axis] or np.any(index != np.arange(len(index))):
                up = np.take(up, index, axis=axis)
        return up.reshape(self._view_shape)

    def copy_chunk(
        self, out: np.ndarray[Any, Any], key: ChunkKey, data: np.ndarray[Any, Any]
    ) -> None:
        self._coarse.copy_chunk(out, key, data)

    def fill_missing(
        self,
        out: np.ndarray[Any, Any],
        key: ChunkKey,
        value: Any,
        fallback: np.ndarray[Any, Any] | None,
    ) -> None:
        self._coarse.fill_missing(out, key, value, None)
