"""`describe_store` and `looks_like_zarr` on real stores written by zarr-python.

OME metadata is written by hand, per the NGFF 0.4 and 0.5 specs, so the
validator (`core.ngff`) is not also the author of what it checks.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Literal

import pytest
import zarr
import zarr.storage

from napari_lazy_zarr.core import (
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.errors import MetadataWarning
from napari_lazy_zarr.core.formats.ome import ImageSpec, LevelSpec, describe_store, looks_like_zarr

if TYPE_CHECKING:
    from pathlib import Path

ZarrFormat = Literal[2, 3]

_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})
_AXES = [
    {"name": "c", "type": "channel"},
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]
_OMERO = {
    "channels": [
        {
            "label": "DAPI",
            "color": "0000ff",
            "window": {"min": 0, "max": 65535, "start": 10, "end": 500},
            "active": True,
        },
        {
            "label": "GFP",
            "color": "00FF00",
            "window": {"min": 0, "max": 65535, "start": 0, "end": 1000},
            "active": False,
        },
    ]
}


def _datasets() -> list[dict[str, Any]]:
    """Level i: pixel size 0.5 * 2**i, offset by half a pixel of its own (as downsampling does)."""
    return [
        {
            "path": str(i),
            "coordinateTransformations": [
                {"type": "scale", "scale": [1.0, 0.5 * 2**i, 0.5 * 2**i]},
                {
                    "type": "translation",
                    "translation": [0.0, 0.25 * (2**i - 1), 0.25 * (2**i - 1)],
                },
            ],
        }
        for i in range(3)
    ]


def _multiscale(name: str | None, datasets: list[dict[str, Any]]) -> dict[str, Any]:
    multiscale: dict[str, Any] = {
        "axes": _AXES,
        "datasets": datasets,
        # Applied after each dataset's transforms: doubles every scale, then shifts y, x.
        "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 2.0, 2.0]},
            {"type": "translation", "translation": [0.0, 100.0, -50.0]},
        ],
    }
    if name is not None:
        multiscale["name"] = name
    return multiscale


def _format(version: str) -> ZarrFormat:
    return 3 if version == "0.5" else 2


def _attributes(version: str, ome: dict[str, Any]) -> dict[str, Any]:
    """OME metadata placed as the version requires: under "ome" (0.5) or at the top (0.4)."""
    if version == "0.5":
        return {"ome": {"version": "0.5", **ome}}
    if "multiscales" in ome:
        ome = {**ome, "multiscales": [{"version": "0.4", **m} for m in ome["multiscales"]]}
    return ome


def _write_pyramid(group: zarr.Group, version: str, shape: tuple[int, ...], dtype: str) -> None:
    for i in range(3):
        level_shape = (*shape[:-2], shape[-2] >> i, shape[-1] >> i)
        array = group.create_array(
            str(i),
            shape=level_shape,
            chunks=(1, 16, 16),
            dtype=dtype,
            dimension_names=["c", "y", "x"] if version == "0.5" else None,
        )
        array[...] = 7


def write_ome(
    path: Path,
    version: str,
    *,
    name: str | None = "cells-image",
    with_labels: bool = True,
) -> Path:
    """An OME-Zarr image: 3 levels of (2, 64, 64), omero channels, optionally a label image."""
    ome = {"multiscales": [_multiscale(name, _datasets())], "omero": _OMERO}
    root = zarr.create_group(
        str(path), zarr_format=_format(version), attributes=_attributes(version, ome)
    )
    _write_pyramid(root, version, (2, 64, 64), "u2")
    if with_labels:
        labels = root.create_group(
            "labels", attributes=_attributes(version, {"labels": ["nuclei"]})
        )
        label = labels.create_group(
            "nuclei",
            attributes=_attributes(
                version,
                {
                    "image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]},
                    "multiscales": [_multiscale("nuclei-seg", _datasets())],
                },
            ),
        )
        _write_pyramid(label, version, (1, 64, 64), "u4")
    return path


def _rewrite_json(path: Path, edit: Any) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def _edit_ome(store: Path, version: str, edit: Any, group: str = "") -> None:
    """Apply `edit` to a group's OME attributes (the "ome" object in 0.5, .zattrs in 0.4)."""
    if version == "0.5":
        _rewrite_json(store / group / "zarr.json", lambda d: edit(d["attributes"]["ome"]))
    else:
        _rewrite_json(store / group / ".zattrs", edit)


def _chunk_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.name not in _METADATA_NAMES]


# -- single arrays -----------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_single_array(tmp_path: Path, zarr_format: ZarrFormat) -> None:
    path = tmp_path / "plain.zarr"
    zarr.create_array(
        str(path), shape=(5, 30, 40), chunks=(1, 8, 8), dtype="f4", zarr_format=zarr_format
    )
    assert describe_store(path) == (
        ImageSpec(
            name="plain",  # the layer napari shows is named without ".zarr"
            kind="image",
            levels=(LevelSpec("", (5, 30, 40), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)),),
            axis_names=("dim_0", "dim_1", "dim_2"),
            axis_units=(None, None, None),
            channel_axis=None,
            channel_names=None,
            channel_colors=None,
            contrast_limits=None,
            channel_visible=None,
            version=None,
        ),
    )


def test_v3_dimension_names_name_the_axes(tmp_path: Path) -> None:
    path = tmp_path / "named.zarr"
    zarr.create_array(str(path), shape=(3, 4), dtype="u1", dimension_names=["y", None])
    (image,) = describe_store(str(path))
    assert image.axis_names == ("y", "dim_1")


def test_sharded_v3_array(tmp_path: Path) -> None:
    path = tmp_path / "sharded.zarr"
    array = zarr.create_array(
        str(path), shape=(100, 120), chunks=(10, 10), shards=(50, 60), dtype="u2"
    )
    array[...] = 1
    (image,) = describe_store(path)
    assert image.levels == (LevelSpec("", (100, 120), (1.0, 1.0), (0.0, 0.0)),)


def test_zipped_store(tmp_path: Path) -> None:
    path = tmp_path / "zipped.zarr.zip"
    with zarr.storage.ZipStore(path, mode="w") as store:
        zarr.create_array(store, shape=(6, 7), chunks=(3, 3), dtype="u1")[...] = 1
    (image,) = describe_store(path)
    assert (image.name, image.levels[0].shape) == ("zipped", (6, 7))


def test_a_zip_that_is_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "fake.zarr.zip"
    path.write_bytes(b"not a zip")
    with pytest.raises(NotAZarrStoreError, match=r"fake\.zarr\.zip: not a zip archive"):
        describe_store(path)


# -- plain groups -------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_plain_group_one_image_per_array_in_name_order(
    tmp_path: Path, zarr_format: ZarrFormat
) -> None:
    path = tmp_path / "group.zarr"
    group = zarr.create_group(str(path), zarr_format=zarr_format)
    group.create_array("raw", shape=(20, 30), dtype="u2")
    group.create_array("mask", shape=(20, 30), dtype="bool")
    group.create_group("empty")  # a plain subgroup: not an image, not described
    images = describe_store(path)
    assert [(i.name, i.levels[0].path, i.levels[0].shape) for i in images] == [
        ("mask", "mask", (20, 30)),
        ("raw", "raw", (20, 30)),
    ]
    assert all(len(i.levels) == 1 and i.version is None for i in images)


def test_plain_group_describes_ome_subgroups(tmp_path: Path) -> None:
    path = tmp_path / "mixed.zarr"
    group = zarr.create_group(str(path))
    group.create_array("overview", shape=(8, 8), dtype="u1")
    write_ome(path / "tile", "0.5", name=None, with_labels=False)
    images = describe_store(path)
    assert [(i.name, len(i.levels), i.version) for i in images] == [
        ("overview", 1, None),
        ("tile", 3, "0.5"),  # no multiscales name: the group's path
    ]
    assert [level.path for level in images[1].levels] == ["tile/0", "tile/1", "tile/2"]


def test_plain_group_skips_arrays_that_are_not_images(tmp_path: Path) -> None:
    path = tmp_path / "table.zarr"
    group = zarr.create_group(str(path))
    group.create_array("names", shape=(3,), dtype=str)
    group.create_array("image", shape=(4, 4), dtype="u1")
    # The strings beside the image: one note naming them, the image shown (issue 50).
    with pytest.warns(
        MetadataWarning, match=r"table\.zarr/names: dtype .* strings are not pixels"
    ):
        assert [i.name for i in describe_store(path)] == ["image"]
    del group["image"]
    with pytest.raises(UnsupportedDataError, match=r"table\.zarr/names: dtype .* cannot be"):
        describe_store(path)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_group_without_arrays(tmp_path: Path, zarr_format: ZarrFormat) -> None:
    path = tmp_path / "hollow.zarr"
    group = zarr.create_group(str(path), zarr_format=zarr_format)
    group.create_group("sub").create_group("empty")
    with pytest.raises(NotAZarrStoreError, match=r"hollow\.zarr: zarr group with no arrays"):
        describe_store(path)
    # An array below plain subgroups is found (dask's to_zarr(component="sub/deep")).
    group["sub"].create_array("deep", shape=(2, 2), dtype="u1")
    assert [(i.name, i.levels[0].path) for i in describe_store(path)] == [("sub/deep", "sub/deep")]


# -- OME-Zarr -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_pyramid(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version, with_labels=False)
    (image,) = describe_store(path)
    # Dataset scale 0.5 * 2**i, times the multiscale's 2: 1, 2, 4 on y and x.
    # Translation 0.25 * (2**i - 1), times 2, plus (100, -50).
    assert image == ImageSpec(
        name="cells-image",
        kind="image",
        levels=(
            LevelSpec("0", (2, 64, 64), (1.0, 1.0, 1.0), (0.0, 100.0, -50.0)),
            LevelSpec("1", (2, 32, 32), (1.0, 2.0, 2.0), (0.0, 100.5, -49.5)),
            LevelSpec("2", (2, 16, 16), (1.0, 4.0, 4.0), (0.0, 101.5, -48.5)),
        ),
        axis_names=("c", "y", "x"),
        axis_units=(None, "micrometer", "micrometer"),
        channel_axis=0,
        # As napari-ome-zarr names them: the image's name, then the channel's label.
        channel_names=("cells-image: DAPI", "cells-image: GFP"),
        channel_colors=("#0000FF", "#00FF00"),
        contrast_limits=((10.0, 500.0), (0.0, 1000.0)),
        channel_visible=(True, False),
        version=version,
    )


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_labels(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version)
    image, label = describe_store(path)
    assert (image.kind, label.kind) == ("image", "labels")
    assert label.name == "nuclei"  # its entry in the labels list
    assert [level.path for level in label.levels] == [
        "labels/nuclei/0",
        "labels/nuclei/1",
        "labels/nuclei/2",
    ]
    assert [level.scale for level in label.levels] == [level.scale for level in image.levels]
    assert label.levels[0].shape == (1, 64, 64)
    assert label.channel_names is None  # omero is for images, not label images


def test_a_labels_group_opened_directly_gives_label_images(tmp_path: Path) -> None:
    path = write_ome(tmp_path / "image.zarr", "0.5")
    (label,) = describe_store(path / "labels")
    assert (label.kind, label.name, label.levels[0].path) == ("labels", "nuclei-seg", "nuclei/0")


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_names_and_defaults(tmp_path: Path, version: str) -> None:
    """No name: the store's basename. No omero: no channel settings. No transforms: identity."""
    ome = {
        "multiscales": [
            {
                "axes": _AXES[1:],
                "datasets": [
                    {
                        "path": "0",
                        "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}],
                    }
                ],
            }
        ]
    }
    group = zarr.create_group(
        str(tmp_path / "bare.zarr"),
        zarr_format=_format(version),
        attributes=_attributes(version, ome),
    )
    group.create_array(
        "0", shape=(9, 9), dtype="u1", dimension_names=["y", "x"] if version == "0.5" else None
    )
    (image,) = describe_store(tmp_path / "bare.zarr")
    assert image.name == "bare"
    assert image.levels == (LevelSpec("0", (9, 9), (1.0, 1.0), (0.0, 0.0)),)
    assert (image.channel_axis, image.channel_names, image.contrast_limits) == (None, None, None)


def test_channels_of_an_unnamed_image_are_named_by_their_labels(tmp_path: Path) -> None:
    """napari-ome-zarr's rule: "<image>: <label>" only when the multiscales has a name."""
    path = write_ome(tmp_path / "image.zarr", "0.5", with_labels=False)
    _edit_ome(path, "0.5", lambda ome: ome["multiscales"][0].pop("name"))
    (image,) = describe_store(path)
    assert (image.name, image.channel_names) == ("image", ("DAPI", "GFP"))


def test_omero_without_label_or_active(tmp_path: Path) -> None:
    channels = [
        {"color": "#ff00ff", "window": {"min": 0, "max": 9, "start": 1, "end": 2}},
        {"color": "FFFFFF", "window": {"min": 0, "max": 9, "start": 3, "end": 4}},
    ]
    path = write_ome(tmp_path / "image.zarr", "0.5", with_labels=False)
    _edit_ome(path, "0.5", lambda ome: ome.update(omero={"channels": channels}))
    (image,) = describe_store(path)
    assert image.channel_names == ("cells-image [0]", "cells-image [1]")
    assert image.channel_colors == ("#FF00FF", "#FFFFFF")
    assert image.channel_visible == (True, True)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_omero_window_without_min_and_max(tmp_path: Path, version: str) -> None:
    """The data's range is optional rendering metadata: start and end still set the limits."""
    path = write_ome(tmp_path / "image.zarr", version, with_labels=False)

    def drop_range(ome: dict[str, Any]) -> None:
        for channel in ome["omero"]["channels"]:
            del channel["window"]["min"]
            channel["window"]["max"] = None

    _edit_ome(path, version, drop_range)
    (image,) = describe_store(path)
    assert image.contrast_limits == ((10.0, 500.0), (0.0, 1000.0))
    assert image.channel_names == ("cells-image: DAPI", "cells-image: GFP")


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_no_chunk_is_read(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version)
    expected = describe_store(path)
    chunks = _chunk_files(path)
    assert chunks
    for chunk in chunks[::2]:
        chunk.write_bytes(b"garbage that no codec decodes")
    for chunk in chunks[1::2]:
        chunk.unlink()
    assert describe_store(path) == expected


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_urls_go_to_zarr_python(tmp_path: Path, version: str) -> None:
    """A file:// URL takes the remote path (fsspec, no local checks) without a network."""
    path = write_ome(tmp_path / "image.zarr", version)
    assert describe_store(path.as_uri()) == describe_store(path)
    group = zarr.create_group(str(tmp_path / "group.zarr"))
    group.create_array("b", shape=(2, 2), dtype="u1")
    group.create_array("a", shape=(3, 3), dtype="u1")
    assert [i.name for i in describe_store((tmp_path / "group.zarr").as_uri() + "/")] == ["a", "b"]
    with pytest.raises(NotAZarrStoreError, match=r"nope\.zarr: no zarr array or group"):
        describe_store((tmp_path / "nope.zarr").as_uri())


# -- bad input ------------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match=r"nope\.zarr: no such file"):
        describe_store(tmp_path / "nope.zarr")


def test_a_plain_file(tmp_path: Path) -> None:
    path = tmp_path / "image.tif"
    path.write_bytes(b"II*\x00")
    with pytest.raises(NotAZarrStoreError, match=r"image\.tif: is a file"):
        describe_store(path)


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty.zarr").mkdir()
    with pytest.raises(NotAZarrStoreError, match=r"empty\.zarr: not a zarr store"):
        describe_store(tmp_path / "empty.zarr")


def test_broken_json_at_the_root(tmp_path: Path) -> None:
    path = tmp_path / "broken.zarr"
    path.mkdir()
    (path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"')
    with pytest.raises(MetadataError, match=r"broken\.zarr/zarr\.json: malformed JSON"):
        describe_store(path)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_broken_json_of_a_level(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version, with_labels=False)
    name = "zarr.json" if version == "0.5" else ".zarray"
    (path / "1" / name).write_text("{")
    with pytest.raises(MetadataError, match=rf"image\.zarr/1/{name}: malformed JSON"):
        describe_store(path)


def test_broken_json_of_a_group_member(tmp_path: Path) -> None:
    path = tmp_path / "group.zarr"
    zarr.create_group(str(path)).create_array("a", shape=(2,), dtype="u1")
    (path / "a" / "zarr.json").write_text("[]")
    with pytest.raises(MetadataError, match=r"group\.zarr/a/zarr\.json: metadata is not a JSON"):
        describe_store(path)


def _drop_datasets(ome: dict[str, Any]) -> None:
    del ome["multiscales"][0]["datasets"]


def _drop_window(ome: dict[str, Any]) -> None:
    del ome["omero"]["channels"][1]["window"]


def _space_axes_first(ome: dict[str, Any]) -> None:
    ome["multiscales"][0]["axes"] = [*_AXES[1:], _AXES[0]]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (_drop_datasets, r"multiscales\.0\.datasets: Field required"),
        (_space_axes_first, r"space axes must be at the end"),
    ],
)
def test_invalid_ome_metadata(tmp_path: Path, version: str, edit: Any, problem: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version, with_labels=False)
    _edit_ome(path, version, edit)
    with pytest.raises(MetadataError, match=rf"image\.zarr: invalid OME-Zarr .*{problem}"):
        describe_store(path)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_channel_without_window_opens_with_sampled_limits(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version, with_labels=False)
    _edit_ome(path, version, _drop_window)
    with pytest.warns(MetadataWarning, match=r"omero\.channels\.1\.window: Field required"):
        (image,) = describe_store(path)
    assert image.contrast_limits is None  # sampled from the data by the reader


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_dataset_without_array(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version, with_labels=False)
    _edit_ome(path, version, lambda ome: ome["multiscales"][0]["datasets"][2].update(path="9"))
    with pytest.raises(MetadataError, match=r"image\.zarr: multiscales dataset '9' is missing"):
        describe_store(path)


def test_level_rank_differs_from_axes(tmp_path: Path) -> None:
    path = write_ome(tmp_path / "image.zarr", "0.4", with_labels=False)
    zarr.create_array(str(path / "2"), shape=(16, 16), dtype="u2", zarr_format=2, overwrite=True)
    with pytest.raises(MetadataError, match=r"dataset '2' has 2 dimensions .* 3 axes"):
        describe_store(path)


def test_an_omero_channel_count_that_differs_is_ignored(tmp_path: Path) -> None:
    path = write_ome(tmp_path / "image.zarr", "0.5", with_labels=False)
    _edit_ome(path, "0.5", lambda ome: ome["omero"]["channels"].pop())
    with pytest.warns(
        MetadataWarning, match=r"omero\.channels: lists 1 channels, the image has 2"
    ):
        (image,) = describe_store(path)
    assert image.channel_names is None  # the reader's defaults, as without omero


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_label_listed_but_missing(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version)
    _edit_ome(path, version, lambda ome: ome["labels"].append("ghost"), group="labels")
    with pytest.raises(MetadataError, match=r"image\.zarr/labels: label 'ghost' is missing"):
        describe_store(path)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_label_image_needs_integers(tmp_path: Path, version: str) -> None:
    path = write_ome(tmp_path / "image.zarr", version)
    group = zarr.open_group(str(path / "labels" / "nuclei"), mode="r+")
    group.create_array(
        "1",
        shape=(1, 32, 32),
        dtype="f4",
        dimension_names=["c", "y", "x"] if version == "0.5" else None,
        overwrite=True,
    )
    with pytest.raises(UnsupportedDataError, match=r"dataset '1': a label image needs an integer"):
        describe_store(path)


def test_unsupported_ome_version(tmp_path: Path) -> None:
    path = write_ome(tmp_path / "old.zarr", "0.4", with_labels=False)
    _rewrite_json(path / ".zattrs", lambda d: d["multiscales"][0].update(version="0.7"))
    with pytest.raises(UnsupportedDataError, match=r"old\.zarr: OME-Zarr version 0\.7"):
        describe_store(path)


def test_0_3_is_read_by_its_own_rules(tmp_path: Path) -> None:
    """0.3 names its axes (ome-zarr-py's rules): a 0.4 document relabelled 0.3 is invalid."""
    path = write_ome(tmp_path / "old.zarr", "0.4", with_labels=False)
    _rewrite_json(path / ".zattrs", lambda d: d["multiscales"][0].update(version="0.3"))
    with pytest.raises(MetadataError, match=r"old\.zarr: invalid OME-Zarr 0\.3 image metadata"):
        describe_store(path)


def test_transform_stored_in_an_array(tmp_path: Path) -> None:
    path = write_ome(tmp_path / "image.zarr", "0.5", with_labels=False)
    transforms = [{"type": "scale", "path": "scales/0"}]
    _edit_ome(
        path,
        "0.5",
        lambda ome: ome["multiscales"][0]["datasets"][0].update(
            coordinateTransformations=transforms
        ),
    )
    with pytest.raises(UnsupportedDataError, match=r"dataset '0': transforms stored in an array"):
        describe_store(path)


def test_pickle_level_refused_by_name(tmp_path: Path) -> None:
    path = write_ome(tmp_path / "image.zarr", "0.4", with_labels=False)
    _rewrite_json(path / "1" / ".zarray", lambda d: d.update(filters=[{"id": "pickle"}]))
    with pytest.raises(UnsafeDataError, match=r"image\.zarr/1: .*'pickle'.*arbitrary code"):
        describe_store(path)


def test_object_dtype_member_refused(tmp_path: Path) -> None:
    path = tmp_path / "group.zarr"
    group = zarr.create_group(str(path), zarr_format=2)
    group.create_array("ok", shape=(2,), dtype="u1")
    group.create_array("objects", shape=(2,), dtype="u1")
    _rewrite_json(path / "objects" / ".zarray", lambda d: d.update(dtype="|O"))
    with pytest.raises(UnsafeDataError, match=r"group\.zarr/objects: .*object dtype"):
        describe_store(path)


# -- looks_like_zarr --------------------------------------------------------------


def _write_array(path: Path, zarr_format: ZarrFormat) -> None:
    zarr.create_array(str(path), shape=(2,), dtype="u1", zarr_format=zarr_format)


def _write_group(path: Path, zarr_format: ZarrFormat) -> None:
    zarr.create_group(str(path), zarr_format=zarr_format)


@pytest.mark.parametrize("write", [_write_array, _write_group])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_looks_like_zarr_directories(tmp_path: Path, write: Any, zarr_format: ZarrFormat) -> None:
    write(tmp_path / "store.zarr", zarr_format)
    assert looks_like_zarr(tmp_path / "store.zarr")
    assert looks_like_zarr(str(tmp_path / "store.zarr"))


def test_looks_like_zarr_zattrs_and_zip(tmp_path: Path) -> None:
    (tmp_path / "attrs").mkdir()
    (tmp_path / "attrs" / ".zattrs").write_text("{}")  # zarr v2 attributes alone
    with zarr.storage.ZipStore(tmp_path / "store.zarr.zip", mode="w") as store:
        zarr.create_array(store, shape=(2,), dtype="u1")
    assert looks_like_zarr(tmp_path / "attrs")
    assert looks_like_zarr(tmp_path / "store.zarr.zip")


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/data/image.zarr",
        "http://example.org/image.zarr/",
        "s3://bucket/key/Image.ZARR",
    ],
)
def test_looks_like_zarr_urls(url: str) -> None:
    assert looks_like_zarr(url)


@pytest.mark.parametrize("url", ["ftp://example.org/image.zarr", "sftp://host/image.zarr"])
def test_looks_like_zarr_other_schemes(url: str) -> None:
    assert not looks_like_zarr(url)  # refused by scheme: nothing is fetched


def test_looks_like_zarr_other_urls(tmp_path: Path) -> None:
    """URLs whose metadata is not zarr, on a loopback server (the probe fetches them)."""
    from tests.remote.server import FaultyServer

    (tmp_path / "image.tif").write_bytes(b"II*\x00")
    (tmp_path / "image.zarr").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "zarr.json").write_text('{"not": "zarr"}')
    with FaultyServer(tmp_path) as server:
        for name in ("image.tif", "image.zarr/0", "notes", "missing/"):
            assert not looks_like_zarr(f"{server.url}/{name}"), name


def test_looks_like_zarr_negative(tmp_path: Path) -> None:
    (tmp_path / "empty.zarr").mkdir()
    (tmp_path / "image.tif").write_bytes(b"II*\x00")
    (tmp_path / "other.zip").write_bytes(b"PK")
    for candidate in ["missing.zarr", "empty.zarr", "image.tif", "other.zip"]:
        assert not looks_like_zarr(tmp_path / candidate), candidate


@pytest.mark.parametrize("odd", ["bad\x00path.zarr", "", b"/tmp", None, ["a.zarr"], 3])
def test_looks_like_zarr_never_raises(odd: Any) -> None:
    assert looks_like_zarr(odd) is False


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any directory"
)
def test_looks_like_zarr_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "locked"
    path.mkdir()
    zarr.create_group(str(path / "store.zarr"))
    path.chmod(0)
    try:
        assert looks_like_zarr(path / "store.zarr") is False
    finally:
        path.chmod(0o755)


def test_looks_like_zarr_when_stat_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the file system raises (here: permission denied), the answer is False."""
    zarr.create_group(str(tmp_path / "store.zarr"))

    def denied(path: Any) -> bool:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os.path, "isfile", denied)
    assert looks_like_zarr(tmp_path / "store.zarr") is False
