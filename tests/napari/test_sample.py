"""The sample: shown at once, computed as it is viewed; written to disk only when asked."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._sample_data import sample_layers, sample_path, write_sample
from napari_lazy_zarr.core import FunctionSource
from napari_lazy_zarr.core.formats.ome import describe_store
from napari_lazy_zarr.core.sample import (
    SAMPLE_SIZE,
    is_complete,
    sample_image_spec,
    sample_level_shapes,
    synthetic_cells,
)

if TYPE_CHECKING:
    from pathlib import Path

    from pytestqt.qtbot import QtBot


def _sources(layer: Any) -> list[Any]:
    loader = loader_of(layer)
    assert loader is not None
    return list(loader.controller.sources)


def _shown(viewer: Any) -> np.ndarray[Any, Any]:
    return np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3]


def test_the_sample_opens_at_once_computed_off_the_main_thread_and_writes_nothing(
    make_napari_viewer: Any, qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from napari_lazy_zarr.core import sample

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    computed_on: set[threading.Thread] = set()

    def recorded(*args: Any, **kwargs: Any) -> Any:  # note the thread each chunk is made on
        computed_on.add(threading.current_thread())
        return synthetic_cells(*args, **kwargs)

    monkeypatch.setattr(sample, "synthetic_cells", recorded)
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open_sample("napari-lazy-zarr", "pyramid")  # napari's public route
    sources = _sources(layer)
    assert all(isinstance(source, FunctionSource) for source in sources)
    assert [source.shape for source in sources] == sample_level_shapes(SAMPLE_SIZE)
    assert layer.contrast_limits == [100.0, 20000.0]
    # First pixels on the canvas (the fill value shows black: the contrast starts at 100).
    qtbot.waitUntil(lambda: _shown(viewer)[..., 1].max() > 100, timeout=30_000)
    assert computed_on
    assert threading.main_thread() not in computed_on
    assert not (tmp_path / "xdg" / "napari-lazy-zarr").exists()  # nothing written
    assert not [t for t in threading.enumerate() if "sample" in t.name]


def test_the_written_store_holds_what_the_sample_shows(
    make_napari_viewer: Any, qtbot: QtBot, tmp_path: Path
) -> None:
    size = 2048
    viewer = make_napari_viewer(show=True)
    ((levels, kwargs, kind),) = sample_layers(size)
    layer = viewer.add_image(levels, **kwargs)
    assert kind == "image"
    qtbot.waitUntil(lambda: _shown(viewer)[..., 1].max() > 100, timeout=30_000)
    path = write_sample(tmp_path / "cells.ome.zarr", size)
    assert is_complete(path)
    # The layer's pixels are the store's (zarr-python as oracle).
    for level, source in enumerate(_sources(layer)):
        assert isinstance(source, FunctionSource)
        stored = zarr.open_array(str(path / str(level)), mode="r")
        np.testing.assert_array_equal(source.read_chunk((0, 0)), stored[:512, :512])
    # The sample's layer is the one the store's metadata describes.
    (spec,) = describe_store(str(path))
    assert spec == sample_image_spec(size)
    (stored_layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    assert stored_layer.contrast_limits == layer.contrast_limits
    assert stored_layer.scale.tolist() == layer.scale.tolist()


def test_writing_never_overwrites_what_is_not_a_sample_store(tmp_path: Path) -> None:
    taken = tmp_path / "data"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a napari-lazy-zarr sample store"):
        write_sample(taken, 1024)
    assert (taken / "notes.txt").read_text() == "mine"
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(FileExistsError):
        write_sample(a_file, 1024)


def test_an_interrupted_store_is_incomplete_and_written_again(tmp_path: Path) -> None:
    """The OME metadata is written last: a store without it (a write killed midway, an old
    version's) is not taken for the sample, and `sample_path` writes it again."""
    path = tmp_path / "cells-1024.ome.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=3).create_array(
        "0", shape=(1024, 1024), chunks=(512, 512), dtype="uint16"
    )
    assert not is_complete(path)
    assert sample_path(1024, tmp_path) == path
    assert is_complete(path)
    stored = zarr.open_array(str(path / "1"), mode="r")
    np.testing.assert_array_equal(stored[:], synthetic_cells(0, 0, (512, 512), step=2))
    written = (path / "zarr.json").stat().st_mtime_ns
    assert sample_path(1024, tmp_path) == path  # reused, not written again
    assert (path / "zarr.json").stat().st_mtime_ns == written
