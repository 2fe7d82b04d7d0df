"""Soak: threads panning randomly over a faulty HTTP store through one small cache.

Bounded in time: `LAZY_ZARR_SOAK_SECONDS` (default 6; the documented run used 60). The
report (printed, and returned by `soak`) counts requests served, faults injected and
survived, illegal transitions, wrong pixels, deadlocks, peak resident bytes against the
limit, and peak process memory.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core import LEGAL_MOVES, ChunkReadError, ChunkState
from napari_lazy_zarr.core.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from napari_lazy_zarr.core import ChunkEvent, ChunkKey
    from tests.remote.server import FaultyServer

PLACEHOLDER = 65_535  # the data (x * 7 % 65521) never takes this value
READERS = 4


def soak(server: FaultyServer, data: np.ndarray[Any, Any], seconds: float) -> dict[str, Any]:
    faults = server.faults
    faults.random_rate = 0.05  # ~5% of chunk requests answered 503 (transient, retried)
    faults.corrupt.update({"a.zarr/c/3/3", "a.zarr/c/6/1"})  # two chunks that never decode
    faults.latency = 0.002
    # Room for ~12 of the 80 chunks: constant eviction under pinning.
    image = open_array(f"{server.url}/a.zarr", total_bytes_limit=12 * 32 * 32 * 2, concurrency=8)
    image.source._retry = RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.1)
    cache = image.cache
    last: dict[ChunkKey, ChunkState] = {}
    illegal: list[ChunkEvent] = []
    lock = threading.Lock()

    def check(events: tuple[ChunkEvent, ...]) -> None:
        with lock:
            for event in events:
                before = last.get(event.key, ChunkState.NEW)
                if event.previous is not before or event.current not in LEGAL_MOVES[before]:
                    illegal.append(event)
                last[event.key] = event.current

    cache.state_changed.connect(check)
    report: dict[str, Any] = {"reads": 0, "wrong_pixels": 0, "failed_reads": 0}
    peak_resident = 0
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []

    def reader(index: int) -> None:
        rng = np.random.default_rng(index)
        try:
            while time.monotonic() < stop:
                y, x = int(rng.integers(0, 200)), int(rng.integers(0, 260))
                view = (
                    slice(y, y + int(rng.integers(8, 64))),
                    slice(x, x + int(rng.integers(8, 64))),
                )
                expected = data[view]
                if index % 2:
                    try:
                        got = image[view].result(timeout=30)
                    except ChunkReadError:
                        with lock:
                            report["failed_reads"] += 1  # a corrupt chunk: named, not shown
                        continue
                    wrong = int((got != expected).sum())
                else:
                    partial = image[view].read_nonblocking(
                        placeholder=PLACEHOLDER, requester=index
                    )
                    shown = partial.data != PLACEHOLDER
                    wrong = int((partial.data[shown] != expected[shown]).sum())
                with lock:
                    report["reads"] += 1
                    report["wrong_pixels"] += wrong
        except BaseException as error:
            errors.append(error)

    def monitor() -> None:
        nonlocal peak_resident
        while time.monotonic() < stop:
            stats = cache.statistics
            peak_resident = max(peak_resident, stats.resident_bytes - stats.pinned_bytes)
            time.sleep(0.01)  # a sampling period, not a wait for a condition

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
    threads.append(threading.Thread(target=monitor))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    stats = cache.statistics
    report.update(
        seconds=seconds,
        deadlocks=sum(t.is_alive() for t in threads),
        errors=[repr(e) for e in errors],
        http_requests=faults.total("a.zarr/"),
        faults_injected=faults.injected,
        illegal_transitions=len(illegal),
        loads=stats.loads,
        failures=stats.failures,
        evictions=stats.evictions,
        total_bytes_limit=stats.total_bytes_limit,
        peak_unpinned_resident=peak_resident,
        peak_process_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    image.cache.close()
    return report


def test_soak(served: tuple[FaultyServer, np.ndarray[Any, Any]]) -> None:
    server, data = served
    seconds = float(os.environ.get("LAZY_ZARR_SOAK_SECONDS", "6"))
    report = soak(server, data, seconds)
    print("\nsoak report:", report)
    assert report["deadlocks"] == 0
    assert report["errors"] == []
    assert report["illegal_transitions"] == 0
    assert report["wrong_pixels"] == 0
    assert report["reads"] > 0
    assert report["faults_injected"] > 0  # faults happened, and were survived
    assert report["peak_unpinned_resident"] <= report["total_bytes_limit"]
