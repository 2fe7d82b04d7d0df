"""Pan over HTTP while a plain array's background work runs: napari's main thread per step.

``./dev bench pan-remote [--quick]`` (under ``xvfb-run -a -s "-screen 0
1920x1080x24"``). In a fresh napari process per round (`bench.view_cycle`'s
session: fixed canvas, napari's warm-up untimed, a warm-up store opened first),
the plugin opens the view benchmark's 16384² *plain* array (no pyramid, 512²
chunks: a virtual pyramid whose overview costs all 1,024 stored chunks) over
the project's test server adding `LATENCY` to every request, goes to one screen
pixel per stored pixel at the centre, runs the event loop 1 s, then pans
`STEPS` steps of 256 px to the right. Per step: the main thread's time for the
camera move, ``canvas.on_draw`` and one ``processEvents`` (issue 24's "pan
step"), then `DWELL` s of event loop in which a 5 ms timer records the longest
stall. Figures: per round the median and worst step and stall, and the chunk
loads the cache made by the end. A full run: 3 rounds, about 2 minutes
(``--quick``: 1 round on the same store).

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

from bench import environment_line, markdown_table

LATENCY: Final = 0.2
STEPS: Final = 8
DWELL: Final = 0.3


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    from bench import view_cycle as vc

    session = vc.start_session(spec)
    mark = vc.Marks(spec["progress"])
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
    steps, stalls = [], []
    for index in range(spec["steps"]):
        started = time.perf_counter()
        vc.full_resolution(session, y0, x0 + 256 * (index + 1))
        session.canvas.on_draw(None)
        session.app.processEvents()
        steps.append(time.perf_counter() - started)
        probe.reset()
        run_events(spec["dwell"])
        stalls.append(probe.longest)
    probe.stop()
    stats = vc.cache_statistics(session.loader)
    session.viewer.close()
    return {"steps": steps, "stalls": stalls, "cache": stats}


def _round() -> dict[str, Any]:
    from tests.remote.server import FaultyServer

    from bench import view_cycle as vc

    config = vc.FULL
    vc.ensure_plain(config)
    vc.ensure_warm_up(config)
    root = vc.data_root(config)
    case = vc.Case("remote", "plain", LATENCY, warm_up=True)
    with (
        tempfile.TemporaryDirectory(prefix="pan-remote-") as scratch,
        vc.serve(root) as (server, _, _),
        FaultyServer(root) as warm,
    ):
        server.faults.latency = LATENCY
        location, warm_up = vc.store_location(case, vc.OURS, server.url, warm.url, root)
        spec = {
            "reader": "ours",
            "case": "pan-remote",
            "plugin": "napari-lazy-zarr",
            "prefetch": True,
            "location": location,
            "warm_up": warm_up,
            "canvas": list(config.canvas),
            "size": config.size,
            "progress": str(Path(scratch) / "progress.jsonl"),
            "steps": STEPS,
            "dwell": DWELL,
        }
        env = dict(os.environ, NAPARI_CONFIG=str(Path(scratch) / "settings.yaml"))
        done = subprocess.run(
            [sys.executable, "-m", "bench.pan_remote", "--worker", json.dumps(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(quick: bool = False) -> str:
    """Measure and return the Markdown section."""
    load = os.getloadavg()[0]
    rows = []
    for index in range(1 if quick else 3):
        result = _round()
        steps = [1e3 * s for s in result["steps"]]
        stalls = [1e3 * s for s in result["stalls"]]
        print(f"[pan-remote] round {index + 1}: {json.dumps(result)[:300]}", flush=True)
        rows.append(
            [
                index + 1,
                f"{statistics.median(steps):.0f}",
                f"{max(steps):.0f}",
                f"{statistics.median(stalls):.0f}",
                f"{max(stalls):.0f}",
                (result["cache"] or {}).get("loads", "?"),
            ]
        )
    header = ["round", "step median ms", "step max ms", "stall median ms", "stall max ms", "loads"]
    return (
        f"## Pan over {LATENCY * 1e3:.0f} ms HTTP on a plain 16384² array (issue 24)\n\n"
        f"{environment_line(['napari', 'zarr'])}; 1-minute load average {load:.2f} before.\n\n"
        + markdown_table(header, rows)
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        print(json.dumps(_worker(json.loads(sys.argv[2]))))
    else:
        print(run(quick="--quick" in sys.argv))
