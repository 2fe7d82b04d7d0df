"""The npe2 reader on real stores: what napari gets, and what it refuses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import LayerLevel
from napari_lazy_zarr._reader import napari_get_reader, read_zarr
from napari_lazy_zarr.core import MetadataError, NotAZarrStoreError
from tests.napari.conftest import omero

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    OmeStore = Callable[..., tuple[Path, list[np.ndarray[Any, Any]]]]

YX = [
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]
CYX = [{"name": "c", "type": "channel"}, *YX]


def _plain(
    tmp_path: Path, name: str, zarr_format: int, shards: Any = None
) -> np.ndarray[Any, Any]:
    data = (np.arange(1500 * 1300) % 4093).astype(np.uint16).reshape(1500, 1300)
    array = zarr.create_array(
        str(tmp_path / name),
        shape=data.shape,
        chunks=(128, 128),
        shards=shards,
        dtype=data.dtype,
        zarr_format=zarr_format,  # type: ignore[arg-type]
    )
    array[...] = data
    return data


@pytest.mark.parametrize(("zarr_format", "shards"), [(2, None), (3, None), (3, (512, 512))])
def test_single_array_becomes_a_virtual_pyramid(
    tmp_path: Path, zarr_format: int, shards: Any
) -> None:
    data = _plain(tmp_path, "plain.zarr", zarr_format, shards)
    reader = napari_get_reader(str(tmp_path / "plain.zarr"))
    assert reader is read_zarr
    ((levels, kwargs, layer_type),) = reader(str(tmp_path / "plain.zarr"))
    assert layer_type == "image"
    assert kwargs["multiscale"] is True
    assert all(isinstance(level, LayerLevel) for level in levels)
    # 1500 -> 750 -> 375: decimated by 2 until at most 512 px.
    assert [level.shape for level in levels] == [(1500, 1300), (750, 650), (375, 325)]
    np.testing.assert_array_equal(levels[2].array.result(), data[::4, ::4])
    np.testing.assert_array_equal(levels[0][100:300, 7:9].array.result(), data[100:300, 7:9])
    low, high = kwargs["contrast_limits"]
    assert low < high


def test_nonblocking_levels_never_wait(tmp_path: Path) -> None:
    data = _plain(tmp_path, "plain.zarr", 3)
    ((levels, _, _),) = read_zarr(str(tmp_path / "plain.zarr"))
    region = (slice(1000, 1200), slice(1000, 1200))
    view = levels[0][region]
    shown = np.asarray(view)  # what napari does: returns at once
    first = shown.copy()  # the array napari holds keeps filling in as chunks land
    # Each pixel is the data, the fill value, or resident coarser data (upsampled):
    # the contrast sample left the coarsest level's centre resident.
    allowed = [data[region], np.zeros((200, 200), data.dtype)]
    for level in levels[1:]:
        ratio = level.shape[0] / data.shape[0]
        index = np.minimum(((np.arange(1000, 1200) + 0.5) * ratio).astype(int), level.shape[0] - 1)
        coarse = level.array.result()
        allowed.append(coarse[np.ix_(index, index)])
    assert np.logical_or.reduce([first == a for a in allowed]).all()
    assert not np.array_equal(first, data[region])  # the fine chunks were not resident yet
    view.array.result(timeout=30)  # wait for the chunks the first call queued
    np.testing.assert_array_equal(np.asarray(view), data[region])
    wait = view.array.cache.request(view.array.chunk_refs())
    wait.done.result(timeout=30)
    wait.release()
    np.testing.assert_array_equal(shown, data[region])  # filled in place, without a read


def test_plain_group_gives_a_layer_per_array(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("a", shape=(64, 64), dtype="u1")[...] = 1
    group.create_array("b", shape=(32, 32), dtype="f4")[...] = 2.5
    layers = read_zarr(str(tmp_path / "g.zarr"))
    assert [kwargs["name"] for _, kwargs, _ in layers] == ["a", "b"]
    assert np.asarray(layers[1][0].array.result()).dtype == np.float32


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_ome_zarr_channels_transforms_and_labels(ome_store: OmeStore, zarr_format: int) -> None:
    rng = np.random.default_rng(0)
    data = rng.integers(0, 4000, size=(2, 1024, 768), dtype=np.uint16)
    labels = (np.arange(1024 * 768).reshape(1024, 768) // 5000).astype(np.uint32)
    path, pyramid = ome_store(
        data=data,
        levels=3,
        chunks=(1, 256, 256),
        axes=CYX,
        zarr_format=zarr_format,
        omero=omero(["FF0000", "00FF00"], [(10, 3000), (20, 2000)]),
        scale=[1.0, 0.5, 0.25],
        translate=[0.0, 10.0, 20.0],
        labels={"cells": labels[None]},
    )
    assert napari_get_reader(str(path)) is read_zarr
    layers = read_zarr(str(path))
    images = [layer for layer in layers if layer[2] == "image"]
    label_layers = [layer for layer in layers if layer[2] == "labels"]
    assert [kwargs["name"] for _, kwargs, _ in images] == ["ch0", "ch1"]
    red, green = images
    assert red[1]["scale"] == (0.5, 0.25)
    assert red[1]["translate"] == (10.0, 20.0)
    assert red[1]["axis_labels"] == ("y", "x")
    assert red[1]["units"] == ("micrometer", "micrometer")
    assert red[1]["contrast_limits"] == (10, 3000)
    assert red[1]["blending"] == "additive"
    np.testing.assert_allclose(red[1]["colormap"].colors[-1], [1, 0, 0, 1])
    np.testing.assert_allclose(green[1]["colormap"].colors[-1], [0, 1, 0, 1])
    assert [level.shape for level in green[0]] == [(1024, 768), (512, 384), (256, 192)]
    np.testing.assert_array_equal(green[0][1].array.result(), pyramid[1][1])
    ((label_levels, label_kwargs, _),) = label_layers
    assert label_kwargs["name"] == "cells"
    np.testing.assert_array_equal(label_levels[0].array.result(), labels)  # c (size 1) dropped


def test_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "image.tif").write_bytes(b"II*\x00")
    (tmp_path / "empty.zarr").mkdir()
    assert napari_get_reader(str(tmp_path / "image.tif")) is None
    assert napari_get_reader(str(tmp_path / "empty.zarr")) is None
    assert napari_get_reader(str(tmp_path / "missing.zarr")) is None
    assert napari_get_reader([str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]) is None
    assert napari_get_reader("\x00bad") is None


def test_broken_store_raises_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.zarr"
    broken.mkdir()
    (broken / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array"')
    reader = napari_get_reader(str(broken))
    assert reader is read_zarr  # it looks like zarr ...
    with pytest.raises(MetadataError, match=r"broken\.zarr"):  # ... but says what is wrong
        reader(str(broken))
    group = tmp_path / "hollow.zarr"
    zarr.open_group(str(group), mode="w")
    with pytest.raises(NotAZarrStoreError, match=r"hollow\.zarr"):
        read_zarr(str(group))
    bad_ome = tmp_path / "bad.ome.zarr"
    zarr.open_group(str(bad_ome), mode="w", zarr_format=2).attrs["multiscales"] = [{"datasets": 5}]
    with pytest.raises(MetadataError, match=r"bad\.ome\.zarr"):
        read_zarr(str(bad_ome))


def test_manifest_is_valid_and_its_commands_import() -> None:
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-lazy-zarr")
    manifest.validate_imports()
    assert {c.id for c in manifest.contributions.commands or []} >= {
        "napari-lazy-zarr.get_reader",
        "napari-lazy-zarr.sample",
    }
    (reader,) = manifest.contributions.readers or []
    assert "*.zarr" in reader.filename_patterns
    assert reader.accepts_directories


def test_sample_data_is_generated_once_and_read_lazily(tmp_path: Path) -> None:
    from napari_lazy_zarr._sample_data import sample_path

    path = sample_path(1024, tmp_path)
    assert (path / ".complete").exists()
    marker_time = (path / ".complete").stat().st_mtime_ns
    assert sample_path(1024, tmp_path) == path  # reused, not rewritten
    assert (path / ".complete").stat().st_mtime_ns == marker_time
    ((levels, kwargs, layer_type),) = read_zarr(str(path))
    assert layer_type == "image"
    assert [level.shape for level in levels] == [(1024, 1024), (512, 512)]
    assert kwargs["contrast_limits"] == (100, 20000)  # from the omero window
