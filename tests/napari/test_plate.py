"""HCS plates (ome-zarr-py's `write_plate_metadata` / `write_well_metadata`) as one mosaic.

Wells by row and column, a well's fields side by side, one layer per channel;
each field's metadata is fetched by the worker that reads its first chunk, so
what the first pixels wait for is the plate's, the first well's and the first
field's metadata, then the view's chunks. Over a 100 ms loopback server the
test counts requests (never asserts wall-clock times) and prints what it took.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import read_zarr, watch_viewer
from napari_lazy_zarr.core.formats.plate import describe_plate, plate_level_sources
from napari_lazy_zarr.core.sources.zarr import open_zarr_source
from tests.conformance.cases import write_plate
from tests.remote.server import FaultyServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

_METADATA = (".zattrs", ".zgroup", ".zarray", ".zmetadata", "zarr.json")


def _metadata_requests(requests: dict[str, int]) -> int:
    return sum(n for key, n in requests.items() if key.endswith(_METADATA))


def test_a_96_well_plate_over_a_slow_server(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path
) -> None:
    rows, columns, fields = 8, 12, 2
    written = write_plate(tmp_path, rows, columns, fields)
    with FaultyServer(tmp_path) as server:
        server.faults.latency = 0.1
        viewer = make_napari_viewer(show=True)
        viewer.window.resize(900, 700)
        watch_viewer(viewer)
        # The main thread's longest wait between event-loop passes while the plate loads.
        ticks: list[float] = []
        from qtpy.QtCore import QTimer

        timer = QTimer()
        timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
        timer.start(10)
        url = f"{server.url}/plate.ome.zarr"
        # The reader alone: what opening fetches before napari reads any pixel.
        described = read_zarr(url)
        at_open = dict(server.faults.requests)
        print("\nopening:", sorted(at_open.items()))
        # The first field's image names its channels, as napari-ome-zarr's plate layers are.
        assert [kwargs["name"] for _, kwargs, _ in described] == ["image: ch0", "image: ch1"]
        # The plate's, the first well's and the first field's metadata only (whatever the
        # plate's size: zarr-python probes both formats for the plate and the field).
        assert _metadata_requests(at_open) <= 30
        elsewhere = ("plate.ome.zarr/A/1/", "plate.ome.zarr/.", "plate.ome.zarr/zarr.json")
        assert [key for key in at_open if not key.startswith(elsewhere)] == []
        for data, _, _ in described:
            data[0].loader.controller.close()
        server.faults.requests.clear()
        started = time.perf_counter()
        layers = viewer.open(url, plugin="napari-lazy-zarr")
        opened = time.perf_counter() - started
        del ticks[:]  # napari calls readers on the main thread: count the gaps after it
        assert [layer.name for layer in layers] == ["image: ch0", "image: ch1"]  # a mosaic each
        first = layers[0]
        assert first.data[0].shape == (rows * 64, columns * fields * 64)
        assert len(first.data) == 3  # the fields' own levels
        viewer.window._qt_viewer.canvas.on_draw(None)
        ticks.append(time.perf_counter())

        def shows_pixels() -> bool:
            return bool(np.asarray(first._slice.image.raw).any())

        qtbot.waitUntil(shows_pixels, timeout=30_000)
        first_pixels = time.perf_counter() - started
        at_first_pixels = dict(server.faults.requests)
        loaders = [loader_of(layer) for layer in layers]
        qtbot.waitUntil(
            lambda: all(lo is not None and lo.settled for lo in loaders), timeout=60_000
        )
        settled = time.perf_counter() - started
        timer.stop()
        gaps = np.diff(ticks)
        level = first.data_level
        # Each field at the displayed level is one metadata document plus its chunks.
        opened_fields = {
            key.rsplit("/", 2)[0] for key in server.faults.requests if key.endswith(".zarray")
        }
        print(
            f"\n96-well plate, 2 fields, 3 levels, 100 ms latency: open {opened:.2f} s, "
            f"first pixels {first_pixels:.2f} s "
            f"({_metadata_requests(at_first_pixels)} "
            f"metadata requests, {sum(at_first_pixels.values())} in all), settled "
            f"{settled:.2f} s ({_metadata_requests(server.faults.requests)} metadata, "
            f"{sum(server.faults.requests.values())} in all, {len(opened_fields)} field "
            f"arrays opened) at level {level}; longest main-thread gap after open "
            f"{gaps.max() * 1e3:.0f} ms"
        )
        # Far fewer metadata requests than wells x (well + fields x (field + levels)).
        assert _metadata_requests(at_first_pixels) < rows * columns * (1 + fields * 4)
        # The displayed pixels are the writer's: blocking read of the displayed level.
        for channel, layer in enumerate(layers):
            loader = loader_of(layer)
            assert loader is not None
            if not layer.visible:  # napari does not slice a hidden layer
                continue
            shown = np.asarray(layer._slice.image.raw)
            (y0, x0), (y1, x1) = np.asarray(layer.corner_pixels).astype(int)
            expected = np.asarray(loader.levels[layer.data_level].array)[y0 : y1 + 1, x0 : x1 + 1]
            np.testing.assert_array_equal(shown, expected)
            if channel == 0:
                np.testing.assert_array_equal(
                    np.asarray(loader.levels[0].array[:128, :256]), written.layers[0][:128, :256]
                )


def test_plate_mosaic_matches_the_writer_and_fails_a_different_field_clearly(
    tmp_path: Path,
) -> None:
    import zarr

    from napari_lazy_zarr.core import ChunkCache
    from napari_lazy_zarr.core.errors import ChunkReadError
    from napari_lazy_zarr.core.executors import InlineExecutor
    from napari_lazy_zarr.core.formats.ome import open_level_sources
    from napari_lazy_zarr.core.reading.array import ChunkedArray

    written = write_plate(tmp_path, 2, 3, 2)
    # Field B/3/1 rewritten with another shape: its chunks fail, naming it; the rest shows.
    zarr.create_array(
        str(written.path / "B/3/1/s0"), shape=(2, 60, 64), chunks=(1, 32, 32), dtype="u2",
        zarr_format=2, overwrite=True,
    )  # fmt: skip
    layout = describe_plate(written.path)
    template = open_level_sources(f"{layout.location}/{layout.template_path}", layout.template)
    opened: list[str] = []

    def opener(path: str) -> Any:
        opened.append(path)
        return open_zarr_source(layout.location, path=path)

    levels = plate_level_sources(layout, template, opener)
    assert opened == []  # no field opened until read
    assert levels[0].shape == (2, 2 * 64, 3 * 2 * 64)
    cache = ChunkCache(1 << 26, executor=InlineExecutor())
    try:
        mosaic = ChunkedArray(levels[0], cache)
        np.testing.assert_array_equal(
            mosaic[0, :64, : 5 * 64].result(), written.layers[0][:64, : 5 * 64]
        )
        assert sorted(opened) == [f"A/{c}/{f}/s0" for c in (1, 2, 3) for f in (0, 1)][1:5]
        with pytest.raises(
            ChunkReadError,
            match=r"B/3/1/s0.*differs from the plate's first field: shape \(2, 60, 64\)",
        ):
            mosaic[0, 64:, 5 * 64 :].result()
    finally:
        cache.close()
