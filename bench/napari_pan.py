"""The napari benchmark: panning a 32768² OME-Zarr pyramid in a real napari viewer.

The engine benchmark's pan (same start, 256-pixel steps to the right), driven
through `napari.Viewer(show=True)` under a display (Xvfb), for this plugin and
for the two dask-based readers napari users have: napari-ome-zarr and napari's
built-in reader. Each reader runs with napari's default synchronous slicing and
with its experimental asynchronous slicing (``NAPARI_ASYNC=1``). Ours runs twice:
with prefetch off, so every chunk a step exposes is cold (the targets), and with
the plugin's default prefetch of the chunks around the view.

Data: `write_sample_ome_zarr` (OME-Zarr 0.5, Zarr v3, 512x512 chunks, levels
halving down to 512 px, 0.25 µm per pixel), generated once under
``bench/.data/<mode>/``. Every reader opens this same store.

Each (reader, mode) pair runs in its own subprocess (``python -m
bench.napari_pan SPEC``): a fresh viewer, fresh caches (ours, and napari's
opportunistic dask cache), napari settings from an empty temporary file. The
parent runs the pairs in rounds, rotating their order each round
(`bench.interleaved`).

In a worker: the store is opened with `viewer.open(path, plugin=...)`, the
window resized so the canvas is exactly `Config.canvas`, the camera zoomed to
one screen pixel per level-0 pixel (napari then displays level 0) and placed on
the start of the pan, which is let complete untimed. Then per step:

1. the camera moves 256 level-0 pixels to the right (`viewer.camera.center`);
2. ``canvas.on_draw(None)`` is called and timed: this is where napari computes
   the layer's level and corners and, when they changed, slices the layer on
   the main thread (sync: the whole slice, dask's compute or our non-blocking
   read included; async: only building and submitting the slice request);
3. the Qt event loop is run (``processEvents`` then a 0.5 ms sleep, repeated)
   until the view is complete: for ours `loader.settled` (and, in async mode,
   napari's latest slice of the layer applied); for the dask readers in sync
   mode at once (`on_draw` returned the materialized slice), in async mode when
   the layer's latest slice request has been applied and `layer.loaded` is True;
4. one more ``processEvents`` paints the complete view; then the loop idles for
   `Config.dwell` seconds before the next step.

Per step the worker records the `on_draw` time; the main-thread time spent in
the layer's slicing calls during the whole step (wrapping the slicing state's
`set_view_slice`, `_make_slice_request` and `_update_slice_response`, which
includes the re-slices our loader requests as chunks land); the main thread's
busy time (`on_draw` plus every `processEvents` call until the view is complete,
plus the painting call: repaints included); the time from the camera move until
the view is complete; how many main-thread slices the step took; and which
level-0 chunks the view touches, so the report can tell *cold* steps (the view
touches chunks no earlier view of the run touched) from the others. After the
last step the displayed slice (`layer._slice.image.raw` at `layer.corner_pixels`,
`layer.data_level`) is compared with `synthetic_cells`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from bench import (
    DATA_DIR,
    environment_line,
    generated_store,
    interleaved,
    markdown_table,
    worker_result,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = ["FULL", "QUICK", "READERS", "Config", "Reader", "run"]

THREADS: Final = 2
"""Chunk loader threads for ours; dask's threaded scheduler uses one per core (2)."""
MODES: Final = ("sync", "async")


# -- configuration -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Sizes and repetition counts of one benchmark mode."""

    mode: Literal["full", "quick"]
    size: int
    """The image is `size` x `size` pixels at level 0."""
    pan_steps: int
    rounds: int
    """Subprocess runs per (reader, slicing mode); each walks the whole pan."""
    canvas: tuple[int, int] = (1200, 900)
    """Canvas width and height in screen pixels."""
    chunk: int = 512
    pan_step: int = 256
    dwell: float = 0.25
    """Seconds the event loop idles between a step's completion and the next step."""
    step_timeout: float = 60.0
    worker_timeout: float = 600.0
    total_bytes_limit: int = 1 << 30
    """Our chunk cache capacity (the plugin's default)."""


FULL: Final = Config("full", size=32768, pan_steps=12, rounds=3)
QUICK: Final = Config("quick", size=4096, pan_steps=4, rounds=1)


@dataclass(frozen=True, slots=True)
class Reader:
    """One way of opening the store in napari."""

    label: str
    plugin: str
    prefetch: bool = False
    """Ours only: prefetch the ring of chunks around the view (the plugin's default)."""

    @property
    def ours(self) -> bool:
        return self.plugin == "napari-lazy-zarr"


OURS: Final = Reader("ours", "napari-lazy-zarr", prefetch=False)
OURS_PREFETCH: Final = Reader("ours + prefetch", "napari-lazy-zarr", prefetch=True)
OME_ZARR: Final = Reader("napari-ome-zarr", "napari-ome-zarr")
BUILTIN: Final = Reader("napari builtin", "napari")
READERS: Final = (OURS, OURS_PREFETCH, OME_ZARR, BUILTIN)
DASK_READERS: Final = (OME_ZARR, BUILTIN)


# -- data --------------------------------------------------------------------------


def ensure_store(config: Config) -> Path:
    """The OME-Zarr pyramid under `bench/.data/<mode>/`, written on first use only.

    A marker file holding the generation parameters is written once the store is
    complete; a store without a matching marker is deleted and written again.
    """
    from napari_lazy_zarr.core.sample import write_sample_ome_zarr

    params = {
        "generator": "write_sample_ome_zarr",
        "size": config.size,
        "chunk": config.chunk,
        "ome": "0.5",
        "zarr_format": 3,
    }
    path = DATA_DIR / config.mode / "cells-ome-0.5.zarr"

    def write() -> None:
        write_sample_ome_zarr(path, size=config.size, chunk=config.chunk)

    return generated_store(path, params, write, "napari")


def _store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def warm_page_cache(path: Path) -> int:
    """Read every file of the store once, so no reader pays for the disk; returns bytes."""
    total = 0
    for file in sorted(path.rglob("*")):
        if file.is_file():
            total += len(file.read_bytes())
    return total


def pan_positions(config: Config) -> list[tuple[int, int]]:
    """Top-left level-0 pixel of the view at the start and after each step.

    The engine benchmark's pan path (same seed, start and step); the view is
    the canvas (`config.canvas`) instead of the engine's 2048x2048 window.
    """
    from bench import engine

    base = engine.QUICK if config.mode == "quick" else engine.FULL
    if (base.size, base.pan_steps, base.pan_step) != (
        config.size,
        config.pan_steps,
        config.pan_step,
    ):
        raise AssertionError("the napari pan no longer matches the engine benchmark's")
    windows = engine.pan_path(base)
    width, height = config.canvas
    for window in windows:
        if window.y0 + height > config.size or window.x0 + width > config.size:
            raise AssertionError(f"the canvas does not fit the image at {window}")
    return [(window.y0, window.x0) for window in windows]


# -- the worker (a subprocess per reader and slicing mode) ---------------------------


class _Probe:
    """Counts and times the main-thread slicing calls of one layer.

    Wraps, on the layer's slicing state, `set_view_slice` (sync slicing: the
    request built and run, the response stored), `_make_slice_request` (async:
    the request built on the main thread) and `_update_slice_response` (async:
    the response stored on the main thread). Nested calls count once.
    """

    def __init__(self, layer: Any) -> None:
        self.seconds = 0.0
        self.slices = 0
        self._depth = 0
        state = layer._slicing_state
        for name, counts in (
            ("set_view_slice", True),
            ("_make_slice_request", True),
            ("_update_slice_response", False),
        ):
            setattr(state, name, self._wrap(getattr(state, name), counts))

    def reset(self) -> None:
        self.seconds = 0.0
        self.slices = 0

    def _wrap(self, method: Callable[..., Any], counts: bool) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                return method(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - start
                    self.slices += counts

        return timed


def _pump(app: Any, seconds: float) -> None:
    """Run the event loop for `seconds` (the main thread mostly idle)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.002)


def _wait(app: Any, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.perf_counter() + timeout
    while not done():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what} not complete after {timeout} s")
        app.processEvents()
        time.sleep(0.001)


def _size_canvas(viewer: Any, app: Any, size: tuple[int, int]) -> tuple[int, int]:
    """Resize the main window until the canvas is `size` (width, height) pixels."""
    window = viewer.window._qt_window
    scene = viewer.window._qt_viewer.canvas._scene_canvas
    for _ in range(5):
        _pump(app, 0.1)
        width, height = scene.size
        if (width, height) == size:
            return width, height
        window.resize(window.width() + size[0] - width, window.height() + size[1] - height)
    raise RuntimeError(f"could not size the canvas to {size}: it is {tuple(scene.size)}")


def _renderer(viewer: Any) -> str:
    try:
        from vispy.gloo import gl

        viewer.window._qt_viewer.canvas._scene_canvas.set_current()
        return str(gl.glGetParameter(gl.GL_RENDERER))
    except Exception as error:  # informational only
        return f"unknown ({type(error).__name__})"


def _paint_seconds(viewer: Any, app: Any, repeats: int = 5) -> float:
    """Median time of one repaint of the canvas (an update request, then the event loop)."""
    scene = viewer.window._qt_viewer.canvas._scene_canvas
    app.processEvents()
    times = []
    for _ in range(repeats):
        scene.update()
        start = time.perf_counter()
        app.processEvents()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _completion(viewer: Any, layer: Any, loader: Any, asynchronous: bool) -> Callable[[], bool]:
    """Whether the layer's view is complete (see the module docstring)."""
    state = layer._slicing_state
    slicer = viewer._layer_slicer

    def applied() -> bool:
        return not slicer._layers_to_task and state._slice.request_id == state._last_slice_id

    if loader is None:
        if asynchronous:
            return lambda: bool(layer.loaded) and applied()
        return lambda: True
    if asynchronous:
        return lambda: bool(loader.settled) and applied()
    return lambda: bool(loader.settled)


def _touched_chunks(layer: Any, chunk: int) -> set[tuple[int, int]]:
    """The level-0 chunks the layer's current corner pixels touch."""
    if layer.data_level != 0:
        raise AssertionError(f"napari displays level {layer.data_level}, not level 0")
    (y0, x0), (y1, x1) = (tuple(int(v) for v in row[-2:]) for row in layer.corner_pixels)
    return {
        (cy, cx)
        for cy in range(y0 // chunk, y1 // chunk + 1)
        for cx in range(x0 // chunk, x1 // chunk + 1)
    }


def _check_displayed(layer: Any) -> dict[str, Any]:
    """Compare the displayed slice with the generator at the layer's corner pixels."""
    import numpy as np

    from napari_lazy_zarr.core.sample import synthetic_cells

    level = int(layer.data_level)
    step = round(float(layer.downsample_factors[level][-1]))
    (y0, x0), (y1, x1) = (tuple(int(v) for v in row[-2:]) for row in layer.corner_pixels)
    raw = np.asarray(layer._slice.image.raw)
    expected = synthetic_cells(y0 * step, x0 * step, (y1 - y0 + 1, x1 - x0 + 1), step=step)
    same = raw.shape == expected.shape and bool(np.array_equal(raw, expected))
    wrong = int(np.count_nonzero(raw != expected)) if raw.shape == expected.shape else -1
    return {
        "ok": same,
        "level": level,
        "corners": [[y0, x0], [y1, x1]],
        "shape": list(raw.shape),
        "wrong_pixels": wrong,
    }


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the store in a fresh viewer and walk the pan; returns the per-step records."""
    import napari
    import napari.qt
    import napari.settings

    app = napari.qt.get_qapp()
    asynchronous = spec["slicing"] == "async"
    if bool(napari.settings.get_settings().experimental.async_) != asynchronous:
        raise AssertionError(f"napari's async setting is not {asynchronous}")
    ours = spec["plugin"] == "napari-lazy-zarr"
    loader: Any = None
    if ours:
        from napari_lazy_zarr._reader import configure

        configure(total_bytes_limit=spec["total_bytes_limit"], concurrency=THREADS)
    viewer = napari.Viewer(show=True, title=f"bench: {spec['label']} ({spec['slicing']})")
    if ours:
        from napari_lazy_zarr._reader import watch_viewer

        watch_viewer(viewer)
    started = time.perf_counter()
    layers = viewer.open(spec["path"], plugin=spec["plugin"])
    open_seconds = time.perf_counter() - started
    if len(layers) != 1:
        raise AssertionError(f"{spec['plugin']} opened {len(layers)} layers, expected 1")
    layer = layers[0]
    if ours:
        from napari_lazy_zarr._layer_data import loader_of

        loader = loader_of(layer)
        if loader is None:
            raise AssertionError("the plugin's layer has no loader")
        loader.prefetch = spec["prefetch"]
    if not layer.multiscale:
        raise AssertionError(f"{spec['plugin']} did not open a multiscale layer")
    width, height = _size_canvas(viewer, app, tuple(spec["canvas"]))
    canvas = viewer.window._qt_viewer.canvas
    probe = _Probe(layer)
    complete = _completion(viewer, layer, loader, asynchronous)
    timeout = spec["step_timeout"]
    _wait(app, complete, timeout, "the initial view")

    scale = float(layer.scale[-1])
    if float(layer.scale[-2]) != scale or any(float(t) != 0 for t in layer.translate):
        raise AssertionError(f"unexpected layer transform {layer.scale}, {layer.translate}")
    viewer.camera.zoom = 1 / scale  # one screen pixel per level-0 pixel

    def center(y0: int, x0: int) -> tuple[float, float]:
        # Pixel i spans [i - 0.5, i + 0.5] in data coordinates: the canvas edge on
        # the edge of pixel (y0, x0).
        return ((y0 - 0.5 + height / 2) * scale, (x0 - 0.5 + width / 2) * scale)

    positions = [tuple(p) for p in spec["positions"]]
    viewer.camera.center = center(*positions[0])
    canvas.on_draw(None)
    _wait(app, complete, timeout, "the start view")
    chunk = spec["chunk"]
    seen = _touched_chunks(layer, chunk)
    _pump(app, spec["dwell"])

    steps: list[dict[str, Any]] = []
    for y0, x0 in positions[1:]:
        app.processEvents()
        probe.reset()
        start = time.perf_counter()
        viewer.camera.center = center(y0, x0)
        before_draw = time.perf_counter()
        canvas.on_draw(None)
        after_draw = time.perf_counter()
        draw = after_draw - before_draw
        draw_slices = probe.slices
        busy = draw
        longest = draw
        loaded_early = False
        while not (done := complete()):
            if layer.loaded:
                loaded_early = True
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"step to {(y0, x0)} not complete after {timeout} s")
            begin = time.perf_counter()
            app.processEvents()
            spent = time.perf_counter() - begin
            busy += spent
            longest = max(longest, spent)
            if not (done := complete()):
                time.sleep(0.0005)
        assert done
        completed = time.perf_counter() - start
        slicing, slices = probe.seconds, probe.slices
        begin = time.perf_counter()
        app.processEvents()  # paint the complete view
        spent = time.perf_counter() - begin
        busy += spent
        longest = max(longest, spent)
        touched = _touched_chunks(layer, chunk)
        new = touched - seen
        seen |= touched
        steps.append(
            {
                "position": [y0, x0],
                "draw": draw,
                "draw_slices": draw_slices,
                "slicing": slicing,
                "slices": slices,
                "busy": busy,
                "longest": longest,
                "complete": completed,
                "new_chunks": len(new),
                "loaded_while_incomplete": loaded_early,
            }
        )
        _pump(app, spec["dwell"])

    check = _check_displayed(layer)
    paint = _paint_seconds(viewer, app)
    result = {
        "label": spec["label"],
        "slicing": spec["slicing"],
        "canvas": [width, height],
        "open": open_seconds,
        "renderer": _renderer(viewer),
        "paint": paint,
        "level_shapes": [list(map(int, s)) for s in layer.level_shapes],
        "scale": scale,
        "check": check,
        "steps": steps,
    }
    if loader is not None:
        stats = loader.controller.cache.statistics
        result["cache"] = {"loads": stats.loads, "hits": stats.hits, "misses": stats.misses}
    viewer.close()
    return result


def _worker_main(argv: Sequence[str]) -> int:
    spec = json.loads(argv[0])
    result = _worker(spec)
    with open(spec["output"], "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


# -- the parent ----------------------------------------------------------------------


def _require_display() -> None:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise SystemExit(
            "the napari benchmark needs a display: run it under "
            "xvfb-run -a -s '-screen 0 1920x1080x24' ./dev bench napari"
        )


def run_worker(
    config: Config, reader: Reader, slicing: str, path: Path, scratch: Path, run_id: int
) -> dict[str, Any]:
    """One subprocess: `reader` in a fresh viewer, `slicing` mode, the whole pan."""
    output = scratch / f"result-{run_id}.json"
    spec = {
        "label": reader.label,
        "plugin": reader.plugin,
        "prefetch": reader.prefetch,
        "slicing": slicing,
        "path": str(path),
        "positions": pan_positions(config),
        "canvas": list(config.canvas),
        "chunk": config.chunk,
        "dwell": config.dwell,
        "step_timeout": config.step_timeout,
        "total_bytes_limit": config.total_bytes_limit,
        "output": str(output),
    }
    env = dict(os.environ)
    # napari reads its settings from this (empty) file, never the user's, and
    # the slicing mode from the environment.
    env["NAPARI_CONFIG"] = str(scratch / f"settings-{run_id}.yaml")
    env["NAPARI_ASYNC"] = "1" if slicing == "async" else "0"
    for name in ("NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT", "NAPARI_LAZY_ZARR_CONCURRENCY"):
        env.pop(name, None)
    return worker_result(
        "bench.napari_pan",
        spec,
        output=output,
        env=env,
        timeout=config.worker_timeout,
        what=f"napari worker {reader.label} ({slicing})",
    )


def _key(reader: Reader, slicing: str) -> str:
    return f"{reader.label} | {slicing}"


def _progress(result: dict[str, Any], elapsed: float) -> str:
    cold = [s for s in result["steps"] if s["new_chunks"]]
    draw = _median([s["draw"] for s in cold])
    complete = _median([s["complete"] for s in cold])
    check = "pixels ok" if result["check"]["ok"] else "WRONG PIXELS"
    return (
        f"[napari] {result['label']} ({result['slicing']}): {len(cold)} cold steps, "
        f"on_draw {_ms(draw)} ms, complete {_ms(complete)} ms (medians); {check}; "
        f"{elapsed:.0f} s"
    )


def run(quick: bool = False) -> str:
    """Run the napari benchmark (`QUICK` or `FULL`) and return its Markdown section."""
    config = QUICK if quick else FULL
    _require_display()
    path = ensure_store(config)
    warmed = warm_page_cache(path)
    print(f"[napari] page cache warmed: {warmed / 2**20:.0f} MiB read", flush=True)
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, Any]]] = {
        _key(reader, slicing): [] for slicing in MODES for reader in READERS
    }
    run_ids = itertools.count()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="napari-pan-") as scratch_dir:
        from pathlib import Path

        scratch = Path(scratch_dir)

        def method(reader: Reader, slicing: str) -> Callable[[int], list[float]]:
            def measure(_: int) -> list[float]:
                begin = time.perf_counter()
                result = run_worker(config, reader, slicing, path, scratch, next(run_ids))
                results[_key(reader, slicing)].append(result)
                print(_progress(result, time.perf_counter() - begin), flush=True)
                return [step["draw"] for step in result["steps"]]

            return measure

        interleaved(
            {
                _key(reader, slicing): method(reader, slicing)
                for slicing in MODES
                for reader in READERS
            },
            [0],
            config.rounds,
            on_round=lambda index: print(
                f"[napari] round {index + 1}/{config.rounds} done", flush=True
            ),
        )
    info = RunInfo(
        elapsed=time.perf_counter() - started,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        store_bytes=_store_bytes(path),
    )
    return report(config, results, info)


# -- report --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Facts about one run that the report states."""

    elapsed: float
    load_before: float
    load_after: float
    store_bytes: int


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _ms(seconds: float) -> str:
    value = seconds * 1e3
    if math.isnan(value):
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}x"


def _times(
    results: dict[str, list[dict[str, Any]]], key: str, metric: str, *, cold: bool | None
) -> list[float]:
    """One metric over every step of every run of `key` (cold steps only, warm only, all)."""
    return [
        float(step[metric])
        for result in results[key]
        for step in result["steps"]
        if cold is None or bool(step["new_chunks"]) == cold
    ]


METRICS: Final = (
    ("draw", "on_draw"),
    ("slicing", "main-thread slicing"),
    ("busy", "main-thread busy"),
    ("complete", "complete"),
)


@dataclass(frozen=True, slots=True)
class Target:
    measurement: str
    slicing: str
    metric: str
    reference: Reader | None
    """For a ratio target, the dask reader compared against; None for an absolute one."""
    limit: float
    """Absolute: at most `limit` ms. Ratio: reference / ours at least `limit` when
    `at_least`, else ours / reference at most `limit`."""
    at_least: bool = False


TARGETS: Final = (
    Target("on_draw (the step's slice), median", "sync", "draw", None, 5.0),
    Target("on_draw (the step's slice), median", "async", "draw", None, 5.0),
    Target("all main-thread slicing of the step, median", "sync", "slicing", None, 5.0),
    Target("all main-thread slicing of the step, median", "async", "slicing", None, 5.0),
    Target("on_draw: dask reader / ours", "sync", "draw", OME_ZARR, 20.0, at_least=True),
    Target("on_draw: dask reader / ours", "sync", "draw", BUILTIN, 20.0, at_least=True),
    Target("complete: ours / dask reader", "sync", "complete", OME_ZARR, 1.0),
    Target("complete: ours / dask reader", "sync", "complete", BUILTIN, 1.0),
    Target("complete: ours / dask reader", "async", "complete", OME_ZARR, 1.0),
    Target("complete: ours / dask reader", "async", "complete", BUILTIN, 1.0),
)


def _targets_table(results: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for target in TARGETS:
        ours = _median(_times(results, _key(OURS, target.slicing), target.metric, cold=True))
        if target.reference is None:
            measured = ours * 1e3
            shown, limit, reference_ms = f"{_ms(ours)} ms", f"<= {target.limit:g} ms", ""
            met = measured <= target.limit
            reference_label = ""
        else:
            key = _key(target.reference, target.slicing)
            reference = _median(_times(results, key, target.metric, cold=True))
            reference_ms = _ms(reference)
            reference_label = target.reference.label
            if target.at_least:
                measured = reference / ours
                limit = f">= {_ratio(target.limit)}"
                met = measured >= target.limit
            else:
                measured = ours / reference
                limit = f"<= {_ratio(target.limit)}"
                met = measured <= target.limit
            shown = _ratio(measured)
        rows.append(
            [
                target.measurement,
                target.slicing,
                _ms(ours),
                reference_label,
                reference_ms,
                shown,
                limit,
                "yes" if met else "**no**",
            ]
        )
    return markdown_table(
        ["measurement", "slicing", "ours (ms)", "vs.", "ref. (ms)", "measured", "target", "met?"],
        rows,
    )


def _metrics_table(
    results: dict[str, list[dict[str, Any]]],
    *,
    cold: bool | None,
    summary: Callable[[Sequence[float]], float],
) -> str:
    rows = []
    for slicing in MODES:
        for reader in READERS:
            key = _key(reader, slicing)
            cells = [_ms(summary(_times(results, key, m, cold=cold))) for m, _ in METRICS]
            slices = _times(results, key, "slices", cold=cold)
            longest = _times(results, key, "longest", cold=cold)
            rows.append(
                [
                    reader.label,
                    slicing,
                    *cells,
                    _ms(summary(longest)),
                    f"{_mean(slices):.1f}",
                    str(len(slices)),
                ]
            )
    header = [
        "reader",
        "slicing",
        *(f"{label} (ms)" for _, label in METRICS),
        "longest block (ms)",
        "slices/step",
        "n",
    ]
    return markdown_table(header, rows)


def _ratios_table(results: dict[str, list[dict[str, Any]]]) -> str:
    """Per slicing mode and metric: each dask reader's cold-step median over ours."""
    rows = []
    for slicing in MODES:
        for metric, label in METRICS:
            ours = _median(_times(results, _key(OURS, slicing), metric, cold=True))
            prefetch = _median(_times(results, _key(OURS_PREFETCH, slicing), metric, cold=True))
            cells = []
            for reader in DASK_READERS:
                reference = _median(_times(results, _key(reader, slicing), metric, cold=True))
                cells += [_ratio(reference / ours), _ratio(reference / prefetch)]
            rows.append([label, slicing, *cells])
    header = ["metric (cold steps)", "slicing"]
    for reader in DASK_READERS:
        header += [f"{reader.label} / ours", f"{reader.label} / ours + prefetch"]
    return markdown_table(header, rows)


def _facts(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Run facts that must agree across workers: canvas, levels, cold steps."""
    every = [result for runs in results.values() for result in runs]
    canvases = {tuple(r["canvas"]) for r in every}
    patterns = {tuple(bool(s["new_chunks"]) for s in r["steps"]) for r in every}
    renderers = {r["renderer"] for r in every}
    wrong = [
        f"{r['label']} ({r['slicing']}): {r['check']['wrong_pixels']} wrong pixels at "
        f"level {r['check']['level']}, corners {r['check']['corners']}"
        for r in every
        if not r["check"]["ok"]
    ]
    loaded_early: dict[str, int] = {}
    for key, runs in results.items():
        count = sum(s["loaded_while_incomplete"] for r in runs for s in r["steps"])
        if count:
            loaded_early[key] = count
    return {
        "canvases": canvases,
        "patterns": patterns,
        "renderers": renderers,
        "wrong": wrong,
        "loaded_early": loaded_early,
        "level_shapes": every[0]["level_shapes"],
        "cold_steps": sorted({sum(p) for p in patterns}),
        "steps": len(every[0]["steps"]),
        "open": {
            reader.label: _median(
                [r["open"] for slicing in MODES for r in results[_key(reader, slicing)]]
            )
            for reader in READERS
        },
        "paint": _median([r["paint"] for r in every]),
        "dask_warm_reslices": _count_steps(
            results, DASK_READERS, cold=False, test=lambda s: s["draw_slices"] > 0
        ),
        "prefetched": _count_steps(
            results, (OURS_PREFETCH,), cold=True, test=lambda s: s["slices"] == 1
        ),
    }


def _count_steps(
    results: dict[str, list[dict[str, Any]]],
    readers: Sequence[Reader],
    *,
    cold: bool,
    test: Callable[[dict[str, Any]], bool],
) -> tuple[int, int]:
    """How many of the readers' cold (or warm) steps, in both slicing modes, pass `test`."""
    steps = [
        step
        for reader in readers
        for slicing in MODES
        for result in results[_key(reader, slicing)]
        for step in result["steps"]
        if bool(step["new_chunks"]) == cold
    ]
    return sum(map(test, steps)), len(steps)


def report(config: Config, results: dict[str, list[dict[str, Any]]], info: RunInfo) -> str:
    """The Markdown section for docs/benchmarks.md."""
    facts = _facts(results)
    positions = pan_positions(config)
    width, height = config.canvas
    levels = ", ".join(f"{s[0]}" for s in facts["level_shapes"])
    cold = "/".join(map(str, facts["cold_steps"]))
    warm_reslices, prefetched = facts["dask_warm_reslices"], facts["prefetched"]
    if len(facts["canvases"]) != 1 or facts["canvases"] != {config.canvas}:
        canvas_note = f" (**canvas sizes differed between runs: {sorted(facts['canvases'])}**)"
    else:
        canvas_note = ""
    pattern_note = (
        ""
        if len(facts["patterns"]) == 1
        else " **The cold steps differed between runs** (readers did not show the same views)."
    )
    if facts["wrong"]:
        correctness = "**Wrong pixels displayed:** " + "; ".join(facts["wrong"]) + "."
    else:
        correctness = (
            "Every run's displayed slice after the last step (`layer._slice.image.raw` at "
            "`layer.corner_pixels`, level 0) equals `synthetic_cells` exactly."
        )
    if facts["loaded_early"]:
        loaded_note = (
            "`layer.loaded` was True while the view was still incomplete (polls during a "
            "step) in: "
            + ", ".join(f"{key} ({count} steps)" for key, count in facts["loaded_early"].items())
            + "."
        )
    else:
        loaded_note = "`layer.loaded` was never True while a view was incomplete."
    opens = ", ".join(f"{key} {seconds:.1f} s" for key, seconds in facts["open"].items())
    runs = len(next(iter(results.values())))
    lines = [
        "## napari: panning in a real viewer, ours vs the dask readers (sync and async slicing)",
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
                "vispy",
                "PyQt6",
            ]
        )
        + f"; OpenGL renderer: {', '.join(sorted(facts['renderers']))}.",
        "",
        f"Data: the `synthetic_cells` image as an OME-Zarr 0.5 / Zarr v3 pyramid "
        f"(`write_sample_ome_zarr`): {config.size}x{config.size} uint16 at level 0, "
        f"{config.chunk}x{config.chunk} chunks, blosc-zstd, levels {levels} px wide, "
        f"0.25 µm per pixel at level 0; {info.store_bytes / 2**20:.0f} MiB on disk. All "
        "three readers open this same store: napari-ome-zarr reads OME-Zarr 0.5 / Zarr v3, "
        "and napari's built-in reader (`viewer.open(path, plugin='napari')`) opens the "
        "group as a list of `dask.array.from_zarr` levels (it ignores the OME metadata, so "
        "its layer has scale 1 and the camera zoom is 1 instead of 4; the views are the "
        "same level-0 pixels). The OS page cache is warm for every reader alike.",
        "",
        f"Viewer: `napari.Viewer(show=True)` under Xvfb, canvas {width}x{height} screen "
        f"pixels{canvas_note}, one screen pixel per level-0 pixel (napari displays level 0 "
        f"at every step). Pan: the engine benchmark's path, the view's top-left at level-0 "
        f"pixel (y, x) = {positions[0]} then {config.pan_steps} steps of {config.pan_step} "
        f"px to the right; {config.dwell * 1e3:.0f} ms of idle event loop between steps. "
        f"Each (reader, slicing) pair ran {runs} times, each time in its own subprocess "
        "(fresh viewer and caches, napari settings from an empty file; async = "
        "`NAPARI_ASYNC=1`), in rounds with the order rotated each round. ours: "
        f"`configure(total_bytes_limit=1 GiB, concurrency={THREADS})`, with prefetch off "
        "(`loader.prefetch = False`: every chunk a step exposes is cold), and as ours + "
        "prefetch with the plugin's default prefetch (the ring of chunks around the view "
        "loads at low priority, so during the idle time between steps). The dask readers "
        "run as napari runs them: dask's threaded scheduler (2 threads) and napari's "
        "opportunistic dask cache (cachey) on. Measured in "
        f"{info.elapsed:.0f} s (data generation excluded); 1-minute load average "
        f"{info.load_before:.2f} before, {info.load_after:.2f} after. Median time to "
        f"open the store: {opens}. One repaint of the canvas (software OpenGL) takes "
        f"{_ms(facts['paint'])} ms (median over all runs), for every reader alike.",
        "",
        f"Cold steps: {cold} of the {facts['steps']} steps move the view onto level-0 "
        f"chunks that no earlier view of the run touched (the view's right edge enters a "
        f"new {config.chunk}-px chunk column every other step).{pattern_note} On the other "
        "steps every pixel was already read: ours copies resident chunks; the dask readers "
        "do not re-slice at all, because napari expands a dask layer's sliced region to "
        "whole chunks (`expand_corners_to_chunk_boundaries`) and the view stays inside it "
        f"(they re-sliced on {warm_reslices[0]} of {warm_reslices[1]} such steps). For "
        "ours + prefetch, the chunks of a cold step had usually been prefetched during the "
        f"idle time before it ({prefetched[0]} of {prefetched[1]} cold steps took a single "
        "slice). The targets and the first table are over cold steps only.",
        "",
        "Generate with `xvfb-run -a -s '-screen 0 1920x1080x24' ./dev bench napari`; the "
        "code and the precise definition of each measurement are in `bench/napari_pan.py`.",
        "",
        "What is measured, per step, all on napari's main thread unless said otherwise:",
        "",
        "- **on_draw**: `canvas.on_draw(None)` right after the camera moved, timed with "
        "`time.perf_counter`. napari computes the level and corners there and, if they "
        "changed, slices the layer: sync, the whole slice (dask's compute, or our "
        "non-blocking read); async, only building and submitting the request.",
        "- **main-thread slicing**: all main-thread time in the layer's slicing calls "
        "(`set_view_slice`; async: `_make_slice_request`, `_update_slice_response`) from "
        "the camera move until the view is complete, so it includes the re-slices our "
        "loader requests as chunks land (`layer.refresh()`).",
        "- **main-thread busy**: on_draw plus every Qt `processEvents` call until the view "
        "is complete, plus one more that paints it: everything the main thread did for the "
        "step, repaints included (software OpenGL, so painting is slow for everyone).",
        "- **complete**: from the camera move until the view is complete: ours, "
        "`loader.settled` (all chunks landed and the layer re-sliced since); dask readers "
        "in sync mode, when on_draw returns; async mode, when napari has applied the "
        "layer's latest slice request (and `layer.loaded`; for ours also `settled`). The "
        "event loop is polled every ~0.5 ms.",
        "- **longest block**: the longest single main-thread call in the step (on_draw or "
        "one `processEvents`); **slices/step**: main-thread slices (mean).",
        "",
        correctness + " " + loaded_note,
        "",
        "### Targets (cold steps; ours = prefetch off)",
        "",
        _targets_table(results),
        "### Cold steps, median ms",
        "",
        _metrics_table(results, cold=True, summary=_median),
        "### All steps, mean ms per step",
        "",
        "Amortized over the whole pan: the steps without new chunks count too (n = steps x runs).",
        "",
        _metrics_table(results, cold=None, summary=_mean),
        "### Ratios of cold-step medians: dask reader / ours (above 1: ours is faster)",
        "",
        _ratios_table(results),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
