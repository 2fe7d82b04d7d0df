"""A real forward proxy on 127.0.0.1 that counts what it relays (started by the tests).

`CountingProxy` speaks what an institutional proxy does for HTTP clients:
``CONNECT host:port`` tunnels (for ``https://``: the bytes are relayed as they
are, TLS end to end) and absolute-form requests (``GET http://host:port/path``,
for ``http://``), forwarded to the origin server and answered back. With
``credentials`` it demands ``Proxy-Authorization: Basic`` of them (else 407).
Every request it is asked is recorded in `relayed` (method, target), every
``Proxy-Authorization`` it received in `authorizations`; a proxy header is
never forwarded to the origin.
"""

from __future__ import annotations

import base64
import http.client
import selectors
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP_BY_HOP = frozenset(
    {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "upgrade"}
)


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _ProxyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def _admitted(self) -> bool:
        proxy = self.server.owner
        given = self.headers.get("Proxy-Authorization")
        with proxy.lock:
            proxy.relayed.append((self.command, self.path))
            if given is not None:
                proxy.authorizations.append(given)
        if proxy.expected is None or given == proxy.expected:
            return True
        self.send_response(407)
        self.send_header("Proxy-Authenticate", 'Basic realm="test"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def do_CONNECT(self) -> None:
        if not self._admitted():
            return
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        with upstream:
            self._relay(self.connection, upstream)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        """Bytes both ways until either side closes (or the proxy stops)."""
        stopping = self.server.owner.stopping
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not stopping.is_set():
                for key, _ in selector.select(timeout=0.2):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(1 << 16)
                        if not data:
                            return
                        key.data.sendall(data)
                    except OSError:
                        return

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def _forward(self) -> None:
        if not self._admitted():
            return
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.hostname:
            self.send_error(400, "absolute-form http:// requests only")
            return
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        origin = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=10)
        try:
            origin.request(self.command, path, headers=headers)
            answer = origin.getresponse()
            body = answer.read()
        except OSError:
            self.send_error(502)
            return
        finally:
            origin.close()
        self.send_response(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP_BY_HOP | {"content-length", "transfer-encoding"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    owner: CountingProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up
        super().handle_error(request, client_address)


class CountingProxy:
    """A forward proxy on 127.0.0.1 (a free port) until the context exits.

    Examples
    --------
    ``with CountingProxy(credentials=("user", "pw")) as proxy: proxy.url_with_credentials``
    """

    def __init__(self, *, credentials: tuple[str, str] | None = None) -> None:
        self.lock = threading.Lock()
        self.relayed: list[tuple[str, str]] = []
        self.authorizations: list[str] = []
        self.stopping = threading.Event()
        self.credentials = credentials
        self.expected: str | None = None
        if credentials is not None:
            token = base64.b64encode(":".join(credentials).encode()).decode("ascii")
            self.expected = f"Basic {token}"
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url_with_credentials(self) -> str:
        assert self.credentials is not None
        user, password = self.credentials
        return f"http://{user}:{password}@127.0.0.1:{self._server.server_address[1]}"

    def count(self, method: str | None = None) -> int:
        """Requests relayed so far (of `method`, when given)."""
        with self.lock:
            return sum(1 for m, _ in self.relayed if method is None or m == method)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
