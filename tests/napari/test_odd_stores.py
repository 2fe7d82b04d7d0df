"""Odd stores real writers make (issue 50), in a real napari viewer: what the user sees.

Stores are written at test time (zarr-python; `tests/conformance/cases_odd.py`), and
what napari displays is compared with the writer's arrays (NumPy).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of, wait_until_complete
from tests.conformance.cases_odd import TEXTURE_WARNING, write_webknossos_layer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@pytest.mark.parametrize("rows", [1, 3])
def test_a_row_of_a_million_pixels_shows_the_row(
    make_napari_viewer: Callable[..., Any], tmp_path: Path, rows: int
) -> None:
    """A 1 x 1,000,000 array had 12 virtual levels down to 1 x 489: napari (0.9.2) stays on
    a level whose displayed axis is 1 pixel long, never asked for a view, and showed the
    fill value while `wait_until_complete` said True. No level is 1 pixel along a displayed
    axis now, and napari shows the row as its own reader does."""
    data = (np.arange(rows * 1_000_000, dtype=np.uint32).reshape(rows, -1) * 7) % 60_000
    path = tmp_path / "row.zarr"
    zarr.create_array(str(path), shape=data.shape, chunks=(1, 65_536), dtype="u2")[...] = data
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 600)
    with warnings.catch_warnings():
        # napari's own: a plane wider than a GL texture is drawn downsampled.
        warnings.filterwarnings("ignore", TEXTURE_WARNING, UserWarning)
        (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
        viewer.reset_view()
        viewer.window._qt_viewer.canvas.on_draw(None)
        assert wait_until_complete(viewer, timeout=60)
    loader = loader_of(layer)
    assert loader is not None
    shapes = [level.shape for level in loader.levels]
    assert all(min(shape) >= 2 for shape in shapes[1:])  # no level napari would not leave
    home = _shown_level(layer, data, shapes)
    print(f"\n{rows} x 1,000,000: levels {shapes}, napari shows level {home} at home")
    # Zoomed in on the middle of the row: a finer level for a multiscale layer.
    viewer.scene.camera.center = (0, rows / 2, 500_000)
    viewer.scene.camera.zoom *= 256
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", TEXTURE_WARNING, UserWarning)
        viewer.window._qt_viewer.canvas.on_draw(None)
        assert wait_until_complete(viewer, timeout=60)
    zoomed = _shown_level(layer, data, shapes)
    assert zoomed < home or not layer.multiscale


def _shown_level(layer: Any, data: np.ndarray[Any, Any], shapes: list[tuple[int, ...]]) -> int:
    """The level napari shows; its displayed slice checked against `data` sampled as that
    virtual level samples it (every 2**k-th pixel along each axis that stays 2 pixels long
    or more; a shorter axis keeps its last step, `DecimatedSource`)."""
    level = layer.data_level if layer.multiscale else 0
    steps = [1, 1]
    for _ in range(level):
        steps = [
            2 * f if -(-n // (2 * f)) >= 2 else f for n, f in zip(data.shape, steps, strict=True)
        ]
    expected = data[:: steps[0], :: steps[1]]
    if layer.multiscale:  # napari slices the region in view; a single level whole
        (y0, x0), (y1, x1) = np.asarray(layer.corner_pixels).astype(int)
        expected = expected[y0 : y1 + 1, x0 : x1 + 1]
    shown = np.asarray(layer._slice.image.raw)
    assert shown.shape == expected.shape
    assert shown.shape[0] == shapes[level][0]  # every row of the level
    assert shown.shape[1] > 100  # along the row, not a pixel of it
    assert shown.any()  # not the fill value
    np.testing.assert_array_equal(shown, expected)
    return level


def test_webknossos_levels_padded_to_shards_show_the_data_only(
    make_napari_viewer: Callable[..., Any], tmp_path: Path
) -> None:
    """webknossos pads its coarse magnifications to whole 4096 x 4096 x 32 shards, larger
    than mag 1: each level is cut to the data's box (its padding is not data napari should
    choose levels by or read), and every level's pixels equal the writer's, sampled."""
    written = write_webknossos_layer(tmp_path)
    (expected,) = written.layers
    viewer = make_napari_viewer()
    (layer,) = viewer.open(str(written.path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    shapes = [tuple(level.shape) for level in loader.levels]
    steps = ((1, 1, 1), (2, 2, 1), (4, 4, 1))
    assert shapes == [expected[::a, ::b, ::c].shape for a, b, c in steps]
    for level, (a, b, c) in zip(layer.data, steps, strict=True):
        np.testing.assert_array_equal(np.asarray(level), expected[::a, ::b, ::c])
