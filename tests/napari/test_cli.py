"""The `napari-lazy-zarr PATH --screenshot FILE` command, run as a user would, under Xvfb."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.napari.conftest import write_ome_pyramid

if TYPE_CHECKING:
    from pathlib import Path

QUADRANTS = {(0, 0): 1000, (0, 1): 5000, (1, 0): 9000, (1, 1): 13000}


def _quadrant_store(tmp_path: Path) -> Path:
    data = np.zeros((1024, 1024), dtype=np.uint16)
    for (qy, qx), value in QUADRANTS.items():
        data[qy * 512 : (qy + 1) * 512, qx * 512 : (qx + 1) * 512] = value
    store = tmp_path / "quadrants.ome.zarr"
    write_ome_pyramid(
        store,
        data,
        levels=2,
        chunks=(128, 128),
        axes=[{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        zarr_format=3,
        omero={
            "channels": [
                {"color": "FFFFFF", "window": {"min": 0, "max": 65535, "start": 0, "end": 14000}}
            ]
        },
    )
    return store


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NAPARI_CONFIG": str(tmp_path / "settings.yaml")}
    return subprocess.run(
        [sys.executable, "-m", "napari_lazy_zarr.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


needs_display = pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="needs a display (Xvfb)")


@needs_display
def test_screenshot_of_the_canvas_at_a_given_size(tmp_path: Path) -> None:
    import imageio.v3 as iio

    store = _quadrant_store(tmp_path)
    shot = tmp_path / "shot.png"
    result = _run(tmp_path, str(store), "--screenshot", str(shot), "--size", "800x600")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "saved" in result.stdout
    assert "800x600" in result.stdout
    image = iio.imread(shot)[..., :3].astype(int)
    assert image.shape[:2] == (600, 800)  # the canvas alone, at the size asked for
    # The image is drawn fitted in the canvas: find it, then read each quadrant's centre.
    rows, cols = np.nonzero(image.max(axis=-1) > 5)
    top, bottom, left, right = rows.min(), rows.max(), cols.min(), cols.max()
    assert bottom - top > 500  # fitted to the canvas's height, not a strip
    assert right - left > 500
    for (qy, qx), value in QUADRANTS.items():
        y = int(top + (bottom - top) * (0.25 + 0.5 * qy))
        x = int(left + (right - left) * (0.25 + 0.5 * qx))
        expected = round(value / 14000 * 255)
        assert np.abs(image[y, x] - expected).max() <= 2, ((qy, qx), image[y, x], expected)


@needs_display
def test_screenshot_of_the_whole_window_shows_the_inspector(tmp_path: Path) -> None:
    import imageio.v3 as iio

    from napari_lazy_zarr.core import ChunkState
    from napari_lazy_zarr.widgets._grid_state import STATE_COLORS

    store = _quadrant_store(tmp_path)
    shot = tmp_path / "window.png"
    result = _run(
        tmp_path, str(store), "--screenshot", str(shot), "--window", "--size", "1400x900"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    image = iio.imread(shot)[..., :3].astype(int)
    assert image.shape[:2] == (900, 1400)
    # The inspector's chunk map is docked on the right: its READY chunks are green there.
    ready = np.all(image == STATE_COLORS[ChunkState.READY], axis=-1)
    _rows, cols = np.nonzero(ready)
    assert ready.sum() > 2000
    assert cols.min() > 1400 * 0.6
    # The canvas is not squeezed: the grey image spans a wide region left of the dock.
    grey = (np.ptp(image, axis=-1) == 0) & (image[..., 0] > 40)
    grey_cols = np.nonzero(grey.any(axis=0))[0]
    assert grey_cols.max() - grey_cols.min() > 500


def test_screenshot_options_are_checked() -> None:
    from napari_lazy_zarr.cli import main, parse_size

    assert parse_size("1024x768") == (1024, 768)
    for bad in ("1024", "big", "0x10", "10x100000"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(bad)
    with pytest.raises(SystemExit) as exit_info:
        main(["store.zarr", "--window"])  # --window without --screenshot
    assert exit_info.value.code == 2
