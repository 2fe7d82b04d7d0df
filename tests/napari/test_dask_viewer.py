"""A dask graph in a real napari viewer: a filter over a zarr store, shown without blocking.

The layer comes from `napari_lazy_zarr.dask.add_image`; its chunks are computed
off the main thread (locally, then on a threaded `LocalCluster`), the view
completes with exactly the graph's values (NumPy computes the oracle), and
panning shows the new region.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import pytest

from napari_lazy_zarr.core.sources.dask import DaskSource
from napari_lazy_zarr.dask import add_image
from tests.napari.test_composite_viewer import _shown
from tests.napari.test_viewer import _settle

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from distributed import Client
    from pytestqt.qtbot import QtBot

SIZE = 1536
COMPUTED_ON: set[str] = set()


def blur(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A 3x3 box filter (records the thread it ran on)."""
    COMPUTED_ON.add(threading.current_thread().name)
    padded = block.astype(np.float32)
    out = sum(
        np.roll(np.roll(padded, dy, axis=0), dx, axis=1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
    )
    return np.asarray(out, dtype=np.float32) / 9


@pytest.fixture
def graph(
    make_store: Callable[..., tuple[Path, np.ndarray[Any, Any]]],
) -> tuple[da.Array, np.ndarray[Any, Any]]:
    """A blur over a zarr store, and its values computed by dask's synchronous scheduler."""
    path, _ = make_store((SIZE, SIZE), (256, 256))
    smooth = da.from_zarr(str(path)).map_overlap(
        blur, depth=1, boundary="reflect", dtype=np.float32, meta=np.empty((0, 0), np.float32)
    )
    expected = smooth.compute(scheduler="sync")
    COMPUTED_ON.clear()
    return smooth, expected


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    from distributed import Client, LocalCluster

    with (
        dask.config.set({"distributed.scheduler.worker-saturation": 1.0}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _pan_and_check(viewer: Any, qtbot: QtBot, layer: Any, expected: Any) -> None:
    from napari_lazy_zarr._layer_data import loader_of

    loader = loader_of(layer)
    assert loader is not None
    viewer.scene.camera.zoom = 2.0
    for center in ((300, 400), (300, 900), (1100, 900)):  # pan right, then down
        viewer.scene.camera.center = center
        _settle(qtbot, loader)
        assert layer.data_level == 0
        shown, where = _shown(layer)
        np.testing.assert_allclose(shown, expected[where], rtol=1e-6)


def test_a_dask_graph_pans_and_completes_off_the_main_thread(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    graph: tuple[da.Array, np.ndarray[Any, Any]],
) -> None:
    smooth, expected = graph
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer = add_image(viewer, smooth, contrast_limits=(0, 65535), name="blurred")
    assert layer.multiscale
    assert layer.name == "blurred"
    assert [level.shape for level in layer.data] == [(SIZE, SIZE), (768, 768), (384, 384)]
    assert isinstance(layer.data[0].array.source, DaskSource)
    _pan_and_check(viewer, qtbot, layer, expected)
    assert COMPUTED_ON  # the filter ran...
    assert threading.main_thread().name not in COMPUTED_ON  # ...never on napari's thread
    viewer.layers.remove(layer)


def test_a_dask_graph_on_a_cluster(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    graph: tuple[da.Array, np.ndarray[Any, Any]],
    client: Client,
) -> None:
    smooth, expected = graph
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    layer = add_image(viewer, smooth, client=client, contrast_limits=(0, 65535))
    source = layer.data[0].array.source
    assert source.runner.client is client
    _pan_and_check(viewer, qtbot, layer, expected)
    assert source.runner.submitted > 0
    assert threading.main_thread().name not in COMPUTED_ON
    viewer.layers.remove(layer)


def test_a_float_layer_takes_interim_limits_from_its_first_chunks(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot
) -> None:
    """Until the contrast sample is computed (from the coarsest level, held here), the first
    chunks the view shows set the limits: never the provisional (0, 1) over values in the
    thousands (a solid white layer for the ~10 s a real graph's sample took)."""
    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr._reader import configure
    from napari_lazy_zarr.core.sources.dask import DaskRunner

    gate = threading.Event()

    def held(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        assert gate.wait(timeout=60)
        return block

    base = da.from_array(
        np.linspace(1000, 5000, SIZE * SIZE, dtype=np.float32).reshape(SIZE, SIZE),
        chunks=256,
    )
    # A pyramid given as dask arrays: level 0 computes at once, the coarse levels (the
    # sample's, the thumbnail's) wait for the gate.
    pyramid = [base] + [
        da.coarsen(np.mean, base, {0: f, 1: f}).map_blocks(
            held, dtype=np.float32, meta=np.empty((0, 0), np.float32)
        )
        for f in (2, 4)
    ]
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(800, 600)
    runner = DaskRunner(num_workers=16)  # threads the held levels do not all take
    configure(concurrency=16)  # the plugin's shared cache (this test's own)
    try:
        layer = add_image(viewer, pyramid, client=runner)
        assert layer.name == f"dask {SIZE}×{SIZE} float32"  # readable, not a token hash
        assert tuple(layer.contrast_limits) == (0.0, 1.0)  # provisional: nothing computed
        viewer.scene.camera.center = (200, 200)
        viewer.scene.camera.zoom = 3.0  # level 0
        viewer.window._qt_viewer.canvas.on_draw(None)  # napari re-slices on draw
        qtbot.waitUntil(lambda: tuple(layer.contrast_limits) != (0.0, 1.0), timeout=10_000)
        assert layer.data_level == 0
        low, high = layer.contrast_limits
        shown = np.asarray(loader_of(layer).controller.latest.data)
        assert low <= float(shown.min())  # what is shown is within them
        assert 1000 < float(shown.max()) <= high
        assert not gate.is_set()  # ... before the sample could be computed
    finally:
        gate.set()
    viewer.layers.remove(layer)
    runner.close()
