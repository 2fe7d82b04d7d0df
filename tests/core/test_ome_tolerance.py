"""What a lab's stores carry beyond the spec: invalid optional metadata, OME development
versions, SpatialData roots (issue 23).

Every store is written at test time by the third-party writer (ome-zarr-py's
``write_image``/``write_labels``, SpatialData's ``SpatialData.write``), then, for
the tolerance cases, its optional metadata is broken the way writers break it.
Pixels are compared with the writer's arrays.
"""

from __future__ import annotations

import json
import logging
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr.core import ChunkCache, InlineExecutor
from napari_lazy_zarr.core.errors import MetadataError, MetadataWarning, UnsupportedDataError
from napari_lazy_zarr.core.formats.ome import ImageSpec, describe_store, open_level_sources
from napari_lazy_zarr.core.reading.array import ChunkedArray

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

_COLORS = [
    {"label-value": 1, "rgba": [255, 0, 0, 255]},
    {"label-value": 2, "rgba": [0, 0, 255, 255]},
]


def _read(source: ChunkSource) -> np.ndarray[Any, Any]:
    with ChunkCache(64 << 20, executor=InlineExecutor()) as cache:
        return np.asarray(ChunkedArray(source, cache)[...].result())


def _write(path: Path, version: str, *, labels: bool = False) -> np.ndarray[Any, Any]:
    """A (2, 64, 48) cyx uint16 image by ome-zarr-py, 2 omero channels (and a label image)."""
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image, write_labels
    from ome_zarr_models.common.omero import Omero

    data = np.random.default_rng(1).integers(0, 4000, (2, 64, 48), dtype=np.uint16)
    group = zarr.open_group(str(path), mode="w", zarr_format=2 if version == "0.4" else 3)
    fmt = FormatV04() if version == "0.4" else FormatV05()
    window = {"min": 0, "max": 65535, "start": 10, "end": 3000}
    omero = {
        "channels": [
            {"label": "DAPI", "color": "0000FF", "window": window},
            {"label": "GFP", "color": "00FF00", "window": window},
        ]
    }
    write_image(
        data,
        group,
        axes="cyx",
        fmt=fmt,
        scale_factors=(2,),
        storage_options={"chunks": (1, 32, 32)},
        omero=Omero.model_validate(omero),
    )
    if labels:
        write_labels(
            (np.arange(64 * 48).reshape(64, 48) % 3).astype(np.uint8),
            group,
            name="cells",
            axes="yx",
            fmt=fmt,
            scale_factors=(2,),
            label_metadata={
                "colors": _COLORS,
                "properties": [{"label-value": 1, "class": "nucleus"}],
            },
        )
    return data


def _edit(path: Path, version: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply `edit` to the OME attributes of the group at `path` (its .zattrs or zarr.json)."""
    if version == "0.4":
        file = path / ".zattrs"
        document = json.loads(file.read_text())
        edit(document)
    else:
        file = path / "zarr.json"
        document = json.loads(file.read_text())
        edit(document["attributes"]["ome"])
    file.write_text(json.dumps(document))


def _channel(index: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(ome: dict[str, Any]) -> None:
        channel = ome["omero"]["channels"][index]
        for key, value in changes.items():
            if value is _DROP:
                del channel[key]
            else:
                channel[key] = value

    return edit


_DROP = object()


# -- invalid optional metadata ------------------------------------------------------

# (edit, the key and cause the warning names, what falls back)
_OMERO_EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    (
        "window without min/max",
        _channel(0, window={"start": 5, "end": 900}),
        "",  # accepted silently: writers routinely omit the data range
        "kept",
    ),
    (
        "window without start",
        _channel(1, window={"min": 0, "max": 9, "end": 900}),
        r"omero\.channels\.1\.window\.start: Field required",
        "limits",
    ),
    (
        "colour 'red'",
        _channel(0, color="red"),
        r"omero\.channels\.0\.color: must be RRGGBB",
        "color",
    ),
    (
        "colour 255",
        _channel(0, color=255),
        r"omero\.channels\.0\.color: must be a string",
        "color",
    ),
    (
        "colour missing",
        _channel(0, color=_DROP),
        r"omero\.channels\.0\.color: Field required",
        "color",
    ),
    (
        "window bounds strings",
        _channel(1, window={"start": "0", "end": "9"}),
        r"omero\.channels\.1\.window\.start: must be a number, got '0'",
        "limits",
    ),
    (
        "window a list",
        _channel(1, window=[0, 9]),
        r"omero\.channels\.1\.window: must be an object",
        "limits",
    ),
    (
        "channels missing",
        lambda ome: ome["omero"].pop("channels"),
        r"omero\.channels: Field required",
        "all",
    ),
    (
        "channels a string",
        lambda ome: ome["omero"].update(channels="x"),
        r"omero\.channels: must be a list",
        "all",
    ),
    (
        "a channel that is not an object",
        lambda ome: ome["omero"]["channels"].__setitem__(1, 7),
        r"omero\.channels\.1: must be an object",
        "second",
    ),
    ("omero a string", lambda ome: ome.update(omero="x"), r"omero: must be an object", "all"),
    (
        "one channel for two",
        lambda ome: ome["omero"]["channels"].pop(),
        r"omero\.channels: lists 1 channels, the image has 2",
        "all",
    ),
]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize(
    ("edit", "warning", "fallback"),
    [pytest.param(e, w, f, id=name) for name, e, w, f in _OMERO_EDITS],
)
def test_invalid_omero_warns_and_opens_with_defaults(
    tmp_path: Path,
    version: str,
    edit: Callable[[dict[str, Any]], None],
    warning: str,
    fallback: str,
) -> None:
    path = tmp_path / "image.ome.zarr"
    data = _write(path, version)
    _edit(path, version, edit)
    if warning:
        with pytest.warns(
            MetadataWarning, match=rf"image\.ome\.zarr: invalid optional omero .*{warning}"
        ):
            (image,) = describe_store(path)
    else:
        (image,) = describe_store(path)
    sources = open_level_sources(path, image)
    np.testing.assert_array_equal(_read(sources[0]), data)  # the pixels are not in question
    if fallback == "all":  # the reader's defaults, as without omero
        assert (image.channel_names, image.channel_colors, image.contrast_limits) == (None,) * 3
        return
    # ome-zarr-py names the multiscales "image"
    second = "image [1]" if fallback == "second" else "image: GFP"
    assert image.channel_names == ("image: DAPI", second)
    expected_colors = {"color": ("#FFFFFF", "#00FF00"), "second": ("#0000FF", "#FFFFFF")}
    assert image.channel_colors == expected_colors.get(fallback, ("#0000FF", "#00FF00"))
    if fallback in ("limits", "second"):
        assert image.contrast_limits is None  # sampled from the data by the reader
    elif fallback == "kept":
        assert image.contrast_limits == ((5.0, 900.0), (10.0, 3000.0))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_required_metadata_stays_strict_beside_invalid_omero(tmp_path: Path, version: str) -> None:
    path = tmp_path / "image.ome.zarr"
    _write(path, version)

    def edit(ome: dict[str, Any]) -> None:
        ome["omero"] = "x"
        del ome["multiscales"][0]["datasets"][0]["coordinateTransformations"]

    _edit(path, version, edit)
    with pytest.raises(MetadataError, match=r"datasets\.0\.coordinateTransformations: Field"):
        describe_store(path)


def _label_group(path: Path, version: str) -> Path:
    return path / "labels" / "cells"


def _image_label(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda ome: edit(ome["image-label"])


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize(
    ("colors", "warning", "kept"),
    [
        pytest.param(
            [*_COLORS, {"label-value": 3, "rgba": "red"}],
            r"colors\.2\.rgba: must be 4 integers 0-255",
            ((1, (255, 0, 0, 255)), (2, (0, 0, 255, 255))),
            id="a bad rgba",
        ),
        pytest.param(
            [{"rgba": [1, 2, 3, 4]}, *_COLORS],
            r"colors\.0\.label-value: Field required",
            ((1, (255, 0, 0, 255)), (2, (0, 0, 255, 255))),
            id="no label-value",
        ),
        pytest.param(
            [*_COLORS, {"label-value": 1, "rgba": [0, 0, 0, 0]}],
            r"colors\.2: label value 1 listed again",
            ((1, (255, 0, 0, 255)), (2, (0, 0, 255, 255))),
            id="a value twice",
        ),
        pytest.param("red", r"colors: must be a list", None, id="not a list"),
    ],
)
def test_invalid_label_colours_keep_the_valid_entries(
    tmp_path: Path, version: str, colors: Any, warning: str, kept: Any
) -> None:
    path = tmp_path / "image.ome.zarr"
    _write(path, version, labels=True)
    _edit(_label_group(path, version), version, _image_label(lambda d: d.update(colors=colors)))
    with pytest.warns(
        MetadataWarning, match=rf"labels/cells: invalid optional image-label colors .*{warning}"
    ):
        specs = describe_store(path)
    assert [s.kind for s in specs] == ["image", "labels"]
    assert specs[1].label_colors == kept


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("properties", [[{"class": "no label value"}], "x", [5]])
def test_invalid_label_properties_never_refuse(
    tmp_path: Path, version: str, properties: Any
) -> None:
    path = tmp_path / "image.ome.zarr"
    _write(path, version, labels=True)
    _edit(
        _label_group(path, version),
        version,
        _image_label(lambda d: d.update(properties=properties)),
    )
    with pytest.warns(
        MetadataWarning, match=r"labels/cells: invalid optional image-label properties metadata"
    ):
        specs = describe_store(path)  # the label image opens, without features
    assert specs[1].label_properties is None
    assert specs[1].label_colors == ((1, (255, 0, 0, 255)), (2, (0, 0, 255, 255)))


# -- OME development versions ---------------------------------------------------------


def _set_version(version: str, declared: str) -> Callable[[dict[str, Any]], None]:
    def edit(ome: dict[str, Any]) -> None:
        if version == "0.4":
            ome["multiscales"][0]["version"] = declared
        else:
            ome["version"] = declared

    return edit


@pytest.mark.parametrize(
    ("version", "declared"),
    [("0.5", "0.5-dev"), ("0.5", "0.5-dev-spatialdata"), ("0.4", "0.4-dev-x"), ("0.4", "0.4-dev")],
)
def test_a_dev_version_reads_as_its_base_with_a_notice(
    tmp_path: Path, version: str, declared: str
) -> None:
    path = tmp_path / "image.ome.zarr"
    data = _write(path, version, labels=True)
    _edit(path, version, _set_version(version, declared))
    with pytest.warns(
        MetadataWarning,
        match=rf"version '{declared}' is a development version: read as OME-Zarr {version}",
    ):
        specs = describe_store(path)
    assert [(s.kind, s.version) for s in specs] == [("image", version), ("labels", version)]
    np.testing.assert_array_equal(_read(open_level_sources(path, specs[0])[0]), data)


# 0.6 and its drafts are read since OME-Zarr 0.6 support (tests/core/test_ome_versions.py).
@pytest.mark.parametrize("declared", ["0.5dev", "0.7", "0.9.dev1", "1.0"])
def test_other_versions_stay_refused(tmp_path: Path, declared: str) -> None:
    path = tmp_path / "image.ome.zarr"
    _write(path, "0.5")
    _edit(path, "0.5", _set_version("0.5", declared))
    with pytest.raises(
        UnsupportedDataError, match=rf"OME-Zarr version {declared} is not supported"
    ):
        describe_store(path)


# -- SpatialData ------------------------------------------------------------------------


def _spatialdata(path: Path, *, extras: bool = False) -> Any:
    """A SpatialData 0.8 store: a 2-channel image with a scale and translation to "global",
    a 2-level image, a labels element (and, with `extras`, points and shapes)."""
    import spatialdata as sd
    from spatialdata.models import Image2DModel, Labels2DModel
    from spatialdata.transformations import Scale, Sequence, Translation

    rng = np.random.default_rng(3)
    placed = Sequence(
        [Scale([0.5, 0.25], axes=("y", "x")), Translation([3.0, 4.0], axes=("y", "x"))]
    )
    images = {
        "raw": Image2DModel.parse(
            rng.integers(0, 999, (2, 60, 80), dtype=np.uint16),
            dims=("c", "y", "x"),
            c_coords=["DAPI", "GFP"],
            transformations={"global": placed},
        ),
        "pyramid": Image2DModel.parse(
            rng.integers(0, 999, (1, 64, 64), dtype=np.uint16),
            dims=("c", "y", "x"),
            scale_factors=[2],
        ),
    }
    labels = {
        "cells": Labels2DModel.parse(rng.integers(0, 5, (60, 80), dtype=np.uint8), dims=("y", "x"))
    }
    elements: dict[str, Any] = {"images": images, "labels": labels}
    if extras:
        import geopandas as gpd
        import pandas as pd
        from shapely.geometry import Point
        from spatialdata.models import PointsModel, ShapesModel

        elements["points"] = {
            "spots": PointsModel.parse(pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0]}))
        }
        circles = gpd.GeoDataFrame({"geometry": [Point(1, 1)], "radius": [2.0]})
        elements["shapes"] = {"cells_outline": ShapesModel.parse(circles)}
    data = sd.SpatialData(**elements)
    with warnings.catch_warnings():
        # pandas 3.1 deprecates what dask's dataframe writer calls (points): not ours.
        warnings.filterwarnings("ignore", "The inplace keyword", category=DeprecationWarning)
        data.write(str(path))
    return data


def _element(data: Any, kind: str, name: str) -> np.ndarray[Any, Any]:
    """The element's full-resolution pixels, as SpatialData reads them (DataTree or DataArray)."""
    element = getattr(data, kind)[name]
    if hasattr(element, "children"):  # a multiscale DataTree: its finest scale
        element = element["scale0"].ds["image"]
    return np.asarray(element.values)


def _specs_of_root(path: Path | str) -> tuple[ImageSpec, ...]:
    with pytest.warns(MetadataWarning) as caught:
        specs = describe_store(path)
    messages = [str(w.message) for w in caught]
    # One development-version notice per element; SpatialData writes channels without
    # colour or window (the reader's defaults).
    assert sum("'0.5-dev-spatialdata' is a development version" in m for m in messages) == 3
    assert all("development version" in m or "invalid optional omero" in m for m in messages)
    return specs


def test_a_spatialdata_root_lists_its_images_and_labels(tmp_path: Path) -> None:
    path = tmp_path / "blobs.zarr"
    written = _spatialdata(path)
    specs = _specs_of_root(path)
    assert [(s.name, s.kind) for s in specs] == [
        ("pyramid", "image"),
        ("raw", "image"),
        ("cells", "labels"),
    ]
    pyramid, raw, cells = specs
    assert raw.channel_names == ("raw: DAPI", "raw: GFP")  # channel layers by element name
    assert raw.levels[0].scale == (1.0, 0.5, 0.25)  # the "global" coordinate system
    assert raw.levels[0].translate == (0.0, 3.0, 4.0)
    assert len(pyramid.levels) == 2
    for spec, kind in ((raw, "images"), (pyramid, "images"), (cells, "labels")):
        pixels = _read(open_level_sources(path, spec)[0])
        np.testing.assert_array_equal(pixels, _element(written, kind, spec.name))


def test_a_spatialdata_element_opens_by_its_path(tmp_path: Path) -> None:
    path = tmp_path / "blobs.zarr"
    written = _spatialdata(path)
    with pytest.warns(MetadataWarning) as caught:
        (image,) = describe_store(path / "images" / "raw")
    assert "images/raw: OME-Zarr version '0.5-dev-spatialdata'" in str(caught[0].message)
    assert (image.name, image.levels[0].translate) == ("raw", (0.0, 3.0, 4.0))
    pixels = _read(open_level_sources(path / "images" / "raw", image)[0])
    np.testing.assert_array_equal(pixels, _element(written, "images", "raw"))


def test_spatialdata_points_and_shapes_are_skipped_with_one_notice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "blobs.zarr"
    _spatialdata(path, extras=True)
    with caplog.at_level(logging.WARNING, logger="napari_lazy_zarr.core.formats.spatialdata"):
        specs = _specs_of_root(path)
    assert [s.name for s in specs] == ["pyramid", "raw", "cells"]
    (notice,) = [r.getMessage() for r in caplog.records if "not images" in r.getMessage()]
    assert notice.endswith("not shown: points: spots; shapes: cells_outline"), notice


def test_dev_transforms_of_the_global_coordinate_system_are_composed() -> None:
    from napari_lazy_zarr.core.formats.ome_dev import as_base_version

    transforms = [
        {"type": "scale", "scale": [2.0, 2.0], "output": {"name": "aligned"}},
        {
            "type": "sequence",
            "output": {"name": "global"},
            "transformations": [
                {"type": "identity"},
                {"type": "translation", "translation": [1.0, 1.0]},
                {"type": "scale", "scale": [0.5, 0.25]},  # after the translation: scales it
            ],
        },
    ]
    document = {"version": "0.5-dev", "multiscales": [{"coordinateTransformations": transforms}]}
    normal = as_base_version(document, "0.5-dev", "0.5")
    assert normal["version"] == "0.5"
    assert normal["multiscales"][0]["coordinateTransformations"] == [
        {"type": "scale", "scale": [0.5, 0.25]},
        {"type": "translation", "translation": [0.5, 0.25]},
    ]
    assert document["version"] == "0.5-dev"  # the document itself is left as it is


def test_a_dev_transform_it_cannot_compose_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "image.ome.zarr"
    _write(path, "0.5")

    def edit(ome: dict[str, Any]) -> None:
        ome["version"] = "0.5-dev"
        ome["multiscales"][0]["coordinateTransformations"] = [
            {"type": "rotation", "rotation": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}
        ]

    _edit(path, "0.5", edit)
    with (
        pytest.warns(MetadataWarning, match="development version"),
        pytest.raises(MetadataError, match=r"type: must be 'identity', 'scale' or 'translation'"),
    ):
        describe_store(path)


def test_a_spatialdata_root_over_http_lists_its_elements(tmp_path: Path) -> None:
    """Over plain HTTP a group cannot be listed: SpatialData's consolidated metadata lists it."""
    from tests.remote.server import FaultyServer

    written = _spatialdata(tmp_path / "blobs.zarr")
    with FaultyServer(tmp_path) as server:
        url = f"{server.url}/blobs.zarr"
        specs = _specs_of_root(url)
        assert [(s.name, s.kind) for s in specs] == [
            ("pyramid", "image"),
            ("raw", "image"),
            ("cells", "labels"),
        ]
        for spec, kind in zip(specs, ("images", "images", "labels"), strict=True):
            pixels = _read(open_level_sources(url, spec)[0])
            np.testing.assert_array_equal(pixels, _element(written, kind, spec.name))
