"""`SyncReads`: zarr's asynchronous read methods for stores that read synchronously."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest

__all__ = ["SyncReads"]


class SyncReads:
    """A mixin (before `zarr.abc.store.Store` in the bases) for stores whose reads are `get_sync`.

    The engine's workers call `get_sync` directly; zarr-python's own async
    callers (opening nodes, listing) get `get` and `get_partial_values` on a
    thread, so a blocking read never stalls zarr's event loop.
    """

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        raise NotImplementedError

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        return await asyncio.to_thread(
            self.get_sync, key, prototype=prototype, byte_range=byte_range
        )

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, r) for key, r in key_ranges)))
