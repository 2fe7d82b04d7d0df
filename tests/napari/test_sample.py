"""The sample: shown at once from its generator, the store written once in the background."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._sample_data import sample_layers, sample_location, sample_path
from napari_lazy_zarr.core import FunctionSource, ZarrChunkSource
from napari_lazy_zarr.core.formats.ome import describe_store
from napari_lazy_zarr.core.sample import (
    COMPLETE_MARKER,
    SAMPLE_SIZE,
    SampleWrite,
    is_complete,
    latest_write,
    running_write,
    sample_image_spec,
    sample_level_shapes,
    sample_write,
    synthetic_cells,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pytestqt.qtbot import QtBot


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user cache directory in `tmp_path`; stops the writes a test left running."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    yield tmp_path / "xdg" / "napari-lazy-zarr"
    for path in set((tmp_path / "xdg").rglob("*.ome.zarr")) | {sample_location(SAMPLE_SIZE)}:
        write = running_write(path)
        if write is not None:
            assert write.stop(timeout=60)


def _sources(layer: Any) -> list[Any]:
    loader = loader_of(layer)
    assert loader is not None
    return list(loader.controller.sources)


def _shown(viewer: Any) -> np.ndarray[Any, Any]:
    return np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3]


def test_the_sample_opens_at_once_and_its_write_runs_off_the_main_thread(
    make_napari_viewer: Any, qtbot: QtBot, cache_home: Path
) -> None:
    viewer = make_napari_viewer(show=True)
    path = sample_location(SAMPLE_SIZE)
    threads: set[threading.Thread] = set()
    (layer,) = viewer.open_sample("napari-lazy-zarr", "pyramid")  # napari's public route
    write = running_write(path)
    assert write is not None
    assert write.thread is not None
    write.progressed.connect(lambda *_: threads.add(threading.current_thread()))
    # Returned before the store is complete: the layer reads the generator.
    assert not is_complete(path)
    assert all(isinstance(source, FunctionSource) for source in _sources(layer))
    assert [source.shape for source in _sources(layer)] == sample_level_shapes(SAMPLE_SIZE)
    assert layer.contrast_limits == [100.0, 20000.0]
    # First pixels on the canvas (the fill value shows black: the contrast starts at 100).
    qtbot.waitUntil(lambda: _shown(viewer)[..., 1].max() > 100, timeout=30_000)
    # The write goes on in its background thread, and reports from there.
    qtbot.waitUntil(lambda: bool(threads), timeout=30_000)
    assert threads == {write.thread}
    assert write.thread is not threading.main_thread()
    assert write.thread.is_alive()
    assert write.written > 0
    # A second open while it writes shares the write: one writer thread.
    (again,) = viewer.open_sample("napari-lazy-zarr", "pyramid")
    assert running_write(path) is write
    writers = [t for t in threading.enumerate() if t.name.startswith("napari-lazy-zarr sample")]
    assert writers == [write.thread]
    assert all(isinstance(source, FunctionSource) for source in _sources(again))
    # Stopped (as at exit): nothing is left that could be taken for the store.
    assert write.stop(timeout=60)
    assert isinstance(write.error, InterruptedError)
    assert not path.exists()
    assert list(path.parent.iterdir()) == []


def test_the_generator_shows_what_the_store_holds_and_a_later_open_reads_the_store(
    make_napari_viewer: Any, qtbot: QtBot, tmp_path: Path
) -> None:
    size = 2048
    viewer = make_napari_viewer(show=True)
    ((levels, kwargs, kind),) = sample_layers(size, tmp_path)
    write = running_write(sample_location(size, tmp_path))
    assert write is not None
    layer = viewer.add_image(levels, **kwargs)
    assert kind == "image"
    qtbot.waitUntil(lambda: _shown(viewer)[..., 1].max() > 100, timeout=30_000)
    assert write.wait(timeout=120)
    assert write.error is None
    path = sample_location(size, tmp_path)
    assert is_complete(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the temporary folder renamed
    # The layer kept the generator; its pixels are the store's (zarr-python as oracle).
    for level, source in enumerate(_sources(layer)):
        assert isinstance(source, FunctionSource)
        stored = zarr.open_array(str(path / str(level)), mode="r")
        np.testing.assert_array_equal(source.read_chunk((0, 0)), stored[:512, :512])
    # The generator's layer is the one the store's metadata describes.
    (spec,) = describe_store(str(path))
    assert spec == sample_image_spec(size)
    # A later open reads the store, and starts no write.
    ((stored_levels, stored_kwargs, _),) = sample_layers(size, tmp_path)
    assert running_write(path) is None
    assert stored_kwargs == kwargs
    stored_layer = viewer.add_image(stored_levels, **stored_kwargs)
    assert all(isinstance(source, ZarrChunkSource) for source in _sources(stored_layer))


def test_an_interrupted_write_leaves_nothing_taken_for_complete(tmp_path: Path) -> None:
    path = tmp_path / "cells-1024.ome.zarr"
    write, new = sample_write(path, 1024)
    assert new
    write.progressed.connect(lambda written, _total: write.stop() if written >= 1 else None)
    write.run()  # stops itself after the first chunks
    assert isinstance(write.error, InterruptedError)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []
    # A crashed process's temporary folder (its pid no longer runs) is removed by the
    # next write, which then completes.
    abandoned = tmp_path / f".{path.name}.writing-{2**22 + 7}-deadbeef"
    abandoned.mkdir()
    (abandoned / "zarr.json").write_text("{}")
    assert sample_path(1024, tmp_path) == path
    assert is_complete(path)
    assert (path / COMPLETE_MARKER).is_file()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_sample_path_waits_for_the_running_write(tmp_path: Path) -> None:
    path = sample_location(1024, tmp_path)
    write, new = sample_write(path, 1024)
    assert new
    write.start()
    assert sample_path(1024, tmp_path) == path  # joins it: no second writer
    assert write.done
    assert write.error is None
    assert is_complete(path)


def test_a_store_left_incomplete_in_place_is_replaced(tmp_path: Path) -> None:
    """Before the writes were atomic, an interrupted one left a store without its marker."""
    path = sample_location(1024, tmp_path)
    zarr.open_group(str(path), mode="w", zarr_format=3)
    assert not is_complete(path)
    assert sample_path(1024, tmp_path) == path
    stored = zarr.open_array(str(path / "1"), mode="r")
    np.testing.assert_array_equal(stored[:], synthetic_cells(0, 0, (512, 512), step=2))


def test_the_write_does_not_run_twice_for_one_path(tmp_path: Path) -> None:
    path = tmp_path / "cells-1024.ome.zarr"
    first, new = sample_write(path, 1024)
    second, again = sample_write(path, 1024)
    assert new
    assert not again
    assert second is first
    assert isinstance(first, SampleWrite)
    first.run()
    assert first.error is None
    assert is_complete(path)
    third, new = sample_write(path, 1024)  # the first ended: a new one may start
    assert new
    assert third is not first
    assert not third.stop()  # never started: it only marks it, and returns at once
    third.run()
    assert isinstance(third.error, InterruptedError)
    assert is_complete(path)  # the complete store stays
    assert running_write(path) is None
    assert os.listdir(tmp_path) == [path.name]


def test_a_sample_that_cannot_be_stored_is_still_shown_and_says_why(
    make_napari_viewer: Any, qtbot: QtBot, tmp_path: Path
) -> None:
    from napari.utils.notifications import notification_manager

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # the cache directory's place is taken by a file
    viewer = make_napari_viewer(show=True)
    notes: list[Any] = []
    notification_manager.notification_ready.connect(notes.append)
    try:
        ((levels, kwargs, _),) = sample_layers(1024, blocker)
        # The write may have failed already (its folder cannot be made): the latest one.
        write = latest_write(sample_location(1024, blocker))
        assert write is not None
        viewer.add_image(levels, **kwargs)
        assert write.wait(timeout=60)
        assert isinstance(write.error, OSError)
        qtbot.waitUntil(lambda: any("could not be stored" in str(n.message) for n in notes))
        qtbot.waitUntil(lambda: _shown(viewer)[..., 1].max() > 100, timeout=30_000)
    finally:
        notification_manager.notification_ready.disconnect(notes.append)
    assert blocker.is_file()
