"""A removed layer's chunks are forgotten at removal (issue 22): each reopen of a store is
a new identity, so they can never be read again; another layer's chunks stay."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import shared_cache, watch_viewer
from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.core.sample import write_sample_ome_zarr

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot


def _open(viewer: Any, path: Path) -> tuple[Any, Any]:
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    return layer, loader


def test_removing_a_layer_forgets_its_chunks_only(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    path = tmp_path / "cells.ome.zarr"
    write_sample_ome_zarr(path, size=1024, chunk=256, smallest=256)
    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    first, first_loader = _open(viewer, path)
    second, second_loader = _open(viewer, path)
    for loader in (first_loader, second_loader):
        qtbot.waitUntil(lambda loader=loader: loader.settled, timeout=30_000)
    cache = shared_cache()
    mine = {source.identity for source in first_loader.controller.sources}
    theirs = {source.identity for source in second_loader.controller.sources}
    assert not mine & theirs  # each open is a new identity
    held = [k for k, s in cache.states().items() if k.source in mine]
    assert held
    assert any(cache.state(k) is ChunkState.READY for k in held)
    resident = cache.statistics.resident_bytes
    viewer.layers.remove(first)
    states = cache.states()
    assert not [k for k in states if k.source in mine], "a removed layer's chunks stayed"
    assert [k for k, s in states.items() if k.source in theirs and s is ChunkState.READY]
    assert cache.statistics.resident_bytes < resident
    viewer.layers.remove(second)
    assert not [k for k in cache.states() if k.source in theirs]
