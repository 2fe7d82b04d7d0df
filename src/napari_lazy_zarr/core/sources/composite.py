"""Composite chunk sources: arrays built from other sources, from a value, or from a function.

A lazy array is an index transform over a chunk source, and sources compose the
way TensorStore's drivers do:

| source | TensorStore | holds |
|---|---|---|
| `ConcatSource` | ``ts.concat`` | its members side by side along an existing axis |
| `StackSource` | ``ts.stack`` | its members along a new axis |
| `ConstantSource` | | one value over a domain (padding, missing tiles) |
| `FunctionSource` | ``ts.virtual_chunked`` | ``function(box)`` over a declared grid |
| `CastSource` | ``ts.cast`` | another source's values converted to another dtype |
| `CropSource` | ``base[:n0, :n1, ...]`` | another source's first cells (padding left out) |

Each is a `ChunkSource`, so it is planned, cached, loaded by workers and shown
in napari like a zarr array. A composite's `read_chunk` reads its members
*directly* through their own `read_chunk`, never through the cache: it runs in
a worker thread, and a worker waiting on the cache for another chunk could
wait on itself. Composites use nothing of a member but the `ChunkSource`
protocol.

Chunk keys carry the composite's `CompositeIdentity`, derived from its
members' identities and its parameters, so two equal composites share cached
chunks while a composite never shares keys with its members.

All of them are read-only: `write_chunk` raises `ReadOnlyError`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

import numpy as np
from zarr_indexing import DimensionGridLike, FixedDimension, IndexDomain

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    IncompatibleSourcesError,
    ReadOnlyError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.keys import (
    SHOWN_MEMBERS,
    CompositeIdentity,
    box_text,
    chunk_bounds,
    label_of,
)
from napari_lazy_zarr.core.sources._grid import boundaries, grid_from_boundaries
from napari_lazy_zarr.core.sources.protocol import SourceFields, fill_value_of

if TYPE_CHECKING:
    from distributed import Client
    from numpy.typing import ArrayLike, DTypeLike

    from napari_lazy_zarr.core.sources.dask import DaskRunner
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "CastSource",
    "ConcatSource",
    "ConstantSource",
    "CropSource",
    "FunctionSource",
    "StackSource",
]

# The dtypes an image source may have (as for zarr arrays: see zarr_source).
_IMAGE_KINDS: Final = frozenset("biufc")
# A `ConstantSource` without explicit chunks: planes of at most this many pixels a side.
_CONSTANT_CHUNK: Final = 512

type Casting = Literal["no", "equiv", "safe", "same_kind", "unsafe"]
type Chunks = Sequence[int] | Sequence[Sequence[int]]


class _ReadOnly:
    """Composites answer reads only; a write names the source and says so."""

    def write_chunk(self, coords: tuple[int, ...], data: ArrayLike) -> NoReturn:
        """Always raises `ReadOnlyError`: composite sources cannot be written."""
        raise ReadOnlyError(
            f"{self!r} is read-only: composite sources cannot be written; "
            "write to the arrays it is built from instead"
        )


def _image_dtype(dtype: DTypeLike, what: str) -> np.dtype[Any]:
    resolved = np.dtype(dtype)
    if resolved.kind not in _IMAGE_KINDS:
        raise UnsupportedDataError(
            f"{what}: dtype {resolved} cannot be shown as an image "
            "(supported: bool, integer, float and complex dtypes)"
        )
    return resolved


def _normalized_chunks(chunks: Chunks) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
    """`chunks` as nested tuples (hashable, for identities)."""
    if all(isinstance(c, int | np.integer) for c in chunks):
        return tuple(int(c) for c in chunks)  # type: ignore[arg-type]
    return tuple(tuple(int(s) for s in axis) for axis in chunks)  # type: ignore[union-attr]


def _grid_for(chunks: Chunks, shape: tuple[int, ...], what: str) -> tuple[DimensionGridLike, ...]:
    from zarr_indexing import dimension_grids_from_chunks

    try:
        return tuple(dimension_grids_from_chunks(chunks, shape))
    except ValueError as error:
        raise IncompatibleSourcesError(f"{what}: chunks {chunks!r}: {error}") from error


def _normalized_axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise IncompatibleSourcesError(
            f"{what}: axis {axis} is outside the valid range [{-rank}, {rank})"
        )
    return axis % rank


def _describe(sources: Sequence[ChunkSource]) -> str:
    shown = ", ".join(repr(s) for s in sources[:SHOWN_MEMBERS])
    more = f", ... +{len(sources) - SHOWN_MEMBERS} more" if len(sources) > SHOWN_MEMBERS else ""
    return f"[{shown}{more}]"


class ConcatSource(SourceFields, _ReadOnly):
    """Its members laid end to end along `axis` (TensorStore's ``ts.concat``).

    Members must have the same rank and dtype and agree on every extent but
    `axis`'s; the composite's extent along `axis` is the sum of theirs. Each
    member keeps its own chunk grid: along `axis` the composite's cells are
    the members' cells in order, and across it the composite's grid is the
    finest common refinement of the members' grids (the union of their cell
    boundaries), so every composite cell lies inside exactly one cell of one
    member. A read of a composite cell is one `read_chunk` of that member
    cell, cut to the composite cell when the members' grids differ (a member
    cell split across several composite cells is then read once per piece).

    Parameters
    ----------
    sources
        The members, in order (at least one).
    axis
        The axis to concatenate along; negative counts from the end.
    fill_value
        The composite's fill value (placeholder for missing cells); by
        default the first member's. Members keep their own fill values for
        their own missing chunks.

    Raises
    ------
    IncompatibleSourcesError
        No member, a bad axis, or members whose rank, dtype or off-axis
        extents disagree (the message names the first member that differs).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> a = ArraySource(np.zeros((2, 3), "u1"), chunks=(2, 2), name="a")
    >>> b = ArraySource(np.ones((3, 3), "u1"), chunks=(3, 3), name="b")
    >>> both = ConcatSource([a, b], axis=0)
    >>> both.shape, both.grid[0].edges  # a's cell of 2 rows, then b's of 3
    ((5, 3), (2, 3))
    >>> both.read_chunk((1, 0))  # b's cell cut at a's column boundary
    array([[1, 1],
           [1, 1],
           [1, 1]], dtype=uint8)
    >>> str(both.identity)
    'concat(a, b; axis=0)'
    """

    def __init__(
        self, sources: Sequence[ChunkSource], axis: int = 0, *, fill_value: Any = None
    ) -> None:
        members = tuple(sources)
        if not members:
            raise IncompatibleSourcesError("concat: needs at least one source")
        first = members[0]
        rank = len(first.shape)
        if rank == 0:
            raise IncompatibleSourcesError(f"concat: {first!r} has no axis to concatenate along")
        self._axis = _normalized_axis(axis, rank, "concat")
        for index, member in enumerate(members[1:], start=1):
            _check_agrees(member, index, first, skip_axis=self._axis, what="concat")
        self._members = members
        self._dtype = np.dtype(first.dtype)
        self._fill_value = fill_value_of(
            first.fill_value if fill_value is None else fill_value, self._dtype
        )
        along: list[int] = [0]
        offsets: list[int] = []
        owners: list[int] = []  # composite cell along the axis -> the member holding it
        across: list[set[int]] = [set() for _ in range(rank)]
        for index, member in enumerate(members):
            offsets.append(along[-1])
            for dim, (g, extent) in enumerate(zip(member.grid, member.shape, strict=True)):
                cuts = boundaries(g, int(extent))
                if dim == self._axis:
                    start = along[-1]
                    along.extend(start + c for c in cuts[1:])
                    owners.extend([index] * (len(cuts) - 1))
                else:
                    across[dim].update(cuts)
        self._offsets = tuple(offsets)
        self._owners = tuple(owners)
        self._shape = tuple(
            along[-1] if dim == self._axis else int(first.shape[dim]) for dim in range(rank)
        )
        self._grid = grid_from_boundaries(
            [along if dim == self._axis else sorted(across[dim]) for dim in range(rank)]
        )
        self._identity = CompositeIdentity(
            "concat", (("axis", self._axis),), tuple(m.identity for m in members)
        )

    # -- ChunkSource -------------------------------------------------------

    @property
    def axis(self) -> int:
        """The axis the members are laid along (non-negative)."""
        return self._axis

    @property
    def members(self) -> tuple[ChunkSource, ...]:
        """The sources combined, in order."""
        return self._members

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        index = self._owners[int(coords[self._axis])]
        member = self._members[index]
        shift = self._offsets[index]
        member_lo = tuple(a - shift if d == self._axis else a for d, a in enumerate(lo))
        member_hi = tuple(b - shift if d == self._axis else b for d, b in enumerate(hi))
        # The composite's boundaries include the member's, so one member cell holds the box.
        member_coords = tuple(
            int(g.index_to_chunk(a)) for g, a in zip(member.grid, member_lo, strict=True)
        )
        data = member.read_chunk(member_coords)
        cell_lo, cell_hi = chunk_bounds(member.grid, member_coords, member.shape)
        if (cell_lo, cell_hi) == (member_lo, member_hi):
            return data
        piece = tuple(
            slice(a - c, b - c) for a, b, c in zip(member_lo, member_hi, cell_lo, strict=True)
        )
        # A copy: a view would keep the whole member cell alive, uncounted by the cache.
        return np.array(data[piece], copy=True)

    def __repr__(self) -> str:
        return f"ConcatSource({_describe(self._members)}, axis={self._axis})"


class CropSource(SourceFields, _ReadOnly):
    """`base`'s first `shape` cells along each axis (TensorStore's ``base[:n0, :n1, ...]``).

    For a level stored larger than its data (padded to whole shards): the
    crop shows the data's extent only. Its grid is `base`'s, cut at the new
    extent, so each cell is the `base` cell of the same coordinates, cut short
    where the crop ends inside it.

    Parameters
    ----------
    base
        The source cropped.
    shape
        The extent kept along each axis, from 0; at most `base`'s.

    Raises
    ------
    IncompatibleSourcesError
        `shape` has another rank than `base`, or an extent outside ``[0, base's]``.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> base = ArraySource(np.arange(36).reshape(6, 6), chunks=(4, 4), name="b")
    >>> crop = CropSource(base, (5, 3))
    >>> crop.shape, crop.grid[0].chunk_size(0)
    ((5, 3), 4)
    >>> crop.read_chunk((1, 0))
    array([[24, 25, 26]])
    >>> str(crop.identity)
    'crop(b; shape=(5, 3))'
    """

    def __init__(self, base: ChunkSource, shape: Sequence[int]) -> None:
        kept = tuple(int(n) for n in shape)
        if len(kept) != len(base.shape) or any(
            not 0 <= n <= int(m) for n, m in zip(kept, base.shape, strict=True)
        ):
            raise IncompatibleSourcesError(
                f"crop: shape {kept} is not within {tuple(base.shape)} of {base!r}"
            )
        self._base = base
        self._shape = kept
        self._dtype = np.dtype(base.dtype)
        self._fill_value = base.fill_value
        fixed = [g for g in base.grid if isinstance(g, FixedDimension)]
        if len(fixed) == len(kept):
            self._grid: tuple[DimensionGridLike, ...] = tuple(
                FixedDimension(size=int(g.size), extent=n)
                for g, n in zip(fixed, kept, strict=True)
            )
        else:
            self._grid = grid_from_boundaries(
                [boundaries(g, n) for g, n in zip(base.grid, kept, strict=True)]
            )
        self._identity = CompositeIdentity("crop", (("shape", kept),), (base.identity,))

    @property
    def base(self) -> ChunkSource:
        """The source cropped."""
        return self._base

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        data = self._base.read_chunk(coords)
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        extent = tuple(b - a for a, b in zip(lo, hi, strict=True))
        if data.shape == extent:
            return data
        # A copy: a view would keep the whole base cell alive, uncounted by the cache.
        return np.array(data[tuple(slice(0, n) for n in extent)], copy=True)

    def __repr__(self) -> str:
        return f"CropSource({self._base!r}, shape={self._shape})"


def _check_agrees(
    member: ChunkSource, index: int, first: ChunkSource, *, skip_axis: int | None, what: str
) -> None:
    """Raise `IncompatibleSourcesError` unless `member` matches `first` (but along `skip_axis`)."""
    if len(member.shape) != len(first.shape):
        raise IncompatibleSourcesError(
            f"{what}: source {index} ({member!r}) has rank {len(member.shape)}, "
            f"source 0 ({first!r}) has rank {len(first.shape)}"
        )
    if np.dtype(member.dtype) != np.dtype(first.dtype):
        raise IncompatibleSourcesError(
            f"{what}: source {index} ({member!r}) has dtype {member.dtype}, "
            f"source 0 has {first.dtype}; convert one with CastSource"
        )
    for dim, (extent, expected) in enumerate(zip(member.shape, first.shape, strict=True)):
        if dim != skip_axis and extent != expected:
            where = "" if skip_axis is None else f" (all but axis {skip_axis} must agree)"
            raise IncompatibleSourcesError(
                f"{what}: source {index} ({member!r}) has shape {tuple(member.shape)}, "
                f"source 0 has {tuple(first.shape)}: they differ along axis {dim}{where}"
            )


class StackSource(ConcatSource):
    """Its members along a new `axis`, one plane each (TensorStore's ``ts.stack``).

    Members must have the same shape and dtype. The new axis has cells of
    size 1; across it the grid is the finest common refinement of the
    members' grids, as for `ConcatSource`.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> planes = [ArraySource(np.full((2, 2), i, "u1"), chunks=(2, 2), name=i) for i in range(3)]
    >>> stack = StackSource(planes, axis=-1)
    >>> stack.shape, stack.read_chunk((0, 0, 2))[..., 0]
    ((2, 2, 3), array([[2, 2],
           [2, 2]], dtype=uint8))
    """

    def __init__(
        self, sources: Sequence[ChunkSource], axis: int = 0, *, fill_value: Any = None
    ) -> None:
        members = tuple(sources)
        if not members:
            raise IncompatibleSourcesError("stack: needs at least one source")
        rank = len(members[0].shape) + 1
        new_axis = _normalized_axis(axis, rank, "stack")
        for index, member in enumerate(members[1:], start=1):
            _check_agrees(member, index, members[0], skip_axis=None, what="stack")
        super().__init__(
            [_NewAxisSource(m, new_axis) for m in members], new_axis, fill_value=fill_value
        )
        self._stacked = members
        self._identity = CompositeIdentity(
            "stack", (("axis", new_axis),), tuple(m.identity for m in members)
        )

    @property
    def members(self) -> tuple[ChunkSource, ...]:
        return self._stacked

    def __repr__(self) -> str:
        return f"StackSource({_describe(self._stacked)}, axis={self.axis})"


class _NewAxisSource(SourceFields):
    """A member of a stack: `base` with a length-1 axis inserted at `axis`."""

    def __init__(self, base: ChunkSource, axis: int) -> None:
        self._base = base
        self._axis = axis
        self._shape = (*base.shape[:axis], 1, *base.shape[axis:])
        self._grid = (*base.grid[:axis], FixedDimension(size=1, extent=1), *base.grid[axis:])
        self._identity = CompositeIdentity("new-axis", (("axis", axis),), (base.identity,))

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._base.dtype

    @property
    def fill_value(self) -> Any:
        return self._base.fill_value

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        inner = (*coords[: self._axis], *coords[self._axis + 1 :])
        return np.expand_dims(self._base.read_chunk(inner), self._axis)

    def __repr__(self) -> str:
        return repr(self._base)


class ConstantSource(SourceFields, _ReadOnly):
    """One `value` everywhere over `shape`: padding, missing tiles, a blank plane.

    Its fill value is `value`. Chunks are made on demand (``numpy.full``).

    Parameters
    ----------
    shape
        The domain's extent per axis.
    value
        The value of every cell, converted to `dtype` (an error if it does not fit).
    dtype
        By default NumPy's dtype for `value`.
    chunks
        The read grid: one size per axis, or explicit sizes per axis. By
        default planes of the last two axes, at most 512 a side. In a
        `ConcatSource` next to other sources, giving the neighbours' chunks
        keeps the composite's grid as coarse as theirs.

    Examples
    --------
    >>> pad = ConstantSource((3, 5), 7, "u2", chunks=(2, 4))
    >>> pad.read_chunk((1, 1))
    array([[7]], dtype=uint16)
    >>> str(pad.identity)
    'constant(shape=(3, 5), dtype=uint16, value=7, chunks=(2, 4))'
    """

    def __init__(
        self,
        shape: Sequence[int],
        value: Any = 0,
        dtype: DTypeLike | None = None,
        *,
        chunks: Chunks | None = None,
    ) -> None:
        self._shape = tuple(int(s) for s in shape)
        resolved = _image_dtype(np.asarray(value).dtype if dtype is None else dtype, "constant")
        try:
            self._value = np.array(value, dtype=resolved)
        except (OverflowError, ValueError, TypeError) as error:
            raise UnsupportedDataError(
                f"constant: value {value!r} does not fit dtype {resolved}: {error}"
            ) from error
        if self._value.ndim != 0:
            raise UnsupportedDataError(f"constant: value must be a scalar, got {value!r}")
        if chunks is None:
            rank = len(self._shape)
            chunks = tuple(
                max(1, min(extent, _CONSTANT_CHUNK)) if dim >= rank - 2 else 1
                for dim, extent in enumerate(self._shape)
            )
        self._chunks = _normalized_chunks(chunks)
        self._grid = _grid_for(self._chunks, self._shape, "constant")
        # The value by its bytes: exact, and NaN equals NaN.
        self._identity = CompositeIdentity(
            "constant",
            (
                ("shape", self._shape),
                ("dtype", str(self._value.dtype)),
                ("value", _ValueText(self._value.tobytes(), str(self._value))),
                ("chunks", self._chunks),
            ),
        )

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._value.dtype

    @property
    def fill_value(self) -> Any:
        return self._value[()]

    @property
    def value(self) -> Any:
        """The value of every cell (a NumPy scalar of `dtype`)."""
        return self._value[()]

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        return np.full(tuple(b - a for a, b in zip(lo, hi, strict=True)), self._value)

    def __repr__(self) -> str:
        return f"ConstantSource({self._shape}, {self._value[()]!r}, dtype={self._value.dtype})"


@dataclass(frozen=True, slots=True)
class _ValueText:
    """A constant in an identity: compared by its bytes, shown as its value."""

    data: bytes
    text: str

    def __str__(self) -> str:
        return self.text


class FunctionSource(SourceFields, _ReadOnly):
    """``function(box)`` over a declared grid: procedural or computed data, cached like any other.

    TensorStore's ``ts.virtual_chunked``. `function` is called from worker
    threads, once per chunk (each chunk is then cached), with the chunk's
    `IndexDomain` clipped to `shape`, and returns an array of the box's shape.
    A result of another dtype is converted when NumPy's ``same_kind`` casting
    allows it (``float64`` results for a ``float32`` source), else the chunk
    fails, as does any exception `function` raises. A result that is a view
    of other memory is copied, so the cache never aliases the caller's arrays.

    Parameters
    ----------
    function
        ``function(box: IndexDomain) -> array``; must be thread-safe and
        return the same values for the same box every time (chunks are cached
        and may be evicted and recomputed).
    shape, dtype, chunks
        The array's shape and dtype, and its read grid (one size per axis, or
        explicit sizes per axis).
    fill_value
        The placeholder for cells not computed yet (None: the dtype's zero).
    name
        Names the data in chunk keys and messages. By default the function
        itself: two sources share cached chunks only if they are built from
        the same function object (and the same shape, dtype and grid). A
        name is a promise that it identifies the values.
    client
        Run `function` on a dask cluster instead of the cache's worker
        thread: a ``distributed.Client``, ``"active"`` (the client already
        running in this process), or a `DaskRunner` to share. Each chunk is
        then one task (``client.submit``) with the priority rule of
        `core.dask_source`; `cancel_load` cancels it, and the chunk's wait is
        bounded by `timeout`. `function` must then be picklable (cloudpickle).
    timeout
        With a client: seconds one chunk's task may take (`LoadTimeoutError` after).

    Examples
    --------
    >>> import numpy as np
    >>> def ramp(box):
    ...     rows, cols = (np.arange(a, b) for a, b in zip(box.inclusive_min, box.exclusive_max))
    ...     return np.add.outer(rows * 10, cols)
    >>> source = FunctionSource(ramp, shape=(30, 30), dtype="i4", chunks=(8, 8))
    >>> source.read_chunk((3, 1))
    array([[248, 249, 250, 251, 252, 253, 254, 255],
           [258, 259, 260, 261, 262, 263, 264, 265],
           [268, 269, 270, 271, 272, 273, 274, 275],
           [278, 279, 280, 281, 282, 283, 284, 285],
           [288, 289, 290, 291, 292, 293, 294, 295],
           [298, 299, 300, 301, 302, 303, 304, 305]], dtype=int32)
    """

    def __init__(
        self,
        function: Callable[[IndexDomain], ArrayLike],
        *,
        shape: Sequence[int],
        dtype: DTypeLike,
        chunks: Chunks,
        fill_value: Any = 0,
        name: Hashable | None = None,
        client: Client | Literal["active"] | DaskRunner | None = None,
        timeout: float | None = None,
    ) -> None:
        if not callable(function):
            raise TypeError(f"function: expected a callable, got {function!r}")
        self._function = function
        self._runner: DaskRunner | None = None
        self._owns_runner = False
        if client is not None:
            from napari_lazy_zarr.core.sources.dask import (
                DEFAULT_COMPUTE_TIMEOUT,
                DaskRunner,
                Tickets,
            )

            if isinstance(client, DaskRunner):
                self._runner = client
            else:
                self._runner = DaskRunner(
                    client, timeout=DEFAULT_COMPUTE_TIMEOUT if timeout is None else timeout
                )
                self._owns_runner = True
            self._tickets = Tickets()
            self.load_reason = "computing"  # the cache's LOADING reason for its chunks
            # Computed on a cluster: no ring of neighbours computed ahead (a view reads
            # only its own chunks; `core.viewport.prefetch_ring`), as for dask sources.
            self.prefetch_ring = 0
        self._shape = tuple(int(s) for s in shape)
        self._dtype = _image_dtype(dtype, "function")
        self._chunks = _normalized_chunks(chunks)
        self._grid = _grid_for(self._chunks, self._shape, "function")
        self._fill_value = fill_value_of(fill_value, self._dtype)
        self._name: Hashable = function if name is None else name
        self._identity = CompositeIdentity(
            "function",
            (
                ("name", self._name),
                ("shape", self._shape),
                ("dtype", str(self._dtype)),
                ("chunks", self._chunks),
            ),
        )

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        box = IndexDomain(inclusive_min=lo, exclusive_max=hi)
        where = f"{self.identity}: box {box_text(lo, hi)}"
        if self._runner is not None:
            # The runner raises LazyZarrErrors naming the chunk and the task.
            coords = tuple(int(c) for c in coords)
            ticket = self._tickets.open(coords)
            try:
                data = np.asarray(self._runner.call(self._function, box, ticket, where))
            finally:
                self._tickets.close(coords, ticket)
            return self._checked(data, box, where)
        try:
            data = np.asarray(self._function(box))
        except Exception as error:
            raise ChunkReadError(
                f"{where}: the function raised {type(error).__name__}: {error}"
            ) from error
        return self._checked(data, box, where)

    def _checked(
        self, data: np.ndarray[Any, Any], box: IndexDomain, where: str
    ) -> np.ndarray[Any, Any]:
        """The function's result as the chunk of `box`, or a `ChunkReadError` saying why not."""
        if data.shape != box.shape:
            raise ChunkReadError(
                f"{where}: the function returned shape {data.shape}, the box has {box.shape}"
            )
        if data.dtype != self._dtype:
            if not np.can_cast(data.dtype, self._dtype, casting="same_kind"):
                raise ChunkReadError(
                    f"{where}: the function returned dtype {data.dtype}, which does not "
                    f"convert to the declared {self._dtype} without changing kind"
                )
            return data.astype(self._dtype)
        return data if data.flags.owndata else data.copy()

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        """Cancel chunk `coords`'s task on the cluster, if any (a local call cannot be)."""
        if self._runner is not None:
            self._runner.cancel(self._tickets, tuple(int(c) for c in coords))

    def close(self) -> None:
        """Cancel the tasks in flight; close the runner the source made (not a client)."""
        if self._runner is not None:
            self._tickets.cancel_all()
            if self._owns_runner:
                self._runner.close()

    def __repr__(self) -> str:
        return f"FunctionSource({label_of(self._name)}, shape={self._shape}, dtype={self._dtype})"


class CastSource(SourceFields, _ReadOnly):
    """`base`'s values converted to `dtype` (TensorStore's ``ts.cast``).

    Conversion is NumPy's ``astype``, so a lossy cast (narrowing integers,
    float to integer, float64 to float32) loses what ``astype`` loses: floats
    truncate toward zero, out-of-range values wrap or are undefined, NaN has
    no integer value; complex to real keeps the real part. Those casts do not
    warn per chunk. `lossless` says whether every value survives;
    ``casting="safe"`` refuses any cast that is not lossless.

    Parameters
    ----------
    base
        The source read.
    dtype
        The dtype presented.
    casting
        Which casts to allow, as for NumPy's ``can_cast``; by default all
        (``"unsafe"``: ``astype`` semantics).

    Raises
    ------
    UnsupportedDataError
        `dtype` is not an image dtype, or the cast is not allowed by `casting`.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> base = ArraySource(np.array([0, 1000, 65535], "u2"), chunks=(2,), name="b")
    >>> wide = CastSource(base, "float32")
    >>> wide.read_chunk((1,)), wide.lossless
    (array([65535.], dtype=float32), True)
    >>> CastSource(base, "u1").read_chunk((0,))
    array([  0, 232], dtype=uint8)
    """

    def __init__(
        self, base: ChunkSource, dtype: DTypeLike, *, casting: Casting = "unsafe"
    ) -> None:
        self._base = base
        self._dtype = _image_dtype(dtype, f"cast of {base!r}")
        if not np.can_cast(base.dtype, self._dtype, casting=casting):
            raise UnsupportedDataError(
                f"cast of {base!r}: {base.dtype} to {self._dtype} is not a {casting!r} cast; "
                "casting='unsafe' converts as numpy's astype does (lossy)"
            )
        self._identity = CompositeIdentity(
            "cast", (("dtype", str(self._dtype)),), (base.identity,)
        )
        fill = np.asarray(fill_value_of(base.fill_value, base.dtype))
        self._fill_value = _cast(fill, self._dtype)[()]

    @property
    def domain(self) -> IndexDomain:
        return self._base.domain

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._base.shape)

    @property
    def grid(self) -> tuple[DimensionGridLike, ...]:
        return self._base.grid

    @property
    def base(self) -> ChunkSource:
        """The source converted."""
        return self._base

    @property
    def lossless(self) -> bool:
        """Whether every value of the base dtype survives the cast (NumPy's ``safe`` casting)."""
        return bool(np.can_cast(self._base.dtype, self._dtype, casting="safe"))

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        return _cast(self._base.read_chunk(coords), self._dtype)

    def __repr__(self) -> str:
        return f"CastSource({self._base!r}, {self._dtype})"


def _cast(data: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``data.astype(dtype)``, without NumPy's per-call warnings for lossy conversions."""
    if data.dtype == dtype:
        return data
    if data.dtype.kind == "c" and dtype.kind not in "cb":
        data = data.real  # what astype keeps, without its ComplexWarning
    with np.errstate(invalid="ignore", over="ignore"):
        return data.astype(dtype)
