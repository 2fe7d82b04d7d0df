"""The dask benchmark: a filter graph over a zarr store panned in napari, vs napari's own path.

The graph: a 5x5 binomial (Gaussian-like) filter applied `PASSES` times (an
expensive filter: ~0.1 s per 512² block here), ``map_overlap`` over a
uint8 zarr store (16384², 512² chunks; quick: 4096²), as a pyramid whose level
k filters the store coarsened 2^k x (so an overview costs one filter call per
coarse block, not one per fine block). The same list of dask arrays is given
to napari directly (``viewer.add_image(levels, multiscale=True)``: napari
computes the visible region on its main thread with dask's default scheduler)
and to this plugin (`napari_lazy_zarr.dask.add_image`), each on dask's local
threaded scheduler and on a threaded `distributed.LocalCluster` (127.0.0.1).

In a real `napari.Viewer` (800x600 canvas, level 0 at one screen pixel per
pixel), per run:

1. **slow pan**: steps of 512 px to the right; after each step, the time the
   main thread spent in it (camera move and event processing: napari's
   slicing and the repaint), the part of it spent in the layer's slicing calls
   (`bench.napari_pan._Probe`: what the ≤ 5 ms target is about; napari: the
   compute of the visible blocks), the slicing until the view is complete
   (ours: the step and the refreshes as blocks land), and the time until the
   view is complete (napari: the step itself; ours: `loader.settled`).
2. **fast pan**: steps of 512 px issued every 50 ms (a drag), then the final
   view is waited for. Every level-0 filter call is recorded (block, finish
   time); a call is *wasted* when its block is outside the view the user had
   asked for at the moment it finished (the view of the latest step issued by
   the 50 ms schedule, whatever the viewer was doing).

Runs are in-process, one viewer each, readers alternated. Numbers are medians.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import DATA_DIR, environment_line, generated_store, markdown_table

CANVAS = (800, 600)
CHUNK = 512
STEP = 512
FAST_INTERVAL = 0.05
KERNEL = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16
PASSES = 8


@dataclass(frozen=True)
class Config:
    size: int
    slow_steps: int
    fast_steps: int
    timeout: float


QUICK = Config(size=4096, slow_steps=3, fast_steps=5, timeout=60.0)
FULL = Config(size=16384, slow_steps=8, fast_steps=16, timeout=300.0)

# Every level-0 filter call: (monotonic finish time, block row, block col).
_CALLS: list[tuple[float, int, int]] = []
_CALLS_LOCK = threading.Lock()


def blur(block: np.ndarray[Any, Any], level: int = 0, block_info: Any = None) -> Any:
    """Separable 5-tap binomial filter (float32); records level-0 calls."""
    out = block.astype(np.float32)
    for _ in range(PASSES):
        rows = sum(w * np.roll(out, s - 2, axis=0) for s, w in enumerate(KERNEL))
        out = sum(w * np.roll(rows, s - 2, axis=1) for s, w in enumerate(KERNEL))
    if level == 0 and block_info is not None:
        (r0, _), (c0, _) = block_info[None]["array-location"]
        with _CALLS_LOCK:
            _CALLS.append((time.monotonic(), r0 // CHUNK, c0 // CHUNK))
    return np.asarray(out, dtype=np.float32)


def ensure_store(config: Config) -> str:
    import zarr

    path = DATA_DIR / f"dask-view-{config.size}.zarr"

    def write() -> None:
        array = zarr.create_array(
            str(path), shape=(config.size, config.size), chunks=(CHUNK, CHUNK), dtype="u1"
        )
        rows = np.arange(config.size, dtype=np.uint32)[:, None]
        for start in range(0, config.size, 2048):
            cols = np.arange(start, min(start + 2048, config.size), dtype=np.uint32)[None, :]
            array[:, start : start + cols.shape[1]] = ((rows * 7 + cols * 13) ^ (rows // 64)) % 251

    return str(generated_store(path, {"size": config.size}, write, "dask"))


def pyramid(path: str) -> list[Any]:
    """Level k: the filter over the store coarsened 2^k x (chunks of 512)."""
    import dask.array as da

    base = da.from_zarr(path)  # type: ignore[no-untyped-call]
    levels = []
    level_input = base
    k = 0
    while True:
        levels.append(
            level_input.map_overlap(
                functools.partial(blur, level=k),
                depth=2,
                boundary="reflect",
                dtype=np.float32,
                meta=np.empty((0, 0), np.float32),
            )
        )
        if max(level_input.shape) <= CHUNK:
            return levels
        level_input = (
            da.coarsen(np.mean, level_input, {0: 2, 1: 2}, trim_excess=True)
            .astype(np.float32)
            .rechunk(CHUNK)
        )
        k += 1


def _visible_blocks(center: tuple[float, float]) -> set[tuple[int, int]]:
    (cy, cx), (w, h) = center, CANVAS
    return {
        (r, c)
        for r in range(int(cy - h / 2) // CHUNK, int(cy + h / 2) // CHUNK + 1)
        for c in range(int(cx - w / 2) // CHUNK, int(cx + w / 2) // CHUNK + 1)
    }


def run_one(reader: str, scheduler: str, path: str, config: Config, client: Any) -> dict[str, Any]:
    import dask
    import napari
    from napari.qt import get_qapp

    from bench.napari_pan import _Probe, _size_canvas
    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.dask import add_image

    app = get_qapp()
    levels = pyramid(path)
    viewer = napari.Viewer(show=True, title=f"bench: dask {reader} {scheduler}")
    viewer.window._qt_viewer.canvas._scene_canvas.native.setFixedSize(*CANVAS)
    _size_canvas(viewer, app, CANVAS)
    use = client if scheduler == "cluster" else "threads"
    result: dict[str, Any] = {"reader": reader, "scheduler": scheduler}
    with dask.config.set(scheduler=use):
        started = time.perf_counter()
        if reader == "napari":
            layer = viewer.add_image(levels, multiscale=True, contrast_limits=(0, 255))
            loader = None
        else:
            cache = ChunkCache(1 << 30)  # a cold cache per run
            layer = add_image(
                viewer,
                levels,
                client=client if scheduler == "cluster" else None,
                contrast_limits=(0, 255),
                cache=cache,
            )
            loader = loader_of(layer)
        result["open"] = time.perf_counter() - started
        probe = _Probe(layer)  # main-thread time in the layer's slicing calls
        viewer.scene.camera.zoom = 1.0
        y = config.size / 2
        x0 = config.size / 4

        def settled() -> bool:
            return loader is None or bool(loader.settled)

        def wait(deadline: float) -> bool:
            while not settled():
                if time.monotonic() > deadline:
                    return False
                app.processEvents()
                time.sleep(0.002)
            return True

        def step(center: tuple[float, float]) -> float:
            begin = time.perf_counter()
            viewer.scene.camera.center = center
            viewer.window._qt_viewer.canvas.on_draw(None)
            app.processEvents()
            return time.perf_counter() - begin

        step((y, x0))
        wait(time.monotonic() + config.timeout)
        main, complete, slicing, slicing_all = [], [], [], []
        for i in range(1, config.slow_steps + 1):
            begin = time.perf_counter()
            probe.reset()
            main.append(step((y, x0 + i * STEP)))
            slicing.append(probe.seconds)
            complete.append(
                time.perf_counter() - begin
                if wait(time.monotonic() + config.timeout)
                else float("inf")
            )
            slicing_all.append(probe.seconds)
        result["main_ms"] = statistics.median(main) * 1e3
        result["main_max_ms"] = max(main) * 1e3
        result["slice_ms"] = statistics.median(slicing) * 1e3
        result["slice_max_ms"] = max(slicing) * 1e3
        result["slice_all_ms"] = statistics.median(slicing_all) * 1e3
        result["complete_ms"] = statistics.median(complete) * 1e3
        # Fast pan: the user's schedule, whatever the viewer does.
        y = y + 2 * CHUNK
        with _CALLS_LOCK:
            _CALLS.clear()
        centers = [(y, x0 + i * STEP) for i in range(config.fast_steps)]
        t0 = time.monotonic()
        fast_main, fast_slicing = [], []
        for i, center in enumerate(centers):
            while time.monotonic() < t0 + i * FAST_INTERVAL:
                app.processEvents()
                time.sleep(0.002)
            probe.reset()
            fast_main.append(step(center))
            fast_slicing.append(probe.seconds)
        finished = wait(time.monotonic() + config.timeout)
        result["fast_final_s"] = time.monotonic() - t0 if finished else float("inf")
        result["fast_main_ms"] = statistics.median(fast_main) * 1e3
        result["fast_slice_ms"] = statistics.median(fast_slicing) * 1e3
        result["fast_slice_max_ms"] = max(fast_slicing) * 1e3
        time.sleep(0.5)  # computations still running when the view settled end (counted too)
        app.processEvents()
        with _CALLS_LOCK:
            calls = list(_CALLS)
        wasted = 0
        for when, r, c in calls:
            index = min(len(centers) - 1, max(0, int((when - t0) / FAST_INTERVAL)))
            if (r, c) not in _visible_blocks(centers[index]):
                wasted += 1
        result["computed"] = len(calls)
        result["wasted"] = wasted
        result["needed_final"] = len(_visible_blocks(centers[-1]))
    viewer.layers.clear()
    viewer.close()
    if reader != "napari":
        cache.close()
    app.processEvents()
    return result


def run(quick: bool = False) -> str:
    """Run the dask benchmark and return its Markdown section."""
    from distributed import Client, LocalCluster

    if not os.environ.get("DISPLAY"):
        raise RuntimeError("the dask benchmark needs a display (run under xvfb-run -a)")
    config = QUICK if quick else FULL
    path = ensure_store(config)
    rows = []
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=1,
            threads_per_worker=os.cpu_count() or 2,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,  # type: ignore[no-untyped-call]
    ):
        for scheduler in ("local", "cluster"):
            for reader in ("napari", "napari-lazy-zarr"):
                result = run_one(reader, scheduler, path, config, client)
                print(f"[dask] {result}", flush=True)
                rows.append(
                    (
                        reader,
                        scheduler,
                        f"{result['open'] * 1e3:.0f}",
                        f"{result['slice_ms']:.1f} (max {result['slice_max_ms']:.0f})",
                        f"{result['slice_all_ms']:.1f}",
                        f"{result['main_ms']:.1f} (max {result['main_max_ms']:.0f})",
                        f"{result['complete_ms']:.0f}",
                        f"{result['fast_slice_ms']:.1f} (max {result['fast_slice_max_ms']:.0f})",
                        f"{result['fast_main_ms']:.1f}",
                        f"{result['fast_final_s']:.2f}",
                        f"{result['computed']}",
                        f"{result['wasted']}",
                    )
                )
    table = markdown_table(
        (
            "reader",
            "scheduler",
            "open (ms)",
            "slow pan: slicing per step (ms)",
            "slow pan: slicing until complete (ms)",
            "slow pan: main thread per step, repaint included (ms)",
            "slow pan: view complete (ms)",
            "fast pan: slicing per step (ms)",
            "fast pan: main thread per step (ms)",
            "fast pan: final view complete (s)",
            "fast pan: level-0 blocks computed",
            "of which wasted",
        ),
        rows,
    )
    return (
        f"### Dask graph view ({config.size}², {CHUNK}² blocks, 5x5 filter; "
        f"{'quick' if quick else 'full'})\n\n"
        f"{environment_line(['napari', 'dask', 'distributed'])}\n\n{table}\n\n"
        "*slicing*: main-thread time in the layer's slicing calls (napari: including the "
        "compute of the visible blocks); *main thread per step*: the camera move and the event "
        "processing that follows, repaint included; *wasted*: level-0 blocks finished while "
        "outside the view the user had asked for by then. Targets: ≤ 5 ms of main-thread "
        "slicing per pan step; ≥ 50 % less wasted compute than napari in the fast pan.\n"
    )
