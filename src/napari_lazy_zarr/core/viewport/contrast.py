"""A layer's contrast limits from a bounded sample of its data, read off the viewer's thread.

napari would compute a new layer's contrast limits from the coarsest level
through the non-blocking path, i.e. from placeholders; the plugin reads a
bounded sample instead. `contrast_selection` chooses it (pure; plans no read):
whole stored chunks, evenly spaced along every axis, within a chunk count, a
byte budget and an index-array length the caller gives. `sample_limits` reads
it (blocking) and `ContrastSample` does so on a background thread, so that
opening a layer never waits for a chunk: the layer opens with provisional
limits and takes the sampled ones when its chunks have landed.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.errors import LazyZarrError
from napari_lazy_zarr.core.executors import SerialDispatch

if TYPE_CHECKING:
    from napari_lazy_zarr.core.reading.array import ChunkedArray
    from napari_lazy_zarr.core.viewport.axes import AxisMap

__all__ = ["ContrastSample", "contrast_selection", "dtype_limits", "sample_limits"]


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


def dtype_limits(dtype: np.dtype[Any]) -> tuple[float, float]:
    """The limits of data whose values are unknown: an integer dtype's range, else (0, 1).

    Examples
    --------
    >>> dtype_limits(np.dtype("uint8")), dtype_limits(np.dtype("float32"))
    ((0.0, 255.0), (0.0, 1.0))
    """
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return (float(info.min), float(info.max))
    return (0.0, 1.0)


def sample_limits(
    level: ChunkedArray,
    axis_map: AxisMap,
    *,
    max_chunks: int,
    max_bytes: int,
    max_indices: int,
    timeout: float,
) -> tuple[float, float]:
    """Min and max of `level`'s `contrast_selection` (blocking: waits for its chunks, which
    load as background work, `LoadClass.OVERVIEW`, after what any view displays).

    Storage that does not answer within `timeout` seconds or fails, or data
    with no finite value, gives `dtype_limits`; constant data gives
    ``(value, value + 1)`` (the dtype's range for integers).
    """
    selection = contrast_selection(
        level, axis_map, max_chunks=max_chunks, max_bytes=max_bytes, max_indices=max_indices
    )
    try:
        if selection is None:
            sample = np.zeros(0, dtype=level.dtype)
        else:
            view = level if not selection else level.oindex[selection]  # 0-d: its one value
            # Background work: the sample's chunks load at the overview's class, never
            # ahead of (or beside) a chunk a view displays; the read then finds them.
            with level.cache.request(view.chunk_refs(), load_class=LoadClass.OVERVIEW) as wait:
                wait.done.result(timeout=timeout)
                sample = view.result(timeout=timeout)
    except (TimeoutError, CancelledError, LazyZarrError):
        sample = np.zeros(0, dtype=level.dtype)
    if sample.dtype.kind == "f":
        sample = sample[np.isfinite(sample)]
    if sample.size == 0 or sample.dtype == bool:
        return dtype_limits(level.dtype)
    low, high = float(sample.min()), float(sample.max())
    if not low < high:
        return dtype_limits(level.dtype) if sample.dtype.kind in "iu" else (low, low + 1.0)
    return (low, high)


_SAMPLES = SerialDispatch("lazy-zarr-contrast")
"""The thread the samples wait on (one at a time: channels of one image share chunks, and
the second finds them resident)."""


class ContrastSample:
    """`sample_limits` of one layer's level, read on a background thread.

    `provisional` are the limits to show meanwhile (`dtype_limits`);
    `future` resolves to the sampled limits (never raises: a failed sample
    gives `provisional`). The chunks load through the level's cache like any
    others; the thread only waits for them.

    Examples
    --------
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkedArray
    >>> from napari_lazy_zarr.core.viewport.axes import AxisMap
    >>> data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    >>> with ChunkCache(1 << 20) as cache:
    ...     level = ChunkedArray(ArraySource(data, chunks=(16, 16)), cache)
    ...     sample = ContrastSample(level, AxisMap(2), max_chunks=64, max_bytes=1 << 20,
    ...                             max_indices=1 << 16, timeout=10)
    ...     limits = sample.future.result(timeout=10)
    >>> sample.provisional, limits
    ((0.0, 65535.0), (0.0, 4095.0))
    """

    def __init__(
        self,
        level: ChunkedArray,
        axis_map: AxisMap,
        *,
        max_chunks: int,
        max_bytes: int,
        max_indices: int,
        timeout: float,
    ) -> None:
        self.provisional = dtype_limits(level.dtype)
        self.future: Future[tuple[float, float]] = Future()
        sample = functools.partial(
            sample_limits,
            level,
            axis_map,
            max_chunks=max_chunks,
            max_bytes=max_bytes,
            max_indices=max_indices,
            timeout=timeout,
        )

        def run() -> None:
            try:
                self.future.set_result(sample())
            except BaseException:  # a sample must always end: a bug keeps the provisional
                self.future.set_result(self.provisional)
                raise

        try:
            _SAMPLES.submit(run)
        except LazyZarrError:  # no thread could start: the limits stay provisional
            self.future.set_result(self.provisional)

    def __repr__(self) -> str:
        state = self.future.result() if self.future.done() else "pending"
        return f"ContrastSample(provisional={self.provisional}, sampled={state})"
