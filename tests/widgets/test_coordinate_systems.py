"""The coordinate system widget: an OME-Zarr 0.6 scene re-placed in another of its systems.

The scene is written at test time by ngff-zarr 0.50 (`tests/conformance/cases_ome_versions.py`);
the oracle is the writer's transformation of landmark pixels (`layer.data_to_world`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.conformance.cases_ome_versions import ATLAS, SCENE_PLACEMENTS, write_scene
from tests.napari.test_ome_v06 import LANDMARKS, PLUGIN, world_points, writer_place

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot


@pytest.fixture
def scene(tmp_path: Path) -> Path:
    return write_scene(tmp_path).path  # type: ignore[return-value]


def test_widget_re_places_the_layers(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, scene: Path
) -> None:
    from napari_lazy_zarr.widgets import CoordinateSystemChoice

    viewer = make_napari_viewer(show=True)
    viewer.open(str(scene), plugin=PLUGIN)
    widget = CoordinateSystemChoice(viewer)
    dock = viewer.window.add_dock_widget(widget)
    assert widget.stores.currentText() == str(scene)
    assert widget.systems.currentText() == "world"
    widget.systems.setCurrentText("atlas")  # what a user's choice does
    for layer in viewer.layers:
        expected = writer_place(ATLAS @ SCENE_PLACEMENTS[layer.name], LANDMARKS)
        np.testing.assert_allclose(
            world_points(layer, LANDMARKS), expected, atol=1e-9, err_msg=layer.name
        )
        assert layer.metadata["napari_lazy_zarr"]["coordinate_system"] == "atlas"
    assert "10 layers shown in 'atlas'" in widget.status.text()
    viewer.window.remove_dock_widget(dock)
    widget.deleteLater()
    qtbot.waitUntil(lambda: not widget.isVisible())


def test_widget_replaces_a_layer_that_becomes_warped(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    """Into a system reached through a field, the layer's data change: it is replaced (at
    the same place in the list), warped; and back, unwarped."""
    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr.widgets import CoordinateSystemChoice
    from tests.conformance.cases_ome_versions import write_field_image

    written = write_field_image(tmp_path, size=128, chunks=64)
    viewer = make_napari_viewer(show=True)
    viewer.add_points([[0, 0]], name="above")
    (layer,) = viewer.open(str(written.path), plugin=PLUGIN)
    viewer.layers.move(viewer.layers.index(layer), 0)
    widget = CoordinateSystemChoice(viewer)
    dock = viewer.window.add_dock_widget(widget)
    widget.systems.setCurrentText("warped")
    warped = viewer.layers[0]
    assert warped is not layer
    assert warped.name == layer.name
    assert warped.metadata["napari_lazy_zarr"]["warped"]
    loader = loader_of(warped)
    assert loader is not None
    assert type(loader.levels[0].array.source).__name__ == "WarpSource"
    widget.systems.setCurrentText("intrinsic")
    assert not viewer.layers[0].metadata["napari_lazy_zarr"]["warped"]
    assert [lay.name for lay in viewer.layers] == [layer.name, "above"]
    viewer.window.remove_dock_widget(dock)
    widget.deleteLater()
    qtbot.waitUntil(lambda: not widget.isVisible())
