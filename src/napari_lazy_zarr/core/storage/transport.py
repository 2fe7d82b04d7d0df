"""`HttpClient`: one bounded HTTP/1.1 client, shared by `HttpStore` and the reference reader.

The standard library's `http.client` on keep-alive connections shared by the
threads that call it (pooled per origin and route), with every bound of the
bounded-reads work:

- **Time**: `Timeouts.connect` to connect, `Timeouts.read` of silence between
  two received pieces, `Timeouts.total` per request (a watchdog thread shuts
  the socket of a request past its deadline): `LoadTimeoutError`.
- **Bytes**: a caller-given cap per request; a declared length over it is
  refused before a byte of the body is read, a body without one is cut at the
  cap plus one byte (`HttpBodyTooLargeError`). Only ``identity`` is asked for
  and accepted: nothing is inflated.
- **Statuses**: 404 is None; 416 an empty range; 401/403
  `HttpAccessDeniedError`; 408, 425, 429 and 5xx a transient `HttpStatusError`
  with the server's ``Retry-After``; any other an `HttpStatusError` not retried.
- **Ranges**: a ``206`` is taken only when its ``Content-Range`` is the range
  asked and the file's total agrees with earlier answers (`core.storage._ranges`),
  else `HttpRangeError`; a ``200`` to a range request is read within the cap and
  sliced.
- **Redirects**: followed up to `max_redirects` (0: refused); each hop gets its
  own route and headers, so configured headers never follow a redirect to
  another host.
- **Cancellation**: `close` shuts every socket at once (requests in flight
  raise `LoadCancelledError`), `cancel_thread` one thread's request.
- **Routes** (`RemoteConfig`, resolved from the settings at the first request):
  TLS verified against the system's CAs plus ``[remote] ca_bundle`` (an
  untrusted certificate is `HttpCertificateError`, naming the setting);
  ``http://`` through a proxy as an absolute-form request, ``https://`` through
  a ``CONNECT`` tunnel (`http.client.HTTPSConnection.set_tunnel`), with
  ``Proxy-Authorization`` from the proxy URL's credentials.

Why not urllib3 (installed with napari's dependencies; it brings proxies and
pooling): its pool gives no handle on a request's socket before the response
head arrives, so neither the watchdog nor `close` could shut a request still
connecting or waiting; and it is not clearly faster. Measured with
``python -m bench.http_client`` (the workload of `core.storage.http`: 1,024
uncompressed 64x64 uint16 chunks, 32 threads, the loopback server in another
process adding 20 ms per request, 2 cores shared with other work, median of 5),
four runs, this client against a urllib3 ``PoolManager`` under the same caps
(``preload_content=False``, ``Retry(False)``, a capped read loop): 0.75 / 0.87 s,
0.82 / 0.86 s, 1.14 / 0.94 s (load average 6.5), 0.71 / 0.73 s (the first two
with its precursor script).

Nothing is logged here: neither a proxy's credentials nor a header value ever
reaches a message.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import http.client
import math
import socket
import ssl
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Final
from urllib.parse import urljoin, urlsplit, urlunsplit

from zarr.abc.store import (
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LoadCancelledError,
    LoadTimeoutError,
)
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.storage._ranges import check_partial, range_header
from napari_lazy_zarr.core.storage.remote_config import RemoteConfig, remote_config

if TYPE_CHECKING:
    from zarr.abc.store import ByteRequest

    from napari_lazy_zarr.core.remote_values import ProxyAddress

__all__ = [
    "CA_BUNDLE_HINT",
    "HttpAccessDeniedError",
    "HttpBodyTooLargeError",
    "HttpCertificateError",
    "HttpClient",
    "HttpError",
    "HttpRangeError",
    "HttpStatusError",
    "parse_retry_after",
    "split_url",
]

CA_BUNDLE_HINT: Final = (
    "if the server's certificate is signed by your own certificate authority, name "
    "its PEM file in the setting [remote] ca_bundle (NAPARI_LAZY_ZARR_CA_BUNDLE, or "
    "Preferences > Plugin Preferences > napari-lazy-zarr > Remote access), or in SSL_CERT_FILE"
)
"""What an untrusted-certificate error tells the user to do."""
DEFAULT_MAX_REDIRECTS: Final = 5
_MAX_ERROR_BODY: Final = 1 << 16  # of an error response, read to keep its connection
_PIECE: Final = 1 << 20  # bytes read at a time from a body of undeclared length
_IDLE_KEPT: Final = 64  # keep-alive connections kept per route
_TRANSIENT: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
_WATCHDOG_LINGER: Final = 0.2  # seconds the deadline thread outlives the last request
_KNOWN_TOTALS: Final = 4096  # file sizes remembered per client (URLs), oldest forgotten first
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})


# -- errors ----------------------------------------------------------------------


class HttpError(ChunkReadError):
    """A request the store could not answer with data; the message names the URL."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class HttpStatusError(HttpError):
    """An HTTP status other than success or 404: `status`, and `retry_after` seconds or None.

    408, 425, 429 and 5xx are transient (`core.storage.retry.classify` reads `status`).
    """

    def __init__(self, message: str, *, url: str, status: int, retry_after: float | None) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.retry_after = retry_after


class HttpAccessDeniedError(HttpStatusError, PermissionError):
    """HTTP 401 or 403: credentials are missing or refused; never retried."""


class HttpRangeError(HttpError):
    """A ``206`` answer whose ``Content-Range`` is not the range asked (or is missing).

    Retried as transient (`retryable`): a proxy or a server mid-update may answer
    right next time; its bytes are never served as the range asked.
    """

    retryable = True


class HttpCertificateError(HttpError):
    """The server's TLS certificate is not trusted (`CA_BUNDLE_HINT` says what to do)."""


class HttpBodyTooLargeError(HttpError):
    """A body over its cap: `declared` its declared length (None: it ran past `cap`)."""

    def __init__(self, message: str, *, url: str, cap: int, declared: int | None) -> None:
        super().__init__(message, url=url)
        self.cap = cap
        self.declared = declared


class _TruncatedError(HttpError, ConnectionError):
    """The connection ended before the body did (transient)."""


class _ConnectError(HttpError, ConnectionError):
    """No connection: refused, reset, unknown host (transient)."""


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date), or None.

    A date in the past is 0; anything unreadable (or negative, or not finite) is None.

    Examples
    --------
    >>> parse_retry_after("120")
    120.0
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)
    10.0
    >>> parse_retry_after("soon") is None
    True
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT
            when = when.replace(tzinfo=UTC)
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# -- requests in flight and their deadlines ----------------------------------------


@dataclass(eq=False, slots=True)
class _Request:
    """One request in flight: what `close`, cancellation and the watchdog may shut."""

    deadline: float
    thread: int = field(default_factory=threading.get_ident)
    sock: socket.socket | None = None  # kept: a response to "Connection: close" owns it
    connected: bool = False  # past Timeouts.connect: now waiting for the answer
    ended: str | None = None  # "timeout", "cancelled" or "closed" once shut

    def shut(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # wakes the thread blocked in recv
                sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread shutting requests past their total deadline.

    It sleeps until the earliest deadline in flight (adding an earlier one wakes
    it), and ends soon after the last request in flight does.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._requests: set[_Request] = set()
        self._target = math.inf
        self._thread: threading.Thread | None = None

    def add(self, request: _Request) -> None:
        with self._wake:
            self._requests.add(request)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lazy-zarr-http-deadlines", daemon=True
                )
                self._thread.start()
            if request.deadline < self._target:
                self._wake.notify()

    def discard(self, request: _Request) -> None:
        with self._wake:
            self._requests.discard(request)
            if not self._requests:
                self._wake.notify()  # to linger, then end

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                late = [r for r in self._requests if r.deadline <= now]
                self._requests.difference_update(late)
                self._target = min((r.deadline for r in self._requests), default=math.inf)
                if not late and self._target == math.inf:
                    # Nothing in flight: linger briefly (requests come in bursts), then end.
                    if not self._wake.wait(_WATCHDOG_LINGER) and not self._requests:
                        self._thread = None
                        return
                    continue
                if not late:
                    self._wake.wait(self._target - now)
                    continue
            for request in late:
                request.shut("timeout")


_WATCHDOG: Final = _Watchdog()

# -- routes and connections ------------------------------------------------------


type _Origin = tuple[str, str, int]  # scheme, host, port
type _Route = tuple[str, str, int, str | None, int | None]  # origin, then proxy host and port


def split_url(url: str) -> tuple[_Origin, str, str]:
    """(origin, path, query) of an http(s) URL; ValueError for anything else.

    Examples
    --------
    >>> split_url("https://Example.org/a.zarr?sig=1")
    (('https', 'example.org', 443), '/a.zarr', 'sig=1')
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    port = parts.port or (443 if scheme == "https" else 80)
    return (scheme, parts.hostname, port), parts.path, parts.query


def _proxy_authorization(proxy: ProxyAddress) -> dict[str, str]:
    if not (proxy.username or proxy.password):
        return {}
    token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode("ascii")
    return {"Proxy-Authorization": f"Basic {token}"}


class HttpClient:
    """Bounded HTTP/1.1 requests on pooled keep-alive connections (see the module's docstring).

    Parameters
    ----------
    timeouts
        Connect, idle-read and total caps of each request.
    config
        CA bundle, proxies and headers; None: the user's (`remote_config`),
        resolved at the first request (an invalid setting fails that request
        with `MetadataError`, never the client's creation).
    max_redirects
        Redirects followed per request (0: a redirect is an `HttpError`).

    Thread-safe: one client serves many threads; `close` ends them all.

    Examples
    --------
    >>> client = HttpClient(config=RemoteConfig())
    >>> client.close()
    >>> client.get("http://127.0.0.1:9/x", None, 16)
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.LoadCancelledError: the HTTP client is closed
    """

    def __init__(
        self,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        *,
        config: RemoteConfig | None = None,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
    ) -> None:
        self.timeouts = timeouts
        self.max_redirects = max_redirects
        self._config = config
        self._lock = threading.Lock()
        self._idle: dict[_Route, list[http.client.HTTPConnection]] = {}
        self._in_flight: set[_Request] = set()
        self._closed = False
        self._tls: ssl.SSLContext | None = None
        # URL -> the file's size as a 206 answer's Content-Range gave it (a later answer must
        # agree: a shard rewritten between its index and its inner chunk is not read torn).
        self._totals: dict[str, int] = {}
        # Nobody need close a client: idle sockets are closed when it is collected.
        weakref.finalize(self, _close_idle, self._idle, self._lock)

    @property
    def config(self) -> RemoteConfig:
        """The routes' configuration (resolved from the settings on first use)."""
        config = self._config
        if config is None:
            config = remote_config()
            with self._lock:
                self._config = config = self._config or config
        return config

    def __repr__(self) -> str:
        return f"HttpClient({self.timeouts!r})"

    # -- one request, redirects followed -------------------------------------------

    def get(
        self,
        url: str,
        byte_range: ByteRequest | None,
        cap: int,
        *,
        method: str = "GET",
    ) -> bytearray | None:
        """`url`'s body (or `byte_range` of it) within `cap` bytes; None for 404.

        A ``HEAD`` answers an empty body (None for 404).
        """
        headers = {"Accept-Encoding": "identity", "User-Agent": "napari-lazy-zarr"}
        if byte_range is not None:
            if not isinstance(
                byte_range, RangeByteRequest | OffsetByteRequest | SuffixByteRequest
            ):
                raise ValueError(f"{url}: unexpected byte range {byte_range!r}")
            headers["Range"] = range_header(byte_range)
        for _ in range(self.max_redirects + 1):
            status, body, location = self._request(method, url, headers, cap, byte_range)
            if location is None:
                break
            if self.max_redirects == 0:
                raise HttpError(
                    f"{url}: HTTP {status}: redirects to {location!r} are not followed here "
                    "(a reference must name the data's own URL)",
                    url=url,
                )
            url = urljoin(url, location)
        else:
            raise HttpError(f"{url}: more than {self.max_redirects} redirects", url=url)
        if status == 404 or body is None:
            return None
        if status == 200 and byte_range is not None:
            # The server ignored the range and sent the whole file, within the cap (as
            # `FsspecStore` would take it): the range is a slice of it.
            return _slice(body, byte_range)
        return body

    def _request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        cap: int,
        byte_range: ByteRequest | None,
    ) -> tuple[int, bytearray | None, str | None]:
        """(status, body, redirect location) of one exchange, on a pooled connection.

        A ``206`` body is read only once its ``Content-Range`` is the range asked.
        """
        request = self._begin()
        proxy: ProxyAddress | None = None
        try:
            config = self.config
            proxy = config.proxy_for(url)
            origin, path, query = split_url(url)
            target = (path or "/") + (f"?{query}" if query else "")
            sent = {**config.headers_for(url), **headers}  # its own host's, none other's
            if proxy is not None and origin[0] == "http":
                # Through the proxy in absolute form (RFC 9112, 3.2.2), without userinfo.
                scheme, host, port = origin
                target = urlunsplit((scheme, f"{host}:{port}", path or "/", query, ""))
                sent.update(_proxy_authorization(proxy))
            route: _Route = (*origin, *((proxy.host, proxy.port) if proxy else (None, None)))
            connection, response = self._exchange(request, route, proxy, method, target, sent)
            try:
                status = response.status
                location = response.getheader("Location")
                body: bytearray | None = None
                if status in _REDIRECTS and location:
                    _drain(response)
                elif status == 206 and byte_range is not None:
                    body = self._read_partial(response, url, byte_range, head=method == "HEAD")
                elif status == 200:
                    body = _read_body(response, cap, url, head=method == "HEAD")
                elif status == 416:  # a range past the end: empty, as FsspecStore answers
                    body = bytearray()
                    _drain(response)
                elif status == 404:
                    # Only 404 is an absent key, as for zarr's FsspecStore (fsspec's HTTP
                    # filesystem raises FileNotFoundError for 404 alone) and ObjectStore
                    # (obstore's NotFound): both return None for FileNotFoundError only.
                    # 410 Gone, 451 and the like are errors: never served as fill value.
                    _drain(response)
                else:
                    _drain(response)
                    raise _status_error(url, response)
                if request.ended is not None:  # shut mid-body: what arrived is not the body
                    raise TimeoutError(request.ended)
            except BaseException:
                response.close()  # it may own the socket (an answer with "Connection: close")
                connection.close()
                raise
            if response.will_close:
                response.close()
                connection.close()
            else:
                self._keep(route, connection)
            return status, body, location if status in _REDIRECTS else None
        except (OSError, http.client.HTTPException) as error:
            raise self._failure(url, proxy, request, error) from error
        finally:
            self._end(request)

    def _read_partial(
        self,
        response: http.client.HTTPResponse,
        url: str,
        byte_range: ByteRequest,
        *,
        head: bool,
    ) -> bytearray:
        """A ``206`` body, once its ``Content-Range`` says it is `byte_range` of the file."""
        header = response.getheader("Content-Range")
        with self._lock:
            known = self._totals.get(url)
        span = check_partial(header, byte_range, known)
        if not isinstance(span, str) and response.length not in (None, span.length):
            span = f"its Content-Length {response.length} is not the {span.length} it declares"
        if isinstance(span, str):
            response.will_close = True  # its body is not read: the connection goes
            raise HttpRangeError(
                f"{url}: asked for {range_header(byte_range)}, the 206 answer is "
                f"{header!r}: {span}; refused (retried)",
                url=url,
            )
        if span.total is not None:
            with self._lock:
                if url not in self._totals and len(self._totals) >= _KNOWN_TOTALS:
                    del self._totals[next(iter(self._totals))]  # bounded: the oldest goes
                self._totals[url] = span.total
        body = _read_body(response, span.length, url, head=head)
        if not head and len(body) != span.length:  # no Content-Length, and a short body
            raise _TruncatedError(
                f"{url}: {len(body)} of the {span.length} bytes of {span.text()!r} arrived",
                url=url,
            )
        return body

    def _exchange(
        self,
        request: _Request,
        route: _Route,
        proxy: ProxyAddress | None,
        method: str,
        target: str,
        headers: dict[str, str],
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send the request and read the response's head.

        A kept-alive connection the server closed meanwhile fails before any
        answer: the exchange is then tried once more on a new connection.
        """
        fresh = False
        while True:
            connection, reused = self._connection(route, proxy, fresh=fresh)
            try:
                if connection.sock is None:
                    _connect(connection, self.timeouts.read)
                request.sock = connection.sock
                request.connected = True
                if request.ended is not None:  # shut while connecting
                    raise TimeoutError(request.ended)
                connection.request(method, target, headers=headers)
                return connection, connection.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()
                if not reused or request.ended is not None:
                    raise
                fresh = True  # a stale keep-alive connection
            except BaseException:
                connection.close()
                raise

    def _failure(
        self, url: str, proxy: ProxyAddress | None, request: _Request, error: BaseException
    ) -> BaseException:
        """Our error for a failed exchange (a refusal already ours is passed through)."""
        if isinstance(error, HttpError) and request.ended is None:
            return error
        timeouts = self.timeouts
        if request.ended == "timeout":
            return LoadTimeoutError(
                f"{url}: no complete answer within {timeouts.total:g} s (Timeouts.total)"
            )
        if request.ended is not None:
            return LoadCancelledError(f"{url}: request {request.ended}")
        where = url if proxy is None else f"{url} (through the proxy {proxy.label})"
        if isinstance(error, TimeoutError):
            phase = "read" if request.connected else "connect"
            limit = timeouts.connect if phase == "connect" else timeouts.read
            return LoadTimeoutError(
                f"{where}: {'no connection' if phase == 'connect' else 'server silent'} "
                f"for {limit:g} s (Timeouts.{phase})"
            )
        if isinstance(error, ssl.SSLCertVerificationError):
            return HttpCertificateError(
                f"{where}: the server's certificate is not trusted "
                f"({error.verify_message or error.reason}); {CA_BUNDLE_HINT}",
                url=url,
            )
        if isinstance(error, http.client.IncompleteRead | http.client.RemoteDisconnected):
            return _TruncatedError(f"{where}: connection closed mid-answer: {error!r}", url=url)
        if isinstance(error, ConnectionError | socket.gaierror):
            return _ConnectError(f"{where}: cannot connect: {error}", url=url)
        if proxy is not None and str(error).startswith("Tunnel connection failed"):
            # http.client's CONNECT refused: "Tunnel connection failed: 407 ...". A 407 is
            # the proxy's credentials (never retried); any other, a failed connection.
            if " 407 " in f"{error} ":
                return HttpAccessDeniedError(
                    f"{where}: the proxy refused the tunnel: {error} (the proxy's "
                    "credentials, not retried)",
                    url=url,
                    status=407,
                    retry_after=None,
                )
            return _ConnectError(f"{where}: the proxy refused the tunnel: {error}", url=url)
        return HttpError(f"{where}: {type(error).__name__}: {error}", url=url)

    # -- the pool ---------------------------------------------------------------

    def _begin(self) -> _Request:
        request = _Request(deadline=time.monotonic() + self.timeouts.total)
        with self._lock:
            if self._closed:
                raise LoadCancelledError("the HTTP client is closed")
            self._in_flight.add(request)
        _WATCHDOG.add(request)
        return request

    def _end(self, request: _Request) -> None:
        _WATCHDOG.discard(request)
        with self._lock:
            self._in_flight.discard(request)

    def _connection(
        self, route: _Route, proxy: ProxyAddress | None, *, fresh: bool = False
    ) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection of `route` (True: reused), or a new, unconnected one."""
        with self._lock:
            idle = self._idle.get(route)
            if idle and not fresh:
                return idle.pop(), True
        scheme, host, port = route[:3]
        connect = self.timeouts.connect
        address = (host, port) if proxy is None else (proxy.host, proxy.port)
        if scheme == "https":
            if self._tls is None:
                self._tls = self.config.ssl_context()
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                *address, timeout=connect, context=self._tls
            )
            if proxy is not None:  # CONNECT host:port, then TLS with the host itself
                connection.set_tunnel(host, port, headers=_proxy_authorization(proxy))
            return connection, False
        return http.client.HTTPConnection(*address, timeout=connect), False

    def _keep(self, route: _Route, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(route, [])
            if not self._closed and len(idle) < _IDLE_KEPT:
                idle.append(connection)
                return
        connection.close()

    def cancel_thread(self, thread: int) -> bool:
        """End the request `thread` (a `threading.get_ident`) has in flight; True if one was."""
        with self._lock:
            found = [r for r in self._in_flight if r.thread == thread]
        for request in found:
            request.shut("cancelled")
        return bool(found)

    def close(self) -> None:
        """Shut every connection; requests in flight end now (`LoadCancelledError`)."""
        with self._lock:
            self._closed = True
            in_flight = list(self._in_flight)
            idle = [c for connections in self._idle.values() for c in connections]
            self._idle.clear()
        for request in in_flight:
            request.shut("closed")
        for connection in idle:
            connection.close()


def _close_idle(
    idle: dict[_Route, list[http.client.HTTPConnection]], lock: threading.Lock
) -> None:
    with lock:
        connections = [c for kept in idle.values() for c in kept]
        idle.clear()
    for connection in connections:
        connection.close()


def _connect(connection: http.client.HTTPConnection, read_timeout: float) -> None:
    """Connect (within the connection's timeout, `Timeouts.connect`), then set the idle cap."""
    connection.connect()
    sock: socket.socket = connection.sock
    sock.settimeout(read_timeout)


def _status_error(url: str, response: http.client.HTTPResponse) -> HttpStatusError:
    status = response.status
    retry_after = parse_retry_after(response.getheader("Retry-After"))
    if status in (401, 403, 407):
        what = (
            "the proxy's credentials are missing or refused"
            if status == 407
            else "access denied; a server that wants a token gets it from the request headers "
            'setting of its host: [remote.headers."host"] or NAPARI_LAZY_ZARR_HEADERS'
        )
        return HttpAccessDeniedError(
            f"{url}: HTTP {status} {response.reason} ({what})",
            url=url,
            status=status,
            retry_after=None,
        )
    wait = f", Retry-After {retry_after:g} s" if retry_after is not None else ""
    kind = "transient" if status in _TRANSIENT else "refused"
    return HttpStatusError(
        f"{url}: HTTP {status} {response.reason} ({kind}{wait})",
        url=url,
        status=status,
        retry_after=retry_after,
    )


def _drain(response: http.client.HTTPResponse) -> None:
    """Read a small unwanted body so the connection can be kept; else give it up."""
    if response.length is not None and response.length <= _MAX_ERROR_BODY:
        response.read()
    else:
        response.will_close = True


def _read_body(
    response: http.client.HTTPResponse, cap: int, url: str, *, head: bool = False
) -> bytearray:
    """The body, refused when its declared or actual length exceeds `cap`; never inflated."""
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        response.will_close = True
        raise HttpError(
            f"{url}: refusing a body sent with Content-Encoding {encoding!r} "
            "(asked for 'identity'; a compressed transfer could inflate without bound)",
            url=url,
        )
    if head:
        _drain(response)
        return bytearray()
    length = response.length
    if length is not None:
        if length > cap:
            response.will_close = True
            raise HttpBodyTooLargeError(
                f"{url}: the server declares {length:,} bytes, more than the "
                f"{cap:,} this read may take",
                url=url,
                cap=cap,
                declared=length,
            )
        body = bytearray(length)
        view = memoryview(body)
        received = 0
        while received < length:
            n = response.readinto(view[received:])
            if not n:
                raise http.client.IncompleteRead(bytes(view[:0]), length - received)
            received += n
        return body
    body = bytearray()
    while piece := response.read1(min(_PIECE, cap + 1 - len(body))):
        body += piece
        if len(body) > cap:
            response.will_close = True
            raise HttpBodyTooLargeError(
                f"{url}: the body exceeds the {cap:,} bytes this read may take",
                url=url,
                cap=cap,
                declared=None,
            )
    return body


def _slice(body: bytearray, byte_range: ByteRequest) -> bytearray:
    """The requested range of a whole body (a server that ignores ``Range`` sends it all)."""
    if isinstance(byte_range, RangeByteRequest):
        return body[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return body[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return body[max(0, len(body) - byte_range.suffix) :]
    raise ValueError(f"unexpected byte range {byte_range!r}")
