"""3D at the finest level the voxel budget allows, coarse to fine, in a real viewer.

An OME-Zarr volume pyramid written by ome-zarr-py (z, y and x decimated): napari
starts at the coarsest level; the plugin locks `locked_data_level` to finer
levels as their volumes become resident and assembled off the main thread,
stops at the budget, and lifts the lock in 2D.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer
from napari_lazy_zarr.core.viewport import ViewController

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest
    from pytestqt.qtbot import QtBot


def write_volume(
    path: Path, size: int = 64, *, yx_only: bool = False
) -> list[np.ndarray[Any, Any]]:
    """64³, 32³, 16³; or, `yx_only` (ome-zarr-py's default for zyx), 64×64², 64×32², 64×16²."""
    from ome_zarr.writer import write_multiscale  # type: ignore[import-untyped]

    z, y, x = np.ogrid[:size, :size, :size]
    data = ((x + 2 * y + 3 * z) % 200 + 1).astype(np.uint8)
    pyramid = [data[:: 1 if yx_only else 2**k, :: 2**k, :: 2**k] for k in range(3)]
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    write_multiscale(pyramid, group, axes="zyx", storage_options={"chunks": (16, 16, 16)})
    return pyramid


def _open_yx(make_napari_viewer: Callable[..., Any], tmp_path: Path) -> tuple[Any, ...]:
    """A y/x-only pyramid (`write_volume`) opened by the plugin in a shown viewer: the
    pyramid, the viewer, the layer and its loader."""
    pyramid = write_volume(tmp_path / "yx.ome.zarr", yx_only=True)
    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(tmp_path / "yx.ome.zarr"), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    return pyramid, viewer, layer, loader


def _recorded_3d_slices(
    layer: Any, coarsest: int
) -> tuple[list[tuple[int, np.ndarray[Any, Any]]], Callable[..., None]]:
    """Record the (level, values) of every 3D slice napari applies to `layer` from now on;
    the list and the connected slot (to disconnect)."""
    slices: list[tuple[int, np.ndarray[Any, Any]]] = []

    def applied(event: Any = None) -> None:
        raw = np.asarray(layer._slice.image.raw)
        if raw.ndim == 3:
            level = layer.locked_data_level
            slices.append((coarsest if level is None else level, raw.copy()))

    layer.events.set_data.connect(applied)
    return slices, applied


def test_3d_reaches_the_finest_level_within_the_budget_without_blocking(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pyramid = write_volume(tmp_path / "volume.ome.zarr")
    reads: list[tuple[int, float, bool]] = []  # (level, seconds, complete) per volume read
    original = ViewController.read  # napari's display reads (LayerLevel's display door)

    def timed(self: ViewController, level: int, view: Any, *, kind: Any = None) -> Any:
        started = time.perf_counter()
        data = original(self, level, view, kind=kind)
        latest = self.latest
        complete = latest is not None and latest.complete
        if view.ndim == 3:  # napari's 2D reads of one plane before 3D are not counted
            reads.append((level, time.perf_counter() - started, complete))
        return data

    monkeypatch.setattr(ViewController, "read", timed)
    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    (layer,) = viewer.open(str(tmp_path / "volume.ome.zarr"), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    loader.volume_voxels = 40**3  # 32³ fits, 64³ does not
    viewer.dims.ndisplay = 3
    qtbot.waitUntil(lambda: layer.locked_data_level == 1, timeout=30_000)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), pyramid[1])
    # Every read napari made of the locked level found its volume whole: it was
    # assembled before the lock, off the main thread.
    assert all(complete for level, _, complete in reads if level == 1)
    # (napari itself reads the 2D level's volume once when it switches to 3D: not ours.)
    before = len(reads)
    loader.volume_voxels = 64**3  # a larger budget: the finest level
    qtbot.waitUntil(lambda: layer.locked_data_level == 0, timeout=30_000)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), pyramid[0])
    assert all(complete for level, _, complete in reads[before:] if level == 0), reads
    slowest = max(seconds for _, seconds, _ in reads)
    print(f"slowest main-thread read: {slowest * 1e3:.1f} ms over {len(reads)} reads")
    viewer.dims.ndisplay = 2  # back to 2D: napari chooses its level again
    qtbot.waitUntil(lambda: layer.locked_data_level is None, timeout=30_000)


def test_3d_switch_shows_the_coarsest_at_once_then_a_finer_level_on_a_yx_only_pyramid(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    pyramid, viewer, layer, loader = _open_yx(make_napari_viewer, tmp_path)
    # 64×32² (65,536 voxels) fits, 64×64² does not: z is never decimated, so the choice
    # is by what each level's volume costs on every axis.
    loader.volume_voxels = 100_000
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    slices, applied = _recorded_3d_slices(layer, coarsest=len(pyramid) - 1)
    viewer.dims.ndisplay = 3
    # At once: the switch itself applies napari's own 3D level, the coarsest.
    assert slices, "the 3D switch applied no slice"
    assert slices[0][0] == 2
    assert slices[0][1].shape == pyramid[2].shape
    qtbot.waitUntil(lambda: layer.locked_data_level == 1, timeout=30_000)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    assert loader.volume_target() == 1
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), pyramid[1])
    levels = [level for level, _ in slices]
    assert levels == sorted(levels, reverse=True), levels  # coarse to fine, never back
    # Whatever the coarsest showed was the coarsest's values (or not yet loaded: 0).
    for level, values in slices:
        if level == 2:
            loaded = values != 0
            np.testing.assert_array_equal(values[loaded], pyramid[2][loaded])
    layer.events.set_data.disconnect(applied)


def test_3d_switch_with_the_coarsest_resident_shows_it_whole_in_one_slice(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    """The switch to 3D once the coarsest level is resident (2D loaded it): napari's first
    read answers its volume whole, and napari is not asked to read (and, under software
    rendering, upload and paint: seconds for a 1024-deep volume) it again before the finer
    level is shown."""
    pyramid, viewer, layer, loader = _open_yx(make_napari_viewer, tmp_path)
    loader.volume_voxels = 100_000  # 64×32² fits, 64×64² does not
    cache = loader.controller.cache
    loader.controller.arrays[2][...].result(timeout=30)  # the whole coarsest level resident
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    qtbot.waitUntil(lambda: not cache.counters().in_flight + cache.counters().queued)
    slices, applied = _recorded_3d_slices(layer, coarsest=len(pyramid) - 1)
    viewer.dims.ndisplay = 3
    assert [level for level, _ in slices] == [2]
    np.testing.assert_array_equal(slices[0][1], pyramid[2])  # whole at once
    qtbot.waitUntil(lambda: layer.locked_data_level == 1, timeout=30_000)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), pyramid[1])
    assert [level for level, _ in slices].count(2) == 1, [level for level, _ in slices]
    layer.events.set_data.disconnect(applied)
