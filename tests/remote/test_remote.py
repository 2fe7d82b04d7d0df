"""Remote stores over real HTTP: retries, refusals, missing keys, faults, superseded work."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core import ChunkReadError, ChunkState, MetadataError, NotAZarrStoreError
from napari_lazy_zarr.core.open import REMOTE_CONCURRENCY
from napari_lazy_zarr.core.storage.retry import RetryPolicy, classify

if TYPE_CHECKING:
    from tests.remote.server import FaultyServer

    Served = tuple[FaultyServer, np.ndarray[Any, Any]]

CHUNK = "a.zarr/c/1/2"  # rows 32:64, columns 64:96


def _key(image: Any, coords: tuple[int, int]) -> Any:
    from napari_lazy_zarr.core import ChunkRef

    return ChunkRef.of(image.source, coords).key


@pytest.mark.parametrize("name", ["a.zarr", "s.zarr"])
def test_remote_store_reads_like_a_local_one(served: Served, name: str) -> None:
    server, data = served
    image = open_array(f"{server.url}/{name}")
    try:
        assert image.cache.concurrency == REMOTE_CONCURRENCY
        np.testing.assert_array_equal(
            image[10:200:3, ::-7].result(timeout=30), data[10:200:3, ::-7]
        )
        np.testing.assert_array_equal(image.result(timeout=30), data)
    finally:
        image.cache.close()


def test_transient_errors_are_retried_with_backoff(served: Served) -> None:
    server, data = served
    server.faults.errors[CHUNK] = 503
    server.faults.error_times[CHUNK] = 2  # fails twice, then serves
    image = open_array(f"{server.url}/a.zarr")
    try:
        np.testing.assert_array_equal(image[32:64, 64:96].result(timeout=30), data[32:64, 64:96])
        assert server.faults.requests[CHUNK] == 3
    finally:
        image.cache.close()


def test_missing_key_is_the_fill_value(served: Served, tmp_path: Any) -> None:
    server, data = served
    (tmp_path / "a.zarr" / "c" / "1" / "2").unlink()  # HTTP 404 for that chunk
    image = open_array(f"{server.url}/a.zarr")
    try:
        region = image[32:64, 64:128].result(timeout=30)
        assert (region[:, :32] == 0).all()
        np.testing.assert_array_equal(region[:, 32:], data[32:64, 96:128])
        assert image.cache.state(_key(image, (1, 2))) is ChunkState.READY
        assert server.faults.requests[CHUNK] == 1
    finally:
        image.cache.close()


@pytest.mark.parametrize("status", [401, 403])
def test_access_denied_fails_at_once_without_retry(served: Served, status: int) -> None:
    server, _ = served
    server.faults.errors[CHUNK] = status
    image = open_array(f"{server.url}/a.zarr")
    try:
        with pytest.raises(ChunkReadError, match=r"c/1/2.*access denied, not retried"):
            image[32:64, 64:96].result(timeout=30)
        assert server.faults.requests[CHUNK] == 1
    finally:
        image.cache.close()


def test_truncated_bodies_fail_after_bounded_retries_then_recover(served: Served) -> None:
    server, data = served
    server.faults.truncated.add(CHUNK)
    image = open_array(f"{server.url}/a.zarr")
    image.source._retry = RetryPolicy(attempts=3, base_delay=0.01)  # quick for the test
    try:
        with pytest.raises(ChunkReadError, match=r"c/1/2.*after 3 attempts"):
            image[32:64, 64:96].result(timeout=30)
        assert server.faults.requests[CHUNK] == 3
        server.faults.truncated.clear()
        assert image.cache.retry(_key(image, (1, 2)))
        np.testing.assert_array_equal(image[32:64, 64:96].result(timeout=30), data[32:64, 64:96])
    finally:
        image.cache.close()


def test_corrupt_payload_fails_naming_the_key_and_is_not_retried(served: Served) -> None:
    server, data = served
    server.faults.corrupt.add(CHUNK)
    image = open_array(f"{server.url}/a.zarr")
    try:
        partial = image[0:96, 0:128].read_nonblocking(placeholder=0)
        partial.request.done.result(timeout=30)
        failed = partial.request.failed()
        assert list(failed) == [_key(image, (1, 2))]
        assert "c/1/2" in str(failed[_key(image, (1, 2))])
        assert server.faults.requests[CHUNK] == 1
        shown = image[0:96, 0:128].read_nonblocking(placeholder=0).data
        expected = data[0:96, 0:128].copy()
        expected[32:64, 64:96] = 0  # the explicit placeholder, never the corrupt bytes
        np.testing.assert_array_equal(shown, expected)
        server.faults.corrupt.clear()
        assert image.cache.retry_failed() == 1
        np.testing.assert_array_equal(image[0:96, 0:128].result(timeout=30), data[0:96, 0:128])
    finally:
        image.cache.close()


def test_a_stalled_chunk_holds_one_worker_and_nothing_else(served: Served) -> None:
    server, data = served
    server.faults.stalled.add(CHUNK)
    image = open_array(f"{server.url}/a.zarr")
    try:
        partial = image[0:96, 0:128].read_nonblocking()  # returns at once
        assert partial.missing
        others = image[128:256, 160:320]  # other chunks load meanwhile
        np.testing.assert_array_equal(others.result(timeout=30), data[128:256, 160:320])
        assert not partial.request.done.done()
        server.faults.release.set()
        partial.request.done.result(timeout=30)
        np.testing.assert_array_equal(image[0:96, 0:128].result(timeout=30), data[0:96, 0:128])
    finally:
        server.faults.release.set()
        image.cache.close()


def test_superseded_views_are_not_downloaded(served: Served) -> None:
    server, _ = served
    first_keys = {f"a.zarr/c/{r}/{c}" for r in range(4) for c in range(5)}
    # The first view's downloads hang until the view has moved: however slowly this
    # thread runs, no worker can finish one and take another between the two calls.
    server.faults.stalled |= first_keys
    image = open_array(f"{server.url}/a.zarr", concurrency=2)
    try:
        image[0:128, 0:160].read_nonblocking(requester="pan")  # 20 chunks
        second = image[128:256, 160:320].read_nonblocking(requester="pan")  # 20 others
        server.faults.release.set()
        second.request.done.result(timeout=30)
        fetched = sum(server.faults.requests.get(k, 0) for k in first_keys)
        # Only what was already in flight when the view moved (one per worker, plus one
        # more if this thread stalled for over a second and a load stopped counting)
        # was downloaded.
        assert fetched <= 3
        assert image.cache.statistics.parked >= 17
        second.request.release()
    finally:
        image.cache.close()


def test_s3_needs_no_extra_and_other_protocols_name_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fsspec not importable: None in sys.modules makes an import of it fail as a missing
    # package does. s3:// (obstore, a dependency) is read all the same: here from an
    # endpoint nothing listens on, an error of the endpoint, not of a package.
    for name in ("fsspec", "fsspec.core", "fsspec.utils"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setenv("NAPARI_LAZY_ZARR_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NAPARI_LAZY_ZARR_S3_ANON", "1")
    with pytest.raises(MetadataError, match=r"s3://bucket/image\.zarr: the S3 endpoint .*:9"):
        open_array("s3://bucket/image.zarr")
    with pytest.raises(NotAZarrStoreError, match=r"pip install fsspec"):
        open_array("ftp://example.org/image.zarr")


def test_a_url_with_a_query_is_refused_without_quoting_it() -> None:
    """obstore's HTTP store appends keys to the URL's path and drops its query: a signed URL
    would be read unsigned, so it is refused, its query (a secret) not shown."""
    with pytest.raises(MetadataError, match=r"a URL with a query") as caught:
        open_array("https://data.example.org/image.zarr?sig=s3cr3t")
    assert "s3cr3t" not in str(caught.value)


def test_unreachable_server_names_the_url() -> None:
    with pytest.raises(
        MetadataError, match=r"127\.0\.0\.1:9/image\.zarr: cannot read zarr metadata"
    ):
        open_array("http://127.0.0.1:9/image.zarr")


def test_error_classification() -> None:
    class Response(Exception):
        def __init__(self, status: int) -> None:
            self.status = status

    assert classify(Response(503)) == "transient"
    assert classify(Response(429)) == "transient"
    assert classify(Response(403)) == "denied"
    assert classify(Response(400)) == "permanent"
    wrapped = ChunkReadError("chunk x")
    wrapped.__cause__ = ConnectionResetError()
    assert classify(wrapped) == "transient"
    assert threading  # the module's server threads are exercised by the fixtures
