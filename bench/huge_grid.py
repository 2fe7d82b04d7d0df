"""The huge-grid measurement: a 10⁶ x 10⁶ uint8 store of 1 x 1 chunks in a real viewer.

Only the store's metadata and three chunks are written (the rest are missing:
fill value). A real napari viewer (under Xvfb) opens it with the plugin; a
QTimer ticking every 5 ms records the gaps between its ticks — the longest is
the longest main-thread step — from just before ``viewer.open`` until the
layer settles (or `SETTLE_SECONDS` pass), then for `AFTER_SECONDS` more,
optionally with the chunk inspector docked. Printed as one JSON line:
the longest gap, the time to settle, the level shown, the chunks its view
planned, the levels' chunk shapes.

    xvfb-run -a -s "-screen 0 1920x1080x24" ./dev run python -m bench.huge_grid [--inspector]

Not a test: the figures go in the report / CHANGELOG.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any

SETTLE_SECONDS = 60.0
AFTER_SECONDS = 3.0


def write_store(path: str, side: int = 10**6) -> None:
    """The metadata of a ``side`` x ``side`` uint8 array of 1-pixel chunks, and three chunks."""
    os.makedirs(path, exist_ok=True)
    meta = {
        "zarr_format": 2,
        "shape": [side, side],
        "chunks": [1, 1],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    with open(os.path.join(path, ".zarray"), "w") as file:
        json.dump(meta, file)
    for i in range(3):
        with open(os.path.join(path, f"{i}.{i}"), "wb") as file:
            file.write(bytes([200]))


def main(argv: list[str]) -> dict[str, Any]:
    import napari
    import numpy as np
    import zarr
    from qtpy.QtCore import QTimer
    from qtpy.QtWidgets import QApplication

    from napari_lazy_zarr import _reader
    from napari_lazy_zarr.core.viewport import ViewController

    inspector = "--inspector" in argv
    scratch = tempfile.mkdtemp()
    path = os.path.join(scratch, "huge.zarr")
    write_store(path)
    viewer = napari.Viewer(show=True)
    app = QApplication.instance()
    assert app is not None
    # napari's own cost of opening a layer, and the imports: a 512² store opened first.
    small = os.path.join(scratch, "small.zarr")
    zarr.create_array(small, shape=(512, 512), chunks=(64, 64), dtype="u1")[:] = np.uint8(3)
    began = time.perf_counter()
    viewer.open(small, plugin="napari-lazy-zarr")
    small_open = time.perf_counter() - began
    viewer.layers.clear()
    for _ in range(20):
        app.processEvents()
    # Our main-thread steps: the reader and every controller read.
    reads: list[float] = []
    read_zarr = _reader.read_zarr
    original_read = ViewController.read

    def timed_read_zarr(*args: Any) -> Any:
        began = time.perf_counter()
        try:
            return read_zarr(*args)
        finally:
            reads.append(time.perf_counter() - began)

    def timed_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original_read(self, *args, **kwargs)
        finally:
            reads.append(time.perf_counter() - began)

    _reader.read_zarr = timed_read_zarr  # type: ignore[assignment]
    ViewController.read = timed_read  # type: ignore[method-assign]
    gaps: list[tuple[float, float]] = []  # (gap, when)
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append((now - last[0], now))
        last[0] = now

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    if inspector:
        from napari_lazy_zarr.widgets import ChunkInspector

        viewer.window.add_dock_widget(ChunkInspector(viewer), name="Chunk inspector", area="right")
        for _ in range(20):
            app.processEvents()
    timer.start()
    last[0] = start = time.perf_counter()
    # viewer.open runs on the main thread itself: timed as one step (napari's part included).
    (layer,) = viewer.open(path, plugin="napari-lazy-zarr")
    opened = time.perf_counter() - start
    last[0] = open_end = time.perf_counter()
    from napari_lazy_zarr._layer_data import loader_of

    loader = loader_of(layer)
    deadline = start + SETTLE_SECONDS
    settled_at = None
    while time.perf_counter() < deadline:
        app.processEvents()
        if loader is not None and loader.settled and settled_at is None:
            settled_at = time.perf_counter() - start
            deadline = min(deadline, time.perf_counter() + AFTER_SECONDS)
    timer.stop()
    controller = loader.controller if loader is not None else None
    shown_level = getattr(layer, "data_level", None)
    figures = {
        "inspector": inspector,
        "open_call_s": round(opened, 3),
        "small_store_open_call_s": round(small_open, 3),
        "plugin_longest_main_thread_step_ms": round(max(reads) * 1e3, 1),
        "plugin_main_thread_steps": len(reads),
        "longest_event_loop_gap_after_open_ms": round(
            max(g for g, when in gaps if when - g >= open_end) * 1e3, 1
        ),
        "plugin_steps_ms": [round(r * 1e3, 1) for r in reads],
        "ticks": len(gaps),
        "gaps_over_100ms_after_open": sum(1 for g, w in gaps if g > 0.1 and w - g >= open_end),
        "settled_s": None if settled_at is None else round(settled_at, 2),
        "levels": len(layer.data),
        "data_level": shown_level,
        "view_chunks": None if controller is None else len(controller.view_keys),
        "level_chunks": [
            tuple(int(g.size) if hasattr(g, "size") else -1 for g in s.grid)
            for s in (controller.sources if controller is not None else [])
        ],
    }
    viewer.close()
    return figures


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
