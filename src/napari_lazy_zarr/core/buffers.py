"""Recycled memory for decoded chunks.

A decoded chunk kept in the cache lives in memory the process has just mapped:
every 4 KiB page of it faults when first written (about 120 faults, ~0.3 ms,
for a 512² uint16 chunk here, as much as a fifth of its decode), because the
allocator hands freed chunk-sized blocks back to the system. `BlockPool` keeps
the blocks of chunks nobody references any more and hands them to the next
decode of the same size, so a chunk decodes into pages already mapped.

A block returns to the pool only when no array can see it: the arrays made by
`BlockPool.lease` reach their block through a `_Lease` object, which gives the
block back when it is garbage (its `__del__`), that is when the leased array
and every view of it (numpy views keep their base alive) are gone. Nothing is
recycled on a guess: pixels handed out are never overwritten.

Examples
--------
>>> pool = BlockPool(1 << 20)
>>> block = pool.lease(64)
>>> block[:] = 7
>>> pool.free_bytes
0
>>> del block  # no view of it left: its memory goes back to the pool
>>> pool.free_bytes
64
>>> again = pool.lease(64)  # and serves the next lease of that size
>>> pool.free_bytes
0
"""

from __future__ import annotations

import threading
from typing import Any, Final

import numpy as np

__all__ = ["CHUNK_MEMORY", "POOL_BYTES", "BlockPool"]

POOL_BYTES: Final = 64 << 20
"""Free blocks `CHUNK_MEMORY` keeps for reuse, in bytes (beyond that they are freed)."""


class _Lease:
    """What a leased array's memory is exported by; returns the block when it is garbage.

    `__del__`, not a `weakref.finalize`: one per chunk decoded, a finalizer cost 57
    bytecodes and a registry entry under a lock more.
    """

    __slots__ = ("_block", "_pool")

    def __init__(self, block: np.ndarray[Any, Any], pool: BlockPool) -> None:
        self._block = block
        self._pool = pool

    def __buffer__(self, flags: int, /) -> memoryview:
        return memoryview(self._block)

    def __del__(self) -> None:
        self._pool._give_back(self._block)


class BlockPool:
    """Blocks of memory for decoded chunks, reused once nothing references them.

    Thread-safe: `lease` and the finalizers that give blocks back run on any
    thread. At most `limit` bytes of free blocks are kept.
    """

    def __init__(self, limit: int = POOL_BYTES) -> None:
        self._limit = limit
        self._free: dict[int, list[np.ndarray[Any, Any]]] = {}
        self._free_bytes = 0
        self._lock = threading.Lock()

    @property
    def free_bytes(self) -> int:
        """Bytes of free blocks kept for reuse."""
        with self._lock:
            return self._free_bytes

    def lease(self, nbytes: int) -> np.ndarray[Any, Any]:
        """A writable uint8 array of `nbytes`, in a reused block when one is free."""
        block = None
        with self._lock:
            blocks = self._free.get(nbytes)
            if blocks:
                block = blocks.pop()
                self._free_bytes -= nbytes
        if block is None:
            block = np.empty(nbytes, dtype=np.uint8)
        return np.frombuffer(_Lease(block, self), dtype=np.uint8)

    def _give_back(self, block: np.ndarray[Any, Any]) -> None:
        nbytes = block.nbytes
        with self._lock:
            if self._free_bytes + nbytes <= self._limit:
                self._free.setdefault(nbytes, []).append(block)
                self._free_bytes += nbytes

    def clear(self) -> None:
        """Free every kept block."""
        with self._lock:
            self._free.clear()
            self._free_bytes = 0


CHUNK_MEMORY: Final = BlockPool()
"""The process's pool for decoded chunks (`ZarrChunkSource` decodes zstd and blosc into it)."""
