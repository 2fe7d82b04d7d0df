"""`Outbox`: what a locked section of `ChunkCache` leaves to do once the lock is released.

Thread contract
---------------
An outbox belongs to one locked section of one thread: it is made before the
cache's lock is taken, filled under it (by the façade and by the helpers it
is handed to as a parameter), and flushed by `ChunkCache._flush` after the
lock is released. It never takes a lock itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from napari_lazy_zarr.core.executors import ThreadStartError

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy as np

    from napari_lazy_zarr.core.cache._residency import Entry
    from napari_lazy_zarr.core.cache.request import Request
    from napari_lazy_zarr.core.executors import Alarm
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.sources.protocol import CancellableSource
    from napari_lazy_zarr.core.states import ChunkEvent

__all__ = ["Outbox", "cancel_loads"]


class Outbox:
    """What to do once the lock is released."""

    __slots__ = (
        "cancels",
        "deliveries",
        "events",
        "finished",
        "starts",
        "superseded",
        "watchdog",
    )

    def __init__(self) -> None:
        self.events: list[ChunkEvent] = []
        # READY chunks for requests with an `on_ready` (called, then landed, after the lock)
        self.deliveries: list[tuple[Request, ChunkKey, np.ndarray[Any, Any]]] = []
        self.finished: list[Request] = []
        self.superseded: list[Request] = []
        self.starts = 0
        self.cancels: list[Entry] = []  # LOADING chunks whose source is to cancel the read
        self.watchdog: tuple[Alarm, float] | None = None  # to arm: the alarm, its deadline

    def deliver(self) -> None:
        """Hand each READY chunk to its request's `on_ready`, then to its `landed`."""
        for request, key, data in self.deliveries:
            request._deliver(key, data)

    def resolve_requests(self) -> None:
        """Cancel the superseded requests' futures, resolve the finished ones'."""
        for request in self.superseded:
            request.done.cancel()
        for request in self.finished:
            if not request.done.done():
                request.done.set_result(None)

    def start_watchdog_and_cancel(self) -> None:
        """Arm the stall watchdog, if asked; ask to cancel the reads to cancel."""
        if self.watchdog is not None:
            alarm, deadline = self.watchdog
            try:
                alarm.arm(deadline)
            except ThreadStartError:  # no stall detection this time
                # The scheduler still counts it armed: it is disarmed (and armed again)
                # once the queue empties (`Scheduler.schedule_starts`).
                logging.getLogger(__name__).warning(
                    "napari-lazy-zarr: could not start the stall watchdog", exc_info=True
                )
        cancel_loads(self.cancels)


def cancel_loads(entries: Iterable[Entry]) -> None:
    """Ask the sources to cancel these reads (without the cache lock)."""
    for entry in entries:
        try:
            cast("CancellableSource", entry.source).cancel_load(entry.coords)
        except Exception:  # a failed cancel only means the read runs to its end
            logging.getLogger(__name__).exception("cancel_load(%s) failed", entry.key)
