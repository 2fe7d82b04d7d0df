"""OME-Zarr 0.1-0.3 and 0.6 metadata read into layer specs (no viewer): drafts, fields in
each direction, what cannot be shown (warned, never refused), and overflowing numbers.

The stores are written by zarr-python with the metadata each case needs (the writers of
`tests/conformance/cases_ome_versions.py` write only valid stores); the warp's oracle is
`scipy.ndimage.map_coordinates` over the same field and image.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from scipy import ndimage

from napari_lazy_zarr.core.errors import MetadataError, MetadataWarning
from napari_lazy_zarr.core.formats.ome import describe_store, open_level_sources
from napari_lazy_zarr.core.formats.placement import TransformWarning
from napari_lazy_zarr.core.sources.warp import WarpSource

if TYPE_CHECKING:
    from pathlib import Path

YX = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
SIZE = 96


def _image(
    group: zarr.Group,
    data: np.ndarray[Any, Any],
    *,
    systems: list[dict[str, Any]] | None = None,
    transforms: list[dict[str, Any]] | None = None,
    version: str = "0.6",
    axes: list[dict[str, Any]] = YX,
) -> None:
    """A one-level 0.6 image in `group`: pixel = intrinsic, more `systems` and `transforms`."""
    group.create_array("0", data=data, chunks=(32,) * data.ndim)
    multiscale: dict[str, Any] = {
        "coordinateSystems": [{"name": "intrinsic", "axes": axes}, *(systems or [])],
        "datasets": [
            {
                "path": "0",
                "coordinateTransformations": [
                    {"type": "identity", "input": {"path": "0"}, "output": {"name": "intrinsic"}}
                ],
            }
        ],
    }
    if transforms:
        multiscale["coordinateTransformations"] = transforms
    group.attrs["ome"] = {"version": version, "multiscales": [multiscale]}


def _field(group: zarr.Group, vectors: np.ndarray[Any, Any], spacing: float, kind: str) -> None:
    """A one-level field (component axis first) sampled every `spacing` units."""
    group.create_array("0", data=vectors, chunks=(2, 16, 16))
    axis_type = "displacement" if kind == "displacements" else "coordinate"
    axes = [{"name": "c", "type": axis_type, "discrete": True}, *YX]
    scale = {"type": "scale", "scale": [1.0, spacing, spacing]}
    group.attrs["ome"] = {
        "version": "0.6",
        "multiscales": [
            {
                "coordinateSystems": [{"name": "intrinsic", "axes": axes}],
                "datasets": [
                    {
                        "path": "0",
                        "coordinateTransformations": [
                            {**scale, "input": {"path": "0"}, "output": {"name": "intrinsic"}}
                        ],
                    }
                ],
            }
        ],
    }


def _smooth(size: int = SIZE) -> np.ndarray[Any, Any]:
    yy, xx = np.mgrid[0:size, 0:size]
    return (np.sin(yy / 7.0) * 900 + np.cos(xx / 5.0) * 700 + 2000).astype(np.float32)


def _displacement(size: int = SIZE, spacing: float = 4.0) -> np.ndarray[Any, Any]:
    fy, fx = np.mgrid[0 : size // int(spacing), 0 : size // int(spacing)] * spacing
    return np.stack([3 * np.sin(fx / 20.0), 2.5 * np.cos(fy / 15.0)]).astype(np.float32)


def _sample(field: np.ndarray[Any, Any], points: np.ndarray[Any, Any], spacing: float) -> Any:
    return np.stack(
        [
            ndimage.map_coordinates(c.astype(float), points / spacing, order=1, mode="nearest")
            for c in field
        ]
    )


def _warped(path: Path, system: str) -> tuple[np.ndarray[Any, Any], Any]:
    (spec,) = describe_store(path, coordinate_system=system)
    assert spec.warps is not None
    (source,) = open_level_sources(path, spec)
    warp = WarpSource(source, spec.warps[0])
    grid = [range(len(list(_cells(warp, axis)))) for axis in range(2)]
    rows = [np.concatenate([warp.read_chunk((i, j)) for j in grid[1]], axis=1) for i in grid[0]]
    return np.concatenate(rows, axis=0), spec


def _cells(source: Any, axis: int) -> range:
    return range(int(source.grid[axis].index_to_chunk(source.shape[axis] - 1)) + 1)


def _points(size: int = SIZE) -> np.ndarray[Any, Any]:
    return (
        np.stack(np.meshgrid(np.arange(size), np.arange(size), indexing="ij"))
        .reshape(2, -1)
        .astype(float)
    )


def _expected(image: np.ndarray[Any, Any], sources: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    values = ndimage.map_coordinates(image.astype(float), sources, order=1, mode="nearest")
    inside = np.all((sources >= -0.5) & (sources <= image.shape[0] - 0.5), axis=0)
    return np.where(inside, values, 0).reshape(image.shape)


@pytest.mark.parametrize("kind", ["displacements", "coordinates"])
def test_a_field_to_the_shown_system_is_inverted_by_fixed_point(tmp_path: Path, kind: str) -> None:
    """intrinsic --field--> warped: each shown pixel y shows the image at x with x + d(x) = y."""
    data, field = _smooth(), _displacement()
    stored = field if kind == "displacements" else field + np.mgrid[0:24, 0:24] * 4.0
    root = zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=3)
    warped = {"name": "warped", "axes": YX}
    transform = {
        "type": kind,
        "path": "field",
        "input": {"name": "intrinsic"},
        "output": {"name": "warped"},
    }
    _image(root, data, systems=[warped], transforms=[transform])
    _field(root.create_group("field"), stored.astype(np.float32), 4.0, kind)
    shown, spec = _warped(tmp_path / "f.zarr", "warped")
    y = _points()
    x = y.copy()
    for _ in range(200):
        x = y - _sample(field, x, 4.0)
    assert np.max(np.abs(x + _sample(field, x, 4.0) - y)) < 1e-6  # the oracle's inverse
    # Inside the field (beyond its samples a coordinate field is clamped, not extended).
    within = np.all((y >= 8) & (y <= 84), axis=0).reshape(SIZE, SIZE)
    np.testing.assert_allclose(shown[within], _expected(data, x)[within], atol=0.05)
    assert spec.coordinate_system == "warped"


def test_a_field_from_the_shown_system_is_applied_as_declared(tmp_path: Path) -> None:
    """warped --field--> intrinsic (the registration's 'fixed to moving' form): rendering
    applies it directly, x = y + d(y), with no inverse."""
    data, field = _smooth(), _displacement()
    root = zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=3)
    transform = {
        "type": "displacements",
        "path": "field",
        "input": {"name": "warped"},
        "output": {"name": "intrinsic"},
        "interpolation": "nearest",
    }
    _image(root, data, systems=[{"name": "warped", "axes": YX}], transforms=[transform])
    _field(root.create_group("field"), field, 4.0, "displacements")
    shown, _ = _warped(tmp_path / "f.zarr", "warped")
    y = _points()
    nearest = np.stack(
        [ndimage.map_coordinates(c.astype(float), y / 4.0, order=0, mode="nearest") for c in field]
    )
    np.testing.assert_allclose(shown, _expected(data, y + nearest), atol=0.05)


def test_a_bijection_renders_with_its_declared_inverse(tmp_path: Path) -> None:
    """bijection[displacements, displacements]: its inverse field is what rendering reads
    (a deliberately different one, so using the forward would show)."""
    data, field = _smooth(), _displacement()
    root = zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=3)
    transform = {
        "type": "bijection",
        "forward": {"type": "displacements", "path": "forward"},
        "inverse": {"type": "displacements", "path": "inverse"},
        "input": {"name": "intrinsic"},
        "output": {"name": "warped"},
    }
    _image(root, data, systems=[{"name": "warped", "axes": YX}], transforms=[transform])
    _field(root.create_group("forward"), field, 4.0, "displacements")
    _field(root.create_group("inverse"), -2 * field, 4.0, "displacements")
    shown, _ = _warped(tmp_path / "f.zarr", "warped")
    y = _points()
    np.testing.assert_allclose(shown, _expected(data, y + _sample(-2 * field, y, 4.0)), atol=0.05)


def _scene(tmp_path: Path, transform: dict[str, Any]) -> Path:
    path = tmp_path / "scene.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    _image(root.create_group("a"), np.zeros((8, 8), np.uint8))
    root.attrs["ome"] = {
        "version": "0.6",
        "scene": {
            "coordinateSystems": [{"name": "world", "axes": YX}],
            "coordinateTransformations": [
                {
                    **transform,
                    "input": {"path": "a", "name": "intrinsic"},
                    "output": {"name": "world"},
                }
            ],
        },
    }
    return path


def test_what_cannot_be_shown_is_one_warning_and_the_image_in_its_own_system(
    tmp_path: Path,
) -> None:
    field_in_by_dimension = {
        "type": "byDimension",
        "name": "odd one",
        "transformations": [
            {
                "transformation": {"type": "displacements", "path": "f"},
                "inputAxes": [0, 1],
                "outputAxes": [0, 1],
            }
        ],
    }
    path = _scene(tmp_path, field_in_by_dimension)
    _field(
        zarr.open_group(path, mode="a").create_group("f"), _displacement(), 4.0, "displacements"
    )
    with pytest.warns(TransformWarning) as caught:
        (spec,) = describe_store(path)
    messages = [str(w.message) for w in caught]
    assert any(
        "'odd one'" in m and "a field inside a byDimension cannot be applied" in m
        for m in messages
    )
    assert spec.coordinate_system == "a: intrinsic"  # what is shown instead
    assert spec.affine is None
    assert spec.levels[0].scale == (1.0, 1.0)


def test_a_projection_napari_cannot_show_is_warned(tmp_path: Path) -> None:
    path = tmp_path / "p.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    zyx = [{"name": "z", "type": "space"}, *YX]
    project = {
        "type": "projectAxis",
        "createdOutputs": [0],
        "input": {"name": "intrinsic"},
        "output": {"name": "volume"},
    }
    _image(
        root,
        np.zeros((8, 8), np.uint8),
        systems=[{"name": "volume", "axes": zyx}],
        transforms=[project],
    )
    with pytest.warns(
        TransformWarning,
        match=r"maps 2 axes to 3 .*shown in its own coordinate system 'intrinsic' instead of "
        r"'volume'",
    ):
        (spec,) = describe_store(path, coordinate_system="volume")
    assert spec.coordinate_system == "intrinsic"


def test_a_projection_dropping_the_channel_axis_places_each_channel(tmp_path: Path) -> None:
    """projectAxis CYX -> YX: every channel is a layer of its own, shown in the plane."""
    path = tmp_path / "c.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    cyx = [{"name": "c", "type": "channel"}, *YX]
    to_plane = {
        "type": "sequence",
        "transformations": [
            {"type": "projectAxis", "droppedInputs": [0]},
            {"type": "scale", "scale": [2.0, 3.0]},
        ],
        "input": {"name": "intrinsic"},
        "output": {"name": "plane"},
    }
    data = np.arange(2 * 8 * 8, dtype=np.uint8).reshape(2, 8, 8)
    _image(root, data, systems=[{"name": "plane", "axes": YX}], transforms=[to_plane], axes=cyx)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (spec,) = describe_store(path, coordinate_system="plane")
    assert spec.coordinate_system == "plane"
    assert spec.channel_axis == 0
    assert spec.levels[0].scale == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("number", ["1e400", "10" + "0" * 400])
def test_overflowing_numbers_name_the_file(tmp_path: Path, number: str) -> None:
    path = _scene(tmp_path, {"type": "scale", "scale": [1.0, 1.0]})
    document = json.loads((path / "zarr.json").read_text())
    text = json.dumps(document).replace('"scale": [1.0, 1.0]', f'"scale": [{number}, 1.0]')
    (path / "zarr.json").write_text(text)
    with pytest.raises(
        MetadataError, match=rf"{path.name}.*(does not fit a double|must be finite)"
    ):
        describe_store(path)


def test_an_overflowing_0_5_dev_sequence_names_the_file(tmp_path: Path) -> None:
    """Issue 50: a scale of 10**400 in a 0.5-dev ``sequence`` (SpatialData's drafts)."""
    path = tmp_path / "dev.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("0", shape=(4, 4), dtype="u1")
    sequence = {
        "type": "sequence",
        "output": {"name": "global"},
        "transformations": [{"type": "scale", "scale": [12345.0, 1.0]}],
    }
    dataset = {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0]}]}
    root.attrs["ome"] = {
        "version": "0.5-dev",
        "multiscales": [
            {"axes": YX, "datasets": [dataset], "coordinateTransformations": [sequence]}
        ],
    }
    text = (path / "zarr.json").read_text()
    assert text.count("12345.0") == 1
    (path / "zarr.json").write_text(text.replace("12345.0", "1" + "0" * 400))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetadataWarning)
        with pytest.raises(
            MetadataError, match=rf"{path.name}: invalid OME-Zarr 0\.5 image metadata"
        ):
            describe_store(path)


@pytest.mark.parametrize("draft", ["0.6.dev4", "0.6rc0"])
def test_0_6_drafts_are_read_as_0_6_with_a_notice(tmp_path: Path, draft: str) -> None:
    root = zarr.open_group(tmp_path / "d.zarr", mode="w", zarr_format=3)
    _image(root, np.arange(64, dtype=np.uint8).reshape(8, 8), version=draft)
    with pytest.warns(
        MetadataWarning, match=rf"'{draft}' is a development version: read as OME-Zarr 0\.6"
    ):
        (spec,) = describe_store(tmp_path / "d.zarr")
    assert spec.version == "0.6"


def test_0_6_in_zarr_v2_is_refused_by_name(tmp_path: Path) -> None:
    root = zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    root.create_array("0", shape=(4, 4), dtype="u1")
    root.attrs["multiscales"] = [{"version": "0.6", "axes": YX, "datasets": [{"path": "0"}]}]
    with pytest.raises(MetadataError, match=r"OME-Zarr 0\.6 metadata in a Zarr v2 group"):
        describe_store(tmp_path / "v2.zarr")


@pytest.mark.parametrize(
    ("axes", "problem"),
    [(["x", "y"], "must be one of yx, zyx"), (None, "axes: Field required")],
)
def test_0_3_axes_follow_ome_zarr_py(tmp_path: Path, axes: Any, problem: str) -> None:
    root = zarr.open_group(tmp_path / "o.zarr", mode="w", zarr_format=2)
    root.create_array("0", shape=(4, 4), dtype="u1")
    multiscale: dict[str, Any] = {"version": "0.3", "datasets": [{"path": "0"}]}
    if axes is not None:
        multiscale["axes"] = axes
    root.attrs["multiscales"] = [multiscale]
    with pytest.raises(MetadataError, match=problem):
        describe_store(tmp_path / "o.zarr")
