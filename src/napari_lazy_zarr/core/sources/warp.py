"""Images warped by displacement and coordinate fields (OME-Zarr 0.6, RFC-5), chunk by chunk.

A `WarpSource` is a `ChunkSource` whose chunks are computed: each output
pixel's centre is carried by a `PointMap` (matrices and vector fields, in
order) to a position in the input image's pixel grid, and the input is
resampled there with ``scipy.ndimage.map_coordinates``. Per output chunk it
reads the field chunks the points need and the input chunks under the
points' bounding box, directly through their sources' `read_chunk` (like
every composite: a worker never waits on the cache), within a byte budget
checked *before* anything of the input is read: a chunk whose warp would
read more than `WarpSource.budget` bytes fails with a `ChunkReadError`
saying so, and is not computed. The chunk is then cached like any other.

A vector field maps a point ``x`` of its input coordinate system to
``x + d(x)`` (``displacements``) or ``c(x)`` (``coordinates``): ``d``
(``c``) is looked up in the field's array at ``x`` mapped into the array's
index space by the inverse of the field level's scale and translation,
interpolated as the field declares (``nearest``, ``linear``, ``cubic``:
``map_coordinates`` orders 0, 1 and 3; linear by default), and clamped to
the field's edge outside its domain. Rendering needs the map from the shown
system back to the image: where a field must be followed backwards
(`FieldStep.inverted`), its inverse is found by fixed-point iteration,
``x <- y - d(x)`` from ``x = y``, until no point moves more than
`INVERSE_TOLERANCE` field pixels (at most `INVERSE_ITERATIONS` times): it
converges where the field's Jacobian has norm below 1, which registration
fields have. A field given in the direction rendering needs (the spec's
"fixed to moving" form, or a bijection's inverse) is applied as it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.keys import CompositeIdentity, box_text, chunk_bounds
from napari_lazy_zarr.core.sources.protocol import SourceFields, fill_value_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "DEFAULT_WARP_BUDGET",
    "INVERSE_ITERATIONS",
    "INVERSE_TOLERANCE",
    "FieldStep",
    "Linear",
    "PointMap",
    "VectorField",
    "WarpSource",
]

type Interpolation = Literal["nearest", "linear", "cubic"]
type FieldKind = Literal["displacements", "coordinates"]

_ORDERS: Final = {"nearest": 0, "linear": 1, "cubic": 3}
INVERSE_ITERATIONS: Final = 64
"""Fixed-point iterations at most when a field is inverted."""
INVERSE_TOLERANCE: Final = 1e-4
"""An inverted field's points stop when none moves more than this (in field pixels)."""
DEFAULT_WARP_BUDGET: Final = 256 << 20
"""Bytes of input and field chunks one output chunk may read (beyond: the chunk FAILS)."""


@dataclass(frozen=True, slots=True, eq=False)
class Linear:
    """An affine map of points: ``y = matrix[:, :-1] @ x + matrix[:, -1]`` (M x (N+1)).

    Examples
    --------
    >>> step = Linear(np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]]))
    >>> step.apply(np.array([[1.0], [1.0]]))
    array([[3.],
           [3.]])
    """

    matrix: np.ndarray[Any, Any]

    def apply(self, points: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """`points` (N x k: one row per axis, contiguous for fast reductions) mapped (M x k)."""
        result: np.ndarray[Any, Any] = self.matrix[:, :-1] @ points + self.matrix[:, -1:]
        return result

    def key(self) -> tuple[Any, ...]:
        return ("linear", tuple(tuple(float(v) for v in row) for row in self.matrix))


@dataclass(frozen=True, slots=True, eq=False)
class VectorField:
    """A displacement or coordinate field: its levels and how their indices sit in space.

    Attributes
    ----------
    name
        Where the field is (its path in the store), for messages.
    kind
        ``"displacements"`` or ``"coordinates"``.
    levels
        The field's arrays, finest first; each has the spatial axes and one
        vector axis (`vector_axis`).
    scales, translations
        Per level, the field array index → field coordinate transform of its
        spatial axes (the level's dataset transform without the vector axis).
    vector_axis
        The axis holding the vector components (in array order).
    interpolation
        How the field is interpolated between its samples.
    """

    name: str
    kind: FieldKind
    levels: tuple[ChunkSource, ...]
    scales: tuple[tuple[float, ...], ...]
    translations: tuple[tuple[float, ...], ...]
    vector_axis: int
    interpolation: Interpolation = "linear"

    @property
    def ndim(self) -> int:
        """The field's spatial dimensions (its points' dimension)."""
        return len(self.levels[0].shape) - 1


@dataclass(frozen=True, slots=True, eq=False)
class FieldStep:
    """A vector field applied to points, forward or (by fixed-point iteration) inverted.

    Attributes
    ----------
    field
        The field.
    inverted
        Follow the field backwards: find ``x`` with ``F(x) = y``.
    level
        The field level to read (a coarser level for a coarser view).
    """

    field: VectorField
    inverted: bool = False
    level: int = 0

    def key(self) -> tuple[Any, ...]:
        return ("field", self.field.name, self.field.kind, self.inverted, self.level)


type Step = Linear | FieldStep


@dataclass(frozen=True, slots=True, eq=False)
class PointMap:
    """Steps applied to points in order; what carries an output pixel to the input image."""

    steps: tuple[Step, ...]

    @property
    def fields(self) -> tuple[FieldStep, ...]:
        """The field steps, in order."""
        return tuple(s for s in self.steps if isinstance(s, FieldStep))

    def key(self) -> tuple[Any, ...]:
        return tuple(step.key() for step in self.steps)


class _Reads:
    """The chunks one output chunk reads, each once, counted against the budget."""

    def __init__(self, budget: int, where: str) -> None:
        self.budget = budget
        self.where = where
        self.used = 0
        self.chunks: dict[tuple[int, tuple[int, ...]], np.ndarray[Any, Any]] = {}

    def region(
        self, source: ChunkSource, lo: Sequence[int], hi: Sequence[int], what: str
    ) -> np.ndarray[Any, Any]:
        """`source[lo:hi]` (clipped to its shape) assembled from its chunks."""
        shape = tuple(int(s) for s in source.shape)
        lo = tuple(max(0, min(int(a), n)) for a, n in zip(lo, shape, strict=True))
        hi = tuple(max(a, min(int(b), n)) for a, b, n in zip(lo, hi, shape, strict=True))
        out = np.empty(tuple(b - a for a, b in zip(lo, hi, strict=True)), source.dtype)
        if out.size == 0:
            return out
        ranges = [
            range(int(g.index_to_chunk(a)), int(g.index_to_chunk(b - 1)) + 1)
            for g, a, b in zip(source.grid, lo, hi, strict=True)
        ]
        todo = [c for c in itertools.product(*ranges) if (id(source), c) not in self.chunks]
        cost = (
            sum(
                int(
                    np.prod(
                        [b - a for a, b in zip(*chunk_bounds(source.grid, c, shape), strict=True)]
                    )
                )
                for c in todo
            )
            * np.dtype(source.dtype).itemsize
        )
        if self.used + cost > self.budget:
            raise ChunkReadError(
                f"{self.where}: warping it needs {self.used + cost:,} bytes of {what} "
                f"({source!r} {box_text(lo, hi)}), over the budget of {self.budget:,} bytes "
                "a warped chunk may read: not computed (the field moves the pixels of one "
                "chunk too far apart to be shown lazily)"
            )
        self.used += cost
        for coords in itertools.product(*ranges):
            key = (id(source), coords)
            if key not in self.chunks:
                self.chunks[key] = source.read_chunk(coords)
            c_lo, c_hi = chunk_bounds(source.grid, coords, shape)
            src = tuple(
                slice(max(a, ca) - ca, min(b, cb) - ca)
                for a, b, ca, cb in zip(lo, hi, c_lo, c_hi, strict=True)
            )
            dst = tuple(
                slice(max(a, ca) - a, min(b, cb) - a)
                for a, b, ca, cb in zip(lo, hi, c_lo, c_hi, strict=True)
            )
            out[dst] = self.chunks[key][src]
        return out


def _field_values(
    step: FieldStep, points: np.ndarray[Any, Any], reads: _Reads
) -> np.ndarray[Any, Any]:
    """The field's vectors at `points` (N x k), interpolated, clamped at its edges (N x k)."""
    from scipy import ndimage

    field = step.field
    if points.shape[1] == 0:
        return np.zeros_like(points)
    level = min(step.level, len(field.levels) - 1)
    source = field.levels[level]
    scale = np.asarray(field.scales[level])[:, None]
    translation = np.asarray(field.translations[level])[:, None]
    index = (points - translation) / scale
    spatial = [a for a in range(len(source.shape)) if a != field.vector_axis]
    extents = np.array([source.shape[a] for a in spatial])
    index = np.clip(index, 0, (extents - 1)[:, None])
    order = _ORDERS[field.interpolation]
    margin = 3 if order == 3 else 1
    lo = np.floor(index.min(axis=1)).astype(int) - margin
    hi = np.ceil(index.max(axis=1)).astype(int) + margin + 1
    box_lo = list(lo)
    box_hi = list(hi)
    box_lo.insert(field.vector_axis, 0)
    box_hi.insert(field.vector_axis, int(source.shape[field.vector_axis]))
    region = reads.region(source, box_lo, box_hi, f"the field {field.name!r}")
    region = np.moveaxis(region.astype(np.float64, copy=False), field.vector_axis, 0)
    local = index - np.maximum(lo, 0)[:, None]
    return np.stack(
        [
            ndimage.map_coordinates(component, local, order=order, mode="nearest")
            for component in region
        ]
    )


def _apply_field(
    step: FieldStep, points: np.ndarray[Any, Any], reads: _Reads
) -> np.ndarray[Any, Any]:
    """`points` carried by one field step (inverted by fixed-point iteration)."""
    field = step.field
    absolute = field.kind == "coordinates"
    if not step.inverted:
        values = _field_values(step, points, reads)
        return values if absolute else points + values
    # x = y - d(x): for coordinates, d(x) = c(x) - x.
    target = points
    current = points.copy()
    spacing = float(np.min(np.abs(field.scales[min(step.level, len(field.levels) - 1)])))
    for _ in range(INVERSE_ITERATIONS):
        values = _field_values(step, current, reads)
        displacement = values - current if absolute else values
        moved = target - displacement
        change = float(np.max(np.abs(moved - current))) if moved.size else 0.0
        current = moved
        if change <= INVERSE_TOLERANCE * spacing:
            break
    return current


def apply_point_map(
    mapping: PointMap, points: np.ndarray[Any, Any], *, budget: int, where: str = "points"
) -> np.ndarray[Any, Any]:
    """`points` (k x N) carried through every step of `mapping` (fields read within `budget`).

    Examples
    --------
    >>> mapping = PointMap((Linear(np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])),))
    >>> apply_point_map(mapping, np.zeros((1, 2)), budget=0)
    array([[2., 0.]])
    """
    reads = _Reads(budget, where)
    rows = np.ascontiguousarray(np.asarray(points, dtype=np.float64).T)
    return _carry(mapping, rows, reads).T


def _carry(mapping: PointMap, points: np.ndarray[Any, Any], reads: _Reads) -> np.ndarray[Any, Any]:
    for step in mapping.steps:
        points = (
            step.apply(points) if isinstance(step, Linear) else _apply_field(step, points, reads)
        )
    return points


class WarpSource(SourceFields):
    """`base` resampled where `mapping` carries each output pixel: a lazily warped image.

    The output has `base`'s shape and chunk grid (or `shape` and `chunks`): its
    pixel ``g`` holds `base` interpolated at ``mapping(g)`` (``order`` 1,
    linear, for images; 0 for labels), `base`'s fill value where that falls
    outside it. See the module for the fields and the budget.

    Parameters
    ----------
    base
        The input image level (store axes).
    mapping
        Output pixel index → input pixel index, in store axes.
    order
        The image's interpolation order (``map_coordinates``).
    budget
        Bytes of input and field chunks one output chunk may read.
    name
        What the warp is, for keys and messages.

    Examples
    --------
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> base = ArraySource(np.arange(16.0).reshape(4, 4), chunks=(2, 2), name="b")
    >>> shift = PointMap((Linear(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])),))
    >>> WarpSource(base, shift, name="down one").read_chunk((0, 0))
    array([[4., 5.],
           [8., 9.]])
    """

    prefetch_ring = 0  # computed: no ring of neighbours computed ahead
    load_reason = "computing"

    def __init__(
        self,
        base: ChunkSource,
        mapping: PointMap,
        *,
        order: int = 1,
        budget: int = DEFAULT_WARP_BUDGET,
        name: str = "warp",
    ) -> None:
        self._base = base
        self._mapping = mapping
        self._order = int(order)
        self.budget = int(budget)
        self._shape = tuple(int(s) for s in base.shape)
        self._grid = base.grid
        self._dtype = np.dtype(base.dtype)
        self._fill_value = fill_value_of(base.fill_value, self._dtype)
        members = (base.identity, *(f.field.levels[0].identity for f in mapping.fields))
        self._identity = CompositeIdentity(
            "warp",
            (("name", name), ("order", self._order), ("map", mapping.key())),
            members,
        )
        self._name = name

    @property
    def base(self) -> ChunkSource:
        """The image warped."""
        return self._base

    @property
    def mapping(self) -> PointMap:
        """Output pixel → input pixel."""
        return self._mapping

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        from scipy import ndimage

        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        where = f"{self._name}: chunk {box_text(lo, hi)}"
        grids = np.meshgrid(
            *[np.arange(a, b, dtype=np.float64) for a, b in zip(lo, hi, strict=True)],
            indexing="ij",
        )
        shape = grids[0].shape
        points = np.stack([g.ravel() for g in grids])  # one row per axis
        reads = _Reads(self.budget, where)
        found = _carry(self._mapping, points, reads)
        extents = np.array(self._shape)[:, None]
        # A pixel centre mapped outside the input's pixels ([-0.5, n - 0.5]) shows the fill value.
        inside = np.all((found >= -0.5) & (found <= extents - 0.5), axis=0)
        out = np.full(found.shape[1], self._fill_value, dtype=self._dtype)
        if inside.any():
            chosen = found[:, inside]
            margin = 1
            box_lo = np.maximum(np.floor(chosen.min(axis=1)).astype(int) - margin, 0)
            box_hi = np.minimum(
                np.ceil(chosen.max(axis=1)).astype(int) + margin + 1, extents[:, 0]
            )
            region = reads.region(self._base, box_lo, box_hi, "the image")
            values = ndimage.map_coordinates(
                region.astype(np.float64, copy=False),
                chosen - box_lo[:, None],
                order=self._order,
                mode="nearest",
                prefilter=self._order > 1,
            )
            out[inside] = _to_dtype(values, self._dtype)
        return out.reshape(shape)

    def __repr__(self) -> str:
        return f"WarpSource({self._base!r}, {self._name})"


def _to_dtype(values: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Interpolated values in `dtype`: integers rounded and clipped to its range."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    if dtype.kind == "b":
        return values >= 0.5
    return values.astype(dtype)
