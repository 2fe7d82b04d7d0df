"""Issue 23's files in a real napari viewer: ngff-zarr's ``.ozx``, tifffile's RGB references,
complex arrays.

``.ozx`` (zipped OME-Zarr, RFC-9) is offered to this plugin by npe2 from its
name and opens with or without ``plugin=``; an RGB TIFF's references (JPEG
tiles through imagecodecs) become an RGB layer; a complex array is refused
with the way out instead of napari's empty ``NotImplementedError``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import read_zarr
from napari_lazy_zarr.core.errors import UnsupportedDtypeError
from tests.conformance.cases_files import cases, write_ozx

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot


def _full_resolution(layer: Any) -> np.ndarray[Any, Any]:
    loader = loader_of(layer)
    assert loader is not None, f"{layer.name} is not this plugin's layer"
    return np.asarray(loader.levels[0].array)


def test_npe2_offers_the_plugin_for_ozx_files() -> None:
    from npe2 import PluginManager

    manager = PluginManager.instance()
    manager.discover()
    offered = {r.plugin_name for r in manager.iter_compatible_readers(["cells.ozx"])}
    assert "napari-lazy-zarr" in offered


@pytest.mark.parametrize("plugin", ["napari-lazy-zarr", None], ids=["plugin=", "no plugin="])
def test_an_ozx_written_by_ngff_zarr_opens_in_the_viewer(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    plugin: str | None,
) -> None:
    written = write_ozx(tmp_path, "cyx")
    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(written.path), plugin=plugin)
    assert [layer.name for layer in layers] == ["cells [0]", "cells [1]"]
    assert all(layer.multiscale for layer in layers)
    for layer, expected in zip(layers, written.layers, strict=True):
        np.testing.assert_array_equal(_full_resolution(layer), expected)
        assert tuple(layer.scale) == (0.5, 0.5)
    loaders = [loader_of(layer) for layer in layers]
    qtbot.waitUntil(lambda: all(lo is not None and lo.settled for lo in loaders), timeout=30_000)


def test_an_rgb_tiff_through_its_references_is_an_rgb_layer(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    (case,) = [c for c in cases() if c.id == "tifffile references/JPEG RGB tiles"]
    written = case.write(tmp_path)
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(written.path), plugin="napari-lazy-zarr")
    assert layer.rgb
    assert layer.ndim == 2  # the colour axis is napari's, not a slider
    np.testing.assert_array_equal(_full_resolution(layer), written.layers[0])
    loader = loader_of(layer)
    assert loader is not None
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)


def _complex_store(path: Path) -> Path:
    rng = np.random.default_rng(1)
    data = (rng.random((40, 48)) + 1j * rng.random((40, 48))).astype("complex64")
    zarr.create_array(str(path), shape=data.shape, dtype=data.dtype)[...] = data
    return path


def test_a_complex_array_is_refused_with_the_way_out(
    make_napari_viewer: Callable[..., Any], tmp_path: Path
) -> None:
    path = _complex_store(tmp_path / "field.zarr")
    with pytest.raises(UnsupportedDtypeError, match=r"field\.zarr: dtype complex64 .*np\.abs"):
        read_zarr(str(path))
    viewer = make_napari_viewer(show=True)
    with pytest.raises(Exception, match="napari cannot display complex values") as refused:
        viewer.open(str(path), plugin="napari-lazy-zarr")
    chain: list[BaseException] = []
    error: BaseException | None = refused.value
    while error is not None:
        chain.append(error)
        error = error.__cause__
    assert any(isinstance(e, UnsupportedDtypeError) for e in chain), chain
    assert len(viewer.layers) == 0


def test_a_complex_array_beside_an_image_is_skipped_with_a_warning(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "both.zarr"), mode="w", zarr_format=3)
    group.create_array("amplitude", shape=(40, 48), dtype="f4")[...] = 1.0
    group.create_array("field", shape=(40, 48), dtype="c8")[...] = 1j
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layers = read_zarr(str(tmp_path / "both.zarr"))
    assert [kwargs["name"] for _, kwargs, _ in layers] == ["amplitude"]
    assert any("both.zarr/field: dtype complex64" in str(w.message) for w in caught)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_xarray_dataset_opens_as_its_data_variable_with_its_dimensions(
    make_napari_viewer: Callable[..., Any], tmp_path: Path, zarr_format: int
) -> None:
    (case,) = [c for c in cases() if c.id == f"xarray/v{zarr_format} tyx"]
    written = case.write(tmp_path)
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(written.path), plugin="napari-lazy-zarr")  # not t, y, x
    assert layer.name == "intensity"
    # Zarr v3 names them in the metadata; v2 in xarray's `_ARRAY_DIMENSIONS` attribute.
    assert tuple(layer.axis_labels) == ("t", "y", "x")
    np.testing.assert_array_equal(_full_resolution(layer), written.layers[0])
