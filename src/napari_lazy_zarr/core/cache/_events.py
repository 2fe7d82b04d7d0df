"""`EventLog`: a cache's most recent state moves, kept as columns rather than as objects.

A cache makes three `ChunkEvent`s per chunk it loads and a fourth when it
evicts it. Kept in a log as objects, the last 10,000 of them outlive two young
garbage collections, reach the oldest generation and bring on full
collections. Measured on one thread over 512² blosc chunks: 10.6-12.7 µs of
collections per chunk loaded with such a log, none with the moves kept as
columns. The events a listener gets still die young.

An event object is made again only when the log is read (`events`), which the
inspector does for one chunk's history on demand, and tests do.

Thread contract: the cache's lock guards every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from napari_lazy_zarr.core.states import ChunkEvent

if TYPE_CHECKING:
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.states import ChunkState, EventReason

__all__ = ["EventLog"]


class EventLog:
    """The last `size` events appended, oldest first when read.

    Examples
    --------
    >>> from napari_lazy_zarr.core.keys import ChunkKey
    >>> from napari_lazy_zarr.core.states import ChunkState, EventReason
    >>> log = EventLog(2)
    >>> for t in (1.0, 2.0, 3.0):
    ...     log.append(ChunkEvent(ChunkKey("s", (0,), (4,)), ChunkState.NEW,
    ...                           ChunkState.QUEUED, EventReason.REQUESTED, t))
    >>> [event.time for event in log.events()]
    [2.0, 3.0]
    """

    __slots__ = ("_count", "_currents", "_errors", "_keys", "_next", "_previous", "_reasons",
                 "_size", "_times")  # fmt: skip

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"event_log_size must be >= 0, got {size}")
        self._size = size
        self._next = 0  # the slot the next event goes to
        self._count = 0
        # Slots written in place: appending allocates nothing the collector tracks.
        self._keys: list[ChunkKey | None] = [None] * size
        self._previous: list[ChunkState | None] = [None] * size
        self._currents: list[ChunkState | None] = [None] * size
        self._reasons: list[EventReason | None] = [None] * size
        self._times: list[float] = [0.0] * size
        self._errors: list[BaseException | None] = [None] * size

    def append(self, event: ChunkEvent) -> None:
        """Keep `event`'s fields, dropping the oldest event's once `size` are kept."""
        if not self._size:
            return
        index = self._next
        self._keys[index] = event.key
        self._previous[index] = event.previous
        self._currents[index] = event.current
        self._reasons[index] = event.reason
        self._times[index] = event.time
        self._errors[index] = event.error
        self._next = index + 1 if index + 1 < self._size else 0
        if self._count < self._size:
            self._count += 1

    def events(self) -> tuple[ChunkEvent, ...]:
        """The events kept, oldest first (new objects, equal to those appended)."""
        keys, previous, currents = self._keys, self._previous, self._currents
        reasons, times, errors = self._reasons, self._times, self._errors
        # A negative index counts from the end of the columns: where the ring wraps.
        return tuple(
            ChunkEvent(keys[i], previous[i], currents[i], reasons[i], times[i], errors[i])  # type: ignore[arg-type]
            for i in range(self._next - self._count, self._next)
        )

    def __len__(self) -> int:
        return self._count
