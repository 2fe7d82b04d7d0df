"""Bytes checked against what was asked: ``Content-Range`` on every 206, permanent statuses.

On the loopback `FaultyServer`: a server (or proxy) that answers another range
than the one asked -- honestly labelled, unlabelled, garbled, or of a file
whose size changed since an earlier answer -- never has its bytes served as
the range asked, by either reader (`RemoteStore`, and the reference reader's
`read_remote`); 410 Gone and 451 are errors, never "missing" (404). obstore
checks the ``Content-Range`` against the range asked; the store, that the
file's size agrees with earlier answers.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from napari_lazy_zarr.core.errors import ChunkReadError, LazyZarrError
from napari_lazy_zarr.core.settings import Timeouts
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_node
from napari_lazy_zarr.core.storage.local import store_for
from napari_lazy_zarr.core.storage.memo import forget_metadata
from napari_lazy_zarr.core.storage.remote import RemoteStore
from napari_lazy_zarr.core.storage.remote_errors import HttpRangeError, HttpStatusError
from napari_lazy_zarr.core.storage.retry import RetryPolicy, classify

if TYPE_CHECKING:
    from pathlib import Path

    from tests.remote.server import FaultyServer

    Served = tuple[FaultyServer, np.ndarray[Any, Any]]

SMALL = Timeouts(connect=1.0, read=0.5, total=1.5)
SHARD = "s.zarr/c/0/0"  # rows 0:128, columns 0:160 of the served array, 20 inner chunks
RETRY = RetryPolicy(attempts=3, base_delay=0.01)


def sharded_source(url: str) -> ZarrChunkSource:
    store, _ = store_for(url, timeouts=SMALL)
    try:
        node = open_node(store, "", url)
    finally:
        forget_metadata(store)
    assert isinstance(node, zarr.Array)
    return ZarrChunkSource(node, location=url, retry=RETRY)


# -- the store alone ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "answered"),
    [
        ("shifted", r"Requested 10\.\.30, got 12\.\.32"),
        ("unlabelled", r"Content-Range header not present"),
        ("garbled", r"Failed to parse value for CONTENT_RANGE header: \"bytes 10\+20\""),
    ],
)
def test_a_206_of_another_range_is_refused_and_retryable(
    served: Served, fault: str, answered: str
) -> None:
    server, _ = served
    faults = server.faults
    if fault == "shifted":
        faults.shifted[SHARD] = 2
    else:
        getattr(faults, fault).add(SHARD)
    with RemoteStore(f"{server.url}/s.zarr") as store, pytest.raises(HttpRangeError) as caught:
        store.get_sync("c/0/0", byte_range=RangeByteRequest(10, 30))
    message = str(caught.value)
    assert message.startswith(f"{server.url}/{SHARD}: ")
    assert message.endswith("refused (retried)")
    assert re.search(answered, message), message
    assert classify(caught.value) == "transient"
    assert isinstance(caught.value, ChunkReadError)


def test_a_file_whose_size_changed_between_answers_is_refused(
    served: Served, tmp_path: Path
) -> None:
    server, _ = served
    shard = (tmp_path / SHARD).read_bytes()
    with RemoteStore(f"{server.url}/s.zarr") as store:
        first = store.get_sync("c/0/0", byte_range=RangeByteRequest(0, 16))
        assert first is not None
        assert first.to_bytes() == shard[:16]
        server.faults.total_off[SHARD] = 8  # as if rewritten, 8 bytes longer
        with pytest.raises(HttpRangeError, match=r"earlier answer said \d+ \(it changed"):
            store.get_sync("c/0/0", byte_range=RangeByteRequest(16, 32))


def test_a_range_past_the_end_is_cut_there_and_a_suffix_is_located(
    served: Served, tmp_path: Path
) -> None:
    server, _ = served
    shard = (tmp_path / SHARD).read_bytes()
    with RemoteStore(f"{server.url}/s.zarr") as store:
        got = store.get_sync("c/0/0", byte_range=RangeByteRequest(len(shard) - 4, len(shard) + 50))
        assert got is not None
        assert got.to_bytes() == shard[-4:]
        got = store.get_sync("c/0/0", byte_range=SuffixByteRequest(24))
        assert got is not None
        assert got.to_bytes() == shard[-24:]
        got = store.get_sync("c/0/0", byte_range=OffsetByteRequest(len(shard) - 9))
        assert got is not None
        assert got.to_bytes() == shard[-9:]


@pytest.mark.parametrize("status", [410, 451])
def test_gone_is_an_error_not_a_missing_chunk(served: Served, status: int) -> None:
    server, _ = served
    server.faults.errors["a.zarr/c/1/2"] = status
    with RemoteStore(f"{server.url}/a.zarr") as store:
        with pytest.raises(HttpStatusError, match=rf"a\.zarr/c/1/2: HTTP {status} .*refused"):
            store.get_sync("c/1/2")
        assert store.get_sync("c/99/99") is None  # 404 alone is an absent key
    assert classify(HttpStatusError("x", url="x", status=status, retry_after=None)) == "permanent"


# -- through the engine -----------------------------------------------------------------


@pytest.mark.parametrize("fault", ["shifted", "unlabelled", "garbled"])
def test_a_sharded_inner_chunk_answered_with_another_range_is_never_served(
    served: Served, fault: str
) -> None:
    server, data = served
    source = sharded_source(f"{server.url}/s.zarr")
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data[:32, :32])  # index read
    faults = server.faults
    if fault == "shifted":
        faults.shifted[SHARD] = 2  # the bytes 2 further on, honestly labelled so
    else:
        getattr(faults, fault).add(SHARD)
    before = faults.requests[SHARD]
    with pytest.raises(ChunkReadError, match=r"refused \(retried\)") as caught:
        source.read_chunk((1, 2))
    assert "s.zarr" in str(caught.value)
    assert faults.requests[SHARD] - before == RETRY.attempts  # retried as transient
    faults.shifted.clear()
    faults.unlabelled.clear()
    faults.garbled.clear()
    np.testing.assert_array_equal(source.read_chunk((1, 2)), data[32:64, 64:96])


def test_a_gone_chunk_fails_its_read_instead_of_showing_fill_value(served: Served) -> None:
    server, data = served
    source = sharded_source(f"{server.url}/a.zarr")
    server.faults.errors["a.zarr/c/1/2"] = 410
    with pytest.raises(ChunkReadError, match=r"HTTP 410"):
        source.read_chunk((1, 2))
    assert server.faults.requests["a.zarr/c/1/2"] == 1  # permanent: not retried
    np.testing.assert_array_equal(source.read_chunk((1, 1)), data[32:64, 32:64])


def test_the_reference_reader_checks_content_range_too(served: Served, tmp_path: Path) -> None:
    server, _ = served
    raw = (np.arange(64, dtype="<u2") * 3).tobytes()
    (tmp_path / "pixels.raw").write_bytes(raw)
    zarray = {"zarr_format": 2, "shape": [4, 8], "chunks": [2, 8], "dtype": "<u2",
              "compressor": None, "filters": None, "fill_value": 0, "order": "C"}  # fmt: skip
    refs = {
        ".zarray": json.dumps(zarray),
        "0.0": [f"{server.url}/pixels.raw", 0, 32],
        "1.0": [f"{server.url}/pixels.raw", 32, 32],
    }
    manifest = tmp_path / "refs.json"
    manifest.write_text(json.dumps({"version": 1, "refs": refs}))
    source = ManifestSource(manifest, allow_protocols=[server.url], retry=RETRY)
    expected = np.frombuffer(raw, dtype="<u2")[:32].reshape(4, 8)
    np.testing.assert_array_equal(source.read_chunk((1, 0)), expected[2:])
    for fault in ("shifted", "unlabelled", "garbled"):
        if fault == "shifted":
            server.faults.shifted["pixels.raw"] = -4
        else:
            getattr(server.faults, fault).add("pixels.raw")
        with pytest.raises(ChunkReadError, match=r"pixels\.raw: .*refused \(retried\)"):
            source.read_chunk((1, 0))
        server.faults.shifted.clear()
        server.faults.unlabelled.clear()
        server.faults.garbled.clear()
    server.faults.total_off["pixels.raw"] = 2  # as if rewritten since the last answer
    with pytest.raises(ChunkReadError, match=r"earlier answer said 128 \(it changed"):
        source.read_chunk((1, 0))
    server.faults.total_off.clear()
    server.faults.errors["pixels.raw"] = 410
    with pytest.raises(LazyZarrError, match=r"HTTP 410"):
        source.read_chunk((0, 0))
