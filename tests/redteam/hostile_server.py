"""A hostile HTTP server on 127.0.0.1: it serves a directory, misbehaving as each URL asks.

A URL is ``{server.url}/{behaviour}/{path below the root}``. The behaviour (a key
of `BEHAVIOURS`) names what goes wrong and for which keys: ``chunk-*`` behaviours
misbehave on chunk and shard keys and serve metadata normally, ``meta-*`` ones
the reverse, ``all-*`` ones on every key; ``plain`` serves everything normally
(with byte ranges). What each misbehaviour is:

- ``huge-length``: ``Content-Length: 10**12``, then zeros without end.
- ``endless-chunked``: chunked transfer encoding, zeros without end.
- ``endless-close``: no length, zeros until the client hangs up.
- ``gzip-bomb`` / ``deflate-bomb``: ``Content-Encoding: gzip`` (``deflate``) over a
  half-megabyte body that inflates to 512 MiB.
- ``silent``: accept the connection and never answer.
- ``drip``: the right status and length, then one byte every 0.2 s.
- ``stall-mid-body``: half the body, then silence.
- ``reset``: close the connection before answering.
- ``retry-after-S-N`` (``N`` seconds), ``retry-after-S-date``: answer status ``S``
  with ``Retry-After`` until that time has passed (as a rate limiter does: asking
  sooner is refused again), then serve normally. ``N`` = 3600 never relents
  within a test.
- ``shifted-range``: a ranged request (``bytes=a-b``) is answered with the range two
  bytes further on, honestly labelled so in ``Content-Range`` (a suffix request, and a
  request without ``Range``, is served right: a shard's index is found).
- ``unlabelled-range`` / ``garbled-range``: a ``206`` without ``Content-Range``, or with
  one that is not ``bytes a-b/total``.
- ``gone-410``: ``410 Gone``.

Handlers are daemon threads; `stop` releases the silent ones.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

from tests.redteam.bombs import payload

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Target = Literal["chunk", "meta", "all"]
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
_ZEROS = bytes(1 << 16)
_PATIENCE = 120.0  # longest a handler keeps a connection open without answering


def _targets(target: Target, key: str) -> bool:
    if target == "all":
        return True
    is_meta = key.rsplit("/", 1)[-1] in METADATA_NAMES
    return is_meta if target == "meta" else not is_meta


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        self.connection.settimeout(_PATIENCE)  # a blocked write ends when the client is gone
        behaviour, _, key = self.path.split("?", 1)[0].lstrip("/").partition("/")
        spec = BEHAVIOURS.get(behaviour)
        if self.server.stop.is_set():  # stopped: a kept-alive connection is gone too
            _reset(self, behaviour, key, body)
            return
        if spec is None:
            self._empty(400)
            return
        target, action = spec
        try:
            if target is not None and _targets(target, key):
                action(self, behaviour, key, body)
            else:
                self.serve_file(key, body)
        except (OSError, ValueError):
            self.close_connection = True  # the client left: nothing to do

    # -- building blocks ------------------------------------------------------

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def file_bytes(self, key: str) -> bytes | None:
        """A small file's bytes (for the misbehaviours that send them slowly), None if absent."""
        path = os.path.realpath(os.path.join(self.server.root, key))
        if not path.startswith(self.server.root + os.sep) or not os.path.isfile(path):
            return None
        with open(path, "rb") as handle:
            return handle.read(1 << 20)

    def serve_file(self, key: str, body: bool, *, shift: int = 0, label: str = "honest") -> None:
        """Serve a file (or the asked range of it) in pieces: a range may be a gigabyte.

        `shift` moves a ``bytes=a-b`` range (the answer is another range); `label`
        ``"none"`` or ``"garbled"`` sends a 206 without a proper ``Content-Range``.
        """
        path = os.path.realpath(os.path.join(self.server.root, key))
        if not path.startswith(self.server.root + os.sep) or not os.path.isfile(path):
            self._empty(404)
            return
        status = os.stat(path)
        size, start, end = status.st_size, 0, status.st_size
        ranged = self.headers.get("Range")
        if ranged and ranged.startswith("bytes="):
            first, _, last = ranged[6:].partition("-")
            if first == "":
                start = max(0, size - int(last))
            else:
                start = min(int(first) + shift, size)
                end = min(size, int(last) + 1 + shift) if last else size
        self.send_response(206 if ranged else 200)
        if ranged and label == "honest":
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        elif ranged and label == "garbled":
            self.send_header("Content-Range", f"bytes {start}+{end - start}")
        self.send_header("Content-Length", str(max(0, end - start)))
        self.send_header("Content-Type", "application/octet-stream")
        # What real servers send, so that a client can tell a rewritten file.
        self.send_header("ETag", f'"{status.st_mtime_ns:x}-{size:x}"')
        self.send_header("Last-Modified", formatdate(status.st_mtime, usegmt=True))
        self.end_headers()
        if not body:
            return
        with open(path, "rb") as handle:
            handle.seek(start)
            left = end - start
            while left > 0:
                piece = handle.read(min(left, 1 << 20))
                if not piece:
                    break
                self.wfile.write(piece)
                left -= len(piece)

    def stream_zeros(self) -> None:
        stop = self.server.stop
        while not stop.is_set():
            self.wfile.write(_ZEROS)


# -- misbehaviours ------------------------------------------------------------------


def _huge_length(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(10**12))
    handler.end_headers()
    if body:
        handler.stream_zeros()


def _endless_chunked(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    piece = f"{len(_ZEROS):x}\r\n".encode() + _ZEROS + b"\r\n"
    while body and not handler.server.stop.is_set():
        handler.wfile.write(piece)


def _endless_close(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.send_response(200)
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    if body:
        handler.stream_zeros()


def _bomb(encoding: str, name: str) -> Callable[[_Handler, str, str, bool], None]:
    def serve(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
        data = payload(name)
        handler.send_response(200)
        handler.send_header("Content-Encoding", encoding)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    return serve


def _silent(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.server.stop.wait(_PATIENCE)
    handler.close_connection = True


def _drip(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    data = handler.file_bytes(key) or bytes(8192)
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    for index in range(len(data) if body else 0):
        handler.wfile.write(data[index : index + 1])
        handler.wfile.flush()
        if handler.server.stop.wait(0.2):
            return


def _stall_mid_body(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    data = handler.file_bytes(key) or bytes(8192)
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    if body:
        handler.wfile.write(data[: len(data) // 2])
        handler.wfile.flush()
        _silent(handler, behaviour, key, body)


def _reset(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.close_connection = True
    with contextlib.suppress(OSError):
        handler.connection.shutdown(2)


def _retry_after(
    status: int, wait: float | Literal["date"]
) -> Callable[[_Handler, str, str, bool], None]:
    def serve(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
        now = time.time()
        seconds = 2.0 if wait == "date" else wait
        with handler.server.lock:
            until = handler.server.refused_until.setdefault((behaviour, key), now + seconds)
        if now >= until:
            handler.serve_file(key, body)
            return
        # An HTTP-date has whole seconds: round up so that the date is never early.
        value = formatdate(int(until) + 1, usegmt=True) if wait == "date" else str(int(wait))
        handler.server.count_refusal()
        handler._empty(status, {"Retry-After": value})

    return serve


def _shifted_range(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.serve_file(key, body, shift=2)


def _unlabelled_range(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.serve_file(key, body, label="none")


def _garbled_range(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler.serve_file(key, body, label="garbled")


def _gone(handler: _Handler, behaviour: str, key: str, body: bool) -> None:
    handler._empty(410)


type Action = Callable[[_Handler, str, str, bool], None]
_ACTIONS: dict[str, Action] = {
    "huge-length": _huge_length,
    "endless-chunked": _endless_chunked,
    "endless-close": _endless_close,
    "gzip-bomb": _bomb("gzip", "gzip"),
    "deflate-bomb": _bomb("deflate", "zlib"),
    "silent": _silent,
    "drip": _drip,
    "stall-mid-body": _stall_mid_body,
    "reset": _reset,
    "retry-after-429-1": _retry_after(429, 1.0),
    "retry-after-503-1": _retry_after(503, 1.0),
    "retry-after-429-date": _retry_after(429, "date"),
    "retry-after-503-3600": _retry_after(503, 3600.0),
    "shifted-range": _shifted_range,
    "unlabelled-range": _unlabelled_range,
    "garbled-range": _garbled_range,
    "gone-410": _gone,
}
BEHAVIOURS: dict[str, tuple[Target | None, Action]] = {
    "plain": (None, _silent),
    **{
        f"{target}-{name}": (target, action)
        for target in ("chunk", "meta", "all")
        for name, action in _ACTIONS.items()
    },
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    root: str
    stop: threading.Event
    lock: threading.Lock
    refused_until: dict[tuple[str, str], float]
    refusals: int

    def count_refusal(self) -> None:
        with self.lock:
            self.refusals += 1


class HostileServer:
    """Serves `root` on 127.0.0.1 (a free port) until `stop` or the context exits."""

    def __init__(self, root: Path) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.root = os.path.realpath(root)
        self._server.stop = threading.Event()
        self._server.lock = threading.Lock()
        self._server.refused_until = {}
        self._server.refusals = 0
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def start(self) -> HostileServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
