"""A 10⁶ x 10⁶ store of 1-pixel chunks in a real viewer: every view bounded (issue 22).

Only the metadata and one chunk are written. Structural facts only (timings on a
shared 2-core machine would flake; `python -m bench.huge_grid` measures them):
the layer gets virtual levels down to 245² pixels, every view napari reads plans at
most `VIEW_CHUNKS` chunks costing at most `VIEW_STORED_CHUNKS` stored chunks, at a
coarse level, also zoomed in to level 0 — and nothing raises.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import watch_viewer
from napari_lazy_zarr.core.viewport import ViewController
from napari_lazy_zarr.core.viewport._coarser import VIEW_CHUNKS, VIEW_STORED_CHUNKS

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest
    from pytestqt.qtbot import QtBot


def test_a_trillion_chunk_store_opens_with_bounded_views(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "huge.zarr"
    path.mkdir()
    meta = {
        "zarr_format": 2,
        "shape": [10**6, 10**6],
        "chunks": [1, 1],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    (path / ".zarray").write_text(json.dumps(meta))
    (path / "0.0").write_bytes(bytes([200]))
    frames: list[Any] = []
    read = ViewController.read

    def recorded(self: ViewController, *args: Any, **kwargs: Any) -> Any:
        data = read(self, *args, **kwargs)
        frames.append((self, self.latest))
        return data

    monkeypatch.setattr(ViewController, "read", recorded)
    viewer = make_napari_viewer()
    watch_viewer(viewer)
    (layer,) = viewer.open(str(path), plugin="napari-lazy-zarr")
    loader = loader_of(layer)
    assert loader is not None
    loader.prefetch = False
    sources = loader.controller.sources
    assert len(sources) == 13
    assert sources[-1].shape == (245, 245)
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: len(frames) >= 2, timeout=30_000)
    # Zoomed in on the top-left corner: napari reads level 0.
    viewer.scene.camera.center = (500, 500)
    viewer.scene.camera.zoom = 1.0
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: any(f.request.level == 0 for _, f in frames if f), timeout=30_000)
    by_identity = {source.identity: source for source in sources}
    for _controller, frame in frames:
        if frame is None:
            continue
        served = {key.source for key in frame.keys}
        assert len(served) == 1
        (identity,) = served
        level = by_identity[identity]
        assert len(frame.keys) <= VIEW_CHUNKS
        assert len(frame.keys) * level.chunk_cost((0, 0)) <= VIEW_STORED_CHUNKS
        if frame.request.level == 0:
            assert identity != sources[0].identity  # served from a coarser level
