"""`EventLog`: a cache's most recent state moves, kept as fields in a flat ring, not objects.

A cache makes three `ChunkEvent`s per chunk it loads and a fourth when it
evicts it. Kept in a log as objects, the last 10,000 of them outlive two young
garbage collections, reach the oldest generation and bring on full
collections. Measured on one thread over 512² blosc chunks: 10.6-12.7 µs of
collections per chunk loaded with such a log, none with the moves kept as
fields. The events a listener gets still die young.

An event object is made again only when the log is read (`events`), which the
inspector does for one chunk's history on demand, and tests do.

Thread contract: the cache's lock guards every call.
"""

from __future__ import annotations

from napari_lazy_zarr.core.states import ChunkEvent

__all__ = ["EventLog"]

_WIDTH = 6
"""Slots per event in the ring: key, previous, current, reason, time, error."""


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

    __slots__ = ("_appended", "_end", "_fields", "_next", "_size")

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"event_log_size must be >= 0, got {size}")
        self._size = size
        self._appended = 0
        # One flat ring of `_WIDTH` slots per event, written in place: appending
        # allocates nothing the collector tracks, and one slice assignment stores an
        # event's fields (was one column each: 210 bytecodes a chunk loaded, now ~120).
        self._fields: list[object] = [None] * (size * _WIDTH)
        self._end = size * _WIDTH
        self._next = 0  # the first slot of the next event

    def append(self, event: ChunkEvent) -> None:
        """Keep `event`'s fields, dropping the oldest event's once `size` are kept."""
        start = self._next
        if start == self._end:  # also for size 0, where the ring has no slot
            if not start:
                return
            start = 0
        self._fields[start : start + _WIDTH] = (
            event.key,
            event.previous,
            event.current,
            event.reason,
            event.time,
            event.error,
        )
        self._next = start + _WIDTH
        self._appended += 1

    def events(self) -> tuple[ChunkEvent, ...]:
        """The events kept, oldest first (new objects, equal to those appended)."""
        fields, end, newest = self._fields, self._end, self._next
        count = len(self)
        starts = [(newest - (count - n) * _WIDTH) % end for n in range(count)]
        return tuple(ChunkEvent(*fields[i : i + _WIDTH]) for i in starts)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return min(self._appended, self._size)
