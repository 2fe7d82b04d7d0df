"""Virtual pyramid levels for arrays stored without one.

napari reads only the visible region of a layer when it is multiscale with at
least two levels; a single-level layer is read whole-plane. An array without
a stored pyramid is therefore presented as a pyramid of *decimated* levels:
level k is the base array sampled with step 2^k on its last two axes.

A `DecimatedSource` is a `ChunkSource` of its own (its chunks are cached under
their own keys, a few KiB each), so a coarse level never keeps full-resolution
chunks resident. A stored chunk that cannot be read is left out of the coarse
chunks sampling it (`leaves_out_failed_inputs`): its region shows the fill value
there, as it does at full resolution, instead of the whole coarse chunk failing
(one bad 256² chunk blacked out a 2048² block of the overview).

It is also a `DerivedSource`: in a `ChunkCache`, each of its
chunks is built from the chunks of the next finer level it samples (level 1
from the stored chunks), which the cache loads first as ordinary entries. So
`virtual_levels` chains the levels: every stored chunk is read once for all
virtual levels — and it is the very cache entry the full-resolution view uses
— each virtual chunk waits for at most a few chunks of the level below, and
the reads spread over all workers. The coarsest level of an array of N chunks
still costs all N stored reads once (the unavoidable price of a first overview
of data that has no pyramid); the cache schedules that cost behind the
displayed view (see `PriorityQueue`).

Measured before the chain (16384² array, 512² chunks, 200 ms per HTTP request):
each coarse virtual chunk read its 64 stored chunks one after another in one
worker, each level read the base again (2,058 GETs for 1,024 stored chunks),
and the full-resolution view had not completed after 60 s.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr_indexing import FixedDimension

from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.keys import ChunkRef, chunk_bounds
from napari_lazy_zarr.core.sources.protocol import SourceFields

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Mapping, Sequence

    from zarr_indexing import DimensionGridLike

    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["DIRECT_INPUT_BYTES", "MIN_LEVEL_EXTENT", "DecimatedSource", "virtual_levels"]

_MIN_LEVEL_CHUNK = 128
MAX_BASE_CHUNKS = 65_536
"""Stored chunks one virtual-level chunk may read (beyond that it FAILS, visibly)."""

MIN_LEVEL_EXTENT = 2
"""The fewest pixels a virtual level keeps along each decimated axis. napari (0.9.2) picks a
level for the view and returns early, keeping the level it shows, when the view spans 0
pixels of it along a displayed axis, as it does along an axis 1 pixel long: a row of 10**6
pixels given levels down to 1 x 489 stayed on that coarsest level and showed only the fill
value. So no level decimates an axis below 2 pixels: an axis that short keeps its factor
while the others go on halving (napari takes a factor per axis), and an axis 1 pixel long at
full resolution gets no virtual level at all (napari reads such a layer whole, as its own
reader's)."""


class DecimatedSource(SourceFields):
    """`base` sampled every `factor` pixels along `axes`: one virtual pyramid level.

    The factor may differ per axis (a level of a 3 x 1,000,000 row halves only the long
    axis once the short one is 2 pixels: `MIN_LEVEL_EXTENT`).

    A `DerivedSource`: in a `ChunkCache` each chunk is combined from the chunks
    it samples of `parent` (the next finer level) or, without one, of `base`;
    `read_chunk` reads `base` directly (no cache).

    Parameters
    ----------
    base
        The full-resolution source.
    factor
        The sampling step (level k of a power-of-two pyramid has factor 2^k), or
        one step per decimated axis (in the order of `axes`).
    axes
        The decimated axes (by default the last two).
    parent
        A finer `DecimatedSource` of the same `base` and `axes` whose factors
        divide `factor`'s: this level's chunks are then built from the parent's.
    chunk_size
        The chunk edge along the decimated axes, or one per axis (default: the
        base chunk divided by `factor`, at least 128 pixels).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> base = ArraySource(np.arange(64).reshape(8, 8), chunks=(4, 4), name="b")
    >>> level = DecimatedSource(base, 2)
    >>> level.shape
    (4, 4)
    >>> level.read_chunk((0, 0))
    array([[ 0,  2,  4,  6],
           [16, 18, 20, 22],
           [32, 34, 36, 38],
           [48, 50, 52, 54]])

    Level 2 built from level 1 in a cache: its chunk (1, 1) samples one level-1
    chunk, which samples one stored chunk.

    >>> level1 = DecimatedSource(base, 2, chunk_size=2)
    >>> level2 = DecimatedSource(base, 4, parent=level1, chunk_size=1)
    >>> [str(ref.key) for ref in level2.chunk_inputs((1, 1))]
    ["('b', 'decimated', 2, (0, 1))[2:4, 2:4]"]
    >>> [str(ref.key) for ref in level1.chunk_inputs((1, 1))]
    ['b[4:8, 4:8]']
    >>> level2.chunk_cost((1, 1))
    1

    A factor per axis: every second row, every fourth column.

    >>> DecimatedSource(base, (2, 4)).read_chunk((0, 0))
    array([[ 0,  4],
           [16, 20],
           [32, 36],
           [48, 52]])
    """

    leaves_out_failed_inputs = True
    """In a cache, a chunk whose inputs partly FAILED is combined from the others, their
    region at the fill value (`core.cache._dependencies`); one whose inputs all failed
    fails."""

    def __init__(
        self,
        base: ChunkSource,
        factor: int | Sequence[int],
        axes: tuple[int, ...] | None = None,
        *,
        parent: DecimatedSource | None = None,
        chunk_size: int | Sequence[int] | None = None,
    ) -> None:
        rank = len(base.shape)
        self._base = base
        self._axes = tuple(range(max(0, rank - 2), rank)) if axes is None else tuple(axes)
        self._decimated = frozenset(self._axes)
        factors = (
            (int(factor),) * len(self._axes)
            if isinstance(factor, int | np.integer)
            else tuple(int(f) for f in factor)
        )
        if len(factors) != len(self._axes) or any(f < 1 for f in factors):
            raise ValueError(
                f"factor must be >= 1 for each of the axes {self._axes}, got {factor}"
            )
        self._factors = factors
        self._factor_of = dict(zip(self._axes, factors, strict=True))
        if parent is None:
            self._inputs: ChunkSource = base
            self._step = dict(self._factor_of)
            self._base_step = dict(self._factor_of)  # the steps the chain's finest level samples
        else:
            if (
                parent._base.identity != base.identity
                or parent._axes != self._axes
                or parent._factors == factors
                or any(f % p for f, p in zip(factors, parent._factors, strict=True))
            ):
                raise ValueError(
                    f"parent {parent!r} is not a finer decimation of {base!r} along "
                    f"{self._axes} whose factors divide {factor}"
                )
            self._inputs = parent
            self._step = {
                a: f // p for a, f, p in zip(self._axes, factors, parent._factors, strict=True)
            }
            self._base_step = parent._base_step
        self._shape = tuple(
            math.ceil(extent / self._factor_of[axis]) if axis in self._decimated else extent
            for axis, extent in enumerate(base.shape)
        )
        sizes: dict[int, int | None] = (
            dict.fromkeys(self._axes, None if chunk_size is None else int(chunk_size))
            if chunk_size is None or isinstance(chunk_size, int | np.integer)
            else dict(zip(self._axes, (int(c) for c in chunk_size), strict=True))
        )
        grid: list[DimensionGridLike] = []
        for axis, (g, extent) in enumerate(zip(base.grid, self._shape, strict=True)):
            wanted = sizes.get(axis)
            if axis in self._decimated:
                if wanted is not None:
                    size = max(1, wanted)
                else:
                    base_chunk = int(g.chunk_size(0)) if extent else 1
                    size = max(_MIN_LEVEL_CHUNK, base_chunk // self._factor_of[axis], 1)
                grid.append(FixedDimension(size=min(size, max(extent, 1)), extent=extent))
            else:
                grid.append(g)
        self._grid = tuple(grid)

    @property
    def identity(self) -> Hashable:
        return (self._base.identity, "decimated", self._factor_key(), self._axes)

    def _factor_key(self) -> int | tuple[int, ...]:
        """The factor, one number when every axis has it (as before factors per axis)."""
        return self._factors[0] if len(set(self._factors)) == 1 else self._factors

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._base.dtype

    @property
    def fill_value(self) -> Any:
        return self._base.fill_value

    @property
    def factor(self) -> int:
        """The largest sampling step (every axis's, for a level of one factor)."""
        return max(self._factors, default=1)

    @property
    def factors(self) -> tuple[int, ...]:
        """The sampling step along each decimated axis, in the order of its axes."""
        return self._factors

    @property
    def parent(self) -> DecimatedSource | None:
        """The finer level this one is built from in a cache (None: from `base`)."""
        return self._inputs if isinstance(self._inputs, DecimatedSource) else None

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """Read chunk `coords` straight from the base (without a cache)."""
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        if any(b <= a for a, b in zip(lo, hi, strict=True)):  # an empty chunk samples nothing
            return np.empty(tuple(b - a for a, b in zip(lo, hi, strict=True)), dtype=self.dtype)
        # The base chunks this level chunk samples (every `factor`-th cell), each read
        # directly (not cached) and its samples copied as `combine` copies a level's.
        base = self._base
        per_axis = self._spans(coords, base.grid, self._factor_of)
        count = math.prod(len(span) for span in per_axis)
        if count > MAX_BASE_CHUNKS:
            raise self._too_many(coords, count)
        refs = [ChunkRef.of(base, c) for c in itertools.product(*per_axis)]
        return self._sampled(
            coords, refs, self._factor_of, lambda ref: base.read_chunk(ref.coords)
        )

    # -- DerivedSource ------------------------------------------------------

    def chunk_inputs(self, coords: tuple[int, ...]) -> list[ChunkRef]:
        """The chunks of the finer level (or base) that chunk `coords` samples."""
        source = self._inputs
        per_axis = self._spans(coords, source.grid, self._step)
        count = math.prod(len(span) for span in per_axis)
        if count > MAX_BASE_CHUNKS:
            raise self._too_many(coords, count)
        return [ChunkRef.of(source, c) for c in itertools.product(*per_axis)]

    def chunk_cost(self, coords: tuple[int, ...]) -> int:
        """Stored chunks under chunk `coords` that its chain of levels reads (>= 1)."""
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        cost = 1
        for axis in self._axes:
            a, b = lo[axis], hi[axis]
            if b > a:
                factor = self._factor_of[axis]
                start, stop = a * factor, (b - 1) * factor + 1
                cost *= _sampled_count(self._base.grid[axis], start, stop, self._base_step[axis])
        return max(1, cost)

    def combine(
        self, coords: tuple[int, ...], inputs: Mapping[ChunkKey, np.ndarray[Any, Any]]
    ) -> np.ndarray[Any, Any]:
        """Chunk `coords` from the finer chunks it samples (keyed as `chunk_inputs` names them).

        An input absent from `inputs` (it FAILED: `leaves_out_failed_inputs`) leaves its
        region at the fill value.

        Examples
        --------
        >>> import numpy as np
        >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
        >>> base = ArraySource(np.arange(1, 65).reshape(8, 8), chunks=(4, 4), name="b")
        >>> level = DecimatedSource(base, 2)
        >>> refs = level.chunk_inputs((0, 0))
        >>> inputs = {ref.key: base.read_chunk(ref.coords) for ref in refs[1:]}  # one failed
        >>> level.combine((0, 0), inputs)
        array([[ 0,  0,  5,  7],
               [ 0,  0, 21, 23],
               [33, 35, 37, 39],
               [49, 51, 53, 55]])
        """
        refs = self.chunk_inputs(coords)
        present = [ref for ref in refs if ref.key in inputs]
        return self._sampled(
            coords,
            present,
            self._step,
            lambda ref: inputs[ref.key],
            whole=len(present) == len(refs),
        )

    def _sampled(
        self,
        coords: tuple[int, ...],
        refs: list[ChunkRef],
        steps: Mapping[int, int],
        data_of: Callable[[ChunkRef], np.ndarray[Any, Any]],
        *,
        whole: bool = True,
    ) -> np.ndarray[Any, Any]:
        """Chunk `coords` from the chunks `refs` of a finer grid sampled every `steps[axis]`
        cells along each decimated axis (the same grid along the others); unless `whole`
        (`refs` cover the chunk), what they leave uncovered is the fill value."""
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        shape = tuple(b - a for a, b in zip(lo, hi, strict=True))
        fill = self.fill_value if self.fill_value is not None else 0
        out = np.empty(shape, dtype=self.dtype) if whole else np.full(shape, fill, self.dtype)
        for ref in refs:
            data = data_of(ref)
            source_selection: list[slice] = []
            out_selection: list[slice] = []
            for axis, (a, b, start, stop) in enumerate(
                zip(lo, hi, ref.key.inclusive_min, ref.key.exclusive_max, strict=True)
            ):
                if axis not in self._decimated:
                    # Same grid as the input's along this axis: the whole chunk.
                    source_selection.append(slice(None))
                    out_selection.append(slice(None))
                    continue
                # Output cells x in [a, b) sample input index x * step within [start, stop).
                step = steps[axis]
                first, end = max(a, -(-start // step)), min(b, -(-stop // step))
                source_selection.append(
                    slice(first * step - start, (end - 1) * step - start + 1, step)
                )
                out_selection.append(slice(first - a, end - a))
            out[tuple(out_selection)] = data[tuple(source_selection)]
        return out

    def _spans(
        self,
        coords: tuple[int, ...],
        grid: tuple[DimensionGridLike, ...],
        steps: Mapping[int, int],
    ) -> list[list[int]]:
        """Per axis, the input grid's chunks holding a sample of chunk `coords`."""
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        spans: list[list[int]] = []
        for axis, (a, b) in enumerate(zip(lo, hi, strict=True)):
            if axis not in self._decimated:
                spans.append([int(coords[axis])])
            elif b <= a:
                spans.append([])
            else:
                step = steps[axis]
                spans.append(_sampled_chunks(grid[axis], a * step, (b - 1) * step + 1, step))
        return spans

    def _too_many(self, coords: tuple[int, ...], count: int) -> ChunkReadError:
        return ChunkReadError(
            f"chunk {coords} of the virtual level 1/{self._factor_key()} of "
            f"{self._base.identity}: it samples {count:,} stored chunks (at most "
            f"{MAX_BASE_CHUNKS:,}); this array has no pyramid and chunks too small for "
            "an overview"
        )

    def __repr__(self) -> str:
        return f"DecimatedSource({self._base!r}, factor={self._factor_key()}, axes={self._axes})"


def _sampled_count(grid: DimensionGridLike, start: int, stop: int, step: int) -> int:
    """How many chunks of `grid` hold one of the indices `range(start, stop, step)`.

    Arithmetic on a regular grid (a chain's coarsest level spans 10^6 chunks of a
    1-pixel grid: listing them took 74 s of napari's main thread); an upper bound
    (the fewer of samples and spanned chunks) on other grids past 4,096 chunks.
    """
    samples = len(range(start, stop, step))
    if samples == 0:
        return 0
    first, last = int(grid.index_to_chunk(start)), int(grid.index_to_chunk(stop - 1))
    if isinstance(grid, FixedDimension):
        # Samples a chunk or more apart land in distinct chunks; closer ones skip none.
        return samples if step >= int(grid.size) else last - first + 1
    if last - first + 1 > 4096:
        return min(samples, last - first + 1)
    return len(_sampled_chunks(grid, start, stop, step))


def _sampled_chunks(grid: DimensionGridLike, start: int, stop: int, step: int) -> list[int]:
    """The chunks of `grid` holding at least one of the indices `range(start, stop, step)`."""
    first, last = int(grid.index_to_chunk(start)), int(grid.index_to_chunk(stop - 1))
    if isinstance(grid, FixedDimension):
        size = int(grid.size)
        if step <= size:
            return list(range(first, last + 1))  # every chunk in the span holds a sample
        return [index // size for index in range(start, stop, step)]  # one chunk per sample
    if last - first + 1 > len(range(start, stop, step)):  # fewer samples than chunks
        return sorted({int(grid.index_to_chunk(index)) for index in range(start, stop, step)})
    chunks: list[int] = []
    for chunk in range(first, last + 1):
        offset = int(grid.chunk_offset(chunk))
        end = min(offset + int(grid.chunk_size(chunk)), stop)
        sample = start + -(-(max(offset, start) - start) // step) * step
        if sample < end:
            chunks.append(chunk)
    return chunks


def virtual_levels(
    base: ChunkSource,
    *,
    axes: tuple[int, ...] | None = None,
    smallest: int = 512,
    chunk_size: int | None = None,
) -> list[ChunkSource]:
    """`base` followed by decimated levels (factors 2, 4, ...) down to `smallest` pixels.

    Levels stop once every decimated axis is at most `smallest` long; an array
    already that small gets no extra level. No level is shorter than
    `MIN_LEVEL_EXTENT` (2) pixels along a decimated axis: such an axis keeps its
    factor while the others go on halving. A 1 x 1,000,000 row gets no virtual
    level; a 3 x 1,000,000 one a level of 2 x 500,000, then levels halving the
    long axis alone. Each level is built from the one before it
    (`DecimatedSource` with a `parent`), so a cache reads each stored chunk once
    for all levels. `chunk_size` sets the levels' chunk edge along the
    decimated axes (default: see `DecimatedSource`).

    Except where the chain costs more than it shares: built from the level
    before, a level costs every stored chunk under it — 10^12 for a 10^6 x 10^6
    array of 1-pixel chunks. Where a stored chunk is narrower than the level's
    factor and a chained chunk would cost over twice a directly sampled one,
    the level samples the base directly (`parent=None`): one stored chunk per
    pixel, in chunks small enough that one chunk's inputs stay within
    `DIRECT_CHUNK_INPUTS` and `DIRECT_INPUT_BYTES`. Levels go on past
    `smallest` until a plane costs at most `MAX_BASE_CHUNKS` stored chunks (a
    10^6² array of 1-pixel chunks: 13 levels, the coarsest 245² pixels), which
    caps what the coarsest level may cost.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> base = ArraySource(np.zeros((2000, 1500)), chunks=(512, 512), name="b")
    >>> [level.shape for level in virtual_levels(base)]
    [(2000, 1500), (1000, 750), (500, 375)]
    >>> row = ArraySource(np.zeros((3, 100_000)), chunks=(1, 4096), name="row")
    >>> [level.shape for level in virtual_levels(row)][:4]
    [(3, 100000), (2, 50000), (2, 25000), (2, 12500)]
    >>> virtual_levels(row)[-1].shape, virtual_levels(row)[-1].factors
    ((2, 391), (2, 256))
    """
    rank = len(base.shape)
    decimated = tuple(range(max(0, rank - 2), rank)) if axes is None else axes
    levels: list[ChunkSource] = [base]
    if any(base.shape[a] < MIN_LEVEL_EXTENT for a in decimated):
        return levels  # every level would be 1 pixel along that axis: napari shows none
    parent: DecimatedSource | None = None
    factors = tuple(1 for _ in decimated)
    while any(
        math.ceil(base.shape[a] / f) > smallest for a, f in zip(decimated, factors, strict=True)
    ) or (parent is not None and _plane_cost(parent, decimated) > MAX_BASE_CHUNKS):
        # Halve every axis that stays at least MIN_LEVEL_EXTENT pixels long.
        halved = tuple(
            2 * f if math.ceil(base.shape[a] / (2 * f)) >= MIN_LEVEL_EXTENT else f
            for a, f in zip(decimated, factors, strict=True)
        )
        if halved == factors:
            break  # no axis left to halve
        factors = halved
        chained = (
            None
            if parent is None
            else DecimatedSource(base, factors, decimated, parent=parent, chunk_size=chunk_size)
        )
        sampled = _samples_directly(base, decimated, factors, chained)
        if chained is not None and not sampled:
            parent = chained
        else:
            edge: int | tuple[int, ...] | None = chunk_size
            if sampled and chunk_size is None:
                edge = _direct_edges(base, decimated, factors)
            parent = DecimatedSource(base, factors, decimated, chunk_size=edge)
        levels.append(parent)
    return levels


def _plane_cost(level: DecimatedSource, axes: tuple[int, ...]) -> int:
    """Stored chunks one whole plane of `level` costs (its chunks' count x the first's cost)."""
    counts = [
        -(-int(n) // int(g.chunk_size(0))) if n else 0
        for g, n in zip(level.grid, level.shape, strict=True)
    ]
    return math.prod(counts[a] for a in axes) * level.chunk_cost(tuple(0 for _ in level.shape))


DIRECT_INPUT_BYTES = 64 << 20
"""The stored bytes one chunk of a level sampling the base directly may read."""

DIRECT_CHUNK_INPUTS = 1024
"""Stored chunks one chunk of a level sampling 1-pixel-ish chunks reads (32² pixels in 2-D):
16,384 (128² pixels) held the cache's lock ~0.5 s while a worker gathered them."""


def _samples_directly(
    base: ChunkSource,
    axes: tuple[int, ...],
    factors: tuple[int, ...],
    chained: DecimatedSource | None,
) -> bool:
    """Whether the level of `factors` samples `base` directly rather than being `chained`
    from the level before: where a stored chunk is narrower than the factor along an axis
    (the chain reads every chunk under the level, direct sampling one per pixel) and one
    chunk of the chain would cost more than twice what sampling it directly costs (the
    chain's reads are shared with the finer levels)."""
    if all(_edge(base, axis) >= f for axis, f in zip(axes, factors, strict=True)):
        return False
    if chained is None:
        return True
    origin = tuple(0 for _ in base.shape)
    edges = tuple(int(chained.grid[axis].chunk_size(0)) for axis in axes)
    direct = DecimatedSource(base, factors, axes, chunk_size=edges)
    return chained.chunk_cost(origin) > 2 * direct.chunk_cost(origin)


def _edge(base: ChunkSource, axis: int) -> int:
    return int(base.grid[axis].chunk_size(0)) if base.shape[axis] else 1


def _direct_edges(
    base: ChunkSource, axes: tuple[int, ...], factors: tuple[int, ...]
) -> tuple[int, ...]:
    """The chunk edges of a level sampling `base` directly: one chunk's inputs at most
    `DIRECT_CHUNK_INPUTS` stored chunks and `DIRECT_INPUT_BYTES`.

    Along an axis whose stored chunks are at least the factor wide, a level chunk
    samples one stored chunk (the edge a chained level has); along the others, one stored
    chunk per pixel, the budget shared between them (a 3 x 1,000,000 row of (1, 65,536)
    chunks: level chunks of (2, 32,768), not of 22 x 22 pixels).
    """
    chunk_bytes = base.dtype.itemsize * math.prod(_edge(base, a) for a in range(len(base.shape)))
    inputs = max(1, min(DIRECT_CHUNK_INPUTS, DIRECT_INPUT_BYTES // max(1, chunk_bytes)))
    narrow = [a for a, f in zip(axes, factors, strict=True) if _edge(base, a) < f]
    root: float = inputs ** (1 / max(1, len(narrow)))
    return tuple(
        max(1, int(root + 1e-9))
        if axis in narrow
        else max(_MIN_LEVEL_CHUNK, _edge(base, axis) // f)
        for axis, f in zip(axes, factors, strict=True)
    )
