"""Remote metadata fetched once while nodes are opened (`MetadataMemoStore`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final, Self

from zarr.abc.store import (
    Store,
)
from zarr.storage import WrapperStore

from napari_lazy_zarr.core.storage.vetting import ATTRIBUTE_FILES, METADATA_FILES

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest

__all__ = [
    "MetadataMemoStore",
    "forget_metadata",
    "is_metadata_key",
]


_METADATA_DOCUMENTS: Final = frozenset({*METADATA_FILES, *ATTRIBUTE_FILES})


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


def forget_metadata(store: Any) -> None:
    """End a `MetadataMemoStore`'s memo (nothing for any other store)."""
    if isinstance(store, MetadataMemoStore):
        store.forget()
