"""One fetcher per kind of store, chosen when the array is opened (issue 47, item 5).

The same array, written by zarr-python into a directory, a zip file, a zarr
`MemoryStore` and served over HTTP by the loopback test server, is opened from each;
the source's fetcher is the one for its store, and every chunk it reads equals what
zarr-python itself reads (sharded and not).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr.core.keys import chunk_bounds, grid_shape
from napari_lazy_zarr.core.sources.fetchers import (
    LocalFetcher,
    RemoteFetcher,
    StoreFetcher,
    ZipFetcher,
)
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_zarr_source
from tests.remote.server import FaultyServer

if TYPE_CHECKING:
    from pathlib import Path


def _written(root: Path, *, shards: Any) -> tuple[np.ndarray[Any, Any], zarr.Array[Any]]:
    data = (np.arange(96 * 80, dtype=np.uint32) * 11 % 60_001).astype(np.uint16).reshape(96, 80)
    array = zarr.create_array(
        str(root), shape=data.shape, chunks=(16, 16), shards=shards, dtype=data.dtype
    )
    array[...] = data
    return data, array


def _every_chunk_equals(source: ZarrChunkSource, data: np.ndarray[Any, Any]) -> None:
    for coords in itertools.product(*(range(n) for n in grid_shape(source))):
        lo, hi = chunk_bounds(source.grid, coords, source.shape)
        box = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        np.testing.assert_array_equal(source.read_chunk(coords), data[box])


@pytest.mark.parametrize("shards", [None, (48, 32)])
def test_each_store_kind_reads_through_its_own_fetcher(tmp_path: Path, shards: Any) -> None:
    data, _ = _written(tmp_path / "a.zarr", shards=shards)
    local = open_zarr_source(tmp_path / "a.zarr")
    assert isinstance(local._fetcher, LocalFetcher)
    _every_chunk_equals(local, data)

    with zarr.storage.ZipStore(tmp_path / "a.zip", mode="w") as writing:
        zarr.create_array(writing, data=data, chunks=(16, 16), shards=shards)
    zipped = open_zarr_source(tmp_path / "a.zip")
    assert isinstance(zipped._fetcher, ZipFetcher)
    _every_chunk_equals(zipped, data)

    memory = zarr.storage.MemoryStore()
    zarr.create_array(memory, data=data, chunks=(16, 16), shards=shards)
    in_memory = ZarrChunkSource(zarr.open_array(memory, mode="r"), location="memory")
    assert isinstance(in_memory._fetcher, StoreFetcher)
    _every_chunk_equals(in_memory, data)

    with FaultyServer(tmp_path) as server:
        remote = open_zarr_source(f"{server.url}/a.zarr")
        assert isinstance(remote._fetcher, RemoteFetcher)
        _every_chunk_equals(remote, data)
