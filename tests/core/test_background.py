"""Background work (overview, prefetch) has its own, smaller worker budget: it never takes a
worker, nor a store's connection, from a visible chunk (issue 24)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, ChunkState
from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.cache.schedule import background_budget
from napari_lazy_zarr.core.executors import ManualExecutor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core import ChunkKey

TIMEOUT = 30  # seconds; a bound on waits, never a measured time


class Gated(ArraySource):
    """An in-memory source whose reads block until the test opens its gate; counts reads
    in flight and the most ever in flight at once."""

    def __init__(self, data: np.ndarray[Any, Any], name: str) -> None:
        super().__init__(data, chunks=(4, 4), name=name)
        self.gate = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.in_flight = 0
        self.most = 0
        self.reads = 0

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        with self._changed:
            self.in_flight += 1
            self.reads += 1
            self.most = max(self.most, self.in_flight)
            self._changed.notify_all()
        try:
            assert self.gate.wait(TIMEOUT), "the test never opened the gate"
            return super().read_chunk(coords)
        finally:
            with self._changed:
                self.in_flight -= 1
                self._changed.notify_all()

    def wait_in_flight(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.in_flight >= count, TIMEOUT)


def _refs(source: ArraySource, count: int) -> list[ChunkRef]:
    columns = source.shape[1] // 4
    return [ChunkRef.of(source, (i // columns, i % columns)) for i in range(count)]


def _region(key: ChunkKey) -> tuple[slice, ...]:
    return tuple(slice(a, b) for a, b in zip(key.inclusive_min, key.exclusive_max, strict=True))


def _states(cache: ChunkCache, refs: Sequence[ChunkRef]) -> list[ChunkState]:
    return [cache.state(ref.key) for ref in refs]


def test_the_background_budget_is_a_quarter_of_concurrency_and_at_least_one() -> None:
    assert [background_budget(c) for c in (1, 3, 4, 8, 32)] == [1, 1, 1, 2, 8]


def test_overview_work_takes_only_its_budget_and_visible_chunks_do_not_queue_behind_it() -> None:
    """Real worker threads: the overview's reads hang; the visible view completes anyway."""
    data = np.arange(16 * 64, dtype=np.uint16).reshape(16, 64)
    overview = Gated(data, "overview")
    visible = Gated(data + 1, "visible")
    visible.gate.set()
    with ChunkCache(64 << 20, concurrency=8) as cache:
        budget = background_budget(cache.concurrency)
        background = _refs(overview, 64)
        cache.request(background, view="thumbnail", level=1, load_class=LoadClass.OVERVIEW)
        overview.wait_in_flight(budget)
        # Counted under the cache's lock when the work was queued: no more can start.
        assert cache.counters().in_flight == budget
        shown = _refs(visible, 32)
        request = cache.request(shown, view="view", level=0)
        request.done.result(timeout=TIMEOUT)  # not behind the hung overview reads
        for ref in shown:
            np.testing.assert_array_equal(cache.lookup(ref.key), (data + 1)[_region(ref.key)])
        assert overview.most == budget
        assert _states(cache, background).count(ChunkState.LOADING) == budget
        overview.gate.set()


def test_no_background_task_starts_while_a_visible_chunk_is_queued() -> None:
    """Real worker threads: visible reads hang with more visible chunks queued; the worker
    of the overview chunk that lands takes neither the next overview chunk nor a fifth
    visible one (visible work has `concurrency` workers; it retires)."""
    data = np.arange(16 * 64, dtype=np.uint16).reshape(16, 64)
    overview = Gated(data, "overview")
    visible = Gated(data + 1, "visible")
    with ChunkCache(64 << 20, concurrency=4) as cache:
        assert background_budget(cache.concurrency) == 1
        background = _refs(overview, 16)
        first = cache.request(
            background[:1], view="thumbnail-0", level=1, load_class=LoadClass.OVERVIEW
        )
        overview.wait_in_flight(1)
        cache.request(background[1:], view="thumbnail-1", level=1, load_class=LoadClass.OVERVIEW)
        shown = _refs(visible, 16)
        request = cache.request(shown, view="view", level=0)
        visible.wait_in_flight(4)  # every visible worker busy, 12 visible chunks queued
        overview.gate.set()
        # Done: its worker has recorded it and chosen its next chunk under the same lock.
        first.done.result(timeout=TIMEOUT)
        states = _states(cache, background)
        assert states.count(ChunkState.READY) == 1
        assert states.count(ChunkState.LOADING) == 0  # none started while visible waits
        assert overview.reads == 1
        assert visible.in_flight == 4
        visible.gate.set()
        request.done.result(timeout=TIMEOUT)
        # Visible work done: the overview fills in.
        rest = cache.request(
            background, view="thumbnail-1", level=1, load_class=LoadClass.OVERVIEW
        )
        rest.done.result(timeout=TIMEOUT)
        for ref in background:
            np.testing.assert_array_equal(cache.lookup(ref.key), data[_region(ref.key)])
        assert visible.most == 4
        assert overview.most == 1


@pytest.mark.parametrize("load_class", [LoadClass.OVERVIEW, LoadClass.PREFETCH])
def test_tasks_counted_for_background_work_stay_within_its_budget(
    load_class: LoadClass,
) -> None:
    """Stepped by hand: visible work waiting counts no task for background work; with no
    visible work, the background budget is counted, not `concurrency`."""
    manual = ManualExecutor()
    data = np.arange(16 * 64, dtype=np.uint8).reshape(16, 64)
    visible_source = ArraySource(data, chunks=(4, 4), name="v")
    background_source = ArraySource(data, chunks=(4, 4), name="b")
    background = _refs(background_source, 20)

    def ask_background(cache: ChunkCache) -> None:
        if load_class is LoadClass.PREFETCH:
            cache.request([], view="other", level=0, prefetch=background)
        else:
            cache.request(background, view="other", level=1, load_class=load_class)

    with ChunkCache(64 << 20, concurrency=8, executor=manual) as cache:
        scheduler = _scheduler(cache)
        visible = cache.request(_refs(visible_source, 3), view="view", level=0)
        ask_background(cache)
        assert scheduler.active_tasks == 3  # one per visible chunk, none for the background
        manual.run_all()
        assert visible.complete
        assert _states(cache, background).count(ChunkState.READY) == 20
    with ChunkCache(64 << 20, concurrency=8, executor=manual) as cache:
        scheduler = _scheduler(cache)
        ask_background(cache)
        assert scheduler.active_tasks == background_budget(8) == 2
        manual.run_all()
        for ref in background:
            np.testing.assert_array_equal(cache.lookup(ref.key), data[_region(ref.key)])


def _scheduler(cache: ChunkCache) -> Any:
    return cache._scheduler  # the invariant under test is the scheduler's count


class Checked(ArraySource):
    """Checks the scheduler's budget while each of its chunks is read (one thread: the
    test's, stepping a `ManualExecutor`)."""

    def __init__(self, data: np.ndarray[Any, Any], name: str, background: bool) -> None:
        super().__init__(data, chunks=(4, 4), name=name)
        self.background = background
        self.scheduler: Any = None
        self.budget = 0
        self.reads = 0

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        self.reads += 1
        scheduler = self.scheduler
        assert scheduler.background_tasks <= self.budget
        assert scheduler.visible_tasks + scheduler.background_tasks <= scheduler.active_tasks
        if self.background:
            assert scheduler.background_tasks == 1
            # No background read while a visible chunk is queued or loading.
            assert scheduler.queue.needed == scheduler.visible_tasks == 0
        return super().read_chunk(coords)


def test_chunks_ahead_of_a_walk_load_with_the_visible_budget_and_hold_background_back() -> None:
    """Stepped by hand: the planes ahead of playback (`ahead=`) are the frames shown next,
    visible work: they start `concurrency` tasks, not the background budget's, and the
    ring's prefetch waits until none is queued or loading (`Checked` asserts it)."""
    manual = ManualExecutor()
    data = np.arange(16 * 64, dtype=np.uint8).reshape(16, 64)
    ahead_source = Checked(data, "a", background=False)
    ring_source = Checked(data, "r", background=True)
    with ChunkCache(64 << 20, concurrency=8, executor=manual) as cache:
        scheduler = _scheduler(cache)
        for source in (ahead_source, ring_source):
            source.scheduler, source.budget = scheduler, background_budget(8)
        ahead, ring = _refs(ahead_source, 20), _refs(ring_source, 20)
        request = cache.request([], view="view", level=0, ahead=ahead, prefetch=ring)
        assert scheduler.active_tasks == 8 > background_budget(8)
        assert {cache.status(ref.key).load_class for ref in ahead} == {LoadClass.AHEAD}
        assert {cache.status(ref.key).load_class for ref in ring} == {LoadClass.PREFETCH}
        assert request.complete  # nothing pinned for what is ahead
        manual.run_all()
        assert (ahead_source.reads, ring_source.reads) == (20, 20)
        for ref in [*ahead, *ring]:
            np.testing.assert_array_equal(cache.lookup(ref.key), data[_region(ref.key)])


def test_chunks_ahead_load_in_the_order_given_not_centre_out() -> None:
    """The next frame whole before the one after: the planes ahead load in the order the
    controller gives (`lookahead_chunks`, nearest plane first), not by distance from the
    view's centre, which would take the centre chunk of every plane first."""
    order: list[tuple[int, ...]] = []

    class Recorded(ArraySource):
        def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
            order.append(coords)
            return super().read_chunk(coords)

    manual = ManualExecutor()
    data = np.arange(4 * 12 * 12, dtype=np.uint16).reshape(4, 12, 12)
    source = Recorded(data, chunks=(1, 4, 4), name="walk")
    ahead = [ChunkRef.of(source, (t, y, x)) for t in (1, 2, 3) for y in range(3) for x in range(3)]
    with ChunkCache(64 << 20, concurrency=1, executor=manual) as cache:
        cache.request([], view="view", level=0, center=(0.5, 6.0, 6.0), ahead=ahead)
        manual.run_all()
        assert order == [ref.coords for ref in ahead]
        for ref in ahead:
            np.testing.assert_array_equal(cache.lookup(ref.key), data[_region(ref.key)])


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("visible"), st.integers(1, 6)),
            st.tuples(st.just("background"), st.integers(1, 12)),
            st.tuples(st.just("run"), st.integers(1, 4)),
        ),
        min_size=1,
        max_size=30,
    ),
    concurrency=st.integers(1, 9),
)
def test_background_tasks_never_exceed_their_budget(
    steps: list[tuple[str, int]], concurrency: int
) -> None:
    """Any interleaving of visible and background requests with loads: background reads
    stay within the budget, none runs while a visible chunk is queued, and everything
    asked for completes with NumPy's pixels."""
    manual = ManualExecutor()
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    sources = {
        "visible": Checked(data, "v", background=False),
        "background": Checked(data, "b", background=True),
    }
    used = {"visible": 0, "background": 0}
    keys: list[ChunkKey] = []
    with ChunkCache(64 << 20, concurrency=concurrency, executor=manual) as cache:
        scheduler = _scheduler(cache)
        for source in sources.values():
            source.scheduler = scheduler
            source.budget = background_budget(concurrency)
        requests = []
        for kind, count in steps:
            if kind == "run":
                for _ in range(count):
                    manual.run_next()
                continue
            source = sources[kind]
            start = used[kind]
            used[kind] += count
            refs = [ChunkRef.of(source, (i // 16, i % 16)) for i in range(start, start + count)]
            keys.extend(ref.key for ref in refs)
            load_class = LoadClass.NEEDED if kind == "visible" else LoadClass.OVERVIEW
            requests.append(
                cache.request(refs, view=(kind, start), level=0, load_class=load_class)
            )
            assert len(manual) <= concurrency + background_budget(concurrency)
        manual.run_all()
        assert all(request.complete for request in requests)
        for key in keys:
            np.testing.assert_array_equal(cache.lookup(key), data[_region(key)])
        assert sources["visible"].reads + sources["background"].reads == len(keys)
        assert scheduler.background_tasks == scheduler.visible_tasks == 0
        assert scheduler.active_tasks == 0
