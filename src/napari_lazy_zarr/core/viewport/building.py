"""The frames a controller builds on its dispatch thread after a view's first.

`FrameBuilder.update` builds each view's next frame once napari has read the
previous one (`Showing.due`: a frame per read, not per landing), the first frame
of a volume a read left to this thread, and the frames of the planes ahead of a
walk (`PreparedPlanes.build`), then asks for a read when one would answer
something new (`Showing.signal`). `wake` queues one update (at most one waits on
the dispatch thread however many chunks land meanwhile).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from napari_lazy_zarr.core.viewport.assembly import first_frame, next_frame, volume_due

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from napari_lazy_zarr.core.executors import Executor
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.frames import ViewFrame, ViewKind
    from napari_lazy_zarr.core.viewport.planes import PreparedPlanes
    from napari_lazy_zarr.core.viewport.showing import Showing, ShownView

__all__ = ["FrameBuilder"]


class FrameBuilder:
    """Builds a controller's frames that are due, on its dispatch thread.

    `wake` may be called on any thread (a worker that landed a chunk); `update`
    runs on the dispatch thread, one at a time, building outside any lock and
    publishing through `Showing` (its lock). `signal` is called there when a read
    would now answer something new.
    """

    def __init__(
        self,
        shown: Showing,
        sources: Sequence[ChunkSource],
        planes: PreparedPlanes,
        dispatch: Executor,
        *,
        signal: Callable[[], None],
        closed: Callable[[], bool],
    ) -> None:
        self._shown = shown
        self._sources = sources
        self._planes = planes
        self._dispatch = dispatch
        self._signal = signal
        self._closed = closed
        self._woken = False  # an update is queued on the dispatch thread

    def wake(self) -> None:
        """Have the dispatch thread update the frames (at most one update queued)."""
        with self._shown.lock:
            if self._woken or self._closed():
                return
            self._woken = True
        self._dispatch.submit(self.update)

    def update(self) -> None:
        """Build the frames that are due: the next frame of each view napari has read,
        the first frame of a volume a read left to this thread, the frames of the planes
        ahead of a walk; signal if a read would now answer something new."""
        with self._shown.lock:
            self._woken = False
            views = list(self._shown.views.items())
        built = False
        for kind, view in views:
            built |= self._build(kind, view)
        self._planes.build()
        if built and self._shown.signal():
            self._signal()

    def _build(self, kind: ViewKind, view: ShownView) -> bool:
        """Publish `view`'s next frame if one is due (`Showing.due`); whether one was."""
        due = None if self._closed() else self._shown.due(kind, view)
        if due is None:
            return False
        base, compose = due
        cache, sources = self._shown.cache, self._sources
        frame: ViewFrame | None
        if base is None:  # a volume a read left to this thread
            frame = first_frame(view.request, view.plan, cache, sources)
        elif len(view.request.spatial) >= 3 and not volume_due(base, view.waiting(base), cache):
            return False
        else:
            frame = next_frame(base, view.plan, cache, sources, compose=compose)
        return frame is not None and self._shown.publish(kind, view, base, frame, compose)
