"""Remote metadata fetched once while nodes are opened (`MetadataMemoStore`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final, Literal, Self

from zarr.abc.store import (
    Store,
)
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

from napari_lazy_zarr.core.executors import run_concurrently
from napari_lazy_zarr.core.storage.vetting import ATTRIBUTE_FILES, METADATA_FILES

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest

__all__ = [
    "MetadataMemoStore",
    "forget_metadata",
    "is_metadata_key",
    "known_metadata",
    "prefetch_metadata",
    "seed_metadata",
]


_METADATA_DOCUMENTS: Final = frozenset({*METADATA_FILES, *ATTRIBUTE_FILES})
# The documents opening a node may read, by the format known beforehand (None: either):
# zarr-python reads an array's, then a group's, each form's documents in one round.
_NODE_DOCUMENTS: Final[dict[int | None, tuple[str, ...]]] = {
    3: ("zarr.json",),
    2: (".zarray", ".zattrs", ".zgroup"),
    None: ("zarr.json", ".zarray", ".zattrs", ".zgroup"),
}
_PREFETCH_CONCURRENCY: Final = 16  # documents fetched at once (a round trip each)


class _Memo:
    """The documents a `MetadataMemoStore` and its copies keep (None once forgotten)."""

    __slots__ = ("documents", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.documents: dict[str, Buffer | None] | None = {}


class MetadataMemoStore(WrapperStore[Store]):
    """A store wrapper that fetches each metadata document once while nodes are opened.

    Opening a node tries it as an array, then as a group, and zarr-python
    reads the documents of each form (a group's ``zarr.json`` twice, an absent
    node's documents twice); over HTTP each read is a round trip. While
    memoizing, a metadata document
    (``zarr.json``, ``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata``),
    present or absent, is fetched from the wrapped store once and answered from
    memory afterwards. `forget` ends that: then every call goes straight to the
    wrapped store, so arrays opened through it read their chunks as if opened
    from it. Chunks and byte ranges are never memoized.

    Thread-safe. Two first requests of one document at the same moment may
    both fetch it; opening never asks for one document twice at once.

    Examples
    --------
    >>> import zarr
    >>> from zarr.storage import LoggingStore, MemoryStore
    >>> from napari_lazy_zarr.core.sources.zarr import open_node
    >>> inner = MemoryStore()
    >>> _ = zarr.create_group(inner).create_array("a", shape=(4,), dtype="u1")
    >>> counted = LoggingStore(inner.with_read_only(True), log_level="CRITICAL")
    >>> store = MetadataMemoStore(counted)
    >>> for _ in range(3):
    ...     _ = open_node(store, "", "root"), open_node(store, "a", "a", zarr_format=3)
    >>> counted.counter["get"]  # zarr.json, .zarray, .zattrs; a/zarr.json: once each
    4
    >>> store.forget()
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._inner = store  # ours: WrapperStore keeps it in a private attribute
        self._memo = _Memo()

    @property
    def wrapped(self) -> Store:
        """The store this one reads through (`http_store_of` looks through it)."""
        return self._inner

    # zarr makes copies while opening (read-only ones, entered ones): they share the memo,
    # so `forget` reaches them. Through the public copy methods, not WrapperStore's hook.
    def with_read_only(self, read_only: bool = False) -> Self:
        return self._sharing_memo(super().with_read_only(read_only))

    def __enter__(self) -> Self:
        return self._sharing_memo(super().__enter__())

    def _sharing_memo(self, copy: Self) -> Self:
        copy._memo = self._memo
        return copy

    def prefetch(
        self,
        prefixes: Iterable[str],
        *,
        zarr_format: Literal[2, 3] | None = None,
        consolidated: bool = False,
    ) -> int:
        """Fetch, concurrently, the documents opening the nodes at `prefixes` will read.

        Opening a node reads an array's documents, then (if it is none) a
        group's: two round trips over HTTP, one after the other. Fetched here
        at once, they are one. `zarr_format` narrows the documents to one
        format's; `consolidated` adds a Zarr v2 group's ``.zmetadata``. Only
        stores read synchronously (`get_sync`: ours over HTTP, local files,
        references) are prefetched; a document that fails is left for the
        open to fetch (and report). Returns the number of documents fetched.
        """
        names = _NODE_DOCUMENTS[zarr_format] + (
            (".zmetadata",) if consolidated and zarr_format != 3 else ()
        )
        get_sync = getattr(self._inner, "get_sync", None)
        memo = self._memo
        with memo.lock:
            if get_sync is None or memo.documents is None:
                return 0
            known = memo.documents
            keys = [
                key
                for prefix in dict.fromkeys(prefixes)
                for name in names
                if (key := f"{prefix.strip('/')}/{name}".lstrip("/")) not in known
            ]
        if not keys:
            return 0

        def fetch(key: str) -> None:
            try:
                value = get_sync(key, prototype=default_buffer_prototype())
            except Exception:  # left for the open itself to meet and report
                return
            with memo.lock:
                if memo.documents is not None:
                    memo.documents.setdefault(key, value)

        run_concurrently(fetch, keys, concurrency=_PREFETCH_CONCURRENCY, name="lazy-zarr-metadata")
        return len(keys)

    def known(self, prefix: str) -> dict[str, Buffer | None]:
        """The documents kept under the node at `prefix`, keyed relative to it."""
        start = f"{prefix.strip('/')}/".lstrip("/")
        with self._memo.lock:
            documents = self._memo.documents or {}
            return {k.removeprefix(start): v for k, v in documents.items() if k.startswith(start)}

    def seed(self, documents: Mapping[str, Buffer | None]) -> None:
        """Keep `documents` (present or absent, keyed as in this store) as if fetched.

        For documents another store over the same storage fetched: they are
        the storage's answers, so opening from either store sees the same.
        """
        with self._memo.lock:
            if self._memo.documents is not None:
                for key, value in documents.items():
                    if is_metadata_key(key):
                        self._memo.documents.setdefault(key, value)

    def forget(self) -> None:
        """Stop memoizing and drop the documents kept (in this store and its copies)."""
        with self._memo.lock:
            self._memo.documents = None

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if byte_range is not None or key.rsplit("/", 1)[-1] not in _METADATA_DOCUMENTS:
            return await self._inner.get(key, prototype, byte_range)
        memo = self._memo
        with memo.lock:
            if memo.documents is not None and key in memo.documents:
                return memo.documents[key]
        value = await self._inner.get(key, prototype)
        with memo.lock:
            if memo.documents is not None:  # else forgotten meanwhile: keep nothing
                memo.documents.setdefault(key, value)
        return value

    def __str__(self) -> str:
        return str(self._inner)

    def __repr__(self) -> str:
        return f"MetadataMemoStore({self._inner!r})"


def is_metadata_key(key: str) -> bool:
    """Whether `key` names a zarr metadata or attributes document."""
    return key.rsplit("/", 1)[-1] in _METADATA_DOCUMENTS


def prefetch_metadata(
    store: Any,
    prefixes: Iterable[str],
    *,
    zarr_format: Literal[2, 3] | None = None,
    consolidated: bool = False,
) -> int:
    """`MetadataMemoStore.prefetch` (nothing for any other store: 0)."""
    if isinstance(store, MetadataMemoStore):
        return store.prefetch(prefixes, zarr_format=zarr_format, consolidated=consolidated)
    return 0


def known_metadata(store: Any, prefix: str) -> dict[str, Buffer | None]:
    """`MetadataMemoStore.known` (nothing for any other store: empty)."""
    return store.known(prefix) if isinstance(store, MetadataMemoStore) else {}


def seed_metadata(store: Any, documents: Mapping[str, Buffer | None]) -> None:
    """`MetadataMemoStore.seed` (nothing for any other store)."""
    if isinstance(store, MetadataMemoStore):
        store.seed(documents)


def forget_metadata(store: Any) -> None:
    """End a `MetadataMemoStore`'s memo (nothing for any other store)."""
    if isinstance(store, MetadataMemoStore):
        store.forget()
