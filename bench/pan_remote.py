"""Pan over HTTP while background work runs: napari's main thread per step, A/B and peers.

``./dev bench pan-remote [--quick]`` (under ``xvfb-run -a -s "-screen 0
1920x1080x24"``). In a fresh napari process per measurement (`bench.view_cycle`'s
session: fixed canvas, napari's warm-up untimed, a warm-up store opened first), a
reader opens one of the view benchmark's 16384² stores over the project's test
server adding `LATENCY` to every request, goes to one screen pixel per stored
pixel at the centre, runs the event loop 1 s, then pans `STEPS` steps of 256 px
to the right. Per step: the main thread's time for the camera move,
``canvas.on_draw`` and one ``processEvents`` (issue 24's "pan step"), then
`DWELL` s of event loop in which a 5 ms timer records the longest stall.
*Own* is the main thread's time inside the plugin's package (`bench.own_time`:
an instrumented upper bound) during the step, during the dwell after it, and
its longest single piece — issue 24's "our own main-thread work".

The methods, interleaved (the order rotates per round):

- *ours, plain*: the *plain* array (no pyramid, 512² chunks: a virtual pyramid
  whose overview could cost all 1,024 stored chunks), this checkout's package;
- *previous, plain*: the same with the package of `PREVIOUS` (the revision
  before issue 24's work), checked out into a temporary worktree and put first
  on ``PYTHONPATH`` (the bench code stays this checkout's; the worker reports
  which package it imported, and the run fails if it is the wrong one);
- *ours, pyramid* and *napari-ome-zarr, pyramid*: the OME-Zarr pyramid of the
  same image;
- *napari, in memory*: napari's own multiscale image of the same size from NumPy
  arrays in memory (level 0 read from the plain store before the session,
  untimed; each level half the previous, contiguous): the floor software
  rendering sets, no storage at all.

Figures: per method the median over rounds of each round's median and worst
step and stall, and the chunk loads the cache made (ours). A full run: 2 rounds
of 5 processes, about 6 minutes (``--quick``: 1 round).

Issue 24 measured 171-219 ms median, 359-368 ms worst per pan step here while
the overview downloaded every stored chunk; napari panning an in-memory
multiscale image of this size takes about 65 ms median, 105 ms worst.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from bench import (
    PREVIOUS,
    check_package,
    environment_line,
    markdown_table,
    package_env,
    previous_package,
)
from bench.own_time import OwnTime

LATENCY: Final = 0.2
STEPS: Final = 8
DWELL: Final = 0.3
METHODS: Final = (
    "ours, plain",
    "previous, plain",
    "ours, pyramid",
    "napari-ome-zarr, pyramid",
    "napari, in memory",
)


def _in_memory(session: Any, path: str) -> None:
    """napari's own multiscale image of the plain store's pixels, from NumPy in memory."""
    import numpy as np
    import zarr

    level = np.asarray(zarr.open_array(path, mode="r")[...])
    levels = [level]
    while min(levels[-1].shape) > 512:
        levels.append(np.ascontiguousarray(levels[-1][::2, ::2]))
    session.layer = session.viewer.add_image(
        levels, multiscale=True, contrast_limits=(0, int(level.max())), name="in memory"
    )


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    import napari_lazy_zarr
    from bench import view_cycle as vc

    session = vc.start_session(spec)
    mark = vc.Marks(spec["progress"])
    if spec["reader"] == "memory":
        _in_memory(session, spec["location"])
    else:
        vc.open_case(session, spec, mark)
    size, (width, height) = spec["size"], session.size
    y0, x0 = (size - height) // 2, (size - width) // 2
    vc.full_resolution(session, y0, x0)
    session.canvas.on_draw(None)
    probe = vc.StallProbe()

    def run_events(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            session.app.processEvents()
            time.sleep(0.0005)

    run_events(1.0)
    steps, stalls, own_steps, own_dwells, own_longest = [], [], [], [], []
    with OwnTime() as own:
        for index in range(spec["steps"]):
            own.reset()
            started = time.perf_counter()
            vc.full_resolution(session, y0, x0 + 256 * (index + 1))
            session.canvas.on_draw(None)
            session.app.processEvents()
            steps.append(time.perf_counter() - started)
            own_steps.append(own.total)
            longest = own.longest
            own.reset()
            probe.reset()
            run_events(spec["dwell"])
            stalls.append(probe.longest)
            own_dwells.append(own.total)
            own_longest.append(max(longest, own.longest))
    probe.stop()
    stats = vc.cache_statistics(session.loader)
    session.viewer.close()
    package = str(Path(napari_lazy_zarr.__file__).resolve().parent)
    return {
        "steps": steps,
        "stalls": stalls,
        "own_steps": own_steps,
        "own_dwells": own_dwells,
        "own_longest": own_longest,
        "cache": stats,
        "package": package,
    }


def _measure(method: str, previous: Path) -> dict[str, Any]:
    """One fresh napari process measuring `method` (one of `METHODS`)."""
    from tests.remote.server import FaultyServer

    from bench import view_cycle as vc

    config = vc.FULL
    vc.ensure_plain(config)
    vc.ensure_pyramid(config)
    vc.ensure_warm_up(config)
    root = vc.data_root(config)
    reader = vc.OME_ZARR if method.startswith("napari-ome-zarr") else vc.OURS
    case = vc.Case("remote", "pyramid" if "pyramid" in method else "plain", LATENCY, warm_up=True)
    env, package = package_env(previous if method.startswith("previous") else None)
    with (
        tempfile.TemporaryDirectory(prefix="pan-remote-") as scratch,
        vc.serve(root) as (server, _, _),
        FaultyServer(root) as warm,
    ):
        server.faults.latency = LATENCY
        location, warm_up = vc.store_location(case, reader, server.url, warm.url, root)
        memory = method == "napari, in memory"
        spec = {
            "reader": "memory" if memory else reader.label,
            "case": f"pan-remote: {method}",
            "plugin": reader.plugin,
            "prefetch": True,
            "location": str(root / vc.PLAIN) if memory else location,
            "warm_up": warm_up,
            "canvas": list(config.canvas),
            "size": config.size,
            "progress": str(Path(scratch) / "progress.jsonl"),
            "steps": STEPS,
            "dwell": DWELL,
        }
        env["NAPARI_CONFIG"] = str(Path(scratch) / "settings.yaml")
        done = subprocess.run(
            [sys.executable, "-m", "bench.pan_remote", "--worker", json.dumps(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    check_package(result, package, method)
    return result


def run(quick: bool = False) -> str:
    """Measure and return the Markdown section."""
    load = os.getloadavg()[0]
    results: dict[str, list[dict[str, Any]]] = {method: [] for method in METHODS}
    with previous_package(PREVIOUS) as previous:
        for index in range(1 if quick else 2):
            order = METHODS[index % len(METHODS) :] + METHODS[: index % len(METHODS)]
            for method in order:
                result = _measure(method, previous)
                print(f"[pan-remote] round {index + 1}, {method}: {json.dumps(result)[:240]}")
                results[method].append(result)
    after = os.getloadavg()[0]

    def median_of(method: str, key: str, reduce: Any) -> float:
        return statistics.median(reduce([1e3 * s for s in r[key]]) for r in results[method])

    rows = []
    memory = median_of("napari, in memory", "steps", statistics.median)
    for method in METHODS:
        step = median_of(method, "steps", statistics.median)
        loads = [(r["cache"] or {}).get("loads") for r in results[method]]
        rows.append(
            [
                method,
                f"{step:.0f}",
                f"{median_of(method, 'steps', max):.0f}",
                f"{median_of(method, 'stalls', statistics.median):.0f}",
                f"{median_of(method, 'stalls', max):.0f}",
                f"{step / memory:.2f}x",
                f"{median_of(method, 'own_steps', statistics.median):.1f}",
                f"{median_of(method, 'own_steps', max):.1f}",
                f"{median_of(method, 'own_dwells', statistics.median):.1f}",
                f"{median_of(method, 'own_longest', max):.1f}",
                ", ".join(str(n) for n in loads if n is not None) or "",
            ]
        )
    header = [
        "method",
        "step median ms",
        "step worst ms",
        "stall median ms",
        "stall worst ms",
        "step / in memory",
        "own per step median ms",
        "own per step worst ms",
        f"own per {DWELL:.1f} s after a step ms",
        "own longest piece ms",
        "cache loads",
    ]
    return (
        f"## Pan over {LATENCY * 1e3:.0f} ms HTTP: ours vs the previous revision ({PREVIOUS}), "
        "napari-ome-zarr and napari's in-memory image (issue 24)\n\n"
        f"{environment_line(['napari', 'zarr', 'napari-ome-zarr'])}; 1-minute load average "
        f"{load:.2f} before, {after:.2f} after. {STEPS} steps of 256 px per process, "
        f"{len(results[METHODS[0]])} round(s); medians over rounds of each round's median "
        "and worst.\n\n" + markdown_table(header, rows)
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        print(json.dumps(_worker(json.loads(sys.argv[2]))))
    else:
        print(run(quick="--quick" in sys.argv))
