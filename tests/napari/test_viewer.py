"""Through a real napari viewer: only the viewport's chunks are read, slicing never waits,
and what is drawn equals the data."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import shared_cache, watch_viewer
from napari_lazy_zarr.core import ChunkRef, ChunkState
from napari_lazy_zarr.core.sample import synthetic_cells, write_sample_ome_zarr
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

SIZE = 2048
CHUNK = 256


@pytest.fixture
def cells_store(tmp_path: Path) -> Path:
    """A 2048² OME-Zarr 0.5 pyramid (2048, 1024, 512) in 256² chunks."""
    path = tmp_path / "cells.ome.zarr"
    write_sample_ome_zarr(path, size=SIZE, chunk=CHUNK, smallest=512)
    return path


def _open(viewer: Any, path: Path, *, prefetch: bool = False) -> tuple[Any, Any]:
    watch_viewer(viewer)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    assert loader.layer is layer
    loader.prefetch = prefetch
    return layer, loader


def _settle(qtbot: QtBot, loader: Any) -> None:
    """Let napari re-slice for the current camera (it does so when the canvas draws), then
    wait until every chunk of the view landed and the layer was refreshed with it."""
    viewer = loader.layer and _viewer_of(qtbot)
    if viewer is not None:
        viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: loader.settled, timeout=30_000)


def _viewer_of(qtbot: QtBot) -> Any:
    import napari

    return napari.current_viewer()


def _viewport_chunks(layer: Any) -> set[tuple[int, ...]]:
    """The chunks of the displayed level that napari's current view (corner pixels) touches."""
    (y0, x0), (y1, x1) = layer.corner_pixels
    return {
        (cy, cx)
        for cy in range(int(y0) // CHUNK, int(y1) // CHUNK + 1)
        for cx in range(int(x0) // CHUNK, int(x1) // CHUNK + 1)
    }


def _reads_at(reads: list[tuple[Any, tuple[int, ...]]], level: int) -> list[tuple[int, ...]]:
    return [coords for identity, coords in reads if str(identity).endswith(f"/{level}")]


def test_only_viewport_chunks_are_read_at_every_level(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    cells_store: Path,
    recorded_reads: list[tuple[Any, tuple[int, ...]]],
) -> None:
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    layer, loader = _open(viewer, cells_store)
    _settle(qtbot, loader)
    # The first view: napari's level for the window, plus the coarsest level (thumbnail).
    first = layer.data_level
    levels_read = {int(str(identity).rsplit("/", 1)[-1]) for identity, _ in recorded_reads}
    assert levels_read <= {first, 2}
    assert set(_reads_at(recorded_reads, first)) <= _viewport_chunks(layer)
    seen_levels = set()
    for zoom in (0.5, 1.6, 4.0):  # napari shows levels 2, 1 and 0 in a 650 x 543 canvas
        viewer.scene.camera.center = (0, 700 * 0.25, 900 * 0.25)
        viewer.scene.camera.zoom = zoom
        _settle(qtbot, loader)
        level = layer.data_level
        seen_levels.add(level)
        cache = shared_cache()
        source = layer.data[level].array.source
        ready_before = {
            key.inclusive_min
            for key, state in cache.states().items()
            if state is ChunkState.READY and key.source == source.identity
        }
        recorded_reads.clear()
        viewer.scene.camera.center = (0, 1300 * 0.25, 1100 * 0.25)  # move within the level
        _settle(qtbot, loader)
        assert layer.data_level == level
        wanted = _viewport_chunks(layer)
        read = _reads_at(recorded_reads, level)
        # Exactly the view's chunks that were not resident yet, each once, nothing else.
        missing = {c for c in wanted if (c[0] * CHUNK, c[1] * CHUNK) not in ready_before}
        assert sorted(read) == sorted(missing), f"level {level}"
        assert {identity for identity, _ in recorded_reads} <= {source.identity}
        assert all(cache.state(ChunkRef.of(source, c).key) is ChunkState.READY for c in wanted)
    assert seen_levels == {0, 1, 2}


def test_pan_reads_only_the_new_chunks(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    cells_store: Path,
    recorded_reads: list[tuple[Any, tuple[int, ...]]],
) -> None:
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    layer, loader = _open(viewer, cells_store)
    viewer.scene.camera.zoom = 4.0  # 1 screen pixel per level-0 pixel (scale 0.25 µm)
    viewer.scene.camera.center = (0, 600 * 0.25, 600 * 0.25)
    _settle(qtbot, loader)
    assert layer.data_level == 0
    before = _viewport_chunks(layer)
    recorded_reads.clear()
    viewer.scene.camera.center = (0, 600 * 0.25, 1000 * 0.25)  # pan 400 px to the right
    _settle(qtbot, loader)
    after = _viewport_chunks(layer)
    assert after - before
    assert sorted(_reads_at(recorded_reads, 0)) == sorted(after - before)


def test_a_slow_source_never_blocks_slicing(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    cells_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = threading.Event()
    original = ZarrChunkSource.read_chunk

    def gated(self: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
        # Storage that does not answer until the test opens the gate.
        if not gate.wait(timeout=60):
            raise TimeoutError("gate never opened")
        return original(self, coords)

    monkeypatch.setattr(ZarrChunkSource, "read_chunk", gated)
    # Contrast limits come from the OME metadata, so opening needs no chunk at all.
    viewer = make_napari_viewer(show=True)
    layer, loader = _open(viewer, cells_store)
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, 500, 500)
    layer.refresh()  # slicing with every chunk blocked in storage returns ...
    assert not loader.complete
    shown = np.asarray(layer._slice.image.raw)
    assert (shown == 0).all()  # ... showing the placeholder (the fill value), not wrong pixels
    gate.set()
    qtbot.waitUntil(lambda: not layer.loaded, timeout=30_000)  # napari shows it loading
    _settle(qtbot, loader)
    assert layer.loaded
    assert np.asarray(layer._slice.image.raw).any()


def test_a_failed_chunk_is_reported_once_and_shown_empty(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    from napari.utils.notifications import notification_manager

    (cells_store / "0" / "c" / "4" / "4").write_bytes(b"not a blosc frame")
    viewer = make_napari_viewer(show=True)
    layer, loader = _open(viewer, cells_store)
    shown: list[str] = []
    notification_manager.notification_ready.connect(lambda n: shown.append(str(n.message)))
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, 1150 * 0.25, 1150 * 0.25)  # chunk (4, 4) in the middle
    _settle(qtbot, loader)
    qtbot.waitUntil(lambda: len(shown) >= 1, timeout=10_000)
    for _ in range(3):  # more slices of the same view: no new notification
        layer.refresh()
        _settle(qtbot, loader)
    failures = [m for m in shown if "failed to load" in m]
    assert len(failures) == 1
    assert "c/4/4" in failures[0]
    (y0, x0), _ = layer.corner_pixels
    raw = np.asarray(layer._slice.image.raw)
    bad = raw[1024 - y0 : 1280 - y0, 1024 - x0 : 1280 - x0]
    assert bad.size
    assert (bad == 0).all()
    good = raw[: 1024 - y0, : 1024 - x0]
    np.testing.assert_array_equal(good, synthetic_cells(y0, x0, good.shape))


def test_screenshot_pixels_equal_the_data(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer, loader = _open(viewer, cells_store, prefetch=True)
    layer.colormap = "gray"
    layer.contrast_limits = (0, 12000)
    height, width = viewer.window._qt_viewer.canvas.size
    # One screen pixel per level-0 pixel (scale 0.25), with screen pixel centres on data
    # pixel centres: a centre on a pixel for an odd extent, on a pixel edge for an even one.
    centre_y = 1234 + (0.5 if height % 2 == 0 else 0.0)
    centre_x = 987 + (0.5 if width % 2 == 0 else 0.0)
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, centre_y * 0.25, centre_x * 0.25)
    _settle(qtbot, loader)
    assert layer.data_level == 0
    shot = viewer.screenshot(canvas_only=True, flash=False)
    assert shot.shape[:2] == (height, width)
    top = round(centre_y - (height / 2 - 0.5))
    left = round(centre_x - (width / 2 - 0.5))
    data = synthetic_cells(top, left, (height, width))  # NumPy: the generator itself
    expected = np.clip(data / 12000, 0, 1) * 255
    for channel in range(3):
        assert np.abs(shot[..., channel] - expected).max() <= 1
    assert shot[..., 0].std() > 10  # a real image, not a flat placeholder


@pytest.fixture
def async_slicing() -> Any:
    from napari.settings import get_settings

    settings = get_settings()
    before = settings.experimental.async_
    settings.experimental.async_ = True
    yield
    settings.experimental.async_ = before


def test_async_slicing_completes_with_the_data(
    async_slicing: None,
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    cells_store: Path,
) -> None:
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer, loader = _open(viewer, cells_store, prefetch=True)
    viewer.scene.camera.zoom = 4.0
    viewer.scene.camera.center = (0, 1500 * 0.25, 700 * 0.25)
    viewer.window._qt_viewer.canvas.on_draw(None)

    def shows_the_data() -> bool:
        if not loader.settled or layer.data_level != 0:
            return False
        (y0, x0), (y1, x1) = layer.corner_pixels
        raw = np.asarray(layer._slice.image.raw)
        expected = synthetic_cells(int(y0), int(x0), (int(y1 - y0 + 1), int(x1 - x0 + 1)))
        return raw.shape == expected.shape and bool((raw == expected).all())

    qtbot.waitUntil(shows_the_data, timeout=30_000)


def test_3d_view_shows_the_coarsest_level(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    from tests.napari.conftest import write_ome_pyramid

    volume = (np.arange(16 * 256 * 256) % 3001).astype(np.uint16).reshape(16, 256, 256)
    path = tmp_path / "volume.ome.zarr"
    pyramid = write_ome_pyramid(
        path,
        volume,
        levels=2,
        chunks=(4, 64, 64),
        axes=[
            {"name": "z", "type": "space"},
            {"name": "y", "type": "space"},
            {"name": "x", "type": "space"},
        ],
        zarr_format=3,
    )
    viewer = make_napari_viewer(show=True)
    layer, loader = _open(viewer, path)
    # A voxel budget below every level: napari's own choice (the coarsest) stays; the
    # finest level that fits a budget is tests/napari/test_volume.py's subject.
    loader.volume_voxels = 1
    viewer.dims.ndisplay = 3
    _settle(qtbot, loader)
    assert layer.data_level == 1
    qtbot.waitUntil(
        lambda: np.array_equal(np.asarray(layer._slice.image.raw), pyramid[1]), timeout=30_000
    )


def test_a_change_signal_napari_already_read_past_refreshes_nothing(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, cells_store: Path
) -> None:
    """The change signal reaches napari's main thread late (queued behind a paint): by
    then napari may have applied a slice read after the change. The glue refreshes only
    while `ViewController.refresh_pending`; napari does not read, upload and paint the
    same view again."""
    viewer = make_napari_viewer(show=True)
    layer, loader = _open(viewer, cells_store)
    _settle(qtbot, loader)
    applied: list[None] = []
    layer.events.set_data.connect(lambda event=None: applied.append(None))
    assert not loader.controller.refresh_pending
    loader.controller.view_changed.emit()  # a stale signal, as one queued before the slice
    loader._throttle.flush()  # the throttled refresh, now if it was held back
    assert not applied
    viewer.scene.camera.zoom = 4.0  # a new view at level 0: its chunks land and refresh it
    viewer.scene.camera.center = (0, 1500 * 0.25, 700 * 0.25)
    viewer.window._qt_viewer.canvas.on_draw(None)
    applied.clear()
    qtbot.waitUntil(lambda: loader.settled and bool(applied), timeout=30_000)


def test_a_layer_the_viewer_point_lies_outside_is_complete(
    make_napari_viewer: Callable[..., Any], ome_store: Any
) -> None:
    """A 1-plane image beside a 5-plane stack, the viewer at z=2: napari slices the image
    without reading it (outside its extent); the documented wait still completes (issue
    50: `wait_until_complete` returned False at its timeout, the pixels were right)."""
    from napari_lazy_zarr._layer_data import wait_until_complete
    from tests.napari.conftest import omero

    axes = [{"name": n, "type": "space"} for n in "zyx"]
    rng = np.random.default_rng(50)
    stack = rng.integers(1, 200, size=(5, 256, 256), dtype=np.uint8)
    plane = rng.integers(1, 200, size=(1, 256, 256), dtype=np.uint8)
    windows = omero(["#FFFFFF"], [(0.0, 200.0)])
    stack_path, _ = ome_store(
        name="stack.ome.zarr", data=stack, levels=2, chunks=(1, 64, 64), axes=axes,
        zarr_format=3, omero=windows,
    )  # fmt: skip
    plane_path, _ = ome_store(
        name="plane.ome.zarr", data=plane, levels=2, chunks=(1, 64, 64), axes=axes,
        zarr_format=3, omero=windows,
    )  # fmt: skip
    viewer = make_napari_viewer(show=True)
    (shown,) = viewer.open(str(stack_path), plugin="napari-lazy-zarr")
    (outside,) = viewer.open(str(plane_path), plugin="napari-lazy-zarr")
    viewer.dims.set_current_step(0, 2)
    viewer.window._qt_viewer.canvas.on_draw(None)
    assert wait_until_complete(viewer, timeout=60)
    assert outside._slice.empty  # napari read nothing of it at z=2
    stack_loader, plane_loader = loader_of(shown), loader_of(outside)
    assert stack_loader is not None
    assert plane_loader is not None
    latest = stack_loader.controller.latest
    assert latest is not None
    assert latest.complete
    assert latest.request.box[0] == (2, 3)  # the stack shows its plane z=2, whole
    assert plane_loader.controller.latest is None  # nothing of the plane is shown
