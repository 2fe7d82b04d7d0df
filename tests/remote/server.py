"""A real HTTP server on 127.0.0.1 serving a directory, with faults injected per request.

Started and stopped by the tests (`FaultyServer` is a context manager). Every
fault is decided per request from `Faults`, which tests change while the
server runs: latency, HTTP errors for chosen keys (a number of times, or
always), stalls (a request waits until released), truncated bodies and
corrupt payloads. Each request is counted per path. Range requests are
served (sharded stores read inner chunks by byte range).
"""

from __future__ import annotations

import os
import threading
import time
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
    release: threading.Event = field(default_factory=threading.Event)
    random_rate: float = 0.0  # fraction of chunk requests answered 503 (deterministic by count)
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: dict[str, int] = field(default_factory=dict)
    injected: int = 0

    def count(self, key: str) -> int:
        with self.lock:
            self.requests[key] = self.requests.get(key, 0) + 1
            return self.requests[key]

    def total(self, prefix: str = "") -> int:
        with self.lock:
            return sum(n for k, n in self.requests.items() if k.startswith(prefix))

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

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        faults = self.server.faults
        key = self.path.split("?", 1)[0].lstrip("/")
        nth = faults.count(key)
        if faults.latency:
            time.sleep(faults.latency)  # the injected latency of this request
        if key in faults.stalled:
            faults.release.wait(timeout=30)
        status = faults.error_for(key, nth)
        if status is not None:
            self.send_response(status)
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
        payload = data[start:end]
        if key in faults.corrupt:
            payload = bytes(b ^ 0x5A for b in payload)
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many requests arrive at once (32 in flight): the default backlog of 5 overflows and
    # the kernel makes dropped connections wait a second to retry.
    request_queue_size = 128
    faults: Faults
    root: str


class FaultyServer:
    """Serves `root` on 127.0.0.1 (a free port) until the context exits."""

    def __init__(self, root: Path, faults: Faults | None = None) -> None:
        self.faults = faults or Faults()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.faults = self.faults
        self._server.root = os.path.realpath(root)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FaultyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.faults.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
