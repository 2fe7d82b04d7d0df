"""Failed chunks reach the user: napari notifications, once per failure, a storm summarised.

Stores are written by zarr-python (and a plate by ome-zarr-py); chunk files are
then overwritten with bytes that do not decode, as a damaged disk or an
interrupted copy leaves them. Notifications are recorded from napari's own
notification manager (`notification_ready`), as its toasts receive them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.core.sample import write_sample_ome_zarr
from tests.conformance.cases import write_plate
from tests.conftest import smooth_data

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

GARBAGE = b"not a zstd frame"
_SUMMARY = re.compile(r"(\d+) more chunks? failed to load")


def _ours(shown: list[str]) -> list[str]:
    return [message for message in shown if message.startswith("napari-lazy-zarr: layer")]


def _plain_store(tmp_path: Path, *, size: int = 2048, chunk: int = 256) -> Path:
    """One zarr-python array (no pyramid: the plugin adds virtual levels), Zstd chunks."""
    path = tmp_path / "plain.zarr"
    array = zarr.create_array(str(path), shape=(size, size), chunks=(chunk, chunk), dtype="uint16")
    array[...] = smooth_data((size, size))
    return path


def _open(viewer: Any, path: Path) -> tuple[Any, Any]:
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    return layer, loader


def _idle(qtbot: QtBot, viewer: Any, *loaders: Any) -> None:
    """napari sliced the current view, it settled, and the cache has nothing left to load."""
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: all(loader.settled for loader in loaders), timeout=30_000)
    cache = loaders[0].controller.cache

    def idle() -> bool:
        stats = cache.statistics
        return stats.queued == stats.in_flight == stats.deferred == 0

    qtbot.waitUntil(idle, timeout=30_000)


def _failed(loader: Any, level: int = 0) -> set[Any]:
    identity = loader.controller.sources[level].identity
    return {
        key
        for key, state in loader.controller.cache.states().items()
        if state is ChunkState.FAILED and key.source == identity
    }


def test_a_corrupted_chunk_in_view_is_reported_once_naming_it_and_its_cause(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    path = _plain_store(tmp_path)
    (path / "c" / "4" / "4").write_bytes(GARBAGE)  # in the middle of the home view
    viewer = make_napari_viewer(show=True)
    # Its failure lands while napari adds the layer, before the plugin attaches to it.
    layer, loader = _open(viewer, path)
    _idle(qtbot, viewer, loader)
    qtbot.waitUntil(lambda: len(_ours(notices)) >= 1, timeout=15_000)
    for _ in range(3):  # more slices of the same view: no new notification
        layer.refresh()
        _idle(qtbot, viewer, loader)
    loader.flush_failures()
    (message,) = _ours(notices)
    assert len(_failed(loader)) == 1  # the stored chunk (virtual levels leave it out)
    assert f"layer {layer.name!r}" in message
    assert "chunk L0 (4, 4) [1024:1280, 1024:1280] failed to load" in message
    assert "chunk 'c/4/4'" in message  # the store's own name of it
    assert "ZstdError" in message  # the cause
    assert "Chunk inspector" in message
    assert "'Retry all failed'" in message
    assert "cache.retry_failed()" in message
    # Never "not retryable" and then how to retry: the reader did not retry a permanent
    # error, the user may (once the data is fixed).
    assert "retryable" not in message
    assert "a permanent error, not retried" in message
    assert "To read it again (e.g. once the data is fixed)" in message


def test_five_hundred_failed_chunks_make_a_handful_of_notifications_with_a_summary(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    path = _plain_store(tmp_path, chunk=64)  # 32 x 32 = 1024 stored chunks
    files = [f for f in (path / "c").rglob("*") if f.is_file()]
    assert len(files) == 1024
    for file in files:
        file.write_bytes(GARBAGE)
    viewer = make_napari_viewer(show=True)
    layer, loader = _open(viewer, path)
    _idle(qtbot, viewer, loader)
    failed = len(_failed(loader))
    assert failed >= 500  # the home view needs most of the image

    def reported() -> int:
        loader.flush_failures()  # what the throttle still holds back
        ours = _ours(notices)
        summaries = [int(m.group(1)) for m in map(_SUMMARY.search, ours) if m]
        return len(ours) - len(summaries) + sum(summaries)

    # Every failure is told, individually or counted in a summary: none is dropped.
    qtbot.waitUntil(lambda: reported() == failed, timeout=15_000)
    ours = _ours(notices)
    summaries = [m for m in ours if _SUMMARY.search(m)]
    print(f"\n{failed} failed chunks: {len(ours)} notifications, {len(summaries)} summaries")
    assert len(summaries) >= 1
    assert len(ours) - len(summaries) <= 3
    assert len(ours) <= 8, ours
    assert all("most common cause: ZstdError" in m for m in summaries), summaries
    assert all(f"layer {layer.name!r}" in m for m in ours)


def test_a_retry_that_fails_again_says_so_once(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    path = _plain_store(tmp_path)
    (path / "c" / "4" / "4").write_bytes(GARBAGE)
    viewer = make_napari_viewer(show=True)
    _layer, loader = _open(viewer, path)
    _, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    qtbot.waitUntil(lambda: inspector.live, timeout=5_000)  # docked and shown
    _idle(qtbot, viewer, loader)
    qtbot.waitUntil(lambda: len(_ours(notices)) == 1, timeout=15_000)
    (key,) = _failed(loader)
    inspector.retry_button.native.click()  # what the notification tells the user to click
    assert [e.reason for e in loader.controller.cache.events() if e.key == key][-1] == "retry"
    qtbot.waitUntil(
        lambda: loader.controller.cache.state(key) is ChunkState.FAILED, timeout=15_000
    )
    _idle(qtbot, viewer, loader)
    qtbot.waitUntil(lambda: len(_ours(notices)) >= 2, timeout=15_000)
    loader.flush_failures()
    first, again = _ours(notices)
    assert "L0 (4, 4)" in first
    assert "failed to load" in first
    assert "L0 (4, 4)" in again
    assert "failed again after retry" in again
    assert "ZstdError" in again


def test_a_plate_field_of_the_wrong_shape_is_told_once_by_its_path_and_well(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    written = write_plate(tmp_path, 2, 3, 2)
    # Field 1 of well B/3 rewritten with another shape: it fails, the rest of the plate shows.
    zarr.create_array(
        str(written.path / "B/3/1/s0"), shape=(2, 60, 64), chunks=(1, 32, 32), dtype="u2",
        zarr_format=2, overwrite=True,
    )  # fmt: skip
    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(written.path), plugin="napari-lazy-zarr")
    loaders = [loader_of(layer) for layer in layers]
    for layer in layers:
        layer.visible = True
    viewer.reset_view()
    _idle(qtbot, viewer, *loaders)
    assert all(layer.data_level == 0 for layer in layers)  # the field's level s0 is shown
    for layer, loader in zip(layers, loaders, strict=True):
        assert _failed(loader), layer.name  # the field's 2 x 2 chunks of this channel

    qtbot.waitUntil(lambda: len(_ours(notices)) >= 1, timeout=15_000)
    for loader in loaders:
        loader.flush_failures()
    # One warning for the field, however many chunks and channel layers met it.
    (message,) = _ours(notices)
    assert re.search(r"layers? '", message)
    assert any(f"'{layer.name}'" in message for layer in layers), message
    assert "plate field B/3/1/s0 (well B/3, field 1)" in message
    assert "differs from the plate's first field: shape (2, 60, 64)" in message


def test_a_prefetched_chunk_that_fails_is_reported(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    path = tmp_path / "cells.ome.zarr"
    write_sample_ome_zarr(path, size=2048, chunk=256, smallest=512)
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer, loader = _open(viewer, path)
    loader.prefetch = True
    viewer.scene.camera.zoom = 4.0  # level 0, a few chunks around (4, 4)
    viewer.scene.camera.center = (0, 1150 * 0.25, 1150 * 0.25)
    _idle(qtbot, viewer, loader)
    assert loader.controller.view_level == 0
    identity = loader.controller.sources[0].identity
    ready = {
        key
        for key, state in loader.controller.cache.states().items()
        if state is ChunkState.READY and key.source == identity
    }
    prefetched = sorted(ready - loader.controller.view_keys, key=lambda k: k.inclusive_min)
    assert prefetched  # the ring around the view
    key = prefetched[0]
    cy, cx = (lo // 256 for lo in key.inclusive_min)
    (path / "0" / "c" / str(cy) / str(cx)).write_bytes(GARBAGE)
    # The ring is read again, from the damaged file.
    assert loader.controller.cache.evict_unpinned() > 0
    layer.refresh()
    # The ring is asked for again from the controller's dispatch thread after the read:
    # `_idle` can find the cache idle before that request is made.
    cache = loader.controller.cache
    qtbot.waitUntil(lambda: cache.state(key) is ChunkState.FAILED, timeout=30_000)
    _idle(qtbot, viewer, loader)
    assert key not in loader.controller.view_keys  # not on screen
    qtbot.waitUntil(lambda: len(_ours(notices)) >= 1, timeout=15_000)
    loader.flush_failures()
    (message,) = _ours(notices)
    assert f"chunk L0 ({cy}, {cx})" in message
    np.testing.assert_array_equal(  # the view itself still shows the data
        np.asarray(layer._slice.image.raw).any(), True
    )


def test_a_reference_to_a_missing_file_names_the_file(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    import json

    import h5py
    from kerchunk.hdf import SingleHdf5ToZarr

    h5 = tmp_path / "scan.h5"
    with h5py.File(h5, "w") as handle:
        handle.create_dataset(
            "data", data=smooth_data((200, 300)), chunks=(200, 300), compression="gzip"
        )
    manifest = tmp_path / "scan.json"
    manifest.write_text(json.dumps(SingleHdf5ToZarr(str(h5)).translate()))
    h5.unlink()  # the references outlive the file they point into
    viewer = make_napari_viewer(show=True)
    layer, loader = _open(viewer, manifest)
    _idle(qtbot, viewer, loader)
    qtbot.waitUntil(lambda: len(_ours(notices)) >= 1, timeout=15_000)
    loader.flush_failures()
    (message,) = _ours(notices)
    assert f"layer {layer.name!r}" in message
    assert str(h5) in message  # the file the reference names
