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
