"""The chunk state machine: states, legal moves, and the events (with their reasons) that
record them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.slots import slot_init

if TYPE_CHECKING:
    from napari_lazy_zarr.core.keys import ChunkKey

__all__ = [
    "LEGAL_MOVES",
    "ChunkEvent",
    "ChunkState",
    "EventReason",
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


class EventReason(StrEnum):
    """Why a chunk moved: the closed vocabulary of `ChunkEvent.reason`.

    A `StrEnum`, so a reason still compares equal to its text
    (``EventReason.LOADED == "loaded"``); a failure's error is in
    `ChunkEvent.error`, not in the reason.

    Examples
    --------
    >>> EventReason.FAILED == "failed"
    True
    >>> EventReason("computing")
    <EventReason.COMPUTING: 'computing'>
    """

    REQUESTED = "requested"
    """NEW or EVICTED -> QUEUED: a view needs it (or a derived chunk it needs does)."""
    PREFETCH = "prefetch"
    """NEW or EVICTED -> QUEUED: a neighbour of a view, loaded ahead at low priority."""
    STARTED = "started"
    """QUEUED -> LOADING: a worker reads it (or fails a derived chunk without reading it)."""
    COMPUTING = "computing"
    """QUEUED -> LOADING for a source computing its chunks (`load_reason`, a dask source)."""
    LOADED = "loaded"
    """LOADING -> READY."""
    FAILED = "failed"
    """LOADING -> FAILED; the error is the event's `error`."""
    EVICTED = "evicted"
    """READY -> EVICTED: least recently used, over the byte limit (or `evict_unpinned`)."""
    RETRY = "retry"
    """FAILED -> QUEUED: an explicit retry."""
    CANCELLED = "cancelled"
    """LOADING -> QUEUED: nobody wanted it any more and its read was cancelled."""


class IllegalTransitionError(RuntimeError):
    """A state move outside `LEGAL_MOVES` was attempted (always a bug, never bad input)."""


@slot_init  # made three or four times per chunk loaded, under the cache's lock
@dataclass(frozen=True, slots=True)
class ChunkEvent:
    """One state move of one chunk, as recorded in the cache's event log.

    Immutable; the cache emits events in batches from whichever thread made
    the moves (`ChunkCache.state_changed`).

    Examples
    --------
    >>> from napari_lazy_zarr.core.keys import ChunkKey
    >>> event = ChunkEvent(ChunkKey("s", (0,), (4,)), ChunkState.NEW, ChunkState.QUEUED,
    ...                    EventReason.REQUESTED, 0.0)
    >>> event.current, event.detail
    (<ChunkState.QUEUED: 'queued'>, 'requested')
    >>> failed = ChunkEvent(ChunkKey("s", (0,), (4,)), ChunkState.LOADING, ChunkState.FAILED,
    ...                     EventReason.FAILED, 0.0, OSError("disk"))
    >>> failed.detail
    'failed: disk'
    """

    key: ChunkKey
    """The chunk that moved."""
    previous: ChunkState
    """Its state before the move."""
    current: ChunkState
    """Its state after the move."""
    reason: EventReason
    """Why it moved (a source may name its LOADING reason: `EventReason.COMPUTING`)."""
    time: float
    """`time.monotonic()` at the move."""
    error: BaseException | None = None
    """A move to FAILED: what the chunk failed with (None for every other move)."""

    @property
    def detail(self) -> str:
        """The reason as a log shows it: with the error of a failure (``"failed: <error>"``)."""
        return str(self.reason) if self.error is None else f"{self.reason}: {self.error}"
