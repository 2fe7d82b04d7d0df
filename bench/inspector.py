"""The inspector benchmark: what the chunk inspector costs napari's main thread.

A real viewer under a display (Xvfb), the inspector docked, a three-level
OME-Zarr pyramid whose level 0 has 72 x 72 = 5,184 chunks of 64² (4608² uint16;
`write_sample_ome_zarr`, generated once under ``bench/.data/``). napari's level
is locked to 0 and the whole image fitted in the canvas, so the view touches
every chunk of the map. Prefetch is off; the shared cache has its default
workers (one per core).

Per round: level 0 is shown and its 5,184 chunks load (*loading*, timed until
the layer settles and two more refreshes ran); then level 1 is shown (napari
reads it, which releases level 0's request; the coarsest level, which napari
would show from its own copy without reading, would not) and level 0 evicted,
untimed, so the next round loads it again. After the last round the
inspector runs 50 refreshes with nothing happening (*idle*).

Measured, per refresh of the inspector: the main-thread time of its refresh
(`tick`) plus that of every `paintEvent` of its own widgets until the next
refresh (the chunk map, the state diagram, the bars and sparklines; Qt's own
compositing of the window is not included). Also the number of those paints
while idle: none should happen.

Peers, in the same run: this inspector (10 Hz) and the previous one — the
widgets as of `PREVIOUS` (30 Hz, before it explained chunks), loaded from git
into a scratch package. Each runs in its own subprocess (``python -m
bench.inspector SPEC``: a fresh viewer and cache), the two alternating over
`Config.runs` runs (`bench.interleaved`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import (
    DATA_DIR,
    ROOT,
    environment_line,
    generated_store,
    interleaved,
    markdown_table,
    worker_result,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

PREVIOUS = "fad8575"
"""The commit whose inspector is the peer (the last before the inspector explained chunks)."""
_WIDGET_FILES = ("_grid_state", "_chunk_map", "_event_log", "_state_diagram", "_inspector")


@dataclass(frozen=True, slots=True)
class Config:
    size: int
    chunk: int
    rounds: int
    """Loads of level 0 per worker."""
    runs: int
    """Workers per variant."""
    idle_ticks: int
    worker_timeout: float


FULL = Config(size=4608, chunk=64, rounds=2, runs=2, idle_ticks=50, worker_timeout=900)
QUICK = Config(size=1536, chunk=64, rounds=1, runs=1, idle_ticks=10, worker_timeout=300)

VARIANTS = ("this inspector", f"previous inspector ({PREVIOUS})")


def ensure_store(config: Config) -> Path:
    from napari_lazy_zarr.core.sample import write_sample_ome_zarr

    path = DATA_DIR / f"inspector-{config.size}-c{config.chunk}.ome.zarr"
    params = {"size": config.size, "chunk": config.chunk, "levels": 3}
    return generated_store(
        path,
        params,
        lambda: write_sample_ome_zarr(
            path, size=config.size, chunk=config.chunk, smallest=config.size // 4
        ),
        "inspector",
    )


def previous_package(scratch: Path) -> Path:
    """The inspector's widgets as of `PREVIOUS`, as the package ``previous_inspector``."""
    package = scratch / "previous_inspector"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    for name in _WIDGET_FILES:
        source = subprocess.run(
            ["git", "show", f"{PREVIOUS}:src/napari_lazy_zarr/widgets/{name}.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        source = source.replace("napari_lazy_zarr.widgets.", "previous_inspector.")
        (package / f"{name}.py").write_text(source, encoding="utf-8")
    return scratch


# -- the worker (a subprocess per variant and run) -------------------------------------


class _Probe:
    """Times the inspector's refreshes and its widgets' paints (main thread)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        # phase -> per refresh: [tick s, paint s, tick CPU s, paint CPU s]
        self.refreshes: dict[str, list[list[float]]] = {}
        self.paints: dict[str, int] = {}

    def tick(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def timed(inspector: Any, *args: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(inspector, *args)
            finally:
                if self.phase is not None:
                    record = [time.perf_counter() - started, 0.0, time.thread_time() - cpu, 0.0]
                    self.refreshes.setdefault(self.phase, []).append(record)

        return timed

    def paint(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def timed(widget: Any, event: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(widget, event)
            finally:
                phase = self.phase
                if phase is not None:
                    self.paints[phase] = self.paints.get(phase, 0) + 1
                    records = self.refreshes.get(phase)
                    if records:
                        records[-1][1] += time.perf_counter() - started
                        records[-1][3] += time.thread_time() - cpu

        return timed


def _instrument(probe: _Probe, package: str) -> Any:
    """Wrap the inspector's `tick` and its widgets' `paintEvent`; return the inspector class."""
    import importlib

    from qtpy.QtWidgets import QWidget

    modules = [importlib.import_module(f"{package}.{name}") for name in _WIDGET_FILES]
    for name in ("_residency_bar", "_sparkline"):
        with contextlib.suppress(ImportError):  # the previous inspector had neither
            modules.append(importlib.import_module(f"{package}.{name}"))
    for module in modules:
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, QWidget)
                and value.__module__ == module.__name__
                and "paintEvent" in vars(value)
            ):
                value.paintEvent = probe.paint(value.paintEvent)  # type: ignore[method-assign]
    inspector = importlib.import_module(f"{package}._inspector").ChunkInspector
    inspector.tick = probe.tick(inspector.tick)
    return inspector


def _pump(app: Any, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.002)


def _wait(app: Any, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.perf_counter() + timeout
    while not done():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what} not done after {timeout} s")
        app.processEvents()
        time.sleep(0.001)


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    import napari
    from napari.qt import get_qapp

    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr._reader import watch_viewer

    probe = _Probe()
    if spec["previous"]:
        sys.path.insert(0, spec["previous"])
        inspector_class = _instrument(probe, "previous_inspector")
    else:
        inspector_class = _instrument(probe, "napari_lazy_zarr.widgets")
    app = get_qapp()
    viewer = napari.Viewer(show=True)
    viewer.window.resize(1600, 1000)
    watch_viewer(viewer)
    (layer,) = viewer.open(spec["path"], plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    loader.prefetch = False
    inspector = inspector_class(viewer)
    viewer.window.add_dock_widget(inspector, name="Chunk inspector", area="right")
    draw = viewer.window._qt_viewer.canvas.on_draw
    level0 = loader.levels[0].array.source
    chunks = 0
    elapsed: dict[str, float] = {}

    def ticks_after(count: int) -> Callable[[], bool]:
        target = inspector.ticks + count
        return lambda: inspector.ticks >= target

    # What reaches the inspector from other threads during the last round, to replay.
    arrivals: list[tuple[float, str, Any]] = []

    def record_events(events: Any) -> None:
        arrivals.append((time.perf_counter(), "events", events))

    def record_view(result: Any) -> None:
        arrivals.append((time.perf_counter(), "view", result))

    _pump(app, 0.5)
    for index in range(spec["rounds"]):
        layer.locked_data_level = 0  # the whole level 0 in the view: every chunk touched
        viewer.reset_view()
        last = index == spec["rounds"] - 1 and not spec["previous"]
        if last:
            loader.controller.cache.state_changed.connect(record_events)
            loader.controller.view_read.connect(record_view)
        probe.phase = "loading"
        started = time.perf_counter()
        draw(None)
        _wait(app, lambda: loader.settled, 300, "loading level 0")
        _wait(app, ticks_after(2), 10, "two refreshes")
        elapsed["loading"] = elapsed.get("loading", 0.0) + time.perf_counter() - started
        probe.phase = None
        if last:
            loader.controller.cache.state_changed.disconnect(record_events)
            loader.controller.view_read.disconnect(record_view)
            arrivals.append((time.perf_counter(), "end", None))
        chunks = sum(1 for key in loader.controller.latest.keys if key.source == level0.identity)
        layer.locked_data_level = 1
        draw(None)
        _wait(app, lambda: loader.settled, 300, "showing level 1")
        _pump(app, 0.3)
        loader.controller.cache.evict_unpinned()  # level 0 loads again next round
        _pump(app, 0.3)
    _pump(app, 1.0)  # rates settle
    probe.phase = "idle"
    started = time.perf_counter()
    _wait(app, ticks_after(spec["idle_ticks"]), 60, "idle refreshes")
    elapsed["idle"] = time.perf_counter() - started
    probe.phase = None
    if arrivals:
        elapsed["replay"] = _replay(app, inspector, layer, arrivals, probe)
    grid_chunks = int(getattr(inspector.chunk_map.grid, "codes", [[]]).size)
    viewer.close()
    return {
        "refreshes": probe.refreshes,
        "paints": probe.paints,
        "elapsed": elapsed,
        "view_chunks": chunks,
        "map_chunks": grid_chunks,
    }


def _replay(app: Any, inspector: Any, layer: Any, arrivals: list[Any], probe: _Probe) -> float:
    """Replay the last round's arrivals into the inspector, 100 ms at a time, nothing else running.

    Each 100 ms of the recorded round is handed to the inspector's slots as the
    workers and the dispatch thread did (untimed), then one refresh runs and the
    event loop paints (timed): the inspector's own cost, without the loading
    workers competing for the GIL and the cores.
    """
    inspector._timer.stop()
    inspector.pin(layer.name, 0)  # the recorded reads are of level 0
    mirror = next(iter(inspector._mirrors.values()))
    start = arrivals[0][0]
    buckets: dict[int, list[tuple[str, Any]]] = {}
    for moment, kind, payload in arrivals:
        buckets.setdefault(int((moment - start) / 0.1), []).append((kind, payload))
    app.processEvents()
    probe.phase = "replay"
    for bucket in range(max(buckets) + 1):
        for kind, payload in buckets.get(bucket, []):
            if kind == "events":
                mirror.on_events(payload)
            elif kind == "view":
                inspector._on_view_read(payload)
        inspector.tick()
        app.processEvents()  # the repaints it asked for
    probe.phase = None
    return (max(buckets) + 1) * 0.1


def _worker_main(argv: Sequence[str]) -> int:
    spec = json.loads(argv[0])
    result = _worker(spec)
    Path(spec["output"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


def run_worker(
    config: Config, previous: Path | None, path: Path, scratch: Path, run_id: int
) -> dict[str, Any]:
    output = scratch / f"result-{run_id}.json"
    spec = {
        "previous": None if previous is None else str(previous),
        "path": str(path),
        "rounds": config.rounds,
        "idle_ticks": config.idle_ticks,
        "output": str(output),
    }
    env = dict(os.environ)
    env["NAPARI_CONFIG"] = str(scratch / f"settings-{run_id}.yaml")
    for name in ("NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT", "NAPARI_LAZY_ZARR_CONCURRENCY"):
        env.pop(name, None)
    return worker_result(
        "bench.inspector",
        spec,
        output=output,
        env=env,
        timeout=config.worker_timeout,
        what="inspector worker",
    )


def run(quick: bool = False) -> str:
    """Run the inspector benchmark and return its Markdown section."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise SystemExit(
            "the inspector benchmark needs a display: run it under "
            "xvfb-run -a -s '-screen 0 1920x1080x24' ./dev bench inspector"
        )
    config = QUICK if quick else FULL
    path = ensure_store(config)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    run_ids = iter(range(1_000_000))
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="inspector-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        previous = previous_package(scratch / "previous")

        def method(name: str) -> Callable[[int], float]:
            def measure(_: int) -> float:
                begin = time.perf_counter()
                result = run_worker(
                    config,
                    previous if name != VARIANTS[0] else None,
                    path,
                    scratch,
                    next(run_ids),
                )
                results[name].append(result)
                loading = [r[2] + r[3] for r in result["refreshes"].get("loading", [])]
                print(
                    f"[inspector] {name}: {len(loading)} refreshes while loading, median "
                    f"{statistics.median(loading) * 1e3:.2f} ms CPU; "
                    f"{time.perf_counter() - begin:.0f} s",
                    flush=True,
                )
                return time.perf_counter() - begin

            return measure

        interleaved({name: method(name) for name in VARIANTS}, [0], config.runs)
    load = (load_before, os.getloadavg()[0])
    return report(config, results, time.perf_counter() - started, load)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _stats(samples: list[float]) -> tuple[str, str, str]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return _ms(statistics.median(samples)), _ms(p95), _ms(max(samples))


def report(
    config: Config,
    results: dict[str, list[dict[str, Any]]],
    elapsed: float,
    load: tuple[float, float],
) -> str:
    rows = []
    view_chunks = map_chunks = 0
    for name, runs in results.items():
        for phase in ("loading", "replay", "idle"):
            records = [r for run in runs for r in run["refreshes"].get(phase, [])]
            if not records:
                continue
            wall = [r[0] + r[1] for r in records]
            cpu = [r[2] + r[3] for r in records]
            seconds = sum(run["elapsed"].get(phase, 0.0) for run in runs)
            paints = sum(run["paints"].get(phase, 0) for run in runs)
            rows.append(
                [
                    name,
                    phase,
                    f"{len(records):,}",
                    *_stats(cpu),
                    *_stats(wall),
                    f"{sum(cpu) / max(seconds, 1e-9) * 1e3:.1f}",
                    f"{paints:,}",
                ]
            )
        for run in runs:
            view_chunks = max(view_chunks, run["view_chunks"])
            map_chunks = max(map_chunks, run["map_chunks"])
    table = markdown_table(
        [
            "inspector",
            "phase",
            "refreshes",
            "CPU ms / refresh, median",
            "p95",
            "max",
            "wall ms / refresh, median",
            "p95",
            "max",
            "CPU ms per s",
            "paints",
        ],
        rows,
    )
    side = config.size // config.chunk
    return (
        "## The chunk inspector's main-thread cost\n\n"
        f"A real napari viewer (Xvfb, llvmpipe), the inspector docked; level 0 of a "
        f"{config.size}² uint16 pyramid with {config.chunk}² chunks ({side} x {side} = "
        f"{map_chunks:,} chunks on the map, {view_chunks:,} of them in the view) loads "
        f"{config.rounds} times per run, {config.runs} runs per inspector, interleaved "
        "(`bench/inspector.py`). A *refresh* is the inspector's timer slot (`tick`) plus the "
        "`paintEvent`s of its own widgets until the next refresh, measured as main-thread "
        "CPU time (`time.thread_time`) and as wall time (which includes waiting for the GIL "
        "behind the loading workers and for the other work on this shared machine). This "
        f"inspector refreshes at 10 Hz, the previous one ({PREVIOUS}) at 30 Hz: compare "
        "*CPU ms per s* (main-thread CPU per second of the phase) as well as per refresh. "
        "*Replay*: the last loading round's events and reads handed to the inspector again, "
        "100 ms of them before each refresh, with no worker running — its own cost, without "
        "the loading workers competing for the GIL and the two cores. *Idle*: refreshes with "
        "nothing happening; *paints* counts its widgets' repaints in each phase.\n\n"
        f"{table}\n"
        f"{environment_line(['napari', 'PyQt6', 'numpy'])}; {elapsed:.0f} s in all; "
        f"load average {load[0]:.1f} before, {load[1]:.1f} after (2 cores, shared).\n"
    )


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
