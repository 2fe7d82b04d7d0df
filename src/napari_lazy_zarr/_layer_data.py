"""The arrays napari holds for a layer, and the loader that keeps napari from ever waiting.

napari slices a multiscale layer by indexing the level it displays
(`level[corner slices][point]`) and calling `numpy.asarray` on the result, on
its main thread (or its slicing thread with `NAPARI_ASYNC=1`). `LayerLevel`
makes both steps lazy and answers `__array__` through `LayerLoader.read`,
which returns at once: resident chunks copied, missing regions filled from the
best resident coarser level (upsampled) or the fill value, missing chunks
queued (coarse levels first, centre out) and neighbours prefetched. As chunks
land, the loader asks for a layer refresh on the main thread (throttled),
until the view is complete.

Thread contract: `read` may run on any thread. Worker threads only emit
`refresh_needed` / `failures_found`; the layer is touched only on the main
thread, through psygnal's main-thread queue.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from psygnal import Signal
from zarr_indexing import ConstantMap, DimensionMap

from napari_lazy_zarr.core import ChunkCache, ChunkedArray, ChunkRef, ChunkState
from napari_lazy_zarr.core.source import grid_shape

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from napari.layers import Layer

    from napari_lazy_zarr.core import ChunkEvent, ChunkKey

__all__ = ["LayerLevel", "LayerLoader", "loader_of", "wait_until_complete"]

# While a view loads, the layer refreshes when it is complete, and in between at most this
# often (seconds): a view that loads fast is re-sliced once, a slow one fills in progressively.
_REFRESH_INTERVAL = 1 / 15
# A read copies again while chunks land during it (each pass shows at least one more chunk);
# past this many passes it returns and a refresh shows the rest.
_REREADS = 64


class LayerLevel:
    """One pyramid level as napari sees it: lazy indexing, non-blocking `__array__`."""

    __slots__ = ("__weakref__", "_array", "_level", "_loader")

    def __init__(self, loader: LayerLoader, level: int, array: ChunkedArray) -> None:
        self._loader = loader
        self._level = level
        self._array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._array.dtype

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def size(self) -> int:
        return self._array.size

    @property
    def level(self) -> int:
        return self._level

    @property
    def loader(self) -> LayerLoader:
        return self._loader

    @property
    def array(self) -> ChunkedArray:
        """The engine's lazy array behind this level (blocking `result()` available)."""
        return self._array

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, key: Any) -> LayerLevel:
        return LayerLevel(self._loader, self._level, self._array[key])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        data = self._loader.read(self._level, self._array)
        return data if dtype is None else data.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"LayerLevel(level={self._level}, shape={self.shape}, dtype={self.dtype})"


class LayerLoader:
    """Serves one layer's pyramid to napari without blocking, and refreshes it as chunks land.

    Parameters
    ----------
    levels
        The layer's levels, finest first, all over `cache`.
    cache
        The chunk cache the levels read through.
    name
        For messages.
    prefetch
        Queue the ring of chunks around the view and the neighbouring planes
        of the non-displayed axes at low priority.
    blocking
        Make every read wait for its chunks (scripts, screenshots).

    Signals
    -------
    refresh_needed()
        Chunks of the displayed view landed (throttled); emitted from worker threads.
    failures_found(tuple[ChunkKey, ...])
        Chunks of the displayed view failed (each reported once).
    """

    refresh_needed = Signal()
    failures_found = Signal(tuple)

    def __init__(
        self,
        levels: Sequence[ChunkedArray],
        cache: ChunkCache,
        *,
        name: str = "",
        prefetch: bool = True,
        blocking: bool = False,
    ) -> None:
        if not levels:
            raise ValueError("a layer needs at least one level")
        self._arrays = list(levels)
        self._cache = cache
        self.name = name
        self.prefetch = prefetch
        self.blocking = blocking
        self.levels = [LayerLevel(self, i, a) for i, a in enumerate(self._arrays)]
        self._lock = threading.Lock()
        # Missing chunks of the latest read of each view ("view", "thumbnail"): a newer read
        # of a view replaces its set, so chunks of views napari has left are not waited for.
        self._watched: dict[str, set[ChunkKey]] = {"view": set(), "thumbnail": set()}
        # napari keeps the first read of a 2D layer's coarsest level (its thumbnail) in a
        # cache of its own; when that read had placeholders, the cache must be cleared.
        self._stale_thumbnail = False
        self._reported: set[ChunkKey] = set()  # failures already reported
        self._last_emit = 0.0
        self._refresh_pending = False
        self._refresh_asked_at = 0  # `reads` when the pending refresh was asked for
        self._layer: weakref.ReferenceType[Layer] | None = None
        self._id = next(_loader_ids)
        self.reads = 0
        # The latest displayed view (not the thumbnail): its level and the chunks it touches.
        self.view_level = 0
        self.view_keys: frozenset[ChunkKey] = frozenset()
        cache.state_changed.connect(self._on_events)

    @property
    def cache(self) -> ChunkCache:
        return self._cache

    @property
    def complete(self) -> bool:
        """Whether the latest reads of the layer were complete, or have since become so."""
        with self._lock:
            return not any(self._watched.values())

    # -- reading (any thread) ----------------------------------------------

    def read(self, level: int, view: ChunkedArray) -> np.ndarray[Any, Any]:
        """The values of `view` (a view of level `level`) now: resident data and placeholders."""
        self.reads += 1
        if self.blocking:
            return view.result()
        # napari reads the coarsest level whole for the thumbnail on every slice: that read
        # is its own view, so it never supersedes (nor is superseded by) the displayed one.
        thumbnail = level == len(self._arrays) - 1
        fallback = self._coarser_fallback(level, view)
        prefetch = self._prefetch_refs(view) if self.prefetch and not thumbnail else []
        kind = "thumbnail" if thumbnail else "view"
        for _ in range(_REREADS):
            partial = view.read_nonblocking(
                view=(self._id, kind),
                level=level,
                fallback=fallback,
                prefetch=prefetch,
            )
            if not thumbnail:
                self.view_level = level
                self.view_keys = frozenset(partial.request.keys)
            # Watch first, then look: a chunk landing after this is seen by `_on_events`;
            # one that landed before was not, and is found here. FAILED chunks are not
            # watched: they stay empty until retried, and retrying them is an event too.
            with self._lock:
                if partial.missing and not any(self._watched.values()):
                    self._last_emit = time.monotonic()  # the progressive clock starts now
                self._watched[kind] = set(partial.missing)
                if thumbnail:
                    self._stale_thumbnail = bool(partial.missing)
            if not partial.missing:
                return partial.data
            states = {key: self._cache.state(key) for key in partial.missing}
            finished = [k for k, s in states.items() if s in (ChunkState.READY, ChunkState.FAILED)]
            with self._lock:
                self._watched[kind].difference_update(finished)
            if not any(states[k] is ChunkState.READY for k in finished):
                return partial.data
            prefetch = []  # queued by the first pass
        # Still landing after every pass: those chunks are READY but not in this copy, and
        # no event will name them again. Ask for a refresh from another thread (psygnal
        # would run the slot right here on the main thread, inside napari's slice call).
        threading.Thread(target=self._request_refresh, daemon=True).start()
        return partial.data

    def _prefetch_refs(self, view: ChunkedArray) -> list[ChunkRef]:
        """The ring of chunks around a box view, and the neighbouring planes."""
        box = _box_axes(view)
        if box is None:
            return []
        source = view.source
        grid = source.grid
        counts = grid_shape(source)
        ranges: list[range] = []
        planes: list[tuple[int, list[int]]] = []
        rank = len(box)
        for axis, (lo, hi, constant) in enumerate(box):
            first = int(grid[axis].index_to_chunk(lo))
            last = int(grid[axis].index_to_chunk(hi - 1))
            # A plane of a non-displayed axis: an integer index, or a one-wide slice of a
            # leading axis (napari slices both ways).
            if constant or (hi - lo == 1 and axis < rank - 2):
                ranges.append(range(first, last + 1))
                neighbours = sorted(
                    {
                        int(grid[axis].index_to_chunk(c))
                        for c in (lo - 1, lo + 1)
                        if 0 <= c < source.shape[axis]
                    }
                    - {first}
                )
                if neighbours:
                    planes.append((axis, neighbours))
            else:
                ranges.append(range(max(first - 1, 0), min(last + 2, counts[axis])))
        needed = {tuple(c) for c in _view_chunks(box, grid)}
        refs = [
            ChunkRef.of(source, coords)
            for coords in itertools.product(*ranges)
            if coords not in needed
        ]
        for axis, neighbours in planes:
            for chunk in neighbours:
                for coords in needed:
                    moved = list(coords)
                    moved[axis] = chunk
                    refs.append(ChunkRef.of(source, moved))
        return refs

    def _coarser_fallback(
        self, level: int, view: ChunkedArray
    ) -> Callable[[Collection[ChunkKey]], np.ndarray[Any, Any]] | None:
        """Build, only if something is missing, stand-ins from resident coarser levels.

        Called with the missing chunks' keys; only the box they cover in the view
        is filled (the rest of the returned array is never read). Levels with no
        resident chunk in that box are skipped; the nearest level with data wins.
        """
        if level >= len(self._arrays) - 1:
            return None
        box = _box_axes(view)
        if box is None:
            return None
        fine_shape = self._arrays[level].shape

        def build(missing: Collection[ChunkKey]) -> np.ndarray[Any, Any]:
            out = np.empty(view.shape, dtype=view.dtype)
            # The missing chunks' hull, per displayed axis, in view coordinates.
            region: list[slice] = []
            for axis, (lo, hi, constant) in enumerate(box):
                if constant:
                    continue
                a = max(lo, min(k.inclusive_min[axis] for k in missing))
                b = min(hi, max(k.exclusive_max[axis] for k in missing))
                region.append(slice(a - lo, max(a, b) - lo))
            target = out[tuple(region)]
            target[...] = view.fill_value
            filled = np.zeros(target.shape, dtype=bool)
            for coarse_level in range(level + 1, len(self._arrays)):
                coarse = self._arrays[coarse_level]
                selection: list[Any] = []
                takes: list[np.ndarray[Any, Any]] = []
                displayed = iter(region)
                for axis, (lo, _, constant) in enumerate(box):
                    ratio = coarse.shape[axis] / fine_shape[axis]
                    if constant:
                        selection.append(min(int((lo + 0.5) * ratio), coarse.shape[axis] - 1))
                        continue
                    part = next(displayed)
                    index = np.minimum(
                        ((np.arange(lo + part.start, lo + part.stop) + 0.5) * ratio).astype(
                            np.intp
                        ),
                        coarse.shape[axis] - 1,
                    )
                    start = int(index[0])
                    selection.append(slice(start, int(index[-1]) + 1))
                    takes.append(index - start)
                plan = coarse[tuple(selection)].plan()
                if not any(self._cache.lookup(ref.key) is not None for ref in plan.refs):
                    continue  # nothing resident at this level: nothing to upsample
                data, absent = plan.assemble(self._cache)
                up = data
                for axis, index in enumerate(takes):
                    up = np.take(up, index, axis=axis)
                if absent:
                    resident = np.ones(data.shape, dtype=bool)
                    for key in absent:
                        plan.fill_missing(resident, key, False, None)
                    for axis, index in enumerate(takes):
                        resident = np.take(resident, index, axis=axis)
                    use = resident & ~filled
                    target[use] = up[use]
                    filled |= use
                    if filled.all():
                        break
                else:
                    np.copyto(target, up, where=~filled)
                    break
            return out

        return build

    # -- chunk events (worker threads) -------------------------------------

    def _on_events(self, events: tuple[ChunkEvent, ...]) -> None:
        landed = [e.key for e in events if e.current in (ChunkState.READY, ChunkState.FAILED)]
        if landed:
            failed = [e.key for e in events if e.current is ChunkState.FAILED]
            self._landed(landed, failed)

    def _landed(self, landed: Sequence[ChunkKey], failed: Sequence[ChunkKey]) -> None:
        with self._lock:
            mine = [k for k in landed if any(k in keys for keys in self._watched.values())]
            # A chunk of the displayed view that nobody waited for landed: a FAILED chunk
            # retried by the user. It needs a refresh too.
            retried = [k for k in landed if k in self.view_keys and k not in mine]
            if not mine and not retried:
                return
            for keys in self._watched.values():
                keys.difference_update(mine)
            waiting = any(self._watched.values())
            new_failures = tuple(k for k in failed if k in mine and k not in self._reported)
            self._reported.update(new_failures)
            now = time.monotonic()
            # The view's last chunk always asks for a refresh (a pending one may have
            # read before it landed); progress in between is throttled and coalesced.
            emit = not waiting or (
                not self._refresh_pending and now - self._last_emit >= _REFRESH_INTERVAL
            )
            if emit:
                self._last_emit = now
        if new_failures:
            self.failures_found.emit(new_failures)
        if emit:
            self._request_refresh()

    def _request_refresh(self) -> None:
        with self._lock:
            self._refresh_pending = True
            self._refresh_asked_at = self.reads
        self.refresh_needed.emit()

    @property
    def settled(self) -> bool:
        """Complete, and the layer refreshed since the last chunk landed: the screen is final."""
        with self._lock:
            return not any(self._watched.values()) and not self._refresh_pending

    # -- the napari layer (main thread) ------------------------------------

    @property
    def layer(self) -> Layer | None:
        return None if self._layer is None else self._layer()

    def attach(self, layer: Layer) -> None:
        """Refresh `layer` as chunks land, show its loading state, report failures once."""
        from psygnal.qt import start_emitting_from_queue

        self._layer = weakref.ref(layer)
        start_emitting_from_queue(msec=10)
        self.refresh_needed.connect(self._refresh_layer, thread="main")
        self.failures_found.connect(self._report_failures, thread="main")
        layer.events.set_data.connect(self._on_slice_applied)
        # napari sliced the layer before it could be attached; chunks that landed
        # since then had nobody to refresh for.
        self._request_refresh()

    def detach(self) -> None:
        """Stop refreshing the layer and release the views' pinned chunks."""
        self.refresh_needed.disconnect(self._refresh_layer)
        self.failures_found.disconnect(self._report_failures)
        layer = self.layer
        if layer is not None:
            layer.events.set_data.disconnect(self._on_slice_applied)
        self._cache.state_changed.disconnect(self._on_events)
        self._layer = None
        self._cache.release_view((self._id, "view"))
        self._cache.release_view((self._id, "thumbnail"))

    def _refresh_layer(self) -> None:
        layer = self.layer
        if layer is None or not layer.visible:
            with self._lock:
                self._refresh_pending = False  # nothing will be sliced
            return
        with self._lock:
            thumbnail_ready = self._stale_thumbnail and not self._watched["thumbnail"]
        if thumbnail_ready:
            cached = getattr(layer, "_level_materializer", None)
            if cached is not None and hasattr(cached, "cache_clear"):
                cached.cache_clear()  # napari's copy holds the placeholders
        # Sync slicing applies the new slice inside this call; async slicing later. Either
        # way `_on_slice_applied` clears the pending refresh once napari shows the data.
        layer.refresh()

    def _on_slice_applied(self, event: Any = None) -> None:
        """napari applied a slice of the layer (main thread): it now shows what was read.

        Only a slice read after the refresh was asked for shows the landed chunks; one
        whose read ran before (chunks landing while napari sliced) leaves it pending.
        """
        with self._lock:
            if self.reads > self._refresh_asked_at:
                self._refresh_pending = False
            complete = not any(self._watched.values())
        layer = self.layer
        if layer is not None:
            # After napari's own bookkeeping (async slicing marks every applied slice loaded).
            _set_loaded(layer, complete)

    def _report_failures(self, keys: tuple[ChunkKey, ...]) -> None:
        from napari.utils.notifications import show_warning

        error = self._cache.error(keys[0])
        more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
        show_warning(
            f"napari-lazy-zarr: layer {self.name!r}: chunk {keys[0]}{more} failed to load: "
            f"{error}. Failed chunks stay empty until retried (cache.retry_failed())."
        )


_loader_ids = itertools.count()


def wait_until_complete(viewer: Any, timeout: float = 60.0) -> bool:
    """Run napari's event loop until every plugin layer in `viewer` shows its complete view.

    For scripts and screenshots; returns False if `timeout` seconds pass first.
    Must be called on the main thread.
    """
    from napari.qt import get_qapp

    app = get_qapp()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.processEvents()
        loaders = [loader for layer in viewer.layers if (loader := loader_of(layer)) is not None]
        if all(loader.settled for loader in loaders):
            app.processEvents()
            return True
        time.sleep(0.005)  # the event loop is idle: chunks are loading on worker threads
    return False


def loader_of(layer: Layer) -> LayerLoader | None:
    """The loader behind a napari layer created from this plugin's data, else None."""
    data: Any = getattr(layer, "data", None)
    # napari wraps a multiscale layer's levels in its own sequence type (MultiScaleData).
    first = data[0] if getattr(layer, "multiscale", False) and len(data) else data
    return first.loader if isinstance(first, LayerLevel) else None


def _set_loaded(layer: Layer, loaded: bool) -> None:
    """Show the layer as loading (napari's layer-list indicator) until its view completes."""
    state = getattr(layer, "_slicing_state", None)
    setter = getattr(state, "_set_loaded", None)
    if setter is not None:
        setter(loaded)


def _box_axes(view: ChunkedArray) -> list[tuple[int, int, bool]] | None:
    """Per storage axis `(lo, hi, constant)` for a unit-step box view, else None."""
    box = view.transform
    bounds = view.bounding_box()
    if bounds is None:
        return None
    axes: list[tuple[int, int, bool]] = []
    for output_map, (lo, hi) in zip(box.output, bounds, strict=True):
        if isinstance(output_map, ConstantMap):
            axes.append((lo, hi, True))
        elif isinstance(output_map, DimensionMap) and output_map.stride == 1:
            axes.append((lo, hi, False))
        else:
            return None
    return axes


def _view_chunks(box: Sequence[tuple[int, int, bool]], grid: Sequence[Any]) -> list[list[int]]:
    ranges = [
        range(int(g.index_to_chunk(lo)), int(g.index_to_chunk(hi - 1)) + 1)
        for (lo, hi, _), g in zip(box, grid, strict=True)
    ]
    return [list(c) for c in itertools.product(*ranges)]
