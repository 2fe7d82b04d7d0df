"""Through a real napari viewer: the virtual overview of a plain array is built only as far
as napari shows it (issue 24). Zoomed in at full resolution, the stored chunks read are
the view's, not every chunk under the thumbnail; zoomed out to a virtual level, the overview
fills in under the view, each stored chunk read once, with NumPy's pixels."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import contrast_sample, read_zarr, shared_cache, watch_viewer
from napari_lazy_zarr.core import ChunkRef, ChunkState
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

    from napari_lazy_zarr.core import ChunkEvent

SIZE = 4096
CHUNK = 256
STORED = (SIZE // CHUNK) ** 2  # 256 stored chunks under the overview


@pytest.fixture
def plain_store(tmp_path: Path) -> tuple[Path, np.ndarray[Any, Any]]:
    """A 4096² uint16 plain Zarr v3 array (no pyramid) in 256² chunks."""
    rng = np.random.default_rng(24)
    data = rng.integers(1, 60_000, size=(SIZE, SIZE), dtype=np.uint16)
    path = tmp_path / "plain.zarr"
    array = zarr.create_array(
        str(path), shape=data.shape, chunks=(CHUNK, CHUNK), dtype="u2", fill_value=0
    )
    array[...] = data
    return path, data


def _settle(qtbot: QtBot, viewer: Any, loader: Any) -> None:
    """Let napari slice for the camera, wait until the layer is settled and the cache idle
    (nothing queued nor loading: no work left behind that would read later)."""
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: loader.settled, timeout=60_000)
    cache = shared_cache()

    def idle() -> bool:
        counters = cache.counters()
        return counters.in_flight == 0 and counters.queued == 0

    qtbot.waitUntil(idle, timeout=60_000)


def _viewport_chunks(layer: Any) -> set[tuple[int, int]]:
    (y0, x0), (y1, x1) = layer.corner_pixels
    return {
        (cy, cx)
        for cy in range(int(y0) // CHUNK, int(y1) // CHUNK + 1)
        for cx in range(int(x0) // CHUNK, int(x1) // CHUNK + 1)
    }


def test_a_zoomed_in_view_does_not_pay_for_the_overview(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    plain_store: tuple[Path, np.ndarray[Any, Any]],
    recorded_reads: list[tuple[Any, tuple[int, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, data = plain_store
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    watch_viewer(viewer)
    ((levels, kwargs, _),) = read_zarr(str(path))
    assert len(levels) == 4  # 4096, 2048, 1024, 512: three virtual levels
    sample = contrast_sample(levels[0].loader)  # its contrast sample, read before the gate
    assert sample is not None
    sample.future.result(timeout=30)
    # From here on stored reads wait for the gate: napari's first slice (its home view, the
    # whole coarsest level) is superseded by the zoomed-in view before any read lands, as
    # over a slow store. On a local disk it would have read everything meanwhile.
    gate = threading.Event()
    recording = ZarrChunkSource.read_chunk

    def gated(self: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
        assert gate.wait(60), "the test never opened the gate"
        return recording(self, coords)

    monkeypatch.setattr(ZarrChunkSource, "read_chunk", gated)
    cache = shared_cache()
    concurrency = cache.concurrency
    stored = ChunkRef.of(levels[0].array.source, (0, 0)).key.source
    started: dict[tuple[int, ...], float] = {}  # stored chunk -> when its load started

    def on_moves(events: tuple[ChunkEvent, ...]) -> None:  # on the thread that moved them
        for event in events:
            if event.key.source == stored and event.current is ChunkState.LOADING:
                coords = tuple(lo // CHUNK for lo in event.key.inclusive_min)
                started.setdefault(coords, event.time)

    cache.state_changed.connect(on_moves)
    opened = len(recorded_reads)
    layer = viewer.add_image(levels, **kwargs)
    loader = loader_of(layer)
    assert loader is not None
    loader.prefetch = False
    moving = time.monotonic()  # the clock of the cache's events
    # As the view benchmark does: one screen pixel per stored pixel, off-centre.
    viewer.scene.camera.zoom = 1.0
    viewer.scene.camera.center = (0, 600, 600)
    viewer.window._qt_viewer.canvas.on_draw(None)  # napari asks for the zoomed-in view
    gate.set()
    _settle(qtbot, viewer, loader)
    assert layer.data_level == 0
    wanted = _viewport_chunks(layer)
    # The loads napari's first slice had started before the cache saw the zoomed-in view
    # (its first load of the view's chunks: the most urgent, once asked for): `concurrency`
    # of them, or more if they waited at the gate longer than the cache's stall watchdog
    # allows (a slow machine), which then starts more workers, as late as while the camera
    # moves and the controller asks. Timed by the cache's own events: a load may reach the
    # source well after it started.
    asked = min(started[c] for c in wanted if c in started and started[c] >= moving)
    held = {coords for coords, at in started.items() if at < asked}
    reads = [coords for _, coords in recorded_reads[opened:]]
    # The view's chunks, and beyond them only loads started before it was asked for:
    # never the 256 stored chunks under the thumbnail.
    assert wanted <= set(reads) | {c for _, c in recorded_reads[:opened]}
    assert set(reads) - wanted <= held, sorted(set(reads) - wanted - held)
    assert len(set(reads)) < STORED // 4, len(set(reads))
    source = levels[0].array.source
    for coords in wanted:
        key = ChunkRef.of(source, coords).key
        region = tuple(
            slice(a, b) for a, b in zip(key.inclusive_min, key.exclusive_max, strict=True)
        )
        np.testing.assert_array_equal(cache.lookup(key), data[region])

    # Zoomed out to a virtual level: the overview fills in under the view, coarse first.
    viewer.scene.camera.zoom = 0.3
    viewer.scene.camera.center = (0, SIZE / 2, SIZE / 2)
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: loader.controller.view_level == 1, timeout=60_000)
    _settle(qtbot, viewer, loader)
    assert layer.data_level == 1
    every = Counter(coords for _, coords in recorded_reads)
    assert max(every.values()) == 1  # each stored chunk read once, for every level
    assert len(every) > len(wanted) + concurrency
    thumbnail = levels[-1].array.source
    (y0, x0), (y1, x1) = layer.corner_pixels  # level 1; the thumbnail is level 3 (1/4)
    edge = thumbnail.grid[0].chunk_size(0)
    under = [
        (cy, cx)
        for cy in range(int(y0) // 4 // edge, int(y1) // 4 // edge + 1)
        for cx in range(int(x0) // 4 // edge, int(x1) // 4 // edge + 1)
    ]
    assert 0 < len(under) < (512 // edge) ** 2  # a part of the overview, not all of it
    overview = data[::8, ::8]
    for coords in under:
        key = ChunkRef.of(thumbnail, coords).key
        region = tuple(
            slice(a, b) for a, b in zip(key.inclusive_min, key.exclusive_max, strict=True)
        )
        np.testing.assert_array_equal(cache.lookup(key), overview[region])
