"""Make the screenshots in README.md and docs/: `./dev run python docs/screenshots.py`.

Needs a display (run under `xvfb-run -a -s "-screen 0 1920x1080x24"` on a headless machine).
Opens the sample pyramid the way a user does and waits for each view to complete.
"""

from __future__ import annotations

from pathlib import Path

import napari
from napari.qt import get_qapp

from napari_lazy_zarr._layer_data import loader_of, wait_until_complete
from napari_lazy_zarr._reader import watch_viewer
from napari_lazy_zarr._sample_data import sample_path

IMAGES = Path(__file__).parent / "images"


def main() -> None:
    IMAGES.mkdir(exist_ok=True)
    viewer = napari.Viewer(show=True, title="napari-lazy-zarr")
    viewer.window.resize(1400, 900)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(sample_path()), plugin="napari-lazy-zarr")
    assert loader_of(layer) is not None
    # Zoomed in on a 32768² image: napari shows level 1 and reads only what is on screen.
    viewer.scene.camera.zoom = 1.6
    viewer.scene.camera.center = (0, 4100.0, 4100.0)
    viewer.window._qt_viewer.canvas.on_draw(None)
    if not wait_until_complete(viewer, 120):
        raise SystemExit("the view did not complete")
    viewer.screenshot(str(IMAGES / "viewer.png"), canvas_only=False, flash=False)
    # The same view with the chunk inspector docked beside it.
    viewer.window.resize(1700, 1000)
    _, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    viewer.window._qt_viewer.canvas.on_draw(None)
    if not wait_until_complete(viewer, 120):
        raise SystemExit("the view did not complete")
    app = get_qapp()
    ticks = inspector.ticks
    while inspector.ticks < ticks + 3:  # let the inspector's timer apply and paint
        app.processEvents()
    viewer.screenshot(str(IMAGES / "inspector.png"), canvas_only=False, flash=False)
    inspector.close()
    viewer.close()


if __name__ == "__main__":
    main()
