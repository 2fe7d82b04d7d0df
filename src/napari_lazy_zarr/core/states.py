"""The chunk state machine: states, legal moves and the events that record them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from napari_lazy_zarr.core.keys import ChunkKey

__all__ = [
    "LEGAL_MOVES",
    "ChunkEvent",
    "ChunkState",
    "IllegalTransitionError",
]


class ChunkState(StrEnum):
    """Where a chunk is in its life in the cache.

    Examples
    --------
    >>> ChunkState.READY
    <ChunkState.READY: 'ready'>
    >>> ChunkState.QUEUED in LEGAL_MOVES[ChunkState.NEW]
    True
    """

    NEW = "new"
    QUEUED = "queued"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    EVICTED = "evicted"


LEGAL_MOVES: Final[dict[ChunkState, frozenset[ChunkState]]] = {
    ChunkState.NEW: frozenset({ChunkState.QUEUED}),
    ChunkState.QUEUED: frozenset({ChunkState.LOADING}),
    # LOADING -> QUEUED: a load cancelled because nobody wants the chunk any more (its
    # views moved on); it is queued again or parked, never FAILED.
    ChunkState.LOADING: frozenset({ChunkState.READY, ChunkState.FAILED, ChunkState.QUEUED}),
    ChunkState.READY: frozenset({ChunkState.EVICTED}),
    # FAILED -> QUEUED happens only through an explicit retry.
    ChunkState.FAILED: frozenset({ChunkState.QUEUED}),
    ChunkState.EVICTED: frozenset({ChunkState.QUEUED}),
}
"""Every move the cache may make; anything else raises `IllegalTransitionError`."""


class IllegalTransitionError(RuntimeError):
    """A state move outside `LEGAL_MOVES` was attempted (always a bug, never bad input)."""


@dataclass(frozen=True, slots=True)
class ChunkEvent:
    """One state move of one chunk, as recorded in the cache's event log.

    `time` is `time.monotonic()` at the move. `reason` is a short, closed-ish
    vocabulary: ``"requested"``, ``"prefetch"``, ``"started"``, ``"loaded"``,
    ``"missing"`` (absent key, served as fill value), ``"failed: <cause>"``,
    ``"evicted"``, ``"retry"``, ``"cancelled"`` (LOADING back to QUEUED). A
    source may name its own LOADING reason (a dask source says ``"computing"``).

    Examples
    --------
    >>> from napari_lazy_zarr.core.keys import ChunkKey
    >>> event = ChunkEvent(ChunkKey("s", (0,), (4,)), ChunkState.NEW, ChunkState.QUEUED,
    ...                    "requested", 0.0)
    >>> event.current
    <ChunkState.QUEUED: 'queued'>
    """

    key: ChunkKey
    previous: ChunkState
    current: ChunkState
    reason: str
    time: float
