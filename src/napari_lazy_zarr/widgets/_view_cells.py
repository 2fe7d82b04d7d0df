"""What the displayed view shows, chunk by chunk, and which levels and planes are resident.

Qt-free. `ViewCells.of` turns a controller's `ViewFrame` into one `Shown` code
per chunk of the view (run on the controller's dispatch thread, where
`view_read` is emitted, so the UI thread gets a ready array). The other
functions are NumPy over `ChunkGridState` codes, for the UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr.core.viewport import ViewRequest, level_index
from napari_lazy_zarr.widgets._grid_state import READY_CODE, STATE_CODES, Shown

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from napari_lazy_zarr.core import ChunkKey
    from napari_lazy_zarr.core.viewport import ViewFrame
    from napari_lazy_zarr.widgets._grid_state import ChunkGridState

__all__ = ["PlaneResidency", "ViewCells", "level_coverage", "plane_residency", "stand_in_levels"]

_FAILED_CODE = STATE_CODES[next(s for s in STATE_CODES if s.name == "FAILED")]


@dataclass(frozen=True, slots=True)
class ViewCells:
    """The chunks of one read of the displayed view, and what it showed for each.

    Attributes
    ----------
    request
        The read (level, box over the store axes, displayed axes).
    start
        The view's first chunk along each store axis (its block of chunks starts here).
    shown
        A `Shown` code per chunk of the block (shape: the block's chunks per axis),
        as the read returned it.
    level_shape
        The shape of the level's array.

    Building one costs Python work per chunk whose status changed since the
    previous read of the same view (`of` with `previous`), not per chunk of
    the view: napari reads a loading view again and again.
    """

    request: ViewRequest
    start: tuple[int, ...]
    shown: np.ndarray[Any, np.dtype[np.uint8]]
    level_shape: tuple[int, ...]
    sets: tuple[frozenset[ChunkKey], ...] = ()
    """The read's missing, provisional and failed keys (to compare the next read with)."""
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def level(self) -> int:
        return self.request.level

    @property
    def stop(self) -> tuple[int, ...]:
        return tuple(s + n for s, n in zip(self.start, self.shown.shape, strict=True))

    @property
    def block(self) -> tuple[slice, ...]:
        """The view's chunks as a selection of the level's grid."""
        return tuple(slice(a, b) for a, b in zip(self.start, self.stop, strict=True))

    @classmethod
    def of(
        cls, result: ViewFrame, grid: ChunkGridState, previous: ViewCells | None = None
    ) -> ViewCells:
        """The view's chunks and what the read showed for each (any thread).

        With `previous`, an earlier read's cells: when it read the same view,
        only the chunks whose status differs are looked at.

        Examples
        --------
        >>> import numpy as np
        >>> from napari_lazy_zarr.core import ArraySource, ChunkRef
        >>> from napari_lazy_zarr.core.viewport import ViewRequest, ViewFrame
        >>> from napari_lazy_zarr.widgets._grid_state import ChunkGridState
        >>> source = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="s")
        >>> grid = ChunkGridState(source)
        >>> keys = tuple(ChunkRef.of(source, (r, c)).key for r in range(2) for c in range(2))
        >>> request = ViewRequest(0, ((0, 8), (2, 8)), (0, 1), 1)
        >>> result = ViewFrame(request, np.zeros(0), keys, frozenset(keys[1:]),
        ...                     frozenset(keys[2:3]), frozenset(keys[3:]))
        >>> cells = ViewCells.of(result, grid)
        >>> [Shown(code).name for code in cells.shown.ravel()]
        ['FINAL', 'FILL', 'PROVISIONAL', 'FAILED']
        >>> later = ViewFrame(request, np.zeros(0), keys, frozenset(keys[3:]), frozenset(),
        ...                    frozenset(keys[3:]))
        >>> [Shown(code).name for code in ViewCells.of(later, grid, cells).shown.ravel()]
        ['FINAL', 'FINAL', 'FINAL', 'FAILED']
        """
        request = result.request
        sets = (result.missing, result.provisional, result.failed)
        if (
            previous is not None
            and previous.sets
            and previous.request.same_view(request)
            and previous.level_shape == grid.source.shape
        ):
            changed: set[ChunkKey] = set()
            for now, before in zip(sets, previous.sets, strict=True):
                if now is not before:
                    changed.update(now.symmetric_difference(before))
            shown = previous.shown.copy() if changed else previous.shown
            start = previous.start
            for code, changed_keys in _codes(changed, sets).items():
                where = _relative(changed_keys, grid, start, shown.shape)
                if where is not None:
                    shown[where] = code
            return cls(request, start, shown, grid.source.shape, sets)
        first: list[int] = []
        stop: list[int] = []
        for axis, (lo, hi) in enumerate(request.box):
            a, b = grid.chunk_range(axis, lo, hi)
            first.append(a)
            stop.append(b)
        shown = np.full([b - a for a, b in zip(first, stop, strict=True)], Shown.FINAL, np.uint8)
        for keys, code in (
            (result.missing, Shown.FILL),
            (result.provisional, Shown.PROVISIONAL),
            (result.failed, Shown.FAILED),
        ):
            where = _relative(keys, grid, first, shown.shape)
            if where is not None:
                shown[where] = code
        return cls(request, tuple(first), shown, grid.source.shape, sets)

    @classmethod
    def whole_plane(cls, grid: ChunkGridState, level: int, like: ViewCells | None) -> ViewCells:
        """The whole plane of a level, as a read of it shows with nothing to stand in.

        The plane is the one `like` (a read at another level) shows, with its
        displayed axes; each chunk shows the fill value until READY (`shown_now`).

        Examples
        --------
        >>> import numpy as np
        >>> from napari_lazy_zarr.core import ArraySource
        >>> from napari_lazy_zarr.widgets._grid_state import ChunkGridState
        >>> grid = ChunkGridState(ArraySource(np.zeros((3, 8, 8)), chunks=(1, 4, 4), name="c"))
        >>> cells = ViewCells.whole_plane(grid, 2, None)
        >>> cells.request.box, cells.shown.shape
        (((0, 1), (0, 8), (0, 8)), (1, 2, 2))
        """
        shape = grid.source.shape
        displayed = like.request.displayed if like is not None else tuple(range(len(shape)))[-2:]
        box: list[tuple[int, int]] = []
        for axis, extent in enumerate(shape):
            if axis in displayed:
                box.append((0, extent))
            elif like is None:
                box.append((0, 1))
            else:
                lo, hi = like.request.box[axis]
                first, _ = _level_range(lo, hi, like.level_shape[axis], extent)
                box.append((first, first + 1))
        start, stop = [], []
        for axis, (lo, hi) in enumerate(box):
            first, end = grid.chunk_range(axis, lo, hi)
            start.append(first)
            stop.append(end)
        request = ViewRequest(level, tuple(box), tuple(displayed), 0, "thumbnail")
        shown = np.full([b - a for a, b in zip(start, stop, strict=True)], Shown.FILL, np.uint8)
        return cls(request, tuple(start), shown, shape)

    def shown_now(self, grid: ChunkGridState) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """What the view shows now, given the current states of its level's `grid`.

        A chunk that landed since the read was copied into the buffer the viewer
        holds (final); one that failed since shows the fill value. Computed once
        per version of the grid.
        """
        memo = self._memo.get("shown")
        if memo is not None and memo[0] is grid and memo[1] == grid.version:
            known: np.ndarray[Any, np.dtype[np.uint8]] = memo[2]
            return known
        block = grid.codes[self.block]
        shown = np.where(block == READY_CODE, np.uint8(Shown.FINAL), self.shown)
        result: np.ndarray[Any, np.dtype[np.uint8]] = np.where(
            block == _FAILED_CODE, np.uint8(Shown.FAILED), shown
        ).astype(np.uint8)
        self._memo["shown"] = (grid, grid.version, result)
        return result


def _codes(
    keys: set[ChunkKey], sets: tuple[frozenset[ChunkKey], ...]
) -> dict[Shown, list[ChunkKey]]:
    """`keys` sorted by what a read with these (missing, provisional, failed) sets shows."""
    missing, provisional, failed = sets
    codes: dict[Shown, list[ChunkKey]] = {}
    for key in keys:
        code = (
            Shown.FAILED
            if key in failed
            else Shown.PROVISIONAL
            if key in provisional
            else Shown.FILL
            if key in missing
            else Shown.FINAL
        )
        codes.setdefault(code, []).append(key)
    return codes


def _relative(
    keys: Collection[ChunkKey],
    grid: ChunkGridState,
    start: Sequence[int],
    shape: tuple[int, ...],
) -> tuple[np.ndarray[Any, Any], ...] | None:
    if not keys:
        return None
    flat = np.fromiter((grid.flat_of(k) for k in keys), dtype=np.int64, count=len(keys))
    coords = np.unravel_index(flat, grid.shape)
    relative = tuple(c - s for c, s in zip(coords, start, strict=True))
    inside = np.ones(len(flat), dtype=bool)
    for axis, r in enumerate(relative):
        inside &= (r >= 0) & (r < shape[axis])
    return tuple(r[inside] for r in relative)


def _level_range(lo: int, hi: int, extent: int, other: int) -> tuple[int, int]:
    """Cells `[lo, hi)` of an axis of `extent` cells, at a level where it has `other`."""
    if other == extent:
        return lo, hi
    a = int(np.floor(lo * other / extent))
    b = int(np.ceil(hi * other / extent))
    return min(a, other - 1), max(min(b, other), a + 1)


def level_coverage(
    request: ViewRequest, grids: Sequence[ChunkGridState | None]
) -> list[float | None]:
    """For each level, the share of the chunks covering the view's region that are READY.

    The region is the view's box at its level, scaled to each level. None for a
    level without a grid.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource
    >>> from napari_lazy_zarr.core.viewport import ViewRequest
    >>> from napari_lazy_zarr.widgets._grid_state import ChunkGridState
    >>> fine = ChunkGridState(ArraySource(np.zeros((16, 16)), chunks=(4, 4), name="0"))
    >>> coarse = ChunkGridState(ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="1"))
    >>> coarse.codes[0, 0] = READY_CODE
    >>> level_coverage(ViewRequest(0, ((0, 8), (0, 8)), (0, 1), 1), [fine, coarse])
    [0.0, 1.0]
    """
    fine = grids[request.level]
    if fine is None:
        return [None] * len(grids)
    shape = fine.source.shape
    coverage: list[float | None] = []
    for grid in grids:
        if grid is None:
            coverage.append(None)
            continue

        def share(grid: ChunkGridState = grid) -> float:
            block = []
            for axis, (lo, hi) in enumerate(request.box):
                a, b = _level_range(lo, hi, shape[axis], grid.source.shape[axis])
                first, end = grid.chunk_range(axis, a, b)
                block.append(slice(first, end))
            codes = grid.codes[tuple(block)]
            return float(np.count_nonzero(codes == READY_CODE)) / max(codes.size, 1)

        coverage.append(grid.memo(("coverage", shape, request.box), share))
    return coverage


def stand_in_levels(
    cells: ViewCells, grids: Sequence[ChunkGridState | None]
) -> np.ndarray[Any, np.dtype[np.int8]]:
    """Per chunk of the view: the nearest coarser level with a READY chunk under it, or -1.

    That is the level a provisional chunk's stand-in comes from (the
    controller takes, cell by cell, the nearest coarser level resident).
    """
    levels = np.full(cells.shown.shape, -1, dtype=np.int8)
    fine = grids[cells.level]
    if fine is None:
        return levels
    todo = cells.shown == Shown.PROVISIONAL
    for level in range(cells.level + 1, len(grids)):
        coarse = grids[level]
        if coarse is None or not todo.any():
            continue

        def under(coarse: ChunkGridState = coarse) -> np.ndarray[Any, np.dtype[np.bool_]]:
            """Whether the coarse chunk under each chunk's first cell is READY."""
            index = []
            for axis, (a, b) in enumerate(zip(cells.start, cells.stop, strict=True)):
                first_cells = fine.starts[axis][a:b]
                cell = level_index(first_cells, fine.source.shape[axis], coarse.source.shape[axis])
                index.append(np.searchsorted(coarse.starts[axis], cell, side="right") - 1)
            ready: np.ndarray[Any, np.dtype[np.bool_]] = coarse.codes[np.ix_(*index)] == READY_CODE
            return ready

        # Coarser levels rarely change while a view loads: remembered per version.
        resident = coarse.memo(("under", fine.identity, cells.start, cells.stop), under)
        found = todo & resident
        levels[found] = level
        todo &= ~found
    return levels


@dataclass(frozen=True, slots=True)
class PlaneResidency:
    """Residency along one store axis the view does not display (z, t, channel)."""

    axis: int
    fractions: np.ndarray[Any, np.dtype[np.float64]]
    """Per chunk along the axis: the share of the view's chunks READY at that position."""
    current: int
    """The chunk the view is in."""
    starts: np.ndarray[Any, np.dtype[np.int64]]
    """The first plane of each chunk along the axis."""


def plane_residency(
    cells: ViewCells, grid: ChunkGridState, axes: Sequence[int]
) -> list[PlaneResidency]:
    """For each store axis in `axes` (not displayed), which chunks along it are resident.

    The view's chunks on the other axes are counted at each position along the axis.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource
    >>> from napari_lazy_zarr.core.viewport import ViewRequest
    >>> from napari_lazy_zarr.widgets._grid_state import ChunkGridState
    >>> grid = ChunkGridState(ArraySource(np.zeros((3, 8, 8)), chunks=(1, 4, 4), name="v"))
    >>> grid.codes[2] = READY_CODE  # the whole plane z=2
    >>> grid.codes[1, 0, 0] = READY_CODE  # a quarter of z=1
    >>> cells = ViewCells(ViewRequest(0, ((1, 2), (0, 8), (0, 8)), (1, 2), 1), (1, 0, 0),
    ...                   np.ones((1, 2, 2), np.uint8), (3, 8, 8))
    >>> (bars,) = plane_residency(cells, grid, [0])
    >>> bars.axis, bars.fractions.tolist(), bars.current
    (0, [0.0, 0.25, 1.0], 1)
    """
    found = []
    for axis in axes:
        selection: list[slice | int] = []
        for other in range(len(grid.shape)):
            if other == axis:
                selection.append(slice(None))
            elif other not in axes:
                selection.append(slice(cells.start[other], cells.stop[other]))
            else:
                selection.append(cells.start[other])
        codes = grid.codes[tuple(selection)]
        # The axis kept in `codes` is at its rank among the kept axes.
        position = sum(1 for other in range(axis) if other not in axes)
        ready = np.moveaxis(codes == READY_CODE, position, 0).reshape(grid.shape[axis], -1)
        fractions = ready.mean(axis=1) if ready.shape[1] else np.zeros(grid.shape[axis])
        found.append(PlaneResidency(axis, fractions, cells.start[axis], grid.starts[axis]))
    return found
