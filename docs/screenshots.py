"""Make the screenshots in README.md and docs/: `./dev run python docs/screenshots.py`.

Needs a display (run under `xvfb-run -a -s "-screen 0 1920x1080x24"` on a headless machine).
Opens the sample pyramid the way a user does (generated once, about two minutes) for

- `images/viewer.png` — the canvas alone, 1200x800, once the view is complete;

and, for the inspector, an 8192² version of the same image with 128² chunks (so that a
view touches dozens of chunks; generated once, seconds):

- `images/inspector.png` — the whole window, 1600x1000, the chunk inspector docked, caught
  while the view loads: the loads of the displayed level are held at a gate after the first
  few, so the picture shows every kind of chunk (final, loading, queued with a coarser
  level standing in) the same way on every run;
- `images/inspector-panel.png` — the inspector alone at that moment, full size.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import napari
from napari.qt import get_qapp

from napari_lazy_zarr._layer_data import loader_of, wait_until_complete
from napari_lazy_zarr._reader import configure, watch_viewer
from napari_lazy_zarr._sample_data import sample_path
from napari_lazy_zarr.cli import _fit_canvas
from napari_lazy_zarr.core.sample import default_cache_dir, write_sample_ome_zarr
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource
from napari_lazy_zarr.widgets import ChunkInspector

IMAGES = Path(__file__).parent / "images"
CENTER = (0, 4100.0, 4100.0)  # a region of the 32768² image, in µm (0.25 µm per pixel)
SMALL_CHUNKS = 128
ZOOM = 1.6  # napari shows level 1 of the 8192² image: 32 x 32 chunks, marks visible


class Gate:
    """Lets the first `allowed` reads of level `level` through, then holds the others."""

    def __init__(self, level: str, allowed: int) -> None:
        self.level, self.allowed = level, allowed
        self.open = threading.Event()
        self._lock = threading.Lock()

    def install(self) -> None:
        original = ZarrChunkSource.read_chunk
        gate = self

        def read_chunk(source: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
            if str(source.identity).endswith(f"/{gate.level}"):
                with gate._lock:
                    gate.allowed -= 1
                    hold = gate.allowed < 0
                if hold:
                    gate.open.wait(timeout=120)
            return original(source, coords)

        ZarrChunkSource.read_chunk = read_chunk  # type: ignore[method-assign]


def small_chunks_sample() -> Path:
    path = default_cache_dir() / f"docs-cells-8192-c{SMALL_CHUNKS}.ome.zarr"
    marker = path / ".complete"
    if not marker.exists():
        write_sample_ome_zarr(path, size=8192, chunk=SMALL_CHUNKS, smallest=512)
        marker.touch()
    return path


def pump(seconds: float) -> None:
    app, deadline = get_qapp(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)


def main() -> None:
    IMAGES.mkdir(exist_ok=True)
    path = str(sample_path())
    configure(concurrency=2)

    # The canvas alone, complete.
    viewer = napari.Viewer(show=True, title="napari-lazy-zarr")
    watch_viewer(viewer)
    (layer,) = viewer.open(path, plugin="napari-lazy-zarr")
    assert loader_of(layer) is not None
    _fit_canvas(viewer, 1200, 800)
    viewer.scene.camera.zoom, viewer.scene.camera.center = 1.6, CENTER
    viewer.window._qt_viewer.canvas.on_draw(None)
    if not wait_until_complete(viewer, 120):
        raise SystemExit("the view did not complete")
    viewer.screenshot(str(IMAGES / "viewer.png"), canvas_only=True, flash=False)
    viewer.close()

    # The window with the inspector, while level 1 loads.
    path = str(small_chunks_sample())
    gate = Gate(level="1", allowed=45)
    gate.install()
    viewer = napari.Viewer(show=True, title="napari-lazy-zarr")
    viewer.window.resize(1600, 1000)
    watch_viewer(viewer)
    _, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    assert isinstance(inspector, ChunkInspector)
    (layer,) = viewer.open(path, plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    loader.prefetch = False
    pump(1.0)  # the coarse levels (the thumbnail) load: they stand in for level 1
    viewer.scene.camera.zoom, viewer.scene.camera.center = ZOOM, (0, 1100.0, 1000.0)
    viewer.window._qt_viewer.canvas.on_draw(None)
    pump(3.0)  # half the view's chunks land; the next wait at the gate
    viewer.screenshot(str(IMAGES / "inspector.png"), canvas_only=False, flash=False)
    inspector.grab().save(str(IMAGES / "inspector-panel.png"))
    print(f"inspector at level {inspector.level}: {inspector.summary.text()}")
    grid = inspector.chunk_map.grid
    assert grid is not None
    for state in ("LOADING", "QUEUED"):  # what hovering shows (for the user guide)
        cell = next(
            c for c in sorted(inspector.chunk_map.touched) if grid.state_at(c).name == state
        )
        print(f"--- hover over a {state} chunk:\n{inspector.chunk_map.describe(cell)}")
    gate.open.set()
    viewer.close()


if __name__ == "__main__":
    main()
