"""docs/architecture.md's viewport path, hop by hop, against what runs (issue 46).

`tests/test_docs.py` checks that each function a hop names exists; this test checks that
it is *on the path*: it records every function of the package that runs while a real
viewer opens stores written by zarr-python (a sharded 2D image, a small volume shown in
3D), fills in its view, pans, and a script reads the layer's data exactly — and fails for
any hop whose code did not run. A hop that only runs on another path is listed in
`ELSEWHERE` with the reason.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from napari_lazy_zarr._layer_data import loader_of, wait_until_complete

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytestqt.qtbot import QtBot

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
HOP = re.compile(r"`([\w/]+\.py)::([\w.]+)`")

ELSEWHERE = {
    "core/sources/fetchers.py::ZipFetcher.fetch": "zipped stores only (tests/core/test_layout.py)",
    "core/sources/fetchers.py::RemoteFetcher.fetch": "remote stores only (tests/remote)",
    "core/storage/remote.py::RemoteStore.read_sync": "remote stores only (tests/remote)",
}
"""Hops on another path than this test's (named in the hop as the alternative)."""


def _hops() -> list[str]:
    page = PAGE.read_text(encoding="utf-8")
    section = page.partition("## One viewport, hop by hop")[2].partition("\n## ")[0]
    return [f"{module}::{name}" for module, name in HOP.findall(section)]


class _Calls:
    """The package's functions that start running while recorded (every thread), by
    (path inside the package, qualified name), through `sys.monitoring`."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()
        self._tool = next(i for i in range(6) if sys.monitoring.get_tool(i) is None)

    def _start(self, code: Any, offset: int) -> Any:
        path = code.co_filename.replace("\\", "/")
        if "/napari_lazy_zarr/" in path:
            self.seen.add((path.rpartition("/napari_lazy_zarr/")[2], code.co_qualname))
        return sys.monitoring.DISABLE  # once is enough for each function

    def __enter__(self) -> _Calls:
        monitoring = sys.monitoring
        monitoring.use_tool_id(self._tool, "viewport path")
        monitoring.register_callback(self._tool, monitoring.events.PY_START, self._start)
        monitoring.set_events(self._tool, monitoring.events.PY_START)
        monitoring.restart_events()
        return self

    def __exit__(self, *_: object) -> None:
        monitoring = sys.monitoring
        monitoring.set_events(self._tool, 0)
        monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
        monitoring.free_tool_id(self._tool)

    def ran(self, hop: str) -> bool:
        """Whether the hop's function (or, for a class, one of its methods) ran."""
        module, name = hop.split("::")
        return any(
            path == module and (qualname == name or qualname.startswith(f"{name}."))
            for path, qualname in self.seen
        )


def _stores(folder: Path) -> tuple[Path, Path, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(12)
    image = rng.integers(0, 4000, size=(2048, 2048), dtype=np.uint16)
    sharded = zarr.create_array(
        str(folder / "sharded.zarr"),
        shape=image.shape,
        chunks=(128, 128),
        shards=(512, 512),
        dtype=image.dtype,
    )
    sharded[...] = image
    # Large enough for virtual levels, small enough that 3D settles at level 0 (prepared).
    volume = rng.integers(0, 250, size=(32, 1024, 1024), dtype=np.uint8)
    cube = zarr.create_array(
        str(folder / "volume.zarr"), shape=volume.shape, chunks=(16, 256, 256), dtype=volume.dtype
    )
    cube[...] = volume
    return folder / "sharded.zarr", folder / "volume.zarr", image


def _settle(viewer: Any) -> None:
    """napari re-slices on draw; then the documented wait (`wait_until_complete`)."""
    viewer.window._qt_viewer.canvas.on_draw(None)
    assert wait_until_complete(viewer, timeout=120)


def test_every_hop_of_the_viewport_path_runs(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    hops = _hops()
    assert len(hops) >= 20, "the hop-by-hop section is missing or names little code"
    sharded, volume, image = _stores(tmp_path)
    viewer = make_napari_viewer(show=True)
    with _Calls() as calls:
        (layer,) = viewer.open(str(sharded), plugin="napari-lazy-zarr")
        _settle(viewer)
        viewer.scene.camera.zoom = 2.0
        viewer.scene.camera.center = (600, 900)  # a pan: new chunks at a finer level
        _settle(viewer)
        region = np.asarray(layer.data[0][100:300, 200:700])  # a script's exact read
        viewer.layers.clear()
        (cube,) = viewer.open(str(volume), plugin="napari-lazy-zarr")
        viewer.dims.ndisplay = 3
        loader = loader_of(cube)
        assert loader is not None
        qtbot.waitUntil(lambda: cube.locked_data_level == 0, timeout=120_000)
        _settle(viewer)
    np.testing.assert_array_equal(region, image[100:300, 200:700])
    missing = [hop for hop in hops if hop not in ELSEWHERE and not calls.ran(hop)]
    assert not missing, f"hops naming code that did not run on the path: {missing}"
    stale = [hop for hop in ELSEWHERE if hop not in hops]
    assert not stale, f"ELSEWHERE names hops the page no longer has: {stale}"


def test_the_path_check_can_fail() -> None:
    calls = _Calls()
    calls.seen = {("core/viewport/controller.py", "ViewController.read")}
    assert calls.ran("core/viewport/controller.py::ViewController.read")
    assert calls.ran("core/viewport/controller.py::ViewController")
    assert not calls.ran("core/viewport/controller.py::ViewController._answer")
