"""Read plans: which chunks a view needs, and how its cells are assembled from them.

A view is planned once per read. Three shapes of plan, chosen by what the
view's index transform is:

- `StridedPlan` — every output map is a constant or a strided map of its own
  input axis (every basic selection: slices of any step, integers). Served
  from the per-axis `StridedSet` tables of zarr-indexing's `GridPartition`:
  one slice-and-copy per touched chunk, no per-part objects. This is the
  viewport path napari takes on every pan and zoom.
- `PointPlan` — a pure point gather (`vindex` over every axis, plus scalar
  indices), served from the `JointSet` table: one vectorized take per chunk.
  On a regular grid the points are grouped by chunk here, by arithmetic and
  one stable sort of narrow chunk numbers (a radix sort when they fit 16
  bits), not by zarr-indexing's general joint-set planning (about 0.9 ms of
  a 10,000-point warm gather's ~2 ms).
- `PartsPlan` — everything else (orthogonal gathers, mixed selections):
  `LazyArray.parts()` resolved through `CacheReader`, the zarr-indexing
  `Reader` that consumes each part's projection.

Measured on a 2048² window over 512² chunks: `LazyArray.parts()` costs about
60 µs per part (≈1.5 ms for 25 parts); the strided tables cost a few µs per
axis row.

Every plan is bounded before anything is listed: `count_chunks` counts a view's
chunks by grid arithmetic (per output axis, the chunks its selection touches;
their product, capped by the view's cells) and `plan_read` refuses a view over
`MAX_VIEW_CHUNKS` chunks or `max_bytes` output bytes with `PlanTooLargeError`.
zarr-indexing lists every chunk of a selection, so without the count a 200-byte
``.zarray`` (chunk shape 1, shape ``[10**12]``) decided the work. Measured here:
a `StridedPlan` costs 5-10 µs and ~500 B per chunk, the cache request another
~40 µs per chunk, so the bound (65,536 chunks) keeps the worst accepted
non-blocking read to ~3 s on a 2-core laptop, and a refusal to microseconds.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
from zarr_indexing import (
    ArrayMap,
    ConstantMap,
    DimensionMap,
    FixedDimension,
    GridPartition,
    LazyArray,
    Partition,
    ReadContext,
    StridedSet,
    plan_chunks,
)

from napari_lazy_zarr.core.errors import PlanTooLargeError
from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS
from napari_lazy_zarr.core.reading.cache_reader import CacheReader

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from zarr_indexing import DimensionGridLike, IndexTransform

    from napari_lazy_zarr.core.keys import ChunkLookup
    from napari_lazy_zarr.core.reading.cache_reader import ChunkLoader
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "MAX_VIEW_CHUNKS",
    "Fallback",
    "PartsPlan",
    "PointPlan",
    "ReadPlan",
    "StridedPlan",
    "check_view_size",
    "count_chunks",
    "plan_read",
]

MAX_VIEW_CHUNKS: Final = DEFAULT_BOUNDS.max_chunks
"""Chunks one read may touch by default (`plan_read`); a view over it is refused
(`ViewBounds.max_chunks`)."""

_EXACT_POINTS: Final = 4096
"""Up to this many samples (or spanned chunks) of a strided non-regular axis are counted
exactly, one by one; past both, the fewer of the two bounds the count."""

type Fallback = (
    np.ndarray[Any, Any] | Callable[[Collection[ChunkKey]], np.ndarray[Any, Any]] | None
)
"""Values for missing cells: an array of the view's shape, or a callable making one from
the missing chunks' keys (it need only fill the cells those chunks cover)."""


class ReadPlan:
    """A planned read: the chunks it needs and how each chunk's cells reach the view.

    A plan is immutable once built and may be assembled any number of times.
    `assemble` copies everything resident at once (non-blocking reads);
    `new_buffer` + `copy_chunk` per landed chunk + `finish` lets a blocking read
    copy chunks while the others still load.
    """

    refs: list[ChunkRef]

    def __init__(self, source: ChunkSource, shape: tuple[int, ...]) -> None:
        self._source = source
        self._shape = shape

    @property
    def buffer_shape(self) -> tuple[int, ...]:
        """The shape of the buffer every chunk of the plan is copied into (`new_buffer`)."""
        return self._shape

    def new_buffer(self, *, zeros: bool = False) -> np.ndarray[Any, Any]:
        """An uninitialized (or zeroed) buffer every chunk of the plan is copied into."""
        return (np.zeros if zeros else np.empty)(self.buffer_shape, dtype=self._source.dtype)

    def finish(self, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The view's array, once every chunk was copied into `out` (or filled)."""
        return out

    def copy_chunk(
        self, out: np.ndarray[Any, Any], key: ChunkKey, data: np.ndarray[Any, Any]
    ) -> None:
        """Copy the cells chunk `key` (its decoded `data`) contributes to the view."""
        raise NotImplementedError

    def fill_missing(
        self,
        out: np.ndarray[Any, Any],
        key: ChunkKey,
        value: Any,
        fallback: np.ndarray[Any, Any] | None,
    ) -> None:
        """Give chunk `key`'s cells the fallback's values, or `value`."""
        raise NotImplementedError

    def assemble(
        self,
        cache: ChunkLookup,
        *,
        placeholder: Any = None,
        fallback: Fallback = None,
    ) -> tuple[np.ndarray[Any, Any], set[ChunkKey]]:
        """A fresh array of the view from what is resident, and the keys that were not.

        Missing chunks' cells get the `fallback`'s values if given (an array of
        the view's shape, or a callable making one, called only if something is
        missing, with the missing keys), else `placeholder` (default: the source's
        fill value). FAILED
        chunks always get the placeholder, so a failure is never disguised.
        """
        value = self._source.fill_value if placeholder is None else placeholder
        # One lock acquisition for the whole view (napari's main thread calls this).
        ready, failed = cache.lookup_many((ref.key for ref in self.refs), partial=True)
        missing = {ref.key for ref in self.refs if ref.key not in ready}
        values = fallback(missing) if missing and callable(fallback) else fallback
        if callable(values):  # nothing is missing: the callable is never needed
            values = None
        if values is None and not ready:
            # A cold view: one contiguous fill beats one per chunk, and a zero fill is
            # none at all (zeroed pages from the OS: 8 MiB filled cost ~1.2 ms here).
            dtype = self._source.dtype
            if np.asarray(value, dtype=dtype).tobytes() == bytes(dtype.itemsize):
                return self.finish(self.new_buffer(zeros=True)), missing
            out = self.new_buffer()
            out.fill(value)
            return self.finish(out), missing
        out = self.new_buffer()
        for ref in self.refs:
            key = ref.key
            data = ready.get(key)
            if data is not None:
                self.copy_chunk(out, key, data)
            elif values is not None and key in failed:
                # A failed chunk keeps the explicit placeholder: the failure stays visible.
                self.fill_missing(out, key, value, None)
            else:
                self.fill_missing(out, key, value, values)
        return self.finish(out), missing


def count_chunks(transform: IndexTransform, grid: tuple[DimensionGridLike, ...]) -> int:
    """How many chunks of `grid` a view through `transform` touches, by arithmetic.

    Exact for basic selections (constant and strided maps: slices of any step,
    integers) over regular grids, and over other grids for unit steps or while an
    axis has at most 4,096 samples or spanned chunks; an upper bound otherwise
    (index arrays: the fewer of their points and the chunks they span). Costs
    O(rank) on regular grids, whatever their size — no chunk is listed.
    Out-of-bounds selections raise zarr-indexing's `IndexError`.
    """
    cells = math.prod(int(n) for n in transform.domain.shape)
    if cells == 0:
        return 0
    count = 1
    for m, g in zip(transform.output, grid, strict=True):
        count *= _axis_chunks(transform, m, g)
    return min(count, cells)  # every cell of the view lies in exactly one chunk


def _axis_chunks(transform: IndexTransform, m: Any, g: DimensionGridLike) -> int:
    if isinstance(m, ConstantMap):
        return 1
    if isinstance(m, DimensionMap):
        k = m.input_dimension
        n = int(transform.domain.shape[k])
        stride = int(m.stride)
        if stride == 0 or n == 1:
            return 1
        first = int(m.offset) + stride * int(transform.domain.inclusive_min[k])
        last = first + stride * (n - 1)
        span = int(g.index_to_chunk(max(first, last))) - int(g.index_to_chunk(min(first, last)))
        span += 1
        if isinstance(g, FixedDimension):
            # Samples further apart than a chunk all land in different chunks; closer
            # samples skip none of the chunks they span.
            return n if abs(stride) >= int(g.size) else span
        if abs(stride) == 1:
            return span  # a unit stride skips no chunk of its span
        if n <= _EXACT_POINTS:
            samples = first + stride * np.arange(n, dtype=np.int64)
            return int(np.count_nonzero(np.diff(g.indices_to_chunks(samples)))) + 1
        if span <= _EXACT_POINTS:  # the chunks of the span holding a sample
            low, step = min(first, last), abs(stride)
            start = int(g.index_to_chunk(low))
            held = 0
            for chunk in range(start, start + span):
                offset = max(int(g.chunk_offset(chunk)), low)
                end = int(g.chunk_offset(chunk)) + int(g.chunk_size(chunk))
                held += low + -(-(offset - low) // step) * step < end
            return held
        return min(n, span)
    array_map = cast("ArrayMap", m)
    points = array_map.index_array
    if points.size == 0:
        return 0
    lo, hi = int(points.min()), int(points.max())
    ends = sorted(int(array_map.offset) + int(array_map.stride) * v for v in (lo, hi))
    span = int(g.index_to_chunk(ends[1])) - int(g.index_to_chunk(ends[0])) + 1
    return min(_distinct(points), span)


def _distinct(points: np.ndarray[Any, Any]) -> int:
    """The number of points an index array holds (its broadcast axes counted once)."""
    kept = tuple(0 if stride == 0 else slice(None) for stride in points.strides)
    return int(points[kept].size)


def check_view_size(
    transform: IndexTransform,
    source: ChunkSource,
    *,
    max_chunks: int = MAX_VIEW_CHUNKS,
    max_bytes: int | None = None,
) -> int:
    """The chunks a view touches (`count_chunks`), or `PlanTooLargeError` over a bound.

    `max_bytes` bounds the view's output (cells x itemsize; None: unbounded).
    """
    shape = tuple(int(n) for n in transform.domain.shape)
    nbytes = math.prod(shape) * source.dtype.itemsize
    if max_bytes is not None and nbytes > max_bytes:
        raise PlanTooLargeError(
            f"{source.identity}: a view of shape {shape} is {nbytes:,} bytes, over the "
            f"{max_bytes:,} bytes one read may return (the chunk cache's limit); read a "
            "smaller region or a coarser level, or raise the bound (max_view_bytes=, or "
            "the cache's total_bytes_limit)"
        )
    count = count_chunks(transform, source.grid)
    if count > max_chunks:
        raise PlanTooLargeError(
            f"{source.identity}: a view of shape {shape} touches up to {count:,} chunks, over "
            f"the {max_chunks:,} one read may plan; read a smaller region or a coarser "
            "level, or raise the bound (max_view_chunks=)"
        )
    return count


def plan_read(
    lazy: LazyArray,
    source: ChunkSource,
    cache: ChunkLoader | None = None,
    *,
    max_chunks: int = MAX_VIEW_CHUNKS,
    max_bytes: int | None = None,
) -> ReadPlan:
    """Plan `lazy` (a view over `source`'s grid) with the cheapest plan that fits it.

    `cache` (a `ChunkCache`, or any `ChunkLoader`: plans never import the cache)
    serves the parts of a `PartsPlan` (selections that are neither basic nor
    pure point gathers); planning such a view without one is refused.

    A view touching more than `max_chunks` chunks, or of more than `max_bytes`
    output bytes, is refused with `PlanTooLargeError` before any chunk is listed
    (`check_view_size`).
    """
    transform = lazy.transform
    if math.prod(transform.domain.shape) == 0:
        return _EmptyPlan(source, lazy.shape)
    check_view_size(transform, source, max_chunks=max_chunks, max_bytes=max_bytes)
    if transform.index_array_structure == "none" and _strided_maps(transform.output):
        partition = plan_chunks(transform, source.grid).partition()
        if _every_input_axis_bound(partition):
            return StridedPlan(partition, source, lazy.shape)
    elif all(isinstance(m, ArrayMap | ConstantMap) for m in transform.output):
        # Point gathers: every vindex, and fancy indexing of a 1-d array.
        regular = PointPlan.on_regular_grid(transform, source, lazy.shape)
        if regular is not None:
            return regular
        if transform.index_array_structure == "general":  # not an orthogonal gather
            partition = plan_chunks(transform, source.grid).partition()
            if (
                len(partition.joint_sets) == 1
                and all(axis.input_dimension is None for axis in partition.sets)
                and partition.joint_sets[0].broadcast_axes == tuple(range(transform.domain.ndim))
            ):
                return PointPlan.from_partition(partition, source, lazy.shape)
    if cache is None:
        raise ValueError("planning an orthogonal or mixed selection needs the chunk cache")
    return PartsPlan(lazy, source, cache)


def _strided_maps(outputs: Any) -> bool:
    return all(
        isinstance(m, ConstantMap) or (isinstance(m, DimensionMap) and m.stride != 0)
        for m in outputs
    )


def _every_input_axis_bound(partition: GridPartition) -> bool:
    """Each request axis is read by exactly one output axis, in increasing order."""
    bound = [axis.input_dimension for axis in partition.sets if axis.input_dimension is not None]
    return bound == list(range(partition.transform.domain.ndim))


class _EmptyPlan(ReadPlan):
    """A view with no cells: nothing to read."""

    def __init__(self, source: ChunkSource, shape: tuple[int, ...]) -> None:
        super().__init__(source, shape)
        self.refs = []


# One row of one axis: chunk index, chunk start, chunk end, the chunk-local selector, and the
# request-axis selector (None for a constant axis, which the view drops).
_AxisRow = tuple[int, int, int, int | slice, slice | None]


class StridedPlan(ReadPlan):
    """A basic-indexing view: per-axis tables, one slice-and-copy per chunk."""

    def __init__(
        self, partition: GridPartition, source: ChunkSource, shape: tuple[int, ...]
    ) -> None:
        super().__init__(source, shape)
        sets = [cast("StridedSet", axis) for axis in partition.sets]
        rows_per_axis: list[list[_AxisRow]] = []
        for axis in sets:
            rows: list[_AxisRow] = []
            stride = axis.stride
            for row in range(len(axis)):
                local = int(axis.local_start[row])
                start = int(axis.chunk_start[row])
                end = start + int(axis.chunk_extent[row])
                if axis.input_dimension is None:
                    rows.append((int(axis.chunk[row]), start, end, local, None))
                    continue
                extent = int(axis.extent[row])
                stop: int | None = local + stride * extent
                if stop is not None and stop < 0:
                    stop = None  # a reversed run that ends at the chunk's first cell
                origin = int(axis.origin[row])
                rows.append(
                    (
                        int(axis.chunk[row]),
                        start,
                        end,
                        slice(local, stop, stride),
                        slice(origin, origin + extent),
                    )
                )
            rows_per_axis.append(rows)
        identity = source.identity
        self._pieces: dict[ChunkKey, tuple[tuple[int | slice, ...], tuple[slice, ...]]] = {}
        self.refs = []
        for combo in itertools.product(*rows_per_axis):
            coords = tuple(row[0] for row in combo)
            lo = tuple(row[1] for row in combo)
            hi = tuple(row[2] for row in combo)
            key = ChunkKey(identity, lo, hi)
            chunk_selection = tuple(row[3] for row in combo)
            out_selection = tuple(row[4] for row in combo if row[4] is not None)
            self._pieces[key] = (chunk_selection, out_selection)
            self.refs.append(ChunkRef(key, source, coords))

    def copy_chunk(
        self, out: np.ndarray[Any, Any], key: ChunkKey, data: np.ndarray[Any, Any]
    ) -> None:
        chunk_selection, out_selection = self._pieces[key]
        out[out_selection] = data[chunk_selection]

    def fill_missing(
        self,
        out: np.ndarray[Any, Any],
        key: ChunkKey,
        value: Any,
        fallback: np.ndarray[Any, Any] | None,
    ) -> None:
        _, out_selection = self._pieces[key]
        out[out_selection] = value if fallback is None else fallback[out_selection]


class PointPlan(ReadPlan):
    """A pure point gather: the points grouped by chunk, one take each.

    `pieces` maps each chunk to its chunk-local selector (one index array or
    int per source axis) and the flat output positions its points fill.
    """

    def __init__(
        self,
        source: ChunkSource,
        shape: tuple[int, ...],
        pieces: list[tuple[ChunkRef, tuple[Any, ...], np.ndarray[Any, Any]]],
    ) -> None:
        super().__init__(source, shape)
        self._pieces = {ref.key: (selector, positions) for ref, selector, positions in pieces}
        self.refs = [ref for ref, _, _ in pieces]

    @classmethod
    def from_partition(
        cls, partition: GridPartition, source: ChunkSource, shape: tuple[int, ...]
    ) -> PointPlan:
        """From zarr-indexing's `JointSet` table (any grid)."""
        joint = partition.joint_sets[0]
        constants = [cast("StridedSet", axis) for axis in partition.sets]
        rank = len(source.grid)
        local = joint.local
        pieces = []
        for row in range(len(joint)):
            run = joint.run(row)
            coords = [0] * rank
            selector: list[Any] = [None] * rank
            for axis in constants:
                coords[axis.output_dimension] = int(axis.chunk[0])
                selector[axis.output_dimension] = int(axis.local_start[0])
            for column, dim in enumerate(joint.output_dimensions):
                coords[dim] = int(joint.chunk[row, column])
                selector[dim] = local[run, column]
            pieces.append((ChunkRef.of(source, coords), tuple(selector), joint.positions[run]))
        return cls(source, shape, pieces)

    @classmethod
    def on_regular_grid(
        cls, transform: Any, source: ChunkSource, shape: tuple[int, ...]
    ) -> PointPlan | None:
        """The plan of a vectorized gather whose index arrays all span the whole request
        (every `vindex`), over a regular grid, with every point inside the array; else
        None (the general planning then reads it, or names what is wrong)."""
        grid = source.grid
        domain = tuple(int(n) for n in transform.domain.shape)
        if math.prod(domain) == 0 or not all(isinstance(g, FixedDimension) for g in grid):
            return None
        count = math.prod(domain)
        fixed: list[tuple[int, int, int]] = []  # (axis, chunk, local) of the constant axes
        varying: list[tuple[int, np.ndarray[Any, Any], np.ndarray[Any, Any], int]] = []
        for axis, (m, g, extent) in enumerate(
            zip(transform.output, grid, source.shape, strict=True)
        ):
            size = int(cast("FixedDimension", g).size)
            if size <= 0:
                return None
            if isinstance(m, ConstantMap):
                point = int(m.offset)
                if not 0 <= point < extent:
                    return None
                fixed.append((axis, point // size, point % size))
                continue
            array_map = cast("ArrayMap", m)
            if tuple(array_map.index_array.shape) != domain:
                return None  # an orthogonal or partly broadcast gather
            points = array_map.index_array.reshape(-1).astype(np.intp, copy=False)
            if array_map.stride != 1 or array_map.offset != 0:
                points = array_map.offset + array_map.stride * points
            if int(points.min()) < 0 or int(points.max()) >= extent:
                return None
            chunks, local = np.divmod(points, size)
            varying.append((axis, chunks, local, -(-extent // size)))
        if not varying:
            return None
        # Number each point's chunk on the varying axes, as narrow as the grid allows.
        total = math.prod(n for *_, n in varying)
        if total > np.iinfo(np.uint32).max:
            return None
        number: np.ndarray[Any, Any] = np.zeros(
            count, dtype=np.uint16 if total <= 1 << 16 else np.uint32
        )
        for _, chunks, _, n in varying:
            np.multiply(number, n, out=number)
            np.add(number, chunks.astype(number.dtype, copy=False), out=number)
        order = np.argsort(number, kind="stable")  # radix sort for 16-bit numbers
        ordered = number[order]
        starts = np.flatnonzero(np.diff(ordered)) + 1
        bounds = [0, *starts.tolist(), count]
        locals_in_order = [local[order] for _, _, local, _ in varying]
        chunks_first = [chunks[order[bounds[:-1]]] for _, chunks, _, _ in varying]
        rank = len(grid)
        pieces = []
        for row, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            coords = [0] * rank
            selector: list[Any] = [None] * rank
            for axis, chunk, offset in fixed:
                coords[axis], selector[axis] = chunk, offset
            for column, (axis, *_rest) in enumerate(varying):
                coords[axis] = int(chunks_first[column][row])
                selector[axis] = locals_in_order[column][lo:hi]
            pieces.append((ChunkRef.of(source, coords), tuple(selector), order[lo:hi]))
        return cls(source, shape, pieces)

    @property
    def buffer_shape(self) -> tuple[int, ...]:
        return (math.prod(self._shape),)

    def finish(self, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return out.reshape(self._shape)

    def copy_chunk(
        self, out: np.ndarray[Any, Any], key: ChunkKey, data: np.ndarray[Any, Any]
    ) -> None:
        selector, positions = self._pieces[key]
        out[positions] = data[selector]

    def fill_missing(
        self,
        out: np.ndarray[Any, Any],
        key: ChunkKey,
        value: Any,
        fallback: np.ndarray[Any, Any] | None,
    ) -> None:
        _, positions = self._pieces[key]
        out[positions] = value if fallback is None else fallback.reshape(-1)[positions]


class PartsPlan(ReadPlan):
    """Any other view: `LazyArray.parts()`, each part resolved through `CacheReader`."""

    def __init__(self, lazy: LazyArray, source: ChunkSource, cache: ChunkLoader) -> None:
        super().__init__(source, lazy.shape)
        self._lazy = lazy
        self._cache = cache
        self._parts: dict[ChunkKey, list[Partition]] = {}
        self.refs = []
        for part in lazy.parts():
            ref = ChunkRef.of(source, part.projection.chunk_coords)
            if ref.key not in self._parts:
                self._parts[ref.key] = []
                self.refs.append(ref)
            self._parts[ref.key].append(part)

    def _resolve(self, out: np.ndarray[Any, Any], key: ChunkKey, reader: CacheReader) -> None:
        for part in self._parts[key]:
            context = ReadContext(part.view.transform, part.projection)
            if all(isinstance(selector, slice) for selector in part.out_selection):
                # The same walk as `LazyArray.result(parts=...)`, without re-validating
                # parts this plan just produced (that costs an output-sized mask).
                destination = out[part.out_selection] if part.out_selection else out
                reader.read_into(self._lazy.array, context, destination)
            else:
                buffer = np.empty(part.view.shape, dtype=self._source.dtype)
                reader.read_into(self._lazy.array, context, buffer)
                out[part.out_selection] = buffer

    def copy_chunk(
        self, out: np.ndarray[Any, Any], key: ChunkKey, data: np.ndarray[Any, Any]
    ) -> None:
        # `data` is READY and pinned by the caller's request: the reader finds it.
        self._resolve(out, key, CacheReader(self._cache, self._source, blocking=True))

    def fill_missing(
        self,
        out: np.ndarray[Any, Any],
        key: ChunkKey,
        value: Any,
        fallback: np.ndarray[Any, Any] | None,
    ) -> None:
        reader = CacheReader(
            self._cache, self._source, blocking=False, placeholder=value, fallback=fallback
        )
        self._resolve(out, key, reader)
