"""Playback through a real viewer over a slow store: no frame napari shows has a fill region.

napari plays the t axis (its own `QtDims.play` animation thread) of an OME-Zarr
movie written by ome-zarr-py, served over loopback HTTP with latency. Every
slice napari applies is compared with NumPy: no placeholder cell (the data is
never 0, the fill value), and each frame is one plane of the movie, at the
displayed level or a coarser one (nearest neighbour).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer
from tests.remote.server import FaultyServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest
    from pytestqt.qtbot import QtBot

FRAMES = 24
SIZE = 512
LEVELS = 3


def write_movie(path: Path, frames: int = FRAMES, size: int = SIZE) -> list[np.ndarray[Any, Any]]:
    """A (t, y, x) uint8 movie, never 0, every plane different; 3 levels by striding."""
    from ome_zarr.writer import write_multiscale  # type: ignore[import-untyped]

    t, y, x = np.ogrid[:frames, :size, :size]
    data = ((x // 3 + y // 5 + 17 * t) % 250 + 1).astype(np.uint8)
    pyramid = [data[:, :: 2**k, :: 2**k] for k in range(LEVELS)]
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    write_multiscale(pyramid, group, axes="tyx", storage_options={"chunks": (1, 128, 128)})
    return pyramid


def plane_of(frame: np.ndarray[Any, Any], level: int, corners: Any, pyramid: Any) -> int | None:
    """The plane `frame` shows (at `level` or coarser, nearest neighbour), else None.

    At cells whose indices are multiples of the coarsest factor, every coarser level's
    nearest neighbour equals the displayed level's value.
    """
    (y0, x0), (y1, x1) = np.asarray(corners, dtype=int)
    step = 2 ** (LEVELS - 1 - level)
    ys = np.arange(y0, y1 + 1)
    xs = np.arange(x0, x1 + 1)
    keep_y = ys % step == 0
    keep_x = xs % step == 0
    sample = frame[np.ix_(keep_y, keep_x)]
    for t in range(pyramid[level].shape[0]):
        expected = pyramid[level][t][np.ix_(ys[keep_y], xs[keep_x])]
        if sample.shape == expected.shape and np.array_equal(sample, expected):
            return t
    return None


def test_played_frames_never_show_a_fill_region(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    pyramid = write_movie(tmp_path / "movie.ome.zarr")
    with FaultyServer(tmp_path) as server:
        server.faults.latency = 0.05
        viewer = make_napari_viewer(show=True)
        viewer.window.resize(800, 700)
        watch_viewer(viewer)
        (layer,) = viewer.open(f"{server.url}/movie.ome.zarr", plugin="napari-lazy-zarr")
        loader = loader_of(layer)
        assert loader is not None
        layer.contrast_limits = (0, 255)
        viewer.window._qt_viewer.canvas.on_draw(None)
        qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
        frames: list[tuple[int, int, Any, np.ndarray[Any, Any]]] = []

        def record(event: Any = None) -> None:
            frames.append(
                (
                    int(viewer.dims.current_step[0]),
                    int(layer.data_level),
                    np.array(layer.corner_pixels[:, 1:]),
                    np.array(layer._slice.image.raw),
                )
            )

        layer.events.set_data.connect(record)
        qt_dims = viewer.window._qt_viewer.dims
        qt_dims.play(axis=0, fps=10, loop_mode="once")
        shots = []
        qtbot.waitUntil(lambda: len(frames) >= 6, timeout=30_000)
        shots.append(viewer.screenshot(canvas_only=True, flash=False))
        qtbot.waitUntil(lambda: not qt_dims.is_playing, timeout=60_000)
        shots.append(viewer.screenshot(canvas_only=True, flash=False))
        layer.events.set_data.disconnect(record)
        qtbot.waitUntil(lambda: loader.settled, timeout=30_000)

    out = os.environ.get("LAZY_ZARR_SHOTS")
    if out:
        from imageio.v3 import imwrite

        for i, shot in enumerate(shots):
            imwrite(f"{out}/playback-{i}.png", shot)
    assert len(frames) >= 10
    steps = []
    for step, level, corners, raw in frames:
        assert raw.ndim == 2
        assert (raw != 0).all(), f"a fill region in the frame shown at t={step}"
        plane = plane_of(raw, level, corners, pyramid)
        assert plane is not None, f"the frame shown at t={step} is no plane of the movie"
        assert plane <= step  # a held frame is an earlier one, never a later one
        steps.append(step)
    assert steps[-1] == FRAMES - 1
    # The final frame is exact.
    step, level, corners, raw = frames[-1]
    (y0, x0), (y1, x1) = corners
    np.testing.assert_array_equal(
        np.asarray(layer._slice.image.raw), pyramid[level][FRAMES - 1][y0 : y1 + 1, x0 : x1 + 1]
    )


def test_a_held_step_is_refreshed_once_whole_not_paced_behind_the_last_refresh(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A t step whose plane is not resident is answered with the last whole frame (held);
    its refresh, the one that shows the step, comes as soon as the plane is whole. The
    layer's refreshes are paced by what each costs (a 3D repaint: 200-300 ms under llvmpipe,
    the next refresh 2x that later): the step's refresh waited out the previous step's
    pace, 200-350 ms a 3D t step here. The pace is made 5 s to tell the two apart."""
    from napari_lazy_zarr._layer_data import LayerLoader

    t, y, x = np.ogrid[:64, :256, :256]
    data = ((x + 3 * y + 50 * t) % 250 + 1).astype(np.uint8)
    zarr.create_array(str(tmp_path / "movie.zarr"), data=data, chunks=(1, 128, 128))
    with FaultyServer(tmp_path) as server:
        server.faults.latency = 0.2
        viewer = make_napari_viewer(show=True)
        watch_viewer(viewer)
        (layer,) = viewer.open(f"{server.url}/movie.zarr", plugin="napari-lazy-zarr")
        loader = loader_of(layer)
        assert loader is not None
        loader.prefetch = False  # from now on nothing is loaded ahead
        viewer.window._qt_viewer.canvas.on_draw(None)
        qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
        monkeypatch.setattr(LayerLoader, "_pace", lambda self, cost: None)
        loader._throttle.setTimeout(5_000)
        loader._throttle()  # a refresh now: the next one is due 5 s later at the earliest
        qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
        cache = loader.controller.cache
        qtbot.waitUntil(lambda: not cache.counters().in_flight + cache.counters().queued)
        cache.evict_unpinned()  # what napari's open loaded ahead: only t=32 stays
        held: list[bool] = []  # per slice napari applies: was it answered held?
        controller = loader.controller
        layer.events.set_data.connect(lambda event=None: held.append(controller.latest.held))
        viewer.dims.set_current_step(0, 0)  # not resident: held
        viewer.window._qt_viewer.canvas.on_draw(None)  # napari slices when it draws
        qtbot.waitUntil(lambda: bool(held), timeout=5_000)
        assert held[0]  # napari's slice of the step: the last whole frame (t=32)
        qtbot.waitUntil(lambda: loader.settled, timeout=2_500)  # well before the 5 s
        np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), data[0])
