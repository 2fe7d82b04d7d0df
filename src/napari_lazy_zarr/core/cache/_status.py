"""`chunk_status`: what a `ChunkCache` knows about one chunk, read from its helpers.

Thread contract
---------------
Called by `ChunkCache.status` with the cache's lock held; reads the helpers'
state and changes nothing. Takes no lock itself; the `ChunkStatus` it returns
is immutable and may cross threads.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.cache.schedule import LoadClass
from napari_lazy_zarr.core.cache.snapshots import ChunkStatus
from napari_lazy_zarr.core.states import ChunkState

if TYPE_CHECKING:
    from napari_lazy_zarr.core.cache._dependencies import Dependencies
    from napari_lazy_zarr.core.cache._residency import Residency
    from napari_lazy_zarr.core.cache._scheduler import Scheduler
    from napari_lazy_zarr.core.cache.schedule import QueueItem
    from napari_lazy_zarr.core.keys import ChunkKey

__all__ = ["chunk_status", "count_ahead"]

_QUEUE_COUNT_LIMIT: Final = 10_000  # `count_ahead` stops counting the loads ahead here


def chunk_status(
    key: ChunkKey, residency: Residency, scheduler: Scheduler, dependencies: Dependencies
) -> ChunkStatus:
    """Everything the cache knows about one chunk (`ChunkCache.status`)."""
    entry = residency.entries.get(key)
    if entry is None:
        return ChunkStatus(
            key=key,
            state=ChunkState.NEW,
            pins=0,
            nbytes=0,
            cost=1,
            queue_ahead=None,
            load_class=None,
            stale=False,
            parked=False,
            inputs_missing=0,
            loading_seconds=None,
            error=None,
        )
    ahead: int | None = None
    load_class: LoadClass | None = None
    stale = False
    if entry.state is ChunkState.QUEUED and entry.queue_items:
        heap = scheduler.queue.items()
        mine = [item for item in heap if item.key == key]
        live = [i for i in mine if not scheduler.is_stale(i)]
        if mine:
            # Stale items are skipped when they reach the front: the chunk's place
            # in line is its most urgent live item's.
            best = min(live or mine)
            load_class = LoadClass(best.load_class)
            stale = not live
            ahead = count_ahead(heap, best, residency, scheduler)
    return ChunkStatus(
        key=key,
        state=entry.state,
        pins=entry.pins,
        nbytes=entry.nbytes,
        cost=entry.cost,
        queue_ahead=ahead,
        load_class=load_class,
        stale=stale,
        parked=key in scheduler.parked,
        inputs_missing=dependencies.missing(key),
        loading_seconds=(
            time.perf_counter() - entry.started if entry.state is ChunkState.LOADING else None
        ),
        error=entry.error if entry.state is ChunkState.FAILED else None,
    )


def count_ahead(
    heap: list[QueueItem], item: QueueItem, residency: Residency, scheduler: Scheduler
) -> int:
    """Distinct QUEUED chunks, other than `item`'s, whose live items sort before it.

    In a binary heap every item sorting before `item` has only such items
    above it, so the walk visits just them (stops at a cap).
    """
    ahead: set[ChunkKey] = set()
    stack = [0] if heap else []
    entries = residency.entries
    while stack and len(ahead) < _QUEUE_COUNT_LIMIT:
        index = stack.pop()
        node = heap[index]
        if not node < item:
            continue
        entry = entries.get(node.key)
        if (
            node.key != item.key
            and entry is not None
            and entry.state is ChunkState.QUEUED
            and not scheduler.is_stale(node)
        ):
            ahead.add(node.key)
        stack.extend(child for child in (2 * index + 1, 2 * index + 2) if child < len(heap))
    return len(ahead)
