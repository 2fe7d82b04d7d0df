"""A real HTTP server on 127.0.0.1 serving a directory, with faults injected per request.

Started and stopped by the tests (`FaultyServer` is a context manager). Every
fault is decided per request from `Faults`, which tests change while the
server runs: latency, HTTP errors for chosen keys (a number of times, or
always, with a ``Retry-After`` header if asked), stalls (a request waits until
released), truncated bodies and corrupt payloads, and hostile answers: silence
(the request is read and never answered), a declared ``Content-Length`` of
10**12, an endless body, a ``Content-Encoding: gzip`` bomb and a body trickled
one byte at a time; mislabelled ranges (another range than asked, honestly
labelled, a ``206`` without or with a garbled ``Content-Range``, a total that
changes); redirects (``redirects``: a key prefix answered ``302`` to another
base URL). Each request is counted per path, and its headers are kept
(``seen``). Range requests are
served (sharded stores read inner chunks by byte range). Connections are kept
alive (HTTP/1.1), as real servers keep them, unless ``keep_alive=False``.
With ``tls=`` (an `ssl.SSLContext` holding a certificate, e.g. one `trustme`
issued at test time) it serves ``https://``.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


@dataclass
class Faults:
    """What goes wrong, per key (the path below the served directory, e.g. 'a.zarr/c/1/2')."""

    latency: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)  # key -> HTTP status
    error_times: dict[str, int] = field(
        default_factory=dict
    )  # key -> failures left (absent: always)
    truncated: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)
    stalled: set[str] = field(default_factory=set)
    stalling: threading.Event = field(default_factory=threading.Event)  # set: one is waiting
    release: threading.Event = field(default_factory=threading.Event)
    retry_after: dict[str, str] = field(default_factory=dict)  # key -> Retry-After of its errors
    # Hostile answers, per key ("*": every key).
    silent: set[str] = field(default_factory=set)  # read the request, never answer
    silenced: threading.Event = field(default_factory=threading.Event)  # set: one was
    huge_length: set[str] = field(default_factory=set)  # declare 10**12 bytes, send a few
    endless: set[str] = field(default_factory=set)  # a body without length or end
    gzip_bomb: set[str] = field(default_factory=set)  # Content-Encoding: gzip of zeros
    bomb_bytes: int = 256 << 20  # what the gzip bomb inflates to
    trickle: set[str] = field(default_factory=set)  # the body, one byte per `trickle_every`
    trickle_every: float = 0.1
    # Ranges answered wrongly, per key: another range (shifted by this many bytes, and
    # labelled so), a 206 without Content-Range, with a garbled one, or with a total
    # this many bytes off (as a file rewritten since an earlier answer would have).
    shifted: dict[str, int] = field(default_factory=dict)
    unlabelled: set[str] = field(default_factory=set)
    garbled: set[str] = field(default_factory=set)
    total_off: dict[str, int] = field(default_factory=dict)
    random_rate: float = 0.0  # fraction of chunk requests answered 503 (deterministic by count)
    # Key prefix -> base URL: a key under the prefix is answered 302 to the base URL + the rest.
    redirects: dict[str, str] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (key, its headers)
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: dict[str, int] = field(default_factory=dict)
    injected: int = 0
    connections: int = 0  # accepted so far

    def count(self, key: str) -> int:
        with self.lock:
            self.requests[key] = self.requests.get(key, 0) + 1
            return self.requests[key]

    def total(self, prefix: str = "") -> int:
        with self.lock:
            return sum(n for k, n in self.requests.items() if k.startswith(prefix))

    def hostile(self, key: str) -> str | None:
        """The hostile answer `key` gets, if any."""
        for mode in ("silent", "huge_length", "endless", "gzip_bomb", "trickle"):
            keys = getattr(self, mode)
            if key in keys or "*" in keys:
                return mode
        return None

    def error_for(self, key: str, nth: int) -> int | None:
        with self.lock:
            status = self.errors.get(key)
            if status is not None:
                left = self.error_times.get(key)
                if left is None:
                    self.injected += 1
                    return status
                if left > 0:
                    self.error_times[key] = left - 1
                    self.injected += 1
                    return status
            is_chunk = "/c/" in key or key.rsplit("/", 1)[-1][:1].isdigit()
            # Deterministic "random": a hash of the key and the attempt number.
            if is_chunk and (hash((key, nth)) % 10_000) / 10_000 < self.random_rate:
                self.injected += 1
                return 503
        return None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def setup(self) -> None:
        super().setup()
        # As real servers do on kept-alive connections: without it, a body written after
        # its headers waits for the client's delayed ACK (Nagle), ~40 ms per response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.faults.lock:
            self.server.faults.connections += 1

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        faults = self.server.faults
        key = self.path.split("?", 1)[0].lstrip("/")
        nth = faults.count(key)
        with faults.lock:
            # Field names as they are usually written (HTTP/1.1 clients may lowercase them).
            faults.seen.append(
                (key, {name.title(): value for name, value in self.headers.items()})
            )
        for prefix, base in faults.redirects.items():
            if key.startswith(prefix):
                self.send_response(302)
                self.send_header("Location", f"{base}{key[len(prefix) :]}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        if faults.latency:
            time.sleep(faults.latency)  # the injected latency of this request
        if key in faults.stalled:
            faults.stalling.set()
            faults.release.wait(timeout=30)
        hostile = faults.hostile(key)
        if hostile is not None:
            self._hostile(hostile, body=body)
            return
        status = faults.error_for(key, nth)
        if status is not None:
            self.send_response(status)
            if key in faults.retry_after:
                self.send_header("Retry-After", faults.retry_after[key])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = os.path.realpath(os.path.join(self.server.root, key))
        if not path.startswith(self.server.root) or not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(path, "rb") as handle:
            data = handle.read()
        start, end = 0, len(data)
        ranged = self.headers.get("Range")
        if ranged and ranged.startswith("bytes="):
            first, _, last = ranged[6:].partition("-")
            if first == "":  # suffix range: the last N bytes
                start = max(0, len(data) - int(last))
            else:
                start = int(first)
                end = min(len(data), int(last) + 1) if last else len(data)
        suffix = bool(ranged) and ranged.startswith("bytes=-")
        if ranged and not suffix and key in faults.shifted:  # another range, as long
            shift = faults.shifted[key]
            start, end = max(0, start + shift), min(len(data), end + shift)
        payload = data[start:end]
        if key in faults.corrupt:
            payload = bytes(b ^ 0x5A for b in payload)
        self.send_response(206 if ranged else 200)
        total = len(data) + faults.total_off.get(key, 0)
        if ranged and key in faults.garbled:
            self.send_header("Content-Range", f"bytes {start}+{end - start}")
        elif ranged and key not in faults.unlabelled:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{total}")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if not body:
            return
        if key in faults.truncated:
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)

    def _hostile(self, mode: str, *, body: bool) -> None:
        """Answer as a hostile server would; the connection is closed afterwards."""
        faults, stopping = self.server.faults, self.server.stopping
        self.close_connection = True
        if mode == "silent":
            faults.silenced.set()
            stopping.wait(timeout=60)  # until the test's server stops
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Connection", "close")
        if mode == "huge_length":
            self.send_header("Content-Length", str(10**12))
        elif mode == "gzip_bomb":
            self.send_header("Content-Encoding", "gzip")
        elif mode == "trickle":
            self.send_header("Content-Length", "64")
        self.end_headers()
        if not body:
            return
        try:
            if mode == "trickle":
                for _ in range(64):
                    if stopping.wait(timeout=faults.trickle_every):
                        return
                    self.wfile.write(b"x")
                    self.wfile.flush()
            elif mode == "gzip_bomb":
                # Streamed: the server never holds the inflated bytes either.
                gzip = zlib.compressobj(9, zlib.DEFLATED, 31)
                zeros = bytes(1 << 20)
                for _ in range(faults.bomb_bytes >> 20):
                    self.wfile.write(gzip.compress(zeros))
                self.wfile.write(gzip.flush())
            else:  # huge_length, endless: bytes until the client gives up
                piece = bytes(1 << 16)
                for _ in range(1 << 16):  # 4 GiB at most, so a test can never loop forever
                    if stopping.is_set():
                        return
                    self.wfile.write(piece)
        except OSError:
            pass  # the client hung up: what a bounded client does


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many requests arrive at once (32 in flight): the default backlog of 5 overflows and
    # the kernel makes dropped connections wait a second to retry.
    request_queue_size = 128
    faults: Faults
    root: str
    stopping: threading.Event

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-answer (a cancelled or timed-out read, a closed
        # store) is the point of many tests, not a server error worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError):
            return  # (an SSLError: a client that does not trust the certificate, by design)
        super().handle_error(request, client_address)


class _Http10Handler(_Handler):
    protocol_version = "HTTP/1.0"  # one request per connection


class FaultyServer:
    """Serves `root` on 127.0.0.1 (a free port) until the context exits."""

    def __init__(
        self,
        root: Path,
        faults: Faults | None = None,
        *,
        keep_alive: bool = True,
        tls: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.faults = faults or Faults()
        self._scheme = "http" if tls is None else "https"
        self._host = host
        handler = _Handler if keep_alive else _Http10Handler
        self._server = _Server(("127.0.0.1", 0), handler)
        if tls is not None:
            # The handshake happens in the handler's thread, at its first read: a client
            # refusing the certificate cannot stall the accepting thread.
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server.faults = self.faults
        self._server.stopping = threading.Event()
        self._server.root = os.path.realpath(root)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http(s)://host:port``, `host` as given (``localhost``: another origin)."""
        port = self._server.server_address[1]
        return f"{self._scheme}://{self._host}:{port}"

    def __enter__(self) -> FaultyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.faults.release.set()
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
