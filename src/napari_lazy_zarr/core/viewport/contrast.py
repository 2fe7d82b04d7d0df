"""Which cells of a level a layer's contrast limits are sampled from (pure; plans no read).

napari would compute a new layer's contrast limits from the coarsest level
through the non-blocking path, i.e. from placeholders; the plugin reads a
bounded sample instead. `contrast_selection` chooses it: whole stored chunks,
evenly spaced along every axis, within a chunk count, a byte budget and an
index-array length the caller gives.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.viewport.axes import AxisMap

__all__ = ["contrast_selection"]


def contrast_selection(
    level: ChunkedArray,
    axis_map: AxisMap,
    *,
    max_chunks: int,
    max_bytes: int,
    max_indices: int,
) -> tuple[np.ndarray[Any, np.dtype[np.intp]], ...] | None:
    """Per layer axis, the indices the contrast sample reads (None: nothing; (): a 0-d array).

    Chunks are added one axis at a time, always to the axis sampled most
    sparsely, while the count stays within the chunk and byte budgets; along
    an axis they are evenly spaced and include both ends (one chunk: the
    middle one). Within chunks larger than the byte budget, pixels are strided.

    `level` is a layer's level (its axes are the layer's, `axis_map` relates
    them to the store's); at most `max_chunks` stored chunks and `max_bytes`
    decoded bytes are read, and no axis gets more than `max_indices` indices.
    Read the result with ``level.oindex[selection]``.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray
    >>> from napari_lazy_zarr.core.viewport.axes import AxisMap
    >>> with ChunkCache(1 << 20) as cache:
    ...     level = ChunkedArray(ArraySource(np.zeros((64, 64)), chunks=(16, 16)), cache)
    ...     whole = contrast_selection(level, AxisMap(2), max_chunks=64, max_bytes=1 << 20,
    ...                                max_indices=1 << 16)
    ...     few = contrast_selection(level, AxisMap(2), max_chunks=4, max_bytes=1 << 20,
    ...                              max_indices=1 << 16)
    >>> [len(axis) for axis in whole], [len(axis) for axis in few]
    ([64, 64], [32, 32])
    >>> few[0][[0, -1]].tolist()  # the first and the last chunk of the axis
    [0, 63]
    """
    source = level.source
    grid = source.grid
    if any(extent == 0 for extent in level.shape):
        return None
    if level.ndim == 0:
        return ()
    store_axes = [axis_map.store_axis(axis) for axis in range(level.ndim)]
    # A stored chunk is decoded whole (all of its channels too): that is what a read costs.
    chunk_bytes = level.dtype.itemsize * math.prod(
        max(1, min(int(grid[axis].chunk_size(0)), extent))
        for axis, extent in enumerate(source.shape)
    )
    allowed = max(1, min(max_chunks, max_bytes // chunk_bytes))
    counts = [
        int(grid[axis].index_to_chunk(extent - 1)) + 1
        for axis, extent in zip(store_axes, level.shape, strict=True)
    ]
    picks = [1] * level.ndim
    while True:
        total = math.prod(picks)
        sparsest = sorted(
            (axis for axis in range(level.ndim) if picks[axis] < counts[axis]),
            key=lambda axis: counts[axis] / picks[axis],
            reverse=True,
        )
        grown = next(
            (axis for axis in sparsest if total // picks[axis] * (picks[axis] + 1) <= allowed),
            None,
        )
        if grown is None:
            break
        picks[grown] += 1
    spans: list[list[tuple[int, int]]] = []
    for axis, (store_axis, extent) in enumerate(zip(store_axes, level.shape, strict=True)):
        dimension = grid[store_axis]
        if picks[axis] == 1:
            chosen = [(counts[axis] - 1) // 2]
        else:
            spaced = np.linspace(0, counts[axis] - 1, picks[axis]).round().astype(int)
            chosen = sorted(set(spaced.tolist()))
        starts = [int(dimension.chunk_offset(chunk)) for chunk in chosen]
        spans.append(
            [
                (start, min(start + int(dimension.chunk_size(chunk)), extent))
                for chunk, start in zip(chosen, starts, strict=True)
            ]
        )
    # Chunks larger than the budget (one chunk may be): stride inside them, so the sample
    # stays within the byte budget and its index arrays short.
    limit = max(1, max_bytes // level.dtype.itemsize)
    steps = [1] * level.ndim
    while True:
        lengths = [
            sum(-(-(stop - start) // steps[axis]) for start, stop in spans[axis])
            for axis in range(level.ndim)
        ]
        if math.prod(lengths) <= limit and max(lengths) <= max_indices:
            break
        steps[max(range(level.ndim), key=lengths.__getitem__)] *= 2
    return tuple(
        np.concatenate(
            [np.arange(start, stop, steps[axis]) for start, stop in spans[axis]]
        ).astype(np.intp)
        for axis in range(level.ndim)
    )
