"""Where a zarr array's stored chunks come from: one fetcher per kind of store, chosen at open.

`ZarrChunkSource` locates a chunk (its key, its byte range in a shard), fetches the bytes
through its `Fetcher` (`fetcher_for` picks it once, when the array is opened), and decodes
them. A directory's `LocalFetcher` reads regular files only, never torn, time-capped
(`read_stamped`); a zip's `ZipFetcher` decompresses a member at most to the cap; a
`RemoteFetcher` makes a request through obstore on the worker's thread (blocking, as the
project's own HTTP client did: through zarr's event loop, where a close could cancel it,
a cold 2048² view over HTTP took 1.2-1.9x as long; the source stops a cancelled read once
its request ends), its body refused before it is read if over the cap; any other zarr
store's `StoreFetcher` checks the answer's length.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, Protocol

import zarr
from zarr.buffer import default_buffer_prototype

from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.sources import _zarr_compat as compat
from napari_lazy_zarr.core.storage.files import FileStamp, read_stamped
from napari_lazy_zarr.core.storage.local import BoundedZipStore, range_arguments
from napari_lazy_zarr.core.storage.remote import RemoteStore, remote_store_of

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer
    from zarr.abc.store import ByteRequest
    from zarr.storage import StorePath

__all__ = [
    "Fetched",
    "Fetcher",
    "FetcherKind",
    "LocalFetcher",
    "RemoteFetcher",
    "StoreFetcher",
    "ZipFetcher",
    "fetcher_for",
]

type Fetched = tuple[Buffer, FileStamp | None] | None
"""A key's bytes and, for a local file, the version read (its stamp); None: absent."""
type FetcherKind = Literal["local", "zip", "remote", "store"]
"""What a fetcher reads: a directory, a zip file, a remote store, any other zarr store."""


class Fetcher(Protocol):
    """Bounded bytes of an array's keys (relative to it), from one kind of store; thread-safe."""

    @property
    def kind(self) -> FetcherKind:
        """What it reads (`FetcherKind`)."""
        ...

    def fetch(
        self, key: str, byte_range: ByteRequest | None, limit: int, *, settle: bool = True
    ) -> Fetched:
        """`key`'s bytes (or `byte_range` of them), at most `limit`; None when absent.
        `settle`: a local file just written is read again once quiet (`read_stamped`)."""
        ...

    def file_of(self, key: str) -> str | None:
        """The local file holding `key` (a directory's file, a zip's archive), else None."""
        ...


class LocalFetcher:
    """A directory's files, through `read_stamped`."""

    kind: Literal["local"] = "local"

    def __init__(self, directory: str, timeout: float | None) -> None:
        self._prefix = os.path.join(directory, "")
        self._timeout = timeout
        self._prototype = default_buffer_prototype()

    def fetch(
        self, key: str, byte_range: ByteRequest | None, limit: int, *, settle: bool = True
    ) -> Fetched:
        offset, length, suffix = range_arguments(byte_range)
        found = read_stamped(
            self._prefix + key,
            limit=limit,
            offset=offset,
            length=length,
            suffix=suffix,
            timeout=self._timeout,
            settle=settle,
            missing_ok=True,
        )
        if found is None:
            return None
        return self._prototype.buffer.from_bytes(found[0]), found[1]

    def file_of(self, key: str) -> str | None:
        return self._prefix + key


class ZipFetcher:
    """A zip file's members, through `BoundedZipStore.get_bounded`."""

    kind: Literal["zip"] = "zip"

    def __init__(self, store: BoundedZipStore, prefix: str) -> None:
        self._store = store
        self._prefix = prefix
        self._prototype = default_buffer_prototype()

    def fetch(
        self, key: str, byte_range: ByteRequest | None, limit: int, *, settle: bool = True
    ) -> Fetched:
        found = self._store.get_bounded(
            self._prefix + key, self._prototype, byte_range, limit=limit
        )
        return None if found is None else (found, None)

    def file_of(self, key: str) -> str | None:
        return self._store.location


class RemoteFetcher:
    """A `RemoteStore`'s keys, each a request through obstore on the calling thread."""

    kind: Literal["remote"] = "remote"

    def __init__(self, store: RemoteStore, prefix: str) -> None:
        self._store = store
        self._prefix = prefix
        self._prototype = default_buffer_prototype()

    def fetch(
        self, key: str, byte_range: ByteRequest | None, limit: int, *, settle: bool = True
    ) -> Fetched:
        body = self._store.read_sync(self._prefix + key, byte_range, cap=limit)
        return None if body is None else (self._prototype.buffer.from_bytes(body), None)

    def file_of(self, key: str) -> str | None:
        return None


class StoreFetcher:
    """Any other zarr store: its ``get_sync`` where it has one, else its ``get`` on zarr's
    event loop; an answer longer than the cap is refused (after the fact)."""

    kind: Literal["store"] = "store"

    def __init__(self, store: Any, prefix: str, where: str) -> None:
        self._store = store
        self._prefix = prefix
        self._where = where
        self.synchronous = compat.store_supports_sync_io(store)
        """Whether its reads are `get_sync` (on the calling thread)."""
        self._prototype = default_buffer_prototype()

    def fetch(
        self, key: str, byte_range: ByteRequest | None, limit: int, *, settle: bool = True
    ) -> Fetched:
        path = self._prefix + key
        raw: Buffer | None
        if self.synchronous:
            raw = self._store.get_sync(path, prototype=self._prototype, byte_range=byte_range)
        else:
            raw = compat.run_sync(self._store.get(path, self._prototype, byte_range))
        if raw is not None and len(raw) > limit:
            raise ChunkReadError(
                f"{self._where}: {path!r}: {len(raw):,} bytes, more than the "
                f"{limit:,} any encoding of its data could take"
            )
        return None if raw is None else (raw, None)

    def file_of(self, key: str) -> str | None:
        if isinstance(self._store, zarr.storage.ZipStore) and self._store.path is not None:
            return str(self._store.path)
        return None


def fetcher_for(store_path: StorePath, where: str, *, timeout: float | None, cap: int) -> Fetcher:
    """The fetcher of the array at `store_path` (`where` names it in messages). `timeout`
    caps each local file read; `cap` (the most a stored chunk may take) becomes a remote
    store's `limit` for the array, so that zarr's own reads of its chunks are capped too."""
    store = store_path.store
    prefix = f"{store_path.path}/" if store_path.path else ""
    if isinstance(store, zarr.storage.LocalStore):
        return LocalFetcher(os.path.join(str(store.root), store_path.path), timeout)
    if isinstance(store, BoundedZipStore):
        return ZipFetcher(store, prefix)
    remote = remote_store_of(store)
    if remote is not None:
        remote.limit(store_path.path, cap)
        return RemoteFetcher(remote, prefix)
    return StoreFetcher(store, prefix, where)
