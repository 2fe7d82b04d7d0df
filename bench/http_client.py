"""The HTTP client against urllib3 under the same caps (issue 23): is urllib3 worth adopting?

Run ``python -m bench.http_client [--quick]``; it prints Markdown (not written to
``docs/benchmarks.md``, not part of ``python -m bench``).

The workload of `core.storage.http`'s docstring: 1,024 chunks of 64x64 uint16
(uncompressed, 8 KiB each) of a zarr v3 array written by zarr-python, read by 32
threads from the project's loopback test server (`tests.remote.server.FaultyServer`,
in a forked child process so that its threads do not compete for this process's
GIL) adding 20 ms per request, keep-alive. Methods alternate within each round
in an order rotated per round; median and range of the rounds. Every body is
checked against the first method's before timing.

- **HttpStore**: `HttpStore.get_sync` (the shared `HttpClient`: watchdog, caps,
  identity encoding, range checks, cancellation);
- **urllib3**: a ``PoolManager`` (32 connections per host, ``Retry(False)``,
  connect and read timeouts) with ``preload_content=False`` and a read loop
  capped at the same body size, ``Accept-Encoding: identity``; it has no total
  deadline and no cancellation of a request in flight.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zarr

CAP = 1 << 20
THREADS = 32
LATENCY = 0.02


def _serve(root: str, ready: Any, stop: Any) -> None:
    from tests.remote.server import FaultyServer

    with FaultyServer(Path(root)) as server:
        server.faults.latency = LATENCY
        ready.put(server.url)
        stop.wait()


def run(quick: bool = False) -> str:
    side, rounds = (8, 2) if quick else (32, 5)
    import urllib3

    from napari_lazy_zarr.core.storage.http import HttpStore

    root = tempfile.mkdtemp(prefix="bench-http-client-")
    data = (np.arange(side * 64 * side * 64) % 65521).astype("u2").reshape(side * 64, -1)
    array = zarr.create_array(
        f"{root}/a.zarr", shape=data.shape, chunks=(64, 64), dtype="u2", compressors=None
    )
    array[...] = data
    context = multiprocessing.get_context("fork")
    ready, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(root, ready, stop), daemon=True)
    server.start()
    url = f"{ready.get(timeout=60)}/a.zarr"
    keys = [f"c/{i}/{j}" for i in range(side) for j in range(side)]
    store = HttpStore(url, max_body_bytes=CAP)
    pool = urllib3.PoolManager(
        maxsize=THREADS,
        retries=urllib3.Retry(False),
        timeout=urllib3.Timeout(connect=10.0, read=10.0),
    )

    def with_urllib3(key: str) -> bytes:
        answer = pool.request(
            "GET",
            f"{url}/{key}",
            headers={"Accept-Encoding": "identity"},
            preload_content=False,
            decode_content=False,
        )
        try:
            declared = answer.headers.get("Content-Length")
            if declared is not None and int(declared) > CAP:
                raise OSError(f"{key}: declares {declared} bytes")
            body = bytearray()
            for piece in answer.stream(1 << 16, decode_content=False):
                body += piece
                if len(body) > CAP:
                    raise OSError(f"{key}: more than {CAP} bytes")
            return bytes(body)
        finally:
            answer.release_conn()

    def with_store(key: str) -> bytes:
        buffer = store.get_sync(key)
        assert buffer is not None
        return buffer.to_bytes()

    methods = {
        "HttpStore (HttpClient)": with_store,
        "urllib3 PoolManager, same caps": with_urllib3,
    }
    try:
        with ThreadPoolExecutor(THREADS) as executor:
            expected = list(executor.map(with_store, keys))
            for name, method in methods.items():
                assert list(executor.map(method, keys)) == expected, name
            times: dict[str, list[float]] = {name: [] for name in methods}
            names = list(methods)
            for index in range(rounds):
                for name in names[index % 2 :] + names[: index % 2]:
                    start = time.perf_counter()
                    list(executor.map(methods[name], keys))
                    times[name].append(time.perf_counter() - start)
    finally:
        store.close()
        pool.clear()
        stop.set()
        server.join(timeout=10)
    lines = [
        f"{len(keys):,} chunks of 64x64 uint16, {THREADS} threads, loopback server "
        f"+{LATENCY * 1000:g} ms per request, median of {rounds} (a busy machine):",
        "",
        "| client | median | range |",
        "|---|---|---|",
    ]
    for name, samples in times.items():
        lines.append(
            f"| {name} | {statistics.median(samples):.2f} s "
            f"| {min(samples):.2f}-{max(samples):.2f} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data, 2 rounds")
    print(run(parser.parse_args().quick))
