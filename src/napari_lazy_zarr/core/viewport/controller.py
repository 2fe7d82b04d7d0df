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

from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.executors import SerialDispatch
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS
from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.states import ChunkState
from napari_lazy_zarr.core.viewport._coarser import CoarserPlan
from napari_lazy_zarr.core.viewport.assembly import (
    first_frame,
    held_frame,
    next_frame,
    placeholder_frame,
)
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
    overview_shown,
    prefetch_ring,
    view_prefetch,
)
from napari_lazy_zarr.core.viewport.view_plans import ViewPlans
from napari_lazy_zarr.core.viewport.volumes import PreparedVolumes, volume_box

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.executors import Executor
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
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


class _Slot:
    """One view kind as the controller shows it (guarded by the controller's lock).

    `frame` is the newest frame built for `request`'s view (None while the
    dispatch thread builds the first one); `answer` what the latest read was
    answered with, `answered` the frame it was built from (`held`: the pixels
    of another plane stood in for it, `answered` may then be None).
    """

    __slots__ = (
        "answer",
        "answered",
        "applied",
        "composed",
        "composes",
        "deferred",
        "frame",
        "held",
        "issued",
        "plan",
        "recompose",
        "request",
        "requested",
    )

    def __init__(self, request: ViewRequest, plan: ReadPlan, composes: bool) -> None:
        self.request = request
        self.plan = plan
        self.composes = composes  # stand-ins from coarser levels are drawn into its frames
        self.frame: ViewFrame | None = None
        self.answer: ViewFrame | None = None
        self.answered: ViewFrame | None = None
        self.held = False
        self.applied: ViewFrame | None = None  # the answer the viewer showed last
        self.composed = False  # a frame with stand-ins was built since the view was new
        self.recompose = False  # a coarser chunk landed since the last stand-ins
        # What the latest cache request for it was made on (`ViewController._issue`).
        self.issued: tuple[object, ...] | None = None
        # A virtual thumbnail: the chunks the latest request asked for (None: all), and
        # those left out of it (`overview_shown`), not waited for.
        self.requested: frozenset[ChunkKey] | None = None
        self.deferred: frozenset[ChunkKey] = frozenset()

    def waiting(self, frame: ViewFrame) -> frozenset[ChunkKey]:
        """The chunks `frame` lacks that are still to land (not FAILED, not deferred)."""
        waiting = frame.waiting
        return waiting - self.deferred if self.deferred else waiting

    def presentable(self, frame: ViewFrame | None) -> bool:
        """Whether a read may show `frame` rather than hold another plane's."""
        return frame is not None and (frame.backdrop or not self.waiting(frame))

    def newer(self) -> bool:
        """Whether a read now would answer something other than the latest answer."""
        frame = self.frame
        if frame is None or frame is self.answered:
            return False
        return not self.held or self.presentable(frame)


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
            done=self._volume_landed,
            ready=self._volume_ready,
            lock=self._lock,
        )
        self._planes = PreparedPlanes(
            cache, self.sources, self.arrays, self.axis_map, plan=self._plans.plan, lock=self._lock
        )
        self._tracker = MotionTracker(lock=self._lock)
        self._generation = 0
        self._reads = 0
        self._slots: dict[ViewKind, _Slot] = {}
        self._presentable: dict[ViewKind, ViewFrame] = {}  # by kind: the last shown whole
        self._retired: ViewFrame | None = None  # the frame of the view a read let go of
        self._signalled = False  # view_changed emitted, no read since
        self._skipped = False  # the viewer said it will not read (a hidden layer)
        self._woken = False  # an update of the frames is queued on the dispatch thread
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
        with self._lock:
            return self._complete()

    @property
    def settled(self) -> bool:
        """Complete, and the viewer applied a slice whose frames lack nothing that landed:
        the screen is final."""
        with self._lock:
            return self._settled()

    @property
    def reads(self) -> int:
        """How many reads the controller answered."""
        with self._lock:
            return self._reads

    @property
    def refresh_pending(self) -> bool:
        """A read now would answer a newer frame than the viewer was answered with."""
        with self._lock:
            return any(slot.newer() for slot in self._slots.values())

    def wait_until_settled(self, timeout: float | None = None) -> bool:
        """Block until `settled` (True), or `timeout` seconds pass, or `close` (False if not).

        Event-driven, as napari's `_LayerSlicer.wait_until_idle`: the waiter sleeps on a
        condition woken by every read, landing, new frame and applied slice. Settling
        needs the viewer to read and apply a slice after the last landing (`slice_applied`):
        on a GUI's main thread keep its event loop running instead (`wait_until_complete`).
        """
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self._settled(), timeout)
            return self._settled()

    def _complete(self) -> bool:  # `_lock` held
        waiting: set[ChunkKey] = set()
        for slot in self._slots.values():
            if slot.frame is None:
                return False  # its first frame is being built
            waiting.update(slot.waiting(slot.frame))
        if not waiting:
            return True
        ready, failed = self.cache.lookup_many(waiting)
        return len(ready) + len(failed) == len(waiting)

    def _settled(self) -> bool:  # `_lock` held
        if self._skipped:
            return self._complete()
        keys: set[ChunkKey] = set()
        for slot in self._slots.values():
            answered = slot.answered
            if answered is None or slot.held or slot.applied is not slot.answer or slot.newer():
                return False  # the viewer does not show this view's newest frame yet
            keys.update(answered.missing - slot.deferred if slot.deferred else answered.missing)
        if not keys:
            return True
        # Final: everything the frames shown lack has FAILED (shown as the placeholder).
        _, failed = self.cache.lookup_many(keys)
        return len(failed) == len(keys)

    # -- reading (any thread) -------------------------------------------------

    def read(
        self, level: int, view: ChunkedArray, *, kind: ViewKind | None = None
    ) -> np.ndarray[Any, Any]:
        """The values of `view` (a view of `arrays[level]`) now; never waits on storage.

        `kind` says which of napari's reads this is; by default a read of the
        coarsest level of a pyramid is the thumbnail, every other the view.
        The array returned is read-only and never changes.
        """
        # The request cycle, in order:
        # 1. Open a new generation: every older answer of the view is stale from here on.
        # 2. Turn the view into a `ViewRequest` over the store's axes (a view that is not a
        #    box: read without stand-ins or prefetch); follow its walk (`MotionTracker`).
        # 3. `_answer`, on this thread: the view's latest frame, a frame prepared for it,
        #    or a first frame (only copies); a held frame while a stepped plane has
        #    nothing to show.
        # 4. Hand the request to the dispatch thread (`_issue`): ask the cache for its
        #    chunks, ring and look-ahead, then build what is due (`_update`).
        if kind is None:
            kind = (
                "thumbnail" if len(self.sources) > 1 and level == len(self.sources) - 1 else "view"
            )
        found = None if self.blocking else view_box(view)
        if found is None:  # blocking, or not a viewport: no frames, stand-ins or prefetch
            with self._changed:
                self._reads += 1
                self._signalled = False
                self._changed.notify_all()
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
            slot = self._slots.get(kind)
            presentable = self._presentable.get(kind) if self.hold else None
            if slot is not None and request.same_view(slot.request):
                slot.request = request  # the same cells: its frames answer it
            else:
                slot = None
            retired = self._retired
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
            slot.answer, slot.answered, slot.held = answer, frame, answer.held
            replaced = self._slots.get(kind)
            if replaced is not slot:
                self._slots[kind] = slot
                self._retired = None if replaced is None else replaced.frame
            if slot.presentable(frame) and (len(request.spatial) >= 3 or kind == "view"):
                assert frame is not None
                self._presentable[kind] = frame
            if kind == "view" or len(self.sources) == 1:
                self.latest = answer
            self._reads += 1
            self._signalled = self._skipped = False
            self._changed.notify_all()
        return answer

    def _new_slot(
        self, request: ViewRequest, view: ChunkedArray, retired: ViewFrame | None
    ) -> _Slot:
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
        slot = _Slot(request, plan, composes)
        slot.frame = frame
        return slot

    def _volume_first(self, request: ViewRequest, plan: ReadPlan) -> ViewFrame | None:
        """A volume's first frame, if the read makes it: None on a z/t step (the read
        holds the last plane's volume); built here only when every chunk is resident and it
        is small (`INLINE_VOLUME_BYTES`); else the placeholder. The dispatch thread builds
        the others."""
        with self._lock:
            presentable = self._presentable.get(request.kind) if self.hold else None
        if presentable is not None and is_plane_step(presentable.request, request):
            return None
        keys = [ref.key for ref in plan.refs]
        ready, failed = self.cache.lookup_many(keys)
        nbytes = math.prod(plan.buffer_shape) * self.sources[request.level].dtype.itemsize
        if len(ready) + len(failed) == len(keys) and nbytes <= INLINE_VOLUME_BYTES:
            return first_frame(request, plan, self.cache, self.sources)
        return placeholder_frame(request, plan, self.sources)

    # -- issuing and building (dispatch thread) -------------------------------

    def _issue(self, request: ViewRequest) -> None:
        """Request the view's chunks, then build what is due (`_update`)."""
        if self._closed:
            return
        kind = request.kind
        with self._lock:
            slot, thumbnail = self._slots.get(kind), self._slots.get("thumbnail")
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
        if kind == "view" and thumbnail is not None and self._follow(thumbnail):
            self._request(thumbnail)  # a virtual thumbnail shows others
        if answer is not None:
            self.view_read.emit(answer)
            if answer.failed:  # FAILED before this controller followed the cache
                self._report(self.failures.adopt(answer.failed))
        self._update()

    def _follow(self, thumbnail: _Slot) -> bool:
        """A virtual thumbnail's chunks under the displayed view (`overview_shown`), the
        others deferred (not waited for); whether that changed what it waits for."""
        if thumbnail.requested is None and not is_derived(self.sources[thumbnail.request.level]):
            return False
        latest = self.latest
        shown = None if latest is None else latest.request
        refs = overview_shown(thumbnail.request, thumbnail.plan.refs, shown, self.sources)
        keys = frozenset(ref.key for ref in refs)
        with self._changed:
            changed, thumbnail.requested = keys != thumbnail.requested, keys
            thumbnail.deferred = frozenset(ref.key for ref in thumbnail.plan.refs) - keys
            self._changed.notify_all()  # fewer chunks to wait for may complete the layer
        return changed

    def _request(self, slot: _Slot) -> bool:
        """Ask the cache for `slot`'s chunks and what to load ahead; False if it closed."""
        request = slot.request
        source = self.sources[request.level]
        prefetch: list[ChunkRef] = []
        ahead: list[ChunkRef] = []
        if self.prefetch and request.kind == "view" and not isinstance(slot.plan, CoarserPlan):
            # (A view served coarser is over its bounds: a ring at its own level would be
            # as unbounded as the view.)
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
        load_class, refs = LoadClass.NEEDED, slot.plan.refs
        if request.kind == "thumbnail" and is_derived(source):
            # A virtual coarsest level costs every stored chunk under it: overview work,
            # only as far as the view shows it, never starving the view's chunks.
            self._follow(slot)
            requested = slot.requested or frozenset()
            load_class = LoadClass.OVERVIEW
            refs = [ref for ref in slot.plan.refs if ref.key in requested]
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
        if request.kind == "view":  # the next frames of a walk, built as they land
            with self._lock:
                thumbnail = self._slots.get("thumbnail")
            self._planes.follow(
                request,
                None if thumbnail is None else thumbnail.request,
                self.motion if ahead else None,
                ahead,
            )
        return True

    def _wake(self) -> None:
        """Have the dispatch thread update the frames (at most one update queued)."""
        with self._lock:
            if self._woken or self._closed:
                return
            self._woken = True
        self._dispatch.submit(self._update)

    def _update(self) -> None:
        """Build the frames that are due: the next frame of each view napari has read,
        the first frame of a volume a read left to this thread, the frames of the planes
        ahead of a walk; signal `view_changed` if a read would now answer something new."""
        with self._lock:
            self._woken = False
            slots = list(self._slots.items())
        built = False
        for kind, slot in slots:
            built |= self._build(kind, slot)
        self._planes.build()
        if built:
            self._signal()

    def _build(self, kind: ViewKind, slot: _Slot) -> bool:
        """Publish `slot`'s next frame if one is due; whether one was."""
        with self._lock:
            if self._closed or self._slots.get(kind) is not slot:
                return False
            base = slot.frame
            if base is not slot.answered and slot.newer():
                return False  # napari has not read the latest frame yet: no frame is lost
            compose = slot.composes and (slot.recompose or not slot.composed)
            slot.recompose = False
        request = slot.request
        frame: ViewFrame | None
        if base is None:  # a volume a read left to this thread
            frame = first_frame(request, slot.plan, self.cache, self.sources)
        elif len(request.spatial) >= 3 and not self._volume_due(slot, base):
            return False
        else:
            frame = next_frame(base, slot.plan, self.cache, self.sources, compose=compose)
        if frame is None:
            return False
        with self._changed:
            if self._closed or self._slots.get(kind) is not slot or slot.frame is not base:
                return False  # replaced meanwhile: stale
            slot.frame = frame
            slot.composed |= compose
            self._changed.notify_all()
        return True

    def _volume_due(self, slot: _Slot, base: ViewFrame) -> bool:
        """Whether a volume's next frame is worth its copy: all it lacked has landed, or
        half of it (so a volume of n chunks is copied about log2(n) times, not n)."""
        waiting = slot.waiting(base)
        if not waiting:
            return bool(base.missing)  # a FAILED chunk retried and landed
        ready, failed = self.cache.lookup_many(waiting)
        landed = len(ready) + len(failed)
        return landed == len(waiting) or 2 * landed >= len(waiting)

    def _signal(self) -> None:
        """Emit `view_changed` if a read would answer something new and none was asked
        for since the last read. Not while another view still holds a plane it cannot show
        yet: napari reads both views in each slice, and in 3D uploads and paints the whole
        volume again (measured: a 3D thumbnail's own refresh 0.6 s after the view's
        doubled the time a t step took)."""
        with self._lock:
            slots = list(self._slots.values())
            if self._signalled or not any(slot.newer() for slot in slots):
                return
            if any(slot.held and not slot.presentable(slot.frame) for slot in slots):
                return
            self._signalled = True
        self.view_changed.emit()

    # -- volumes (3D at a finer level) ----------------------------------------

    def volume_box(self, level: int) -> Box | None:
        """The latest view's planes at `level`, whole on its displayed axes (None before reads)."""
        latest = self.latest
        if latest is None:
            return None
        return volume_box(latest.request, [source.shape for source in self.sources], level)

    def volume_complete(self, level: int) -> bool:
        """Whether the volume of `level` at the latest view's planes has a whole frame."""
        box = self.volume_box(level)
        with self._lock:
            frames = [slot.frame for slot in self._slots.values()]
        for frame in frames:
            if frame is not None and frame.request.level == level and frame.request.box == box:
                return not frame.missing
        return self._volumes.complete(level, box)

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
            with self._lock:
                shown = [slot.request for slot in self._slots.values()]
            self._volumes.prepare(levels, latest.request, shown)

    def _volume_landed(self, level: int) -> None:  # a worker thread
        if not self._closed:
            self._dispatch.submit(lambda: self._volumes.build(level))

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
            self._wake()
        self._report(failures)

    def _concerns(self, landed: set[ChunkKey]) -> bool:
        """Whether `landed` chunks change a frame shown or prepared (a worker thread); wakes
        the waiters either way, as `complete` may have changed."""
        coarser_sources = {key.source for key in landed}
        due = False
        with self._changed:
            self._changed.notify_all()
            for slot in self._slots.values():
                frame = slot.frame
                if frame is None:
                    continue
                if not landed.isdisjoint(frame.missing):
                    due = True
                if slot.composes and frame.waiting:
                    level = slot.request.level
                    coarser = {source.identity for source in self.sources[level + 1 :]}
                    if not coarser.isdisjoint(coarser_sources):
                        slot.recompose = due = True
        return due or self._planes.wants(landed)

    def _report(self, failures: tuple[ChunkFailure, ...]) -> None:
        if failures and not self._closed:
            self.failures_found.emit(failures)

    # -- the viewer's side ----------------------------------------------------

    def slice_applied(self) -> None:
        """The viewer now shows a slice of the frames it was last answered with."""
        with self._changed:
            for slot in self._slots.values():
                slot.applied = slot.answer
            self._changed.notify_all()

    def nothing_shown(self) -> None:
        """The viewer shows none of the layer (its slice lies outside the layer's extent, so
        nothing was read for it): no view to fill in, complete and settled; the views'
        chunks are released."""
        with self._changed:
            self._slots.clear()
            self._presentable.clear()
            self._retired = None
            self.latest = None
            self._signalled = False
            self._changed.notify_all()
        self._dispatch.submit(self._release_views)  # cache events off the viewer's thread

    def _release_views(self) -> None:
        for kind in ("view", "thumbnail"):
            self.cache.release_view((self._id, kind))

    def refresh_skipped(self) -> None:
        """The viewer will not read again (layer hidden): stop waiting for it."""
        with self._changed:
            self._skipped = True
            self._signalled = False
            self._changed.notify_all()

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


def _held(slot: _Slot, frame: ViewFrame | None, shown: ViewFrame) -> ViewFrame:
    """The answer of a read that holds `shown` (the last presentable frame of another
    plane) while `slot`'s plane has nothing to show yet."""
    if frame is not None:
        return held_frame(frame, shown)
    keys = tuple(ref.key for ref in slot.plan.refs)
    return ViewFrame(
        slot.request, shown.data, keys, frozenset(keys), frozenset(), frozenset(), held=True
    )


def _load_latency(cache: ChunkCache) -> float:
    """The cache's mean load time of a chunk, in seconds (0 before any load)."""
    latency = float(cache.statistics.load_latency_mean)
    return latency if math.isfinite(latency) else 0.0


_controller_ids = itertools.count()
