"""The view controller: one layer's whole request cycle, Qt-free.

A viewer asks a layer for a region of one pyramid level many times a second.
`ViewController` answers each ask at once and keeps the answer converging:

```
read(level, view)                     any thread (napari's main or slicing thread)
  -> ViewRequest(level, box over the STORE axes, displayed axes, generation)   immutable
  -> plan (cached per view) -> show the view -> copy READY chunks into its buffer
  -> ViewFrame(array in the layer's axes, missing, provisional)   its data: a live buffer
  -> hand the frame to the controller's dispatch thread, return the array
dispatch thread: cache.request(needed, prefetch=prefetch_chunks(...))  (cache events fire here)
                 (not again for a view already requested that nothing has changed since)
compose thread:  coarser-level stand-ins (`coarser_fill`, pure) written into the same buffer
worker threads:  chunk events -> landed chunks copied into the shown buffer -> view_changed,
                 at most once until the view is read again
```

The modules beside this one are pure: `axes` (the axis map, boxes, level
indices), `frames` (the request and frame types), `fallback` (stand-ins) and
`prefetch` (the ring, walks, levels). This one holds the state.

The reading thread (napari's main thread) only copies resident chunks and
fills placeholders: stand-ins upsampled from coarser levels are composed on the
controller's compose thread, when the view is first read and again when a
coarser chunk lands, and written into the buffer the viewer already holds,
followed by `view_changed` (measured: composing them inside napari's slice call
took up to 174 ms of the main thread per playback step).

A repeated read of the same view copies only the chunks that landed since the
previous read into the same buffer: each chunk is copied once into what the
viewer displays, however many times the view is refreshed (a 512³ volume is
not copied again for every chunk that lands).

**One landing path.** After a read, chunks land only through the cache's
events (`_landed`, on the thread that landed them). The read registers its view
as shown *before* it looks for resident chunks, so a chunk is either READY when
the read looks (and copied by it) or lands later and finds the shown view.

**One axis map.** A layer may show fewer axes than its store holds (an
OME-Zarr image with a channel axis becomes one layer per channel). `AxisMap`
is the one place that relates the layer's axes to the store's; requests,
fallbacks and prefetch sets are always boxes over the *store's* axes.

Thread contract: `read` may run on any thread and never waits on storage nor
emits cache events. Cache requests are issued from the dispatch executor
(one thread per controller by default; injectable so tests run it inline).
`view_changed` and `failures_found` are emitted from worker or dispatch
threads; connect them with `thread="main"` (psygnal) to touch a GUI.

Failures are followed for every chunk of the layer's levels, not only those
on screen (`core.viewport.FailureLog`): the reports wait in `failures` until
taken, so those made before anything listened are not lost.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from typing import TYPE_CHECKING, Any

from psygnal import Signal

from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.executors import SerialDispatch
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.states import ChunkState
from napari_lazy_zarr.core.viewport._refresh import Refreshes
from napari_lazy_zarr.core.viewport._shown import Shown, ViewPlans
from napari_lazy_zarr.core.viewport.axes import AxisMap, Box, view_box
from napari_lazy_zarr.core.viewport.failures import FailureLog
from napari_lazy_zarr.core.viewport.frames import (
    ViewFrame,
    ViewKind,
    ViewRequest,
    is_plane_step,
)
from napari_lazy_zarr.core.viewport.planes import PreparedPlanes
from napari_lazy_zarr.core.viewport.prefetch import (
    MotionTracker,
    PlaneMotion,
    prefetch_ring,
    view_prefetch,
)
from napari_lazy_zarr.core.viewport.volumes import PreparedVolumes, volume_box

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    import numpy as np

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.executors import Executor
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.states import ChunkEvent
    from napari_lazy_zarr.core.viewport.failures import ChunkFailure

__all__ = ["ViewController"]


class ViewController:
    """One layer's request cycle: non-blocking reads, stand-ins, loading, change signals.

    Parameters
    ----------
    levels
        The layer's pyramid levels as chunk sources over the store's axes, finest first.
    cache
        The chunk cache the levels are read through.
    axis_map
        How the layer's axes relate to the store's (default: the same axes).
    name
        For messages.
    prefetch
        Load the ring around the view and the neighbouring planes at low
        priority, as far as the levels allow (`prefetch_ring`), and the planes
        ahead of a walk through z or t.
    blocking
        Make every read wait for its chunks (a debugging mode: it blocks the caller).
    dispatch
        Where cache requests are issued from and stand-ins composed (default: a thread
        of the controller's own for each); `InlineExecutor()`: in the reading thread.
    hold
        On a z/t step, answer the last presentable frame while the new plane lacks a
        complete backdrop (its chunks or a coarser level's): playback shows no placeholder.
    lookahead_share
        The share of the cache's capacity that loading ahead of a walk through z or t
        (playback) may take; the rest keeps the planes already seen.
    snapshot
        Answer a view still loading with a copy, not the live buffer chunks land in
        (labels: napari's colouring reads each cell twice; `Shown.answer`).

    Signals
    -------
    view_changed()
        Something a shown view lacked has landed: read it again. Emitted at most
        once until the next read, from worker or dispatch threads.
    failures_found(tuple[ChunkFailure, ...])
        Chunks of the layer's levels failed — on screen, prefetched or read
        ahead; each failure once, and again after a retry that fails again.
        The same reports wait in `failures` until taken
        (`FailureLog.take`): a consumer that may connect late takes them
        instead of relying on the payload.
    view_read(ViewFrame)
        A read was answered (emitted from the dispatch thread, after its request).
    volume_ready(int)
        A volume asked for by `prepare_volumes` is resident and assembled: a
        viewer may switch to that level now without waiting (worker thread).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, InlineExecutor
    >>> data = np.arange(64).reshape(8, 8)
    >>> cache = ChunkCache(1 << 20, executor=InlineExecutor())
    >>> controller = ViewController(
    ...     [ArraySource(data, chunks=(4, 4), name="d")], cache, dispatch=InlineExecutor()
    ... )
    >>> view = controller.arrays[0][2:6, 2:6]
    >>> first = controller.read(0, view)  # inline executors: loaded during the read
    >>> bool(controller.complete), np.array_equal(controller.read(0, view), data[2:6, 2:6])
    (True, True)
    >>> controller.close()
    """

    view_changed = Signal()
    failures_found = Signal(tuple)
    view_read = Signal(object)
    volume_ready = Signal(int)

    def __init__(
        self,
        levels: Sequence[ChunkSource],
        cache: ChunkCache,
        *,
        axis_map: AxisMap | None = None,
        name: str = "",
        prefetch: bool = True,
        blocking: bool = False,
        dispatch: Executor | None = None,
        hold: bool = True,
        lookahead_share: float = 0.5,
        snapshot: bool = False,
    ) -> None:
        if not levels:
            raise ValueError("a layer needs at least one level")
        rank = len(levels[0].shape)
        self.axis_map = axis_map if axis_map is not None else AxisMap(rank)
        if any(len(source.shape) != self.axis_map.store_rank for source in levels):
            raise ValueError("every level must have the axis map's store rank")
        self.sources = list(levels)
        # The smallest ring any level asks for: a virtual level over an expensive
        # source (dask blocks) is as expensive as the chunks under it.
        self._ring = min(prefetch_ring(source) for source in self.sources)
        self.cache = cache
        self.name = name
        self.prefetch = prefetch
        self.blocking = blocking
        self.hold = hold
        self.lookahead_share = lookahead_share
        self.snapshot = snapshot
        self.motion: PlaneMotion | None = None
        """The walk through z or t the latest reads make (None when the view is still)."""
        self._tracker = MotionTracker()
        self._presentable: dict[ViewKind, ViewFrame] = {}  # by kind: the last whole frame
        index = self.axis_map.store_index()
        # The layer's levels: each store level seen through the axis map.
        self.arrays = [ChunkedArray(source, cache)[index] for source in self.sources]
        self._id = next(_controller_ids)
        self._lock = threading.Lock()
        self._plans = ViewPlans(self.sources)
        self._volumes = PreparedVolumes(
            cache,
            self.sources,
            self.arrays,
            self.axis_map,
            owner=self._id,
            plan=self._plans.plan,
            ready=self._volume_ready,
            lock=self._lock,
        )
        self._planes = PreparedPlanes(
            cache, self.sources, self.arrays, self.axis_map, plan=self._plans.plan, lock=self._lock
        )
        # Stand-ins are composed on a thread of their own: a large one must not delay
        # the next view's requests. An injected `dispatch` runs both.
        self._owned: list[SerialDispatch] = []
        if dispatch is None:
            self._owned = [
                SerialDispatch(f"lazy-zarr-{role}-{name}") for role in ("view", "compose")
            ]
        self._dispatch: Executor = dispatch if dispatch is not None else self._owned[0]
        self._composer: Executor = dispatch if dispatch is not None else self._owned[1]
        self._generation = 0
        self._shown: dict[ViewKind, Shown] = {}
        self._retired: Shown | None = None  # what the latest read let go of, for the next
        self._refreshes = Refreshes(lambda: self.complete)
        self._closed = False
        self.latest: ViewFrame | None = None
        """The latest answered read of the displayed view (not the thumbnail)."""
        self.failures = FailureLog(self.sources, cache)
        """The layer's failed chunks, reported once each (see `failures_found`)."""
        cache.state_changed.connect(self._on_events)

    # -- what a layer shows ---------------------------------------------------

    @property
    def view_level(self) -> int:
        """The level of the latest displayed view (0 before any read)."""
        latest = self.latest
        return 0 if latest is None else latest.request.level

    @property
    def view_keys(self) -> frozenset[ChunkKey]:
        """The chunks the latest displayed view touches."""
        latest = self.latest
        return frozenset() if latest is None else frozenset(latest.keys)

    @property
    def complete(self) -> bool:
        """Whether the latest reads lacked nothing, or everything they lacked has landed."""
        with self._lock:
            shown_views = list(self._shown.values())
        return not any(shown.waiting for shown in shown_views)

    @property
    def settled(self) -> bool:
        """Complete, and a slice read after the last landing was applied: the screen is final."""
        return self._refreshes.settled

    @property
    def reads(self) -> int:
        """How many reads the controller answered."""
        return self._refreshes.reads

    @property
    def refresh_pending(self) -> bool:
        """`view_changed` was emitted and no slice read after it has been applied yet."""
        return self._refreshes.pending

    def wait_until_settled(self, timeout: float | None = None) -> bool:
        """Block until `settled` (True), or `timeout` seconds pass, or `close` (False if not).

        Event-driven, as napari's `_LayerSlicer.wait_until_idle`: the waiter sleeps on a
        condition woken by every read, landing, change signal and applied slice. Settling
        needs the viewer to read and apply a slice after the last landing (`slice_applied`):
        on a GUI's main thread keep its event loop running instead (`wait_until_complete`).
        """
        return self._refreshes.wait_until_settled(timeout)

    # -- reading (any thread) -------------------------------------------------

    def read(
        self, level: int, view: ChunkedArray, *, kind: ViewKind | None = None
    ) -> np.ndarray[Any, Any]:
        """The values of `view` (a view of `arrays[level]`) now; never waits on storage.

        `kind` says which of napari's reads this is; by default a read of the
        coarsest level of a pyramid is the thumbnail, every other the view.
        """
        # The request cycle, in order:
        # 1. Open a new generation: every older answer of the view is stale from here on.
        # 2. Turn the view into a `ViewRequest` over the store's axes (a view that is not a
        #    box: read without stand-ins or prefetch); follow its walk (`MotionTracker`).
        # 3. `_answer`, on this thread: register the view as shown and count the read, then
        #    copy the READY chunks not yet in its buffer and give the others placeholders
        #    (only copies); answer a `ViewFrame` over that live buffer, or a held frame.
        # 4. Hand the frame to the dispatch thread (`_issue`): unless nothing changed since
        #    the view's last request, ask the cache for its chunks, ring and look-ahead;
        #    the cache's events then fire there and on the workers, never here.
        # 5. Later, off this thread: workers copy each chunk that lands into the shown
        #    buffer (`_landed`, the one landing path), the compose thread draws stand-ins
        #    from coarser levels (`_compose`), and `view_changed` asks for a read (step 1).
        with self._lock:
            self._generation += 1
            generation = self._generation
        if kind is None:
            kind = (
                "thumbnail" if len(self.sources) > 1 and level == len(self.sources) - 1 else "view"
            )
        found = None if self.blocking else view_box(view)
        if found is None:  # blocking, or not a viewport: no stand-ins, no prefetch
            self._refreshes.read(kind)
            if self.blocking:
                return view.result()
            partial = view.read_nonblocking(requester=(self._id, kind), level=level)
            return partial.data.copy() if self.snapshot else partial.data
        box, displayed = found
        request = ViewRequest(level, box, displayed, generation, kind)
        if kind == "view":
            held = {axis for axis, _ in self.axis_map.fixed}
            planes = {a: box[a][0] for a in request.planes if a not in held}
            self.motion = self._tracker.observe(planes)
        result = self._answer(request, view)
        self._dispatch.submit(lambda: self._issue(result))
        return result.data

    def _answer(self, request: ViewRequest, view: ChunkedArray) -> ViewFrame:
        """Assemble the view from what is resident (reusing the last buffer of the same view).

        Only copies: the resident chunks not yet in the buffer, placeholders for the
        others. Stand-ins are composed later, off this thread (`_compose`); a new volume,
        view or thumbnail, a held frame stands in for (a z/t step in 3D: 100 MB of resident
        chunks are half a second of copies) is assembled off it (`Shown.assemble_apart`).
        """
        kind = request.kind
        volume = len(request.spatial) >= 3
        with self._lock:
            shown, retired, self._retired = self._shown.get(kind), self._retired, None
            presentable = self._presentable.get(kind) if self.hold else None
        if shown is None or not request.same_view(shown.request):
            shown = _reusable(request, self._volumes, self._planes, retired)
            if shown is None:
                shown = Shown.blank(request, self._plans.plan(request, view), self.sources)
        stepped = presentable is not None and is_plane_step(presentable.request, request)
        with shown.reading():
            shown.request = request
            # Shown before it looks for landed chunks: a chunk landing from here on finds
            # it in `_landed` (and waits for this lock), one landed before is READY now.
            with self._lock:
                replaced, self._shown[kind] = self._shown.get(kind), shown
                self._retired = None if replaced is shown else replaced  # cleared above
            self._refreshes.read(kind)  # once shown (`Refreshes.read`)
            later = shown.defers(stepped, self.cache)
            start, shown.assembling = later and not shown.assembling, later
            unfilled = shown.unfilled
            if not later:
                shown.assemble(self.cache)
            compose = not later and unfilled and shown.composes(len(self.sources))
            ready = shown.presentable  # (`assembling` is `later`)
            held = presentable.data if presentable is not None and not ready and stepped else None
            shown.held = held is not None
            result = ViewFrame(
                request,
                shown.answer(self.snapshot) if held is None else held,
                tuple(ref.key for ref in shown.plan.refs),
                frozenset(shown.missing),
                frozenset(shown.provisional),
                frozenset(shown.failed),
                held=held is not None,
            )
        with self._lock:
            if kind == "view" or len(self.sources) == 1:
                self.latest = result
            if ready and (volume or kind == "view"):  # a 3D thumbnail is a volume too
                self._presentable[kind] = result
        self._refreshes.notify()  # a view shown complete may settle it
        if compose:
            self._compose_later(shown)
        if start:
            self._dispatch.submit(functools.partial(self._assemble, shown))
        return result

    def _assemble(self, shown: Shown) -> None:  # dispatch thread; napari reads it then
        landings = shown.landings  # a volume shown with nothing copied in: nothing new
        whole = shown.assemble_apart(
            self.cache, lambda: self._shown.get(shown.request.kind) is shown
        )
        with self._lock:
            views = list(self._shown.values())
        if whole and (shown.held or shown.landings != landings) and not _behind(shown, views):
            self._signal_change((shown,))

    # -- stand-ins (compose thread) -------------------------------------------

    def _compose_later(self, shown: Shown) -> None:
        """Queue `shown`'s stand-ins on the compose thread (at most one queued per view)."""
        with shown.lock:
            if shown.composing:
                return
            shown.composing = True
        self._composer.submit(functools.partial(self._compose, shown))

    def _compose(self, shown: Shown) -> None:
        """Give the cells of chunks still loading coarser levels' values, in place
        (`Shown.compose`); signal `view_changed` when anything was drawn."""
        with shown.lock:
            shown.composing = False
            request = shown.request
            waiting = shown.missing - shown.failed
        with self._lock:
            current = any(shown is other for other in self._shown.values())
        if self._closed or not current or not waiting:
            return  # the viewer has moved on, or everything landed
        if shown.compose(request, waiting, self.sources, self.cache.lookup):
            self._signal_change((shown,))

    # -- issuing (dispatch thread) --------------------------------------------

    def _issue(self, result: ViewFrame) -> None:
        """Request the view's chunks (events fire here, not in the reader's thread)."""
        if self._closed:
            return
        request = result.request
        with self._lock:
            shown, thumbnail = self._shown.get(request.kind), self._shown.get("thumbnail")
        if shown is None or shown.request.generation != request.generation:
            return  # a newer read of this view already answered (and will issue)
        # A refresh that finds nothing new is not planned again: the live request already
        # pins the same chunks and queues the same work. Anything that would change it
        # (a landing, an eviction of prefetched chunks, the walk, the prefetch switch)
        # makes a new one.
        counters = self.cache.counters()
        with shown.lock:
            basis = (shown.landings, counters.evictions, self.motion, self.prefetch)
            renew, shown.issued = shown.issued != basis, basis
        if renew and not self._request(request, shown):
            return  # the cache was closed under us (viewer closing)
        if request.kind == "view" and thumbnail and thumbnail.follows(result, self.sources):
            self._request(thumbnail.request, thumbnail)  # a virtual thumbnail shows others
        self.view_read.emit(result)
        if result.failed:  # FAILED before this controller followed the cache (a shared one)
            self._report(self.failures.adopt(result.failed))

    def _request(self, request: ViewRequest, shown: Shown) -> bool:
        """Ask the cache for `shown`'s chunks and what to load ahead; False if it closed."""
        source = self.sources[request.level]
        prefetch: list[ChunkRef] = []
        ahead: list[ChunkRef] = []
        if self.prefetch and request.kind == "view" and shown.prefetches:
            prefetch, ahead = view_prefetch(
                request,
                self.sources,
                held={axis for axis, _ in self.axis_map.fixed},
                ring=self._ring,
                motion=self.motion,
                latency=functools.partial(_load_latency, self.cache),
                concurrency=self.cache.concurrency,
                budget_bytes=int(self.cache.total_bytes_limit * self.lookahead_share),
            )
        load_class, refs = LoadClass.NEEDED, shown.plan.refs
        if request.kind == "thumbnail" and is_derived(source):
            # A virtual coarsest level costs every stored chunk under it: overview work,
            # only as far as the view shows it, never starving the view's chunks.
            load_class, (refs, _) = LoadClass.OVERVIEW, shown.follow(self.latest, self.sources)
            self._refreshes.notify()  # fewer chunks to wait for may complete the layer
        center = tuple((lo + hi) / 2 for lo, hi in request.box)
        try:
            self.cache.request(
                refs,
                view=(self._id, request.kind),
                level=request.level,
                center=center,
                prefetch=prefetch,
                ahead=ahead,
                load_class=load_class,
            )
        except RuntimeError:  # the cache was closed under us (viewer closing)
            return False
        if request.kind == "view":  # the next frames of a walk, assembled as they land
            with self._lock:
                thumbnail = self._shown.get("thumbnail")
            self._planes.follow(request, thumbnail, self.motion if ahead else None, ahead)
        return True

    # -- volumes (3D at a finer level) ----------------------------------------

    def volume_box(self, level: int) -> Box | None:
        """The latest view's planes at `level`, whole on its displayed axes (None before reads)."""
        latest = self.latest
        if latest is None:
            return None
        return volume_box(latest.request, [source.shape for source in self.sources], level)

    def volume_complete(self, level: int) -> bool:
        """Whether the volume of `level` at the latest view's planes is resident and assembled."""
        with self._lock:
            shown = list(self._shown.values())
        return self._volumes.complete(level, self.volume_box(level), shown)

    def prepare_volumes(self, levels: Sequence[int]) -> None:
        """Load and assemble the volumes of `levels` in the background (any thread).

        Each is the latest view's planes at that level, whole on the displayed
        axes (`volume_box`): what napari reads for a level locked in 3D. Chunks
        land into the volume's buffer on worker threads; `volume_ready(level)`
        follows when it is complete, and a read of it then costs no copy.
        Replaces the previous call's volumes (their chunks are released);
        ``prepare_volumes(())`` stops preparing any.
        """
        wanted = tuple(levels)
        self._dispatch.submit(lambda: self._prepare(wanted))

    def _prepare(self, levels: tuple[int, ...]) -> None:
        if not self._closed and (latest := self.latest) is not None:
            with self._lock:
                shown = list(self._shown.values())
            self._volumes.prepare(levels, latest.request, shown)

    def _volume_ready(self, level: int) -> None:
        if not self._closed:
            self.volume_ready.emit(level)

    # -- landing chunks (worker threads) --------------------------------------

    def _on_events(self, events: tuple[ChunkEvent, ...]) -> None:
        # Failures first: a read meeting a derived chunk FAILED meanwhile (`_issue` adopts
        # it) would otherwise name it before the stored chunk whose failure failed it.
        failures = self.failures.observe(events)
        landed = {e.key for e in events if e.current in (ChunkState.READY, ChunkState.FAILED)}
        if landed:
            self._landed(landed)
        self._report(failures)

    def _report(self, failures: tuple[ChunkFailure, ...]) -> None:
        if failures and not self._closed:
            self.failures_found.emit(failures)

    def _landed(self, landed: Collection[ChunkKey]) -> None:
        """Copy landed chunks into the shown views; signal the change (any thread)."""
        with self._lock:
            shown_views = list(self._shown.items())
        self._volumes.landed(landed, [shown for _, shown in shown_views])
        self._planes.landed(landed)
        changed: list[Shown] = []
        for _, shown in shown_views:
            with shown.lock:
                if shown.take_landed(self.cache, landed):
                    changed.append(shown)
                # A coarser level's chunk improves the stand-ins of a view still loading.
                recompose = (
                    not shown.unfilled
                    and shown.composes(len(self.sources))
                    and any(key.source in shown.coarser for key in landed)
                )
            if recompose:
                self._compose_later(shown)
        if changed:
            self._signal_change(changed)

    def _signal_change(self, changed: Collection[Shown]) -> None:
        """Emit `view_changed` unless emitted and not read since, or nothing new (`_news`)."""
        kinds = {shown.request.kind for shown in changed}
        if _news(self._shown.get("view"), changed) and self._refreshes.changed(kinds):
            self.view_changed.emit()

    # -- the viewer's side ----------------------------------------------------

    def slice_applied(self) -> None:
        """The viewer now shows a slice: if it was read after the last change, it is final."""
        self._refreshes.slice_applied()

    def refresh_skipped(self) -> None:
        """The viewer will not read again (layer hidden): stop waiting for it."""
        self._refreshes.refresh_skipped()

    def close(self) -> None:
        """Stop following the cache and release the views' pinned chunks (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._refreshes.close()
        self.cache.state_changed.disconnect(self._on_events)
        for owned in self._owned:
            owned.close()
        self._volumes.close()
        self._planes.close()
        for kind in ("view", "thumbnail"):
            self.cache.release_view((self._id, kind))


def _reusable(
    request: ViewRequest, volumes: PreparedVolumes, planes: PreparedPlanes, retired: Shown | None
) -> Shown | None:
    """A buffer already showing `request`'s cells, assembled off the reading thread: a
    volume `prepare_volumes` loads, a frame ahead of a walk (`PreparedPlanes`), or the
    view napari just let go of (it reads the old 3D level as the thumbnail right after
    locking a finer one: measured, 16 chunks, 93 ms of copies on its main thread)."""
    found = volumes.find(request) or planes.take(request)
    if found is None and retired is not None and request.same_view(retired.request):
        return retired
    return found


def _behind(shown: Shown, views: Collection[Shown]) -> bool:
    """Whether another of the shown `views` is still to be assembled after `shown`: held,
    queued behind it on the dispatch thread (the 3D thumbnail of a t step, after the view).
    That one asks for the read once both are whole: napari reads both views in each slice,
    and in 3D uploads and paints the whole volume again (measured: the thumbnail's own
    refresh came 0.6 s after the view's, paced behind its paint, and doubled the time a t
    step took to complete)."""
    return any(view is not shown and view.assembling and view.held for view in views)


def _news(view: Shown | None, changed: Collection[Shown]) -> bool:
    """Whether a read now would answer something new after the `changed` views changed:
    not while the displayed `view` is still held, nor when each changed one is
    (`Shown.still_held`). napari would slice, and in 3D upload and paint, the same held
    frame again (measured: 3 slices a 2D t step, 3-4 a 3D one, where 2 show it whole)."""
    if view is not None and view.still_held():
        return False
    return not all(shown.still_held() for shown in changed)


def _load_latency(cache: ChunkCache) -> float:
    """The cache's mean load time of a chunk, in seconds (0 before any load)."""
    latency = float(cache.statistics.load_latency_mean)
    return latency if math.isfinite(latency) else 0.0


_controller_ids = itertools.count()
