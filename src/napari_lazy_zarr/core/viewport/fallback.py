"""Stand-ins: a view's missing cells drawn from resident chunks of coarser levels (pure).

Everything here reads the cache only through a `lookup` callable and writes
nothing but its own results; the controller runs it on its compose thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr.core.reading.cache_reader import lazy_for
from napari_lazy_zarr.core.reading.plans import plan_read
from napari_lazy_zarr.core.viewport.axes import level_index

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import Box
    from napari_lazy_zarr.core.viewport.frames import ViewRequest

__all__ = ["coarser_fill", "covered", "stand_ins", "waiting_region"]


def coarser_fill(
    region: Box,
    fine_shape: Sequence[int],
    levels: Sequence[ChunkSource],
    lookup: Callable[[ChunkKey], np.ndarray[Any, Any] | None],
    dtype: np.dtype[Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """Stand-ins for `region` of a level from resident chunks of coarser `levels`.

    `region` is a box over the store's axes of a level of shape `fine_shape`;
    `levels` are the coarser levels to try, nearest first. Each fine cell takes
    the value of the coarse cell covering it (nearest neighbour); a cell takes
    the nearest level that has its chunk resident. Returns the values and the
    mask of cells found (both shaped like the box), or None when no coarser
    level had anything resident. Pure: reads only through `lookup`.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> coarse = ArraySource(np.arange(16).reshape(4, 4), chunks=(2, 2), name="c")
    >>> resident = {}
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> key = ChunkRef.of(coarse, (0, 0)).key
    >>> resident[key] = coarse.read_chunk((0, 0))
    >>> values, found = coarser_fill(((0, 4), (0, 4)), (8, 8), [coarse], resident.get,
    ...                              np.dtype(int))
    >>> values[:4, :4]
    array([[0, 0, 1, 1],
           [0, 0, 1, 1],
           [4, 4, 5, 5],
           [4, 4, 5, 5]])
    >>> bool(found.all())
    True
    """
    shape = tuple(hi - lo for lo, hi in region)
    values: np.ndarray[Any, Any] | None = None
    found: np.ndarray[Any, Any] | None = None
    for coarse in levels:
        selection: list[slice] = []
        takes: list[np.ndarray[Any, Any]] = []
        for axis, (lo, hi) in enumerate(region):
            fine_extent, coarse_extent = int(fine_shape[axis]), int(coarse.shape[axis])
            index = level_index(np.arange(lo, hi), fine_extent, coarse_extent)
            start = int(index[0])
            selection.append(slice(start, int(index[-1]) + 1))
            takes.append(index - start)
        plan = plan_read(lazy_for(coarse)[tuple(selection)], coarse)
        chunks = [(ref.key, lookup(ref.key)) for ref in plan.refs]
        if not any(data is not None for _, data in chunks):
            continue  # nothing resident at this level
        data = plan.new_buffer()
        here = np.zeros(data.shape, dtype=bool)
        for key, chunk in chunks:
            if chunk is not None:
                plan.copy_chunk(data, key, chunk)
                plan.fill_missing(here, key, True, None)
        up, up_here = plan.finish(data), here
        for axis, index in enumerate(takes):
            up = np.take(up, index, axis=axis)
            up_here = np.take(up_here, index, axis=axis)
        if values is None or found is None:
            values = np.empty(shape, dtype=dtype)
            found = np.zeros(shape, dtype=bool)
        use = up_here & ~found
        values[use] = up[use]
        found |= use
        if found.all():
            break
    if values is None or found is None:
        return None
    return values, found


def waiting_region(box: Box, waiting: Collection[ChunkKey]) -> Box | None:
    """The part of `box` under the `waiting` chunks' bounding box (None if empty)."""
    region = tuple(
        (
            max(lo, min(k.inclusive_min[axis] for k in waiting)),
            min(hi, max(k.exclusive_max[axis] for k in waiting)),
        )
        for axis, (lo, hi) in enumerate(box)
    )
    return region if all(lo < hi for lo, hi in region) else None


def covered(key: ChunkKey, region: Box, found: np.ndarray[Any, Any]) -> bool:
    """Whether `found` (a mask over `region`) is true on all of chunk `key`'s cells in it."""
    where = tuple(
        slice(max(lo, start) - lo, max(min(hi, stop), max(lo, start)) - lo)
        for (lo, hi), start, stop in zip(region, key.inclusive_min, key.exclusive_max, strict=True)
    )
    return bool(found[where].all())


def stand_ins(
    request: ViewRequest,
    waiting: Collection[ChunkKey],
    levels: Sequence[ChunkSource],
    lookup: Callable[[ChunkKey], np.ndarray[Any, Any] | None],
) -> tuple[np.ndarray[Any, Any], Box, np.ndarray[Any, Any]] | None:
    """A frame of `request`'s shape drawn from the levels coarser than its own (`coarser_fill`).

    Only the region under the `waiting` chunks is drawn (`waiting_region`);
    cells no coarser level has resident get the level's fill value. Returns
    the frame, the region (a store box) and the mask over it of the cells
    drawn from a coarser level, or None when nothing coarser is resident.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.keys import ChunkRef
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> from napari_lazy_zarr.core.viewport.frames import ViewRequest
    >>> fine = ArraySource(np.zeros((4, 4), int), chunks=(2, 2), name="f", fill_value=-1)
    >>> coarse = ArraySource(np.arange(4).reshape(2, 2), chunks=(1, 1), name="c")
    >>> key = ChunkRef.of(coarse, (0, 0)).key
    >>> waiting = [ChunkRef.of(fine, (0, 0)).key]
    >>> frame, region, found = stand_ins(
    ...     ViewRequest(0, ((0, 4), (0, 4)), (0, 1), 1), waiting, [fine, coarse],
    ...     {key: coarse.read_chunk((0, 0))}.get)
    >>> region, frame[:2, :2].tolist(), bool(found.all())
    (((0, 2), (0, 2)), [[0, 0], [0, 0]], True)
    """
    region = waiting_region(request.box, waiting)
    if region is None:
        return None
    source = levels[request.level]
    filled = coarser_fill(region, source.shape, levels[request.level + 1 :], lookup, source.dtype)
    if filled is None:
        return None
    values, found = filled
    values[~found] = source.fill_value
    frame = np.empty(request.shape, dtype=source.dtype)
    # The region's box, in the frame's axes (held axes have extent 1).
    where = tuple(
        slice(region[a][0] - request.box[a][0], region[a][1] - request.box[a][0])
        for a in request.displayed
    )
    frame[where] = values.reshape(frame[where].shape)
    return frame, region, found
