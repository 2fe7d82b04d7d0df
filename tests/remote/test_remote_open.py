"""Opening stores over HTTP: each metadata document fetched once; loaders as many as for URLs.

Counted on the loopback server: every request it answers is recorded per key,
so a document fetched twice (by zarr-python's array-then-group probing, or by
opening a level again after describing it) shows as a count of 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._reader import configure, read_zarr, shared_cache
from napari_lazy_zarr.core.cache import default_concurrency
from napari_lazy_zarr.core.formats.ome import describe_store, open_level_sources, open_source
from napari_lazy_zarr.core.keys import chunk_bounds, grid_shape
from napari_lazy_zarr.core.open import REMOTE_CONCURRENCY
from napari_lazy_zarr.core.sample import write_sample_ome_zarr
from tests.napari.conftest import write_ome_pyramid
from tests.remote.server import FaultyServer

if TYPE_CHECKING:
    from pathlib import Path

    Served = tuple[FaultyServer, np.ndarray[Any, Any]]

METADATA = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})
YX = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]


def _metadata_requests(server: FaultyServer) -> dict[str, int]:
    with server.faults.lock:
        requests = dict(server.faults.requests)
    return {key: n for key, n in requests.items() if key.rsplit("/", 1)[-1] in METADATA}


def test_opening_an_ome_zarr_0_5_pyramid_fetches_each_document_once(tmp_path: Path) -> None:
    shapes = write_sample_ome_zarr(tmp_path / "cells.zarr", size=1024, chunk=128, smallest=128)
    with FaultyServer(tmp_path) as server:
        server.faults.latency = 0.01  # the opens overlap, as over a real network
        ((levels, _, layer_type),) = read_zarr(f"{server.url}/cells.zarr")
        requested = _metadata_requests(server)
    assert (layer_type, len(levels)) == ("image", len(shapes))
    # The root's probe (a v3 group: its zarr.json; the absent v2 documents asked for in the
    # same round, so a v2 group would cost no second round), one zarr.json per level and the
    # absent labels group's: nothing else, once each.
    assert requested == dict.fromkeys(
        [
            "cells.zarr/zarr.json",
            "cells.zarr/.zarray",
            "cells.zarr/.zattrs",
            "cells.zarr/.zgroup",
            "cells.zarr/.zmetadata",
            *(f"cells.zarr/{level}/zarr.json" for level in range(len(shapes))),
            "cells.zarr/labels/zarr.json",
        ],
        1,
    )


def test_opening_an_ome_zarr_0_4_pyramid_with_labels_fetches_each_document_once(
    tmp_path: Path,
) -> None:
    data = (np.arange(256 * 192) % 251).astype(np.uint16).reshape(256, 192)
    write_ome_pyramid(
        tmp_path / "image.zarr",
        data,
        levels=3,
        chunks=(64, 64),
        axes=YX,
        zarr_format=2,
        labels={"cells": (data % 7).astype(np.uint8)},
    )
    with FaultyServer(tmp_path) as server:
        server.faults.latency = 0.01
        layers = read_zarr(f"{server.url}/image.zarr")
        requested = _metadata_requests(server)
    assert [layer_type for _, _, layer_type in layers] == ["image", "labels"]
    assert max(requested.values()) == 1, {k: n for k, n in requested.items() if n > 1}
    for image in ("image.zarr", "image.zarr/labels/cells"):
        for level in range(3):
            assert requested[f"{image}/{level}/.zarray"] == 1
    # Below the root the hierarchy's format is known: no Zarr v3 document is asked for.
    assert [key for key in requested if key.endswith("zarr.json")] == ["image.zarr/zarr.json"]


def test_levels_read_through_the_arrays_describe_store_opened(tmp_path: Path) -> None:
    shapes = write_sample_ome_zarr(tmp_path / "cells.zarr", size=512, chunk=128, smallest=128)
    local = zarr.open_group(str(tmp_path / "cells.zarr"), mode="r")
    with FaultyServer(tmp_path) as server:
        url = f"{server.url}/cells.zarr"
        (image,) = describe_store(url)
        described = _metadata_requests(server)
        sources = open_level_sources(url, image)
        assert _metadata_requests(server) == described  # nothing fetched again
        for level, source in enumerate(sources):
            reopened = open_source(url, path=str(level))
            assert (str(source.identity), source.shape) == (str(reopened.identity), shapes[level])
            last = tuple(n - 1 for n in grid_shape(source))
            lo, hi = chunk_bounds(source.grid, last, source.shape)
            expected = local[str(level)][lo[0] : hi[0], lo[1] : hi[1]]
            np.testing.assert_array_equal(source.read_chunk(last), expected)
        # The chunks came over HTTP, straight from storage.
        assert server.faults.requests["cells.zarr/0/c/3/3"] == 1


# -- the plugin's loader concurrency for URLs ------------------------------------


@pytest.fixture
def no_concurrency_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAPARI_LAZY_ZARR_CONCURRENCY", raising=False)
    monkeypatch.delenv("NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY", raising=False)


@pytest.mark.usefixtures("no_concurrency_settings")
def test_reading_a_url_gives_the_shared_cache_remote_concurrency(
    served: Served, tmp_path: Path
) -> None:
    server, _ = served
    read_zarr(str(tmp_path / "a.zarr"))
    assert shared_cache().concurrency == default_concurrency()  # local: one per core
    read_zarr(f"{server.url}/a.zarr")
    assert shared_cache().concurrency == max(default_concurrency(), REMOTE_CONCURRENCY)


@pytest.mark.usefixtures("no_concurrency_settings")
def test_remote_concurrency_is_configurable(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = served
    monkeypatch.setenv("NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY", "48")
    read_zarr(f"{server.url}/a.zarr")
    assert shared_cache().concurrency == max(default_concurrency(), 48)


@pytest.mark.usefixtures("no_concurrency_settings")
def test_a_concurrency_the_user_chose_is_kept_for_urls(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = served
    monkeypatch.setenv("NAPARI_LAZY_ZARR_CONCURRENCY", "3")
    read_zarr(f"{server.url}/a.zarr")
    assert shared_cache().concurrency == 3
    configure(concurrency=5)
    read_zarr(f"{server.url}/s.zarr")
    assert shared_cache().concurrency == 5


@pytest.mark.usefixtures("no_concurrency_settings")
def test_configure_is_kept_for_urls(served: Served) -> None:
    server, _ = served
    configure(concurrency=2)
    read_zarr(f"{server.url}/a.zarr")
    assert shared_cache().concurrency == 2


# -- round trips: each node's documents fetched at once ------------------------------


def test_a_plate_opens_in_one_round_of_requests_per_node_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every metadata document of a plate's open (plate, first well, template field, its
    levels and labels probe) is fetched by the concurrent prefetch, none by the opens
    after it: a node costs one round trip, not an array's and then a group's."""
    import threading

    from napari_lazy_zarr.core.storage.remote import RemoteStore
    from tests.conformance.cases import write_plate

    fetched: list[tuple[str, str]] = []
    read_sync, read = RemoteStore.read_sync, RemoteStore.read

    def recording_sync(self: RemoteStore, key: str, *args: Any, **kwargs: Any) -> Any:
        fetched.append((key, threading.current_thread().name))
        return read_sync(self, key, *args, **kwargs)

    async def recording(self: RemoteStore, key: str, *args: Any, **kwargs: Any) -> Any:
        fetched.append((key, threading.current_thread().name))  # zarr's loop: an open's
        return await read(self, key, *args, **kwargs)

    monkeypatch.setattr(RemoteStore, "read_sync", recording_sync)
    monkeypatch.setattr(RemoteStore, "read", recording)
    plate = write_plate(tmp_path, 2, 3, 2)
    with FaultyServer(tmp_path) as server:
        layout = _describe_plate_at(f"{server.url}/{plate.path.name}")
        requested = _metadata_requests(server)
    assert layout.template_path == "A/1/0"
    assert fetched
    by_opens = [key for key, thread in fetched if not thread.startswith("lazy-zarr-metadata")]
    assert by_opens == []
    assert max(requested.values()) == 1  # and each document once
    for node in ("", "A/1/", "A/1/0/", "A/1/0/s0/", "A/1/0/labels/"):
        assert f"{plate.path.name}/{node}.zattrs" in requested


def _describe_plate_at(url: str) -> Any:
    """The plate at `url` as the reader opens it: `describe_store` finds a plate, whose
    root documents `describe_plate` then reuses."""
    from napari_lazy_zarr.core.formats.ome import PlateStoreError
    from napari_lazy_zarr.core.formats.plate import describe_plate

    with pytest.raises(PlateStoreError) as found:
        describe_store(url)
    return describe_plate(
        url, attributes=found.value.attributes, zarr_format=found.value.zarr_format
    )


def _plate_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field_prefix: str
) -> tuple[int, Any, Any]:
    """A plate's open over HTTP: its rounds of metadata requests (the prefetches that
    fetched anything), the layout, and what ome-zarr-py wrote."""
    from napari_lazy_zarr.core.storage.memo import MetadataMemoStore
    from tests.conformance.cases import write_plate

    rounds: list[int] = []
    original = MetadataMemoStore.prefetch

    def counting(self: MetadataMemoStore, *args: Any, **kwargs: Any) -> int:
        fetched = original(self, *args, **kwargs)
        rounds.extend([fetched] if fetched else [])
        return fetched

    monkeypatch.setattr(MetadataMemoStore, "prefetch", counting)
    plate = write_plate(tmp_path, 2, 3, 2, field_prefix=field_prefix)
    with FaultyServer(tmp_path) as server:
        layout = _describe_plate_at(f"{server.url}/{plate.path.name}")
        described = len(rounds)
        read = _plate_mosaic(layout)
    return described, layout, (plate, read)


def _plate_mosaic(layout: Any) -> list[np.ndarray[Any, Any]]:
    """The plate's full-resolution mosaic, per channel, read through the cache."""
    from napari_lazy_zarr.core import ChunkCache
    from napari_lazy_zarr.core.executors import InlineExecutor
    from napari_lazy_zarr.core.formats.plate import field_opener, plate_level_sources
    from napari_lazy_zarr.core.reading.array import ChunkedArray

    template = open_level_sources(f"{layout.location}/{layout.template_path}", layout.template)
    levels = plate_level_sources(layout, template, field_opener(layout))
    cache = ChunkCache(1 << 26, executor=InlineExecutor())
    try:
        mosaic = ChunkedArray(levels[0], cache)[...].result()
    finally:
        cache.close()
    return list(mosaic)


def test_a_plate_opens_in_three_rounds_its_field_guessed_with_the_first_well(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plate root; first well and its field "0" (guessed: writers name it so) together;
    the field's levels: three rounds of requests, not four."""
    rounds, layout, (plate, read) = _plate_rounds(tmp_path, monkeypatch, "")
    assert layout.template_path == "A/1/0"
    assert rounds == 3
    for got, expected in zip(read, plate.layers, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_plate_whose_fields_are_not_named_0_opens_with_one_round_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong guess costs 404s in the well's round, then the field's own round: the
    layout and pixels are what ome-zarr-py wrote."""
    rounds, layout, (plate, read) = _plate_rounds(tmp_path, monkeypatch, "field")
    assert layout.template_path == "A/1/field0"
    assert layout.fields == ("field0", "field1")
    assert rounds == 4
    for got, expected in zip(read, plate.layers, strict=True):
        np.testing.assert_array_equal(got, expected)
