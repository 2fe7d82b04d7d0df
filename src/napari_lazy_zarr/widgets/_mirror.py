"""`StateMirror`: the inspector's copy of what a cache holds for the viewer's layers.

Qt-free. One mirror follows one cache: a `ChunkGridState` per level source of
every plugin layer, the resident bytes of each layer, and counters of what
loaded. Its slot (`on_events`) runs on the thread that emits — a cache worker —
and does the per-event work there (O(1) each); the UI thread calls `apply()`,
which swaps the batched updates in with one NumPy assignment per grid. So a
storm of events costs the main thread nothing per event.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.widgets._grid_state import STATE_CODES, ChunkGridState

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

    from napari_lazy_zarr.core import ChunkCache, ChunkEvent, ChunkKey, ChunkSource

__all__ = ["Applied", "LayerSources", "StateMirror"]

MAX_GRID_CHUNKS: Final = 1 << 24
"""Levels with more chunks than this are mapped in aggregated cells (`MAX_CELLS`)."""


@dataclass(frozen=True, slots=True)
class LayerSources:
    """What the mirror needs to know about one plugin layer."""

    name: str
    levels: tuple[ChunkSource, ...]
    """The layer's level sources, finest first."""
    fixed: tuple[tuple[int, int], ...] = ()
    """Store axes the layer holds at one index (`AxisMap.fixed`): of a shared source
    (one layer per channel), only the chunks at that index are this layer's."""

    def owns(self, key: ChunkKey) -> bool:
        return all(key.inclusive_min[a] <= i < key.exclusive_max[a] for a, i in self.fixed)


@dataclass(slots=True)
class Applied:
    """What one `StateMirror.apply` brought in."""

    grids: set[ChunkGridState] = field(default_factory=set)
    """Grids whose codes changed."""
    events: list[ChunkEvent] = field(default_factory=list)
    """The events that arrived (for the log; at most the log's capacity, oldest first)."""
    loaded_chunks: int = 0
    loaded_bytes: int = 0


class _Tracked:
    __slots__ = ("grid", "itemsize", "layers")

    def __init__(self, grid: ChunkGridState | None, itemsize: int) -> None:
        self.grid = grid
        self.itemsize = itemsize
        self.layers: list[LayerSources] = []


class StateMirror:
    """The states of the chunks of some sources, kept current from a cache's events.

    Thread contract: `on_events` may run on any thread (the cache's emitting
    workers) and only takes the mirror's own lock. `track`, `connect`, `close`
    and `apply` run on one thread (the UI thread).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, InlineExecutor
    >>> source = ArraySource(np.zeros((8, 8), dtype=np.uint8), chunks=(4, 4), name="s")
    >>> cache = ChunkCache(1 << 20, executor=InlineExecutor())
    >>> mirror = StateMirror(cache)
    >>> mirror.track([LayerSources("image", (source,))])
    >>> mirror.connect()
    >>> cache.request([ChunkRef.of(source, (1, 0))]).release()
    >>> applied = mirror.apply()
    >>> mirror.grid(source).state_at((1, 0)).name, applied.loaded_bytes
    ('READY', 16)
    >>> mirror.resident_bytes("image")
    16
    >>> mirror.close(); cache.close()
    """

    def __init__(self, cache: ChunkCache, log_capacity: int = 2000) -> None:
        self.cache = cache
        self._lock = threading.Lock()
        self._tracked: dict[Hashable, _Tracked] = {}
        self._grids: dict[Hashable, ChunkGridState] = {}
        self._pending: dict[ChunkGridState, dict[int, int]] = {}
        self._log: deque[ChunkEvent] = deque(maxlen=log_capacity)
        self._resident: dict[ChunkKey, int] = {}
        self._layer_bytes: dict[str, int] = {}
        self._loaded_chunks = 0
        self._loaded_bytes = 0
        self._replay: list[tuple[ChunkEvent, ...]] | None = None
        self._connected = False
        self.events_seen = 0

    # -- what is followed (UI thread) -------------------------------------------

    def track(self, layers: Sequence[LayerSources]) -> None:
        """Follow the chunks of these layers' levels (replacing what was followed).

        Grids of sources still followed are kept; the states are then re-read
        from the cache in one snapshot.
        """
        tracked: dict[Hashable, _Tracked] = {}
        grids: dict[Hashable, ChunkGridState] = {}
        for layer in layers:
            for source in layer.levels:
                identity = source.identity
                entry = tracked.get(identity)
                if entry is None:
                    grid = self._grids.get(identity)
                    if grid is None:  # a huge grid is kept in aggregated cells (MAX_CELLS)
                        grid = ChunkGridState(source)
                    if grid is not None:
                        grids[identity] = grid
                    entry = tracked[identity] = _Tracked(grid, source.dtype.itemsize)
                if layer not in entry.layers:
                    entry.layers.append(layer)
        with self._lock:
            self._tracked = tracked
            self._grids = grids
        if self._connected:
            self._resync()

    def grid(self, source: ChunkSource) -> ChunkGridState | None:
        """The grid of a followed source (None if not followed or too large)."""
        return self._grids.get(source.identity)

    def connect(self, via: Callable[[Any, Callable[..., Any]], None] | None = None) -> None:
        """Start following the cache (idempotent), from one snapshot of its states.

        `via(signal, slot)` makes the connection when given (the inspector keeps
        its connections together, to undo them all at once).
        """
        if self._connected:
            return
        self._connected = True
        if via is None:
            self.cache.state_changed.connect(self.on_events)
        else:
            via(self.cache.state_changed, self.on_events)
        self._resync()

    def close(self) -> None:
        """Stop following the cache (idempotent)."""
        if self._connected:
            self._connected = False
            self.cache.state_changed.disconnect(self.on_events)

    def _resync(self) -> None:
        """Re-read every followed chunk's state from the cache.

        Events that arrive meanwhile are held and replayed after the snapshot,
        in order: each chunk ends in its latest state.
        """
        with self._lock:
            self._replay = []
        states = self.cache.states()  # one locked section of the cache
        with self._lock:
            for grid in self._grids.values():
                grid.clear()
            self._pending.clear()
            self._resident.clear()
            self._layer_bytes = {}
            tracked = self._tracked
            codes: dict[ChunkGridState, dict[int, int]] = {}
            for key, state in states.items():
                entry = tracked.get(key.source)
                if entry is None:
                    continue
                if entry.grid is not None and state is not ChunkState.NEW:
                    codes.setdefault(entry.grid, {})[entry.grid.flat_of(key)] = STATE_CODES[state]
                if state is ChunkState.READY:
                    self._add_resident(entry, key)
            for grid, updates in codes.items():
                grid.update(updates)
            replay, self._replay = self._replay, None
            for events in replay:
                self._absorb(events)

    # -- events (any thread) ----------------------------------------------------

    def on_events(self, events: tuple[ChunkEvent, ...]) -> None:
        """A batch of the cache's events (any thread): sorted into per-grid updates."""
        with self._lock:
            self._log.extend(events)
            self.events_seen += len(events)
            if self._replay is not None:
                self._replay.append(events)
                return
            self._absorb(events)

    def _absorb(self, events: tuple[ChunkEvent, ...]) -> None:
        """Lock held."""
        tracked = self._tracked
        ready, evicted = ChunkState.READY, ChunkState.EVICTED
        for event in events:
            key, current = event.key, event.current
            entry = tracked.get(key.source)
            if current is ready:
                self._loaded_chunks += 1
            if entry is None:
                continue
            grid = entry.grid
            if grid is not None:
                updates = self._pending.get(grid)
                if updates is None:
                    updates = self._pending[grid] = {}
                updates[grid.flat_of(key)] = STATE_CODES[current]
            if current is ready:
                self._loaded_bytes += self._add_resident(entry, key)
            elif current is evicted:
                nbytes = self._resident.pop(key, 0)
                if nbytes:
                    for layer in entry.layers:
                        if layer.owns(key):
                            self._layer_bytes[layer.name] -= nbytes

    def _add_resident(self, entry: _Tracked, key: ChunkKey) -> int:
        nbytes = math.prod(key.shape) * entry.itemsize
        if key not in self._resident:
            self._resident[key] = nbytes
            for layer in entry.layers:
                if layer.owns(key):
                    self._layer_bytes[layer.name] = self._layer_bytes.get(layer.name, 0) + nbytes
        return nbytes

    # -- the UI thread ----------------------------------------------------------

    def apply(self) -> Applied:
        """Bring the grids up to date; report what changed and what loaded since last time."""
        with self._lock:
            pending, self._pending = self._pending, {}
            applied = Applied(
                events=list(self._log),
                loaded_chunks=self._loaded_chunks,
                loaded_bytes=self._loaded_bytes,
            )
            self._log.clear()
            self._loaded_chunks = self._loaded_bytes = 0
        for grid, updates in pending.items():
            grid.update(updates)
            applied.grids.add(grid)
        return applied

    def resident_bytes(self, layer: str) -> int:
        """Decoded bytes of `layer`'s chunks resident in the cache, as the events tell."""
        return self._layer_bytes.get(layer, 0)
