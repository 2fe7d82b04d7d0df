"""Contrast limits without metadata: the open waits for no chunk; the data's limits follow.

A layer opened from a store whose metadata gives no limits opens at once with
its dtype's range; the limits of a bounded sample of its coarsest stored level
(read in the background) replace them on the main thread when its chunks have
landed, unless the user set limits meanwhile.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import contrast_sample
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot


def _plain(tmp_path: Path) -> tuple[Path, np.ndarray[Any, Any]]:
    """A 1024² uint16 array in 256² chunks (16 chunks: the sample reads it whole)."""
    path = tmp_path / "plain.zarr"
    rng = np.random.default_rng(24)
    data = rng.integers(1200, 3400, size=(1024, 1024), dtype=np.uint16)
    array = zarr.create_array(str(path), shape=data.shape, chunks=(256, 256), dtype=data.dtype)
    array[...] = data
    return path, data


@pytest.fixture
def gated_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[bool]]:
    """Chunk reads wait for the gate; each records whether it ran on the main thread."""
    gate = threading.Event()
    on_main: list[bool] = []
    original = ZarrChunkSource.read_chunk

    def gated(self: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
        on_main.append(threading.current_thread() is threading.main_thread())
        if not gate.wait(timeout=60):
            raise TimeoutError("gate never opened")
        return original(self, coords)

    monkeypatch.setattr(ZarrChunkSource, "read_chunk", gated)
    return gate, on_main


def test_open_waits_for_no_chunk_and_takes_the_data_limits(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    gated_reads: tuple[threading.Event, list[bool]],
) -> None:
    gate, on_main = gated_reads
    path, data = _plain(tmp_path)
    viewer = make_napari_viewer(show=True)
    # Every chunk read blocks until the gate opens: an open that waited for one would hang.
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    assert tuple(layer.contrast_limits) == (0.0, 65535.0)  # provisional: the dtype's range
    loader = loader_of(layer)
    assert loader is not None
    sample = contrast_sample(loader)
    assert sample is not None
    assert not sample.future.done()
    gate.set()
    oracle = (float(data.min()), float(data.max()))
    assert sample.future.result(timeout=30) == oracle
    # Applied on the main thread, then forgotten. (The first view napari reads may give the
    # same limits a moment before, as interim limits: waiting on those alone raced.)
    qtbot.waitUntil(lambda: contrast_sample(loader) is None, timeout=30_000)
    assert tuple(layer.contrast_limits) == oracle
    assert on_main
    assert not any(on_main)


def test_limits_the_user_sets_before_the_sample_lands_are_kept(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    gated_reads: tuple[threading.Event, list[bool]],
) -> None:
    gate, _ = gated_reads
    path, data = _plain(tmp_path)
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    sample = contrast_sample(loader)
    assert sample is not None
    layer.contrast_limits = (100, 5000)  # the user's, before any chunk landed
    gate.set()
    assert sample.future.result(timeout=30) == (float(data.min()), float(data.max()))
    qtbot.waitUntil(lambda: contrast_sample(loader) is None, timeout=30_000)
    assert tuple(layer.contrast_limits) == (100.0, 5000.0)


def test_float_limits_beyond_the_provisional_range_widen_it(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    path = tmp_path / "float.zarr"
    data = np.linspace(-40.0, 900.0, 512 * 512, dtype=np.float32).reshape(512, 512)
    array = zarr.create_array(str(path), shape=data.shape, chunks=(128, 128), dtype=data.dtype)
    array[...] = data
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    oracle = (float(data.min()), float(data.max()))
    qtbot.waitUntil(lambda: tuple(layer.contrast_limits) == oracle, timeout=30_000)
    low, high = layer.contrast_limits_range
    assert low <= oracle[0]
    assert high >= oracle[1]
