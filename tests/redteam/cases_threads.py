"""Every load finishes, workers of dropped arrays go, bookkeeping is bounded (issue 22).

Thread starts that fail (then recover), dask tasks raising `KeyboardInterrupt` or
`SystemExit`, an interpreter ending with a dask task in flight, 500 arrays opened,
read and dropped without `close()`, 131,072 chunks touched under a 64 KiB limit, and
30 open/read/remove cycles of a "layer" on one cache.

A thread start failure cannot be provoked safely on a shared machine (RLIMIT_NPROC
counts every process of the user), so that case patches a `threading.Thread` whose
`start` raises as the interpreter's does (``RuntimeError: can't start new thread``)
into its own forked child.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.redteam.cases_lifecycle import exits_promptly
from tests.redteam.harness import Case, Context, Finding, Outcome
from tests.redteam.stores import ramp, zarr_array

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

THREADS = "threads"
BOOKKEEPING = "bookkeeping"
SHAPE, CHUNKS = (64, 64), (16, 16)
OK: frozenset[Outcome] = frozenset({"ok"})
_FINISH = "every load finishes: "  # the ids' prefixes (`pytest -k "finishes or bounded"`)
_BOUNDED = "bookkeeping bounded: "
THREAD_SLACK = 16  # threads 500 dropped arrays may leave above the count before them


# -- thread starts that fail -------------------------------------------------------------


class _NoThreads(threading.Thread):
    def start(self) -> None:
        raise RuntimeError("can't start new thread")


def _thread_start_fails(context: Context) -> str:
    """No thread can start: the read fails at once with a clear error; once threads can
    start again, the same read succeeds."""
    from napari_lazy_zarr.core import LazyZarrError, executors

    expected = ramp(SHAPE)
    zarr_array(context.root / "a.zarr", expected, CHUNKS)
    cache = context.cache(concurrency=2)
    array = context.open(context.root / "a.zarr", cache=cache)
    context.begin()
    original = threading.Thread
    executors._pool = executors.WorkerPool()  # no idle thread to reuse
    threading.Thread = _NoThreads  # type: ignore[misc]
    try:
        started = time.perf_counter()
        try:
            array[...].result(timeout=context.wait / 2)
        except LazyZarrError as error:
            if "can't start new thread" not in str(error):
                raise Finding(
                    "raw-exception", f"the error does not name the cause: {error}"
                ) from error
            failed = f"failed in {time.perf_counter() - started:.2f} s ({type(error).__name__})"
        except TimeoutError as error:
            raise Finding("hang", "the read waited for a worker that never started") from error
        else:
            raise Finding("wrong-pixels", "a read with no worker thread returned data")
    finally:
        threading.Thread = original  # type: ignore[misc]
    again = context.read(array)
    return f"{failed}; with threads again, {context.expect(again, expected, 'the same read')}"


# -- dask ----------------------------------------------------------------------------------


def _dask_interrupt(kind: type[BaseException]) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        import dask.array as da

        from napari_lazy_zarr.core import ChunkState, LazyZarrError
        from napari_lazy_zarr.dask import from_dask

        def task(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
            raise kind("raised by a dask task")

        meta = np.empty((0, 0), "u2")  # given: dask never calls `task` to infer it
        graph = da.zeros(SHAPE, chunks=CHUNKS, dtype="u2").map_blocks(task, meta=meta)
        context.begin()
        array = from_dask(graph, cache=context.cache(), name=f"interrupt-{context.root.name}")
        try:
            array[...].result(timeout=context.wait)
        except LazyZarrError as error:
            if kind.__name__ not in str(error):
                raise Finding(
                    "raw-exception", f"the error does not name {kind.__name__}: {error}"
                ) from error
            detail = f"{type(error).__name__} naming {kind.__name__}"
        except TimeoutError as error:
            raise Finding("hang", "a chunk whose task raised stayed LOADING") from error
        else:
            raise Finding("wrong-pixels", "a task that raised gave data")
        cache = array.cache
        deadline = time.monotonic() + context.wait
        while cache.statistics.states[ChunkState.LOADING] and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        loading = cache.statistics.states[ChunkState.LOADING]
        if loading:
            raise Finding("hang", f"{loading} chunks still LOADING after their tasks raised")
        return f"{detail}; no chunk left LOADING"

    return run


_DASK_EXIT_SCRIPT = """
import threading, time
import dask.array as da
import numpy as np
from napari_lazy_zarr.dask import from_dask

entered = threading.Event()

def hang(block):
    entered.set()
    time.sleep(600)  # still running when the script ends
    return block

meta = np.empty((0, 0), "u2")  # given: dask never calls `hang` to infer it
graph = da.zeros((64, 64), chunks=16, dtype="u2").map_blocks(hang, meta=meta)
from_dask(graph)[...].read_nonblocking()
print("ready" if entered.wait(20) else "never computing", flush=True)
"""


def _dask_exit(context: Context) -> str:
    return exits_promptly(context, [_DASK_EXIT_SCRIPT], "a dask task")


# -- workers of dropped arrays ---------------------------------------------------------------


def _dropped_arrays(context: Context) -> str:
    """500 arrays opened, read and dropped without close(): the thread count stays flat."""
    from napari_lazy_zarr.core import open_array

    expected = ramp(SHAPE)
    zarr_array(context.root / "a.zarr", expected, CHUNKS)
    location = str(context.root / "a.zarr")
    context.begin()
    before = threading.active_count()
    peak = before
    for index in range(500):
        array = open_array(location, total_bytes_limit=1 << 20)
        got = array[...].result(timeout=context.wait)
        if index % 100 == 0:
            context.expect(got, expected, f"array {index}")
        del array, got  # no close()
        peak = max(peak, threading.active_count())
    text = f"threads {before} -> peak {peak} over 500 dropped arrays"
    if peak - before > THREAD_SLACK:
        raise Finding("memory", text)
    return text


# -- bookkeeping -------------------------------------------------------------------------------

_TOUCHED_ROWS = 131_072
_TOUCHED_LIMIT = 64 << 10


def _touched_chunks(context: Context) -> str:
    """131,072 chunks of 16 B read through a 64 KiB cache: the entries it keeps are bounded."""
    from napari_lazy_zarr.core import ArraySource, ChunkedArray

    data = ramp((_TOUCHED_ROWS, 8))
    source = ArraySource(data, chunks=(1, 8), name=f"touched-{context.root.name}")
    context.begin()
    cache = context.cache(_TOUCHED_LIMIT, concurrency=2)
    array = ChunkedArray(source, cache)
    step = 2048
    for start in range(0, _TOUCHED_ROWS, step):
        got = context.read(array, slice(start, start + step))
        if start % (16 * step) == 0:
            context.expect(got, data[start : start + step], f"rows {start}+")
    entries = len(cache.states())
    cache.close()
    return f"131,072 chunks read; {entries:,} entries kept, peak +{context.peak_bytes() >> 20} MiB"


_LAYER_SHAPE, _LAYER_CHUNKS = (2048, 2048), (256, 256)  # 8 MiB of u2 a layer


def _layer_cycles(context: Context) -> str:
    """30 times: open a store on one 1 GiB cache, read all of it, remove the "layer" (what
    napari's removal does: release, then `discard` its identities). Only one layer's
    chunks may stay resident."""
    from napari_lazy_zarr.core import ChunkCache

    expected = ramp(_LAYER_SHAPE)
    zarr_array(context.root / "layer.zarr", expected, _LAYER_CHUNKS)
    context.begin()
    cache = ChunkCache(1 << 30, concurrency=2)
    worst = 0
    for index in range(30):
        array = context.open(context.root / "layer.zarr", cache=cache)
        got = context.read(array)
        if index % 10 == 0:
            context.expect(got, expected, f"cycle {index}")
        del got
        cache.discard([array.source.identity])
        worst = max(worst, cache.statistics.resident_bytes)
        del array
    cache.close()
    text = f"30 cycles: at most {worst >> 20} MiB resident after a removal"
    if worst:
        raise Finding("memory", text)
    return text


_CORRUPT_SHAPE = (256, 1024)  # 512 KiB of u2 a chunk


def _corrupt_chunks(context: Context) -> str:
    """256 chunks of 512 KiB, each a byte short (they fail to decode), read through a
    16 MiB cache: the failures keep their errors, not the chunks' bytes, and `close()`
    releases what the read took."""
    from napari_lazy_zarr.core import LazyZarrError

    rows, cols = _CORRUPT_SHAPE
    store = zarr_array(context.root / "c.zarr", ramp((16 * rows, 16 * cols)), _CORRUPT_SHAPE)
    for path in (store / "c").rglob("*"):
        if path.is_file():
            path.write_bytes(path.read_bytes()[:-1])
    context.begin()
    cache = context.cache(16 << 20)
    array = context.open(store, cache=cache)
    failed = 0
    for row in range(16):
        try:
            context.read(array, slice(row * rows, (row + 1) * rows))
        except LazyZarrError:
            failed += 16
    kept = len(cache.events())
    peak = context.peak_bytes() >> 20
    cache.close()
    del array
    gc.collect()
    resident = context.resident_bytes()
    text = (
        f"256 corrupt 512 KiB chunks: {failed} failed; {kept} events kept; peak +{peak} MiB, "
        f"+{resident >> 20} MiB after close()"
    )
    if resident > 32 << 20:
        raise Finding("memory", text)
    return text


def _retried_chunk(context: Context) -> str:
    """One corrupt 2 MiB chunk failed and retried 600 times: memory must not grow."""
    from napari_lazy_zarr.core import LazyZarrError

    store = zarr_array(context.root / "r.zarr", ramp((1024, 1024)), (1024, 1024))
    chunk = store / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-1])
    context.begin()
    cache = context.cache(16 << 20)
    array = context.open(store, cache=cache)
    for _ in range(600):
        try:
            context.read(array)
        except LazyZarrError:
            cache.retry_failed()
    text = f"a 2 MiB chunk failed 600 times: peak +{context.peak_bytes() >> 20} MiB"
    cache.close()
    return text


def cases() -> Iterator[Case]:
    yield Case(
        f"{_BOUNDED}256 corrupt 512 KiB chunks under a 16 MiB limit, then close()",
        BOOKKEEPING,
        _corrupt_chunks,
        accept=OK,
        bound=60.0,
    )
    yield Case(
        f"{_BOUNDED}one corrupt 2 MiB chunk retried 600 times",
        BOOKKEEPING,
        _retried_chunk,
        accept=OK,
        bound=60.0,
    )
    yield Case(
        f"{_FINISH}a worker thread cannot start, then can", THREADS, _thread_start_fails, accept=OK
    )
    for kind in (KeyboardInterrupt, SystemExit):
        yield Case(
            f"{_FINISH}a dask task raises {kind.__name__}",
            THREADS,
            _dask_interrupt(kind),
            accept=OK,
        )
    yield Case(
        f"{_FINISH}the interpreter exits with a dask task in flight",
        THREADS,
        _dask_exit,
        accept=OK,
    )
    yield Case(
        f"{_FINISH}500 arrays opened, read and dropped without close()",
        THREADS,
        _dropped_arrays,
        accept=OK,
        bound=60.0,
    )
    yield Case(
        f"{_BOUNDED}131,072 chunks touched under a 64 KiB limit",
        BOOKKEEPING,
        _touched_chunks,
        accept=OK,
        bound=120.0,
        cache_limit=_TOUCHED_LIMIT,
    )
    yield Case(
        f"{_BOUNDED}30 open/read/remove cycles of a layer on one cache",
        BOOKKEEPING,
        _layer_cycles,
        accept=OK,
        bound=60.0,
        cache_limit=16 << 20,
    )
