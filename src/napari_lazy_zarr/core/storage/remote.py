"""`RemoteStore`: a read-only zarr store over obstore (http(s), s3, gs, az), bounded.

obstore (Rust's ``object_store`` on ``reqwest`` and ``rustls``) makes the requests: pools,
TLS, proxies, redirects, the time caps (`Timeouts`), and the check that a ``206``'s
``Content-Range`` is the range asked; its own retries are off (`RetryPolicy` retries:
metadata documents here, except after a timeout; chunks in the source). This layer keeps
the rest of the project's promises:

- **Bytes**: a whole-key read is refused when the object's declared size (`GetResult.meta`,
  known before the body is read) exceeds the key's cap (a metadata document
  `max_metadata_bytes`, a chunk its array's `limit`, else `max_body_bytes`); a ranged read
  must be of an object whose size agrees with earlier answers; a server ignoring ``Range``
  is read whole within the cap; a ``Content-Encoding`` other than ``identity`` is refused.
- **Statuses** (`remote_errors`): 404 only is an absent key (None, zarr's fill value).
- **Cancellation**: `read` runs as a task of the calling event loop, registered under its
  reader; `cancel_reader` and `close` cancel it (its request and connection are dropped) and
  it raises `LoadCancelledError`. `read_sync` (zarr's `get_sync`) blocks in obstore.
- **Connections**: stores of one root (origin or bucket) and configuration share obstore's
  store (its client, its pool): it goes, its connections closed, with the last of them to
  be closed or collected; idle connections close after `POOL_IDLE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import weakref
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
    from collections.abc import AsyncIterator, Callable, Hashable, Iterable

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

REMOTE_SCHEMES: Final = frozenset({"http", "https", *S3_SCHEMES, "gs", "az", "abfs", "abfss"})
"""URL schemes read through obstore (`RemoteStore`)."""
DEFAULT_MAX_BODY_BYTES: Final = 256 << 20
"""Body cap of a key that is neither metadata nor a ranged read nor under a `limit`."""
DEFAULT_MAX_METADATA_BYTES: Final = 16 << 20
METADATA_DOCUMENTS: Final = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})
"""Names of zarr's metadata documents (the last part of a key)."""
_MAX_LISTING_BYTES: Final = 4 << 20
_HREF: Final = re.compile(rb"""href\s*=\s*["']([^"'#?]+)["']""", re.IGNORECASE)
_TOTALS_KEPT: Final = 4096  # object sizes remembered per store, the oldest forgotten first
_WHOLE: Final = object()  # a failure's answer: read the whole object (ranges are ignored)


class _Backend:
    """An obstore store, shared by the `RemoteStore`s of one root and configuration: building
    one (its client, root certificates) takes milliseconds, and a plate opens a store per
    field. It goes, and its connections close, with the last store holding it."""

    __slots__ = ("__weakref__", "store")

    def __init__(self, store: ObjectStore) -> None:
        self.store = store


_BACKENDS: Final[weakref.WeakValueDictionary[tuple[str, ...], _Backend]] = (
    weakref.WeakValueDictionary()
)
_BACKENDS_LOCK: Final = threading.Lock()


class _Shared:
    """What a `RemoteStore` and its copies share. Its lock is never held calling obstore."""

    def __init__(self, config: RemoteConfig | None) -> None:
        self.lock = threading.Lock()
        self.config = config
        self.backends: dict[tuple[tuple[str, str], ...], _Backend] = {}  # per header set
        self.limits: dict[str, int] = {}  # array path -> body cap of its keys
        self.totals: dict[str, int] = {}  # key -> its size as an earlier answer gave it
        self.reads: dict[Hashable, set[asyncio.Task[Any]]] = {}  # reader -> its reads
        self.ended: dict[asyncio.Task[Any], str] = {}  # cancelled by us: why
        self.closed = False

    def end(self, reader: Hashable, why: str, *, every: bool = False) -> int:
        """Cancel the reads of `reader` (`every`: all), on their loops; how many there were."""
        with self.lock:
            tasks = [t for r, ts in self.reads.items() if every or r == reader for t in ts]
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
        The store's root (``http(s)://host/path``, ``s3://bucket/path``, ``gs://``,
        ``az://``); keys are appended to its path.
    timeouts
        Connect, idle-read and total caps of each request.
    retry
        How metadata documents are retried on transient failures.
    max_body_bytes, max_metadata_bytes
        Caps of a whole key's body, and of a metadata document's (`METADATA_DOCUMENTS`).
    config
        CA bundle, proxies and headers (None: the user's, `remote_config`, read at the first
        request: an invalid setting fails that request, never the store's creation).

    Thread-safe; copies (`with_read_only`) share connections and limits, and `close`
    closes them all.

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
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 (frozen: shared safely)
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        config: RemoteConfig | None = None,
        _shared: _Shared | None = None,
    ) -> None:
        super().__init__(read_only=True)
        parts = urlsplit(url)
        self.scheme = parts.scheme.lower()
        if self.scheme not in REMOTE_SCHEMES or not parts.netloc:
            raise ValueError(f"{url!r} is not a URL obstore reads ({', '.join(REMOTE_SCHEMES)})")
        self._base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._root = f"{parts.scheme}://{parts.netloc}"  # what obstore's store is made of
        self._prefix = unquote(parts.path).strip("/") + "/" if parts.path.strip("/") else ""
        self.url = url
        self.timeouts = timeouts
        self.retry = retry
        self.max_body_bytes = max_body_bytes
        self.max_metadata_bytes = max_metadata_bytes
        self._shared = _shared or _Shared(config)

    def limit(self, path: str, max_bytes: int) -> None:
        """Cap the body of every key under `path` (an array's path; "" for the root): for an
        array's chunks, the most its stored chunk could encode to. The deepest applies."""
        self._shared.limits[path.strip("/")] = max_bytes

    def body_cap(self, key: str) -> int:
        """The most bytes a whole-key read of `key` may receive."""
        if key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            return self.max_metadata_bytes
        path, limits = key, self._shared.limits
        while path and limits:
            path = path.rsplit("/", 1)[0] if "/" in path else ""
            if path in limits:
                return limits[path]
        return self.max_body_bytes

    def with_read_only(self, read_only: bool = False) -> Self:
        if not read_only:
            raise ReadOnlyError(f"{self.url}: a remote store can only be read")
        return type(self)(
            self.url,
            timeouts=self.timeouts,
            retry=self.retry,
            max_body_bytes=self.max_body_bytes,
            max_metadata_bytes=self.max_metadata_bytes,
            _shared=self._shared,
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
        """Drop the connections of this store and its copies; reads in flight end now."""
        super().close()
        with self._shared.lock:
            self._shared.closed = True
            self._shared.backends.clear()  # obstore's pools go once their reads have ended
        self._shared.end(None, "closed", every=True)

    def cancel_reader(self, reader: Hashable) -> bool:
        """End the reads `reader` has in flight through `read` (they raise
        `LoadCancelledError`); True when one was."""
        return self._shared.end(reader, "cancelled") > 0

    def key_url(self, key: str) -> str:
        """The URL of `key` (what messages name)."""
        return f"{self._base}/{key}" if key else self._base

    # -- obstore's stores ----------------------------------------------------------------

    def _backend(self, key: str) -> ObjectStore:
        """obstore's store for `key` (one per header set), its path being `_prefix` + key."""
        shared = self._shared
        if shared.config is None:
            refusal = None
            try:
                config = remote_config()
            except MetadataError as error:  # a setting: the store's setup fails, not the data
                refusal = str(error)
            if refusal is not None:
                raise RemoteSetupError(refusal)
            shared.config = shared.config or config
        config = shared.config
        http = self.scheme in ("http", "https")
        headers = config.headers_for(self.key_url(key)) if http and config.headers else {}
        ident = tuple(sorted(headers.items()))
        backend = shared.backends.get(ident)
        if backend is None:
            self._check_open(key)
            backend = self._open_backend(config, self.key_url(key))
            with shared.lock:
                backend = shared.backends.setdefault(ident, backend)
        return backend.store

    def _open_backend(self, config: RemoteConfig, url: str) -> _Backend:
        """obstore's store at this store's root with the client `url` needs (shared)."""
        certificates = config.certificates()
        s3: dict[str, Any] = {}
        if self.scheme in ("http", "https"):
            options = config.client_options(url, self.timeouts, certificates)
        else:
            endpoint = f"https://{urlsplit(self._root).netloc}"
            if self.scheme in S3_SCHEMES:
                settings = current_settings(names=S3_SETTINGS)
                endpoint, s3 = s3_endpoint(settings), s3_store_config(settings)
            options = config.client_options(endpoint, self.timeouts, certificates, headers=False)
        key = (self._root, repr(sorted(options.items())), repr(sorted(s3.items())))
        with _BACKENDS_LOCK:
            found = _BACKENDS.get(key)
        if found is not None:
            return found
        retries: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=self.timeouts.total)}
        try:
            store: ObjectStore
            if self.scheme in ("http", "https"):
                store = HTTPStore(self._root, client_options=options, retry_config=retries)
            elif self.scheme in S3_SCHEMES:
                bucket = urlsplit(self._root).netloc
                store = S3Store(bucket, config=s3, client_options=options, retry_config=retries)  # type: ignore[arg-type]
            else:
                store = from_url(self._root, client_options=options, retry_config=retries)
        except LazyZarrError:
            raise
        except Exception as error:  # obstore refuses a configuration: a ValueError or its own
            reason = str(error).partition("\n")[0]
        else:
            with _BACKENDS_LOCK:
                return _BACKENDS.setdefault(key, _Backend(store))
        raise RemoteSetupError(f"{self.url}: cannot set up its connection: {reason}")

    def _check_open(self, key: str) -> None:
        if self._shared.closed:
            raise LoadCancelledError(f"{self.key_url(key)}: the store is closed")

    # -- reads --------------------------------------------------------------------------

    async def read(
        self,
        key: str,
        byte_range: ByteRequest | None = None,
        *,
        cap: int | None = None,
        reader: Hashable = None,
    ) -> bytes | memoryview | None:
        """`key`'s bytes (or `byte_range` of them) within `cap` (default `body_cap`), None
        when absent; on the running event loop, ended by `cancel_reader(reader)`."""
        if _empty(byte_range):
            return b""
        backend, shared, started = self._backend(key), self._shared, time.monotonic()
        task = asyncio.current_task()
        assert task is not None
        with shared.lock:
            self._check_open(key)
            shared.reads.setdefault(reader, set()).add(task)
        failure: BaseException
        try:
            result = await obstore.get_async(
                backend, self._prefix + key, options=_options(byte_range)
            )
            length = self._check(key, result, byte_range, cap)
            return _exact(self.key_url(key), await result.bytes_async(), length)
        except asyncio.CancelledError:
            with shared.lock:
                why = shared.ended.get(task)
            if why is None:
                raise
            failure = LoadCancelledError(f"{self.key_url(key)}: request {why}")
        except Exception as error:
            failure = error
        finally:
            with shared.lock:
                shared.reads.get(reader, set()).discard(task)
                if not shared.reads.get(reader, True):
                    del shared.reads[reader]
                shared.ended.pop(task, None)
        answer = self._failed(key, failure, byte_range, started)
        if answer is _WHOLE:
            return _window(await self.read(key, reader=reader), byte_range)
        return answer  # type: ignore[return-value]

    def read_sync(
        self, key: str, byte_range: ByteRequest | None = None, *, cap: int | None = None
    ) -> bytes | memoryview | None:
        """`read` on the calling thread (blocking in obstore; ended by its time caps)."""
        if _empty(byte_range):
            return b""
        self._check_open(key)
        backend, started = self._backend(key), time.monotonic()
        try:
            result = obstore.get(backend, self._prefix + key, options=_options(byte_range))
            length = self._check(key, result, byte_range, cap)
            return _exact(self.key_url(key), result.bytes(), length)
        except Exception as error:
            failure = error
        answer = self._failed(key, failure, byte_range, started)
        if answer is _WHOLE:
            return _window(self.read_sync(key), byte_range)
        return answer  # type: ignore[return-value]

    def _check(
        self, key: str, result: GetResult, byte_range: ByteRequest | None, cap: int | None
    ) -> int:
        """The body's length, once the answer's head says it may be read (else our refusal)."""
        url = self.key_url(key)
        encoding = (result.attributes.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise HttpError(
                f"{url}: refusing a body sent with Content-Encoding {encoding!r} "
                "(asked for 'identity'; a compressed transfer could inflate without bound)",
                url=url,
            )
        size, (start, stop) = int(result.meta["size"]), result.range
        if byte_range is not None:
            with self._shared.lock:
                totals = self._shared.totals
                known = totals.setdefault(key, size)
                while len(totals) > _TOTALS_KEPT:
                    del totals[next(iter(totals))]
            if known != size:
                raise HttpRangeError(
                    f"{url}: the file holds {size} bytes, where an earlier answer said {known} "
                    "(it changed meanwhile); refused (retried)",
                    url=url,
                )
        cap = self.body_cap(key) if cap is None else cap
        if stop - start > cap:
            raise HttpBodyTooLargeError(
                f"{url}: the server declares {stop - start:,} bytes, more than the {cap:,} "
                "this read may take",
                url=url,
                cap=cap,
                declared=stop - start,
            )
        return stop - start

    def _failed(
        self, key: str, error: BaseException, byte_range: ByteRequest | None, started: float
    ) -> bytes | object | None:
        """Raise our error for a failed read; else its answer: None (404), b"" (a range past
        the end), `_WHOLE` (the server ignores ranges: read it whole)."""
        if isinstance(error, LazyZarrError):
            raise error
        if byte_range is not None and range_past_end(error):
            return b""
        config = self._shared.config or RemoteConfig()
        proxy = config.proxy_for(self._base)
        found = remote_failure(
            self.key_url(key),
            error,
            timeouts=self.timeouts,
            elapsed=time.monotonic() - started,
            secrets=config.secrets(),
            proxy="" if proxy is None else proxy.label,
        )
        if isinstance(found, RangeIgnoredError) and byte_range is not None:
            return _WHOLE
        if found is not None:
            raise found
        return None

    # -- zarr's Store interface -----------------------------------------------------------

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if byte_range is None and key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            # Retried, waiting on a thread (the retry policy sleeps): metadata is read once.
            return await asyncio.to_thread(self.get_sync, key, prototype=prototype)
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
            body, timed_out = self.retry.call(lambda: _timed_out(self.read_sync, key))
            if timed_out is not None:
                raise timed_out
        else:
            body = self.read_sync(key, byte_range)
        return None if body is None else prototype.buffer.from_bytes(body)

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
        try:
            meta = await obstore.head_async(self._backend(key), self._prefix + key)
            return int(meta["size"])
        except Exception as error:
            failure = error
        self._failed(key, failure, None, started)
        return None

    # -- listing: an HTML index page over HTTP (as fsspec reads one), else the store's own --

    async def list(self) -> AsyncIterator[str]:
        async for key in self.list_prefix(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        pending = [prefix.strip("/")]
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
        where = (self._prefix + path).strip("/")
        found = await obstore.list_with_delimiter_async(self._backend(path), where or None)
        start = f"{where}/" if where else ""
        return (
            *(f"{p.removeprefix(start)}/" for p in found["common_prefixes"]),
            *(meta["path"].removeprefix(start) for meta in found["objects"]),
        )

    def _html_index(self, path: str) -> tuple[str, ...]:
        """What a directory's HTML index links to; no index (404): nothing."""
        page = self.read_sync(path, cap=_MAX_LISTING_BYTES)
        url = self.key_url(path) + "/"
        base = unquote(urlsplit(url).path)
        names: list[str] = []
        for match in _HREF.finditer(bytes(page or b"")):
            href = unquote(urlsplit(urljoin(url, match.group(1).decode("utf-8", "replace"))).path)
            name = href[len(base) :] if href.startswith(base) else ""
            if name.strip("/") and "/" not in name.rstrip("/") and name not in names:
                names.append(name)
        return tuple(names)

    async def set(self, key: str, value: Buffer) -> None:
        raise ReadOnlyError(f"{self.url}: a remote store can only be read")

    async def delete(self, key: str) -> None:
        raise ReadOnlyError(f"{self.url}: a remote store can only be read")


def _timed_out(read: Callable[[str], bytes | memoryview | None], key: str) -> tuple[Any, Any]:
    """`read(key)`, a timeout returned (so that `RetryPolicy` does not ask a server silent for
    a whole cap again while someone waits for the store to open), not raised."""
    try:
        return read(key), None
    except LoadTimeoutError as error:
        return None, error


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


def _window(body: bytes | memoryview | None, byte_range: ByteRequest | None) -> memoryview | None:
    """The part of a whole body `byte_range` asks for."""
    if body is None:
        return None
    view, length = memoryview(body), len(body)
    match byte_range:
        case RangeByteRequest(start=start, end=end):
            return view[min(start, length) : min(max(start, end), length)]
        case OffsetByteRequest(offset=offset):
            return view[min(offset, length) :]
        case SuffixByteRequest(suffix=suffix):
            return view[max(0, length - suffix) :]
    return view


def _exact(url: str, body: Any, length: int) -> memoryview:
    """`body` (obstore's `Bytes`) as a view, once it holds the `length` bytes expected."""
    view = memoryview(body)
    if len(view) != length:
        raise HttpTruncatedError(f"{url}: {len(view)} of the {length} bytes arrived", url=url)
    return view


def remote_store_of(store: Store) -> RemoteStore | None:
    """The `RemoteStore` that `store` is or wraps (through a public ``wrapped``), else None.

    Examples
    --------
    >>> from zarr.storage import MemoryStore
    >>> remote_store_of(MemoryStore()) is None
    True
    """
    for _ in range(16):
        if isinstance(store, RemoteStore) or (inner := getattr(store, "wrapped", None)) is None:
            break
        store = inner
    return store if isinstance(store, RemoteStore) else None


class RemoteFiles:
    """Bounded reads of remote files named by URL (kerchunk references): a `RemoteStore` per
    origin or bucket, made at its first read, closed by `close`.

    Examples
    --------
    >>> RemoteFiles(DEFAULT_TIMEOUTS).close()
    """

    def __init__(self, timeouts: Timeouts) -> None:
        self.timeouts = timeouts
        self._stores: dict[str, RemoteStore] = {}
        self._lock = threading.Lock()

    def read(self, url: str, byte_range: ByteRequest | None, cap: int) -> bytes | memoryview:
        """`byte_range` of the file at `url` (None: all of it) within `cap` bytes; a file
        that does not exist is a `FileNotFoundError` (a reference names bytes that must)."""
        parts = urlsplit(url)
        root = f"{parts.scheme.lower()}://{parts.netloc}"
        with self._lock:
            store = self._stores.get(root)
            if store is None:
                store = self._stores[root] = RemoteStore(root, timeouts=self.timeouts)
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
