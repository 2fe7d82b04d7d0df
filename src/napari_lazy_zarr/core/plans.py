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
- `PartsPlan` — everything else (orthogonal gathers, mixed selections):
  `LazyArray.parts()` resolved through `CacheReader`, the zarr-indexing
  `Reader` that consumes each part's projection.

Measured on a 2048² window over 512² chunks: `LazyArray.parts()` costs about
60 µs per part (≈1.5 ms for 25 parts); the strided tables cost a few µs per
axis row.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from zarr_indexing import (
    ArrayMap,
    ConstantMap,
    DimensionMap,
    GridPartition,
    LazyArray,
    ReadContext,
    StridedSet,
    plan_chunks,
)

from napari_lazy_zarr.core.cache import ChunkRef
from napari_lazy_zarr.core.reader import CacheReader
from napari_lazy_zarr.core.state import ChunkKey

if TYPE_CHECKING:
    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.source import ChunkSource

__all__ = ["PartsPlan", "PointPlan", "ReadPlan", "StridedPlan", "plan_read"]


class ReadPlan(Protocol):
    """A planned read: the chunks it needs and how to assemble the view from the cache."""

    @property
    def refs(self) -> list[ChunkRef]: ...

    def assemble(
        self,
        cache: ChunkCache,
        *,
        blocking: bool,
        placeholder: Any = None,
        fallback: np.ndarray[Any, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], set[ChunkKey]]:
        """A fresh array of the view, and the keys of chunks that were not resident.

        With `blocking`, every chunk must be resident (the caller waited for
        the request); otherwise a missing chunk's cells get the `fallback`'s
        values if given, else `placeholder` (default: the fill value).
        """
        ...


def plan_read(lazy: LazyArray, source: ChunkSource) -> ReadPlan:
    """Plan `lazy` (a view over `source`'s grid) with the cheapest plan that fits it."""
    transform = lazy.transform
    if math.prod(transform.domain.shape) == 0:
        return _EmptyPlan(lazy.shape, source.dtype)
    if transform.index_array_structure == "none" and _strided_maps(transform.output):
        partition = plan_chunks(transform, source.grid).partition()
        if _every_input_axis_bound(partition):
            return StridedPlan(partition, source, lazy.shape)
    elif transform.index_array_structure == "general" and all(
        isinstance(m, ArrayMap | ConstantMap) for m in transform.output
    ):
        partition = plan_chunks(transform, source.grid).partition()
        if (
            len(partition.joint_sets) == 1
            and all(axis.input_dimension is None for axis in partition.sets)
            and partition.joint_sets[0].broadcast_axes == tuple(range(transform.domain.ndim))
        ):
            return PointPlan(partition, source, lazy.shape)
    return PartsPlan(lazy, source)


def _strided_maps(outputs: Any) -> bool:
    return all(
        isinstance(m, ConstantMap) or (isinstance(m, DimensionMap) and m.stride != 0)
        for m in outputs
    )


def _every_input_axis_bound(partition: GridPartition) -> bool:
    """Each request axis is read by exactly one output axis, in increasing order."""
    bound = [axis.input_dimension for axis in partition.sets if axis.input_dimension is not None]
    return bound == list(range(partition.transform.domain.ndim))


def _missing_value(source: ChunkSource, placeholder: Any) -> Any:
    return source.fill_value if placeholder is None else placeholder


class _EmptyPlan:
    """A view with no cells: nothing to read."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self._shape = shape
        self._dtype = dtype
        self.refs: list[ChunkRef] = []

    def assemble(
        self,
        cache: ChunkCache,
        *,
        blocking: bool,
        placeholder: Any = None,
        fallback: np.ndarray[Any, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], set[ChunkKey]]:
        return np.empty(self._shape, dtype=self._dtype), set()


# One row of one axis: chunk index, chunk start, chunk end, the chunk-local selector, and the
# request-axis selector (None for a constant axis, which the view drops).
_AxisRow = tuple[int, int, int, int | slice, slice | None]


class StridedPlan:
    """A basic-indexing view: per-axis tables, one slice-and-copy per chunk."""

    def __init__(
        self, partition: GridPartition, source: ChunkSource, shape: tuple[int, ...]
    ) -> None:
        self._source = source
        self._shape = shape
        sets = [cast("StridedSet", axis) for axis in partition.sets]
        identity = source.identity
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
        self._pieces: list[tuple[ChunkRef, tuple[int | slice, ...], tuple[slice, ...]]] = []
        for combo in itertools.product(*rows_per_axis):
            coords = tuple(row[0] for row in combo)
            key = ChunkKey(
                identity, tuple(row[1] for row in combo), tuple(row[2] for row in combo)
            )
            chunk_selection = tuple(row[3] for row in combo)
            out_selection = tuple(row[4] for row in combo if row[4] is not None)
            self._pieces.append((ChunkRef(key, source, coords), chunk_selection, out_selection))
        self.refs = [piece[0] for piece in self._pieces]

    def assemble(
        self,
        cache: ChunkCache,
        *,
        blocking: bool,
        placeholder: Any = None,
        fallback: np.ndarray[Any, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], set[ChunkKey]]:
        out = np.empty(self._shape, dtype=self._source.dtype)
        missing: set[ChunkKey] = set()
        value = _missing_value(self._source, placeholder)
        for ref, chunk_selection, out_selection in self._pieces:
            data = cache.lookup(ref.key)
            if data is not None:
                out[out_selection] = data[chunk_selection]
            elif blocking:
                raise RuntimeError(f"chunk {ref.key} is not READY during a blocking read")
            else:
                missing.add(ref.key)
                out[out_selection] = value if fallback is None else fallback[out_selection]
        return out, missing


class PointPlan:
    """A pure point gather: the joint table's points grouped by chunk, one take each."""

    def __init__(
        self, partition: GridPartition, source: ChunkSource, shape: tuple[int, ...]
    ) -> None:
        self._source = source
        self._shape = shape
        joint = partition.joint_sets[0]
        constants = [cast("StridedSet", axis) for axis in partition.sets]
        rank = len(source.grid)
        local = joint.local
        self._pieces: list[tuple[ChunkRef, tuple[Any, ...], np.ndarray[Any, Any]]] = []
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
            self._pieces.append(
                (ChunkRef.of(source, coords), tuple(selector), joint.positions[run])
            )
        self.refs = [piece[0] for piece in self._pieces]

    def assemble(
        self,
        cache: ChunkCache,
        *,
        blocking: bool,
        placeholder: Any = None,
        fallback: np.ndarray[Any, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], set[ChunkKey]]:
        flat = np.empty(math.prod(self._shape), dtype=self._source.dtype)
        missing: set[ChunkKey] = set()
        value = _missing_value(self._source, placeholder)
        fallback_flat = None if fallback is None else fallback.reshape(-1)
        for ref, selector, positions in self._pieces:
            data = cache.lookup(ref.key)
            if data is not None:
                flat[positions] = data[selector]
            elif blocking:
                raise RuntimeError(f"chunk {ref.key} is not READY during a blocking read")
            else:
                missing.add(ref.key)
                flat[positions] = value if fallback_flat is None else fallback_flat[positions]
        return flat.reshape(self._shape), missing


class PartsPlan:
    """Any other view: `LazyArray.parts()` resolved through `CacheReader`."""

    def __init__(self, lazy: LazyArray, source: ChunkSource) -> None:
        self._lazy = lazy
        self._source = source
        self._parts = tuple(lazy.parts())
        self.refs = [ChunkRef.of(source, p.projection.chunk_coords) for p in self._parts]

    def assemble(
        self,
        cache: ChunkCache,
        *,
        blocking: bool,
        placeholder: Any = None,
        fallback: np.ndarray[Any, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], set[ChunkKey]]:
        reader = CacheReader(
            cache, self._source, blocking=blocking, placeholder=placeholder, fallback=fallback
        )
        out = np.empty(self._lazy.shape, dtype=self._source.dtype)
        for part in self._parts:
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
        return out, reader.missing
