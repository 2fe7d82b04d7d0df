"""3D benchmark: how soon napari shows a volume, a finer level, and the finest that fits.

Two (z, y, x) uint8 pyramids of 4 levels over a 1024³ level 0 (64³ chunks),
written by ome-zarr-py (`write_multiscale`): **isotropic** (z, y and x
decimated: 1024³ … 128³) and **yx** (y and x only: 1024×1024² … 1024×128²,
what ome-zarr-py's own scaler writes for ``zyx``, common for light-sheet data).
Each is opened from local disk in a real `napari.Viewer(show=True)` by each
reader (ours; napari-ome-zarr; napari's built-in reader, which opens level 0 as
one array) and switched with ``viewer.dims.ndisplay = 3``. Measured from the
switch: **first picture** (the first slice napari applies whose values are not
all the fill value), **finer than the coarsest** (the first such slice of a
level finer than the coarsest; the built-in reader's only level counts), the
**finest** level shown and when (ours settles at the finest level within the
default voxel budget of 512³ and half the cache, `LayerLoader.volume_target`;
napari-ome-zarr stays at the coarsest), the main thread's longest stall while
it loads (a 5 ms `QTimer`), its time in the layer's slicing calls, and per
camera step (10 rotation steps) the longest stall. One subprocess per reader.

Mesa llvmpipe renders volumes in software, and the paint holds the GIL (workers
wait): a frame of a 1024-deep volume costs seconds for every reader, and a
stall includes uploads and paints no reader avoids. A full run (both pyramids,
3 readers) takes about 6 minutes; ``--quick`` uses 256³ pyramids.
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
PYRAMIDS = ("isotropic", "yx")
"""z, y and x decimated (1024³ ... 128³); y and x only (1024×1024² ... 1024×128²),
what ome-zarr-py's own scaler writes for ``zyx`` and common for light-sheet data."""


def pyramid_shapes(size: int, pyramid: str) -> list[tuple[int, int, int]]:
    """The levels' shapes of the `pyramid` kind over a `size`³ level 0."""
    return [(size if pyramid == "yx" else size >> k, size >> k, size >> k) for k in range(LEVELS)]


def ensure_volume(size: int, pyramid: str = "isotropic") -> Path:
    suffix = "" if pyramid == "isotropic" else f"-{pyramid}"
    path = DATA_DIR / f"volume-{size}{suffix}.ome.zarr"
    params: dict[str, Any] = {
        "generator": "ome_zarr.writer.write_multiscale",
        "size": size,
        "levels": LEVELS,
    }
    if pyramid != "isotropic":
        params["pyramid"] = pyramid

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
        z_step = [1 if pyramid == "yx" else 2**k for k in range(LEVELS)]
        levels = [base[:: z_step[k], :: 2**k, :: 2**k] for k in range(LEVELS)]
        group = zarr.open_group(str(path), mode="w", zarr_format=3)
        write_multiscale(
            levels, group, axes="zyx", storage_options={"chunks": (CHUNK, CHUNK, CHUNK)}
        )

    return generated_store(path, params, write, "volume")


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    import napari
    import numpy as np

    # napari imports scipy.spatial at the first 3D switch (0.3-0.4 s here, where bytecode
    # is not cached): some readers import it at open, so every reader pays it now, untimed.
    import scipy.spatial.transform  # noqa: F401
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

    stalls: list[tuple[float, float]] = []  # (start, seconds) of each stall > 0.25 s
    painted: list[float | None] = [None]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        if now - last[0] > 0.25:
            stalls.append((round(last[0] - started, 3), round(now - last[0], 3)))
        last[0] = now
        if painted[0] is None and any(shown for _, _, shown in events):
            painted[0] = now - started  # the event loop is back: the first picture painted

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
    coarsest = len(layer.data) - 1 if layer.multiscale else 0
    target: list[int | None] = [None]

    def done() -> bool:
        if loader is None:  # shown (read whole) and painted
            return painted[0] is not None
        target[0] = loader.volume_target()  # None until napari read a volume
        locked = None if target[0] == coarsest else target[0]
        return target[0] is not None and layer.locked_data_level == locked and loader.settled

    deadline = started + timeout
    while not done() and time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.001)
    loading_stall = max(gaps, default=0.0)
    loading_stalls = list(stalls)
    slicing = probe.seconds
    first = next((t - started for t, _, shown in events if shown), None)
    finer = next(
        (t - started for t, lvl, shown in events if shown and (lvl < coarsest or not coarsest)),
        None,
    )
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
        "painted_s": painted[0],
        "finer_s": finer,
        "finest_level": finest_level,
        "finest_s": finest_at,
        "completed": done(),
        "target": target[0],
        "stalls": loading_stalls,
        "slices": [(round(t - started, 3), lvl, shown) for t, lvl, shown in events],
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
    """Measure and return the Markdown section: each pyramid, each reader, in one run."""
    size = 256 if quick else SIZE
    sections = []
    for pyramid in PYRAMIDS:
        path = ensure_volume(size, pyramid)
        shapes = pyramid_shapes(size, pyramid)
        rows, target = [], None
        for reader in READERS:
            spec = {"reader": reader, "path": str(path), "timeout": 120}
            result = _run_worker(spec)
            print(f"[volume] {pyramid} {json.dumps(result)[:600]}", flush=True)
            rows.append(_row(result, shapes))
            if reader == READERS[0]:
                target = result.get("target")
        described = (
            "×".join(str(n) for n in shapes[0]) + " … " + "×".join(str(n) for n in shapes[-1])
        )
        sections.append(
            f"### {pyramid} pyramid ({described}), ours settles at level {target} "
            f"({'—' if target is None else '×'.join(str(n) for n in shapes[target])})\n\n"
            + markdown_table(
                [
                    "reader",
                    "first picture",
                    "first picture painted",
                    "finer than the coarsest at",
                    "finest level shown",
                    "finest shown at",
                    "longest stall while loading",
                    "main-thread slicing",
                    "longest stall per camera step",
                ],
                rows,
            )
        )
    header = (
        f"## 3D: {size}³ uint8 pyramids, {LEVELS} levels ({CHUNK}³ chunks), local disk; "
        "voxel budget 512³; times from the switch to 3D\n\n"
    )
    return (
        header
        + "\n\n".join(sections)
        + "\n\n"
        + environment_line(["napari", "napari-ome-zarr"])
        + "\n"
    )


def _row(result: dict[str, Any], shapes: list[tuple[int, int, int]]) -> list[str]:
    if "error" in result:
        return [
            result["reader"],
            "error",
            *[""] * 6,
            result["error"].splitlines()[-1][:60],
        ]

    def s(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f} s"

    finest = result["finest_level"]
    return [
        result["reader"],
        s(result["first_s"]),
        s(result["painted_s"]),
        s(result["finer_s"]),
        "—" if finest is None else f"{finest} ({'×'.join(str(n) for n in shapes[finest])})",
        s(result["finest_s"]),
        f"{result['loading_stall_ms']:.0f} ms",
        f"{result['slicing_ms']:.0f} ms",
        f"{result['camera_step_stall_ms']:.0f} ms",
    ]


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))), flush=True)
