"""The chunk state machine: keys, states, legal moves and the events that record them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Hashable

__all__ = [
    "LEGAL_MOVES",
    "ChunkEvent",
    "ChunkKey",
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
class ChunkKey:
    """Identifies cached data: the source's identity and the chunk's domain.

    The domain, not bare grid coordinates, is part of the key so that two grids
    over one source never collide.

    Examples
    --------
    >>> key = ChunkKey("a.zarr", (0, 512), (512, 1024))
    >>> key.shape
    (512, 512)
    >>> str(key)
    'a.zarr[0:512, 512:1024]'
    """

    source: Hashable
    inclusive_min: tuple[int, ...]
    exclusive_max: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """The chunk's extent per axis (clipped to the array)."""
        return tuple(
            hi - lo for lo, hi in zip(self.inclusive_min, self.exclusive_max, strict=True)
        )

    def __str__(self) -> str:
        box = ", ".join(
            f"{lo}:{hi}" for lo, hi in zip(self.inclusive_min, self.exclusive_max, strict=True)
        )
        return f"{self.source}[{box}]"


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
