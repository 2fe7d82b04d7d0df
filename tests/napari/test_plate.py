"""HCS plates (ome-zarr-py's `write_plate_metadata` / `write_well_metadata`) as one mosaic.

Wells by row and column, a well's fields side by side, one layer per channel;
each field's metadata is fetched by the worker that reads its first chunk, so
what the first pixels wait for is the plate's, the first well's and the first
field's metadata, then the view's chunks. Over a 100 ms loopback server the
test counts requests (never asserts wall-clock times) and prints what it took.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._reader import read_zarr, watch_viewer
from napari_lazy_zarr.core.formats.plate import describe_plate, plate_level_sources
from napari_lazy_zarr.core.sources.zarr import open_zarr_source
from napari_lazy_zarr.core.states import ChunkState
from tests.conformance.cases import PLATE_FIELD, write_plate
from tests.conformance.cases_odd import UNEVEN_FIELDS
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


def test_each_wells_field_list_is_read_once_by_the_first_read_of_its_slots(
    tmp_path: Path,
) -> None:
    """Opening reads the first well only; another well's own field list (one document) is
    read by the first read of one of its slots, once for every level and slot."""
    from napari_lazy_zarr.core import ChunkCache
    from napari_lazy_zarr.core.executors import InlineExecutor
    from napari_lazy_zarr.core.formats.ome import open_level_sources
    from napari_lazy_zarr.core.formats.plate import field_opener, well_reader
    from napari_lazy_zarr.core.reading.array import ChunkedArray

    columns, slots = 3, max(UNEVEN_FIELDS)
    written = write_plate(tmp_path, 2, columns, slots, per_well=UNEVEN_FIELDS)
    layout = describe_plate(written.path)
    assert (layout.fields, layout.slots) == (("0", "1"), slots)
    template = open_level_sources(f"{layout.location}/{layout.template_path}", layout.template)
    read = well_reader(layout)
    wells_read: list[str] = []

    def recorded(path: str) -> tuple[str, ...]:
        wells_read.append(path)
        return read(path)

    levels = plate_level_sources(layout, template, field_opener(layout), recorded)
    assert wells_read == []  # nothing of the other wells until a read needs it
    _, height, width = PLATE_FIELD
    expected = np.stack(written.layers)  # (channel, y, x), as ome-zarr-py wrote the fields
    cache = ChunkCache(1 << 26, executor=InlineExecutor())
    try:
        mosaic = ChunkedArray(levels[0], cache)
        # Well A/2: slots 0-5 of the second column of wells.
        well = (slice(None), slice(0, height), slice(slots * width, 2 * slots * width))
        np.testing.assert_array_equal(mosaic[well].result(), expected[well])
        assert wells_read == ["A/2"]
        np.testing.assert_array_equal(mosaic[...].result(), expected)
        ChunkedArray(levels[1], cache)[...].result()
        assert sorted(wells_read) == ["A/2", "A/3", "B/1", "B/2", "B/3"]  # each once
    finally:
        cache.close()


def test_a_plate_field_count_past_what_a_mosaic_holds_is_cut_with_a_warning(
    tmp_path: Path,
) -> None:
    from napari_lazy_zarr.core.errors import MetadataWarning
    from napari_lazy_zarr.core.formats.plate import MAX_MOSAIC_FIELDS

    written = write_plate(tmp_path, 2, 3, 2)
    attributes = json.loads((written.path / ".zattrs").read_text())
    attributes["plate"]["field_count"] = 10**9  # a hostile or broken plate
    (written.path / ".zattrs").write_text(json.dumps(attributes))
    with pytest.warns(MetadataWarning, match=r"1,000,000,000 fields a well .* 6 wells"):
        layout = describe_plate(written.path)
    assert layout.slots == MAX_MOSAIC_FIELDS // 6
    attributes["plate"]["field_count"] = "6"  # not an integer: the first well's count
    (written.path / ".zattrs").write_text(json.dumps(attributes))
    assert describe_plate(written.path).slots == 2


def test_a_plate_of_uneven_wells_shows_every_field_and_the_fill_value_for_empty_slots(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, notices: list[str]
) -> None:
    """Issue 50: wells of 2, 5, 1, 1, 4 and 6 fields (field_count 6). Laid out by the first
    well, 20 of the 38 field planes showed and the wells of one field warned "failed to
    load ... no such file or directory"; laid out by field_count, every field shows, each
    well's empty slots are the fill value, and nothing is reported as failed."""
    rows, columns, slots = 2, 3, max(UNEVEN_FIELDS)
    written = write_plate(tmp_path, rows, columns, slots, per_well=UNEVEN_FIELDS)
    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(written.path), plugin="napari-lazy-zarr")
    loaders = [loader_of(layer) for layer in layers]
    for layer in layers:
        layer.visible = True
        layer.locked_data_level = 0  # napari shows the whole mosaic at full resolution
    viewer.reset_view()
    viewer.window._qt_viewer.canvas.on_draw(None)
    qtbot.waitUntil(lambda: all(lo is not None and lo.settled for lo in loaders), timeout=30_000)
    _, height, width = PLATE_FIELD
    shown = placeholders = 0
    for channel, layer in enumerate(layers):
        displayed = np.asarray(layer._slice.image.raw)
        assert displayed.shape == written.layers[channel].shape
        for well, count in enumerate(UNEVEN_FIELDS):
            row, column = divmod(well, columns)
            for slot in range(slots):
                x = (column * slots + slot) * width
                tile = (slice(row * height, (row + 1) * height), slice(x, x + width))
                if slot < count:  # the well's own field, as ome-zarr-py wrote it
                    np.testing.assert_array_equal(displayed[tile], written.layers[channel][tile])
                    assert displayed[tile].any()
                    shown += 1
                else:  # no such field: the fill value, shown as such
                    assert not displayed[tile].any()
                    placeholders += 1
    assert (shown, placeholders) == (2 * sum(UNEVEN_FIELDS), 2 * (6 * slots - 19))
    assert shown == 38
    for loader in loaders:
        assert loader is not None
        assert ChunkState.FAILED not in set(loader.controller.cache.states().values())
        loader.flush_failures()
    assert [m for m in notices if m.startswith("napari-lazy-zarr")] == []
