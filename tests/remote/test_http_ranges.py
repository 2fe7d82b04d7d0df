"""Bytes checked against what was asked: ``Content-Range`` on every 206, permanent statuses.

On the loopback `FaultyServer`: a server (or proxy) that answers another range
than the one asked -- honestly labelled, unlabelled, garbled, or of a file
whose size changed since an earlier answer -- never has its bytes served as
the range asked, by either HTTP client (`HttpStore`, and the reference
reader's `read_remote`); 410 Gone and 451 are errors, never "missing" (404).
`check_partial` itself is checked against the server's own arithmetic with
Hypothesis.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from napari_lazy_zarr.core.errors import ChunkReadError, LazyZarrError
from napari_lazy_zarr.core.settings import Timeouts
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_node
from napari_lazy_zarr.core.storage._ranges import Span, check_partial
from napari_lazy_zarr.core.storage.http import (
    HttpRangeError,
    HttpStatusError,
    HttpStore,
)
from napari_lazy_zarr.core.storage.local import store_for
from napari_lazy_zarr.core.storage.memo import forget_metadata
from napari_lazy_zarr.core.storage.retry import RetryPolicy, classify

if TYPE_CHECKING:
    from pathlib import Path

    from zarr.abc.store import ByteRequest

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
        ("shifted", r"'bytes 12-31/\d+': it starts at byte 12, not 10"),
        ("unlabelled", r"None: it has no Content-Range"),
        ("garbled", r"'bytes 10\+20': its Content-Range 'bytes 10\+20' is not"),
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
    with HttpStore(f"{server.url}/s.zarr") as store, pytest.raises(HttpRangeError) as caught:
        store.get_sync("c/0/0", byte_range=RangeByteRequest(10, 30))
    message = str(caught.value)
    assert message.startswith(f"{server.url}/{SHARD}: asked for bytes=10-29, the 206 answer is ")
    assert re.search(answered, message), message
    assert classify(caught.value) == "transient"
    assert isinstance(caught.value, ChunkReadError)


def test_a_file_whose_size_changed_between_answers_is_refused(
    served: Served, tmp_path: Path
) -> None:
    server, _ = served
    shard = (tmp_path / SHARD).read_bytes()
    with HttpStore(f"{server.url}/s.zarr") as store:
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
    with HttpStore(f"{server.url}/s.zarr") as store:
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
    with HttpStore(f"{server.url}/a.zarr") as store:
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
    with pytest.raises(ChunkReadError, match=r"the 206 answer is") as caught:
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
        with pytest.raises(ChunkReadError, match=r"asked for bytes=32-63, the 206 answer is"):
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


# -- check_partial against the server's arithmetic ---------------------------------------


def honest(size: int, asked: ByteRequest) -> Span | None:
    """The span a correct server answers for `asked` of a file of `size` bytes (None: 416)."""
    if isinstance(asked, RangeByteRequest):
        first, last = asked.start, min(asked.end, size) - 1
    elif isinstance(asked, OffsetByteRequest):
        first, last = asked.offset, size - 1
    else:
        assert isinstance(asked, SuffixByteRequest)
        first, last = max(0, size - asked.suffix), size - 1
    return None if first > last else Span(first, last, size)


requests = st.one_of(
    st.builds(
        lambda start, length: RangeByteRequest(start, start + length),
        st.integers(0, 1 << 40),
        st.integers(1, 1 << 30),
    ),
    st.builds(OffsetByteRequest, st.integers(0, 1 << 40)),
    st.builds(SuffixByteRequest, st.integers(1, 1 << 40)),
)


@given(size=st.integers(1, 1 << 41), asked=requests, shift=st.integers(-64, 64))
def test_check_partial_takes_the_honest_answer_and_no_other(
    size: int, asked: ByteRequest, shift: int
) -> None:
    span = honest(size, asked)
    if span is None:
        return  # the server answers 416: no Content-Range to check
    assert check_partial(span.text(), asked, None) == span
    assert check_partial(span.text(), asked, size) == span
    assert isinstance(check_partial(span.text(), asked, size + 1), str)  # the file changed
    moved = Span(span.first + shift, span.last + shift, size)
    if shift and moved.first >= 0 and moved.last < size:
        assert isinstance(check_partial(moved.text(), asked, None), str)
    shorter = Span(span.first, span.last - 1, size)
    if shorter.last >= shorter.first:
        assert isinstance(check_partial(shorter.text(), asked, None), str)
