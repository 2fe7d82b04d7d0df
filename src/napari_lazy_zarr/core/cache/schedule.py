"""Load scheduling: the priority queue the cache's workers pull from.

The queue is not thread-safe by itself: `ChunkCache` owns it and touches it
only while holding its one lock.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TYPE_CHECKING

from napari_lazy_zarr.core.slots import slot_init

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from napari_lazy_zarr.core.keys import ChunkKey

__all__ = [
    "LoadClass",
    "PriorityQueue",
    "QueueItem",
    "background_budget",
    "cost_rank",
    "is_background",
]


class LoadClass(IntEnum):
    """Coarse priority classes, most urgent first."""

    NEEDED = 0
    """A chunk the current view needs."""
    AHEAD = 1
    """A chunk of a plane ahead of a walk through z or t (napari playing its dims, or a
    user stepping): the frames about to be shown. Visible work, with its budget: at 10
    frames a second over 100 ms, the background budget (8 of 32 loads) showed 3% of
    the frames exact where the revision before that budget showed 71% (issue 24)."""
    OVERVIEW = 2
    """Overview work: a chunk a view wants but does not display at its level (napari's
    thumbnail of the coarsest level), and every input of such a chunk."""
    PREFETCH = 3
    """A neighbour of the current view (ring, adjacent planes)."""
    STALE = 4
    """Queued for a view the user has since left (superseded by a newer request)."""


def is_background(load_class: int) -> bool:
    """Whether a load of `load_class` is background work: anything but what the view
    shows (`LoadClass.NEEDED`) or is about to show (`LoadClass.AHEAD`): overview,
    prefetch, superseded work.

    Examples
    --------
    >>> [is_background(c) for c in (LoadClass.NEEDED, LoadClass.AHEAD, LoadClass.PREFETCH)]
    [False, False, True]
    """
    return load_class > LoadClass.AHEAD


def background_budget(concurrency: int) -> int:
    """How many worker tasks may load background work (`LoadClass.OVERVIEW` and below) at
    once, while no visible chunk waits; while one is QUEUED or LOADING, none starts.

    A separate budget beside `concurrency`, which the visible chunks always have whole:
    a quarter of it, at least one (measured, issue 24: an overview taking every worker
    of a 200 ms HTTP store made the pan step 1.3-1.7x slower).

    Examples
    --------
    >>> [background_budget(c) for c in (1, 2, 8, 32)]
    [1, 1, 2, 8]
    """
    return max(1, int(concurrency) // 4)


def cost_rank(cost: int) -> int:
    """The order of magnitude of a load's cost in stored chunk reads: ceil(log2(cost)).

    A stored chunk (cost 1) ranks 0, as does a derived chunk built from one
    stored chunk; a chunk built from 64 stored chunks ranks 6.

    Examples
    --------
    >>> [cost_rank(c) for c in (1, 2, 3, 4, 5, 64)]
    [0, 1, 2, 2, 3, 6]
    """
    return max(0, int(cost) - 1).bit_length()


@slot_init  # one per chunk queued
@dataclass(frozen=True, slots=True, order=True)
class QueueItem:
    """One queued load. Ordered by its first five fields; the rest ride along."""

    load_class: int
    cost_rank: int
    """`cost_rank` of the stored chunk reads behind this load (see `PriorityQueue`)."""
    level_rank: int
    """Minus the pyramid level: coarser levels sort first."""
    distance: float
    """Squared distance of the chunk's centre from the view centre; for `LoadClass.AHEAD`,
    the chunk's place in the order the request gave (the next frame first)."""
    sequence: int
    """Push order; an input queued for a derived chunk shares that chunk's number."""
    key: ChunkKey = field(compare=False)
    view: Hashable = field(compare=False)
    generation: int = field(compare=False)


type _Entry = tuple[int, int, int, float, int, int, QueueItem]


class PriorityQueue:
    """Queued chunk loads, most urgent first.

    The priority rule, field by field (`QueueItem`'s order):

    1. **Class**: `LoadClass.NEEDED` before `AHEAD` before `OVERVIEW` before
       `PREFETCH` before `STALE`. Overview work (a thumbnail of a virtual level, whose chunks each
       cost many stored reads) never delays a chunk the displayed view needs.
    2. **Cost**: within a class, cheaper loads first, by `cost_rank` (the order of
       magnitude of the stored chunk reads a load stands for). A stored chunk costs
       1; a virtual-level chunk costs the stored chunks under it. Among equally
       cheap loads the next two rules decide; an expensive derived chunk never goes
       before cheap stored chunks merely because it is coarser.
    3. **Level**: coarser levels first (a cheap coarse chunk covers more screen).
    4. **Distance** from the view centre, nearest first (what is ahead: in the order
       given); then push order.

    The inputs a derived chunk waits for inherit its whole item (class, cost,
    level, distance, push order, view and generation): work done on behalf of
    an expensive or overview chunk stays in that chunk's place, and a chunk's
    inputs go before those of chunks queued after it (so it completes early).

    Superseding is lazy: when an item whose view has moved on to a newer
    generation reaches the front, the cache drops it (or, if it fetches
    superseded work, demotes it below all current work). Duplicates are
    allowed; the cache skips items whose chunk is no longer QUEUED.

    Examples
    --------
    >>> from napari_lazy_zarr.core.keys import ChunkKey
    >>> queue = PriorityQueue()
    >>> def push(name, load_class, cost, level):
    ...     queue.push_item(queue.make(ChunkKey(name, (0,), (1,)), load_class=load_class,
    ...                                cost=cost, level=level, distance=0.0, view=None,
    ...                                generation=0))
    >>> push("thumbnail", LoadClass.OVERVIEW, 1, 5)
    >>> push("virtual", LoadClass.NEEDED, 64, 5)
    >>> push("stored-fine", LoadClass.NEEDED, 1, 0)
    >>> push("stored-coarse", LoadClass.NEEDED, 1, 1)
    >>> [queue.pop().key.source for _ in range(len(queue))]
    ['stored-coarse', 'stored-fine', 'virtual', 'thumbnail']
    """

    def __init__(self) -> None:
        # Two heaps, one order: visible work (NEEDED, AHEAD) always sorts before background
        # work (every other class), so the front is the visible heap's unless it is empty, and
        # a worker on the background budget pops the background heap alone.
        # Heap entries are `_entry` tuples: compared in C, field by field, where an ordered
        # dataclass's `__lt__` ran Python (5.3 comparisons a chunk loaded, 161 bytecodes).
        self._visible: list[_Entry] = []
        self._background: list[_Entry] = []
        self._sequence = itertools.count()
        self._ties = itertools.count()

    def __len__(self) -> int:
        return len(self._visible) + len(self._background)

    @property
    def needed(self) -> int:
        """How many queued items are visible work (`LoadClass.NEEDED` and `AHEAD`; an
        upper bound: duplicates and superseded items count until popped)."""
        return len(self._visible)

    @property
    def background(self) -> int:
        """How many queued items are background work (every class after AHEAD)."""
        return len(self._background)

    def make(
        self,
        key: ChunkKey,
        *,
        load_class: LoadClass,
        level: int,
        distance: float,
        view: Hashable,
        generation: int,
        cost: int = 1,
    ) -> QueueItem:
        """A new item for a load of `key` (numbered in push order), not queued yet."""
        return QueueItem(
            int(load_class),
            cost_rank(cost),
            -level,
            distance,
            next(self._sequence),
            key,
            view,
            generation,
        )

    def push_item(self, item: QueueItem, key: ChunkKey | None = None) -> None:
        """Queue `item` again as it is, or for `key` in its place (an input inheriting it)."""
        heap = self._background if is_background(item.load_class) else self._visible
        heapq.heappush(heap, self._entry(item if key is None else replace(item, key=key)))

    def _entry(self, item: QueueItem) -> _Entry:
        """`item` as a heap entry: its order fields, then the push order among equal ones (an
        input shares its derived chunk's `sequence`), so items themselves are never compared."""
        return (
            item.load_class,
            item.cost_rank,
            item.level_rank,
            item.distance,
            item.sequence,
            next(self._ties),
            item,
        )

    def pop(self, *, background_only: bool = False) -> QueueItem | None:
        """The most urgent item (of background work alone with `background_only`), or None
        when there is none."""
        heap = self._visible if self._visible and not background_only else self._background
        return heapq.heappop(heap)[-1] if heap else None

    @staticmethod
    def is_stale(item: QueueItem, current_generation: Callable[[Hashable], int | None]) -> bool:
        """Whether `item` was queued for a view that has since moved on to a newer generation.

        An item already demoted to `LoadClass.STALE` is not stale again: it waited its
        turn below all current work and loads now.
        """
        if item.load_class >= LoadClass.STALE or item.view is None:
            return False
        current = current_generation(item.view)
        return current is not None and current != item.generation

    def push_demoted(self, item: QueueItem) -> None:
        """Queue `item` again below all current work."""
        heapq.heappush(
            self._background, self._entry(replace(item, load_class=int(LoadClass.STALE)))
        )

    def items(self) -> list[QueueItem]:
        """The queued items, visible work first, each part in heap order (a copy, for
        inspection)."""
        return [entry[-1] for entry in (*self._visible, *self._background)]

    def clear(self) -> None:
        self._visible.clear()
        self._background.clear()
