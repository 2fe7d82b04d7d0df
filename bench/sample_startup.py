"""The sample benchmark: how soon napari shows the sample, and what it costs the main thread.

A real viewer under a display (Xvfb), 1600x1000, in a fresh subprocess per run
(``python -m bench.sample_startup SPEC``; its own napari settings and user cache
directory). The sample is opened the way *File ▸ Open Sample ▸ Synthetic 32768²
OME-Zarr pyramid (napari-lazy-zarr)* does it, through napari's public route:
``viewer.open_sample("napari-lazy-zarr", "pyramid")``, called from the event loop.
Variants:

- *sample*: served from its generator (a `FunctionSource` per level, computed
  by the chunk cache's workers); nothing is written.
- *…, warm*: napari has shown (and removed) an image layer before the clock
  starts, so napari's one-time costs of a first image layer (importing SciPy,
  building the layer controls) are not counted: what is left is the sample's.
- *in-memory image*: napari alone, the peer: ``viewer.add_image`` of the
  sample's level 3 as a NumPy array (computed before the clock starts).
- *empty viewer*: the same event loop and heartbeat, no layer: the floor.

Measured in each run, over `Config.seconds` after the open: a 5 ms QTimer
heartbeat on the main thread, whose longest gap is the longest main-thread
step (the open itself, napari's slicing, refreshes, painting: anything the
window waits on); the open call's duration and, within it, the plugin's npe2
sample command's; the time from the open to the
first slice napari applies (its `set_data` event) whose data holds computed
pixels rather than the fill value (`ViewController.latest`). Then one canvas
screenshot confirms that the cells are on screen.

Run with ``xvfb-run -a -s "-screen 0 1920x1080x24" ./dev run python -m bench.sample_startup``
(``--quick``: a 4096² sample, one run per variant).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import environment_line, interleaved, markdown_table, worker_result

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


@dataclass(frozen=True, slots=True)
class Config:
    size: int
    """The sample's side (the npe2 sample is 32768²)."""
    runs: int
    """Runs per variant, interleaved."""
    seconds: float
    """How long each run watches the main thread after the open."""
    worker_timeout: float = 240.0


FULL = Config(size=32768, runs=3, seconds=10.0)
QUICK = Config(size=4096, runs=1, seconds=5.0)
VARIANTS = (
    "sample",
    "sample, warm",
    "in-memory image",
    "in-memory image, warm",
    "empty viewer",
)
HEARTBEAT_MS = 5


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One run in this (fresh) process: open the sample, watch the main thread."""
    import napari
    import numpy as np
    from napari.qt import get_qapp
    from qtpy.QtCore import QTimer

    begin = time.perf_counter()
    import napari_lazy_zarr._sample_data as sample_data

    plugin_import = time.perf_counter() - begin
    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr.cli import _fit_canvas
    from napari_lazy_zarr.core.sample import synthetic_cells

    sample_data.SAMPLE_SIZE = spec["size"]  # what the npe2 command opens (32768 by default)
    app = get_qapp()
    viewer = napari.Viewer(show=True)
    viewer.window.resize(1600, 1000)
    _fit_canvas(viewer, 1200, 800)
    variant = spec["variant"]
    if variant.endswith(", warm"):  # napari's one-time costs of a first image layer, paid
        viewer.add_image(np.zeros((64, 64), np.uint16))
        viewer.layers.clear()
    for _ in range(20):  # let the window settle before the clock starts
        app.processEvents()
        time.sleep(0.01)

    gaps: list[float] = []
    result: dict[str, Any] = {
        "open_s": None,
        "command_s": None,
        "first_pixels_s": None,
        "plugin_import_s": plugin_import,
    }
    last = [time.perf_counter()]
    opened = [0.0]

    ends: list[float] = []

    def beat() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        ends.append(now - opened[0])
        last[0] = now

    def check_pixels(layer: Any) -> None:
        loader = loader_of(layer)
        latest = None if loader is None else loader.controller.latest
        data = None if latest is None else latest.data
        if loader is None and not (variant.startswith("in-memory image") and layer.loaded):
            return
        if data is not None and not (data.size and data.max() > 0):
            return  # the fill value is 0; the image is >= 100 everywhere
        if result["first_pixels_s"] is None and (loader is None or data is not None):
            result["first_pixels_s"] = time.perf_counter() - opened[0]

    def on_inserted(event: Any) -> None:
        layer = event.value
        layer.events.set_data.connect(lambda _event: check_pixels(layer))
        check_pixels(layer)

    original = sample_data.sample_pyramid

    def timed_command() -> Any:  # what npe2 calls: the plugin's own share of the open
        begin = time.perf_counter()
        layers = original()
        result["command_s"] = time.perf_counter() - begin
        return layers

    sample_data.sample_pyramid = timed_command  # type: ignore[assignment]
    image = synthetic_cells(0, 0, (spec["size"] // 8,) * 2, step=8)  # before the clock

    def open_sample() -> None:
        opened[0] = time.perf_counter()
        if variant.startswith("in-memory image"):  # napari's own first image layer: the peer
            viewer.add_image(image, contrast_limits=(100, 20000), colormap="green")
        else:
            viewer.open_sample("napari-lazy-zarr", "pyramid")
        result["open_s"] = time.perf_counter() - opened[0]
        for layer in viewer.layers:
            check_pixels(layer)

    viewer.layers.events.inserted.connect(on_inserted)
    heartbeat = QTimer()
    heartbeat.setInterval(HEARTBEAT_MS)
    heartbeat.timeout.connect(beat)
    heartbeat.start()
    if variant != "empty viewer":
        QTimer.singleShot(50, open_sample)
    deadline = time.perf_counter() + spec["seconds"]
    while time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.001)  # the event loop is idle; the heartbeat is a timer
    heartbeat.stop()
    gaps, ends = gaps[1:], ends[1:]  # the first gap spans the start of the timer
    longest = sorted(range(len(gaps)), key=gaps.__getitem__)[-3:]
    # The longest steps: (when it ended, after the open; how long), in seconds.
    result["longest_steps"] = [(round(ends[i], 3), round(gaps[i], 3)) for i in longest]
    result["longest_step_s"] = max(gaps)
    result["p99_step_s"] = sorted(gaps)[int(0.99 * (len(gaps) - 1))]
    result["beats"] = len(gaps)
    if variant != "empty viewer":
        shot = np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3]
        cells = synthetic_cells(0, 0, (2048, 2048))
        result["screen_green_max"] = int(shot[..., 1].max())
        result["screen_bright_share"] = float((shot[..., 1] > 40).mean())
        result["blob_share"] = float((cells > cells.min()).mean())
    viewer.close()
    return result


def _worker_main(argv: Sequence[str]) -> int:
    spec = json.loads(argv[0])
    result = _worker(spec)
    Path(spec["output"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


def run_worker(config: Config, variant: str, scratch: Path, run_id: int) -> dict[str, Any]:
    output = scratch / f"result-{run_id}.json"
    spec = {
        "variant": variant,
        "size": config.size,
        "seconds": config.seconds,
        "output": str(output),
    }
    env = dict(os.environ)
    env["NAPARI_CONFIG"] = str(scratch / f"settings-{run_id}.yaml")
    fresh = scratch / f"cache-{run_id}"
    env["XDG_CACHE_HOME"] = str(fresh)
    for name in ("NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT", "NAPARI_LAZY_ZARR_CONCURRENCY"):
        env.pop(name, None)
    result = worker_result(
        "bench.sample_startup",
        spec,
        output=output,
        env=env,
        timeout=config.worker_timeout,
        what="sample worker",
    )
    # The sample is computed, never written: nothing must appear in the cache directory.
    result["leftovers"] = [p.name for p in (fresh / "napari-lazy-zarr").glob("*")]
    return result


def run(quick: bool = False) -> str:
    """Run the sample benchmark and return its Markdown section."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise SystemExit(
            "the sample benchmark needs a display: run it under "
            "xvfb-run -a -s '-screen 0 1920x1080x24' ./dev run python -m bench.sample_startup"
        )
    config = QUICK if quick else FULL
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    run_ids = iter(range(1_000_000))
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sample-bench-") as scratch_dir:
        scratch = Path(scratch_dir)

        def method(name: str) -> Callable[[int], float]:
            def measure(_: int) -> float:
                begin = time.perf_counter()
                result = run_worker(config, name, scratch, next(run_ids))
                results[name].append(result)
                print(f"[sample] {name}: {json.dumps(result)}", flush=True)
                return time.perf_counter() - begin

            return measure

        interleaved({name: method(name) for name in VARIANTS}, [0], config.runs)
    load = (load_before, os.getloadavg()[0])
    return report(config, results, time.perf_counter() - started, load)


def _ms(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "–"
    text = f"{statistics.median(known) * 1e3:.0f}"
    return text if len(known) == 1 else f"{text} ({min(known) * 1e3:.0f}–{max(known) * 1e3:.0f})"


def report(
    config: Config,
    results: dict[str, list[dict[str, Any]]],
    elapsed: float,
    load: tuple[float, float],
) -> str:
    rows = []
    for name, runs in results.items():
        rows.append(
            [
                name,
                len(runs),
                _ms([r["open_s"] for r in runs]),
                _ms([r["command_s"] for r in runs]),
                _ms([r["first_pixels_s"] for r in runs]),
                _ms([r["longest_step_s"] for r in runs]),
                _ms([r["p99_step_s"] for r in runs]),
                _ms([r["plugin_import_s"] for r in runs]),
            ]
        )
    table = markdown_table(
        [
            "sample",
            "runs",
            "open call (ms)",
            "of which the sample command (ms)",
            "first pixels (ms)",
            "longest main-thread step (ms)",
            "p99 step (ms)",
            "plugin import, before (ms)",
        ],
        rows,
    )
    shown = [r for name in VARIANTS[:2] for r in results[name]]
    confirmed = all(r["screen_green_max"] >= 200 for r in shown)
    leftovers = sorted(
        {name for runs in results.values() for r in runs for name in r["leftovers"]}
    )
    return "\n".join(
        [
            "## Opening the sample",
            "",
            f'Setup: napari\'s *Open Sample* route (`viewer.open_sample("napari-lazy-zarr", '
            f'"pyramid")`) on the {config.size}² sample in a 1600x1000 window (canvas 1200x800) '
            f"under Xvfb, a fresh process per run; {config.seconds:.0f} s watched after the open "
            f"by a {HEARTBEAT_MS} ms main-thread heartbeat. Medians (min–max) of {config.runs} "
            "interleaved runs per variant. *First pixels*: from the open call to the first slice "
            "napari applies holding computed pixels (in-memory image: the open call's return). "
            "*Sample*: the generator serves the view (nothing is written); *empty viewer* is "
            "the heartbeat's floor.",
            "",
            table,
            "",
            f"The canvas showed the cells at the end of every run: {confirmed}. Written to the "
            f"cache directory: {leftovers or 'nothing'}. "
            f"Measured in {elapsed:.0f} s; 1-minute load average {load[0]:.2f} before, "
            f"{load[1]:.2f} after.",
            "",
            environment_line(["napari", "zarr", "numpy"]),
            "",
        ]
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("{"):
        sys.exit(_worker_main(sys.argv[1:]))
    print(run(quick="--quick" in sys.argv[1:]))
