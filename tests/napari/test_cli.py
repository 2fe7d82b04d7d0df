"""The `napari-lazy-zarr PATH --screenshot FILE` command, run as a user would, under Xvfb."""

from __future__ import annotations

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


@pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="needs a display (Xvfb)")
def test_screenshot_of_a_generated_store(tmp_path: Path) -> None:
    import imageio.v3 as iio

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
    shot = tmp_path / "shot.png"
    env = {**os.environ, "NAPARI_CONFIG": str(tmp_path / "settings.yaml")}
    result = subprocess.run(
        [sys.executable, "-m", "napari_lazy_zarr.cli", str(store), "--screenshot", str(shot)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    image = iio.imread(shot)[..., :3].astype(int)
    # The image is drawn fitted in the canvas: find it, then read each quadrant's centre.
    rows, cols = np.nonzero(image.max(axis=-1) > 5)
    top, bottom, left, right = rows.min(), rows.max(), cols.min(), cols.max()
    assert bottom - top > 100
    assert right - left > 100
    for (qy, qx), value in QUADRANTS.items():
        y = int(top + (bottom - top) * (0.25 + 0.5 * qy))
        x = int(left + (right - left) * (0.25 + 0.5 * qx))
        expected = round(value / 14000 * 255)
        assert np.abs(image[y, x] - expected).max() <= 2, ((qy, qx), image[y, x], expected)
