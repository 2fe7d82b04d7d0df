"""napari glue: the arrays napari holds for a layer, and the refreshes that follow loading.

Policy lives in `core.viewport.ViewController`; this module only adapts it to napari.

**Two doors.** `LayerLevel` is one level as ``layer.data`` holds it, indexed
lazily: every reader of layer data — a plugin, a script, napari's console or
writers — gets the stored pixels from ``numpy.asarray``, blocking as a dask
array would (`ChunkedArray.result`: a read over the plan bounds is
`PlanTooLargeError`, a chunk that cannot be read `ChunkReadError`; never
partial pixels). napari's *display* — its slice requests and its thumbnail, at the
layer's construction, on each refresh, on napari's slicing thread — is told
apart by the function calling ``__array__`` (`_napari_compat.display_read`)
and answered by the layer's controller at once, with an immutable frame
(resident chunks, coarser levels or the fill value standing in) and a refresh
when more lands. When the controller
says the view changed, the layer is refreshed on the main thread (throttled).

In 3D napari shows a multiscale layer's coarsest level unless its public
`locked_data_level` says otherwise. `LayerLoader` locks it to the finest level
whose volume fits `volume_voxels` (`core.viewport.volume_level`, by what the
volume costs on every axis), through the levels `core.viewport.volume_steps`
names, and each only once its volume is resident and assembled off the main
thread (`ViewController.prepare_volumes`): napari then reads it without waiting.

Failed chunks become napari notifications (warnings), each failure once
(`core.viewport.FailureLog` groups a chunk and the chunks that failed because
of it; `_FailureReporter` the layers of one cache that met the same failure):
a few one by one, the rest of a storm as one summary per throttle period, the
period doubling while the storm lasts.
"""

from __future__ import annotations

import math
import sys
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr._napari_compat import (
    clear_thumbnail_copy,
    display_read,
    displayed_ndim,
    set_loading_indicator,
    shows_nothing,
)
from napari_lazy_zarr.core.settings import Settings, current_settings
from napari_lazy_zarr.core.viewport import level_chunks, volume_level, volume_steps

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from napari.layers import Layer

    from napari_lazy_zarr.core import ChunkedArray
    from napari_lazy_zarr.core.viewport import ChunkFailure, ViewController

__all__ = [
    "DEFAULT_VOLUME_VOXELS",
    "LayerLevel",
    "LayerLoader",
    "failure_message",
    "failure_summary",
    "loader_of",
    "wait_until_complete",
]

_REFRESH_MS = 33  # at most ~30 refreshes a second while a view fills in
_REFRESH_SHARE = 2  # ...and at most 1/(1 + this) of the main thread spent refreshing
_REFRESH_MAX_MS = 5000  # ...and a slow view shows its progress at least every 5 s
_VOLUME_MS = 100  # the 3D level is re-chosen at most ten times a second
_FAILURE_MS = 1000  # failures are reported at most once a second...
_FAILURE_MAX_MS = 30_000  # ...then, while summaries follow each other, ever less often
_FAILURE_BURST = 3  # failures shown one by one per cache within _FAILURE_WINDOW...
_FAILURE_WINDOW = 10.0  # ...seconds; the others are summarised
_FAILURES_TOLD = 1024  # root causes remembered across layers (each holds an exception)
# What to do, whatever the cause: a permanent error ("not retried" by the reader's policy) may
# still be read again once the data or the server is fixed, so never "not retryable".
_RETRY_HINT = (
    "It shows the fill value. To read it again (e.g. once the data is fixed): Plugins > "
    "napari-lazy-zarr > Chunk inspector > 'Retry all failed' (or click the chunk in its map), "
    "or cache.retry_failed() from Python."
)

DEFAULT_VOLUME_VOXELS = Settings().volume_voxels
"""The default voxel budget of a 3D view: 512³ fits common GPU 3D-texture limits (2048³
on most desktop GPUs; a 512³ float32 volume is 512 MiB, the texture napari uploads)."""


class LayerLevel:
    """One pyramid level as ``layer.data`` holds it: lazy indexing, two doors in `__array__`.

    ``numpy.asarray`` of it (or of any slice of it) returns the stored pixels,
    waiting for the chunks as a dask array would — unless the caller is napari's
    display slicing the layer (`_napari_compat.display_read`), which is answered
    at once by the layer's controller (see the module).
    """

    __slots__ = ("__weakref__", "array", "level", "loader")

    def __init__(self, loader: LayerLoader, level: int, array: ChunkedArray) -> None:
        self.loader, self.level, self.array = loader, level, array

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)
    ndim = property(lambda self: self.array.ndim)
    size = property(lambda self: self.array.size)

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key: Any) -> LayerLevel:
        return LayerLevel(self.loader, self.level, self.array[key])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        kind = display_read(sys._getframe(1), self, self.loader.layer)
        if kind is not None:  # napari's display: a frame, at once
            if self.loader.layer is None:
                _watch_for_layer()
            data = self.loader.controller.read(self.level, self.array, kind=kind)
        else:  # anyone else: the stored pixels, or the error
            data = self.array.result()
        return data if dtype is None else np.asarray(data, dtype=dtype)

    def __repr__(self) -> str:
        return f"LayerLevel(level={self.level}, shape={self.shape}, dtype={self.dtype})"


def _watch_for_layer() -> None:
    """napari's display reads a level no loader is attached to a layer for (data added with
    ``viewer.add_image``, or a viewer the reader never saw): watch the current viewer, so
    the layer is attached when inserted (or now, if it is) and refreshed as chunks land."""
    if threading.current_thread() is threading.main_thread():
        from napari_lazy_zarr._reader import watch_current_viewer

        watch_current_viewer()


class LayerLoader:
    """Ties a `ViewController` to the napari layer showing it (main thread only).

    Everything else about the layer's reads is the controller's
    (``loader.controller.cache``, ``.latest``, ``.view_keys``, ...).

    `volume_voxels` is the voxel budget of a 3D view (default
    `Settings.volume_voxels`: napari's Preferences, ``NAPARI_LAZY_ZARR_VOLUME_VOXELS``
    or the settings file, else `DEFAULT_VOLUME_VOXELS`); setting it re-chooses the
    level shown.
    """

    def __init__(self, controller: ViewController) -> None:
        self.controller = controller
        self.levels = [LayerLevel(self, i, a) for i, a in enumerate(controller.arrays)]
        self._layer: weakref.ReferenceType[Layer] | None = None
        self._throttle: Any = None
        self._volume_throttle: Any = None
        self._reporter: _FailureReporter | None = None
        self._slots: tuple[Callable[..., None], ...] | None = None
        self._locked: int | None = None  # the level we locked napari to in 3D
        self._volume_voxels = current_settings().volume_voxels

    @property
    def volume_voxels(self) -> int:
        return self._volume_voxels

    @volume_voxels.setter
    def volume_voxels(self, voxels: int) -> None:
        if voxels < 1:
            raise ValueError(f"volume_voxels must be >= 1, got {voxels}")
        self._volume_voxels = int(voxels)
        if self._volume_throttle is not None:
            self._volume_throttle()

    @property
    def settled(self) -> bool:
        """The layer shows its complete view (`ViewController.settled`)."""
        return self.controller.settled

    @property
    def complete(self) -> bool:
        """Nothing the layer's latest reads lacked is still loading (`ViewController.complete`)."""
        return self.controller.complete

    prefetch = property(
        lambda self: self.controller.prefetch,
        lambda self, on: setattr(self.controller, "prefetch", on),
    )
    blocking = property(
        lambda self: self.controller.blocking,
        lambda self, on: setattr(self.controller, "blocking", on),
    )

    @property
    def layer(self) -> Layer | None:
        return None if self._layer is None else self._layer()

    def attach(self, layer: Layer) -> None:
        """Refresh `layer` as chunks land, show its loading state, report failures once."""
        from psygnal.qt import start_emitting_from_queue
        from superqt.utils import qthrottled

        self._layer = weakref.ref(layer)
        start_emitting_from_queue(msec=10)
        self._throttle = qthrottled(self._refresh_layer, timeout=_REFRESH_MS, leading=True)
        self._volume_throttle = qthrottled(self._choose_volume, timeout=_VOLUME_MS)
        self._reporter = _FailureReporter.joining(self)
        # psygnal queues a worker's emission for the main thread holding only a weak
        # reference to the slot: one queued just before the layer is removed would find it
        # collected and raise ReferenceError in whatever next runs the event loop. These
        # plain functions are held strongly and look the loader up weakly.
        self._slots = _main_thread_slots(self)
        self.controller.view_changed.connect(self._slots[0], thread="main")
        self.controller.failures_found.connect(self._slots[1], thread="main")
        self.controller.volume_ready.connect(self._slots[2], thread="main")
        layer.events.set_data.connect(self._on_slice_applied)
        # napari sliced the layer (at its construction and on insertion) before it was
        # attached, and applied those slices: they are what it shows.
        self.controller.slice_applied()
        self._throttle()  # napari sliced before we were attached: show what landed since
        self._reporter.throttle()  # ... and report what failed since (kept until taken)

    def detach(self) -> None:
        """Stop refreshing the layer; release the views' pinned chunks; forget its chunks.

        napari calls it when the layer is removed. A removed layer's data is read
        again only if the layer itself is added back (a reopened store is a new
        identity), so the chunks of its sources that no other layer of the cache
        shows are evicted and forgotten (`ChunkCache.discard`): added back, the
        layer reads them again.
        """
        reporter = self._reporter
        others = [] if reporter is None else [ref() for ref in reporter.loaders]
        if self._slots is not None:
            self.controller.view_changed.disconnect(self._slots[0])
            self.controller.failures_found.disconnect(self._slots[1])
            self.controller.volume_ready.disconnect(self._slots[2])
            self._slots = None
        layer = self.layer
        if layer is not None:
            layer.events.set_data.disconnect(self._on_slice_applied)
        for throttle in (self._throttle, self._volume_throttle):
            if throttle is not None:
                throttle.cancel()
                throttle.deleteLater()
        if self._reporter is not None:
            self._reporter.leave(self)
        self._layer = self._throttle = self._volume_throttle = self._reporter = None
        self.controller.close()
        shown = {
            source.identity
            for loader in others
            if loader is not None and loader is not self
            for source in loader.controller.sources
        }
        gone = {source.identity for source in self.controller.sources} - shown
        if gone:
            self.controller.cache.discard(gone)

    def _view_changed(self) -> None:
        """Refresh the layer, paced (`_throttle`); at once if napari shows a held frame.

        Refreshes are paced by what each costs, paint included (a 3D repaint under
        llvmpipe: 170-300 ms, the next refresh 2x that later). A held frame stands
        for a z/t step the user waits for, and this refresh is the one that shows it:
        paced, it waited out the previous step's window (measured, 3D: 200-350 ms
        after the frame was whole). The window restarts here instead; a refresh
        pending in it is dropped, as this one reads all it would.
        """
        throttle, latest = self._throttle, self.controller.latest
        if throttle is None:
            return
        if latest is not None and latest.held:
            throttle.cancel()
            throttle.flush(restart_timer=False)  # the window ends: the call below leads
        throttle()

    def _refresh_layer(self) -> None:
        """Have napari read the layer again, unless it already applied a slice read after
        the change (`ViewController.refresh_pending`).

        The change signal waits for napari's main thread: a chunk of the 2D view that
        landed as the user switched to 3D asked for a refresh after napari's first
        3D paint, and napari read, uploaded and painted the same volume again
        (measured, software rendering: 1.9-2.7 s, while the finer level waited).
        """
        layer = self.layer
        if layer is None or not layer.visible:
            self.controller.refresh_skipped()
            return
        if not self.controller.refresh_pending:
            return  # napari showed it already
        clear_thumbnail_copy(layer)  # napari 2D keeps the coarsest level's frame
        from qtpy.QtCore import QTimer

        started = time.perf_counter()
        # Chunks landed: the values changed, not the layer's extent (napari's refresh would
        # recompute it and have the viewer update its dims for nothing), nor a highlight.
        layer.refresh(extent=False, highlight=False)
        # Measured up to the next event-loop pass, so the repaint it causes counts: a slow
        # one (a large volume's upload and rendering) spaces the next refreshes out.
        QTimer.singleShot(
            0,
            lambda: QTimer.singleShot(0, lambda: self._pace(time.perf_counter() - started)),
        )

    def _pace(self, cost: float) -> None:
        if self._throttle is not None:
            timeout = min(_REFRESH_MAX_MS, int(cost * 1e3 * _REFRESH_SHARE))
            self._throttle.setTimeout(max(_REFRESH_MS, timeout))

    def _on_slice_applied(self, event: Any = None) -> None:
        layer = self.layer
        if layer is not None and shows_nothing(layer):
            self.controller.nothing_shown()  # the slice lies outside the layer
        else:
            self.controller.slice_applied()
        # napari's layer-list loading indicator (after napari's own bookkeeping).
        set_loading_indicator(self.layer, self.controller.complete)
        layer = self.layer
        if (
            self._volume_throttle is not None
            and layer is not None
            and len(self.levels) > 1
            and (self._locked is not None or displayed_ndim(layer) == 3)
        ):
            self._volume_throttle()

    def volume_target(self) -> int | None:
        """The level 3D settles at: the finest within the budgets (None before a 3D read).

        `core.viewport.volume_level` over the levels' shapes and chunks, the
        voxel budget (`volume_voxels`) and half the cache's bytes.
        """
        controller = self.controller
        latest = controller.latest
        if latest is None or len(latest.request.spatial) != 3:
            return None
        return volume_level(
            [source.shape for source in controller.sources],
            latest.request.spatial,
            voxel_budget=self._volume_voxels,
            itemsize=controller.sources[0].dtype.itemsize,
            byte_budget=controller.cache.total_bytes_limit // 2,
            chunks=level_chunks(controller.sources),
        )

    def _choose_volume(self) -> None:
        """Lock napari's 3D level to the finest complete one within budget; load the next.

        Coarse to fine: the layer shows the finest level, no finer than the
        budget allows, whose volume at the current planes is assembled; the
        finer ones up to the budget load in the background, and each is shown
        when it is ready (`volume_ready`). In 2D the lock is lifted.
        """
        layer = self.layer
        controller = self.controller
        if layer is None:
            return
        if displayed_ndim(layer) != 3:
            controller.prepare_volumes(())
            if self._locked is not None and layer.locked_data_level == self._locked:
                layer.locked_data_level = None
            self._locked = None
            return
        latest = controller.latest
        if latest is None or len(latest.request.spatial) != 3:
            return  # napari has not read a volume yet
        locked = layer.locked_data_level
        if locked is not None and locked != self._locked:
            return  # the user locked a level: theirs to choose
        shapes = [source.shape for source in controller.sources]
        chunks = level_chunks(controller.sources)
        spatial = latest.request.spatial
        target = self.volume_target()
        if target is None:
            return
        coarsest = len(self.levels) - 1
        complete = [
            level for level in range(target, coarsest + 1) if controller.volume_complete(level)
        ]
        if complete:
            best = min(complete)
            wanted = None if best == coarsest else best  # None: napari's own 3D level
            if wanted != locked:
                self._locked = wanted
                layer.locked_data_level = wanted  # napari re-slices: the volume is ready
        else:
            # A step to planes not loaded at any level: the view holds its last volume
            # (`ViewController` hold) while they load, coarsest first.
            best = coarsest + 1
        # Coarse to fine, only the levels markedly cheaper than the next (`volume_steps`).
        steps = volume_steps(shapes, spatial, target, chunks=chunks)
        if best > coarsest:
            steps = (coarsest, *steps)
        controller.prepare_volumes([level for level in steps if level < best])

    def flush_failures(self) -> None:
        """Report now what the failure throttle holds back (a test hook, as superqt's `flush`)."""
        if self._reporter is not None:
            self._reporter.throttle.flush()


class _FailureReporter:
    """Turns the failures of the layers read through one cache into napari warnings.

    One per cache, on the main thread: layers over the same data (the channels
    of one image, a plate field shown in each channel's layer) fail with the
    same exception, and one warning names them all. Runs throttled; a few
    failures are shown one by one per `_FAILURE_WINDOW`, the rest as one
    summary, and the period doubles after each summary (up to
    `_FAILURE_MAX_MS`) until a call without one, so a long storm makes a few
    warnings, not one a second.
    """

    def __init__(self, cache: Any) -> None:
        from superqt.utils import qthrottled

        self.cache = weakref.ref(cache)
        self.loaders: list[weakref.ReferenceType[LayerLoader]] = []
        self.notified: deque[float] = deque()  # when failures were last shown one by one
        # Root causes already told (held: their ids stay unique), so that another layer
        # meeting the same one later (the next channel of a plate) is not told again.
        self.told: OrderedDict[int, BaseException] = OrderedDict()
        self.throttle = qthrottled(self.report, timeout=_FAILURE_MS, leading=True)

    @classmethod
    def joining(cls, loader: LayerLoader) -> _FailureReporter:
        cache = loader.controller.cache
        reporter = _reporters.get(cache)
        if reporter is None:
            reporter = _reporters[cache] = cls(cache)
        reporter.loaders.append(weakref.ref(loader))
        return reporter

    def leave(self, loader: LayerLoader) -> None:
        self.loaders = [ref for ref in self.loaders if ref() not in (None, loader)]
        if not self.loaders:  # the last layer of this cache: no timer outlives it
            cache = self.cache()
            if cache is not None and _reporters.get(cache) is self:
                del _reporters[cache]
            self.throttle.cancel()
            self.throttle.deleteLater()

    def report(self) -> None:
        from napari.utils.notifications import show_warning

        # One failure per root cause, with every layer that met it.
        causes: dict[int, tuple[list[str], list[ChunkFailure]]] = {}
        for ref in self.loaders:
            loader = ref()
            if loader is None:
                continue
            controller = loader.controller
            for failure in controller.failures.take():
                cause = failure.cause
                if id(cause) in self.told and not failure.again:
                    continue
                names, failures = causes.setdefault(id(cause), ([], []))
                if controller.name not in names:
                    names.append(controller.name)
                failures.append(failure)
        if not causes:
            return
        for _, failures in causes.values():
            self.told[id(failures[0].cause)] = failures[0].cause
        while len(self.told) > _FAILURES_TOLD:
            self.told.popitem(last=False)
        now = time.monotonic()
        while self.notified and now - self.notified[0] > _FAILURE_WINDOW:
            self.notified.popleft()
        budget = max(0, _FAILURE_BURST - len(self.notified))
        groups = list(causes.values())
        for names, failures in groups[:budget]:
            again = any(failure.again for failure in failures)
            show_warning(failure_message(names, replace(failures[0], again=again)))
            self.notified.append(now)
        rest = groups[budget:]
        if rest:
            names = list(dict.fromkeys(name for group, _ in rest for name in group))
            show_warning(failure_summary(names, [failures[0] for _, failures in rest]))
        timeout = min(_FAILURE_MAX_MS, self.throttle.timeout() * 2) if rest else _FAILURE_MS
        self.throttle.setTimeout(timeout)


_reporters: weakref.WeakKeyDictionary[Any, _FailureReporter] = weakref.WeakKeyDictionary()
"""The failure reporter of each cache that attached layers read through."""


def _main_thread_slots(
    loader: LayerLoader,
) -> tuple[Callable[..., None], Callable[..., None], Callable[..., None]]:
    """Slots for the controller's main-thread signals that do not keep `loader` alive."""
    ref = weakref.ref(loader)

    def view_changed(*_: Any) -> None:
        alive = ref()
        if alive is not None:
            alive._view_changed()

    def failures_found(*_: Any) -> None:
        # The payload is not used: the reports wait in the controller until taken.
        alive = ref()
        if alive is not None and alive._reporter is not None:
            alive._reporter.throttle()

    def volume_ready(*_: Any) -> None:
        alive = ref()
        if alive is not None and alive._volume_throttle is not None:
            alive._volume_throttle()

    return view_changed, failures_found, volume_ready


def failure_message(layers: Sequence[str], failure: ChunkFailure) -> str:
    """The notification of one failed chunk: the layer, the chunk, the cause, what to do.

    Examples
    --------
    >>> from napari_lazy_zarr.core import ChunkKey
    >>> from napari_lazy_zarr.core.viewport import ChunkFailure
    >>> key = ChunkKey("a.zarr/0", (0, 256), (256, 512))
    >>> message = failure_message(["a"], ChunkFailure(key, 0, (0, 1), OSError("bad bytes")))
    >>> print(message.split(" It shows")[0])
    napari-lazy-zarr: layer 'a': chunk L0 (0, 1) [0:256, 256:512] failed to load: bad bytes.
    >>> "Retry all failed" in message
    True
    """
    what = "failed again after retry" if failure.again else "failed to load"
    return (
        f"napari-lazy-zarr: {_layers(layers)}: chunk {failure.chunk} {what}: "
        f"{failure.error}. {_RETRY_HINT}"
    )


def failure_summary(layers: Sequence[str], failures: Sequence[ChunkFailure]) -> str:
    """One notification for many failures: how many, the most common cause, what to do.

    Examples
    --------
    >>> from napari_lazy_zarr.core import ChunkKey
    >>> from napari_lazy_zarr.core.viewport import ChunkFailure
    >>> failures = [
    ...     ChunkFailure(ChunkKey("a", (i,), (i + 1,)), 0, (i,), OSError("bad")) for i in range(5)
    ... ]
    >>> summary = failure_summary(["a"], failures)
    >>> summary.startswith("napari-lazy-zarr: layer 'a': 5 more chunks failed to load")
    True
    >>> "(most common cause: OSError: bad — 5 of 5)" in summary
    True
    """
    causes = Counter(failure.cause_text for failure in failures)
    text, count = causes.most_common(1)[0]
    if count == 1 and len(failures) > 1:  # each names its own chunk: count the kinds
        kinds = Counter(type(failure.cause).__name__ for failure in failures)
        kind, count = kinds.most_common(1)[0]
        text = next(f.cause_text for f in failures if type(f.cause).__name__ == kind)
        text = f"{kind}, e.g. {text}"
    again = sum(failure.again for failure in failures)
    retried = f"; {again} of them again after retry" if again else ""
    chunks = "chunk" if len(failures) == 1 else "chunks"
    return (
        f"napari-lazy-zarr: {_layers(layers)}: {len(failures)} more {chunks} failed to load "
        f"(most common cause: {text} — {count} of {len(failures)}{retried}). {_RETRY_HINT}"
    )


def _layers(names: Sequence[str]) -> str:
    if len(names) == 1:
        return f"layer {names[0]!r}"
    return "layers " + ", ".join(repr(name) for name in names)


def wait_until_complete(viewer: Any, timeout: float = 60.0) -> bool:
    """Run napari's event loop until every plugin layer shows its complete view (main thread).

    For scripts and screenshots; False if `timeout` seconds pass first.
    Event-driven: Qt's event loop runs, since the refreshes, slices and paints
    that settle a layer happen on this thread, while a helper thread sleeps in
    each layer's `ViewController.wait_until_settled` and ends the loop once they
    have all settled (or at the deadline). Nothing polls.
    """
    from napari.qt import get_qapp

    app, deadline = get_qapp(), time.monotonic() + timeout
    app.processEvents()
    while True:
        controllers = [
            loader.controller for layer in viewer.layers if (loader := loader_of(layer))
        ]
        if all(controller.settled for controller in controllers):
            app.processEvents()
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        _run_until_settled(controllers, remaining)


def _run_until_settled(controllers: Sequence[ViewController], timeout: float) -> None:
    """Run a Qt event loop until `controllers` have all settled, or `timeout` seconds pass.

    A worker of the process's pool sleeps in each controller's `wait_until_settled` and
    quits the loop (queued: on the loop's own thread) once all have settled, or at the
    deadline; the loop also ends at the deadline on its own.
    """
    from qtpy.QtCore import QEventLoop, QMetaObject, Qt, QTimer

    from napari_lazy_zarr.core.executors import worker_pool

    loop = QEventLoop()
    deadline = time.monotonic() + timeout

    def wait() -> None:
        for controller in controllers:
            if not controller.wait_until_settled(max(0.0, deadline - time.monotonic())):
                break
        QMetaObject.invokeMethod(loop, "quit", Qt.ConnectionType.QueuedConnection)

    timer = QTimer()
    timer.setSingleShot(True)
    timer.timeout.connect(loop.quit)
    timer.start(max(1, math.ceil(timeout * 1000)))
    worker_pool().run(wait, name="lazy-zarr-wait-until-complete")
    loop.exec()
    timer.stop()


def loader_of(layer: Layer) -> LayerLoader | None:
    """The loader behind a napari layer created from this plugin's data, else None."""
    data: Any = getattr(layer, "data", None)
    # napari wraps a multiscale layer's levels in its own sequence type (MultiScaleData).
    first = data[0] if getattr(layer, "multiscale", False) and len(data) else data
    return first.loader if isinstance(first, LayerLevel) else None
