"""`ChunkedArray`: the public lazy array over a chunk source and the chunk cache."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from zarr_indexing import FixedDimension, LazyArray

from napari_lazy_zarr.core.errors import CacheClosedError, ChunkReadError
from napari_lazy_zarr.core.executors import DaemonExecutor
from napari_lazy_zarr.core.keys import ChunkRef, grid_shape
from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS
from napari_lazy_zarr.core.reading.cache_reader import lazy_for
from napari_lazy_zarr.core.reading.plans import MAX_VIEW_CHUNKS, Fallback, ReadPlan, plan_read

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable

    from zarr_indexing import IndexTransform

    from napari_lazy_zarr.core.cache import ChunkCache, Request
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["MIN_VIEW_BYTES", "ChunkedArray", "PartialRead"]

MIN_VIEW_BYTES: Final = DEFAULT_BOUNDS.min_bytes
"""The output bytes a read may return are bounded by the cache's limit, but never below this
(`ViewBounds.min_bytes`)."""

PLANS_KEPT: Final = 16
"""Plans of basic selections an array and the views derived from it keep, most recent first."""


class _PlanMemo:
    """The latest plans of basic selections, by index transform; shared by derived views.

    Planning a 2048x2048 window over 512x512 chunks costs about 0.2 ms, a third of
    copying its 8 MiB, and an application reads the same window again and again
    (``image[y0:y1, x0:x1].result()`` makes a new view every time). Only basic
    selections are kept: their transforms hash cheaply and their plans are small;
    a gather's transform holds its index arrays. Thread-safe.
    """

    __slots__ = ("_lock", "_max_bytes", "_max_chunks", "_plans")

    def __init__(self, max_chunks: int | None = None, max_bytes: int | None = None) -> None:
        self._lock = threading.Lock()
        self._plans: OrderedDict[IndexTransform, ReadPlan] = OrderedDict()
        self._max_chunks = MAX_VIEW_CHUNKS if max_chunks is None else _bound(max_chunks, "chunks")
        self._max_bytes = None if max_bytes is None else _bound(max_bytes, "bytes")

    def plan(self, lazy: LazyArray, source: ChunkSource, cache: ChunkCache) -> ReadPlan:
        transform = lazy.transform
        max_bytes = self._max_bytes
        if max_bytes is None:  # the memory the user gave the cache (read when planned)
            max_bytes = DEFAULT_BOUNDS.read_bytes(cache.total_bytes_limit)
        bounds = {"max_chunks": self._max_chunks, "max_bytes": max_bytes}
        if transform.index_array_structure != "none":
            return plan_read(lazy, source, cache, **bounds)
        with self._lock:
            plan = self._plans.get(transform)
            if plan is not None:
                self._plans.move_to_end(transform)
                return plan
        # Outside the lock: planning takes a while.
        plan = plan_read(lazy, source, cache, **bounds)
        with self._lock:
            self._plans[transform] = plan
            if len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        return plan


def _bound(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_view_{what} must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"max_view_{what} must be >= 1, got {value}")
    return value


# A view of at least this many bytes has its resident chunks copied on two threads: one
# thread's strided copies run at about 1.7x a memcpy, and numpy releases the GIL to copy.
_SPLIT_COPY_BYTES: Final = 4 << 20
_COPY_THREADS: Final = DaemonExecutor(name="lazy-zarr-copy", idle_seconds=1.0)


def _copy_all(
    plan: ReadPlan, out: np.ndarray[Any, Any], chunks: list[tuple[ChunkKey, np.ndarray[Any, Any]]]
) -> None:
    """Copy `chunks` into `out` (half of them on a copy thread when the view is large)."""
    if out.nbytes < _SPLIT_COPY_BYTES or len(chunks) < 4:
        for key, data in chunks:
            plan.copy_chunk(out, key, data)
        return
    half = len(chunks) // 2
    done: Future[None] = Future()

    def copy_rest() -> None:
        try:
            for key, data in chunks[half:]:
                plan.copy_chunk(out, key, data)
        except BaseException as error:  # handed to the reading thread
            done.set_exception(error)
        else:
            done.set_result(None)

    _COPY_THREADS.submit(copy_rest)
    for key, data in chunks[:half]:
        plan.copy_chunk(out, key, data)
    done.result(timeout=60)  # memory copies: milliseconds; the cap only guards a bug


@dataclass(frozen=True, slots=True)
class PartialRead:
    """What a non-blocking read returns at once.

    Attributes
    ----------
    data
        The view's values where chunks were resident; the placeholder (or the
        fallback's values) elsewhere.
    missing
        Keys of the chunks that were not resident (now queued, or FAILED).
    request
        The live request pinning the view's chunks. `request.done` resolves
        when every chunk is READY or FAILED (read again then for the full
        data); it is cancelled if a newer read of the same view supersedes it.
    """

    data: np.ndarray[Any, Any]
    missing: frozenset[ChunkKey]
    request: Request

    @property
    def complete(self) -> bool:
        """True when nothing was missing: `data` is the exact view."""
        return not self.missing


class ChunkedArray:
    """A lazily indexed array whose chunks come from a `ChunkCache`.

    Indexing (`[...]`, `.oindex[...]`, `.vindex[...]`) composes an index
    transform and reads nothing. `result()` and `numpy.asarray` block until
    the chunks are resident; `read_nonblocking()` returns at once with what is
    resident and queues the rest.

    Thread contract: any method may be called from any thread; reads from
    several threads share the cache and its workers.

    Every read is bounded before any chunk is listed: a view touching more than
    `max_view_chunks` chunks (default `MAX_VIEW_CHUNKS`, 65,536) or returning
    more than `max_view_bytes` bytes (default: the cache's `total_bytes_limit`,
    at least 256 MiB) is refused with `PlanTooLargeError` by `plan`, `result`,
    `read_nonblocking` and `numpy.asarray` alike — in microseconds, whatever the
    grid. Views derived by indexing keep the bounds.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.cache import ChunkCache
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> data = np.arange(48).reshape(6, 8)
    >>> with ChunkCache(1 << 20) as cache:
    ...     array = ChunkedArray(ArraySource(data, chunks=(4, 4)), cache)
    ...     view = array[1:5, ::-3]
    ...     print(view.shape, np.array_equal(view.result(), data[1:5, ::-3]))
    (4, 3) True
    """

    __slots__ = ("_cache", "_lazy", "_plan", "_plans", "_source", "_view")

    def __init__(
        self,
        source: ChunkSource,
        cache: ChunkCache,
        *,
        view: Hashable = None,
        max_view_chunks: int | None = None,
        max_view_bytes: int | None = None,
        _lazy: LazyArray | None = None,
        _plans: _PlanMemo | None = None,
    ) -> None:
        self._source = source
        self._cache = cache
        self._lazy = _lazy if _lazy is not None else lazy_for(source)
        # Successive non-blocking reads of one view supersede each other.
        self._view: Hashable = view if view is not None else ("array", id(self))
        self._plans = _plans if _plans is not None else _PlanMemo(max_view_chunks, max_view_bytes)
        self._plan: ReadPlan | None = None  # a view's plan never changes: made once

    # -- array-like surface -----------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._lazy.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self._lazy.dtype)
        return dtype

    @property
    def ndim(self) -> int:
        return self._lazy.ndim

    @property
    def size(self) -> int:
        return self._lazy.size

    @property
    def chunks(self) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
        """The source's read chunk shape (zarr style), or per-axis sizes if irregular."""
        grid = self._source.grid
        if all(isinstance(g, FixedDimension) for g in grid):
            return tuple(int(g.size) for g in grid if isinstance(g, FixedDimension))
        counts = grid_shape(self._source)
        return tuple(
            tuple(int(g.chunk_size(i)) for i in range(n))
            for g, n in zip(grid, counts, strict=True)
        )

    @property
    def fill_value(self) -> Any:
        return self._source.fill_value

    @property
    def source(self) -> ChunkSource:
        return self._source

    @property
    def cache(self) -> ChunkCache:
        """The cache serving this array: statistics, events, chunk states, `retry`."""
        return self._cache

    @property
    def transform(self) -> IndexTransform:
        """The index transform from this view to the source's coordinates."""
        return self._lazy.transform

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ChunkedArray(shape={self.shape}, dtype={self.dtype}, source={self._source!r})"

    # -- lazy indexing ----------------------------------------------------

    def _derive(self, lazy: LazyArray) -> ChunkedArray:
        return ChunkedArray(
            self._source, self._cache, view=self._view, _lazy=lazy, _plans=self._plans
        )

    def __getitem__(self, selection: Any) -> ChunkedArray:
        return self._derive(self._lazy[selection])

    @property
    def oindex(self) -> _Indexer:
        """Orthogonal (outer-product) indexing, as zarr's `oindex`."""
        return _Indexer(self, "oindex")

    @property
    def vindex(self) -> _Indexer:
        """Vectorized (point) indexing, as zarr's `vindex`."""
        return _Indexer(self, "vindex")

    # -- reading ----------------------------------------------------------

    def plan(self) -> ReadPlan:
        """Plan this view's read: the chunks it touches and how it is assembled (no I/O).

        Made once per view; a basic selection's plan is also shared with every
        other view of the same selection derived from the same array.
        `PlanTooLargeError` if the view is over the array's bounds (see the class).
        """
        plan = self._plan
        if plan is None:
            plan = self._plan = self._plans.plan(self._lazy, self._source, self._cache)
        return plan

    def chunk_refs(self) -> list[ChunkRef]:
        """The chunks this view touches (planned, not read)."""
        return self.plan().refs

    def result(self, *, timeout: float | None = None) -> np.ndarray[Any, Any]:
        """Read the view, waiting for its chunks. Raises `ChunkReadError` if one FAILED.

        `timeout` (seconds) bounds the wait; `TimeoutError` when it passes.
        `CacheClosedError` if the cache is closed, or closes while this waits
        (the waiting thread is woken at once).

        Each chunk is copied once, straight from the cache into the new array.
        """
        plan = self.plan()
        cache = self._cache
        if cache.closed:  # a closed cache serves no reads, resident chunks included
            raise CacheClosedError(f"{self!r}: the chunk cache is closed")
        out = plan.new_buffer()
        # The resident chunks first, under one lock acquisition and without pinning:
        # a cached chunk is never written in place, so the arrays in hand stay valid
        # even if evicted meanwhile. Pinning them costs as much as the copies'
        # overhead on a warm window (25 chunks: ~0.15 ms, a quarter of a memcpy).
        ready, failed = cache.lookup_many((ref.key for ref in plan.refs), count_hits=True)
        _copy_all(plan, out, list(ready.items()))
        if len(ready) == len(plan.refs):
            return plan.finish(out)
        for key in failed:
            error = cache.error(key)
            raise ChunkReadError(f"chunk {key} failed: {error}") from error
        rest = [ref for ref in plan.refs if ref.key not in ready]
        copied: set[ChunkKey] = set()

        def copy_out(key: ChunkKey, data: np.ndarray[Any, Any]) -> None:
            # On the worker that decoded the chunk, as it lands: its bytes are still in
            # that core's cache, the copies overlap the other loads and run on every
            # worker, and this thread is not woken to copy each chunk itself.
            plan.copy_chunk(out, key, data)
            copied.add(key)

        with cache.request(rest, center=self._center(), on_ready=copy_out) as request:
            # Woken once, when all landed (or one failed): `copy_out` did the copies.
            for key in request.landed(timeout, at_once=True):
                if key in copied:  # landed after `copy_out` returned
                    continue
                data = cache.lookup(key)
                if data is None:
                    error = cache.error(key)
                    raise ChunkReadError(f"chunk {key} failed: {error}") from error
                plan.copy_chunk(out, key, data)
        return plan.finish(out)

    def read_nonblocking(
        self,
        *,
        placeholder: Any = None,
        fallback: Fallback = None,
        requester: Hashable = None,
        level: int = 0,
        prefetch: Iterable[ChunkRef] = (),
        view: Hashable = None,
    ) -> PartialRead:
        """Return at once with the resident data; queue the missing chunks.

        Parameters
        ----------
        placeholder
            Value for cells whose chunk is not resident (default: fill value).
        fallback
            An array of this view's shape to take missing cells from instead
            (e.g. resident coarser-level data, upsampled), or a callable
            returning one, called only when something is missing, with the
            missing chunks' keys (it need only fill the cells they cover).
        requester
            Who reads (a layer's viewport, a reader thread); a newer read by
            the same requester supersedes this one's queued work. Defaults to
            this array.
        level
            Pyramid level (0 finest); coarser levels load first.
        prefetch
            Extra chunks to load at low priority (not pinned).
        view
            Deprecated name of `requester` ("view" also names the array itself).
        """
        if view is not None:
            warnings.warn(
                "read_nonblocking(view=...) is deprecated: pass requester=...",
                DeprecationWarning,
                stacklevel=2,
            )
            requester = view if requester is None else requester
        if isinstance(fallback, np.ndarray) and fallback.shape != self.shape:
            raise ValueError(f"fallback has shape {fallback.shape}, the view has {self.shape}")
        plan = self.plan()
        # Copy what is resident *before* queueing the rest: once loads start, the
        # workers compete for the GIL and would stretch this call (which napari
        # makes on its main thread) by up to a switch interval. A chunk landing
        # in between is reported missing and shown on the next read.
        data, missing = plan.assemble(self._cache, placeholder=placeholder, fallback=fallback)
        request = self._cache.request(
            plan.refs,
            view=self._view if requester is None else requester,
            level=level,
            center=self._center(),
            prefetch=prefetch,
        )
        return PartialRead(data, frozenset(missing), request)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        if copy is False:
            raise ValueError("a chunked array cannot be converted without copying")
        data = self.result()
        return data if dtype is None else data.astype(dtype, copy=False)

    def bounding_box(self) -> tuple[tuple[int, int], ...] | None:
        """The `[min, max)` storage interval per source axis the view touches (None if empty)."""
        return self._lazy.bounding_box()

    def _center(self) -> tuple[float, ...] | None:
        box = self._lazy.bounding_box()
        if box is None:
            return None
        return tuple((lo + hi) / 2 for lo, hi in box)


class _Indexer:
    __slots__ = ("_array", "_mode")

    def __init__(self, array: ChunkedArray, mode: str) -> None:
        self._array = array
        self._mode = mode

    def __getitem__(self, selection: Any) -> ChunkedArray:
        lazy = self._array._lazy
        indexed = lazy.oindex[selection] if self._mode == "oindex" else lazy.vindex[selection]
        return self._array._derive(indexed)
