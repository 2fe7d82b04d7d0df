"""The load queue's order (`PriorityQueue`) against a sort of what was pushed: class, cost,
level, distance, push number, then the order of the pushes; visible work before background
work; an input queued in a derived chunk's place sharing its number; demoted items last."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core import ChunkKey
from napari_lazy_zarr.core.cache.schedule import LoadClass, PriorityQueue, QueueItem

_PUSH = st.tuples(
    st.sampled_from([LoadClass.NEEDED, LoadClass.AHEAD, LoadClass.PREFETCH]),
    st.sampled_from([1, 2, 64]),  # cost
    st.integers(0, 1),  # level
    st.sampled_from([0.0, 2.5]),  # distance: few values, so ties reach the push number
    st.sampled_from(["new", "input", "demoted"]),
    st.integers(0, 99),  # which earlier item an input is queued for
)


def _order(item: QueueItem) -> tuple[int, int, int, float, int]:
    return (item.load_class, item.cost_rank, item.level_rank, item.distance, item.sequence)


@settings(max_examples=200, deadline=None)
@given(pushes=st.lists(_PUSH, max_size=40), pops_between=st.integers(0, 5))
def test_items_pop_in_the_documented_order(
    pushes: list[tuple[LoadClass, int, int, float, str, int]], pops_between: int
) -> None:
    queue = PriorityQueue()
    pushed: list[QueueItem] = []  # in push order
    popped: list[QueueItem] = []
    for index, (load_class, cost, level, distance, how, source) in enumerate(pushes):
        key = ChunkKey("s", (index,), (index + 1,))
        if how == "input" and pushed:  # in the place of an earlier item: its number too
            earlier = pushed[source % len(pushed)]
            queue.push_item(earlier, key=key)
            pushed.append(_with_key(earlier, key))
        else:
            item = queue.make(
                key,
                load_class=load_class,
                level=level,
                distance=distance,
                view="v",
                generation=0,
                cost=cost,
            )
            if how == "demoted":
                queue.push_demoted(item)
                item = _demoted(item)
            else:
                queue.push_item(item)
            pushed.append(item)
        if pops_between and index % pops_between == 0:
            front = queue.pop()
            assert front is not None
            popped.append(front)
    assert len(queue) == len(pushed) - len(popped)
    assert sorted(queue.items(), key=lambda i: i.key.inclusive_min) == sorted(
        [i for i in pushed if i.key not in {p.key for p in popped}],
        key=lambda i: i.key.inclusive_min,
    )
    rest: list[QueueItem] = []
    while (item := queue.pop()) is not None:
        rest.append(item)
    assert queue.pop() is None
    # What was left pops sorted by the order fields, ties in push order.
    position = {item.key: index for index, item in enumerate(pushed)}
    assert rest == sorted(rest, key=lambda i: (_order(i), position[i.key]))
    assert all(
        not (a.load_class > LoadClass.AHEAD and b.load_class <= LoadClass.AHEAD)
        for a, b in itertools.pairwise(rest)
    )


def _with_key(item: QueueItem, key: ChunkKey) -> QueueItem:
    return replace(item, key=key)


def _demoted(item: QueueItem) -> QueueItem:
    return replace(item, load_class=int(LoadClass.STALE))


def test_background_only_pops_the_background_work() -> None:
    queue = PriorityQueue()
    for index, load_class in enumerate([LoadClass.PREFETCH, LoadClass.NEEDED, LoadClass.OVERVIEW]):
        queue.push_item(
            queue.make(
                ChunkKey("s", (index,), (index + 1,)),
                load_class=load_class,
                level=0,
                distance=0.0,
                view=None,
                generation=0,
            )
        )
    assert queue.needed == 1
    assert queue.background == 2
    first = queue.pop(background_only=True)
    assert first is not None
    assert first.load_class == LoadClass.OVERVIEW
    visible = queue.pop()
    assert visible is not None
    assert visible.load_class == LoadClass.NEEDED
    last = queue.pop()
    assert last is not None
    assert last.load_class == LoadClass.PREFETCH
    assert queue.pop() is None
    assert queue.pop(background_only=True) is None
