"""What a controller's viewer shows: per view kind, the frame built last and the answer.

`Showing` is the bookkeeping `ViewController` keeps under its one lock: for each
view kind (`ShownView`), the newest frame built for it and what the latest read
was answered with; the presentable frames a z/t step holds; whether a read now
would answer something newer (`refresh_pending`), whether nothing shown is
still loading (`complete`) and whether the screen is final (`settled`). Private
to the package's controller; the controller's public properties delegate here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Sequence

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.frames import ViewFrame, ViewKind, ViewRequest

__all__ = ["Showing", "ShownView"]


class ShownView:
    """One view kind as a controller shows it (guarded by the controller's lock).

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
        # What the latest cache request for it was made on (`ViewController`'s issue).
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


class Showing:
    """The views a controller shows and what its viewer was answered with (thread-safe).

    Every method takes `lock` (the controller's: a condition over a reentrant
    lock, so a caller already holding it may call them), asks the cache only
    through `ChunkCache.lookup_many` (the lock order: controller, then cache),
    and notifies `lock`'s waiters of every change.
    """

    def __init__(self, cache: ChunkCache, lock: threading.Condition) -> None:
        self.cache = cache
        self.lock = lock
        self.views: dict[ViewKind, ShownView] = {}
        self.presentable: dict[ViewKind, ViewFrame] = {}  # by kind: the last shown whole
        self.retired: ViewFrame | None = None  # the frame of the view a read let go of
        self.reads = 0
        self.signalled = False  # view_changed emitted, no read since
        self.skipped = False  # the viewer said it will not read (a hidden layer)

    def complete(self) -> bool:
        """Whether nothing the latest reads lacked is still loading (all of it landed,
        or failed)."""
        with self.lock:
            waiting: set[ChunkKey] = set()
            for view in self.views.values():
                if view.frame is None:
                    return False  # its first frame is being built
                waiting.update(view.waiting(view.frame))
            if not waiting:
                return True
            ready, failed = self.cache.lookup_many(waiting, partial=True)
            return len(ready) + len(failed) == len(waiting)

    def settled(self) -> bool:
        """Complete, and the viewer applied a slice of each view's newest frame, which
        lacks nothing that landed: the screen is final."""
        with self.lock:
            if self.skipped:
                return self.complete()
            keys: set[ChunkKey] = set()
            for view in self.views.values():
                answered = view.answered
                if (
                    answered is None
                    or view.held
                    or view.applied is not view.answer
                    or view.newer()
                ):
                    return False  # the viewer does not show this view's newest frame yet
                missing = answered.missing
                keys.update(missing - view.deferred if view.deferred else missing)
            if not keys:
                return True
            # Final: everything the frames shown lack has FAILED (shown as the placeholder).
            _, failed = self.cache.lookup_many(keys, partial=True)
            return len(failed) == len(keys)

    def refresh_pending(self) -> bool:
        """A read now would answer a newer frame than the viewer was answered with."""
        with self.lock:
            return any(view.newer() for view in self.views.values())

    def wait_until_settled(self, timeout: float | None, closed: Callable[[], bool]) -> bool:
        """Sleep on the lock until `settled`, `closed()` or `timeout`; whether settled."""
        with self.lock:
            self.lock.wait_for(lambda: closed() or self.settled(), timeout)
            return self.settled()

    def answered(
        self,
        kind: ViewKind,
        view: ShownView,
        answer: ViewFrame,
        frame: ViewFrame | None,
        *,
        volume: bool,
    ) -> None:
        """A read of `kind` was answered with `answer` (`frame`'s pixels, or a held frame's):
        `view` is the one shown now (the one it replaces retires); a presentable frame of
        the view, or of a volume, is what a later z/t step holds."""
        with self.lock:
            view.answer, view.answered, view.held = answer, frame, answer.held
            replaced = self.views.get(kind)
            if replaced is not view:
                self.views[kind] = view
                self.retired = None if replaced is None else replaced.frame
            if frame is not None and view.presentable(frame) and (volume or kind == "view"):
                self.presentable[kind] = frame
            self.read()

    def landed(self, landed: set[ChunkKey], sources: Sequence[ChunkSource]) -> bool:
        """Whether chunks that `landed` are ones a shown view's newest frame lacks, or of a
        level coarser than a view still drawing stand-ins (then marked to recompose); wakes
        the waiters either way, as `complete` may have changed (a worker thread)."""
        landed_sources = {key.source for key in landed}
        due = False
        with self.lock:
            self.lock.notify_all()
            for view in self.views.values():
                frame = view.frame
                if frame is None:
                    continue
                if not landed.isdisjoint(frame.missing):
                    due = True
                if view.composes and frame.waiting:
                    level = view.request.level
                    coarser = {source.identity for source in sources[level + 1 :]}
                    if not coarser.isdisjoint(landed_sources):
                        view.recompose = due = True
        return due

    def due(self, kind: ViewKind, view: ShownView) -> tuple[ViewFrame | None, bool] | None:
        """What `view`'s next frame builds on, and whether it composes stand-ins; None when
        `view` is no longer shown, or napari has not read its newest frame yet and the next
        would not complete it (then no frame is lost: the read asks for the next).

        A frame that completes the view is built at once, over one napari has not read
        (never handed out, it is dropped): the refresh napari was asked for then shows
        the complete view, where waiting for its read cost a second refresh cycle
        (measured over 200 ms HTTP: the view complete 0.2 s later, paced behind a paint).
        """
        with self.lock:
            if self.views.get(kind) is not view:
                return None
            base = view.frame
            if base is not view.answered and view.newer() and not self._completes(view, base):
                return None
            compose = view.composes and (view.recompose or not view.composed)
            view.recompose = False
            return base, compose

    def _completes(self, view: ShownView, base: ViewFrame | None) -> bool:
        """Whether everything `base` still waits for has landed (lock held)."""
        if base is None:
            return False
        waiting = view.waiting(base)
        if not waiting:
            return False
        ready, failed = self.cache.lookup_many(waiting, partial=True)
        return len(ready) + len(failed) == len(waiting)

    def publish(
        self,
        kind: ViewKind,
        view: ShownView,
        base: ViewFrame | None,
        frame: ViewFrame,
        composed: bool,
    ) -> bool:
        """`frame`, built on `base`, becomes `view`'s newest, unless `view` was replaced or
        got a newer frame meanwhile (stale: dropped); whether it did."""
        with self.lock:
            if self.views.get(kind) is not view or view.frame is not base:
                return False
            view.frame = frame
            view.composed |= composed
            self.lock.notify_all()
            return True

    def read(self) -> None:
        """A read was answered: the next change may be signalled again."""
        with self.lock:
            self.reads += 1
            self.signalled = self.skipped = False
            self.lock.notify_all()

    def signal(self) -> bool:
        """Whether to emit `view_changed` now: a read would answer something new, none was
        asked for since the last read, and no view still holds a plane it cannot show
        (napari reads both views in each slice, and in 3D uploads and paints the whole
        volume again: measured, a 3D thumbnail's own refresh 0.6 s after the view's
        doubled the time a t step took)."""
        with self.lock:
            views = list(self.views.values())
            if self.signalled or not any(view.newer() for view in views):
                return False
            if any(view.held and not view.presentable(view.frame) for view in views):
                return False
            self.signalled = True
            return True

    def applied(self) -> None:
        """The viewer shows a slice of the frames it was last answered with."""
        with self.lock:
            for view in self.views.values():
                view.applied = view.answer
            self.lock.notify_all()

    def skip(self) -> None:
        """The viewer will not read again (layer hidden): stop waiting for it."""
        with self.lock:
            self.skipped = True
            self.signalled = False
            self.lock.notify_all()

    def clear(self) -> None:
        """The viewer shows none of the views."""
        with self.lock:
            self.views.clear()
            self.presentable.clear()
            self.retired = None
            self.signalled = False
            self.lock.notify_all()
