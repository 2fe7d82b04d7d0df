"""OME-Zarr 0.6 in a real napari viewer (Xvfb): every RFC-5 transformation placed, scenes
in each of their coordinate systems, the coordinate system widget, and fields warped lazily.

Stores are written at test time by ngff-zarr 0.50 and ome-zarr-py 0.21
(`tests/conformance/cases_ome_versions.py`). The placement oracle is the
writer's transformation applied to landmark pixels (level 0's scale and
translation, then the transformation's matrix), checked against napari's own
layer transforms (`layer.data_to_world`), and against ome-zarr-py's
transformation graph (transformnd) for the types it applies. The warp oracle is
`scipy.ndimage.map_coordinates` over the same field and image.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from scipy import ndimage

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr.core.errors import ChunkReadError, LazyZarrError
from tests.conformance.cases_ome_versions import (
    ATLAS,
    FIELD_SPACING,
    LEVEL0_SCALE,
    LEVEL0_TRANSLATION,
    NAPARI_OME_ZARR_TYPES,
    SCENE_PLACEMENTS,
    field_arrays,
    write_field_image,
    write_scene,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

PLUGIN = "napari-lazy-zarr"
# Pixel landmarks of a 40 x 50 image: corners, centre, an off-grid point.
LANDMARKS = np.array([[0, 0], [39, 0], [0, 49], [39, 49], [20, 25], [7.5, 31.25]])


def writer_place(
    matrix: np.ndarray[Any, Any], points: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The writer's placement: level 0's pixel → intrinsic, then `matrix` (homogeneous)."""
    intrinsic = points * np.array(LEVEL0_SCALE) + np.array(LEVEL0_TRANSLATION)
    full = np.hstack([intrinsic, np.ones((len(points), 1))])
    result: np.ndarray[Any, Any] = (full @ matrix.T)[:, :-1]
    return result


def world_points(layer: Any, points: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.array([layer.data_to_world(p) for p in points])


@pytest.fixture
def scene(tmp_path: Path) -> Path:
    return write_scene(tmp_path).path  # type: ignore[return-value]


def test_every_transformation_places_its_image(
    make_napari_viewer: Callable[..., Any], scene: Path
) -> None:
    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(scene), plugin=PLUGIN)
    assert [layer.name for layer in layers] == list(SCENE_PLACEMENTS)
    for layer in layers:
        expected = writer_place(SCENE_PLACEMENTS[layer.name], LANDMARKS)
        np.testing.assert_allclose(
            world_points(layer, LANDMARKS), expected, atol=1e-9, err_msg=layer.name
        )
        info = layer.metadata["napari_lazy_zarr"]
        assert info["coordinate_system"] == "world"
        assert info["coordinate_systems"][:2] == ("world", "atlas")


def test_placement_agrees_with_ome_zarr_py_graph(
    make_napari_viewer: Callable[..., Any], scene: Path
) -> None:
    """ome-zarr-py's transformnd graph as a second oracle, for the types it applies
    (not bijection, nor parameters stored in an array)."""
    from ome_zarr.classes.tnd_utils import ozmp_tf_to_tnd_spaced
    from ome_zarr_models.v06.scene import BaseSceneAttrs

    ome = BaseSceneAttrs.model_validate(
        __import__("json").loads((scene / "zarr.json").read_text())["attributes"]["ome"]
    )
    viewer = make_napari_viewer(show=True)
    layers = {layer.name: layer for layer in viewer.open(str(scene), plugin=PLUGIN)}
    checked = []
    for transform in ome.scene.coordinateTransformations:
        name = transform.input.path
        if name not in layers or name in ("bijection", "array"):
            continue
        spaced = ozmp_tf_to_tnd_spaced(transform, source_cs=_cs(2), target_cs=_cs(2))
        intrinsic = LANDMARKS * np.array(LEVEL0_SCALE) + np.array(LEVEL0_TRANSLATION)
        expected = spaced.transform.apply(intrinsic)
        np.testing.assert_allclose(
            world_points(layers[name], LANDMARKS), expected, atol=1e-9, err_msg=name
        )
        checked.append(name)
    assert len(checked) == 8


def test_scene_placed_as_napari_ome_zarr_places_it_but_its_translation(
    make_napari_viewer: Callable[..., Any], tmp_path: Path
) -> None:
    """napari-ome-zarr 0.11 opens a scene of the types it applies: the same layers, each
    pixel where it puts it, but for the datasets' translation, which it drops (the writer
    puts pixel (0, 0) at the translation, mapped by the transformation)."""
    path = write_scene(tmp_path, types=NAPARI_OME_ZARR_TYPES, atlas=False).path
    viewer = make_napari_viewer(show=True)
    ours = {
        layer.name: world_points(layer, LANDMARKS)
        for layer in viewer.open(str(path), plugin=PLUGIN)
    }
    viewer.layers.clear()
    theirs = viewer.open(str(path), plugin="napari-ome-zarr")
    assert [layer.name for layer in theirs] == list(ours) == list(NAPARI_OME_ZARR_TYPES)
    shift = np.array(LEVEL0_TRANSLATION)
    for reference in theirs:
        linear = SCENE_PLACEMENTS[reference.name][:2, :2]
        np.testing.assert_allclose(
            ours[reference.name], world_points(reference, LANDMARKS) + linear @ shift, atol=1e-9
        )


def _cs(ndim: int) -> Any:
    from ome_zarr_models.v06.coordinate_transforms import CoordinateSystem

    axes = [{"name": a, "type": "space"} for a in "yx"[:ndim]]
    return CoordinateSystem.model_validate({"name": "s", "axes": axes})


def test_scene_in_another_coordinate_system(
    make_napari_viewer: Callable[..., Any], scene: Path
) -> None:
    """Two hops (image → world → atlas), and an image's own system as the reference (its
    neighbours placed through the inverse of their transformations)."""
    from napari_lazy_zarr._reader import read_zarr

    viewer = make_napari_viewer(show=True)
    for data, kwargs, kind in read_zarr(str(scene), coordinate_system="atlas"):
        layer = viewer._add_layer_from_data(data, kwargs, kind)[0]
        expected = writer_place(ATLAS @ SCENE_PLACEMENTS[layer.name], LANDMARKS)
        np.testing.assert_allclose(
            world_points(layer, LANDMARKS), expected, atol=1e-9, err_msg=layer.name
        )
    viewer.layers.clear()
    to_affine = np.linalg.inv(SCENE_PLACEMENTS["affine"])
    for data, kwargs, kind in read_zarr(str(scene), coordinate_system="affine: intrinsic"):
        layer = viewer._add_layer_from_data(data, kwargs, kind)[0]
        expected = writer_place(to_affine @ SCENE_PLACEMENTS[layer.name], LANDMARKS)
        np.testing.assert_allclose(
            world_points(layer, LANDMARKS), expected, atol=1e-9, err_msg=layer.name
        )


def test_an_unknown_coordinate_system_is_named(scene: Path) -> None:
    from napari_lazy_zarr._reader import read_zarr

    with pytest.raises(LazyZarrError, match=r"no coordinate system 'nowhere'.*'world', 'atlas'"):
        read_zarr(str(scene), coordinate_system="nowhere")


def test_labels_follow_their_image(make_napari_viewer: Callable[..., Any], tmp_path: Path) -> None:
    """ome-zarr-py 0.21's 0.6 image with a label image: the label layer sits on the image."""
    from tests.conformance.cases_ome_versions import build

    (case,) = [c for c in build() if c.name == "0.6 czyx + labels"]
    written = case.write(tmp_path)
    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(written.path), plugin=PLUGIN)
    assert [type(layer).__name__ for layer in layers] == ["Image", "Image", "Labels"]
    corner = np.array([2, 39, 47])
    for layer in layers:
        np.testing.assert_allclose(layer.data_to_world(corner), layers[0].data_to_world(corner))
    np.testing.assert_allclose(layers[2].data_to_world(corner), corner * np.array([2.0, 0.5, 0.5]))


# -- fields ----------------------------------------------------------------------------


def _oracle(size: int, points: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], float]:
    """The warped image at output pixel `points` (2 x k), by map_coordinates over the whole
    field and image; and the inverse's largest residual |x + d(x) - y| in pixels."""
    data, field = field_arrays(size)
    x = points.astype(np.float64).copy()
    for _ in range(200):
        d = np.stack(
            [
                ndimage.map_coordinates(
                    c.astype(float), x / FIELD_SPACING, order=1, mode="nearest"
                )
                for c in field
            ]
        )
        moved = points - d
        if np.max(np.abs(moved - x)) < 1e-9:
            x = moved
            break
        x = moved
    d = np.stack(
        [
            ndimage.map_coordinates(c.astype(float), x / FIELD_SPACING, order=1, mode="nearest")
            for c in field
        ]
    )
    residual = float(np.max(np.abs(x + d - points)))
    values = ndimage.map_coordinates(data.astype(float), x, order=1, mode="nearest")
    inside = np.all((x >= -0.5) & (x <= size - 0.5), axis=0)
    return np.where(inside, np.rint(values), 0), residual


WARP_SIZE = 2048  # napari reads a smaller level whole: no view of part of it


@pytest.fixture(scope="module")
def field_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A 2048² image and its field, written once (ngff-zarr's pyramid takes ~10 s here)."""
    return write_field_image(tmp_path_factory.mktemp("field"), size=WARP_SIZE)


@pytest.mark.parametrize("where", ["middle", "edge"])
def test_field_warp_equals_map_coordinates(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, field_store: Any, where: str
) -> None:
    size = WARP_SIZE
    written = field_store
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    (layer,) = viewer.open(str(written.path), plugin=PLUGIN)
    assert layer.metadata["napari_lazy_zarr"]["coordinate_systems"] == ("intrinsic", "warped")
    viewer.layers.clear()
    from napari_lazy_zarr._reader import read_zarr

    ((data, kwargs, kind),) = read_zarr(str(written.path), coordinate_system="warped")
    layer = viewer._add_layer_from_data(data, kwargs, kind)[0]
    assert layer.metadata["napari_lazy_zarr"]["warped"]
    centre = (size / 2, size / 2) if where == "middle" else (8.0, size - 8.0)
    viewer.scene.camera.center = centre
    viewer.scene.camera.zoom = 4.0
    viewer.window._qt_viewer.canvas.on_draw(None)
    loader = loader_of(layer)
    assert loader is not None
    qtbot.waitUntil(lambda: loader.settled, timeout=60_000)
    level = layer.data_level
    assert level == 0
    raw = np.asarray(layer._slice.image.raw)
    corners = np.asarray(layer.corner_pixels).astype(int)
    rows = np.arange(corners[0, 0], corners[0, 0] + raw.shape[0])
    cols = np.arange(corners[0, 1], corners[0, 1] + raw.shape[1])
    grid = np.stack(np.meshgrid(rows, cols, indexing="ij")).reshape(2, -1).astype(float)
    expected, residual = _oracle(size, grid)
    shown = raw.reshape(-1).astype(float)
    assert np.max(np.abs(shown - expected)) <= 1  # rounding of the linear interpolation
    assert residual < 1e-3
    if where == "edge":  # the view holds pixels whose source lies outside the image
        assert corners[1, 1] == size - 1
        assert np.any(expected == 0)


def test_field_over_the_budget_is_refused(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.formats.ome import describe_store, open_level_sources
    from napari_lazy_zarr.core.sources.warp import WarpSource

    written = write_field_image(tmp_path, size=256)
    (spec,) = describe_store(written.path, coordinate_system="warped")
    assert spec.warps is not None
    (base, _) = open_level_sources(written.path, spec)
    reads: list[tuple[int, ...]] = []
    original = base.read_chunk

    def counted(coords: tuple[int, ...]) -> Any:
        reads.append(coords)
        return original(coords)

    base.read_chunk = counted  # type: ignore[method-assign]
    warp = WarpSource(base, spec.warps[0], budget=16 << 10, name="tight")
    with pytest.raises(
        ChunkReadError,
        match=r"tight: chunk \[0:64, 0:64\]: warping it needs .* over the budget of 16,384 "
        r"bytes.*not computed",
    ):
        warp.read_chunk((0, 0))
    assert reads == []  # refused before any chunk of the image was read


def test_every_type_in_one_viewer_screenshot(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, scene: Path, tmp_path: Path
) -> None:
    """Every layer of the every-transformation scene drawn: each shows pixels where its
    placement puts it (the canvas is not blank there)."""
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layers = viewer.open(str(scene), plugin=PLUGIN)
    loaders = [loader_of(layer) for layer in layers]
    viewer.reset_view()
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: all(lo is not None and lo.settled for lo in loaders), timeout=30_000)
    shot = viewer.screenshot(canvas_only=True, flash=False)
    assert shot[..., :3].max() > 0
