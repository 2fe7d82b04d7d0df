"""Sharded arrays over HTTP: the inner chunks of a view cost one request per run of
adjacent byte ranges in each shard, plus one per shard index (issue: TensorStore's speed)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core import ChunkRef, ChunkState
from napari_lazy_zarr.core.cache import ChunkCache
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.sources.zarr import open_zarr_source

if TYPE_CHECKING:
    from pathlib import Path

    from tests.remote.server import FaultyServer

    Served = tuple[FaultyServer, np.ndarray[Any, Any]]

INNER = (32, 32)
SHARD = (128, 160)  # s.zarr of the `served` fixture: 4 x 5 inner chunks per shard
WINDOW = (slice(40, 200), slice(10, 300))


def _index(shard: Path) -> np.ndarray[Any, Any]:
    """The (offset, length) of each inner chunk, from the shard file's own index
    (Zarr v3 sharding: at the end, 16 bytes per inner chunk, then a 4-byte CRC32C)."""
    per = (SHARD[0] // INNER[0], SHARD[1] // INNER[1])
    raw = shard.read_bytes()
    size = per[0] * per[1] * 16
    return np.frombuffer(raw[-size - 4 : -4], dtype="<u8").reshape(*per, 2)


def _expected_requests(root: Path, window: tuple[slice, slice]) -> tuple[int, int, int]:
    """Shards touched, inner chunks touched, and runs of adjacent byte ranges (gap 0)."""
    shards: dict[tuple[int, int], list[tuple[int, int]]] = {}
    rows = range(window[0].start // INNER[0], (window[0].stop - 1) // INNER[0] + 1)
    cols = range(window[1].start // INNER[1], (window[1].stop - 1) // INNER[1] + 1)
    for r in rows:
        for c in cols:
            shards.setdefault((r * INNER[0] // SHARD[0], c * INNER[1] // SHARD[1]), []).append(
                (r, c)
            )
    runs = 0
    for (sr, sc), inner in shards.items():
        index = _index(root / "s.zarr" / "c" / str(sr) / str(sc))
        ranges = sorted(
            (int(index[r % 4, c % 5, 0]), int(index[r % 4, c % 5].sum())) for r, c in inner
        )
        runs += 1 + sum(1 for (_, stop), (start, _) in itertools.pairwise(ranges) if start != stop)
    return len(shards), sum(len(v) for v in shards.values()), runs


def _chunk_requests(server: FaultyServer) -> int:
    return server.faults.total("s.zarr/c/")


def test_a_view_costs_a_request_per_run_and_per_index(served: Served, tmp_path: Path) -> None:
    server, data = served
    shards, inner, runs = _expected_requests(tmp_path, WINDOW)
    assert runs < inner  # the layout has runs to join: the test can fail
    image = open_array(f"{server.url}/s.zarr")
    try:
        np.testing.assert_array_equal(image[WINDOW].result(timeout=30), data[WINDOW])
    finally:
        image.cache.close()
    assert _chunk_requests(server) <= runs + shards


def test_without_coalescing_each_inner_chunk_is_a_request(served: Served, tmp_path: Path) -> None:
    server, data = served
    shards, inner, _ = _expected_requests(tmp_path, WINDOW)
    source = open_zarr_source(f"{server.url}/s.zarr", coalesce=False)
    with ChunkCache(concurrency=32) as cache:
        got = ChunkedArray(source, cache)[WINDOW].result(timeout=30)
    np.testing.assert_array_equal(got, data[WINDOW])
    # Each shard index is still read once, however many workers want it at the same time.
    assert _chunk_requests(server) == inner + shards


def test_a_gap_joins_runs(served: Served, tmp_path: Path) -> None:
    server, data = served
    shards, _, _ = _expected_requests(tmp_path, WINDOW)
    source = open_zarr_source(f"{server.url}/s.zarr", coalesce_gap=1 << 20)
    with ChunkCache(concurrency=32) as cache:
        got = ChunkedArray(source, cache)[WINDOW].result(timeout=30)
    np.testing.assert_array_equal(got, data[WINDOW])
    assert _chunk_requests(server) == 2 * shards  # an index and one range per shard


@pytest.mark.parametrize("status", [404, 503])
def test_a_failed_inner_chunk_fails_alone_and_a_failed_shard_names_it(
    served: Served, tmp_path: Path, status: int
) -> None:
    server, data = served
    shard = tmp_path / "s.zarr" / "c" / "0" / "0"
    index = _index(shard)
    offset, length = (int(v) for v in index[2, 3])  # inner chunk (2, 3): rows 64:96, cols 96:128
    raw = bytearray(shard.read_bytes())
    raw[offset : offset + length] = bytes(length)  # not a zstd frame any more
    shard.write_bytes(bytes(raw))
    source = open_zarr_source(f"{server.url}/s.zarr")
    with ChunkCache(concurrency=32) as cache:
        array = ChunkedArray(source, cache)
        request = cache.request(array[0:128, 0:160].chunk_refs(), view="v")
        request.done.result(timeout=30)
        states = {
            (r, c): cache.state(ChunkRef.of(source, (r, c)).key)
            for r in range(4)
            for c in range(5)
        }
        broken = ChunkRef.of(source, (2, 3)).key
        assert states.pop((2, 3)) is ChunkState.FAILED
        assert set(states.values()) == {ChunkState.READY}
        message = str(cache.error(broken))
        assert "c/0/0" in message
        assert "(2, 3)" in message
        first = cache.lookup(ChunkRef.of(source, (0, 0)).key)
        np.testing.assert_array_equal(first, data[:32, :32])
    # A shard whose reads fail fails its chunks, naming the shard (404 for the whole file
    # after its index was read is "the shard vanished": its chunks read as fill).
    server.faults.errors["s.zarr/c/1/1"] = status
    source = open_zarr_source(f"{server.url}/s.zarr")
    with ChunkCache(concurrency=32) as cache:
        array = ChunkedArray(source, cache)
        if status == 404:
            np.testing.assert_array_equal(array[128:256, 160:320].result(timeout=30), 0)
        else:
            request = cache.request(array[128:256, 160:320].chunk_refs(), view="v")
            request.done.result(timeout=60)
            key = ChunkRef.of(source, (4, 5)).key
            assert cache.state(key) is ChunkState.FAILED
            assert "c/1/1" in str(cache.error(key))


def test_shard_indexes_are_kept_within_their_byte_bound(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    from napari_lazy_zarr.core.sources import _sharding

    server, data = served
    # Room for two indexes of 4 x 5 inner chunks (16 bytes each).
    monkeypatch.setattr(_sharding, "SHARD_INDEX_BYTES", 2 * 20 * 16)
    source = open_zarr_source(f"{server.url}/s.zarr")

    def requests(shard: str) -> int:
        return server.faults.requests.get(f"s.zarr/c/{shard}", 0)

    source.read_chunk((0, 0))  # shard 0/0: its index, then the chunk
    source.read_chunk((0, 1))  # index kept: the chunk only
    assert requests("0/0") == 3
    source.read_chunk((0, 5))  # shard 0/1
    source.read_chunk((4, 0))  # shard 1/0: the 0/0 index (least recently used) goes
    np.testing.assert_array_equal(source.read_chunk((0, 2)), data[0:32, 64:96])
    assert requests("0/0") == 5  # its index again, and the chunk
    source.read_chunk((4, 1))  # 1/0's index is still kept
    assert requests("1/0") == 3
