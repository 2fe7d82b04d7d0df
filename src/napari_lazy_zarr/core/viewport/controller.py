"""The view controller: one layer's whole request cycle, Qt-free.

A viewer asks a layer for a region of one pyramid level many times a second.
`ViewController` answers each ask at once with an immutable frame and keeps
building newer frames as chunks land, in the shape of ndv's request model
(immutable request -> frame; stale work dropped by generation):

```
read(level, view)                      the viewer's thread (napari's main or slicing thread)
  -> ViewRequest(level, box over the STORE axes, displayed axes, generation)   immutable
  -> the latest frame of that view, if it has one (no copy), else a first frame
     (`assembly.first_frame`: resident chunks copied, placeholders elsewhere)
  -> answer the frame's data (read-only; a held frame of the previous plane on a z/t step
     whose plane has nothing to show yet)
  -> hand the request to the dispatch thread
dispatch thread (one per controller, the frames' one builder after the first):
     cache.request(needed, prefetch=..., ahead=...)        (cache events fire here)
     the next frame of each view that napari has read:  `assembly.next_frame`
        (a copy of the previous frame + the chunks that landed + stand-ins from coarser
        levels) -> published -> `view_changed`, at most once until the next read
     the frames of the planes ahead of a walk and of the volumes 3D will show
worker threads: decode into the cache; their events only wake the dispatch thread
```

The modules beside this one are pure: `axes` (the axis map, boxes, level
indices), `frames` (the request and frame types), `assembly` (building frames),
`fallback` (stand-ins) and `prefetch` (the ring, walks, levels).

**One writer per buffer.** A frame's pixels are written only while it is
built, by the thread building it, before anyone else can see it; then they are
read-only. A newer frame of the same view starts from a copy of the previous
one. So what napari holds never changes under it, and a frame's memory is
reused only once nothing references it (`assembly.FRAME_MEMORY`).

**A frame per read, not per landing.** The dispatch thread builds the next
frame of a view only once napari has read the previous one: however fast
chunks land, a view costs at most one frame copy per refresh napari makes.
A volume (three displayed axes) is rebuilt as its chunks land only when half
of what it still lacked has landed, or all of it: its copies are
hundreds of megabytes.

**One axis map.** A layer may show fewer axes than its store holds (an
OME-Zarr image with a channel axis becomes one layer per channel). `AxisMap`
is the one place that relates the layer's axes to the store's; requests,
fallbacks and prefetch sets are always boxes over the *store's* axes.

Thread contract: `read` may run on any thread and never waits on storage nor
emits cache events. `view_changed`, `failures_found`, `view_read` and
`volume_ready` are emitted from worker or dispatch threads; connect them with
`thread="main"` (psygnal) to touch a GUI. One lock guards the controller's
state (`_lock`, also the condition `wait_until_settled` sleeps on); it is
held while asking the cache what it holds (`ChunkCache.lookup_many` takes the
cache's lock: the order is always controller, then cache; the cache never calls
out with its lock held), never while building a frame, requesting chunks or
emitting a signal.

Failures are followed for every chunk of the layer's levels, not only those
on screen (`core.viewport.FailureLog`): the reports wait in `failures` until
taken, so those made before anything listened are not lost.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from typing import TYPE_CHECKING, Any, Final

from psygnal import Signal

from napari_lazy_zarr.core.executors import SerialDispatch
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS
from napari_lazy_zarr.core.states import ChunkState
from napari_lazy_zarr.core.viewport._coarser import CoarserPlan
from napari_lazy_zarr.core.viewport.assembly import (
    first_frame,
    held_frame,
    placeholder_frame,
)
from napari_lazy_zarr.core.viewport.axes import AxisMap, Box, view_box
from napari_lazy_zarr.core.viewport.building import FrameBuilder
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
)
from napari_lazy_zarr.core.viewport.requests import follow_overview, request_view
from napari_lazy_zarr.core.viewport.showing import Showing, ShownView
from napari_lazy_zarr.core.viewport.view_plans import ViewPlans
from napari_lazy_zarr.core.viewport.volumes import PreparedVolumes, volume_box

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.executors import Executor
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.reading.bounds import ViewBounds
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.states import ChunkEvent
    from napari_lazy_zarr.core.viewport.failures import ChunkFailure

__all__ = ["INLINE_VOLUME_BYTES", "ViewController"]

INLINE_VOLUME_BYTES: Final = 16 << 20
"""The largest first frame of a volume a read builds on its own thread, when every chunk
is resident (the switch to 3D after the 2D views loaded the coarsest level: measured,
16 MB of copies, 6-9 ms); a larger or incomplete one is built on the dispatch thread
while the read answers the placeholder (or holds the last plane's volume)."""


class ViewController:
    """One layer's request cycle: non-blocking reads of immutable frames, loading, signals.

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
        Where cache requests are issued from and frames built after the first
        (default: a thread of the controller's own); `InlineExecutor()`: in the
        reading thread, `ManualExecutor()`: when a test says.
    hold
        On a z/t step, answer the last presentable frame while the new plane lacks a
        complete backdrop (its chunks or a coarser level's): playback shows no placeholder.
    lookahead_share
        The share of the cache's capacity that loading ahead of a walk through z or t
        (playback) may take; the rest keeps the planes already seen.
    bounds
        How much one view may cost (`ViewBounds`): a view over them is served from a
        coarser level.

    Signals
    -------
    view_changed()
        A newer frame of a shown view is built: read it again. Emitted at most
        once until the next read, from the dispatch thread.
    failures_found(tuple[ChunkFailure, ...])
        Chunks of the layer's levels failed — on screen, prefetched or read
        ahead; each failure once, and again after a retry that fails again.
        The same reports wait in `failures` until taken
        (`FailureLog.take`): a consumer that may connect late takes them
        instead of relying on the payload.
    view_read(ViewFrame)
        A read was answered (emitted from the dispatch thread, after its request).
    volume_ready(int)
        A volume asked for by `prepare_volumes` is resident and its frame built:
        a viewer may switch to that level now without waiting (dispatch thread).

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
    >>> first.flags.writeable  # a frame is never written once handed out
    False
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
        bounds: ViewBounds = DEFAULT_BOUNDS,
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
        self.motion: PlaneMotion | None = None
        """The walk through z or t the latest reads make (None when the view is still)."""
        index = self.axis_map.store_index()
        # The layer's levels: each store level seen through the axis map.
        self.arrays = [ChunkedArray(source, cache)[index] for source in self.sources]
        self._id = next(_controller_ids)
        # The controller's one lock: a condition (`wait_until_settled` sleeps on it) over a
        # reentrant lock, shared by the parts below, each holding it only around its own
        # state and never while calling out.
        self._changed = threading.Condition()
        self._lock = self._changed
        self._plans = ViewPlans(self.sources, bounds, lock=self._lock)
        self._owned: SerialDispatch | None = None
        if dispatch is None:
            dispatch = self._owned = SerialDispatch(f"lazy-zarr-view-{name}")
        self._dispatch: Executor = dispatch
        self._volumes = PreparedVolumes(
            cache,
            self.sources,
            self.arrays,
            self.axis_map,
            owner=self._id,
            plan=self._plans.plan,
            dispatch=self._dispatch,
            ready=self._volume_ready,
            lock=self._lock,
        )
        self._planes = PreparedPlanes(
            cache, self.sources, self.arrays, self.axis_map, plan=self._plans.plan, lock=self._lock
        )
        self._tracker = MotionTracker(lock=self._lock)
        self._generation = 0
        self._shown = Showing(cache, self._changed)
        self._builder = FrameBuilder(
            self._shown,
            self.sources,
            self._planes,
            self._dispatch,
            signal=self.view_changed.emit,
            closed=lambda: self._closed,
        )
        self._closed = False
        self.latest: ViewFrame | None = None
        """The latest answered read of the displayed view (not the thumbnail)."""
        self.failures = FailureLog(self.sources, cache, lock=self._lock)
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
        """Whether nothing the latest reads lacked is still loading (all of it landed,
        or failed)."""
        return self._shown.complete()

    @property
    def settled(self) -> bool:
        """Complete, and the viewer applied a slice whose frames lack nothing that landed:
        the screen is final."""
        return self._shown.settled()

    @property
    def reads(self) -> int:
        """How many reads the controller answered."""
        return self._shown.reads

    @property
    def refresh_pending(self) -> bool:
        """A read now would answer a newer frame than the viewer was answered with."""
        return self._shown.refresh_pending()

    def wait_until_settled(self, timeout: float | None = None) -> bool:
        """Block until `settled` (True), or `timeout` seconds pass, or `close` (False if not).

        Event-driven, as napari's `_LayerSlicer.wait_until_idle`: the waiter sleeps on a
        condition woken by every read, landing, new frame and applied slice. Settling
        needs the viewer to read and apply a slice after the last landing (`slice_applied`):
        on a GUI's main thread keep its event loop running instead (`wait_until_complete`).
        """
        return self._shown.wait_until_settled(timeout, lambda: self._closed)

    # -- reading (any thread) -------------------------------------------------

    def read(
        self, level: int, view: ChunkedArray, *, kind: ViewKind | None = None
    ) -> np.ndarray[Any, Any]:
        """The values of `view` (a view of `arrays[level]`) now; never waits on storage.

        `kind` says which of napari's reads this is; by default a read of the
        coarsest level of a pyramid is the thumbnail, every other the view.
        The array returned is read-only and never changes.
        """
        # The request cycle (the module docstring): a new generation; the view as a
        # `ViewRequest` over the store's axes; `_answer` (a frame, on this thread); then
        # `_issue` on the dispatch thread (the cache request, then what is due to build).
        if kind is None:
            kind = (
                "thumbnail" if len(self.sources) > 1 and level == len(self.sources) - 1 else "view"
            )
        found = None if self.blocking else view_box(view)
        if found is None:  # blocking, or not a viewport: no frames, stand-ins or prefetch
            self._shown.read()
            if self.blocking:
                return view.result()
            data = view.read_nonblocking(requester=(self._id, kind), level=level).data
            data.flags.writeable = False  # a fresh array, never written again
            return data
        box, displayed = found
        with self._lock:
            self._generation += 1
            request = ViewRequest(level, box, displayed, self._generation, kind)
        if kind == "view":
            held = {axis for axis, _ in self.axis_map.fixed}
            planes = {a: box[a][0] for a in request.planes if a not in held}
            self.motion = self._tracker.observe(planes)
        answer = self._answer(request, view)
        self._dispatch.submit(functools.partial(self._issue, request))
        return answer.data

    def _answer(self, request: ViewRequest, view: ChunkedArray) -> ViewFrame:
        """The frame a read of `request` is answered with (see `read`)."""
        kind = request.kind
        with self._lock:
            slot = self._shown.views.get(kind)
            presentable = self._shown.presentable.get(kind) if self.hold else None
            if slot is not None and request.same_view(slot.request):
                slot.request = request  # the same cells: its frames answer it
            else:
                slot = None
            retired = self._shown.retired
        if slot is None:
            slot = self._new_slot(request, view, retired)
        stepped = presentable is not None and is_plane_step(presentable.request, request)
        with self._changed:
            frame = slot.frame
            if stepped and presentable is not None and not slot.presentable(frame):
                answer = _held(slot, frame, presentable)
            else:
                if frame is None:  # (built later unless stepped: the hold was switched off)
                    frame = slot.frame = placeholder_frame(request, slot.plan, self.sources)
                answer = frame
            self._shown.answered(kind, slot, answer, frame, volume=len(request.spatial) >= 3)
            if kind == "view" or len(self.sources) == 1:
                self.latest = answer
        return answer

    def _new_slot(
        self, request: ViewRequest, view: ChunkedArray, retired: ViewFrame | None
    ) -> ShownView:
        """A view not shown before: a frame prepared for it (a plane of a walk, a volume:
        its plan and frame were made off this thread), the view napari just let go of (it
        reads the old 3D level as the thumbnail right after locking a finer one), or its
        plan and a first frame."""
        volume = len(request.spatial) >= 3
        frame: ViewFrame | None
        prepared = self._volumes.find(request) or self._planes.take(request)
        if prepared is not None:
            plan, frame = prepared
        else:
            plan = self._plans.plan(request, view)
            if retired is not None and request.same_view(retired.request):
                frame = retired
            elif volume:
                frame = self._volume_first(request, plan)
            else:
                frame = first_frame(request, plan, self.cache, self.sources)
        composes = (
            not volume
            and not isinstance(plan, CoarserPlan)  # already a coarser level's cells
            and request.level < len(self.sources) - 1
        )
        slot = ShownView(request, plan, composes)
        slot.frame = frame
        return slot

    def _volume_first(self, request: ViewRequest, plan: ReadPlan) -> ViewFrame | None:
        """A volume's first frame, if the read makes it: None on a z/t step (the read
        holds the last plane's volume); built here only when every chunk is resident and it
        is small (`INLINE_VOLUME_BYTES`); else the placeholder. The dispatch thread builds
        the others."""
        with self._lock:
            presentable = self._shown.presentable.get(request.kind) if self.hold else None
        if presentable is not None and is_plane_step(presentable.request, request):
            return None
        keys = [ref.key for ref in plan.refs]
        ready, failed = self.cache.lookup_many(keys, partial=True)
        nbytes = math.prod(plan.buffer_shape) * self.sources[request.level].dtype.itemsize
        if len(ready) + len(failed) == len(keys) and nbytes <= INLINE_VOLUME_BYTES:
            return first_frame(request, plan, self.cache, self.sources)
        return placeholder_frame(request, plan, self.sources)

    # -- issuing and building (dispatch thread) -------------------------------

    def _issue(self, request: ViewRequest) -> None:
        """Request the view's chunks, then build what is due (`FrameBuilder.update`)."""
        if self._closed:
            return
        kind = request.kind
        with self._lock:
            slot, thumbnail = self._shown.views.get(kind), self._shown.views.get("thumbnail")
        if slot is None or slot.request.generation != request.generation:
            return  # a newer read of this view already answered (and will issue)
        # A refresh that finds nothing new is not planned again: the live request already
        # pins the same chunks and queues the same work. Anything that would change it
        # (a landing, an eviction of prefetched chunks, the walk, the prefetch switch)
        # makes a new one.
        counters = self.cache.counters()
        with self._lock:
            basis = (slot.frame, counters.evictions, self.motion, self.prefetch)
            renew, slot.issued = slot.issued != basis, basis
            answer = slot.answer
        if renew and not self._request(slot):
            return  # the cache was closed under us (viewer closing)
        latest = self.latest
        shown = None if latest is None else latest.request
        if (
            kind == "view"
            and thumbnail is not None
            and follow_overview(thumbnail, shown, self.sources, self._changed)
        ):
            self._request(thumbnail)  # a virtual thumbnail's part under the view changed
        if answer is not None:
            self.view_read.emit(answer)
            if answer.failed:  # FAILED before this controller followed the cache
                self._report(self.failures.adopt(answer.failed))
        self._builder.update()

    def _request(self, slot: ShownView) -> bool:
        """Ask the cache for `slot`'s chunks and what to load ahead (`request_view`), and
        prepare the next frames of a walk; False if the cache closed."""
        latest = self.latest
        ahead = request_view(
            self.cache,
            (self._id, slot.request.kind),
            slot,
            self.sources,
            view=None if latest is None else latest.request,
            lock=self._changed,
            prefetch=self.prefetch,
            held={axis for axis, _ in self.axis_map.fixed},
            ring=self._ring,
            motion=self.motion,
            lookahead_share=self.lookahead_share,
        )
        if ahead is None:
            return False  # the cache was closed under us (viewer closing)
        if slot.request.kind == "view":  # the next frames of a walk, built as they land
            with self._lock:
                thumbnail = self._shown.views.get("thumbnail")
            self._planes.follow(
                slot.request,
                None if thumbnail is None else thumbnail.request,
                self.motion if ahead else None,
                ahead,
            )
        return True

    # -- volumes (3D at a finer level) ----------------------------------------

    def volume_box(self, level: int) -> Box | None:
        """The latest view's planes at `level`, whole on its displayed axes (None before reads)."""
        latest = self.latest
        if latest is None:
            return None
        return volume_box(latest.request, [source.shape for source in self.sources], level)

    def volume_complete(self, level: int) -> bool:
        """Whether the volume of `level` at the latest view's planes has a whole frame."""
        frames = [slot.frame for slot in list(self._shown.views.values())]
        return self._volumes.complete(level, self.volume_box(level), frames)

    def prepare_volumes(self, levels: Sequence[int]) -> None:
        """Load the volumes of `levels` in the background and build their frames (any thread).

        Each is the latest view's planes at that level, whole on the displayed
        axes (`volume_box`): what napari reads for a level locked in 3D. Once its
        chunks have all landed its frame is built on the dispatch thread, and
        `volume_ready(level)` follows: a read of it then costs no copy.
        Replaces the previous call's volumes (their chunks are released);
        ``prepare_volumes(())`` stops preparing any.
        """
        wanted = tuple(levels)
        self._dispatch.submit(lambda: self._prepare(wanted))

    def _prepare(self, levels: tuple[int, ...]) -> None:
        if not self._closed and (latest := self.latest) is not None:
            shown = [slot.request for slot in list(self._shown.views.values())]
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
        if landed and self._concerns(landed):
            self._builder.wake()
        self._report(failures)

    def _concerns(self, landed: set[ChunkKey]) -> bool:
        """Whether `landed` chunks change a frame shown (`Showing.landed`) or prepared."""
        return self._shown.landed(landed, self.sources) or self._planes.wants(landed)

    def _report(self, failures: tuple[ChunkFailure, ...]) -> None:
        if failures and not self._closed:
            self.failures_found.emit(failures)

    # -- the viewer's side ----------------------------------------------------

    def slice_applied(self) -> None:
        """The viewer now shows a slice of the frames it was last answered with."""
        self._shown.applied()

    def nothing_shown(self) -> None:
        """The viewer shows none of the layer (its slice lies outside the layer's extent, so
        nothing was read for it): no view to fill in, complete and settled; the views'
        chunks are released."""
        with self._changed:
            self._shown.clear()
            self.latest = None
        self._dispatch.submit(self._release_views)  # cache events off the viewer's thread

    def _release_views(self) -> None:
        self.cache.release_view((self._id, "view"))
        self.cache.release_view((self._id, "thumbnail"))

    def refresh_skipped(self) -> None:
        """The viewer will not read again (layer hidden): stop waiting for it."""
        self._shown.skip()

    def close(self) -> None:
        """Stop following the cache and release the views' pinned chunks (idempotent)."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self.cache.state_changed.disconnect(self._on_events)
        if self._owned is not None:
            self._owned.close()
        self._volumes.close()
        self._planes.close()
        self._release_views()


def _held(slot: ShownView, frame: ViewFrame | None, shown: ViewFrame) -> ViewFrame:
    """The answer of a read that holds `shown` (the last presentable frame of another
    plane) while `slot`'s plane has nothing to show yet."""
    if frame is not None:
        return held_frame(frame, shown)
    keys = tuple(ref.key for ref in slot.plan.refs)
    return ViewFrame(
        slot.request, shown.data, keys, frozenset(keys), frozenset(), frozenset(), held=True
    )


_controller_ids = itertools.count()
