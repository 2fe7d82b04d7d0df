"""Dask chunk sources on real schedulers: dask's threaded one and a `distributed.LocalCluster`.

Pixels are checked against NumPy. Cancellation is observed where it happens
(the local scheduler's tasks, the cluster scheduler's task table), priorities
by the order tasks start on a cluster whose threads are held busy, failures
through a real `ChunkCache` (FAILED, then READY after `retry`), and a killed
worker by killing a worker process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core.cache import ChunkCache
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LoadCancelledError,
    LoadTimeoutError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.keys import ChunkRef
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.sources.composite import FunctionSource
from napari_lazy_zarr.core.sources.dask import (
    DaskRunner,
    DaskSource,
    coarsened_levels,
    resolve_client,
)
from napari_lazy_zarr.core.sources.protocol import CancellableSource
from napari_lazy_zarr.core.states import ChunkState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from distributed import Client

TIMEOUT = 30.0
META = np.empty((0, 0), dtype="i4")  # given, so dask never calls a task function to infer it

# Gates shared with tasks: the threaded cluster's workers run in this process.
GATE = threading.Event()
ENTERED = threading.Event()
STARTED: list[int] = []
CALLS: dict[str, int] = {}
CALLS_LOCK = threading.Lock()


def _count(name: str) -> None:
    with CALLS_LOCK:
        CALLS[name] = CALLS.get(name, 0) + 1


def gated(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A task that waits for the test to open `GATE` (bounded)."""
    ENTERED.set()
    GATE.wait(TIMEOUT)
    return block + 1


def after_gate(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    _count("after_gate")
    return block * 2


def tagged(block: np.ndarray[Any, Any], block_id: tuple[int, ...] | None = None) -> Any:
    """Records which block started (in start order), waiting at the gate first."""
    assert block_id is not None
    GATE.wait(TIMEOUT)
    with CALLS_LOCK:
        STARTED.append(block_id[0])
    return block


def fails_once(block: np.ndarray[Any, Any], block_id: tuple[int, ...] | None = None) -> Any:
    """Raises on its first call for block (1, 0), then computes."""
    _count(f"fails_once{block_id}")
    if block_id == (1, 0) and CALLS[f"fails_once{block_id}"] == 1:
        raise ValueError("sensor saturated")
    return block - 1


def dies_once(block: np.ndarray[Any, Any], marker: str) -> np.ndarray[Any, Any]:
    """First run: leave `marker` and hang (the test kills this worker); later runs compute."""
    if not os.path.exists(marker):
        with open(marker, "w") as handle:
            handle.write(str(os.getpid()))
        threading.Event().wait(TIMEOUT)  # a long computation, cut short by the kill
    return block + 3


def _until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    """Wait (bounded) for a condition another thread or process makes true."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.02)
    return True


@pytest.fixture(autouse=True)
def _reset_gates() -> Iterator[None]:
    GATE.clear()
    ENTERED.clear()
    STARTED.clear()
    CALLS.clear()
    yield
    GATE.set()  # never leave a task waiting


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """One small threaded cluster on 127.0.0.1 for the module; no thread left after."""
    from distributed import Client, LocalCluster

    before = {t.ident for t in threading.enumerate()}
    with (
        # Tasks stay queued on the scheduler, where priorities order them, until a
        # thread is free (1.1 by default sends one more ahead to the worker).
        dask.config.set({"distributed.scheduler.worker-saturation": 1.0}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address=":0",  # None still binds 8787 here; another cluster may hold it
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
    leftover = [
        t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon
    ]
    assert not leftover, f"threads left by the cluster: {leftover}"


def _scheduler_keys(client: Client) -> set[str]:
    def keys(dask_scheduler: Any) -> list[str]:
        return [str(k) for k in dask_scheduler.tasks]

    return set(client.run_on_scheduler(keys))


def _our_threads() -> list[threading.Thread]:
    """Our dask threads still at work: the pool's parked workers end once trimmed."""
    from napari_lazy_zarr.core.executors import worker_pool

    worker_pool().trim()
    ours = [t for t in threading.enumerate() if t.name.startswith("lazy-zarr-dask")]
    for thread in ours:
        thread.join(timeout=TIMEOUT)
    return [t for t in ours if t.is_alive()]


# -- local scheduler ----------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    chunks=st.tuples(st.integers(1, 16), st.integers(1, 16)),
    irregular=st.booleans(),
)
def test_local_pixels_equal_numpy(
    shape: tuple[int, int], chunks: tuple[int, int], irregular: bool
) -> None:
    data = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    array = da.from_array(data, chunks=chunks)
    if irregular and shape[0] > 2:
        array = array.rechunk(((1, shape[0] - 1), array.chunks[1]))
    expected = np.sqrt(data) + 2 * data[::-1]
    graph = np.sqrt(array) + 2 * array[::-1]  # each block needs another block's input
    with (
        DaskSource(graph) as source,
        ChunkCache(8 << 20, concurrency=3) as cache,
    ):
        assert source.load_reason == "computing"
        assert isinstance(source, CancellableSource)
        assert source.shape == shape
        result = ChunkedArray(source, cache)[...].result(timeout=TIMEOUT)
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    assert not _our_threads()


def test_local_cancel_starts_no_further_task() -> None:
    """Locally a running task cannot be stopped, but the block's next task never starts."""
    array = (
        da.zeros((4, 4), chunks=2, dtype="i4")
        .map_blocks(gated, meta=META)
        .map_blocks(after_gate, meta=META)
    )
    with DaskSource(array) as source, ThreadPoolExecutor(1) as pool:
        read = pool.submit(source.read_chunk, (0, 1))
        assert ENTERED.wait(TIMEOUT)
        assert source.in_flight == 1
        source.cancel_load((0, 1))
        GATE.set()
        with pytest.raises(LoadCancelledError, match=r"chunk \(0, 1\)"):
            read.result(timeout=TIMEOUT)
        assert CALLS.get("after_gate", 0) == 0
        assert source.runner.cancelled == 1
        # The chunk computes when asked again.
        np.testing.assert_array_equal(source.read_chunk((0, 1)), np.full((2, 2), 2))
    assert not _our_threads()


def test_local_task_error_names_chunk_and_task() -> None:
    array = da.ones((4, 4), chunks=2, dtype="i4").map_blocks(fails_once, meta=META)
    with DaskSource(array, name="calib") as source:
        with pytest.raises(ChunkReadError) as failed:
            source.read_chunk((1, 0))
        message = str(failed.value)
        assert "dask(calib): chunk (1, 0) [2:4, 0:2]" in message
        assert array.name in message
        assert "sensor saturated" in message
        assert isinstance(failed.value.__cause__, ValueError)
        np.testing.assert_array_equal(source.read_chunk((1, 0)), np.zeros((2, 2)))


COMPUTED: list[tuple[int, ...]] = []


def located(block: np.ndarray[Any, Any], block_info: Any = None) -> np.ndarray[Any, Any]:
    """Records which block was computed."""
    if block_info is not None:
        with CALLS_LOCK:
            COMPUTED.append(tuple(block_info[None]["chunk-location"]))
    return block * 3


def interrupts_once(block: np.ndarray[Any, Any], kind: str) -> np.ndarray[Any, Any]:
    """Raises `KeyboardInterrupt` or `SystemExit` on its first call, then computes."""
    _count(kind)
    if CALLS[kind] == 1:
        raise KeyboardInterrupt("stop") if kind == "interrupt" else SystemExit(3)
    return block + 5


@pytest.mark.parametrize("kind", ["interrupt", "exit"])
def test_a_task_raising_an_interrupt_fails_its_chunk(kind: str) -> None:
    """A dask task's `KeyboardInterrupt`/`SystemExit` (a pool thread's: meant for nobody)
    fails its chunk with a `ChunkReadError` naming it; nothing stays LOADING."""
    array = da.zeros((2, 2), chunks=2, dtype="i4").map_blocks(interrupts_once, kind, meta=META)
    with DaskSource(array, name=kind) as source, ChunkCache(1 << 20, concurrency=1) as cache:
        ref = ChunkRef.of(source, (0, 0))
        cache.request([ref]).done.result(timeout=TIMEOUT)
        error = cache.error(ref.key)
        assert isinstance(error, ChunkReadError)
        assert ("KeyboardInterrupt" if kind == "interrupt" else "SystemExit") in str(error)
        assert cache.statistics.states[ChunkState.LOADING] == 0
        assert cache.retry(ref.key)
        assert _until(lambda: cache.state(ref.key) is ChunkState.READY)
        np.testing.assert_array_equal(cache.lookup(ref.key), np.full((2, 2), 5))
    assert not _our_threads()


def test_local_timeout_fails_a_hung_task() -> None:
    """The local scheduler's wait is bounded too: a task that never ends times out."""
    array = da.zeros((2, 2), chunks=2, dtype="i4").map_blocks(gated, meta=META)
    with DaskRunner(timeout=0.3) as runner:
        source = DaskSource(array, runner=runner)
        started = time.monotonic()
        with pytest.raises(LoadTimeoutError, match=r"not computed within 0\.3 s"):
            source.read_chunk((0, 0))
        assert time.monotonic() - started < 10
        GATE.set()  # the abandoned task ends; the runner's close joins its threads
    assert not _our_threads()


_EXIT_SCRIPT = """
import sys, threading, time
import dask.array as da
import numpy as np
from napari_lazy_zarr.core.cache import ChunkCache
from napari_lazy_zarr.core.keys import ChunkRef
from napari_lazy_zarr.core.sources.dask import DaskSource

entered = threading.Event()

def hang(block):
    entered.set()
    time.sleep(600)  # a task still running when the program ends
    return block

array = da.zeros((4, 4), chunks=2, dtype="i4").map_blocks(hang, meta=np.empty((0, 0), "i4"))
source = DaskSource(array)
cache = ChunkCache(1 << 20, concurrency=2)
cache.request([ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (1, 1))])
assert entered.wait(60)
print("in flight", flush=True)
"""


def test_the_interpreter_exits_with_a_dask_task_in_flight() -> None:
    import subprocess
    import sys

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "in flight" in done.stdout
    assert elapsed < 60, f"the interpreter waited {elapsed:.1f} s for a running dask task"


@pytest.mark.parametrize("ring", [None, 1])
def test_a_view_computes_no_block_beyond_it_unless_the_source_asks(ring: int | None) -> None:
    """A neighbouring block is a whole computation (and a local one cannot be stopped once
    running): by default a view of a dask array computes its own blocks only."""
    from napari_lazy_zarr.core.executors import InlineExecutor
    from napari_lazy_zarr.core.viewport import ViewController
    from tests.viewing import read_settled

    COMPUTED.clear()
    data = np.arange(12 * 12, dtype="i4").reshape(12, 12)
    array = da.from_array(data, chunks=4).map_blocks(located, meta=META)
    source = DaskSource(array) if ring is None else DaskSource(array, prefetch_ring=ring)
    with source, ChunkCache(8 << 20, executor=InlineExecutor()) as cache:
        controller = ViewController([source], cache, dispatch=InlineExecutor())
        try:
            view = read_settled(controller, 0, controller.arrays[0][4:8, 4:8])
            np.testing.assert_array_equal(view, 3 * data[4:8, 4:8])
        finally:
            controller.close()
    expected = {(1, 1)} if ring is None else {(r, c) for r in range(3) for c in range(3)}
    assert set(COMPUTED) == expected
    assert len(COMPUTED) == len(expected)


def test_coarsened_levels_match_numpy() -> None:
    data = np.arange(37 * 50, dtype=np.uint16).reshape(37, 50)
    levels = coarsened_levels(da.from_array(data, chunks=(10, 16)), smallest=12)
    assert [lv.shape for lv in levels] == [(37, 50), (18, 25), (9, 12)]
    assert all(lv.dtype == data.dtype for lv in levels)
    expected = data[:36, :50].reshape(18, 2, 25, 2).mean(axis=(1, 3))
    with DaskSource(levels[1]) as source, ChunkCache(8 << 20, concurrency=2) as cache:
        assert source.grid[0].chunk_size(0) == 10  # rechunked back to the base's chunk
        got = ChunkedArray(source, cache)[...].result(timeout=TIMEOUT)
    np.testing.assert_array_equal(got, np.around(expected).astype(np.uint16))
    strided = coarsened_levels(da.from_array(data, chunks=8), method="stride", smallest=20)
    np.testing.assert_array_equal(strided[1].compute(), data[::2, ::2])


def test_bad_client_and_unknown_chunks_are_clear() -> None:
    with pytest.raises(ValueError, match="'active'"):
        resolve_client("cluster")  # type: ignore[arg-type]
    array = da.ones(10, chunks=5)
    with pytest.raises(UnsupportedDataError, match="unknown chunk sizes"):
        DaskSource(array[array > 0])


# -- a distributed cluster ----------------------------------------------------


def test_cluster_pixels_equal_numpy(client: Client) -> None:
    data = np.arange(60 * 70, dtype=np.float64).reshape(60, 70)
    graph = da.from_array(data, chunks=(16, 25)).map_overlap(
        lambda b: b * 2 - np.roll(b, 1, axis=0), depth=1, boundary="reflect"
    )
    expected = graph.compute(scheduler="sync")
    with (
        DaskRunner(client) as runner,
        ChunkCache(8 << 20, concurrency=4) as cache,
    ):
        source = DaskSource(graph, runner=runner)
        np.testing.assert_array_equal(
            ChunkedArray(source, cache)[5:50, 3:66].result(timeout=TIMEOUT), expected[5:50, 3:66]
        )
        assert runner.submitted > 0
        assert runner.cancelled == 0
    function = FunctionSource(
        _ramp, shape=(30, 40), dtype="i8", chunks=(8, 16), client=client, timeout=TIMEOUT
    )
    assert function.load_reason == "computing"
    with ChunkCache(8 << 20, concurrency=4) as cache:
        got = ChunkedArray(function, cache)[...].result(timeout=TIMEOUT)
    np.testing.assert_array_equal(got, np.add.outer(np.arange(30) * 100, np.arange(40)))
    function.close()


def _ramp(box: Any) -> np.ndarray[Any, Any]:
    rows, cols = (
        np.arange(a, b) for a, b in zip(box.inclusive_min, box.exclusive_max, strict=False)
    )
    return np.add.outer(rows * 100, cols)


def test_cluster_cancel_releases_tasks_on_the_scheduler(client: Client) -> None:
    array = (
        da.zeros((4, 4), chunks=2, dtype="i4")
        .map_blocks(gated, meta=META)
        .map_blocks(after_gate, meta=META)
    )
    with DaskRunner(client, timeout=TIMEOUT) as runner, ThreadPoolExecutor(1) as pool:
        source = DaskSource(array, runner=runner)
        read = pool.submit(source.read_chunk, (1, 1))
        assert ENTERED.wait(TIMEOUT)
        key = str(source.block_key((1, 1)))
        assert key in _scheduler_keys(client)
        source.cancel_load((1, 1))
        with pytest.raises(LoadCancelledError, match=r"chunk \(1, 1\)"):
            read.result(timeout=5.0)  # promptly: the running task is still held at the gate
        # The scheduler forgets the block and the gated task under it.
        assert _until(lambda: not _scheduler_keys(client) & {key})
        GATE.set()
        assert _until(lambda: not _scheduler_keys(client))
        assert CALLS.get("after_gate", 0) == 0
        assert runner.cancelled == 1


def test_newer_views_outrank_older_leftovers_on_the_cluster(client: Client) -> None:
    """Priority rule: after a view is superseded (a cancel in flight), chunks asked for
    next run before the older chunks still queued on the scheduler."""
    array = da.zeros((12, 2), chunks=(1, 2), dtype="i4").map_blocks(tagged, meta=META)
    with DaskRunner(client, timeout=TIMEOUT) as runner, ThreadPoolExecutor(12) as pool:
        source = DaskSource(array, runner=runner)
        reads: dict[int, Any] = {}

        def read(row: int) -> None:  # one at a time, so the scheduler sees them in this order
            reads[row] = pool.submit(source.read_chunk, (row, 0))
            key = str(source.block_key((row, 0)))
            assert _until(lambda: key in _scheduler_keys(client))

        # The first rows hold both worker threads at the gate; the rest wait.
        for row in range(8):
            read(row)
        source.cancel_load((7, 0))  # the view that wanted row 7 moved on: a new epoch
        with pytest.raises(LoadCancelledError):
            reads.pop(7).result(timeout=5.0)
        for row in (8, 9):
            read(row)
        queued = _queued_rows(client)
        GATE.set()
        for future in reads.values():
            future.result(timeout=TIMEOUT)
    older = queued - {8, 9}
    assert older, queued  # older rows were still held by the scheduler...
    assert {8, 9} <= queued, queued  # ...as were the newer ones
    assert max(STARTED.index(r) for r in (8, 9)) < min(STARTED.index(r) for r in older), STARTED


def _queued_rows(client: Client) -> set[int]:
    """Rows whose first task is still queued on the scheduler (not yet sent to a worker)."""

    def rows(dask_scheduler: Any) -> list[int]:
        return [
            int(ts.key[1])
            for ts in dask_scheduler.tasks.values()
            if ts.key[0].startswith("zeros") and ts.state == "queued"
        ]

    return set(client.run_on_scheduler(rows))


def test_visible_chunks_complete_before_prefetch(client: Client) -> None:
    array = da.zeros((12, 2), chunks=(1, 2), dtype="i4").map_blocks(tagged, meta=META)
    source = DaskSource(array, runner=DaskRunner(client, timeout=TIMEOUT))
    GATE.set()
    visible = [ChunkRef.of(source, (row, 0)) for row in range(4, 8)]
    prefetch = [ChunkRef.of(source, (row, 0)) for row in (*range(4), *range(8, 12))]
    with ChunkCache(8 << 20, concurrency=4) as cache:
        landed: list[int] = []
        cache.state_changed.connect(
            lambda events: landed.extend(
                e.key.inclusive_min[0] for e in events if e.current is ChunkState.READY
            )
        )
        with cache.request(visible, view="v", prefetch=prefetch) as request:
            request.done.result(timeout=TIMEOUT)
            assert _until(lambda: len(landed) == 12)
    assert set(landed[:4]) == {4, 5, 6, 7}, landed
    source.close()


def test_task_error_fails_then_retry_succeeds(client: Client) -> None:
    array = da.ones((4, 4), chunks=2, dtype="i4").map_blocks(fails_once, meta=META)
    source = DaskSource(array, runner=DaskRunner(client, timeout=TIMEOUT), name="calib")
    key = ChunkRef.of(source, (1, 0)).key
    with ChunkCache(8 << 20, concurrency=2) as cache:
        with cache.request([ChunkRef.of(source, (1, 0))]) as request:
            request.done.result(timeout=TIMEOUT)
        assert cache.state(key) is ChunkState.FAILED
        error = cache.error(key)
        assert isinstance(error, ChunkReadError)
        assert "chunk (1, 0)" in str(error)
        assert array.name in str(error)
        assert "sensor saturated" in str(error)
        assert cache.retry(key)
        with cache.request([ChunkRef.of(source, (1, 0))]) as request:
            request.done.result(timeout=TIMEOUT)
        assert cache.state(key) is ChunkState.READY, cache.error(key)
        np.testing.assert_array_equal(cache.lookup(key), np.zeros((2, 2)))
    source.close()


def test_timeout_fails_and_cancels(client: Client) -> None:
    array = da.zeros((2, 2), chunks=2, dtype="i4").map_blocks(gated, meta=META)
    with DaskRunner(client, timeout=0.3) as runner:
        source = DaskSource(array, runner=runner)
        with pytest.raises(LoadTimeoutError, match=r"not computed within 0\.3 s"):
            source.read_chunk((0, 0))
    GATE.set()
    assert _until(lambda: not _scheduler_keys(client))


def test_superseded_view_cancels_its_computation(client: Client) -> None:
    """End to end through the cache: a LOADING chunk nobody wants any more is cancelled
    on the cluster and goes back to QUEUED (needs the cache's `cancel_load` hook)."""
    array = da.zeros((4, 4), chunks=2, dtype="i4").map_blocks(gated, meta=META)
    source = DaskSource(array, runner=DaskRunner(client, timeout=TIMEOUT))
    first, other = ChunkRef.of(source, (0, 0)), ChunkRef.of(source, (1, 1))
    with ChunkCache(8 << 20, concurrency=2) as cache:
        cache.request([first], view="v")
        assert ENTERED.wait(TIMEOUT)
        assert _until(lambda: cache.state(first.key) is ChunkState.LOADING)
        loading = [e for e in cache.events() if e.current is ChunkState.LOADING]
        assert loading[-1].reason == "computing"
        cache.request([other], view="v")  # the view moved on
        assert _until(lambda: cache.state(first.key) is ChunkState.QUEUED)
        assert _until(lambda: str(source.block_key((0, 0))) not in _scheduler_keys(client))
        assert source.runner.cancelled == 1
        GATE.set()
        cache.release_view("v")
    source.close()


# -- a killed worker (process cluster) ------------------------------------------


def test_killed_worker_fails_then_retry_succeeds(tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    marker = str(tmp_path / "started")
    array = da.zeros((4, 4), chunks=2, dtype="i4").map_blocks(
        functools.partial(dies_once, marker=marker), meta=META
    )
    # No silent recomputation: the first worker death fails the task (KilledWorker).
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",  # None still binds 8787 here; another cluster may hold it
        ) as cluster,
        Client(cluster) as client,
    ):
        source = DaskSource(array, runner=DaskRunner(client, timeout=TIMEOUT))
        ref = ChunkRef.of(source, (1, 1))
        with ChunkCache(8 << 20, concurrency=1) as cache:
            request = cache.request([ref])
            assert _until(lambda: os.path.exists(marker) and os.path.getsize(marker) > 0)
            with open(marker) as handle:
                os.kill(int(handle.read()), signal.SIGKILL)
            request.done.result(timeout=TIMEOUT)
            assert cache.state(ref.key) is ChunkState.FAILED
            error = str(cache.error(ref.key))
            assert "chunk (1, 1)" in error, error
            assert array.name in error, error
            request.release()
            client.wait_for_workers(1, timeout=TIMEOUT)
            assert cache.retry(ref.key)
            with cache.request([ref]) as again:
                again.done.result(timeout=TIMEOUT)
            np.testing.assert_array_equal(cache.lookup(ref.key), np.full((2, 2), 3))
        source.close()
    assert _until(lambda: not _new_workers(children_before)), _new_workers(children_before)


def _new_workers(before: set[int]) -> list[str]:
    """Processes started since `before` other than multiprocessing's resource tracker
    (started once per interpreter, by design)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            line = " ".join(child.cmdline())
            if child.pid not in before and "resource_tracker" not in line:
                found.append(line)
    return found
