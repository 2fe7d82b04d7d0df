"""The remote benchmark: panning over HTTP with 20 ms per request, ours against the dask readers.

The server is the project's own test server (`tests.remote.server.FaultyServer`,
started in this process on 127.0.0.1), serving ``bench/.data/remote/`` with
`Faults.latency` = 20 ms added to every request. The data is the OME-Zarr 0.5
pyramid of `write_sample_ome_zarr` (Zarr v3, 512x512 chunks, blosc-zstd),
generated once.

The pan: a viewport of `Config.window` pixels square on level 0 at a fixed,
chunk-unaligned start, then `Config.pan_steps` steps of 256 pixels to the right.
Each method walks the whole pan once per round (the start view and every step
timed); its caches are fresh at the start of each round and kept across the
steps of the round, as a napari layer keeps them. The methods alternate within
each round, in an order rotated per round (`bench.interleaved`).

The methods, all on the same URL:

- **ours**: `napari_lazy_zarr.open_array(f"{url}/0")` (32 loads in flight, its
  default for URLs). *non-blocking*: time from `view.read_nonblocking(requester="pan")`
  until its `request.done` resolves (what the plugin does in napari);
  *blocking*: `view.result()`.
- **napari built-in reader**: `napari_builtins.io._read.read_zarr_dataset(f"{url}/0")`
  (which is `dask.array.from_zarr(zarr.open(url))`), then `arr[view].compute()`.
  napari turns on its opportunistic dask cache (cachey, a quarter of RAM) for
  every dask layer and slices inside the context `configure_dask` returns (the
  cache registered, task fusion off); that is reproduced here with napari's own
  `napari.utils._dask_utils.configure_dask`, the cache cleared at the start of
  each walk. Dask's default threaded scheduler (one thread per core, so 2 here:
  napari's configuration), and the same with `num_workers=32`; also once
  without the cache (every step then re-reads every chunk).
- **napari-ome-zarr**: its reader (`napari_ome_zarr._reader.napari_get_reader(url)`,
  then calling the returned function) on the group URL; level 0 of the first
  layer's pyramid (a `dask.array.from_zarr` of the level array), sliced and
  computed like the built-in reader's array, with the same cache emulation.

Per walk the chunk requests the server received (level-0 chunk keys) and the
peak number of requests in flight at the server are recorded. Every method's
pixels are checked against `synthetic_cells` on the last view of the first
round, outside the timings.

One adjustment to the test server: it listens with `socketserver`'s default
backlog of 5 connections. Its HTTP/1.0 handler closes every connection after one
request, so 25 requests at once overflow the accept queue and the kernel drops
SYNs, which clients retry after 1 s: a view with many requests in flight then
takes about 1.1 s instead of under 0.1 s. A real server keeps a deep backlog (nginx
511, Linux's default `somaxconn` 4096), so the benchmark raises the backlog of
the listening socket to 128 before serving; the report states the kernel's
listen-overflow count over the run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from bench import (
    DATA_DIR,
    Window,
    environment_line,
    generated_store,
    interleaved,
    markdown_table,
    median_ms,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

__all__ = ["FULL", "QUICK", "Config", "run"]

LATENCY: Final = 0.020
"""Seconds the server adds to every request."""
BACKLOG: Final = 128
"""Listen backlog the benchmark gives the test server (see the module docstring)."""
TARGET: Final = 0.5
"""Target ratio of medians: ours / peer."""
DASK_WIDE: Final = 32
"""`num_workers` of the wide dask variants (as many as our loads in flight)."""


# -- configuration -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Sizes and repetition counts of one benchmark mode."""

    mode: Literal["full", "quick"]
    size: int
    """Level 0 is `size` x `size` pixels."""
    window: int
    """Viewport edge, level-0 pixels."""
    pan_steps: int
    rounds: int
    start: tuple[int, int]
    """(y0, x0) of the start view: not on the chunk grid."""
    chunk: int = 512
    pan_step: int = 256


# About a minute of measuring (plus a few seconds to generate the data once).
FULL: Final = Config("full", size=8192, window=2048, pan_steps=10, rounds=3, start=(1100, 300))
# The 2048 px image leaves room for only 3 steps of a 1024 px viewport.
QUICK: Final = Config("quick", size=2048, window=1024, pan_steps=3, rounds=1, start=(300, 100))


def pan_views(config: Config) -> list[Window]:
    """The start view, then one view per step."""
    y0, x0 = config.start
    views = [
        Window(y0, x0 + step * config.pan_step, config.window, config.window)
        for step in range(config.pan_steps + 1)
    ]
    last = views[-1]
    if last.y0 + last.h > config.size or last.x0 + last.w > config.size:
        raise ValueError(f"the pan leaves the {config.size}² image")
    return views


def view_kinds(config: Config, views: Sequence[Window]) -> list[str]:
    """Per view: 'start', 'loading' (touches chunks no earlier view touched) or 'cached'."""
    kinds = ["start"]
    seen = views[0].chunks(config.chunk)
    for view in views[1:]:
        touched = view.chunks(config.chunk)
        kinds.append("loading" if touched - seen else "cached")
        seen |= touched
    return kinds


# -- data --------------------------------------------------------------------------


def ensure_store(config: Config) -> Path:
    """The OME-Zarr pyramid under `bench/.data/remote/`, written on first use only.

    A marker file holding the generation parameters is written once the store is
    complete; a store without a matching marker is deleted and written again.
    """
    from napari_lazy_zarr.core.sample import write_sample_ome_zarr

    params = {
        "generator": "write_sample_ome_zarr",
        "size": config.size,
        "chunk": config.chunk,
        "ome": "0.5",
        "zarr_format": 3,
    }
    path = DATA_DIR / "remote" / f"cells-{config.size}.ome.zarr"

    def write() -> None:
        write_sample_ome_zarr(path, size=config.size, chunk=config.chunk)

    return generated_store(path, params, write, "remote")


def warm_page_cache(path: Path) -> None:
    """Read every file of the store once, so no method pays for the disk."""
    for file in sorted(path.rglob("*")):
        if file.is_file():
            file.read_bytes()


# -- the server ----------------------------------------------------------------------


class InFlight:
    """Counts the requests the server is handling, and the peak since `reset()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current = 0
        self.peak = 0

    def reset(self) -> None:
        with self._lock:
            self.peak = self.current

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        with self._lock:
            self.current += 1
            self.peak = max(self.peak, self.current)
        try:
            yield
        finally:
            with self._lock:
                self.current -= 1


@contextlib.contextmanager
def serve(root: Path) -> Iterator[tuple[Any, InFlight]]:
    """The test server on `root` with `LATENCY`, a deeper backlog and in-flight counting."""
    from tests.remote.server import Faults, FaultyServer, _Handler

    in_flight = InFlight()

    class Tracking(_Handler):
        def _serve(self, *, body: bool) -> None:
            with in_flight.track():
                super()._serve(body=body)

    server = FaultyServer(root, Faults(latency=LATENCY))
    server._server.RequestHandlerClass = Tracking
    server._server.socket.listen(BACKLOG)  # see the module docstring
    with server:
        yield server, in_flight


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped from full accept queues (Linux), or None."""
    try:
        with open("/proc/net/netstat", encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            value = table.get("ListenOverflows")
            return int(value) if value is not None else None
    return None


# -- the methods -----------------------------------------------------------------------

type Step = Callable[[Window], tuple[float, Callable[[], np.ndarray[Any, Any]]]]
"""Reads one view: the seconds until it completed, and a thunk returning its pixels."""


@dataclass(frozen=True, slots=True)
class Method:
    label: str
    family: Literal["ours", "built-in", "ome-zarr"]
    open: Callable[[], tuple[Step, Callable[[], None]]]
    """Untimed: opens the array with fresh caches; returns the step and a closer."""


def _ours(
    url: str, *, blocking: bool, returns: list[float] | None = None
) -> Callable[[], tuple[Step, Callable[[], None]]]:
    """Ours; the non-blocking step appends to `returns` how long `read_nonblocking` blocked."""
    import napari_lazy_zarr

    def open_() -> tuple[Step, Callable[[], None]]:
        array = napari_lazy_zarr.open_array(f"{url}/0")

        def nonblocking(window: Window) -> tuple[float, Callable[[], np.ndarray[Any, Any]]]:
            view = array[window.slices]
            start = time.perf_counter()
            partial = view.read_nonblocking(requester="pan")
            returned = time.perf_counter() - start
            partial.request.done.result(timeout=60)
            elapsed = time.perf_counter() - start
            partial.request.release()
            if returns is not None:
                returns.append(returned)

            def pixels() -> np.ndarray[Any, Any]:
                again = view.read_nonblocking(requester="pan")
                again.request.release()
                if not again.complete:
                    raise AssertionError("ours: the view is incomplete after request.done")
                return again.data

            return elapsed, pixels

        def result(window: Window) -> tuple[float, Callable[[], np.ndarray[Any, Any]]]:
            view = array[window.slices]
            start = time.perf_counter()
            data = view.result(timeout=60)
            return time.perf_counter() - start, lambda: data

        return (result if blocking else nonblocking), array.cache.close

    return open_


def _dask_step(level0: Any, *, cache: bool, num_workers: int | None) -> Step:
    """`level0[view].compute()` as napari slices a dask layer: in `configure_dask`'s context."""
    from napari.utils._dask_utils import configure_dask

    slicing = configure_dask(level0, cache=cache)
    if cache:
        with slicing() as (_, dask_cache):
            dask_cache.cache.clear()  # napari's cache is global: start each walk empty
    options: dict[str, Any] = (
        {} if num_workers is None else {"scheduler": "threads", "num_workers": num_workers}
    )

    def step(window: Window) -> tuple[float, Callable[[], np.ndarray[Any, Any]]]:
        start = time.perf_counter()
        with slicing():
            data = np.asarray(level0[window.slices].compute(**options))
        return time.perf_counter() - start, lambda: data

    return step


def _builtin(
    url: str, *, cache: bool, num_workers: int | None
) -> Callable[[], tuple[Step, Callable[[], None]]]:
    def open_() -> tuple[Step, Callable[[], None]]:
        from napari_builtins.io._read import read_zarr_dataset

        level0, _ = read_zarr_dataset(f"{url}/0")
        return _dask_step(level0, cache=cache, num_workers=num_workers), lambda: None

    return open_


def _ome_zarr(
    url: str, *, cache: bool, num_workers: int | None
) -> Callable[[], tuple[Step, Callable[[], None]]]:
    def open_() -> tuple[Step, Callable[[], None]]:
        from napari_ome_zarr._reader import napari_get_reader

        reader = napari_get_reader(url)
        if reader is None:
            raise RuntimeError(f"napari-ome-zarr: no reader for {url}")
        pyramid = reader(url)[0][0]
        return _dask_step(pyramid[0], cache=cache, num_workers=num_workers), lambda: None

    return open_


def methods(url: str, returns: list[float]) -> list[Method]:
    """The methods; ours non-blocking appends its `read_nonblocking` return times to `returns`."""
    wide = f"{DASK_WIDE} threads"
    return [
        Method("ours, read_nonblocking", "ours", _ours(url, blocking=False, returns=returns)),
        Method("ours, result()", "ours", _ours(url, blocking=True)),
        Method(
            "built-in, dask default, cache",
            "built-in",
            _builtin(url, cache=True, num_workers=None),
        ),
        Method(
            f"built-in, dask {wide}, cache",
            "built-in",
            _builtin(url, cache=True, num_workers=DASK_WIDE),
        ),
        Method(
            "built-in, dask default, no cache",
            "built-in",
            _builtin(url, cache=False, num_workers=None),
        ),
        Method(
            "napari-ome-zarr, dask default, cache",
            "ome-zarr",
            _ome_zarr(url, cache=True, num_workers=None),
        ),
        Method(
            f"napari-ome-zarr, dask {wide}, cache",
            "ome-zarr",
            _ome_zarr(url, cache=True, num_workers=DASK_WIDE),
        ),
    ]


# -- measuring -------------------------------------------------------------------------


@dataclass(slots=True)
class Walks:
    """Per method: per-view seconds (flat, round after round), requests, peaks."""

    times: dict[str, list[float]]
    requests: dict[str, list[int]]
    peaks: dict[str, list[int]]
    returns: list[float]
    """Per view (flat): how long ours' `read_nonblocking` took to return."""


def measure(
    config: Config, server: Any, in_flight: InFlight, store: str, views: Sequence[Window]
) -> Walks:
    """Every method walks the pan once per round, interleaved; pixels checked in round 1."""
    from napari_lazy_zarr.core.sample import synthetic_cells

    faults = server.faults
    url = f"{server.url}/{store}"
    chunk_prefix = f"{store}/0/c/"
    requests: dict[str, list[int]] = {}
    peaks: dict[str, list[int]] = {}
    checked: set[str] = set()

    def walk(method: Method) -> list[float]:
        step, close = method.open()
        try:
            before = faults.total(chunk_prefix)
            in_flight.reset()
            times = []
            for index, window in enumerate(views):
                elapsed, pixels = step(window)
                times.append(elapsed)
                if index == len(views) - 1 and method.label not in checked:
                    expected = synthetic_cells(window.y0, window.x0, (window.h, window.w))
                    if not np.array_equal(pixels(), expected):
                        raise AssertionError(f"{method.label}: wrong pixels at {window}")
                    checked.add(method.label)
            requests.setdefault(method.label, []).append(faults.total(chunk_prefix) - before)
            peaks.setdefault(method.label, []).append(in_flight.peak)
        finally:
            close()
        return times

    returns: list[float] = []
    every = methods(url, returns)

    def report_round(index: int) -> None:
        print(f"[remote] round {index + 1}/{config.rounds} done", flush=True)

    times = interleaved(
        {method.label: (lambda _, m=method: walk(m)) for method in every},
        [0],
        config.rounds,
        on_round=report_round,
    )
    return Walks(times, requests, peaks, returns)


# -- report ----------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


@dataclass(frozen=True, slots=True)
class Summary:
    """One method's medians (ms) and counts."""

    start: float
    loading: float
    cached: float
    steps: float
    pan: float
    requests: float
    peak: int


def _of_kind(samples: Sequence[float], kinds: Sequence[str], kind: str) -> list[float]:
    """The samples (flat, one per view, round after round) of views of `kind`."""
    return [s for i, s in enumerate(samples) if kinds[i % len(kinds)] == kind]


def summarize(walks: Walks, kinds: Sequence[str]) -> dict[str, Summary]:
    n = len(kinds)
    summaries = {}
    for label, samples in walks.times.items():
        by_kind: dict[str, list[float]] = {"start": [], "loading": [], "cached": []}
        for index, seconds in enumerate(samples):
            by_kind[kinds[index % n]].append(seconds)
        totals = [sum(samples[i : i + n]) for i in range(0, len(samples), n)]
        steps = [s for i, s in enumerate(samples) if kinds[i % n] != "start"]
        summaries[label] = Summary(
            start=median_ms(by_kind["start"]),
            loading=median_ms(by_kind["loading"]),
            cached=median_ms(by_kind["cached"]) if by_kind["cached"] else float("nan"),
            steps=median_ms(steps),
            pan=median_ms(totals),
            requests=statistics.median(walks.requests[label]),
            peak=max(walks.peaks[label]),
        )
    return summaries


@dataclass(frozen=True, slots=True)
class RunInfo:
    elapsed: float
    load_before: float
    load_after: float
    overflows: int | None
    chunks_start: int
    chunks_loading: int
    loading_steps: int
    cached_steps: int
    return_start: float
    return_loading: float
    """Medians (ms) of how long ours' `read_nonblocking` took to return."""


def report(config: Config, summaries: dict[str, Summary], info: RunInfo) -> str:
    """The Markdown section for docs/benchmarks.md."""
    import dask.system

    ours_label = "ours, read_nonblocking"
    ours = summaries[ours_label]
    peers = [label for label in summaries if not label.startswith("ours")]
    measurements = (
        ("start view (cold)", "start"),
        ("loading step, median", "loading"),
        ("whole pan, sum of views", "pan"),
    )
    target_rows = []
    for label in peers:
        napari_default = "default" in label and "no cache" not in label
        for name, field in measurements:
            mine, theirs = getattr(ours, field), getattr(summaries[label], field)
            ratio = mine / theirs
            met = ("yes" if ratio <= TARGET else "**no**") if napari_default else "(info)"
            target_rows.append(
                [name, label, _ms(mine), _ms(theirs), _ratio(ratio), f"<= {TARGET:g}x", met]
            )
    detail_rows = [
        [
            label,
            _ms(s.start),
            _ms(s.loading),
            _ms(s.cached),
            _ms(s.steps),
            _ms(s.pan),
            f"{s.requests:g}",
            str(s.peak),
        ]
        for label, s in summaries.items()
    ]
    overflows = (
        "not available"
        if info.overflows is None
        else f"{info.overflows} (machine-wide; 0 means no connection waited for a SYN retry)"
    )
    lines = [
        "## Remote: panning over HTTP with 20 ms per request",
        "",
        f"Run: {environment_line(['napari-lazy-zarr', 'zarr', 'fsspec', 'aiohttp', 'dask', 'napari', 'napari-ome-zarr'])}.",  # noqa: E501
        "",
        f"Setup: the project's test server (`tests/remote/server.py`) on 127.0.0.1 in the "
        f"benchmark process, adding {LATENCY * 1e3:.0f} ms to every request, serves the "
        f"`write_sample_ome_zarr` pyramid (OME-Zarr 0.5, Zarr v3, {config.size}x{config.size} "
        f"at level 0, {config.chunk}x{config.chunk} chunks). Every method opens the same URL. "
        f"The pan: a {config.window}x{config.window} viewport on level 0 starting at "
        f"(y, x) = {config.start}, then {config.pan_steps} steps of {config.pan_step} px to "
        f"the right; the start view touches {info.chunks_start} chunks, "
        f"{_count(info.loading_steps, 'step')} each expose a new column of "
        f"{info.chunks_loading} chunks (*loading* steps) and {info.cached_steps} expose none "
        f"(*cached* steps). {_count(config.rounds, 'round')}; in each, every method walks the "
        f"whole pan with fresh caches "
        f"kept across its steps, the methods interleaved in an order rotated per round. Every "
        f"method's pixels were checked against `synthetic_cells` outside the timings. "
        f"Measured in {info.elapsed:.0f} s; 1-minute load average {info.load_before:.2f} "
        f"before, {info.load_after:.2f} after.",
        "",
        "Methods. *ours*: `open_array(url + '/0')` (32 loads in flight, the default for "
        "URLs); *read_nonblocking* is timed from `view.read_nonblocking(requester='pan')` until "
        "its `request.done` resolves (what the plugin does in napari), *result()* is a "
        "blocking read. *built-in*: napari's zarr reader (`read_zarr_dataset`, i.e. "
        "`dask.array.from_zarr`), then `arr[view].compute()`. *napari-ome-zarr*: its reader "
        "on the group URL, level 0 of the returned pyramid (also `from_zarr`), computed the "
        "same way. *dask default* is dask's threaded scheduler with one thread per core "
        f"({dask.system.CPU_COUNT} here), which is what napari uses; *dask {DASK_WIDE} "
        f"threads* passes `num_workers={DASK_WIDE}`. *cache*: napari's opportunistic dask "
        "cache, on by default for dask layers, emulated with napari's own `configure_dask` "
        "(cachey, task fusion off; cleared at the start of each walk), so cached chunks are "
        "not fetched again; *no cache*: every step re-reads all of its chunks.",
        "",
        f"The test server's listen backlog (socketserver's default, 5) is raised to "
        f"{BACKLOG} for this benchmark: with it, a view with ~25 requests in flight "
        f"overflowed the accept queue and waited 1 s for TCP's SYN retry (about 1.1 s "
        f"instead of under 0.1 s per view). Kernel listen overflows during the run: {overflows}.",
        "",
        "Generate with `./dev bench remote`; the code is `bench/remote.py`.",
        "",
        "Reading the numbers:",
        "",
        "- Every method fetches through the same client (zarr-python's fsspec HTTP store, "
        "aiohttp, on zarr's event loop) and, with a cache, makes the same requests (the "
        "requests column), so what differs is how many requests are in flight: dask's "
        f"default pool has one thread per core, hence {dask.system.CPU_COUNT} in flight; ours "
        "puts a view's missing "
        "chunks in flight at once (up to 32).",
        "- Dask given 32 threads keeps about as many requests in flight as ours: see the "
        "(info) rows. The gain measured here is over napari's configuration of dask, not "
        "over dask as such.",
        f"- A peak in flight below the start view's {info.chunks_start} chunks means the "
        "client did not issue all of the view's requests within one 20 ms round trip (2 "
        "cores; every request opens a new connection, as the test server speaks HTTP/1.0).",
        f"- Ours' start view includes starting the fresh cache's worker threads. "
        f"`read_nonblocking` returned (blocked its caller) in {_ms(info.return_start)} ms "
        f"on the start view and {_ms(info.return_loading)} ms on loading steps (medians).",
        "",
        "### Targets: ours (read_nonblocking) / peer, ratio of medians",
        "",
        "The target applies to the peers in napari's configuration (dask default, cache); "
        "rows marked (info) compare against configurations napari does not use.",
        "",
        markdown_table(
            ["measurement", "peer", "ours (ms)", "peer (ms)", "ratio", "target", "met?"],
            target_rows,
        ),
        "### All methods, median ms",
        "",
        "start: the cold start view. loading / cached: median over the loading / cached "
        "steps of all rounds. all steps: median over every step, loading and cached alike "
        "(with as many of each it falls between the two groups). whole pan: the sum of "
        "a round's view times, median over rounds. requests: level-0 chunk GETs the server "
        "received per walk (median over rounds). peak in flight: the most requests the "
        "server was handling at once during a walk (max over rounds).",
        "",
        markdown_table(
            [
                "method",
                "start",
                "loading",
                "cached",
                "all steps",
                "whole pan",
                "requests",
                "peak in flight",
            ],
            detail_rows,
        ),
    ]
    return "\n".join(lines)


# -- entry point -----------------------------------------------------------------------


def run(quick: bool = False) -> str:
    """Run the remote benchmark (`QUICK` or `FULL`) and return its Markdown section."""
    config = QUICK if quick else FULL
    path = ensure_store(config)
    warm_page_cache(path)
    views = pan_views(config)
    kinds = view_kinds(config, views)
    chunks = [view.chunks(config.chunk) for view in views]
    loading = [
        len(chunks[i] - set().union(*chunks[:i])) for i, k in enumerate(kinds) if k == "loading"
    ]
    load_before = os.getloadavg()[0]
    overflows_before = listen_overflows()
    started = time.perf_counter()
    with serve(path.parent) as (server, in_flight):
        walks = measure(config, server, in_flight, path.name, views)
    elapsed = time.perf_counter() - started
    overflows_after = listen_overflows()
    summaries = summarize(walks, kinds)
    for label, s in summaries.items():
        print(
            f"[remote] {label}: start {_ms(s.start)}, loading {_ms(s.loading)}, cached "
            f"{_ms(s.cached)}, pan {_ms(s.pan)} ms; {s.requests:g} requests, peak {s.peak}",
            flush=True,
        )
    info = RunInfo(
        elapsed=elapsed,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        overflows=(
            None
            if overflows_before is None or overflows_after is None
            else overflows_after - overflows_before
        ),
        chunks_start=len(chunks[0]),
        chunks_loading=max(loading, default=0),
        loading_steps=kinds.count("loading"),
        cached_steps=kinds.count("cached"),
        return_start=median_ms(_of_kind(walks.returns, kinds, "start")),
        return_loading=median_ms(_of_kind(walks.returns, kinds, "loading")),
    )
    return report(config, summaries, info)
