"""A remote store in a real napari viewer: storage that stalls or fails never freezes napari."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer
from napari_lazy_zarr.core.sample import synthetic_cells, write_sample_ome_zarr
from tests.remote.server import FaultyServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot


def test_remote_layer_stays_responsive_and_recovers(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    write_sample_ome_zarr(tmp_path / "cells.ome.zarr", size=2048, chunk=256, smallest=512)
    with FaultyServer(tmp_path) as server:
        server.faults.latency = 0.02
        stalled = "cells.ome.zarr/0/c/4/4"
        failing = "cells.ome.zarr/0/c/4/5"
        server.faults.stalled.add(stalled)
        server.faults.errors[failing] = 500  # fails every retry
        viewer = make_napari_viewer(show=True)
        watch_viewer(viewer)
        (layer,) = viewer.open(f"{server.url}/cells.ome.zarr", plugin="napari-lazy-zarr")
        loader = loader_of(layer)
        assert loader is not None
        loader.prefetch = False
        viewer.scene.camera.zoom = 4.0
        viewer.scene.camera.center = (0, 1100 * 0.25, 1200 * 0.25)
        viewer.window._qt_viewer.canvas.on_draw(None)  # slices at once: chunk (4, 4) stalls
        assert layer.data_level == 0
        # napari keeps running while a chunk hangs in storage; the others display.
        qtbot.waitUntil(lambda: loader.cache.statistics.failures == 1, timeout=30_000)
        assert not loader.complete
        (y0, x0), _ = layer.corner_pixels

        def failed_cell_is_the_placeholder() -> bool:
            raw = np.asarray(layer._slice.image.raw)
            cell = raw[1024 - y0 : 1280 - y0, 1280 - x0 : 1536 - x0]
            return cell.size > 0 and bool((cell == 0).all())  # never wrong pixels

        # While it loads, the cell shows the coarser level; once FAILED, the placeholder.
        qtbot.waitUntil(failed_cell_is_the_placeholder, timeout=30_000)
        assert not loader.complete  # the stalled chunk is still out
        server.faults.release.set()
        qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
        server.faults.errors.clear()
        assert loader.cache.retry_failed() == 1
        viewer.window._qt_viewer.canvas.on_draw(None)
        expected = None

        def shows_the_data() -> bool:
            nonlocal expected
            if not loader.settled:
                return False
            (a, b), (c, d) = layer.corner_pixels
            shown = np.asarray(layer._slice.image.raw)
            expected = synthetic_cells(int(a), int(b), (int(c - a + 1), int(d - b + 1)))
            return shown.shape == expected.shape and bool((shown == expected).all())

        qtbot.waitUntil(shows_the_data, timeout=30_000)
