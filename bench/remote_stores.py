"""Remote clients head to head: many small ranged GETs over loopback with latency.

Issue 12, item 5 measured obstore against fsspec/aiohttp and the project's own HTTP
client; issue 47 moved the remote stores onto obstore. "Ours" is now `RemoteStore`
(obstore behind the project's capping layer: time caps, body caps, cancel of async reads,
``Accept-Encoding: identity``), timed against bare obstore and fsspec.

Run ``python -m bench.remote_stores [--quick]``; it prints Markdown.

The server is the project's test server (`tests.remote.server.FaultyServer`
on 127.0.0.1) adding a latency to every request (20 ms, then 0 ms), its listen
backlog raised as `bench.remote` does, with a lean file handler: the stock
handler reads the whole file for every request (64 MiB per 64 KiB range
here), which would make the server's memcpy, not the clients, the cost being
measured on 2 shared cores; this one `pread`s the range. For the timings it
runs in a forked child process, so that no server thread competes for the
clients' GIL and this process's CPU time (*client CPU*) is the clients' alone;
the probes run it in this process.

Workloads, on files written once under ``bench/.data/remote_stores/``:

- **ranges**: `Config.ranges` GETs of `Config.range_bytes` at random aligned
  offsets of one `Config.file_bytes` file (distinct offsets, shuffled), with
  `IN_FLIGHT` in flight;
- **batch**: the same ranges as one batch call, where the library has one;
- **files**: `Config.files` whole-file GETs of `Config.file_size` bytes each.

Every client is created once and reused (warm keep-alive pools, as a store
open in napari is), warmed by one untimed call per method. Methods alternate
within each round in an order rotated per round (`bench.interleaved`); every
call's bytes are checked against the files, outside the timing. Reported:
median ms, the GETs the server saw per call and the body bytes it sent
(medians), and the most requests it was handling at once (max over rounds).
fsspec's batch calls run up to 100 requests at once (aiohttp's connector
limit), so `RemoteStore` is also timed from a pool of `WIDE` threads: equal
concurrency, to tell the client's cost from the concurrency's.

A second section probes, against the same server, what each client does with
a silent server, a trickling body, a body larger than asked, an undeclared
length, a compressed body, a 503 with ``Retry-After``, a cancelled request,
and which ``Accept-Encoding`` it sends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gzip
import math
import multiprocessing
import os
import random
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from bench import DATA_DIR, environment_line, generated_store, interleaved, markdown_table
from bench.remote import BACKLOG, listen_overflows

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
    from pathlib import Path

__all__ = ["FULL", "IN_FLIGHT", "LATENCIES", "QUICK", "Config", "main", "run"]

LATENCIES: Final = (0.020, 0.0)
"""Seconds the server adds to every request, one run each."""
IN_FLIGHT: Final = 32
"""Requests in flight for the per-request methods (the engine's default for URLs)."""
WIDE: Final = 100
"""Threads of the wide reference pool: as many as aiohttp's default connector opens."""
_TIMEOUT: Final = 120.0  # of any one timed call: a hung client fails the run, never stalls it


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    file_bytes: int
    range_bytes: int
    ranges: int
    files: int
    file_size: int
    rounds: int


# 256 distinct 64 KiB ranges are a quarter of a 64 MiB file, as a view over a
# shard reads a fraction of its inner chunks (a 16 MiB file would be all of it).
FULL: Final = Config(
    "full", 64 << 20, 64 << 10, ranges=256, files=64, file_size=256 << 10, rounds=7
)
QUICK: Final = Config(
    "quick", 16 << 20, 64 << 10, ranges=64, files=16, file_size=256 << 10, rounds=1
)


# -- data ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Data:
    root: Path
    blob: bytes
    """The ranged file's bytes, key ``blob.bin``."""
    ranges: tuple[tuple[int, int], ...]
    """(start, end) of every ranged GET, end exclusive."""
    files: dict[str, bytes]
    """Whole-file keys and their bytes."""


def ensure_data(config: Config) -> Data:
    """The files under `bench/.data/remote_stores/`, written on first use only."""
    params = {"file_bytes": config.file_bytes, "files": config.files, "size": config.file_size}
    root = DATA_DIR / "remote_stores" / config.name

    def write() -> None:
        rng = random.Random(0)
        (root / "files").mkdir(parents=True)
        (root / "blob.bin").write_bytes(rng.randbytes(config.file_bytes))
        for i in range(config.files):
            (root / "files" / f"f{i:03d}.bin").write_bytes(rng.randbytes(config.file_size))

    generated_store(root, params, write, "remote_stores")
    slots = random.Random(1).sample(range(config.file_bytes // config.range_bytes), config.ranges)
    ranges = tuple((s * config.range_bytes, (s + 1) * config.range_bytes) for s in slots)
    files = {
        f"files/f{i:03d}.bin": (root / "files" / f"f{i:03d}.bin").read_bytes()
        for i in range(config.files)
    }
    return Data(root, (root / "blob.bin").read_bytes(), ranges, files)


# -- the server --------------------------------------------------------------------------

_PROBE_BODY: Final = 64 << 20
"""The most a hostile probe answer sends (the stock server's send up to 4 GiB)."""


class Counters:
    """GETs, body bytes and requests in flight at the server, and its latency.

    In shared memory: the measuring server runs in a child process, so that
    the client's CPU time is the benchmark process's alone and no server
    thread competes for the client's GIL.
    """

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self._lock = context.Lock()
        self._values = context.RawArray("d", 5)  # requests, bytes, current, peak, latency

    @property
    def latency(self) -> float:
        return float(self._values[4])

    @latency.setter
    def latency(self, seconds: float) -> None:
        self._values[4] = seconds

    def counts(self) -> tuple[int, int, int]:
        """(GETs, body bytes, peak in flight since `reset_peak`)."""
        with self._lock:
            return int(self._values[0]), int(self._values[1]), int(self._values[3])

    def reset_peak(self) -> None:
        with self._lock:
            self._values[3] = self._values[2]

    def served(self, body_bytes: int) -> None:
        with self._lock:
            self._values[1] += body_bytes

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        with self._lock:
            self._values[0] += 1
            self._values[2] += 1
            self._values[3] = max(self._values[3], self._values[2])
        try:
            yield
        finally:
            with self._lock:
                self._values[2] -= 1


@dataclass
class Seen:
    """What the server saw: counters, headers per client, hostile answers' fates."""

    counters: Counters = field(default_factory=Counters)
    encodings: dict[str, str | None] = field(default_factory=dict)  # User-Agent -> header
    probes: dict[str, str] = field(default_factory=dict)  # key -> probe mode
    sent: dict[str, int] = field(default_factory=dict)  # probe key -> body bytes sent
    served: dict[str, float] = field(default_factory=dict)  # probe key -> handler seconds
    stamps: dict[str, list[float]] = field(default_factory=dict)  # key -> request times
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def serve(root: Path, seen: Seen) -> Iterator[Any]:
    """`FaultyServer` on `root` with a lean file handler, probe answers and tracking."""
    from tests.remote.server import Faults, FaultyServer, _Handler

    class Handler(_Handler):
        def _serve(self, *, body: bool) -> None:
            key = self.path.split("?", 1)[0].lstrip("/")
            with seen.lock:
                seen.encodings[self.headers.get("User-Agent", "?")] = self.headers.get(
                    "Accept-Encoding"
                )
                seen.stamps.setdefault(key, []).append(time.monotonic())
            faults = self.server.faults
            with seen.counters.track():
                if key in seen.probes:
                    self._probe(key, seen.probes[key])
                elif faults.hostile(key) or key in faults.errors:
                    super()._serve(body=body)
                else:
                    self._serve_file(key, body=body)

        def _serve_file(self, key: str, *, body: bool) -> None:
            if latency := seen.counters.latency:
                time.sleep(latency)
            path = os.path.join(self.server.root, key)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                self._answer(404, b"")
                return
            try:
                size = os.fstat(fd).st_size
                start, end = 0, size
                ranged = self.headers.get("Range")
                if ranged:
                    first, _, last = ranged.removeprefix("bytes=").partition("-")
                    if first:
                        start, end = int(first), min(size, int(last) + 1) if last else size
                    else:
                        start = max(0, size - int(last))
                payload = os.pread(fd, end - start, start) if body else b""
            finally:
                os.close(fd)
            seen.counters.served(len(payload))
            headers = {"Content-Range": f"bytes {start}-{end - 1}/{size}"} if ranged else {}
            self._answer(206 if ranged else 200, payload, length=end - start, headers=headers)

        def _answer(
            self,
            status: int,
            payload: bytes,
            *,
            length: int | None = None,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload) if length is None else length))
            self.end_headers()
            self.wfile.write(payload)

        def _probe(self, key: str, mode: str) -> None:
            """A hostile answer, bounded (`_PROBE_BODY`); records what was sent before hang-up."""
            self.server.faults.count(key)
            started = time.monotonic()
            self.close_connection = True
            sent = 0
            if mode == "gzip-206":  # a correct 206, but compressed in transit
                packed = gzip.compress(bytes(1 << 20))
                self._answer(
                    206,
                    packed,
                    headers={"Content-Range": "bytes 0-99/1048576", "Content-Encoding": "gzip"},
                )
                sent = len(packed)
            else:
                self.send_response(206 if mode in ("oversized-206", "trickle-206") else 200)
                if mode == "declared-huge":
                    self.send_header("Content-Length", str(10**12))
                elif mode == "oversized-206":  # asked 100 bytes, announces 64 MiB
                    self.send_header("Content-Range", f"bytes 0-{_PROBE_BODY - 1}/{_PROBE_BODY}")
                    self.send_header("Content-Length", str(_PROBE_BODY))
                elif mode == "trickle-206":  # the right range, one byte per 0.1 s
                    self.send_header("Content-Range", "bytes 0-63/1048576")
                    self.send_header("Content-Length", "64")
                self.send_header("Connection", "close")
                self.end_headers()
                stopping = self.server.stopping
                try:
                    if mode == "trickle-206":
                        for _ in range(64):
                            if stopping.wait(timeout=0.1):
                                break
                            self.wfile.write(b"x")
                            self.wfile.flush()
                            sent += 1
                    else:
                        piece = bytes(1 << 16)
                        while sent < _PROBE_BODY and not stopping.is_set():
                            self.wfile.write(piece)
                            sent += len(piece)
                except OSError:
                    pass  # the client hung up: what we are measuring
            with seen.lock:
                seen.sent[key] = sent
                seen.served[key] = time.monotonic() - started

    server = FaultyServer(root, Faults())
    server._server.RequestHandlerClass = Handler
    server._server.socket.listen(BACKLOG)  # as bench.remote: ~32 connections open at once
    with server:
        yield server


@contextlib.contextmanager
def serve_apart(root: Path, counters: Counters) -> Iterator[str]:
    """`serve` in a child process (forked: start it before any thread); yields its URL."""
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    child = context.Process(target=_serve_child, args=(root, counters, theirs), daemon=True)
    child.start()
    try:
        if not ours.poll(30):
            raise RuntimeError("the benchmark's server process did not start within 30 s")
        yield ours.recv()
    finally:
        ours.send("stop")
        child.join(timeout=10)
        if child.is_alive():
            child.terminate()


def _serve_child(root: Path, counters: Counters, connection: Any) -> None:
    with serve(root, Seen(counters=counters)) as server:
        connection.send(server.url)
        connection.recv()  # until the parent says stop


# -- an event loop for the async clients ----------------------------------------------------


class LoopThread:
    """One asyncio loop in a daemon thread; async clients live and run on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run[T](self, coro: Coroutine[Any, Any, T], timeout: float = _TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


async def _bounded[I, T](
    get: Callable[[I], Awaitable[T]], items: Iterable[I], limit: int = IN_FLIGHT
) -> list[T]:
    """``get(item)`` for every item, at most `limit` at once (asyncio.gather, a semaphore)."""
    gate = asyncio.Semaphore(limit)

    async def one(item: I) -> T:
        async with gate:
            return await get(item)

    return await asyncio.gather(*(one(item) for item in items))


# -- the clients ----------------------------------------------------------------------------


def obstore_options(timeouts: Any) -> dict[str, Any]:
    """obstore `ClientConfig` carrying `RemoteStore`'s bounds (`core.settings.Timeouts`)."""
    return {
        "allow_http": True,
        "connect_timeout": timedelta(seconds=timeouts.connect),
        "read_timeout": timedelta(seconds=timeouts.read),
        "timeout": timedelta(seconds=timeouts.total),
        "default_headers": {"Accept-Encoding": "identity"},
    }


@dataclass
class Clients:
    """Every client under test, opened once on the server's URL."""

    url: str
    loop: LoopThread
    pool: ThreadPoolExecutor
    wide_pool: ThreadPoolExecutor
    ours: Any
    obstore: Any
    fsspec_sync: Any
    fsspec_async: Any
    zarr_fsspec: Any

    @classmethod
    def open(cls, url: str) -> Clients:
        from fsspec.implementations.http import HTTPFileSystem  # type: ignore[import-untyped]
        from obstore.store import HTTPStore
        from zarr.storage import FsspecStore

        from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS
        from napari_lazy_zarr.core.storage.remote import RemoteStore

        loop = LoopThread()

        async def async_filesystems() -> tuple[Any, Any]:
            made = []
            for _ in range(2):  # one for fsspec itself, one under zarr's FsspecStore
                fs = HTTPFileSystem(asynchronous=True, skip_instance_cache=True)
                await fs.set_session()
                made.append(fs)
            return made[0], made[1]

        fs_async, fs_zarr = loop.run(async_filesystems())
        return cls(
            url=url,
            loop=loop,
            pool=ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="bench-client"),
            wide_pool=ThreadPoolExecutor(WIDE, thread_name_prefix="bench-wide"),
            ours=RemoteStore(url),
            # Retries are the engine's (RetryPolicy, Retry-After); obstore's own would
            # re-ask a silent server 10 times (see the probes).
            obstore=HTTPStore(
                url + "/",
                client_options=obstore_options(DEFAULT_TIMEOUTS),  # type: ignore[arg-type]
                retry_config={"max_retries": 0},
            ),
            fsspec_sync=HTTPFileSystem(skip_instance_cache=True),
            fsspec_async=fs_async,
            zarr_fsspec=FsspecStore(fs_zarr, read_only=True, path=url),
        )

    def close(self) -> None:
        async def close_sessions() -> None:
            for fs in (self.fsspec_async, self.zarr_fsspec.fs):
                await (await fs.set_session()).close()

        self.loop.run(close_sessions())
        self.loop.close()
        self.pool.shutdown()
        self.wide_pool.shutdown()
        self.ours.close()


type Call = Callable[[Clients, Data], list[Any]]
"""Fetches one workload; returns the bodies in the workload's order."""


def _ours_ranges(c: Clients, d: Data, *, wide: bool = False) -> list[Any]:
    from zarr.abc.store import RangeByteRequest

    def get(r: tuple[int, int]) -> Any:
        return c.ours.get_sync("blob.bin", byte_range=RangeByteRequest(*r)).to_bytes()

    return list((c.wide_pool if wide else c.pool).map(get, d.ranges))


def _obstore_ranges_threads(c: Clients, d: Data) -> list[Any]:
    import obstore

    def get(r: tuple[int, int]) -> Any:
        return obstore.get_range(c.obstore, "blob.bin", start=r[0], end=r[1])

    return list(c.pool.map(get, d.ranges))


def _obstore_ranges_gather(c: Clients, d: Data) -> list[Any]:
    import obstore

    async def get(r: tuple[int, int]) -> Any:
        return await obstore.get_range_async(c.obstore, "blob.bin", start=r[0], end=r[1])

    return c.loop.run(_bounded(get, d.ranges))


def _zarr_fsspec_ranges(c: Clients, d: Data) -> list[Any]:
    from zarr.abc.store import RangeByteRequest
    from zarr.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()

    async def get(r: tuple[int, int]) -> Any:
        buffer = await c.zarr_fsspec.get("blob.bin", prototype, RangeByteRequest(*r))
        return buffer.to_bytes()

    return c.loop.run(_bounded(get, d.ranges))


def _obstore_get_ranges(coalesce: int | None) -> Call:
    def call(c: Clients, d: Data) -> list[Any]:
        import obstore

        starts, ends = [r[0] for r in d.ranges], [r[1] for r in d.ranges]
        if coalesce is None:
            return obstore.get_ranges(c.obstore, "blob.bin", starts=starts, ends=ends)
        return obstore.get_ranges(
            c.obstore, "blob.bin", starts=starts, ends=ends, coalesce=coalesce
        )

    return call


def _obstore_get_ranges_async(c: Clients, d: Data) -> list[Any]:
    import obstore

    starts, ends = [r[0] for r in d.ranges], [r[1] for r in d.ranges]

    async def get() -> list[Any]:  # obstore's coroutines need a running loop when made
        return await obstore.get_ranges_async(c.obstore, "blob.bin", starts=starts, ends=ends)

    return c.loop.run(get())


def _fsspec_cat_ranges(c: Clients, d: Data) -> list[Any]:
    url = f"{c.url}/blob.bin"
    result: list[Any] = c.fsspec_sync.cat_ranges(
        [url] * len(d.ranges), [r[0] for r in d.ranges], [r[1] for r in d.ranges]
    )
    return result


def _fsspec_cat_ranges_async(c: Clients, d: Data) -> list[Any]:
    url = f"{c.url}/blob.bin"
    coro = c.fsspec_async._cat_ranges(
        [url] * len(d.ranges), [r[0] for r in d.ranges], [r[1] for r in d.ranges]
    )
    result: list[Any] = c.loop.run(coro)
    return result


def _ours_files(c: Clients, d: Data, *, wide: bool = False) -> list[Any]:
    def get(key: str) -> Any:
        return c.ours.get_sync(key).to_bytes()

    return list((c.wide_pool if wide else c.pool).map(get, d.files))


def _obstore_files_threads(c: Clients, d: Data) -> list[Any]:
    import obstore

    def get(key: str) -> Any:
        return obstore.get(c.obstore, key).bytes()

    return list(c.pool.map(get, d.files))


def _obstore_files_gather(c: Clients, d: Data) -> list[Any]:
    import obstore

    async def get(key: str) -> Any:
        result = await obstore.get_async(c.obstore, key)
        return await result.bytes_async()

    return c.loop.run(_bounded(get, d.files))


def _fsspec_cat_files(c: Clients, d: Data) -> list[Any]:
    urls = [f"{c.url}/{key}" for key in d.files]
    found: dict[str, Any] = c.fsspec_sync.cat(urls)
    return [found[url] for url in urls]


def _zarr_fsspec_files(c: Clients, d: Data) -> list[Any]:
    from zarr.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()

    async def get(key: str) -> Any:
        return (await c.zarr_fsspec.get(key, prototype)).to_bytes()

    return c.loop.run(_bounded(get, d.files))


OURS: Final = f"RemoteStore `get_sync`, {IN_FLIGHT} threads"
THREADS: Final = f"{IN_FLIGHT} threads"
GATHER: Final = f"asyncio.gather, {IN_FLIGHT} at once"

WORKLOADS: Final[dict[str, dict[str, Call]]] = {
    "ranges": {
        OURS: _ours_ranges,
        f"obstore `get_range`, {THREADS}": _obstore_ranges_threads,
        f"obstore `get_range_async`, {GATHER}": _obstore_ranges_gather,
        f"zarr `FsspecStore.get` (RangeByteRequest), {GATHER}": _zarr_fsspec_ranges,
    },
    "batch": {
        OURS: _ours_ranges,
        "obstore `get_ranges` (coalesce 1 MiB, its default)": _obstore_get_ranges(None),
        "obstore `get_ranges` (coalesce 0)": _obstore_get_ranges(0),
        "obstore `get_ranges_async` (coalesce 1 MiB)": _obstore_get_ranges_async,
        "fsspec `cat_ranges`": _fsspec_cat_ranges,
        "fsspec `_cat_ranges` (async)": _fsspec_cat_ranges_async,
        f"RemoteStore `get_sync`, {WIDE} threads": functools.partial(_ours_ranges, wide=True),
    },
    "files": {
        OURS: _ours_files,
        f"obstore `get().bytes()`, {THREADS}": _obstore_files_threads,
        f"obstore `get_async`, {GATHER}": _obstore_files_gather,
        "fsspec `cat` (one batch)": _fsspec_cat_files,
        f"zarr `FsspecStore.get`, {GATHER}": _zarr_fsspec_files,
        f"RemoteStore `get_sync`, {WIDE} threads": functools.partial(_ours_files, wide=True),
    },
}


def expected(workload: str, d: Data) -> list[bytes]:
    if workload == "files":
        return list(d.files.values())
    return [d.blob[start:end] for start, end in d.ranges]


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    served: list[int] = field(default_factory=list)  # body bytes
    cpu: list[float] = field(default_factory=list)  # seconds of this process (the clients)


def measure(
    config: Config, counters: Counters, clients: Clients, data: Data, latency: float
) -> dict[str, dict[str, Samples]]:
    """Samples per workload and method at one latency."""
    counters.latency = latency
    out: dict[str, dict[str, Samples]] = {}
    for workload, calls in WORKLOADS.items():
        oracle = expected(workload, data)
        samples = {label: Samples() for label in calls}
        for label, call in calls.items():  # warm the pools, check the bytes once
            _timed(label, call, counters, clients, data, oracle, Samples())
        interleaved(
            {
                label: functools.partial(
                    _timed_case, label, call, counters, clients, data, oracle, samples[label]
                )
                for label, call in calls.items()
            },
            [workload],
            config.rounds,
        )
        out[workload] = samples
        print(f"[remote_stores] {latency * 1e3:.0f} ms, {workload}: done", flush=True)
    return out


def _timed(
    label: str,
    call: Call,
    counters: Counters,
    clients: Clients,
    data: Data,
    oracle: list[bytes],
    samples: Samples,
) -> float:
    """Time one call; record its seconds, CPU, GETs, bytes and peak; check its bytes."""
    counters.reset_peak()
    requests, served, _ = counters.counts()
    cpu = time.process_time()
    start = time.perf_counter()
    bodies = call(clients, data)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    requests_after, served_after, peak = counters.counts()
    samples.seconds.append(elapsed)
    samples.cpu.append(cpu)
    samples.requests.append(requests_after - requests)
    samples.served.append(served_after - served)
    samples.peaks.append(peak)
    wrong = sum(bytes(a) != b for a, b in zip(bodies, oracle, strict=True))
    if wrong:
        raise AssertionError(f"{label}: {wrong} of {len(oracle)} bodies differ from the files")
    return elapsed


def _timed_case(*args: Any) -> float:
    """`_timed` for `bench.interleaved`, which passes the case (the workload) last."""
    return _timed(*args[:-1])


def table(samples: dict[str, Samples]) -> str:
    ours = statistics.median(samples[OURS].seconds)
    rows = []
    for label, s in samples.items():
        median = statistics.median(s.seconds)
        rows.append(
            [
                label,
                f"{median * 1e3:.1f}",
                f"{median / ours:.2f}",
                f"{statistics.median(s.cpu) * 1e3:.0f}",
                f"{statistics.median(s.requests):g}",
                f"{statistics.median(s.served) / 2**20:.1f}",
                max(s.peaks),
            ]
        )
    return markdown_table(
        ["method", "median ms", "× ours", "client CPU ms", "GETs", "MiB served", "peak in flight"],
        rows,
    )


# -- what each client guarantees -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    ours: str
    obstore: str


def _outcome(call: Callable[[], object]) -> tuple[str, float]:
    """What `call` did (returned n bytes / raised which error, briefly) and its seconds."""
    start = time.monotonic()
    try:
        value = call()
    except Exception as error:
        first = str(error).splitlines()[0] if str(error) else ""
        first = re.sub(r"https?://\S+", "URL", first).removeprefix("Generic HTTP error: ")
        what = f"{type(error).__name__} ({first[:70]})"
    else:
        size = len(value) if isinstance(value, bytes | bytearray | memoryview) else None
        what = f"returned {size:,} B" if size is not None else f"returned {value!r}"
    return what, time.monotonic() - start


def _sent(seen: Seen, key: str) -> int:
    """Body bytes the probe handler of `key` sent before the client hung up (or it ended)."""
    done = threading.Event()
    deadline = time.monotonic() + 10
    while key not in seen.sent and time.monotonic() < deadline:
        done.wait(0.02)
    return seen.sent.get(key, -1)


def probe(server: Any, seen: Seen) -> list[Probe]:
    """Run each hostile case against our `RemoteStore` and obstore (our bounds, no retries)."""
    import obstore
    from obstore.store import HTTPStore
    from zarr.abc.store import RangeByteRequest

    from napari_lazy_zarr.core.settings import Timeouts
    from napari_lazy_zarr.core.storage.remote import RemoteStore
    from napari_lazy_zarr.core.storage.remote_errors import HttpStatusError

    faults = server.faults
    faults.latency = 0.0
    timeouts = Timeouts(connect=1.0, read=0.5, total=1.5)
    options: Any = obstore_options(timeouts)
    ours = RemoteStore(server.url, timeouts=timeouts)
    ours.limit("whole", 1 << 20)
    theirs = HTTPStore(server.url + "/", client_options=options, retry_config={"max_retries": 0})
    retrying = HTTPStore(server.url + "/", client_options=options)  # obstore's default retries
    plain = HTTPStore(server.url + "/", client_options={"allow_http": True})

    def ours_range(key: str, end: int = 100) -> object:
        return ours.get_sync(key, byte_range=RangeByteRequest(0, end))

    def their_range(key: str, end: int = 100, store: Any = theirs) -> object:
        return bytes(obstore.get_range(store, key, start=0, end=end))

    def ours_whole(key: str) -> object:
        return ours.get_sync(f"whole/{key}")  # under a 1 MiB `limit`

    def their_whole(key: str) -> object:
        result = obstore.get(theirs, f"whole/{key}")  # returns once the head is read
        size = result.meta["size"]
        if size > 1 << 20:  # what an adapter would check before `bytes()`
            raise ValueError(f"declared {size:,} B > 1 MiB cap: refused before the body")
        return bytes(result.bytes())

    def hostile(
        name: str,
        mode: str,
        ours_call: Callable[[str], object],
        their_call: Callable[[str], object],
        note: str = "",
    ) -> Probe:
        cells = []
        for who, call in (("ours", ours_call), ("obstore", their_call)):
            key = f"{re.sub(r'[^a-z0-9]+', '-', name.lower())}-{who}.bin"
            seen.probes[key] = seen.probes[f"whole/{key}"] = mode
            what, took = _outcome(functools.partial(call, key))
            sent = _sent(seen, f"whole/{key}" if call in (ours_whole, their_whole) else key)
            cells.append(f"{what} in {took:.2f} s; {sent:,} B of body sent")
        return Probe(name, cells[0], cells[1] + note)

    probes: list[Probe] = []
    # Time caps.
    faults.silent.update({"silent-ours.bin", "silent-obstore.bin", "silent-retrying.bin"})
    what, took = _outcome(functools.partial(ours_range, "silent-ours.bin"))
    what2, took2 = _outcome(functools.partial(their_range, "silent-obstore.bin"))
    _, took3 = _outcome(functools.partial(their_range, "silent-retrying.bin", store=retrying))
    probes.append(
        Probe(
            "silent server (read cap 0.5 s)",
            f"{what} after {took:.2f} s",
            f"{what2} after {took2:.2f} s; with obstore's default `RetryConfig` asked "
            f"{faults.requests.get('silent-retrying.bin', 0)} times, failed after {took3:.1f} s",
        )
    )
    probes.append(
        hostile(
            "206 trickled 1 B / 0.1 s (total cap 1.5 s)",
            "trickle-206",
            functools.partial(ours_range, end=64),
            functools.partial(their_range, end=64),
        )
    )
    # Body caps (the kernel's socket buffers take a few MB whatever the client does).
    probes.append(
        hostile("range asked, 200 declaring 10^12 B", "declared-huge", ours_range, their_range)
    )
    probes.append(hostile("100 B asked, 206 of 64 MiB", "oversized-206", ours_range, their_range))
    probes.append(
        hostile(
            "whole key capped at 1 MiB, 200 declaring 10^12 B",
            "declared-huge",
            ours_whole,
            their_whole,
            " (`get()` exposes `meta.size` before the body is read)",
        )
    )
    probes.append(
        hostile(
            "whole key capped at 1 MiB, no Content-Length (64 MiB)",
            "undeclared-length",
            ours_whole,
            their_whole,
        )
    )
    probes.append(
        hostile("206 sent with Content-Encoding: gzip", "gzip-206", ours_range, their_range)
    )
    # Retry-After.
    for key in ("busy-ours.bin", "busy-obstore.bin", "busy-retrying.bin"):
        faults.errors[key] = 503
        faults.error_times[key] = 1
        faults.retry_after[key] = "2"
    try:
        ours_range("busy-ours.bin")
        ours_said = "no error"
    except HttpStatusError as error:
        ours_said = f"HttpStatusError, .status {error.status}, .retry_after {error.retry_after}"
    what, _ = _outcome(functools.partial(their_range, "busy-obstore.bin"))
    _outcome(functools.partial(their_range, "busy-retrying.bin", store=retrying))
    stamps = seen.stamps.get("busy-retrying.bin", [0.0, 0.0])
    probes.append(
        Probe(
            "503 with Retry-After: 2",
            f"{ours_said} (not seen through obstore: the engine's `RetryPolicy` waits 1 s "
            "after a 429 or 503, doubling)",
            f"{what}: no status or Retry-After attribute; with its default `RetryConfig` "
            f"asked again after {stamps[1] - stamps[0]:.2f} s",
        )
    )
    probes.append(_cancel_probe(seen, ours, theirs))
    their_range("files/f000.bin", store=plain)
    from fsspec.implementations.http import HTTPFileSystem

    HTTPFileSystem(skip_instance_cache=True).cat_file(f"{server.url}/files/f000.bin", 0, 10)
    agents = dict(seen.encodings)
    obstore_agent = next((a for a in agents if a.startswith("object_store")), "?")
    aiohttp_agent = next((a for a in agents if "aiohttp" in a.lower()), "?")
    probes.append(
        Probe(
            "Accept-Encoding sent",
            repr(agents.get("napari-lazy-zarr")),
            f"{agents.get(obstore_agent)!r} by default; 'identity' with `default_headers` "
            f"(as configured here). fsspec/aiohttp: {agents.get(aiohttp_agent)!r}",
        )
    )
    ours.close()
    return probes


def _cancel_probe(seen: Seen, ours: Any, theirs: Any) -> Probe:
    """Cancel a trickling ranged read after 0.3 s: how soon does the server see the hang-up?"""
    import obstore
    from zarr.abc.store import RangeByteRequest

    cells = []
    pause = threading.Event()
    for who in ("ours", "obstore"):
        key = f"cancel-{who}.bin"
        seen.probes[key] = "trickle-206"
        outcome: list[str] = []
        if who == "ours":
            from napari_lazy_zarr.core.sources._zarr_compat import run_sync

            def read(key: str = key, outcome: list[str] = outcome) -> None:
                try:
                    run_sync(ours.read(key, RangeByteRequest(0, 64), reader="probe"))
                    outcome.append("completed")
                except Exception as error:
                    outcome.append(type(error).__name__)

            thread = threading.Thread(target=read)
            thread.start()
            pause.wait(0.3)
            cancelled = time.monotonic()
            ours.cancel_reader("probe")
            thread.join(timeout=10)
            how = "`cancel_reader(reader)` (a `read` on zarr's loop)"
        else:
            loop = LoopThread()

            async def read_async(key: str = key) -> Any:
                return await obstore.get_range_async(theirs, key, start=0, end=64)

            future = asyncio.run_coroutine_threadsafe(read_async(), loop.loop)
            pause.wait(0.3)
            cancelled = time.monotonic()
            future.cancel()
            outcome.append("CancelledError" if future.cancelled() else "not cancelled")
            how = "cancelling the `get_range_async` future (sync `get_range` has none)"
        sent = _sent(seen, key)
        ended = seen.stamps[key][0] + seen.served.get(key, math.nan)
        cells.append(
            f"{how}: {outcome[0] if outcome else '?'}; the server saw the hang-up "
            f"{ended - cancelled:.2f} s after the cancel ({sent} of 64 B sent)"
        )
        if who == "obstore":
            loop.close()
    return Probe("cancel a read in flight after 0.3 s", *cells)


# -- entry points ------------------------------------------------------------------------------


def run(quick: bool = False) -> str:
    """Measure and probe; return the Markdown report."""
    config = QUICK if quick else FULL
    data = ensure_data(config)
    counters = Counters()
    overflows = listen_overflows()
    started = time.perf_counter()
    load = os.getloadavg()[0]
    results: dict[float, dict[str, dict[str, Samples]]] = {}
    with serve_apart(data.root, counters) as url:
        clients = Clients.open(url)
        try:
            for latency in LATENCIES:
                results[latency] = measure(config, counters, clients, data, latency)
        finally:
            clients.close()
    seen = Seen()
    with serve(data.root, seen) as server:
        probes = probe(server, seen)
    after = listen_overflows()
    lines = [
        "## Remote clients: many small ranged GETs (obstore, fsspec, ours)",
        "",
        environment_line(["obstore", "fsspec", "aiohttp", "zarr", "numpy"]),
        "",
        f"{config.name} run: {config.ranges} ranges of {config.range_bytes >> 10} KiB at "
        f"random aligned offsets of a {config.file_bytes >> 20} MiB file; {config.files} "
        f"files of {config.file_size >> 10} KiB; {config.rounds} interleaved rounds after one "
        f"warm-up call per method. Measured in {time.perf_counter() - started:.0f} s; "
        f"1-minute load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; kernel "
        f"listen overflows {None if overflows is None or after is None else after - overflows}.",
        "",
    ]
    for latency, workloads in results.items():
        for workload, samples in workloads.items():
            lines += [f"### {workload}, {latency * 1e3:.0f} ms per request", "", table(samples)]
    lines += [
        "### What each client guarantees (probed against the same server)",
        "",
        "obstore configured with our bounds (`ClientConfig` connect/read/total timeouts, "
        "`Accept-Encoding: identity` header) and `max_retries=0` unless stated. Caps: "
        "read 0.5 s, total 1.5 s; hostile bodies are bounded at 64 MiB by the server.",
        "",
        markdown_table(
            ["case", "RemoteStore (ours)", "obstore HTTPStore"],
            [[p.name, p.ours, p.obstore] for p in probes],
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.remote_stores", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small data, one round")
    args = parser.parse_args(argv)
    print(run(quick=args.quick), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
