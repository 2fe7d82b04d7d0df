"""`RemoteStore`: a read-only zarr store over obstore (http(s), s3, gs, az), bounded.

obstore (Rust's ``object_store`` on ``reqwest`` and ``rustls``) makes the
requests: connection pools, TLS, proxies, redirects, time caps, and a check that
a ``206`` answer's ``Content-Range`` is the range asked. This thin layer keeps
the project's promises on top of it:

- **Bytes**: a whole-key read is refused when the object's declared size
  (`GetResult.meta`, known before any byte of the body is read) exceeds the
  key's cap: a metadata document `max_metadata_bytes`, a chunk what `limit` set
  for its array, else `max_body_bytes`. A ranged read receives its range, of an
  object whose size agrees with earlier answers (a shard rewritten between its
  index and an inner chunk is not read torn); a server that ignores ``Range``
  is read whole within the key's cap and sliced. ``Accept-Encoding: identity``
  is asked, and a body sent with another ``Content-Encoding`` refused: nothing
  is inflated. A body without a ``Content-Length`` is not read (obstore's
  rule).
- **Time**: `Timeouts.connect`, `Timeouts.read` (silence), `Timeouts.total`
  per request, in obstore's client; its own retries are off: `RetryPolicy`
  retries (metadata documents here, except after a timeout; chunks in the
  source).
- **Statuses** (`core.storage.remote_errors`): 404 only is an absent key
  (None, zarr's fill value); 410, 451 and the like are errors; 401/403 name the
  headers setting; 408, 425, 429 and 5xx are transient.
- **Cancellation**: a read made with `read` runs on zarr's event loop as a
  task registered under its reader (a thread, for the chunk source); `cancel_reader`
  and `close` cancel it, which drops the request and its connection, and it
  raises `LoadCancelledError`. `read_sync` (and zarr's `get_sync`) block in
  obstore and end with their time caps.
- **Connections**: the obstore store -- its connection pool -- belongs to this
  store and its copies; `close` drops it (sockets close with it), and so does
  the store's collection.
- **Routes**: `core.storage.remote_config` (the CA bundle read as bytes, the
  proxy, the headers of the store's host).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Self
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import obstore
from obstore.store import HTTPStore, S3Store, from_url
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype

from napari_lazy_zarr.core.errors import (
    LazyZarrError,
    LoadCancelledError,
    LoadTimeoutError,
    MetadataError,
    ReadOnlyError,
)
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts, current_settings
from napari_lazy_zarr.core.storage.remote_config import RemoteConfig, remote_config
from napari_lazy_zarr.core.storage.remote_errors import (
    HttpBodyTooLargeError,
    HttpError,
    HttpRangeError,
    HttpTruncatedError,
    RangeIgnoredError,
    RemoteSetupError,
    range_past_end,
    remote_failure,
)
from napari_lazy_zarr.core.storage.retry import RetryPolicy
from napari_lazy_zarr.core.storage.s3 import S3_SCHEMES, S3_SETTINGS, s3_endpoint, s3_store_config

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Hashable, Iterable

    from obstore import GetResult
    from obstore.store import ObjectStore
    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "METADATA_DOCUMENTS",
    "REMOTE_SCHEMES",
    "RemoteFiles",
    "RemoteStore",
    "remote_store_of",
]

REMOTE_SCHEMES: Final = frozenset(
    {"http", "https", *S3_SCHEMES, "gs", "gcs", "az", "abfs", "abfss"}
)
"""URL schemes read through obstore (`RemoteStore`)."""
DEFAULT_MAX_BODY_BYTES: Final = 256 << 20
"""Body cap of a key that is neither metadata nor a ranged read nor under a `limit`."""
DEFAULT_MAX_METADATA_BYTES: Final = 16 << 20
METADATA_DOCUMENTS: Final = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})
"""Names of zarr's metadata documents (the last part of a key)."""
_MAX_LISTING_BYTES: Final = 4 << 20
_HREF: Final = re.compile(rb"""href\s*=\s*["']([^"'#?]+)["']""", re.IGNORECASE)
_METADATA_RETRY: Final = RetryPolicy()
_TOTALS_KEPT: Final = 4096  # object sizes remembered per store (keys), oldest forgotten first


class _Connection:
    """What a `RemoteStore` and its copies share: obstore's stores, caps, reads in flight.

    Lock order: `lock` alone (never held while calling obstore).
    """

    def __init__(self, config: RemoteConfig | None) -> None:
        self.lock = threading.Lock()
        self.config = config
        self.backends: dict[tuple[tuple[str, str], ...], ObjectStore] = {}
        self.limits: dict[str, int] = {}  # array path -> body cap of its keys
        self.totals: dict[str, int] = {}  # key -> its size as an earlier answer gave it
        self.reads: dict[Hashable, set[asyncio.Task[Any]]] = {}
        self.ended: dict[asyncio.Task[Any], str] = {}
        self.closed = False

    def track(self, reader: Hashable, task: asyncio.Task[Any], url: str) -> None:
        with self.lock:
            if self.closed:
                raise LoadCancelledError(f"{url}: the store is closed")
            self.reads.setdefault(reader, set()).add(task)

    def untrack(self, reader: Hashable, task: asyncio.Task[Any]) -> str | None:
        """Forget `task`; why it was ended ("cancelled", "closed"), None if it was not."""
        with self.lock:
            tasks = self.reads.get(reader)
            if tasks is not None:
                tasks.discard(task)
                if not tasks:
                    del self.reads[reader]
            return self.ended.pop(task, None)

    def end(self, reader: Hashable | None, why: str) -> int:
        """Cancel the reads of `reader` (None: every reader's), each on its loop: each raises
        `LoadCancelledError` naming `why`. Returns how many were in flight."""
        with self.lock:
            tasks = [
                task
                for key, tracked in self.reads.items()
                if reader is None or key == reader
                for task in tracked
            ]
            for task in tasks:
                self.ended.setdefault(task, why)
        for task in tasks:
            task.get_loop().call_soon_threadsafe(task.cancel)
        return len(tasks)


class RemoteStore(Store):
    """A read-only zarr store over a remote URL, through obstore, bounded in time and bytes.

    Parameters
    ----------
    url
        The store's root: ``http(s)://host/path``, ``s3://bucket/path``,
        ``gs://``, ``az://``; keys are appended to its path.
    timeouts
        Connect, idle-read and total caps of each request.
    retry
        How metadata documents are retried on transient failures.
    max_body_bytes
        Cap of a body that is neither a metadata document nor a byte range.
    max_metadata_bytes
        Cap of a metadata document (`METADATA_DOCUMENTS`).
    config
        CA bundle, proxies and request headers (None: the user's settings,
        `core.storage.remote_config`, read at the first request: an invalid
        setting fails that request, never the store's creation).

    Thread-safe; copies (`with_read_only`) share connections and limits, and
    `close` closes them all. See the module's docstring for what is bounded.

    Examples
    --------
    >>> store = RemoteStore("http://127.0.0.1:8000/data/image.zarr", max_body_bytes=1 << 20)
    >>> store.limit("0", 4096)  # the chunks of array "0" encode to at most 4 KiB
    >>> store.body_cap("0/c/1/2"), store.body_cap("1/c/0/0"), store.body_cap("0/zarr.json")
    (4096, 1048576, 16777216)
    >>> store.close()
    """

    supports_writes: Final = False
    supports_deletes: Final = False
    supports_listing: Final = True

    def __init__(
        self,
        url: str,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = _METADATA_RETRY,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        config: RemoteConfig | None = None,
        _connection: _Connection | None = None,
    ) -> None:
        super().__init__(read_only=True)
        for name, value in (
            ("max_body_bytes", max_body_bytes),
            ("max_metadata_bytes", max_metadata_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"RemoteStore.{name} must be an int >= 0, got {value!r}")
        parts = urlsplit(url)
        self.scheme = parts.scheme.lower()
        if self.scheme not in REMOTE_SCHEMES or not parts.netloc:
            raise ValueError(f"{url!r} is not a URL obstore reads ({', '.join(REMOTE_SCHEMES)})")
        self._base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.url = url
        self.timeouts = timeouts
        self.retry = retry
        self.max_body_bytes = max_body_bytes
        self.max_metadata_bytes = max_metadata_bytes
        self._connection = _connection or _Connection(config)

    # -- caps --------------------------------------------------------------------

    def limit(self, path: str, max_bytes: int) -> None:
        """Cap the body of every key under `path` (an array's path; "" for the root).

        For an array's chunks: the largest its stored chunk (or shard) could
        plausibly encode to. The deepest limit above a key applies. Shared by copies.
        """
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(
                f"RemoteStore.limit: max_bytes must be an int >= 0, got {max_bytes!r}"
            )
        self._connection.limits[path.strip("/")] = max_bytes

    def body_cap(self, key: str) -> int:
        """The most bytes a whole-key read of `key` may receive."""
        if key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            return self.max_metadata_bytes
        limits = self._connection.limits
        if limits:
            path = key
            while path:
                path = path.rsplit("/", 1)[0] if "/" in path else ""
                if path in limits:
                    return limits[path]
        return self.max_body_bytes

    # -- the store itself ------------------------------------------------------------

    def with_read_only(self, read_only: bool = False) -> Self:
        if not read_only:
            raise ReadOnlyError(f"{self.url}: a remote store can only be read")
        return type(self)(
            self.url,
            timeouts=self.timeouts,
            retry=self.retry,
            max_body_bytes=self.max_body_bytes,
            max_metadata_bytes=self.max_metadata_bytes,
            _connection=self._connection,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteStore) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r})"

    def close(self) -> None:
        """Drop the connections of this store and its copies; reads in flight end now.

        Reads made with `read` raise `LoadCancelledError`; later reads too.
        """
        super().close()
        connection = self._connection
        with connection.lock:
            connection.closed = True
            connection.backends.clear()  # obstore's pools go once their reads have ended
        connection.end(None, "closed")

    def cancel_reader(self, reader: Hashable) -> bool:
        """End the reads `reader` (e.g. a `threading.get_ident`) has in flight through `read`.

        They raise `LoadCancelledError`. True when one was in flight.
        """
        return self._connection.end(reader, "cancelled") > 0

    def key_url(self, key: str) -> str:
        """The URL of `key` (what messages name)."""
        return f"{self._base}/{key}" if key else self._base

    def _config(self) -> RemoteConfig:
        connection = self._connection
        if connection.config is None:
            refusal = None
            try:
                config = remote_config()
            except MetadataError as error:  # a setting: raised as the store's setup failing
                refusal = str(error)
            if refusal is not None:
                raise RemoteSetupError(refusal)
            with connection.lock:
                connection.config = connection.config or config
        assert connection.config is not None
        return connection.config

    def _backend(self, key: str) -> ObjectStore:
        """obstore's store for `key` (made at the first request; one per header set)."""
        connection = self._connection
        config = self._config()
        http = self.scheme in ("http", "https")
        headers = config.headers_for(self.key_url(key)) if http and config.headers else {}
        ident = tuple(sorted(headers.items()))
        backend = connection.backends.get(ident)
        if backend is not None:
            return backend
        with connection.lock:
            if connection.closed:
                raise LoadCancelledError(f"{self.key_url(key)}: the store is closed")
        backend = self._open_backend(config, self.key_url(key) if http else self._base)
        with connection.lock:
            if connection.closed:
                raise LoadCancelledError(f"{self.key_url(key)}: the store is closed")
            return connection.backends.setdefault(ident, backend)

    def _open_backend(self, config: RemoteConfig, url: str) -> ObjectStore:
        """A new obstore store at this store's root, configured for requests to `url`."""
        retries: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=self.timeouts.total)}
        certificates = config.certificates()
        try:
            if self.scheme in ("http", "https"):
                options = config.client_options(url, self.timeouts, certificates)
                return HTTPStore(self._base, client_options=options, retry_config=retries)
            if self.scheme in S3_SCHEMES:
                settings = current_settings(names=S3_SETTINGS)
                endpoint = s3_endpoint(settings)
                options = config.client_options(
                    endpoint, self.timeouts, certificates, headers=False
                )
                bucket, _, prefix = self._base.split("://", 1)[1].partition("/")
                return S3Store(
                    bucket,
                    prefix=prefix or None,
                    config=s3_store_config(settings),  # type: ignore[arg-type]
                    client_options=options,
                    retry_config=retries,
                )
            options = config.client_options(
                f"https://{urlsplit(self._base).netloc}",
                self.timeouts,
                certificates,
                headers=False,
            )
            backend: ObjectStore = from_url(
                self._base, client_options=options, retry_config=retries
            )
            return backend
        except LazyZarrError:
            raise
        except Exception as error:  # obstore refuses a configuration: a ValueError or its own
            reason = str(error).partition("\n")[0]
        raise RemoteSetupError(f"{self.url}: cannot set up its connection: {reason}")

    # -- reads ---------------------------------------------------------------------------

    async def read(
        self,
        key: str,
        byte_range: ByteRequest | None = None,
        *,
        cap: int | None = None,
        reader: Hashable = None,
    ) -> bytes | memoryview | None:
        """`key`'s bytes (or `byte_range` of them) within `cap` (default: `body_cap`), None
        when absent; on the running event loop, cancellable by `cancel_reader(reader)`."""
        cap = self.body_cap(key) if cap is None else cap
        if _empty(byte_range):
            return b""
        url = self.key_url(key)
        backend = self._backend(key)
        task = asyncio.current_task()
        assert task is not None
        connection = self._connection
        connection.track(reader, task, url)
        started = time.monotonic()
        failure: BaseException | None = None
        body: Any = None
        try:
            result = await obstore.get_async(backend, key, options=_options(byte_range))
            length = self._check(key, result, byte_range, cap)
            body = await result.bytes_async()
        except asyncio.CancelledError:
            why = connection.untrack(reader, task)
            if why is None:
                raise
            failure = LoadCancelledError(f"{url}: request {why}")
        except Exception as error:
            failure = error
        finally:
            connection.untrack(reader, task)
        if failure is not None:
            found = self._failed(key, failure, byte_range, started)
            if isinstance(found, BaseException):
                raise found
            if found is _WHOLE:
                whole = await self.read(key, None, reader=reader)
                return None if whole is None else _window(whole, byte_range)
            return None if found is _ABSENT else b""
        return _whole_body(url, body, length)

    def read_sync(
        self, key: str, byte_range: ByteRequest | None = None, *, cap: int | None = None
    ) -> bytes | memoryview | None:
        """`read` on the calling thread (blocking in obstore; ends with the time caps)."""
        cap = self.body_cap(key) if cap is None else cap
        if _empty(byte_range):
            return b""
        with self._connection.lock:
            if self._connection.closed:
                raise LoadCancelledError(f"{self.key_url(key)}: the store is closed")
        backend = self._backend(key)
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            result = obstore.get(backend, key, options=_options(byte_range))
            length = self._check(key, result, byte_range, cap)
            body: Any = result.bytes()
        except Exception as error:
            failure = error
        if failure is not None:
            found = self._failed(key, failure, byte_range, started)
            if isinstance(found, BaseException):
                raise found
            if found is _WHOLE:
                whole = self.read_sync(key, None)
                return None if whole is None else _window(whole, byte_range)
            return None if found is _ABSENT else b""
        return _whole_body(self.key_url(key), body, length)

    def _check(self, key: str, result: GetResult, byte_range: ByteRequest | None, cap: int) -> int:
        """The body's length, once its head says it may be read (else our refusal)."""
        url = self.key_url(key)
        encoding = (result.attributes.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise HttpError(
                f"{url}: refusing a body sent with Content-Encoding {encoding!r} "
                "(asked for 'identity'; a compressed transfer could inflate without bound)",
                url=url,
            )
        start, stop = result.range
        size = int(result.meta["size"])
        if byte_range is not None:
            connection = self._connection
            with connection.lock:
                known = connection.totals.get(key)
                if known is None:
                    if len(connection.totals) >= _TOTALS_KEPT:
                        del connection.totals[next(iter(connection.totals))]
                    connection.totals[key] = size
            if known is not None and known != size:
                raise HttpRangeError(
                    f"{url}: the file holds {size} bytes, where an earlier answer said {known} "
                    "(it changed meanwhile); refused (retried)",
                    url=url,
                )
        length = stop - start
        if length > cap:
            raise HttpBodyTooLargeError(
                f"{url}: the server declares {length:,} bytes, more than the {cap:,} this "
                "read may take",
                url=url,
                cap=cap,
                declared=length,
            )
        return length

    def _failed(
        self, key: str, error: BaseException, byte_range: ByteRequest | None, started: float
    ) -> BaseException | object:
        """Our error for a failed read, or `_ABSENT` (404), `_EMPTY` (a range past the end),
        `_WHOLE` (the server ignores ranges: read it whole)."""
        if isinstance(error, LazyZarrError):
            return error
        if byte_range is not None and range_past_end(error):
            return _EMPTY
        config = self._config()
        proxy = config.proxy_for(self._base)
        found = remote_failure(
            self.key_url(key),
            error,
            timeouts=self.timeouts,
            elapsed=time.monotonic() - started,
            secrets=config.secrets(),
            proxy=proxy.label if proxy is not None else "",
        )
        if found is None:
            return _ABSENT
        if isinstance(found, RangeIgnoredError):
            return _WHOLE if byte_range is not None else found
        return found

    # -- zarr's Store interface --------------------------------------------------------------

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if byte_range is None and key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            body = await self._metadata(key)
        else:
            body = await self.read(key, byte_range)
        return None if body is None else prototype.buffer.from_bytes(body)

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """`key`'s bytes (or `byte_range` of them), None when absent (HTTP 404)."""
        prototype = prototype or default_buffer_prototype()
        if byte_range is None and key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            body = self._metadata_sync(key)
        else:
            body = self.read_sync(key, byte_range)
        return None if body is None else prototype.buffer.from_bytes(body)

    async def _metadata(self, key: str) -> bytes | memoryview | None:
        """A metadata document, retried on transient failures except a timeout.

        A server silent for a whole `Timeouts` cap is not asked again while
        someone waits for the store to open.
        """

        async def attempt() -> tuple[bytes | memoryview | None, LoadTimeoutError | None]:
            try:
                return await self.read(key), None
            except LoadTimeoutError as error:
                return None, error  # a value, not raised: the policy does not retry it

        body, timed_out = await self.retry.call_async(attempt)
        if timed_out is not None:
            raise timed_out
        return body

    def _metadata_sync(self, key: str) -> bytes | memoryview | None:
        def attempt() -> tuple[bytes | memoryview | None, LoadTimeoutError | None]:
            try:
                return self.read_sync(key), None
            except LoadTimeoutError as error:
                return None, error

        body, timed_out = self.retry.call(attempt)
        if timed_out is not None:
            raise timed_out
        return body

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, r) for key, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return await self._head(key) is not None

    async def getsize(self, key: str) -> int:
        size = await self._head(key)
        if size is None:
            raise FileNotFoundError(f"{self.key_url(key)}: not found")
        return size

    async def _head(self, key: str) -> int | None:
        """`key`'s size (a HEAD request), None when absent."""
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            meta = await obstore.head_async(self._backend(key), key)
        except Exception as error:
            failure = error
        if failure is not None:
            found = self._failed(key, failure, None, started)
            if isinstance(found, BaseException):
                raise found
            return None
        return int(meta["size"])

    # -- listing: an HTML index page over HTTP (as fsspec reads one), else the object store's --

    async def list(self) -> AsyncIterator[str]:
        async for key in self.list_prefix(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        pending = [prefix.rstrip("/")]
        while pending:
            directory = pending.pop()
            for name in await self._list_dir(directory):
                key = f"{directory}/{name}" if directory else name
                if key.endswith("/"):
                    pending.append(key.rstrip("/"))
                else:
                    yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in await self._list_dir(prefix.strip("/")):
            yield name.rstrip("/")

    async def _list_dir(self, path: str) -> tuple[str, ...]:
        """The names under directory `path`, sub-directories with a trailing "/"."""
        if self.scheme in ("http", "https"):
            return await asyncio.to_thread(self._html_index, path)
        found = await obstore.list_with_delimiter_async(self._backend(path), path or None)
        start = f"{path}/" if path else ""
        return (
            *(f"{p.removeprefix(start)}/" for p in found["common_prefixes"]),
            *(meta["path"].removeprefix(start) for meta in found["objects"]),
        )

    def _html_index(self, path: str) -> tuple[str, ...]:
        """What a directory's HTML index links to; no index (404): nothing."""
        page = self.read_sync(path, cap=_MAX_LISTING_BYTES)
        if page is None:
            return ()
        url = self.key_url(path) + "/"
        base = urlsplit(url).path
        names: list[str] = []
        for match in _HREF.finditer(bytes(page)):
            href = urlsplit(urljoin(url, match.group(1).decode("utf-8", "replace"))).path
            href = unquote(href)
            if href.startswith(unquote(base)) and href != unquote(base):
                name = href[len(unquote(base)) :]
                if name.strip("/") and "/" not in name.rstrip("/") and name not in names:
                    names.append(name)
        return tuple(names)

    # -- a read-only store ----------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        raise ReadOnlyError(f"{self.url}: a remote store can only be read")

    async def delete(self, key: str) -> None:
        raise ReadOnlyError(f"{self.url}: a remote store can only be read")


_ABSENT: Final = object()
_EMPTY: Final = object()
_WHOLE: Final = object()


def _empty(byte_range: ByteRequest | None) -> bool:
    """Whether `byte_range` asks for no byte (obstore refuses such a range)."""
    if isinstance(byte_range, RangeByteRequest):
        return byte_range.end <= byte_range.start
    return isinstance(byte_range, SuffixByteRequest) and byte_range.suffix <= 0


def _options(byte_range: ByteRequest | None) -> Any:
    match byte_range:
        case None:
            return None
        case RangeByteRequest(start=start, end=end):
            return {"range": (start, end)}
        case OffsetByteRequest(offset=offset):
            return {"range": {"offset": offset}}
        case SuffixByteRequest(suffix=suffix):
            return {"range": {"suffix": suffix}}
    raise TypeError(f"unexpected byte range {byte_range!r}")


def _window(body: bytes | memoryview, byte_range: ByteRequest | None) -> memoryview:
    """The part of a whole body `byte_range` asks for."""
    view, length = memoryview(body), len(body)
    match byte_range:
        case RangeByteRequest(start=start, end=end):
            return view[min(start, length) : min(max(start, end), length)]
        case OffsetByteRequest(offset=offset):
            return view[min(offset, length) :]
        case SuffixByteRequest(suffix=suffix):
            return view[max(0, length - suffix) :]
    return view


def _whole_body(url: str, body: Any, length: int) -> memoryview:
    """`body` (obstore's `Bytes`) as a view, once it holds the `length` bytes expected."""
    view = memoryview(body)
    if len(view) != length:
        raise HttpTruncatedError(f"{url}: {len(view)} of the {length} bytes arrived", url=url)
    return view


def remote_store_of(store: Store) -> RemoteStore | None:
    """The `RemoteStore` that `store` is or wraps, else None.

    Looks through stores that name what they wrap in a public ``wrapped`` attribute
    (the `MetadataMemoStore` that `store_for` puts in front of a `RemoteStore`).

    Examples
    --------
    >>> from zarr.storage import MemoryStore
    >>> remote_store_of(MemoryStore()) is None
    True
    """
    seen = 0
    while (inner := getattr(store, "wrapped", None)) is not None and seen < 16:
        store, seen = inner, seen + 1
    return store if isinstance(store, RemoteStore) else None


class RemoteFiles:
    """Bounded reads of remote files named by URL (kerchunk references), one store per root.

    A `RemoteStore` per origin (``scheme://host:port``) or bucket, made at its
    first read and closed by `close`.

    Examples
    --------
    >>> files = RemoteFiles(DEFAULT_TIMEOUTS)
    >>> files.close()
    """

    def __init__(self, timeouts: Timeouts, config: RemoteConfig | None = None) -> None:
        self.timeouts = timeouts
        self._config = config
        self._stores: dict[str, RemoteStore] = {}
        self._lock = threading.Lock()

    def read(self, url: str, byte_range: ByteRequest | None, cap: int) -> bytes | memoryview:
        """`byte_range` of the file at `url` (None: all of it), within `cap` bytes.

        Raises
        ------
        FileNotFoundError
            The file does not exist (a reference names bytes that must exist).
        """
        parts = urlsplit(url)
        root = f"{parts.scheme.lower()}://{parts.netloc}"
        with self._lock:
            store = self._stores.get(root)
            if store is None:
                store = self._stores[root] = RemoteStore(
                    root, timeouts=self.timeouts, config=self._config
                )
        body = store.read_sync(unquote(parts.path).lstrip("/"), byte_range, cap=cap)
        if body is None:
            raise FileNotFoundError(f"{url}: not found")
        return body

    def close(self) -> None:
        """Close every store made (their connections)."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()
