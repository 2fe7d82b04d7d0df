"""The chunk map's model: the state of every chunk of one level, kept current from events.

Qt-free, so it is tested without a display. The grid of a level with 65,536
or more chunks is an array of state codes updated per event (O(1) each), not
rebuilt from the cache on every repaint.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.core.source import chunk_key, grid_shape

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from napari_lazy_zarr.core import ChunkCache, ChunkEvent, ChunkKey, ChunkSource

__all__ = ["STATE_CODES", "STATE_COLORS", "ChunkGridState"]

STATE_CODES: Final = {state: code for code, state in enumerate(ChunkState)}
"""Each state's code in the grid array (NEW is 0: chunks the cache has never seen)."""

STATE_COLORS: Final[dict[ChunkState, tuple[int, int, int]]] = {
    ChunkState.NEW: (58, 62, 72),
    ChunkState.QUEUED: (96, 125, 190),
    ChunkState.LOADING: (240, 200, 60),
    ChunkState.READY: (70, 190, 110),
    ChunkState.FAILED: (225, 60, 60),
    ChunkState.EVICTED: (130, 110, 160),
}
"""The legend: one colour per state (RGB)."""

_LUT: Final = np.array([STATE_COLORS[state] for state in ChunkState], dtype=np.float32)


class ChunkGridState:
    """States of all chunks of `source`'s grid, updated from the cache's event batches.

    `on_events` may be called from any thread (it only queues); `apply` runs
    on the thread that reads the grid (the UI thread) and reports whether
    anything changed.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, InlineExecutor
    >>> source = ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="s")
    >>> cache = ChunkCache(1 << 20, executor=InlineExecutor())
    >>> grid = ChunkGridState(cache, source)
    >>> cache.request([ChunkRef.of(source, (1, 0))]).release()
    >>> grid.apply()
    True
    >>> grid.state_at((1, 0)).name
    'READY'
    >>> grid.close(); cache.close()
    """

    def __init__(self, cache: ChunkCache, source: ChunkSource) -> None:
        self.cache = cache
        self.source = source
        self.shape = grid_shape(source)
        self._identity = source.identity
        self._grid = source.grid
        self.codes = np.zeros(self.shape, dtype=np.uint8)
        self._pending: deque[tuple[ChunkEvent, ...]] = deque()
        self._lock = threading.Lock()
        self.events_applied = 0
        cache.state_changed.connect(self.on_events)
        for key, state in cache.states().items():
            self._set(key, state)

    def close(self) -> None:
        """Stop listening to the cache (idempotent)."""
        self.cache.state_changed.disconnect(self.on_events)

    def on_events(self, events: tuple[ChunkEvent, ...]) -> None:
        """Queue a batch of events (any thread)."""
        with self._lock:
            self._pending.append(events)

    def apply(self) -> bool:
        """Apply the queued events to the grid (the reading thread); True if any applied."""
        with self._lock:
            batches = list(self._pending)
            self._pending.clear()
        changed = False
        for events in batches:
            for event in events:
                if event.key.source == self._identity:
                    self._set(event.key, event.current)
                    changed = True
        return changed

    def _set(self, key: ChunkKey, state: ChunkState) -> None:
        coords = self.coords_of(key)
        if coords is not None:
            self.codes[coords] = STATE_CODES[state]
            self.events_applied += 1

    def coords_of(self, key: ChunkKey) -> tuple[int, ...] | None:
        """The grid coordinates of a key of this source, or None for another source's key."""
        if key.source != self._identity:
            return None
        return tuple(
            int(g.index_to_chunk(lo)) for g, lo in zip(self._grid, key.inclusive_min, strict=True)
        )

    def key_at(self, coords: Sequence[int]) -> ChunkKey:
        return chunk_key(self.source, coords)

    def state_at(self, coords: Sequence[int]) -> ChunkState:
        return list(ChunkState)[int(self.codes[tuple(coords)])]

    def counts(self) -> dict[ChunkState, int]:
        """How many chunks of this level are in each state."""
        totals = np.bincount(self.codes.ravel(), minlength=len(ChunkState))
        return {state: int(totals[code]) for state, code in STATE_CODES.items()}

    def plane(self, index: Sequence[int | None]) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """A 2D slice of the codes: `None` marks the two displayed axes."""
        selection = tuple(slice(None) if i is None else int(i) for i in index)
        return self.codes[selection]


def rgb_blocks(
    codes: np.ndarray[Any, np.dtype[np.uint8]], max_size: tuple[int, int]
) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], tuple[int, int]]:
    """An RGB image of a 2D code plane, at most `max_size` pixels (rows, columns).

    When the grid has more chunks than pixels, cells are aggregated into
    blocks whose colour is the mean of their chunks' colours: the mix of
    states shows. Returns the image and the block size (chunks per pixel).
    """
    rows, cols = codes.shape
    by = max(1, -(-rows // max(1, max_size[0])))
    bx = max(1, -(-cols // max(1, max_size[1])))
    rgb = _LUT[codes]
    if by == 1 and bx == 1:
        return rgb.astype(np.uint8), (1, 1)
    padded = np.zeros((-(-rows // by) * by, -(-cols // bx) * bx, 3), dtype=np.float32)
    weights = np.zeros(padded.shape[:2], dtype=np.float32)
    padded[:rows, :cols] = rgb
    weights[:rows, :cols] = 1
    shape = (padded.shape[0] // by, by, padded.shape[1] // bx, bx)
    sums = padded.reshape(*shape, 3).sum(axis=(1, 3))
    counts = weights.reshape(shape).sum(axis=(1, 3))[..., None]
    return (sums / np.maximum(counts, 1)).astype(np.uint8), (by, bx)


def keys_coords(grid: ChunkGridState, keys: Iterable[ChunkKey]) -> set[tuple[int, ...]]:
    """The grid coordinates of those `keys` that belong to the grid's source."""
    found = set()
    for key in keys:
        coords = grid.coords_of(key)
        if coords is not None:
            found.add(coords)
    return found
