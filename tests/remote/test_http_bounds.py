"""The remote store against hostile servers: every answer bounded in time and in memory.

On the loopback `FaultyServer`: a server that never answers, declares a
terabyte, sends without end, sends a gzip bomb or trickles its body; statuses
with ``Retry-After``; refused connections. Every case ends in a clear
`LazyZarrError` naming the URL, within small `Timeouts`; memory is measured with
`tracemalloc` (what Python allocates, in every thread; obstore's buffers are
Rust's, so the peak RSS of the red team's cases is the bound that sees them).
"""

from __future__ import annotations

import re
import socket
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest

from napari_lazy_zarr import open_array
from napari_lazy_zarr._reader import napari_get_reader, read_zarr
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LazyZarrError,
    LoadCancelledError,
    LoadTimeoutError,
    MetadataError,
)
from napari_lazy_zarr.core.settings import Timeouts
from napari_lazy_zarr.core.sources._zarr_compat import run_sync
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_node
from napari_lazy_zarr.core.storage.local import store_for
from napari_lazy_zarr.core.storage.memo import forget_metadata
from napari_lazy_zarr.core.storage.remote import RemoteStore, remote_store_of
from napari_lazy_zarr.core.storage.remote_errors import (
    HttpAccessDeniedError,
    HttpError,
    HttpStatusError,
)
from napari_lazy_zarr.core.storage.retry import RetryPolicy, classify

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.remote.server import FaultyServer

    Served = tuple[FaultyServer, np.ndarray[Any, Any]]

SMALL = Timeouts(connect=1.0, read=0.5, total=1.5)
CHUNK = "a.zarr/c/1/2"  # rows 32:64, columns 64:96 of the served array
CHUNK_CAP = 1 << 20  # bytes a chunk body may have in these tests
BOUND = 10.0  # seconds any one case may take before the test fails (all take < 2 s)
MEMORY = 8 << 20  # bytes any one case may allocate at its peak


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="test-http-bounds") as executor:
        yield executor


def bounded(pool: ThreadPoolExecutor, call: Callable[[], Any]) -> tuple[Any, int]:
    """`call()` on another thread, waited for at most `BOUND`: (outcome, peak bytes allocated).

    The outcome is the result or the exception raised.
    """
    tracemalloc.start()
    try:
        future = pool.submit(call)
        error = future.exception(timeout=BOUND)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (error if error is not None else future.result()), peak


# -- the store alone ---------------------------------------------------------------

HOSTILE = [
    ("huge_length", HttpError, r"declares 1,000,000,000,000 bytes"),
    # Bodies of unknown length (this server's endless body and streamed gzip bomb) are
    # refused before a byte is read; a bomb declaring its length is refused by its
    # Content-Encoding (the red team's gzip-bomb case).
    ("endless", HttpError, r"declares no Content-Length"),
    ("gzip_bomb", HttpError, r"declares no Content-Length"),
    ("silent", LoadTimeoutError, r"server silent for 0.5 s \(Timeouts.read\)"),
    ("trickle", LoadTimeoutError, r"within 1.5 s \(Timeouts.total\)"),
]


@pytest.mark.parametrize(("mode", "kind", "message"), HOSTILE)
def test_a_hostile_answer_is_refused_in_bounded_time_and_memory(
    served: Served, pool: ThreadPoolExecutor, mode: str, kind: type[Exception], message: str
) -> None:
    server, _ = served
    getattr(server.faults, mode).add(CHUNK)
    store = RemoteStore(server.url, timeouts=SMALL, max_body_bytes=CHUNK_CAP)
    try:
        outcome, peak = bounded(pool, lambda: store.get_sync(CHUNK))
    finally:
        store.close()
    assert isinstance(outcome, kind), outcome
    assert isinstance(outcome, LazyZarrError)
    assert str(outcome).startswith(f"{server.url}/{CHUNK}: ")
    assert re.search(message, str(outcome))
    assert peak < MEMORY
    assert server.faults.requests[CHUNK] == 1
    # A timeout is worth retrying; a body refused by size or encoding is not.
    assert classify(outcome) == ("transient" if kind is LoadTimeoutError else "permanent")


def test_a_ranged_read_gets_its_range_and_a_whole_body_is_capped(
    served: Served, tmp_path: Path
) -> None:
    server, _ = served
    shard = (tmp_path / "s.zarr" / "c" / "0" / "0").read_bytes()
    with RemoteStore(f"{server.url}/s.zarr") as store:
        got = store.get_sync("c/0/0", byte_range=RangeByteRequest(10, 30))
        assert got is not None
        assert got.to_bytes() == shard[10:30]
        got = store.get_sync("c/0/0", byte_range=SuffixByteRequest(16))
        assert got is not None
        assert got.to_bytes() == shard[-16:]
        # A server answering a range with an endless whole body: refused unread.
        server.faults.endless.add("s.zarr/c/0/0")
        with pytest.raises(HttpError, match=r"s\.zarr/c/0/0: .*declares no Content-Length"):
            store.get_sync("c/0/0", byte_range=RangeByteRequest(10, 30))


@pytest.mark.parametrize("status", [429, 503])
def test_a_rate_limited_answer_is_transient_and_waited_out(served: Served, status: int) -> None:
    """obstore shows no response header on a failure, so the server's ``Retry-After`` is
    not known: the retry policy waits a rate limiter's usual second (doubling) instead."""
    server, _ = served
    server.faults.errors[CHUNK] = status
    server.faults.retry_after[CHUNK] = "3"
    with (
        RemoteStore(server.url, timeouts=SMALL) as store,
        pytest.raises(HttpStatusError) as caught,
    ):
        store.get_sync(CHUNK)
    assert caught.value.status == status
    assert caught.value.retry_after is None
    assert classify(caught.value) == "transient"
    policy = RetryPolicy(rate_limit_delay=1.0)
    assert 0.5 <= policy.wait_before_retry(1, caught.value) <= 1.0
    assert 1.0 <= policy.wait_before_retry(2, caught.value) <= 2.0


@pytest.mark.parametrize("status", [401, 403])
def test_access_denied_is_a_permission_error(served: Served, status: int) -> None:
    server, _ = served
    server.faults.errors[CHUNK] = status
    with RemoteStore(server.url) as store, pytest.raises(HttpAccessDeniedError) as caught:
        store.get_sync(CHUNK)
    assert isinstance(caught.value, PermissionError)
    assert classify(caught.value) == "denied"


def test_absent_keys_are_none_and_connections_are_kept_alive(served: Served) -> None:
    server, _data = served
    with RemoteStore(f"{server.url}/a.zarr") as store:
        assert store.get_sync("c/99/99") is None
        for _ in range(6):
            assert store.get_sync("zarr.json") is not None
        # Kept alive: one connection, or two when a request starts before the connection
        # of the one before is back in the pool (the client returns it on another thread).
        assert server.faults.connections <= 2


def test_close_ends_a_request_in_flight_at_once(served: Served, pool: ThreadPoolExecutor) -> None:
    server, _ = served
    server.faults.silent.add(CHUNK)
    store = RemoteStore(server.url)  # default timeouts: only close can end the wait soon
    waiting = pool.submit(lambda: run_sync(store.read(CHUNK, reader="test")))
    assert server.faults.silenced.wait(timeout=BOUND)
    store.close()
    with pytest.raises(LoadCancelledError, match=r"a\.zarr/c/1/2: request closed"):
        waiting.result(timeout=BOUND)
    with pytest.raises(LoadCancelledError, match="closed"):
        store.get_sync(CHUNK)


def test_one_thread_s_request_can_be_cancelled(served: Served, pool: ThreadPoolExecutor) -> None:
    server, _data = served
    server.faults.silent.add(CHUNK)
    store = RemoteStore(f"{server.url}/a.zarr")
    try:
        started = threading.Event()
        thread: list[int] = []

        def read() -> Any:
            thread.append(threading.get_ident())
            started.set()
            return run_sync(store.read("c/1/2", reader=thread[0]))

        waiting = pool.submit(read)
        assert started.wait(timeout=BOUND)
        assert server.faults.silenced.wait(timeout=BOUND)
        assert store.cancel_reader(thread[0])
        with pytest.raises(LoadCancelledError, match="cancelled"):
            waiting.result(timeout=BOUND)
        got = store.get_sync("c/1/1")  # the store goes on serving
        assert got is not None
    finally:
        store.close()


# -- through the engine: chunk sources and opening ------------------------------------


def open_bounded(url: str) -> ZarrChunkSource:
    store, _ = store_for(url, timeouts=SMALL)
    try:
        node = open_node(store, "", url)
    finally:
        forget_metadata(store)
    assert isinstance(node, zarr.Array)
    source = ZarrChunkSource(node, location=url, retry=RetryPolicy(attempts=2, base_delay=0.01))
    remote = remote_store_of(store)
    assert remote is not None
    remote.limit("", CHUNK_CAP)  # what ZarrChunkSource should do with its own cap
    return source


@pytest.mark.parametrize("mode", [mode for mode, _, _ in HOSTILE])
def test_a_hostile_chunk_fails_clearly_and_others_load(
    served: Served, pool: ThreadPoolExecutor, mode: str
) -> None:
    server, data = served
    source = open_bounded(f"{server.url}/a.zarr")
    getattr(server.faults, mode).add(CHUNK)
    outcome, peak = bounded(pool, lambda: source.read_chunk((1, 2)))
    assert isinstance(outcome, ChunkReadError)
    assert "'c/1/2'" in str(outcome)
    assert "a.zarr" in str(outcome)
    assert peak < MEMORY
    # Timeouts are retried (2 attempts here); refusals are not.
    assert server.faults.requests[CHUNK] == (2 if mode in ("silent", "trickle") else 1)
    np.testing.assert_array_equal(source.read_chunk((1, 1)), data[32:64, 32:64])


@pytest.mark.parametrize("mode", ["silent", "gzip_bomb", "huge_length"])
def test_opening_a_hostile_server_fails_clearly_in_bounded_time(
    served: Served, pool: ThreadPoolExecutor, mode: str
) -> None:
    server, _ = served
    getattr(server.faults, mode).add("*")
    url = f"{server.url}/a.zarr"
    outcome, _ = bounded(pool, lambda: open_bounded(url))
    assert isinstance(outcome, MetadataError), outcome
    assert str(outcome).startswith(f"{url}: cannot read zarr metadata")
    # A silent server is not asked twice for one document (it had a whole timeout).
    assert max(server.faults.requests.values()) == 1


def test_metadata_is_retried_on_transient_failures(served: Served) -> None:
    server, data = served
    server.faults.errors["a.zarr/zarr.json"] = 503
    server.faults.error_times["a.zarr/zarr.json"] = 2
    source = open_bounded(f"{server.url}/a.zarr")
    assert server.faults.requests["a.zarr/zarr.json"] == 3
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data[:32, :32])


def test_metadata_access_denied_is_not_retried(served: Served) -> None:
    server, _ = served
    server.faults.errors["a.zarr/zarr.json"] = 403
    with pytest.raises(MetadataError, match=r"a\.zarr: cannot read zarr metadata.*403"):
        open_bounded(f"{server.url}/a.zarr")
    assert server.faults.requests["a.zarr/zarr.json"] == 1


@pytest.fixture
def refused_url() -> str:
    """A loopback URL whose port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/image.zarr"


def test_a_refused_connection_at_open_names_the_url(
    refused_url: str, pool: ThreadPoolExecutor
) -> None:
    expected = rf"{refused_url}: cannot read zarr metadata: .*cannot connect"
    for entry in (open_array, read_zarr):
        outcome, _ = bounded(pool, lambda entry=entry: entry(refused_url))  # type: ignore[misc]
        assert isinstance(outcome, MetadataError), outcome
        assert re.match(expected, str(outcome)), outcome
        assert isinstance(outcome.__cause__, ConnectionRefusedError | OSError)
    # The hook decides from the name for *.zarr URLs and never raises; others it probes.
    assert napari_get_reader(refused_url) is read_zarr
    assert napari_get_reader(refused_url.removesuffix(".zarr")) is None


def test_a_group_is_listed_from_the_server_s_html_index(tmp_path: Path) -> None:
    """Members of a group without consolidated metadata, as fsspec lists them over HTTP."""
    import functools
    import http.server

    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("a", shape=(4,), dtype="u1")
    group.create_group("sub")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/g.zarr"
        with RemoteStore(url, timeouts=SMALL) as store:
            opened = zarr.open_group(store, mode="r", use_consolidated=False)
            assert sorted(name for name, _ in opened.members()) == ["a", "sub"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=BOUND)


def test_a_cancelled_chunk_read_stops_when_its_request_ends(
    served: Served, pool: ThreadPoolExecutor
) -> None:
    """obstore's blocking request cannot be cut short; once it ends, a read the cache
    cancelled (`cancel_load`, as its `close` does) stops: no decode, no retry."""
    server, data = served
    source = open_bounded(f"{server.url}/a.zarr")
    server.faults.stalled.add(CHUNK)
    reading = pool.submit(source.read_chunk, (1, 2))
    assert server.faults.stalling.wait(timeout=BOUND)  # the request reached the server
    source.cancel_load((1, 2))
    server.faults.release.set()
    with pytest.raises(LoadCancelledError, match=r"c/1/2' cancelled"):
        reading.result(timeout=BOUND)
    assert server.faults.requests[CHUNK] == 1  # not retried
    np.testing.assert_array_equal(source.read_chunk((1, 2)), data[32:64, 64:96])  # anew: read
