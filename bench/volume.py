"""3D benchmark: how soon napari shows a volume, and how soon the finest level that fits.

A (z, y, x) uint8 pyramid of 4 levels (1024³ down to 128³; 64³ chunks; z, y and
x decimated by striding), written by ome-zarr-py (`write_multiscale`), opened
from local disk in a real `napari.Viewer(show=True)` by each reader (ours;
napari-ome-zarr; napari's built-in reader, which opens the group's level 0 as
one array) with ``viewer.dims.ndisplay = 3``. Measured from the switch to 3D:
**first picture** (the first slice napari applies whose values are not all the
fill value), **finest** (ours: the level locked within the default voxel budget
of 512³, and the time its volume is shown; napari-ome-zarr shows the coarsest
level; the built-in reader shows level 0, read whole), the main thread's
longest stall while it loads (a 5 ms `QTimer`), its time in the layer's slicing
calls, and per camera step (10 rotation steps) the longest stall. One
subprocess per reader. Mesa llvmpipe renders volumes in software: a stall
includes uploads and paints no reader avoids.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from bench import DATA_DIR, environment_line, generated_store, markdown_table

if TYPE_CHECKING:
    from pathlib import Path

SIZE, CHUNK, LEVELS = 1024, 64, 4
READERS = ("napari-lazy-zarr", "napari-ome-zarr", "napari")


def ensure_volume(size: int) -> Path:
    path = DATA_DIR / f"volume-{size}.ome.zarr"
    params = {"generator": "ome_zarr.writer.write_multiscale", "size": size, "levels": LEVELS}

    def write() -> None:
        import dask.array as da
        import numpy as np
        import zarr
        from ome_zarr.writer import write_multiscale  # type: ignore[import-untyped]

        def block(block_info: dict[Any, Any] | None = None) -> Any:
            assert block_info is not None
            (z0, z1), (y0, y1), (x0, x1) = block_info[None]["array-location"]
            z, y, x = np.ogrid[z0:z1, y0:y1, x0:x1]
            return ((x // 4 + y // 6 + z // 8) % 250 + 1).astype(np.uint8)

        base = da.map_blocks(  # type: ignore[no-untyped-call]
            block, chunks=((CHUNK * 4,) * (size // (CHUNK * 4)),) * 3, dtype=np.uint8
        )
        pyramid = [base[:: 2**k, :: 2**k, :: 2**k] for k in range(LEVELS)]
        group = zarr.open_group(str(path), mode="w", zarr_format=3)
        write_multiscale(
            pyramid, group, axes="zyx", storage_options={"chunks": (CHUNK, CHUNK, CHUNK)}
        )

    return generated_store(path, params, write, "volume")


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    import napari
    import numpy as np
    from qtpy.QtCore import QTimer

    from bench.napari_pan import _Probe
    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr._reader import watch_viewer

    reader, path, timeout = spec["reader"], spec["path"], spec["timeout"]
    viewer = napari.Viewer(show=True)
    viewer.window.resize(900, 760)
    app = napari.qt.get_qapp()
    watch_viewer(viewer)
    layer = viewer.open(path if reader != "napari" else f"{path}/s0", plugin=reader)[0]
    layer.contrast_limits = (0, 255)
    loader = loader_of(layer)
    for _ in range(20):
        app.processEvents()
    probe = _Probe(layer)
    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    events: list[tuple[float, int, bool]] = []

    def applied(event: Any = None) -> None:
        raw = np.asarray(layer._slice.image.raw)
        level = int(
            layer.locked_data_level
            if layer.locked_data_level is not None
            else (len(layer.data) - 1 if layer.multiscale else 0)
        )
        events.append((time.perf_counter(), level, raw.ndim == 3 and bool(raw.any())))

    layer.events.set_data.connect(applied)
    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    started = time.perf_counter()
    last[0] = started
    timer.start()
    viewer.dims.ndisplay = 3
    target = spec["target"] if loader is not None else None

    def done() -> bool:
        if loader is None:
            return any(shown for _, _, shown in events)
        return bool(layer.locked_data_level == target and loader.settled)

    deadline = started + timeout
    while not done() and time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.001)
    loading_stall = max(gaps, default=0.0)
    slicing = probe.seconds
    first = next((t - started for t, _, shown in events if shown), None)
    finest_level = min((lvl for _, lvl, shown in events if shown), default=None)
    finest_at = next(
        (t - started for t, lvl, shown in events if shown and lvl == finest_level), None
    )
    gaps.clear()
    step_stalls = []
    for step in range(10):
        last[0] = time.perf_counter()
        gaps.clear()
        viewer.scene.camera.angles = (0, 10 + 5 * step, 80)
        for _ in range(30):
            app.processEvents()
            time.sleep(0.002)
        step_stalls.append(max(gaps, default=0.0))
    timer.stop()
    result = {
        "reader": reader,
        "first_s": first,
        "finest_level": finest_level,
        "finest_s": finest_at,
        "completed": done(),
        "loading_stall_ms": loading_stall * 1e3,
        "slicing_ms": slicing * 1e3,
        "camera_step_stall_ms": max(step_stalls) * 1e3,
    }
    viewer.close()
    return result


def _run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "bench.volume", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=spec["timeout"] + 120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"> {spec['timeout'] + 120} s"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    return {**spec, "error": (out.stderr or out.stdout)[-400:]}


def run(quick: bool = False) -> str:
    """Measure and return the Markdown section."""
    from napari_lazy_zarr._layer_data import DEFAULT_VOLUME_VOXELS
    from napari_lazy_zarr.core.viewport import volume_level

    size = 256 if quick else SIZE
    path = ensure_volume(size)
    shapes = [(size >> k,) * 3 for k in range(LEVELS)]
    target = volume_level(shapes, (0, 1, 2), voxel_budget=DEFAULT_VOLUME_VOXELS)
    rows = []
    for reader in READERS:
        spec = {"reader": reader, "path": str(path), "timeout": 120, "target": target}
        result = _run_worker(spec)
        print(f"[volume] {json.dumps(result)[:300]}", flush=True)
        if "error" in result:
            rows.append([reader, "error", "", "", "", "", result["error"].splitlines()[-1][:60]])
            continue

        def s(value: float | None) -> str:
            return "—" if value is None else f"{value:.2f} s"

        rows.append(
            [
                reader,
                s(result["first_s"]),
                f"{result['finest_level']} ({shapes[result['finest_level']][0]}³)"
                if result["finest_level"] is not None
                else "—",
                s(result["finest_s"]),
                f"{result['loading_stall_ms']:.0f} ms",
                f"{result['slicing_ms']:.0f} ms",
                f"{result['camera_step_stall_ms']:.0f} ms",
            ]
        )
    header = (
        f"## 3D: a {size}³ uint8 pyramid, {LEVELS} levels ({CHUNK}³ chunks), local disk; "
        f"voxel budget 512³ (level {target})\n\n"
    )
    body = markdown_table(
        [
            "reader",
            "first picture",
            "finest level shown",
            "finest shown at",
            "longest stall while loading",
            "main-thread slicing",
            "longest stall per camera step",
        ],
        rows,
    )
    return header + body + "\n\n" + environment_line(["napari", "napari-ome-zarr"]) + "\n"


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))), flush=True)
