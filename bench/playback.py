"""Playback benchmark: napari plays t over a slow store; is every frame shown whole?

A (t, y, x) uint8 OME-Zarr movie written by ome-zarr-py (`write_multiscale`,
3 levels by striding, 256² chunks; values never 0, the fill value) is served by
the project's loopback test server (`bench.remote.serve`) with 0, 20 and 100 ms
of latency per request. In a real `napari.Viewer(show=True)` each reader opens
it (ours; napari-ome-zarr; napari's built-in reader, which cannot open a remote
OME group and opens level 0 as one array), the camera shows level 0 at one
screen pixel per pixel, and napari's own animation (`QtDims.play`, loop mode
"once") plays all t frames at 5, 10 and 20 fps. Every slice napari applies is
compared with NumPy (the movie is a formula): **whole** = no fill-value cell
(a frame at any resolution), **exact** = equal to the current plane at the
displayed level, **held** = an earlier plane shown while the current one loads
(ours only), **steps** = share of the t steps napari showed at all (napari drops
a step while the previous one has not drawn). A 5 ms `QTimer` measures the
longest main-thread stall and counts stalls over 50 ms. One subprocess per
(reader, fps, latency), each with a fresh cache. At 10 fps the previous revision
(`REVISIONS`: before issue 46's immutable frames; its package from a temporary
worktree) plays beside ours, the A/B in the same run, and so does napari's own
image layer over the same pyramid held in memory: the floor of what a step costs
here. ``python -m bench.playback --focus [ROUNDS]`` plays only 10 fps at 100 ms,
the three interleaved, and prints their medians.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import (
    DATA_DIR,
    check_package,
    environment_line,
    generated_store,
    markdown_table,
    package_env,
    previous_package,
)
from bench.own_time import OwnTime

if TYPE_CHECKING:
    from collections.abc import Iterator

FRAMES, SIZE, CHUNK, LEVELS = 50, 1024, 256, 3
READERS = ("napari-lazy-zarr", "napari-ome-zarr", "napari")
PREVIOUS_FPS = 10
REVISIONS = ("7660ee2",)
"""The A/B baseline: the revision before issue 46 (immutable frames, built off napari's
thread; the buffer napari held was written by workers before)."""
MEMORY = "napari in memory (floor)"
"""napari's own image layer over the same pyramid held in NumPy arrays, played the same
way: what napari itself costs per step here (paint, texture upload), the floor."""
HELD_STEPS = 8  # a frame showing one of the 8 planes before the current one is "held"


def movie_value(level: int, t: int, ys: Any, xs: Any) -> Any:
    """The movie's values at `level` (NumPy: the oracle)."""
    import numpy as np

    y = np.asarray(ys)[:, None] * 2**level
    x = np.asarray(xs)[None, :] * 2**level
    return ((x // 3 + y // 5 + 17 * t) % 250 + 1).astype(np.uint8)


def ensure_movie(frames: int, size: int) -> Path:
    path = DATA_DIR / f"playback-{frames}x{size}.ome.zarr"
    params = {"generator": "ome_zarr.writer.write_multiscale", "frames": frames, "size": size}

    def write() -> None:
        import numpy as np
        import zarr
        from ome_zarr.writer import write_multiscale  # type: ignore[import-untyped]

        t, y, x = np.ogrid[:frames, :size, :size]
        data = ((x // 3 + y // 5 + 17 * t) % 250 + 1).astype(np.uint8)
        pyramid = [data[:, :: 2**k, :: 2**k] for k in range(LEVELS)]
        group = zarr.open_group(str(path), mode="w", zarr_format=3)
        write_multiscale(pyramid, group, axes="tyx", storage_options={"chunks": (1, CHUNK, CHUNK)})

    return generated_store(path, params, write, "playback")


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    import napari
    import numpy as np
    from qtpy.QtCore import QTimer

    import napari_lazy_zarr
    from napari_lazy_zarr._layer_data import loader_of, wait_until_complete
    from napari_lazy_zarr._reader import watch_viewer

    reader, url, fps, frames = spec["plugin"], spec["url"], spec["fps"], spec["frames"]
    viewer = napari.Viewer(show=True)
    viewer.window.resize(900, 760)
    app = napari.qt.get_qapp()
    watch_viewer(viewer)
    if reader == "memory":
        t, y, x = np.ogrid[:frames, : spec["size"], : spec["size"]]
        data = ((x // 3 + y // 5 + 17 * t) % 250 + 1).astype(np.uint8)
        pyramid = [data[:, :: 2**k, :: 2**k] for k in range(LEVELS)]
        layer = viewer.add_image(pyramid, multiscale=True, name="memory")
    else:
        path = url if reader != "napari" else f"{url}/s0"
        layers = viewer.open(path, plugin=reader)
        layer = layers[0]
    layer.contrast_limits = (0, 255)
    viewer.dims.set_current_step(0, 0)
    size = spec["size"]
    viewer.scene.camera.center = (size / 2, size / 2)
    viewer.scene.camera.zoom = 1.0
    viewer.window._qt_viewer.canvas.on_draw(None)
    loader = loader_of(layer)
    if loader is not None:
        wait_until_complete(viewer, timeout=120)
    for _ in range(20):
        app.processEvents()
    shown: list[tuple[int, int, Any, Any]] = []

    def record(event: Any = None) -> None:
        level = int(getattr(layer, "data_level", 0)) if layer.multiscale else 0
        raw = np.array(layer._slice.image.raw)
        if layer.multiscale:
            corners = np.array(layer.corner_pixels[:, 1:], dtype=int)
        else:  # a plain layer is sliced whole, whatever the camera shows
            corners = np.array([[0, 0], [raw.shape[-2] - 1, raw.shape[-1] - 1]])
        shown.append((int(viewer.dims.current_step[0]), level, corners, raw))

    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    from bench.napari_pan import _Probe

    probe = _Probe(layer)  # main-thread time in the layer's slicing calls
    slices: list[float] = []

    def sliced(event: Any = None) -> None:
        slices.append(probe.seconds)
        probe.reset()

    layer.events.set_data.connect(sliced)
    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    layer.events.set_data.connect(record)
    qt_dims = viewer.window._qt_viewer.dims
    started = time.perf_counter()
    last[0] = started
    timer.start()
    own = OwnTime().start()
    qt_dims.play(axis=0, fps=fps, loop_mode="once")
    deadline = started + frames / fps * 4 + 60
    thread = qt_dims._animation_thread  # is_playing is False until the thread has started
    while not thread.isRunning() and time.perf_counter() < deadline:
        app.processEvents()
    while thread.isRunning() and time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.001)
    played = time.perf_counter() - started
    own.stop()
    timer.stop()
    layer.events.set_data.disconnect(record)
    qt_dims.stop()
    whole = exact = held = 0
    steps = set()
    for step, level, corners, raw in shown:
        (y0, x0), (y1, x1) = corners
        ys, xs = np.arange(y0, y1 + 1), np.arange(x0, x1 + 1)
        steps.add(step)
        if raw.shape != (len(ys), len(xs)):
            continue
        whole += bool((raw != 0).all())
        if np.array_equal(raw, movie_value(level, step, ys, xs)):
            exact += 1
        elif any(
            np.array_equal(
                raw[:: 2**LEVELS, :: 2**LEVELS],
                movie_value(level, earlier, ys, xs)[:: 2**LEVELS, :: 2**LEVELS],
            )
            for earlier in range(step - 1, max(step - HELD_STEPS, 0) - 1, -1)
        ):
            held += 1
    result = {
        "reader": spec["reader"],
        "package": str(Path(napari_lazy_zarr.__file__).resolve().parent),
        "fps": fps,
        "latency": spec["latency"],
        "shown": len(shown),
        "whole": whole,
        "exact": exact,
        "held": held,
        "steps": len(steps),
        "frames": frames,
        "played_s": played,
        "max_stall_ms": max(gaps, default=0.0) * 1e3,
        "max_slice_ms": max(slices, default=0.0) * 1e3,
        "stalls_over_50ms": sum(g > 0.05 for g in gaps),
        "own_ms": own.total * 1e3,
        "own_longest_ms": own.longest * 1e3,
        "own_longest_in": own.longest_where,
    }
    viewer.close()
    return result


@contextlib.contextmanager
def serve(root: Path, latency: float) -> Iterator[Any]:
    """The project's loopback test server with `latency` and `bench.remote`'s deeper backlog."""
    from tests.remote.server import Faults, FaultyServer

    from bench.remote import BACKLOG

    server = FaultyServer(root, Faults(latency=latency))
    server._server.socket.listen(BACKLOG)
    with server:
        yield server


def _run_worker(spec: dict[str, Any], previous: Path | None = None) -> dict[str, Any]:
    """One fresh napari process; `previous` (a checkout) puts that revision's package first."""
    env, package = package_env(previous)
    out = subprocess.run(
        [sys.executable, "-m", "bench.playback", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=spec["frames"] / spec["fps"] * 4 + 300,
        check=False,
    )
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            check_package(result, package, spec["reader"])
            return result
    return {**spec, "error": (out.stderr or out.stdout)[-400:]}


def run(quick: bool = False) -> str:
    """Measure and return the Markdown section."""
    frames, size = (10, 512) if quick else (FRAMES, SIZE)
    fps_list = (10,) if quick else (5, 10, 20)
    latencies = (0.02,) if quick else (0.0, 0.02, 0.1)
    readers = READERS[:2] if quick else READERS
    path = ensure_movie(frames, size)
    rows = []
    with contextlib.ExitStack() as stack:
        previous = [(rev, stack.enter_context(previous_package(rev))) for rev in REVISIONS]
        for latency in latencies:
            with serve(path.parent, latency) as server:
                url = f"{server.url}/{path.name}"
                for fps in fps_list:
                    methods: list[tuple[str, str, Path | None]] = [
                        (reader, reader, None) for reader in readers
                    ]
                    if fps == PREVIOUS_FPS:  # the A/B at issue 24's rate, beside ours
                        methods[1:1] = [
                            (f"napari-lazy-zarr {rev} (previous)", READERS[0], tree)
                            for rev, tree in previous
                        ]
                        methods.append((MEMORY, "memory", None))
                    for label, plugin, tree in methods:
                        spec = {
                            "reader": label,
                            "plugin": plugin,
                            "url": url,
                            "fps": fps,
                            "latency": latency,
                            "frames": frames,
                            "size": size,
                        }
                        result = _run_worker(spec, tree)
                        print(f"[playback] {json.dumps(result)[:300]}", flush=True)
                        rows.append(result)
    table = []
    for r in rows:
        if "error" in r:
            table.append(
                [
                    r["reader"],
                    r["fps"],
                    f"{r['latency'] * 1e3:.0f}",
                    "error",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    r["error"].splitlines()[-1][:60] if r["error"] else "",
                ]
            )
            continue
        shown = max(r["shown"], 1)
        table.append(
            [
                r["reader"],
                r["fps"],
                f"{r['latency'] * 1e3:.0f}",
                r["shown"],
                f"{r['whole'] / shown:.0%}",
                f"{r['exact'] / shown:.0%}",
                f"{r['held'] / shown:.0%}",
                f"{r['steps'] / r['frames']:.0%}",
                f"{r['max_stall_ms']:.0f} ms ({r['stalls_over_50ms']} > 50 ms)",
                f"{r['max_slice_ms']:.0f} ms",
                f"{r['own_ms'] / shown:.1f} ms",
                f"{r['own_longest_ms']:.1f} ms"
                + (f" (`{r['own_longest_in'].split(' ')[0]}`)" if r.get("own_longest_in") else ""),
            ]
        )
    header = (
        f"## Playback: t = {frames} frames of {size}² uint8 ({CHUNK}² chunks, {LEVELS} levels), "
        "napari's own animation\n\n"
    )
    body = markdown_table(
        [
            "reader",
            "fps",
            "latency ms",
            "frames shown",
            "whole",
            "exact",
            "held",
            "steps shown",
            "longest stall",
            "longest slicing",
            "own per frame",
            "own longest",
        ],
        table,
    )
    note = (
        "\n\n*whole*: no fill-value cell (any resolution); *exact*: the current plane at the "
        "displayed level; *held*: an earlier plane (up to 8 steps back) shown while the current "
        "one loads; "
        "*steps shown*: t steps napari showed (it skips a step while the previous one has not "
        "drawn); *own*: the main thread's time inside napari-lazy-zarr's package while playing "
        "(`bench.own_time`, an instrumented upper bound; 0 for the peers), per frame shown and "
        "its longest single piece (and the package function it entered: `_refresh_layer` is "
        "napari's `layer.refresh`, which the plugin calls when chunks land, napari's re-slice "
        "and texture upload included). Targets at 10 fps / 100 ms: ≥ 95 % whole, no stall > 50 ms "
        "(issue 24: no main-thread step > 100 ms).\n\n"
    )
    return header + body + note + environment_line(["napari", "napari-ome-zarr", "zarr"]) + "\n"


def run_focus(rounds: int = 3, fps: int = PREVIOUS_FPS, latency: float = 0.1) -> None:
    """Print, round after round, the longest main-thread stall of ours, the previous
    revision and napari's in-memory floor at one setting (issue 46's: 10 fps, 100 ms),
    the three interleaved; ``python -m bench.playback --focus [ROUNDS]``."""
    import statistics

    path = ensure_movie(FRAMES, SIZE)
    stalls: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        previous = [(rev, stack.enter_context(previous_package(rev))) for rev in REVISIONS]
        with serve(path.parent, latency) as server:
            url = f"{server.url}/{path.name}"
            methods: list[tuple[str, str, Path | None]] = [
                (READERS[0], READERS[0], None),
                *((f"napari-lazy-zarr {rev} (previous)", READERS[0], t) for rev, t in previous),
                (MEMORY, "memory", None),
            ]
            for round_ in range(rounds):
                for label, plugin, tree in methods if round_ % 2 == 0 else methods[::-1]:
                    spec = {
                        "reader": label,
                        "plugin": plugin,
                        "url": url,
                        "fps": fps,
                        "latency": latency,
                        "frames": FRAMES,
                        "size": SIZE,
                    }
                    result = _run_worker(spec, tree)
                    print(f"[playback] {json.dumps(result)[:400]}", flush=True)
                    if "error" not in result:
                        stalls.setdefault(label, []).append(result["max_stall_ms"])
    floor = statistics.median(stalls.get(MEMORY, [float("nan")]))
    for label, values in stalls.items():
        median = statistics.median(values)
        print(
            f"{label}: longest stall median {median:.0f} ms over {len(values)} rounds "
            f"({', '.join(f'{v:.0f}' for v in values)}), {median / floor:.2f}x the floor"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--focus"]:
        run_focus(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    else:
        print(json.dumps(_worker(json.loads(sys.argv[1]))), flush=True)
