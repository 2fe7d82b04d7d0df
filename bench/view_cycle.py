"""The view benchmark: time until napari shows a complete view, and its main-thread cost.

Three measurements in a real `napari.Viewer(show=True)` (under a display, Xvfb),
for this plugin and its peers, napari's built-in reader (dask) and
napari-ome-zarr (dask; OME-Zarr only):

1. **remote**: time until the visible view is complete over HTTP. The project's
   test server (`tests.remote.server.FaultyServer`, in the parent process on
   127.0.0.1, with `bench.remote.serve`'s deeper listen backlog) adds
   `Case.latency` to every request. Stores: a 16384² uint16 *plain* Zarr v3
   array (no pyramid, 512² chunks) and the same image as an OME-Zarr pyramid
   (`write_sample_ome_zarr`). The worker opens the URL
   (`viewer.open(url, plugin=...)`), sets the camera to one screen pixel per
   level-0 pixel at the image centre (napari displays level 0), calls
   ``canvas.on_draw(None)``, then runs the event loop until the view is
   complete: the first slice napari applies whose pixels under the canvas
   equal the data (the dask readers slice on the main thread, so theirs is the
   slice `on_draw` returns); ours runs on until `loader.settled`, which also
   waits for the layer's thumbnail. napari's built-in reader
   cannot open a remote group: it opens the plain array and level 0 of the
   pyramid (both single-scale). Ours runs with prefetch off and with the
   plugin's default (prefetch on).
2. **local**: main-thread time per step, 2D and 3D, on a 4D (t, z, y, x)
   OME-Zarr pyramid written by ome-zarr-py (`ome_zarr.writer.write_image`),
   read from local disk by every reader. 2D at full resolution: pan steps of
   256 px, then z steps, then t steps (`viewer.dims.set_current_step`); 3D
   (`viewer.dims.ndisplay = 3`, napari shows the coarsest level): camera
   rotation steps, then t steps. Per step: the main thread's time in the
   layer's slicing calls (`bench.napari_pan._Probe`), the longest event-loop
   stall (a 5 ms `QTimer` records the gaps between its ticks), and the time
   until the view is complete. The cost of one repaint of the same displayed
   data (`bench.napari_pan._paint_seconds`) is measured per reader in 2D and
   3D: Mesa llvmpipe renders volumes in software, so a stall includes paints
   that no reader can avoid here.
3. **open**: main-thread time to open the OME-Zarr pyramid of (1) over 100 ms
   HTTP: `viewer.open` (napari runs the reader and the first slice on the main
   thread) plus the first ``canvas.on_draw(None)`` at napari's home view.

*ours* also runs as the revision before issue 24 (`bench.PREVIOUS`), its package
from a temporary worktree (`bench.previous_package`) beside this checkout's bench
code, in every case and round: the A/B against the previous revision in the same
run.

Every (reader, case) pair runs in its own subprocess (``python -m
bench.view_cycle SPEC``: a fresh viewer and caches, napari settings from an
empty file, napari's default synchronous slicing), in rounds with the order of
the readers rotated (`bench.interleaved`). Each remote or open run has a
deadline counted from the `viewer.open` call (`Config.view_timeout`); a run
that misses it is killed and reported as "> N s". A remote pair whose first
view took longer than `Config.repeat_limit` from the open call or was killed (a
dask reader reading a whole 16384² plane, one chunk per request, 2 at a time)
is not repeated in later rounds: its time is latency x requests / 2 and varies
little. The requests the server received
are timestamped (`time.monotonic`, the same clock in every process on Linux)
and assigned to the worker's phases (open, view). Every run's displayed pixels
(`layer._slice.image.raw` at `layer.corner_pixels`) are compared with NumPy:
`synthetic_cells` for the 2D stores, the stored level read with zarr-python for
the 4D store.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from bench import (
    DATA_DIR,
    PREVIOUS,
    ROOT,
    Window,
    check_package,
    environment_line,
    generated_store,
    interleaved,
    markdown_table,
    package_env,
    previous_package,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import numpy as np

__all__ = ["FULL", "QUICK", "Config", "run"]

OPEN_LATENCY: Final = 0.1
"""Seconds per request of the open measurement (3)."""
TARGET_VIEW: Final = 5.0
TARGET_STEP_MAX: Final = 0.050
TARGET_STEP_MEDIAN_2D: Final = 0.005
TARGET_OPEN: Final = 1.0


# -- configuration -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Sizes, steps and repetition counts of one benchmark mode."""

    mode: Literal["full", "quick"]
    size: int
    """The 2D image (remote, open) is `size` x `size` pixels at level 0."""
    latencies: tuple[float, ...]
    """Seconds the server adds to every request, per remote case."""
    volume: tuple[int, int, int, int]
    """(t, z, y, x) of the 4D store (local)."""
    pan_steps: int
    z_steps: int
    t_steps: int
    rotations: int
    volume_t_steps: int
    rounds: int
    view_timeout: float
    """Seconds from the `viewer.open` call until a remote or open run is killed."""
    repeat_limit: float
    """A pair whose first view took longer than this (seconds from the open call, or
    was killed) is not repeated."""
    chunk: int = 512
    volume_chunks: tuple[int, int, int, int] = (1, 16, 256, 256)
    scale_factors: tuple[int, ...] = (2, 4)
    canvas: tuple[int, int] = (1200, 900)
    """Canvas width and height in screen pixels."""
    pan_step: int = 256
    rotation_step: float = 15.0
    """Degrees per 3D rotation step (the camera's second Euler angle)."""
    dwell: float = 0.15
    """Seconds of idle event loop between steps (ours prefetches then)."""
    startup_timeout: float = 90.0
    """Seconds a worker may take to start napari before its deadline starts."""
    local_timeout: float = 400.0
    """Seconds a local run may take in all."""


FULL: Final = Config(
    "full",
    size=16384,
    latencies=(0.1, 0.2),
    volume=(5, 64, 2048, 2048),
    pan_steps=8,
    z_steps=8,
    t_steps=4,
    rotations=6,
    volume_t_steps=4,
    rounds=3,
    view_timeout=45.0,
    repeat_limit=30.0,
)
QUICK: Final = Config(
    "quick",
    size=4096,
    latencies=(0.1, 0.2),
    volume=(5, 16, 2048, 2048),
    pan_steps=3,
    z_steps=2,
    t_steps=2,
    rotations=2,
    volume_t_steps=2,
    rounds=1,
    view_timeout=60.0,
    repeat_limit=30.0,
)


@dataclass(frozen=True, slots=True)
class Reader:
    """One way of opening a store in napari."""

    label: str
    plugin: str
    prefetch: bool = True
    """Ours only: the plugin's default prefetch of the chunks around the view."""
    revision: str | None = None
    """Ours only: the git revision whose package runs (None: this checkout's)."""

    @property
    def ours(self) -> bool:
        return self.plugin == "napari-lazy-zarr"


OURS: Final = Reader("ours", "napari-lazy-zarr")
OURS_PREVIOUS: Final = Reader(f"ours {PREVIOUS} (previous)", "napari-lazy-zarr", revision=PREVIOUS)
OURS_NO_PREFETCH: Final = Reader("ours, prefetch off", "napari-lazy-zarr", prefetch=False)
OME_ZARR: Final = Reader("napari-ome-zarr", "napari-ome-zarr")
BUILTIN: Final = Reader("napari builtin", "napari")
READERS: Final = (OURS, OURS_PREVIOUS, OURS_NO_PREFETCH, OME_ZARR, BUILTIN)

type Kind = Literal["remote", "open", "local"]
type Store = Literal["plain", "pyramid", "volume"]


@dataclass(frozen=True, slots=True)
class Case:
    """What one worker measures: `kind` on `store`, with `latency` per request (HTTP)."""

    kind: Kind
    store: Store
    latency: float = 0.0
    warm_up: bool = False
    """Open a small other store first, untimed: the session's one-time costs paid."""

    @property
    def label(self) -> str:
        if self.kind == "local":
            return "local 4D"
        session = ", warm session" if self.kind == "open" and self.warm_up else ""
        return f"{self.kind} {self.store} {self.latency * 1e3:.0f} ms{session}"

    def applies(self, reader: Reader) -> bool:
        if self.kind == "remote":
            return not (reader is OME_ZARR and self.store == "plain")
        if self.kind == "open":
            return reader in (OURS, OURS_PREVIOUS, OME_ZARR)
        return reader in (OURS, OURS_PREVIOUS, OME_ZARR, BUILTIN)


def cases(config: Config) -> list[Case]:
    remote = [
        Case("remote", store, latency, warm_up=True)
        for latency in config.latencies
        for store in ("plain", "pyramid")
    ]
    opening = [Case("open", "pyramid", OPEN_LATENCY, warm_up=warm) for warm in (False, True)]
    return [*remote, *opening, Case("local", "volume")]


# -- data ----------------------------------------------------------------------------

PLAIN: Final = "plain.zarr"
PYRAMID: Final = "cells.ome.zarr"
VOLUME: Final = "volume.ome.zarr"
WARM_UP: Final = "warm-up.ome.zarr"


def data_root(config: Config) -> Path:
    """The directory the server serves (and the local store lives in)."""
    return DATA_DIR / "view" / config.mode


def _codec() -> Any:
    from zarr.codecs import BloscCodec

    # The codec of `write_sample_ome_zarr`: the two 2D stores differ only in the pyramid.
    return BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")


def ensure_plain(config: Config) -> Path:
    """The plain Zarr v3 array (no pyramid), written in strips of one chunk row."""
    import zarr

    from napari_lazy_zarr.core.sample import synthetic_cells

    path = data_root(config) / PLAIN
    params = {"generator": "synthetic_cells", "size": config.size, "chunk": config.chunk}

    def write() -> None:
        array = zarr.create_array(
            str(path),
            shape=(config.size, config.size),
            chunks=(config.chunk, config.chunk),
            dtype="uint16",
            compressors=_codec(),
            fill_value=0,
            zarr_format=3,
        )
        for y0 in range(0, config.size, config.chunk):
            array[y0 : y0 + config.chunk] = synthetic_cells(y0, 0, (config.chunk, config.size))

    return generated_store(path, params, write, "view")


def ensure_pyramid(config: Config) -> Path:
    """The same image as an OME-Zarr 0.5 pyramid (`write_sample_ome_zarr`)."""
    from napari_lazy_zarr.core.sample import write_sample_ome_zarr

    path = data_root(config) / PYRAMID
    params = {"generator": "write_sample_ome_zarr", "size": config.size, "chunk": config.chunk}

    def write() -> None:
        write_sample_ome_zarr(path, size=config.size, chunk=config.chunk)

    return generated_store(path, params, write, "view")


def ensure_warm_up(config: Config) -> Path:
    """A small OME-Zarr pyramid that warm-up opens read (1024², two levels)."""
    from napari_lazy_zarr.core.sample import write_sample_ome_zarr

    path = data_root(config) / WARM_UP
    params = {"generator": "write_sample_ome_zarr", "size": 1024, "chunk": 512}

    def write() -> None:
        write_sample_ome_zarr(path, size=1024, chunk=512, smallest=512)

    return generated_store(path, params, write, "view")


def _plane_shift(t: int, z: int) -> tuple[int, int]:
    """Where plane (t, z) of the 4D image starts in the larger `synthetic_cells` tile."""
    return 7 * z + 97 * t, 11 * z + 131 * t


def ensure_volume(config: Config) -> Path:
    """The 4D (t, z, y, x) OME-Zarr pyramid, written by ome-zarr-py's `write_image`.

    Plane (t, z) is a window of one `synthetic_cells` image shifted by
    `_plane_shift(t, z)`, so neighbouring planes differ (a wrong plane is
    caught) and the image is computed once, not per plane. Levels are
    ome-zarr-py's nearest-neighbour downsampling in y and x (`scale_factors`).
    """
    import dask.array as da
    import numpy as np
    import zarr
    from ome_zarr.scale import Methods
    from ome_zarr.writer import write_image

    from napari_lazy_zarr.core.sample import synthetic_cells

    t_count, z_count, height, width = config.volume
    path = data_root(config) / VOLUME
    params = {
        "generator": "ome_zarr.writer.write_image",
        "shape": list(config.volume),
        "chunks": list(config.volume_chunks),
        "scale_factors": list(config.scale_factors),
        "method": "nearest",
    }

    def write() -> None:
        pad_y, pad_x = _plane_shift(t_count - 1, z_count - 1)
        tile = synthetic_cells(0, 0, (height + pad_y, width + pad_x))
        z_block = config.volume_chunks[1]

        def block(block_info: dict[Any, Any] | None = None) -> np.ndarray[Any, Any]:
            assert block_info is not None
            (t0, t1), (z0, z1), _, _ = block_info[None]["array-location"]
            out = np.empty((t1 - t0, z1 - z0, height, width), dtype=np.uint16)
            for t in range(t0, t1):
                for z in range(z0, z1):
                    sy, sx = _plane_shift(t, z)
                    out[t - t0, z - z0] = tile[sy : sy + height, sx : sx + width]
            return out

        image = da.map_blocks(
            block,
            chunks=((1,) * t_count, (z_block,) * (z_count // z_block), (height,), (width,)),
            dtype=np.uint16,
        )
        group = zarr.open_group(str(path), mode="w", zarr_format=3)
        write_image(
            image,
            group,
            scale_factors=list(config.scale_factors),
            method=Methods.NEAREST,
            axes="tzyx",
            storage_options={"chunks": config.volume_chunks},
        )

    return generated_store(path, params, write, "view")


def warm_page_cache(root: Path) -> int:
    """Read every file under `root` once, so no reader pays for the disk; returns bytes."""
    from bench.napari_pan import warm_page_cache as warm

    return warm(root)


# -- the worker (a subprocess per reader and case) -------------------------------------


class Marks:
    """Named `time.monotonic` instants of a worker, also appended to a progress file.

    The parent reads the file when it kills a worker that missed its deadline.
    """

    def __init__(self, path: str) -> None:
        self.times: dict[str, float] = {}
        self._path = path

    def __call__(self, name: str) -> float:
        now = time.monotonic()
        self.times[name] = now
        with open(self._path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"mark": name, "t": now}) + "\n")
        return now


class StallProbe:
    """The longest gap between the ticks of a 5 ms timer: the longest event-loop stall.

    Ticks run only when the main thread returns to the event loop, so a gap is
    the time the main thread spent in one piece of work (plus up to 5 ms).
    """

    def __init__(self) -> None:
        from qtpy.QtCore import Qt, QTimer

        self.longest = 0.0
        self._last = time.perf_counter()
        self._timer = QTimer()
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(5)
        self._timer.timeout.connect(self.tick)
        self._timer.start()

    def tick(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self._last)
        self._last = now

    def reset(self) -> None:
        self.longest = 0.0
        self._last = time.perf_counter()

    def stop(self) -> None:
        self._timer.stop()


@dataclass(slots=True)
class Session:
    """A worker's viewer, its one layer and the plugin's loader (None for the peers)."""

    app: Any
    viewer: Any
    canvas: Any
    size: tuple[int, int]
    layer: Any = None
    loader: Any = None

    def canvas_size(self) -> list[int]:
        return [int(v) for v in self.canvas._scene_canvas.size]

    def complete(self) -> bool:
        """Whether the view is complete: ours settled; the dask readers slice synchronously."""
        return self.loader is None or bool(self.loader.settled)

    def run_until_complete(self, deadline: float) -> bool:
        """Run the event loop until the view is complete or `deadline` (monotonic); complete?"""
        while not self.complete():
            if time.monotonic() > deadline:
                return False
            self.app.processEvents()
            if not self.complete():
                time.sleep(0.0005)
        return True


def start_session(spec: dict[str, Any]) -> Session:
    import napari
    import napari.qt

    from bench.napari_pan import _size_canvas

    app = napari.qt.get_qapp()
    viewer = napari.Viewer(show=True, title=f"bench: {spec['reader']} ({spec['case']})")
    if spec["plugin"] == "napari-lazy-zarr":
        from napari_lazy_zarr._reader import watch_viewer

        watch_viewer(viewer)
    # The canvas keeps its size whatever the docks beside it do (an image layer's
    # controls widen the layer-controls dock, which would shrink the canvas).
    width, height = spec["canvas"]
    viewer.window._qt_viewer.canvas._scene_canvas.native.setFixedSize(width, height)
    size = _size_canvas(viewer, app, (width, height))
    # napari's one-time costs of a first image layer (imports, shaders), paid untimed:
    # they are napari's, the same whatever reader opens the store.
    import numpy as np

    warm_up = viewer.add_image(np.zeros((64, 64), dtype=np.uint16), name="warm-up")
    for _ in range(3):
        app.processEvents()
    viewer.layers.remove(warm_up)
    app.processEvents()
    return Session(app, viewer, viewer.window._qt_viewer.canvas, size)


def _warm_up(session: Session, spec: dict[str, Any]) -> None:
    """Open (then remove) a small other store with the same reader, untimed.

    Pays the session's one-time costs (the reader's imports, HTTP client and
    thread start-up) before the measured open, for every reader alike.
    """
    from napari_lazy_zarr._layer_data import wait_until_complete

    layers = session.viewer.open(spec["warm_up"], plugin=spec["plugin"])
    wait_until_complete(session.viewer, timeout=30.0)
    for layer in layers:
        session.viewer.layers.remove(layer)
    session.app.processEvents()


def open_case(session: Session, spec: dict[str, Any], mark: Marks) -> None:
    """`viewer.open` of the spec's location, timed by marks; the loader's prefetch set."""
    if spec["warm_up"]:
        _warm_up(session, spec)
    mark("open_started")
    layers = session.viewer.open(spec["location"], plugin=spec["plugin"])
    mark("open_done")
    if len(layers) != 1:
        raise AssertionError(f"{spec['plugin']} opened {len(layers)} layers, expected 1")
    session.layer = layers[0]
    if spec["plugin"] == "napari-lazy-zarr":
        from napari_lazy_zarr._layer_data import loader_of

        session.loader = loader_of(session.layer)
        if session.loader is None:
            raise AssertionError("the plugin's layer has no loader")
        session.loader.prefetch = spec["prefetch"]


def _yx_scale(layer: Any) -> float:
    scale = float(layer.scale[-1])
    if float(layer.scale[-2]) != scale or any(float(t) != 0 for t in layer.translate):
        raise AssertionError(f"unexpected layer transform {layer.scale}, {layer.translate}")
    return scale


def full_resolution(session: Session, y0: int, x0: int) -> None:
    """One screen pixel per level-0 pixel, the canvas' top-left on pixel (y0, x0)."""
    scale = _yx_scale(session.layer)
    width, height = session.size
    session.viewer.camera.zoom = 1 / scale
    # Pixel i spans [i - 0.5, i + 0.5] in data coordinates.
    session.viewer.camera.center = (
        (y0 - 0.5 + height / 2) * scale,
        (x0 - 0.5 + width / 2) * scale,
    )


def _displayed_index(layer: Any, viewer: Any) -> tuple[int, tuple[int | slice, ...]]:
    """The data level napari displays and the index of the displayed region in it."""
    level = int(layer.data_level) if layer.multiscale else 0
    corners = [[int(v) for v in row] for row in layer.corner_pixels]
    displayed = set(viewer.dims.displayed)
    step = viewer.dims.current_step
    index: list[int | slice] = []
    for axis in range(layer.ndim):
        if axis in displayed:
            index.append(slice(corners[0][axis], corners[1][axis] + 1))
        else:
            # t and z are never downsampled; the layers have scale 1 along them.
            index.append(int(step[axis]))
    return level, tuple(index)


def _check_2d(layer: Any, viewer: Any) -> dict[str, Any]:
    """The displayed slice vs `synthetic_cells` at the layer's level and corner pixels."""
    import numpy as np

    from napari_lazy_zarr.core.sample import synthetic_cells

    level, index = _displayed_index(layer, viewer)
    ys, xs = index[-2], index[-1]
    if not (isinstance(ys, slice) and isinstance(xs, slice)):
        raise AssertionError(f"y and x are not displayed: {index}")
    step = round(float(layer.downsample_factors[level][-1])) if layer.multiscale else 1
    raw = np.asarray(layer._slice.image.raw)
    if not layer.multiscale:
        raw = raw[ys, xs]  # napari slices the whole plane of a single-scale layer
    expected = synthetic_cells(
        ys.start * step, xs.start * step, (ys.stop - ys.start, xs.stop - xs.start), step=step
    )
    return _compare(raw, expected, level, index)


def _check_stored(layer: Any, viewer: Any, path: str) -> dict[str, Any]:
    """The displayed slice vs the stored level (zarr-python) at the same index."""
    import numpy as np
    import zarr

    level, index = _displayed_index(layer, viewer)
    raw = np.asarray(layer._slice.image.raw)
    datasets = zarr.open_group(path, mode="r").attrs["ome"]["multiscales"][0]["datasets"]
    expected = np.asarray(zarr.open_array(f"{path}/{datasets[level]['path']}", mode="r")[index])
    return _compare(raw, expected, level, index)


def _compare(raw: Any, expected: Any, level: int, index: tuple[Any, ...]) -> dict[str, Any]:
    import numpy as np

    same = raw.shape == expected.shape and bool(np.array_equal(raw, expected))
    wrong = int(np.count_nonzero(raw != expected)) if raw.shape == expected.shape else -1
    return {
        "ok": same,
        "level": level,
        "index": [str(i) for i in index],
        "shape": list(raw.shape),
        "expected_shape": list(expected.shape),
        "wrong_pixels": wrong,
    }


def _chunks_under(layer: Any, chunk: int) -> list[str]:
    """The level-0 chunk keys ('row/col') under the layer's corner pixels (level 0 shown)."""
    if layer.multiscale and layer.data_level != 0:
        return []
    (y0, x0), (y1, x1) = (tuple(int(v) for v in row[-2:]) for row in layer.corner_pixels)
    return [
        f"{cy}/{cx}"
        for cy in range(y0 // chunk, y1 // chunk + 1)
        for cx in range(x0 // chunk, x1 // chunk + 1)
    ]


def cache_statistics(loader: Any) -> dict[str, int] | None:
    if loader is None:
        return None
    stats = loader.controller.cache.statistics
    return {name: int(getattr(stats, name)) for name in ("loads", "hits", "misses")}


def _shows(layer: Any, window: Window, expected: np.ndarray[Any, Any]) -> bool:
    """Whether napari's applied slice of `layer` holds `expected` at `window` (level 0)."""
    import numpy as np

    if layer.multiscale and layer.data_level != 0:
        return False
    raw = np.asarray(layer._slice.image.raw)
    # A multiscale layer's slice is its corner pixels; a single-scale one's the whole plane.
    oy, ox = (int(v) for v in layer.corner_pixels[0][-2:]) if layer.multiscale else (0, 0)
    y, x = window.y0 - oy, window.x0 - ox
    if y < 0 or x < 0 or y + window.h > raw.shape[-2] or x + window.w > raw.shape[-1]:
        return False
    return bool(np.array_equal(raw[y : y + window.h, x : x + window.w], expected))


def _remote_worker(spec: dict[str, Any], mark: Marks) -> dict[str, Any]:
    """(1): open the URL, go to full resolution at the centre, wait until complete.

    The view is complete at the first applied slice (napari's `set_data` event;
    for the dask readers, the slice that `on_draw` or `viewer.open` ran) whose
    pixels under the canvas equal the data. Ours then runs on until
    `loader.settled`, which also waits for the layer's thumbnail.
    """
    from napari_lazy_zarr.core.sample import synthetic_cells

    session = start_session(spec)
    size, (width, height) = spec["size"], session.size
    window = Window((size - height) // 2, (size - width) // 2, height, width)
    expected = synthetic_cells(window.y0, window.x0, (window.h, window.w))
    open_case(session, spec, mark)
    layer = session.layer
    opened = mark.times["open_started"]
    deadline = opened + spec["view_timeout"]

    def on_slice_applied(event: Any = None) -> None:
        if "view_complete" not in mark.times and _shows(layer, window, expected):
            mark("view_complete")

    started = mark("view_started")
    layer.events.set_data.connect(on_slice_applied)
    full_resolution(session, window.y0, window.x0)
    before = time.perf_counter()
    session.canvas.on_draw(None)
    draw = time.perf_counter() - before
    level = int(layer.data_level)
    if session.loader is None:
        on_slice_applied()  # the dask readers: the slice was computed synchronously

    def finished() -> bool:
        return "view_complete" in mark.times and (not spec["wait_settled"] or session.complete())

    while not finished() and time.monotonic() < deadline:
        session.app.processEvents()
        time.sleep(0.0005)
    settled = session.complete()
    if settled:
        mark("view_settled")
    ended = time.monotonic()
    session.app.processEvents()  # paint the view
    complete = "view_complete" in mark.times
    result: dict[str, Any] = {
        "complete": complete,
        "settled": settled,
        "wait_settled": spec["wait_settled"],
        "from_open": mark.times.get("view_complete", ended) - opened,
        "open": mark.times["open_done"] - opened,
        "view": mark.times.get("view_complete", ended) - started,
        "draw": draw,
        "level": level,
        "multiscale": bool(layer.multiscale),
        "levels": len(layer.data) if layer.multiscale else 1,
        "under_view": _chunks_under(layer, spec["chunk"]),
        "check": _check_2d(layer, session.viewer) if complete else None,
        "cache": cache_statistics(session.loader),
        "canvas": session.canvas_size(),
    }
    session.viewer.close()
    return result


def _open_worker(spec: dict[str, Any], mark: Marks) -> dict[str, Any]:
    """(3): `viewer.open` plus the first `on_draw` (napari's home view), on the main thread."""
    session = start_session(spec)
    open_case(session, spec, mark)
    before = time.perf_counter()
    session.canvas.on_draw(None)
    draw = time.perf_counter() - before
    mark("first_draw_done")
    opened = mark.times["open_started"]
    complete = session.run_until_complete(opened + spec["view_timeout"])
    ended = mark("home_complete" if complete else "home_timeout")
    session.app.processEvents()
    result = {
        "complete": complete,
        "open": mark.times["open_done"] - opened,
        "draw": draw,
        "home_complete": ended - opened,
        "level": int(session.layer.data_level),
        "check": _check_2d(session.layer, session.viewer) if complete else None,
        "cache": cache_statistics(session.loader),
        "canvas": session.canvas_size(),
    }
    session.viewer.close()
    return result


def pan_path(config: Config) -> list[tuple[int, int]]:
    """The 2D pan over the 4D store's planes: right, down, then left, in 256 px steps.

    The image is too narrow for `pan_steps` steps in one direction under the
    canvas; the path turns at the edges and every step exposes new chunks.
    """
    _, _, height, width = config.volume
    canvas_w, canvas_h = config.canvas
    y0, x0 = 60, 60
    room_x = (width - canvas_w - x0) // config.pan_step
    room_y = (height - canvas_h - y0) // config.pan_step
    moves = [(0, 1)] * room_x + [(1, 0)] * room_y + [(0, -1)] * room_x
    if len(moves) < config.pan_steps:
        raise ValueError(f"the {width}x{height} planes leave room for {len(moves)} pan steps")
    path = [(y0, x0)]
    for dy, dx in moves[: config.pan_steps]:
        y0, x0 = y0 + dy * config.pan_step, x0 + dx * config.pan_step
        path.append((y0, x0))
    return path


def _local_worker(spec: dict[str, Any], mark: Marks) -> dict[str, Any]:
    """(2): the 2D and 3D steps on the local 4D store, each step's main-thread costs."""
    from bench.napari_pan import _paint_seconds, _Probe, _renderer

    session = start_session(spec)
    open_case(session, spec, mark)
    app, viewer, layer = session.app, session.viewer, session.layer
    probe = _Probe(layer)
    stalls = StallProbe()
    deadline = time.monotonic() + spec["local_timeout"]
    path = [tuple(p) for p in spec["pan"]]
    t_axis, z_axis = 0, 1

    viewer.dims.set_current_step(t_axis, 0)
    viewer.dims.set_current_step(z_axis, spec["z_start"])
    full_resolution(session, *path[0])
    session.canvas.on_draw(None)
    if not session.run_until_complete(deadline):
        raise TimeoutError("the start view did not complete")
    if layer.data_level != 0:
        raise AssertionError(f"napari displays level {layer.data_level} in 2D, not 0")

    def dwell() -> None:
        end = time.perf_counter() + spec["dwell"]
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.002)

    def step(kind: str, action: Callable[[], None]) -> dict[str, Any]:
        dwell()
        app.processEvents()
        probe.reset()
        stalls.reset()
        start = time.perf_counter()
        action()
        session.canvas.on_draw(None)
        stalls.tick()  # the action and on_draw ran without the event loop
        if not session.run_until_complete(deadline):
            raise TimeoutError(f"a {kind} step did not complete")
        complete = time.perf_counter() - start
        slicing, slices = probe.seconds, probe.slices
        before = time.perf_counter()
        app.processEvents()  # paint the complete view
        paint = time.perf_counter() - before
        stalls.tick()
        return {
            "kind": kind,
            "slicing": slicing,
            "slices": slices,
            "stall": stalls.longest,
            "complete": complete,
            "final_paint": paint,
            "level": int(layer.data_level),
        }

    steps: list[dict[str, Any]] = []
    for y0, x0 in path[1:]:
        steps.append(step("2D pan", lambda y0=y0, x0=x0: full_resolution(session, y0, x0)))
    z = spec["z_start"]
    for _ in range(spec["z_steps"]):
        z += 1
        steps.append(step("2D z", lambda z=z: viewer.dims.set_current_step(z_axis, z)))
    for t in range(1, spec["t_steps"] + 1):
        steps.append(step("2D t", lambda t=t: viewer.dims.set_current_step(t_axis, t)))
    check_2d = _check_stored(layer, viewer, spec["location"])
    paint_2d = _paint_seconds(viewer, app)

    steps.append(step("3D switch", lambda: setattr(viewer.dims, "ndisplay", 3)))
    angles = tuple(viewer.camera.angles)
    for index in range(1, spec["rotations"] + 1):
        rotated = (angles[0], angles[1] + index * spec["rotation_step"], angles[2])
        steps.append(step("3D rotate", lambda a=rotated: setattr(viewer.camera, "angles", a)))
    t = spec["t_steps"]
    for _ in range(spec["volume_t_steps"]):
        t -= 1
        steps.append(step("3D t", lambda t=t: viewer.dims.set_current_step(t_axis, t)))
    check_3d = _check_stored(layer, viewer, spec["location"])
    paint_3d = _paint_seconds(viewer, app, repeats=3)
    stalls.stop()
    result = {
        "steps": steps,
        "paint_2d": paint_2d,
        "paint_3d": paint_3d,
        "level_3d": int(layer.data_level),
        "level_shapes": [list(map(int, s)) for s in layer.level_shapes],
        "renderer": _renderer(viewer),
        "check": check_2d,
        "check_3d": check_3d,
        "cache": cache_statistics(session.loader),
        "canvas": session.canvas_size(),
    }
    viewer.close()
    return result


WORKERS: Final = {"remote": _remote_worker, "open": _open_worker, "local": _local_worker}


def _worker_main(argv: Sequence[str]) -> int:
    spec = json.loads(argv[0])
    mark = Marks(spec["progress"])
    result = WORKERS[spec["kind"]](spec, mark)
    result["marks"] = mark.times
    import napari_lazy_zarr

    result["package"] = str(Path(napari_lazy_zarr.__file__).resolve().parent)
    with open(spec["output"], "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


# -- the server ------------------------------------------------------------------------


@dataclass(slots=True)
class RequestLog:
    """Every request the server received: (`time.monotonic()` on arrival, key, method)."""

    entries: list[tuple[float, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, method: str) -> None:
        with self.lock:
            self.entries.append((time.monotonic(), key, method))

    def between(self, start: float, end: float) -> list[tuple[float, str, str]]:
        with self.lock:
            return [e for e in self.entries if start <= e[0] <= end]


@contextlib.contextmanager
def serve(root: Path) -> Iterator[tuple[Any, Any, RequestLog]]:
    """`bench.remote.serve` on `root` (its backlog, in-flight counting), requests logged."""
    from bench.remote import serve as remote_serve

    log = RequestLog()
    with remote_serve(root) as (server, in_flight):
        tracking = server._server.RequestHandlerClass

        class Logged(tracking):  # type: ignore[misc, valid-type]
            def _serve(self, *, body: bool) -> None:
                log.add(self.path.split("?", 1)[0].lstrip("/"), "GET" if body else "HEAD")
                super()._serve(body=body)

        server._server.RequestHandlerClass = Logged
        # A killed worker leaves broken connections: not worth a traceback on stderr.
        server._server.handle_error = lambda request, address: None
        yield server, in_flight, log


# -- the parent ------------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """One worker run: its result, or how it ended without one."""

    reader: str
    case: Case
    result: dict[str, Any] | None
    marks: dict[str, float]
    killed_after: float | None = None
    """Seconds from the `viewer.open` call until the worker was killed (it missed its deadline)."""
    error: str | None = None
    requests: dict[str, Any] = field(default_factory=dict)
    peak_in_flight: int = 0
    wall: float = 0.0


def _require_display() -> None:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise SystemExit(
            "the view benchmark needs a display: run it under "
            "xvfb-run -a -s '-screen 0 1920x1080x24' ./dev bench view"
        )


def _read_marks(path: Path) -> dict[str, float]:
    marks: dict[str, float] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            marks[entry["mark"]] = float(entry["t"])
    return marks


def store_location(
    case: Case, reader: Reader, url: str, warm_url: str, root: Path
) -> tuple[str, str | None]:
    """The store's location for `reader`, and the warm-up store's (None: no warm-up)."""
    # napari's built-in reader cannot open a remote group: level 0 of the pyramids.
    level0 = "/0" if reader is BUILTIN else ""
    warm_up = f"{warm_url}/{WARM_UP}{level0}" if case.warm_up else None
    if case.kind == "local":
        return str(root / VOLUME), warm_up
    if case.store == "plain":
        return f"{url}/{PLAIN}", warm_up
    return f"{url}/{PYRAMID}{level0}", warm_up


def run_worker(
    config: Config,
    reader: Reader,
    case: Case,
    *,
    location: tuple[str, str | None],
    scratch: Path,
    run_id: int,
    wait_settled: bool = True,
    previous: Path | None = None,
) -> Run:
    """One subprocess: `reader` on `case`, killed if it misses its deadline; with
    `previous` (a `bench.previous_package` tree), that revision's package."""
    output = scratch / f"result-{run_id}.json"
    progress = scratch / f"progress-{run_id}.jsonl"
    spec = {
        "kind": case.kind,
        "case": case.label,
        "reader": reader.label,
        "plugin": reader.plugin,
        "prefetch": reader.prefetch,
        "location": location[0],
        "warm_up": location[1],
        "wait_settled": wait_settled,
        "canvas": list(config.canvas),
        "size": config.size,
        "chunk": config.chunk,
        "view_timeout": config.view_timeout,
        "local_timeout": config.local_timeout,
        "pan": pan_path(config),
        "z_start": config.volume[1] // 2 - config.z_steps,
        "z_steps": config.z_steps,
        "t_steps": config.t_steps,
        "rotations": config.rotations,
        "rotation_step": config.rotation_step,
        "volume_t_steps": config.volume_t_steps,
        "dwell": config.dwell,
        "output": str(output),
        "progress": str(progress),
    }
    env, package = package_env(previous)
    # napari reads its settings from this (empty) file, never the user's; sync slicing.
    env["NAPARI_CONFIG"] = str(scratch / f"settings-{run_id}.yaml")
    env["NAPARI_ASYNC"] = "0"
    for name in list(env):
        if name.startswith("NAPARI_LAZY_ZARR_"):
            del env[name]
    stderr_path = scratch / f"stderr-{run_id}.txt"
    spawned = time.monotonic()
    killed_after: float | None = None
    with open(stderr_path, "w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.view_cycle", json.dumps(spec)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        while process.poll() is None:
            marks = _read_marks(progress)
            opened = marks.get("open_started")
            now = time.monotonic()
            if case.kind == "local":
                deadline = spawned + config.startup_timeout + config.local_timeout
            elif opened is None:
                deadline = spawned + config.startup_timeout
            else:
                deadline = opened + config.view_timeout + 2.0  # the worker's own deadline first
            if now > deadline:
                process.kill()
                process.wait()
                killed_after = now - opened if opened is not None else None
                break
            time.sleep(0.1)
    marks = _read_marks(progress)
    result: dict[str, Any] | None = None
    error = None
    if output.exists():
        result = json.loads(output.read_text(encoding="utf-8"))
        output.unlink()
        check_package(result, package, reader.label)
    elif killed_after is None:
        tail = stderr_path.read_text(encoding="utf-8").strip().splitlines()[-15:]
        error = f"exit code {process.returncode}: " + " | ".join(tail)
    elif "open_started" not in marks:
        error = "killed before it opened the store"
    return Run(
        reader.label,
        case,
        result,
        marks,
        killed_after=killed_after,
        error=error,
        wall=time.monotonic() - spawned,
    )


def _is_chunk(key: str) -> bool:
    return "/c/" in key


def _level0_prefix(case: Case) -> str:
    return f"{PLAIN}/c/" if case.store == "plain" else f"{PYRAMID}/0/c/"


def request_summary(case: Case, run: Run, log: RequestLog, end: float) -> dict[str, Any]:
    """The requests of one remote or open run, by phase (from the worker's marks)."""
    marks = run.marks
    opened = marks.get("open_started")
    if opened is None:
        return {}

    def split(start: float, stop: float) -> dict[str, int]:
        entries = log.between(start, stop)
        chunks = sum(_is_chunk(key) for _, key, _ in entries)
        return {"chunk": chunks, "metadata": len(entries) - chunks}

    open_done = marks.get("open_done", end)
    summary: dict[str, Any] = {"open": split(opened, open_done), "all": split(opened, end)}
    if case.kind == "remote":
        complete = marks.get("view_complete", end)
        summary["until_complete"] = split(opened, complete)
        summary["until_settled"] = split(opened, marks.get("view_settled", end))
        summary["view"] = split(marks.get("view_started", open_done), complete)
        prefix = _level0_prefix(case)
        keys = [key for _, key, _ in log.between(opened, complete) if _is_chunk(key)]
        level0 = {key.removeprefix(prefix) for key in keys if key.startswith(prefix)}
        under = set(run.result["under_view"]) if run.result else set()
        summary["level0_distinct"] = len(level0)
        summary["level0_under_view"] = len(level0 & under)
        summary["under_view"] = len(under)
        summary["other_levels"] = sum(not key.startswith(prefix) for key in keys)
    return summary


def _progress(run: Run) -> str:
    head = f"[view] {run.reader} | {run.case.label}:"
    if run.error:
        return f"{head} FAILED ({run.error}); {run.wall:.0f} s"
    if run.result is None:
        return f"{head} killed after {run.killed_after:.0f} s; {run.wall:.0f} s"
    r = run.result
    check = r.get("check")
    pixels = "" if check is None else ("; pixels ok" if check["ok"] else "; WRONG PIXELS")
    if run.case.kind == "remote":
        state = "complete" if r["complete"] else "TIMEOUT"
        requests = run.requests.get("until_complete", {})
        settled = _between(run, "open_started", "view_settled")
        what = (
            f"{state} {r['from_open']:.2f} s from open (open {r['open']:.2f} s; settled "
            f"{settled:.2f} s), {requests.get('chunk', 0)} chunk + "
            f"{requests.get('metadata', 0)} metadata GETs"
        )
    elif run.case.kind == "open":
        what = f"open {r['open']:.2f} s + first on_draw {r['draw']:.2f} s"
    else:
        slicing = [s["slicing"] for s in r["steps"]]
        what = f"slicing median {_ms(_median(slicing))} ms, max {_ms(max(slicing))} ms"
        if not r["check_3d"]["ok"]:
            pixels += "; WRONG PIXELS (3D)"
    return f"{head} {what}{pixels}; {run.wall:.0f} s"


def run(quick: bool = False) -> str:
    """Run the view benchmark (`QUICK` or `FULL`) and return its Markdown section."""
    config = QUICK if quick else FULL
    _require_display()
    ensure_plain(config)
    ensure_pyramid(config)
    ensure_volume(config)
    ensure_warm_up(config)
    root = data_root(config)
    warmed = warm_page_cache(root)
    print(f"[view] page cache warmed: {warmed / 2**20:.0f} MiB read", flush=True)
    load_before = os.getloadavg()[0]
    all_cases = cases(config)
    runs: list[Run] = []
    slow: set[tuple[str, Case]] = set()
    # `loader.settled` is waited for in the first run of a pair only: it is information,
    # and on the plain array it takes many seconds (see the report).
    settled_seen: set[tuple[str, Case]] = set()
    run_ids = itertools.count()
    started = time.perf_counter()
    from tests.remote.server import FaultyServer

    with (
        tempfile.TemporaryDirectory(prefix="view-cycle-") as scratch_dir,
        serve(root) as (server, in_flight, log),
        FaultyServer(root) as warm_server,  # no latency: warm-ups cost little time
        contextlib.ExitStack() as trees,
    ):
        scratch = Path(scratch_dir)
        # Each earlier revision's package, checked out once (`Reader.revision`).
        packages = {
            reader.revision: trees.enter_context(previous_package(reader.revision))
            for reader in READERS
            if reader.revision is not None
        }

        def method(reader: Reader) -> Callable[[Case], list[float]]:
            def measure(case: Case) -> list[float]:
                if not case.applies(reader) or (reader.label, case) in slow:
                    return []
                server.faults.latency = case.latency
                in_flight.reset()
                one = run_worker(
                    config,
                    reader,
                    case,
                    location=store_location(case, reader, server.url, warm_server.url, root),
                    scratch=scratch,
                    run_id=next(run_ids),
                    wait_settled=(reader.label, case) not in settled_seen,
                    previous=None if reader.revision is None else packages[reader.revision],
                )
                settled_seen.add((reader.label, case))
                one.peak_in_flight = in_flight.peak
                if case.kind != "local":
                    one.requests = request_summary(case, one, log, time.monotonic())
                if case.kind == "remote":
                    measured = _between(one, "open_started", "view_complete")
                    if one.killed_after is not None or measured > config.repeat_limit:
                        slow.add((reader.label, case))
                runs.append(one)
                print(_progress(one), flush=True)
                return [one.wall]

            return measure

        interleaved(
            {reader.label: method(reader) for reader in READERS},
            all_cases,
            config.rounds,
            on_round=lambda index: print(
                f"[view] round {index + 1}/{config.rounds} done", flush=True
            ),
        )
    info = RunInfo(
        elapsed=time.perf_counter() - started,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        slow=sorted(f"{reader} | {case.label}" for reader, case in slow),
    )
    return report(config, runs, info)


# -- report ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Facts about one run that the report states."""

    elapsed: float
    load_before: float
    load_after: float
    slow: list[str]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def _ms(seconds: float) -> str:
    value = seconds * 1e3
    if math.isnan(value):
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _s(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds:.2f}" if seconds < 10 else f"{seconds:.1f}"


def _of(runs: Sequence[Run], reader: Reader, case: Case) -> list[Run]:
    return [r for r in runs if r.reader == reader.label and r.case == case]


def _between(run: Run, start: str, end: str) -> float:
    """Seconds between two marks of a run; infinite when the end was never reached."""
    if start not in run.marks or end not in run.marks:
        return math.inf
    return run.marks[end] - run.marks[start]


def _timed(values: Sequence[float], timeout: float) -> str:
    """Median seconds, "> N s" when the median run missed its deadline."""
    if not values:
        return "n/a"
    median = statistics.median(values)
    if math.isinf(median):
        return f"> {timeout:.0f} s"
    late = sum(math.isinf(v) for v in values)
    return _s(median) + (f" ({late} of {len(values)} > {timeout:.0f} s)" if late else "")


def _count(runs: Sequence[Run], *path: str) -> str:
    """Median of a request count over runs; "≥" when a run was killed before the end."""
    values = []
    for run in runs:
        value: Any = run.requests
        for key in path:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        if isinstance(value, int):
            values.append(value)
    if not values:
        return "n/a"
    killed = any(run.result is None for run in runs)
    return ("≥ " if killed else "") + f"{statistics.median(values):g}"


def _checks(runs: Sequence[Run]) -> tuple[int, list[str]]:
    """How many displayed slices were compared, and the mismatches."""
    compared, wrong = 0, []
    for run in runs:
        if run.result is None:
            continue
        for name in ("check", "check_3d"):
            check = run.result.get(name)
            if check is None:
                continue
            compared += 1
            if not check["ok"]:
                wrong.append(
                    f"{run.reader} | {run.case.label} ({name}): {check['wrong_pixels']} wrong "
                    f"pixels, shape {check['shape']} vs {check['expected_shape']}, level "
                    f"{check['level']}, index {check['index']}"
                )
    return compared, wrong


def _steps(runs: Sequence[Run], reader: Reader, kind: str) -> list[dict[str, Any]]:
    return [
        step
        for run in runs
        if run.reader == reader.label and run.case.kind == "local" and run.result is not None
        for step in run.result["steps"]
        if step["kind"] == kind
    ]


def _paint(runs: Sequence[Run], reader: Reader, name: str) -> float:
    return _median(
        [
            run.result[name]
            for run in runs
            if run.reader == reader.label and run.case.kind == "local" and run.result is not None
        ]
    )


STEP_KINDS: Final = ("2D pan", "2D z", "2D t", "3D switch", "3D rotate", "3D t")
KINDS_2D: Final = ("2D pan", "2D z", "2D t")
KINDS_3D: Final = ("3D rotate", "3D t")


def _per_step(
    runs: Sequence[Run], reader: Reader, kinds: Sequence[str], figure: str
) -> list[float]:
    """`figure` ("slicing", "stall", ...) of every step of `kinds` that `reader` ran."""
    return [step[figure] for kind in kinds for step in _steps(runs, reader, kind)]


def _met(value: float, limit: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "yes" if value <= limit else "**no**"


def _targets_table(config: Config, runs: Sequence[Run]) -> str:
    plain = Case("remote", "plain", max(config.latencies), warm_up=True)
    timeout = config.view_timeout
    rows = []
    for label, start in (
        ("from the `viewer.open` call", "open_started"),
        ("after `viewer.open` returned", "view_started"),
    ):
        cells = [
            _phase(_of(runs, reader, plain), start, "view_complete", timeout)
            if plain.applies(reader)
            else ""
            for reader in READERS
        ]
        ours = _median([_between(r, start, "view_complete") for r in _of(runs, OURS, plain)])
        rows.append(
            [
                f"1. plain {config.size}² array over HTTP, {plain.latency * 1e3:.0f} ms per "
                f"request: view at full resolution complete, {label} (s, median)",
                *cells,
                f"<= {TARGET_VIEW:g} s",
                _met(ours, TARGET_VIEW),
            ]
        )
    for label, kinds, summary, limit in (
        ("2D steps (pan, z, t): main-thread slicing per step, median", KINDS_2D, _median, 0),
        ("2D steps (pan, z, t): main-thread slicing per step, max", KINDS_2D, max, 1),
        ("3D steps (rotate, t): main-thread slicing per step, max", KINDS_3D, max, 1),
    ):
        target = (TARGET_STEP_MEDIAN_2D, TARGET_STEP_MAX)[limit]
        slicing = {reader.label: _per_step(runs, reader, kinds, "slicing") for reader in READERS}
        values = {label: summary(v) if v else math.nan for label, v in slicing.items()}
        cells = [
            _ms(values[reader.label]) if reader is not OURS_NO_PREFETCH else ""
            for reader in READERS
        ]
        rows.append(
            [f"2. {label} (ms)", *cells, f"<= {target * 1e3:g} ms", _met(values["ours"], target)]
        )
    for label, kinds in (("2D steps (pan, z, t)", KINDS_2D), ("3D steps (rotate, t)", KINDS_3D)):
        # The main thread per step, paints included, against the previous revision's.
        stalls = {reader.label: _per_step(runs, reader, kinds, "stall") for reader in READERS}
        values = {label: _median(v) for label, v in stalls.items()}
        previous = values[OURS_PREVIOUS.label]
        cells = [
            _ms(values[reader.label]) if reader is not OURS_NO_PREFETCH else ""
            for reader in READERS
        ]
        rows.append(
            [
                f"2. {label}: longest main-thread stall per step (paints included), median (ms)",
                *cells,
                f"<= {OURS_PREVIOUS.label}",
                "n/a" if math.isnan(previous) else _met(values["ours"], previous),
            ]
        )
    for warm, label in ((False, "first open in a fresh napari"), (True, "after a warm-up open")):
        case = Case("open", "pyramid", OPEN_LATENCY, warm_up=warm)
        values = {
            reader.label: _median([_open_seconds(r) for r in _of(runs, reader, case)])
            for reader in READERS
        }
        cells = [_s(values[r.label]) if case.applies(r) else "" for r in READERS]
        rows.append(
            [
                f"3. open the {config.size}² OME-Zarr pyramid over HTTP, "
                f"{OPEN_LATENCY * 1e3:.0f} ms per request: `viewer.open` + first `on_draw`, "
                f"{label} (s, median)",
                *cells,
                f"<= {TARGET_OPEN:g} s",
                _met(values["ours"], TARGET_OPEN),
            ]
        )
    return markdown_table(
        ["measurement", *(r.label for r in READERS), "target (ours)", "met?"], rows
    )


def _open_seconds(run: Run) -> float:
    if run.result is None:
        return math.inf
    return float(run.result["open"] + run.result["draw"])


def _remote_table(config: Config, runs: Sequence[Run]) -> str:
    rows = []
    for case in cases(config):
        if case.kind != "remote":
            continue
        for reader in READERS:
            mine = _of(runs, reader, case)
            if not case.applies(reader):
                continue
            done = [r for r in mine if r.result is not None]
            level0 = reader is BUILTIN and case.store == "pyramid"
            timeout = config.view_timeout
            rows.append(
                [
                    reader.label,
                    f"{case.store}{' (level 0 only)' if level0 else ''}",
                    f"{case.latency * 1e3:.0f}",
                    _phase(mine, "open_started", "view_complete", timeout),
                    _phase(mine, "open_started", "open_done", timeout),
                    _phase(mine, "view_started", "view_complete", timeout),
                    _settled(mine, timeout) if reader.ours else "",
                    _ms(_median([r.result["draw"] for r in mine if r.result is not None])),
                    f"{_count(mine, 'until_complete', 'chunk')} + "
                    f"{_count(mine, 'until_complete', 'metadata')}",
                    f"{_count(mine, 'open', 'chunk')} + {_count(mine, 'open', 'metadata')}",
                    f"{_count(done, 'level0_distinct')} / {_count(done, 'level0_under_view')} "
                    f"of {_count(done, 'under_view')}"
                    if done
                    else "—",
                    _count(done, "other_levels") if done else "—",
                    _count(_waited(mine), "until_settled", "chunk") if reader.ours else "",
                    f"{max((r.peak_in_flight for r in mine), default=0)}",
                    str(len(mine)),
                ]
            )
    return markdown_table(
        [
            "reader",
            "store",
            "latency (ms)",
            "view complete, from open call (s)",
            "viewer.open (s)",
            "after open (s)",
            "settled, from open call (s)",
            "on_draw (ms)",
            "GETs until view complete: chunk + metadata",
            "of which during open",
            "level-0 chunks fetched until view complete: distinct / under the view",
            "other levels' chunk GETs",
            "chunk GETs until settled",
            "peak in flight",
            "n",
        ],
        rows,
    )


def _waited(runs: Sequence[Run]) -> list[Run]:
    """The runs that went on until `loader.settled`."""
    return [r for r in runs if r.result is not None and r.result["wait_settled"]]


def _settled(runs: Sequence[Run], timeout: float) -> str:
    """Seconds from the open call until `loader.settled`, over the runs that waited for it."""
    waited = _waited(runs)
    cell = _phase(waited, "open_started", "view_settled", timeout)
    return f"{cell} (n={len(waited)})" if waited else cell


def _phase(runs: Sequence[Run], start: str, end: str, timeout: float) -> str:
    """Median seconds from mark `start` to mark `end` over the runs that reached `start`."""
    values = [_between(run, start, end) for run in runs if start in run.marks]
    return _timed(values, timeout) if values else "—"


def _local_table(runs: Sequence[Run]) -> str:
    rows = []
    for reader in (OURS, OURS_PREVIOUS, OME_ZARR, BUILTIN):
        for kind in STEP_KINDS:
            steps = _steps(runs, reader, kind)
            if not steps:
                continue

            def stat(name: str, steps: list[dict[str, Any]] = steps) -> tuple[str, str]:
                values = [step[name] for step in steps]
                return _ms(_median(values)), _ms(max(values))

            paint = _paint(runs, reader, "paint_3d" if kind.startswith("3D") else "paint_2d")
            rows.append(
                [
                    reader.label,
                    kind,
                    *stat("slicing"),
                    f"{statistics.fmean(step['slices'] for step in steps):.1f}",
                    *stat("stall"),
                    _ms(paint),
                    *stat("complete"),
                    str(len(steps)),
                ]
            )
    return markdown_table(
        [
            "reader",
            "step",
            "slicing median (ms)",
            "slicing max (ms)",
            "slices/step",
            "longest stall median (ms)",
            "longest stall max (ms)",
            "one repaint (ms)",
            "complete median (ms)",
            "complete max (ms)",
            "n",
        ],
        rows,
    )


def _bytecode_note() -> str:
    """Whether the imports in a fresh napari came from bytecode, as after a pip install."""
    import importlib.util

    import zarr

    cached = os.path.exists(importlib.util.cache_from_source(zarr.__file__))
    if cached:
        return "from byte-compiled modules as pip installs them"
    return "compiled from source in every process (no bytecode on disk)"


def _open_table(config: Config, runs: Sequence[Run]) -> str:
    rows = []
    for case in cases(config):
        if case.kind != "open":
            continue
        for reader in READERS:
            if not case.applies(reader):
                continue
            mine = _of(runs, reader, case)
            done = [r.result for r in mine if r.result is not None]
            total = [_open_seconds(r) for r in mine]
            rows.append(
                [
                    reader.label,
                    "warm (after a warm-up open)" if case.warm_up else "fresh napari",
                    _s(_median([r["open"] for r in done])),
                    _ms(_median([r["draw"] for r in done])),
                    _timed(total, config.view_timeout),
                    _s(max(total, default=math.nan)),
                    f"{_count(mine, 'open', 'chunk')} + {_count(mine, 'open', 'metadata')}",
                    _timed(
                        [_between(r, "open_started", "home_complete") for r in mine],
                        config.view_timeout,
                    ),
                    str(len(mine)),
                ]
            )
    return markdown_table(
        [
            "reader",
            "session",
            "viewer.open (s)",
            "first on_draw (ms)",
            "open + on_draw, median (s)",
            "max (s)",
            "GETs during open: chunk + metadata",
            "home view complete, from open call (s)",
            "n",
        ],
        rows,
    )


def _failures(runs: Sequence[Run]) -> list[str]:
    return [f"{r.reader} | {r.case.label}: {r.error}" for r in runs if r.error]


def report(config: Config, runs: Sequence[Run], info: RunInfo) -> str:
    """The Markdown section for docs/benchmarks.md."""
    compared, wrong = _checks(runs)
    local = [r.result for r in runs if r.case.kind == "local" and r.result is not None]
    level_shapes = local[0]["level_shapes"] if local else []
    renderers = sorted({r["renderer"] for r in local})
    t_count, z_count, height, width = config.volume
    canvas_w, canvas_h = config.canvas
    if wrong:
        correctness = "**Wrong pixels displayed:** " + "; ".join(wrong) + "."
    else:
        correctness = (
            f"Every completed run's displayed slice ({compared} slices: "
            "`layer._slice.image.raw` at `layer.corner_pixels`) equals NumPy's: "
            "`synthetic_cells` for the 2D stores, the stored level read with zarr-python "
            "for the 4D store (in 2D after the last t step, and in 3D)."
        )
    canvases = {tuple(r.result["canvas"]) for r in runs if r.result is not None}
    if canvases - {config.canvas}:
        correctness += f" **Canvas sizes differed: {sorted(canvases)}.**"
    failures = _failures(runs)
    failed = ("**Runs that failed:** " + "; ".join(failures) + ".") if failures else ""
    slow = (
        "Run once (the first view took longer than "
        f"{config.repeat_limit:.0f} s from the open call, or the run was killed): "
        + ", ".join(info.slow)
        + "."
        if info.slow
        else ""
    )
    levels = " / ".join("x".join(map(str, shape)) for shape in level_shapes)
    plane_chunks = (config.size // config.chunk) ** 2
    lines = [
        "## View: time to a complete view over HTTP, main-thread time per step, open time",
        "",
        "Run: "
        + environment_line(
            [
                "napari-lazy-zarr",
                "napari",
                "napari-ome-zarr",
                "ome-zarr",
                "dask",
                "zarr",
                "fsspec",
                "aiohttp",
                "vispy",
                "PyQt6",
            ]
        )
        + f"; OpenGL renderer: {', '.join(renderers) or 'n/a'}.",
        "",
        f"Measured in {info.elapsed:.0f} s (data generation excluded); 1-minute load average "
        f"{info.load_before:.2f} before, {info.load_after:.2f} after. "
        f"{config.rounds} rounds; in each, every (reader, case) pair ran once in its own "
        "subprocess (fresh viewer and caches, napari settings from an empty file, napari's "
        "default synchronous slicing), the readers' order rotated per case. Tables give "
        f"medians over the runs. {slow}",
        "",
        "Readers: *ours* is the plugin as installed (shared cache, 32 loads in flight for "
        "URLs, prefetch of the chunks around the view on); *ours, prefetch off* sets "
        "`loader.prefetch = False` as soon as `viewer.open` returns. "
        f"*{OURS_PREVIOUS.label}* is the same with the package of {PREVIOUS}, the revision "
        "before issue 24's work, from a temporary worktree (this checkout's benchmark code): "
        "the A/B against the previous revision, in the same rounds. *napari builtin* "
        "(`plugin='napari'`) and *napari-ome-zarr* build dask arrays and compute them on "
        "napari's main thread (dask's threaded scheduler, 2 threads here; napari's "
        "opportunistic dask cache on): their view is complete when the slice returns. "
        "napari's built-in reader refuses remote groups, so over HTTP it opens the plain "
        "array and level 0 of the pyramid: both single-scale, so napari slices the whole "
        f"{config.size}² plane: {plane_chunks} chunk requests, 2 in flight, so at least "
        + ", ".join(
            f"{plane_chunks * latency / 2:.0f} s at {latency * 1e3:.0f} ms"
            for latency in config.latencies
        )
        + ".",
        "",
        "Generate with `xvfb-run -a -s '-screen 0 1920x1080x24' ./dev bench view`; the code "
        "and the precise definitions are in `bench/view_cycle.py`.",
        "",
        correctness,
        failed,
        "",
        "### Targets",
        "",
        "Met? judges *ours*; the other columns are the same measurement for the peers "
        "(empty: not applicable). Main-thread slicing is the time napari's main thread "
        "spends in the layer's slicing calls; painting is not included (see 2).",
        "",
        _targets_table(config, runs),
        f"### 1. Time until the visible view is complete over HTTP (canvas {canvas_w}x"
        f"{canvas_h}, full resolution, image centre)",
        "",
        "Setup: the project's test server (`tests/remote/server.py`) in the benchmark's "
        "process on 127.0.0.1 adds the latency to every request (HTTP/1.0: one connection "
        "per request; listen backlog 128, see the remote section). Stores: a "
        f"{config.size}² uint16 plain Zarr v3 array ({config.chunk}² chunks, blosc-zstd, no "
        "pyramid: ours shows virtual levels) and the same `synthetic_cells` image as an "
        "OME-Zarr 0.5 pyramid (`write_sample_ome_zarr`, same chunks and codec). Before the "
        "timed open each worker opens and removes a small other store (1024², from a second "
        "server without latency, not counted) with the same reader, so one-time costs "
        "(imports, HTTP client start-up) are not timed; section 3 measures them. Then: "
        "`viewer.open(url, plugin=...)`, the camera set to one screen pixel per level-0 "
        "pixel with the canvas centred on the image (napari displays level 0), "
        "`canvas.on_draw(None)`, and the event loop run until the view is complete: the "
        "first slice napari applies (its `set_data` event) whose pixels under the canvas "
        "equal `synthetic_cells`; for the dask readers that is the slice `on_draw` (or, "
        "single-scale, `viewer.open`) computed. In the first run of each pair, ours goes on "
        "until `loader.settled`, which also waits for the layer's thumbnail (napari's read "
        "of the coarsest level). "
        f"A run is killed {config.view_timeout:.0f} s after its open call (reported as "
        "> N s).",
        "",
        "Columns: *view complete, from open call*: from `viewer.open` until the view is "
        "complete (the target's measure); *viewer.open*: the open call alone (napari slices "
        "the new layer at its default view inside it: a dask reader's single-scale layer "
        "computes its whole plane there); *after open*: camera set, `on_draw`, until "
        "complete; *settled*: until `loader.settled` (ours, first run of each pair), and "
        "the chunk GETs until then. GETs: requests the server "
        "received from the open call until the view was complete; *chunk* keys contain "
        "`/c/`, the others are metadata. *level-0 chunks fetched*: distinct level-0 chunk "
        "keys requested until the view was complete / those of them under the view (of "
        "the chunks under the view). *peak in flight*: most requests the server handled "
        "at once during the run.",
        "",
        _remote_table(config, runs),
        "### 2. Main-thread time per step, 2D and 3D (local 4D OME-Zarr)",
        "",
        f"Data: a (t, z, y, x) = {t_count}x{z_count}x{height}x{width} uint16 image written "
        "by ome-zarr-py (`ome_zarr.writer.write_image`, OME-Zarr 0.5, chunks "
        f"{'x'.join(map(str, config.volume_chunks))}, scale_factors "
        f"{list(config.scale_factors)}, nearest-neighbour; levels {levels}); every reader "
        "opens the same local store (napari's built-in reader opens the group as a list of "
        f"levels). 2D at full resolution: {config.pan_steps} pan steps of "
        f"{config.pan_step} px (right, down, then left), {config.z_steps} z steps, "
        f"{config.t_steps} t steps; then 3D (`viewer.dims.ndisplay = 3`; napari shows the "
        f"coarsest level): the switch, {config.rotations} rotations of "
        f"{config.rotation_step:g}° (`viewer.camera.angles`), {config.volume_t_steps} t "
        f"steps. {config.dwell * 1e3:.0f} ms of idle event loop before each step.",
        "",
        "Per step: *slicing*: main-thread time in the layer's slicing calls (`set_view_slice` "
        "and the re-slices ours requests as chunks land), from the step until the view is "
        "complete; *longest stall*: the longest gap between ticks of a 5 ms `QTimer` "
        "(precise) from the step until the complete view is painted: the longest time the "
        "event loop could not run, paints included; *one repaint*: the median time of one "
        "repaint of the same displayed data (per reader, 2D or 3D), which is what a stall "
        "costs without any slicing: Mesa llvmpipe renders in software, volumes slowly; "
        "*complete*: from the step until the view is complete (the dask readers: when the "
        "step's calls return).",
        "",
        _local_table(runs),
        f"### 3. Main-thread time to open the {config.size}² OME-Zarr pyramid over "
        f"{OPEN_LATENCY * 1e3:.0f} ms HTTP",
        "",
        "`viewer.open(url, plugin=...)` runs the reader and napari's first slice on the "
        "main thread; then the first `canvas.on_draw(None)` at napari's home view (the "
        "whole image in the canvas). *fresh napari*: the first store the session opens "
        f"(the reader's imports, {_bytecode_note()}, and HTTP client start-up "
        "included); *warm*: after a warm-up "
        "open of a small other store, as in 1. *home view complete*: from the open call "
        "until the home view is complete (information).",
        "",
        _open_table(config, runs),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
