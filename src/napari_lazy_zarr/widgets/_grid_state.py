"""The chunk map's model: the state of every chunk of one source, as an array of codes.

Qt-free, so it is tested without a display. The grid is kept current from the
cache's event batches by `StateMirror` (O(1) per event, on the thread that
emits); the UI thread applies the batched updates with one NumPy assignment
and never walks the cache.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.core.keys import chunk_key, grid_shape

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Mapping, Sequence

    from napari_lazy_zarr.core import ChunkKey, ChunkSource

T = TypeVar("T")

__all__ = [
    "MARKER_COLORS",
    "MAX_CELLS",
    "READY_CODE",
    "STATES",
    "STATE_CODES",
    "STATE_COLORS",
    "ChunkGridState",
    "Shown",
    "cell_image",
]

STATES: Final = tuple(ChunkState)
STATE_CODES: Final = {state: code for code, state in enumerate(STATES)}
"""Each state's code in the grid array (NEW is 0: chunks the cache has never seen)."""
READY_CODE: Final = STATE_CODES[ChunkState.READY]

STATE_COLORS: Final[dict[ChunkState, tuple[int, int, int]]] = {
    # NEW is a mid grey, well apart from the map's near-black background, so the
    # extent of a grid nobody has looked at yet shows.
    ChunkState.NEW: (112, 118, 132),
    ChunkState.QUEUED: (86, 132, 230),
    ChunkState.LOADING: (245, 200, 50),
    ChunkState.READY: (70, 190, 110),
    ChunkState.FAILED: (230, 60, 60),
    ChunkState.EVICTED: (160, 120, 200),
}
"""The legend: one colour per state (RGB)."""


class Shown(IntEnum):
    """What the displayed view shows for one chunk of its level."""

    OUTSIDE = 0
    """Not in the view."""
    FINAL = 1
    """The chunk's own values."""
    PROVISIONAL = 2
    """A coarser level's values, upsampled, until the chunk lands."""
    FILL = 3
    """The fill value: nothing resident at this or any coarser level yet."""
    FAILED = 4
    """The fill value, because the chunk failed (never a stand-in: a failure shows)."""


MARKER_COLORS: Final[dict[Shown, tuple[int, int, int] | None]] = {
    Shown.OUTSIDE: None,
    Shown.FINAL: None,
    Shown.PROVISIONAL: (250, 250, 250),
    Shown.FILL: (0, 0, 0),
    Shown.FAILED: (0, 0, 0),
}
"""The mark in the centre of a chunk of the view that is not final."""

_MARK: Final = 3  # image pixels per chunk side when marks are drawn (the centre one is the mark)


def _patterns() -> np.ndarray[Any, np.dtype[np.uint8]]:
    """(shown * states + state) -> a 3x3 RGB cell: the state's colour, the mark in the centre."""
    patterns = np.zeros((len(Shown) * len(STATES), _MARK, _MARK, 3), dtype=np.uint8)
    for shown in Shown:
        for state in STATES:
            cell = patterns[shown * len(STATES) + STATE_CODES[state]]
            cell[...] = STATE_COLORS[state]
            mark = MARKER_COLORS[shown]
            if mark is not None:
                cell[_MARK // 2, _MARK // 2] = mark
    return patterns


_PATTERNS: Final = _patterns()
_PATTERNS_BGRA: Final = np.concatenate(
    [_PATTERNS[..., ::-1], np.full((*_PATTERNS.shape[:-1], 1), 255, np.uint8)], axis=-1
)
_LUT: Final = np.array([STATE_COLORS[state] for state in STATES], dtype=np.float32)
_LUT8: Final = _LUT.astype(np.uint8)
_LUT8_BGRA: Final = np.concatenate(
    [_LUT8[:, ::-1], np.full((len(STATES), 1), 255, np.uint8)], axis=-1
)


MAX_CELLS: Final = 1 << 22
"""Cells a chunk map keeps and draws at most (4 MiB of codes): a larger grid (10^12 chunks
of a 10^6² store of 1-pixel chunks) is drawn in aggregated cells of several chunks each,
each showing the state its chunks last reached."""


def _blocks(chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Chunks per cell along each axis so that at most `MAX_CELLS` cells cover `chunks`."""
    block = [1] * len(chunks)

    def cells() -> int:
        return math.prod(-(-n // b) for n, b in zip(chunks, block, strict=True))

    while cells() > MAX_CELLS:
        widest = max(range(len(chunks)), key=lambda a: -(-chunks[a] // block[a]))
        block[widest] *= 2
    return tuple(block)


class ChunkGridState:
    """The state of every chunk of `source`'s read grid: `codes[coords]` is a state code.

    Only the UI thread writes `codes` (`update`); `flat_of` may be called from
    any thread (it only caches arithmetic).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkRef
    >>> source = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="s")
    >>> grid = ChunkGridState(source)
    >>> key = ChunkRef.of(source, (1, 0)).key
    >>> grid.coords_of(key), grid.flat_of(key)
    ((1, 0), 2)
    >>> grid.update({grid.flat_of(key): STATE_CODES[ChunkState.READY]})
    >>> grid.state_at((1, 0)).name, grid.counts()[ChunkState.NEW]
    ('READY', 3)
    """

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self.identity = source.identity
        self.chunks = grid_shape(source)
        """The source's grid shape (chunks per axis); `shape` is the drawn cells'."""
        self.block = _blocks(self.chunks)
        """Chunks per drawn cell along each axis: 1 unless the grid has over `MAX_CELLS`."""
        self.shape = tuple(-(-n // b) for n, b in zip(self.chunks, self.block, strict=True))
        self.codes = np.zeros(self.shape, dtype=np.uint8)
        self._grid = source.grid
        self._strides = tuple(
            int(np.prod(self.shape[axis + 1 :], dtype=np.int64)) for axis in range(len(self.shape))
        )
        # Cell start offsets along each axis, for vectorized index -> cell lookups.
        self.starts = tuple(
            np.array([int(g.chunk_offset(i * b)) for i in range(n)], dtype=np.int64)
            for g, n, b in zip(self._grid, self.shape, self.block, strict=True)
        )
        self._flat: dict[ChunkKey, int] = {}
        self._memo: dict[Hashable, tuple[int, Any]] = {}
        self.version = 0
        """Increases with every `update` that changed a code."""

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, remembered under `key` until the codes change (the UI thread).

        Examples
        --------
        >>> from napari_lazy_zarr.core import ArraySource
        >>> grid = ChunkGridState(ArraySource(np.zeros(4), chunks=(2,), name="m"))
        >>> grid.memo("ready", lambda: int((grid.codes == READY_CODE).sum()))
        0
        >>> grid.update({1: READY_CODE})
        >>> grid.memo("ready", lambda: int((grid.codes == READY_CODE).sum()))
        1
        """
        found = self._memo.get(key)
        if found is not None and found[0] == self.version:
            value: T = found[1]
            return value
        value = compute()
        if len(self._memo) >= 32:
            self._memo.clear()
        self._memo[key] = (self.version, value)
        return value

    @property
    def size(self) -> int:
        return int(self.codes.size)

    def flat_of(self, key: ChunkKey) -> int:
        """The flat index of a key of this source (any thread)."""
        flat = self._flat.get(key)
        if flat is None:
            flat = sum(
                int(g.index_to_chunk(lo)) // b * stride
                for g, lo, b, stride in zip(
                    self._grid, key.inclusive_min, self.block, self._strides, strict=True
                )
            )
            self._flat[key] = flat
        return flat

    def coords_of(self, key: ChunkKey) -> tuple[int, ...] | None:
        """The grid coordinates of a key of this source, or None for another source's key."""
        if key.source != self.identity:
            return None
        return tuple(int(c) for c in np.unravel_index(self.flat_of(key), self.shape))

    def key_at(self, coords: Sequence[int]) -> ChunkKey:
        """The key of the chunk at cell `coords` (an aggregated cell's first chunk)."""
        return chunk_key(self.source, [c * b for c, b in zip(coords, self.block, strict=True)])

    def state_at(self, coords: Sequence[int]) -> ChunkState:
        return STATES[int(self.codes[tuple(coords)])]

    def update(self, codes: Mapping[int, int]) -> None:
        """Set the codes of flat indices (the UI thread): one NumPy assignment."""
        if not codes:
            return
        flat = np.fromiter(codes.keys(), dtype=np.int64, count=len(codes))
        values = np.fromiter(codes.values(), dtype=np.uint8, count=len(codes))
        self.codes.reshape(-1)[flat] = values
        self.version += 1

    def clear(self) -> None:
        """Every chunk NEW again (before a fresh snapshot)."""
        self.codes.fill(0)
        self.version += 1

    def counts(self) -> dict[ChunkState, int]:
        """How many chunks of this level are in each state."""
        totals = np.bincount(self.codes.ravel(), minlength=len(STATES))
        return {state: int(totals[code]) for state, code in STATE_CODES.items()}

    def plane(self, index: Sequence[int | None]) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """A 2D slice of the codes: `None` marks the two axes kept."""
        selection = tuple(slice(None) if i is None else int(i) for i in index)
        return self.codes[selection]

    def chunk_range(self, axis: int, lo: int, hi: int) -> tuple[int, int]:
        """The chunks `[first, last + 1)` along `axis` that cells `[lo, hi)` touch."""
        starts = self.starts[axis]
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, max(lo, hi - 1), side="right")) - 1
        return max(first, 0), max(last, 0) + 1


def cell_image(
    codes: np.ndarray[Any, np.dtype[np.uint8]],
    shown: np.ndarray[Any, np.dtype[np.uint8]] | None,
    max_size: tuple[int, int],
    *,
    bgra: bool = False,
) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], int, tuple[int, int]]:
    """An RGB image of a 2D code plane, and how it maps to chunks.

    Returns ``(image, pixels_per_chunk, chunks_per_pixel)``. With `shown`
    (`Shown` codes, same shape) every chunk is a 3x3 block in its state's colour
    with the mark of what the view shows in the centre (the caller draws marks
    only where cells are large enough to see them). Without, chunks are one
    pixel each, or — when there are more chunks than `max_size` (rows, columns)
    has pixels — aggregated into blocks coloured by the mean of their chunks'
    colours, so the mix of states shows. With `bgra`, pixels are 32-bit
    blue-green-red-alpha (Qt's fastest format to scale and draw).

    Examples
    --------
    >>> codes = np.array([[0, 3]], dtype=np.uint8)
    >>> shown = np.array([[Shown.FILL, Shown.FINAL]], dtype=np.uint8)
    >>> image, per_chunk, block = cell_image(codes, shown, (300, 300))
    >>> image.shape, per_chunk, block
    ((3, 6, 3), 3, (1, 1))
    >>> image[1, 1].tolist(), image[1, 4].tolist()  # a fill-value mark; a final chunk
    ([0, 0, 0], [70, 190, 110])
    >>> cell_image(codes, None, (300, 300), bgra=True)[0][0, 1].tolist()
    [110, 190, 70, 255]
    """
    rows, cols = codes.shape
    if shown is not None:
        combined = shown.astype(np.intp) * len(STATES) + codes
        cells = (_PATTERNS_BGRA if bgra else _PATTERNS)[combined]  # rows, cols, 3, 3, channels
        image = cells.transpose(0, 2, 1, 3, 4).reshape(rows * _MARK, cols * _MARK, -1)
        return image, _MARK, (1, 1)
    by = max(1, -(-rows // max(1, max_size[0])))
    bx = max(1, -(-cols // max(1, max_size[1])))
    if by == 1 and bx == 1:
        return (_LUT8_BGRA if bgra else _LUT8)[codes], 1, (1, 1)
    rgb = _LUT[codes]
    padded = np.zeros((-(-rows // by) * by, -(-cols // bx) * bx, 3), dtype=np.float32)
    weights = np.zeros(padded.shape[:2], dtype=np.float32)
    padded[:rows, :cols] = rgb
    weights[:rows, :cols] = 1
    shape = (padded.shape[0] // by, by, padded.shape[1] // bx, bx)
    sums = padded.reshape(*shape, 3).sum(axis=(1, 3))
    counts = weights.reshape(shape).sum(axis=(1, 3))[..., None]
    mean = (sums / np.maximum(counts, 1)).astype(np.uint8)
    if bgra:
        alpha = np.full((*mean.shape[:-1], 1), 255, np.uint8)
        mean = np.concatenate([mean[..., ::-1], alpha], axis=-1)
    return mean, 1, (by, bx)
