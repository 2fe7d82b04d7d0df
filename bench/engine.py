"""The engine benchmark: napari-lazy-zarr's chunk engine against the raw limit and its peers.

Three stores of the same synthetic uint16 image (`napari_lazy_zarr.core.sample`):
Zarr v3 with zstd level 1 in 512x512 chunks, the same sharded (4096x4096 shards
of 512x512 inner chunks), and Zarr v2 with blosc-lz4 in 512x512 chunks. Viewports
are 2048x2048 windows at fixed, seeded, chunk-unaligned positions (a window then
touches 5x5 = 25 chunks) and a pan path of 256-pixel steps to the right.

What is measured (section numbers as in ``docs/benchmarks.md``), in one run,
interleaved, reporting medians:

1. **Cold viewport**: one blocking read of a window whose chunks are not in any
   chunk cache. Ours is `open_array(path, concurrency=2)` with
   `cache.evict_unpinned()` before each read; the *raw limit* reads exactly the
   touched chunk files (or, for shards, the inner chunks' byte ranges found in
   each shard's index) and decodes them with numcodecs on 2 threads into a
   preallocated output; the peers are zarr-python (default configuration), dask
   (`from_zarr`, 2 threads) and TensorStore (cache pool 0, 2 copy and 2 I/O
   threads). The OS page cache stays warm for every method alike: this is decode
   and assembly cost, not disk.
2. **Warm viewport**: ours reading a window whose chunks are all resident, against
   `numpy.copyto` of the same 8 MiB into a preallocated array (the floor for any
   read that returns a copy), and TensorStore reading through a warm 1 GB cache.
3. **Non-blocking request**: how long `read_nonblocking()` takes to return on a
   cold view (it plans, pins, queues the loads and assembles the placeholder
   image); the time until its request completes is reported beside it.
4. **Planning**: `view.chunk_refs()` for a window, i.e. the index-space planning
   a viewport request does before any chunk is touched.
5. **Pan**: 256-pixel steps to the right; ours and TensorStore (1 GB cache) keep
   what earlier steps loaded, zarr-python and dask re-read every step.
6. **Per-chunk overhead beyond decode**: a cold window read by ours with one
   worker against the raw limit on one thread, over the same chunks in the same
   run; ``(ours - raw) / chunks`` per paired sample is what ours adds per chunk to
   reading and decoding it (planning, queueing, state moves, handing the chunk
   back, copying it out).
7. **Point gather**: ``vindex`` with 10,000 seeded random points inside each
   window, cold (no chunk cache) and warm (every chunk resident), against
   TensorStore's ``vindex`` (cache pool 0 / 1 GB).
8. **First view of a freshly opened store**: section 1 with a new handle per
   window (ours a new `open_array`, TensorStore a new `tensorstore.open`, raw its
   metadata parsed anew), the open untimed: what a new store costs before its
   first chunk (new workers, shard indexes not yet read).

Every method's output is checked against `synthetic_region` outside the timings.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import dask.array
import google_crc32c
import numcodecs
import numpy as np
import tensorstore
import zarr

import napari_lazy_zarr
from bench import (
    DATA_DIR,
    Window,
    environment_line,
    generated_store,
    interleaved,
    markdown_table,
    median_ms,
)
from napari_lazy_zarr.core import ChunkedArray
from napari_lazy_zarr.core.sample import synthetic_region, write_sample_store

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = ["FULL", "QUICK", "Config", "RawReader", "run"]

THREADS: Final = 2
"""Threads every method may use: the machine's two cores."""
TS_WARM_CACHE_BYTES: Final = 1_000_000_000
GATHER_POINTS: Final = 10_000
"""Points of the `vindex` gather (section 7)."""
_EMPTY: Final = 2**64 - 1  # shard index entry of an absent inner chunk


# -- configuration -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Sizes and repetition counts of one benchmark mode."""

    mode: Literal["full", "quick"]
    size: int
    """The image is `size` x `size` pixels."""
    shard: int
    """Shard edge of the sharded store."""
    windows: int
    """Random 2048x2048 windows (sections 1-4)."""
    rounds: int
    """Passes over all windows for sections 1, 3 and 4."""
    warm_rounds: int
    """Passes over all windows for section 2."""
    pan_steps: int
    pan_rounds: int
    window: int = 2048
    chunk: int = 512
    pan_step: int = 256
    seed: int = 20_241_130


# About 2 minutes of measuring on an idle 2-core machine (plus ~90 s to generate the data once).
FULL: Final = Config(
    "full",
    size=32768,
    shard=4096,
    windows=8,
    rounds=10,
    warm_rounds=20,
    pan_steps=12,
    pan_rounds=10,
)
# Smaller shards than the full run so the 4096x4096 image still has several.
QUICK: Final = Config(
    "quick", size=4096, shard=2048, windows=3, rounds=2, warm_rounds=2, pan_steps=4, pan_rounds=1
)


@dataclass(frozen=True, slots=True)
class Dataset:
    """One stored variant of the synthetic image."""

    label: str
    slug: str
    zarr_format: Literal[2, 3]
    codec: Literal["zstd", "blosc-lz4"]
    sharded: bool

    @property
    def tensorstore_driver(self) -> str:
        return "zarr3" if self.zarr_format == 3 else "zarr"


DATASETS: Final = (
    Dataset("v3 zstd", "v3-zstd", 3, "zstd", sharded=False),
    Dataset("v3 zstd sharded", "v3-zstd-sharded", 3, "zstd", sharded=True),
    Dataset("v2 blosc-lz4", "v2-blosc-lz4", 2, "blosc-lz4", sharded=False),
)


def _unaligned(rng: np.random.Generator, high: int, chunk: int) -> int:
    while True:
        value = int(rng.integers(0, high + 1))
        if value % chunk:
            return value


def viewport_windows(config: Config) -> list[Window]:
    """`config.windows` windows at seeded random positions, none aligned to the chunk grid."""
    rng = np.random.default_rng(config.seed)
    high = config.size - config.window
    return [
        Window(
            _unaligned(rng, high, config.chunk),
            _unaligned(rng, high, config.chunk),
            config.window,
            config.window,
        )
        for _ in range(config.windows)
    ]


def pan_path(config: Config) -> list[Window]:
    """The pan: a seeded unaligned start window, then `pan_steps` steps of `pan_step` px right."""
    rng = np.random.default_rng(config.seed + 1)
    span = config.window + config.pan_steps * config.pan_step
    y0 = _unaligned(rng, config.size - config.window, config.chunk)
    x0 = _unaligned(rng, config.size - span, config.chunk)
    return [
        Window(y0, x0 + step * config.pan_step, config.window, config.window)
        for step in range(config.pan_steps + 1)
    ]


# -- data --------------------------------------------------------------------------


def ensure_store(
    config: Config, dataset: Dataset, *, folder: str | None = None, name: str = "engine"
) -> Path:
    """The dataset's store under `bench/.data/<folder>/` (default: the mode), written on
    first use only (`name`: the benchmark, in the generation log).

    A marker file holding the generation parameters is written after the store is
    complete; a store without a matching marker (interrupted, or other
    parameters) is deleted and written again.
    """
    params = {
        "shape": [config.size, config.size],
        "chunks": [config.chunk, config.chunk],
        "shards": [config.shard, config.shard] if dataset.sharded else None,
        "zarr_format": dataset.zarr_format,
        "codec": dataset.codec,
        "seed": 0,
    }
    path = DATA_DIR / (folder or config.mode) / f"{dataset.slug}.zarr"

    def write() -> None:
        write_sample_store(
            path,
            shape=(config.size, config.size),
            chunks=(config.chunk, config.chunk),
            shards=(config.shard, config.shard) if dataset.sharded else None,
            zarr_format=dataset.zarr_format,
            codec=dataset.codec,
        )

    return generated_store(path, params, write, name)


# -- the raw limit -----------------------------------------------------------------


def _v3_codec(codecs: Sequence[dict[str, Any]]) -> Any:
    """The numcodecs compressor for a v3 chain `bytes(little) [+ zstd | blosc]`."""
    names = [codec["name"] for codec in codecs]
    if not names or names[0] != "bytes":
        raise NotImplementedError(f"raw reader: unsupported codec chain {names}")
    if codecs[0].get("configuration", {}).get("endian", "little") != "little":
        raise NotImplementedError("raw reader: big-endian chunks")
    if names[1:] == ["zstd"]:
        return numcodecs.Zstd()
    if names[1:] == ["blosc"]:
        return numcodecs.Blosc()
    raise NotImplementedError(f"raw reader: unsupported codec chain {names}")


class RawReader:
    """The raw limit: read exactly the touched chunks from disk and decode them, nothing else.

    Metadata is parsed once, from the store's own JSON (``zarr.json`` or
    ``.zarray``). A read lists the chunks a window touches, reads each chunk
    file whole (unsharded) or, for a sharded store, first reads each touched
    shard's index from the end of the shard file (16 bytes per inner chunk,
    ``(offset, nbytes)`` as little-endian uint64, then a little-endian crc32c of
    the index, which is checked) and then each inner chunk's byte range. Chunks
    are decoded by numcodecs on a 2-thread pool, each into a per-thread scratch
    buffer, and the window's part of it is copied into the caller's
    preallocated output. No planning objects, no cache, no locks.
    """

    def __init__(self, path: Path, executor: ThreadPoolExecutor) -> None:
        self._path = path
        self._executor = executor
        self._local = threading.local()
        if (path / "zarr.json").exists():
            self._init_v3(json.loads((path / "zarr.json").read_text()))
        else:
            self._init_v2(json.loads((path / ".zarray").read_text()))

    def _init_v3(self, meta: dict[str, Any]) -> None:
        self.dtype = np.dtype(meta["data_type"]).newbyteorder("<")
        self.shape = tuple(meta["shape"])
        self.fill_value = meta["fill_value"]
        outer = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        encoding = meta["chunk_key_encoding"]
        default = encoding["name"] == "default"
        self._separator = encoding.get("configuration", {}).get(
            "separator", "/" if default else "."
        )
        self._prefix = ("c",) if default else ()
        codecs = meta["codecs"]
        self.shard: tuple[int, ...] | None = None
        if codecs[0]["name"] == "sharding_indexed":
            sharding = codecs[0]["configuration"]
            if sharding.get("index_location", "end") != "end":
                raise NotImplementedError("raw reader: shard index at the start")
            index_codecs = sharding["index_codecs"]
            if [c["name"] for c in index_codecs] != ["bytes", "crc32c"] or index_codecs[0].get(
                "configuration", {}
            ).get("endian", "little") != "little":
                raise NotImplementedError(f"raw reader: shard index codecs {index_codecs}")
            self.shard = outer
            self.chunk = tuple(sharding["chunk_shape"])
            self._codec = _v3_codec(sharding["codecs"])
        else:
            self.chunk = outer
            self._codec = _v3_codec(codecs)

    def _init_v2(self, meta: dict[str, Any]) -> None:
        if meta.get("filters") or meta.get("order", "C") != "C":
            raise NotImplementedError("raw reader: v2 filters or F order")
        self.dtype = np.dtype(meta["dtype"])
        self.shape = tuple(meta["shape"])
        self.fill_value = meta["fill_value"]
        self.chunk = tuple(meta["chunks"])
        self.shard = None
        self._separator = meta.get("dimension_separator") or "."
        self._prefix = ()
        self._codec = numcodecs.get_codec(meta["compressor"])

    def _key(self, coords: Sequence[int]) -> Path:
        return self._path / self._separator.join([*self._prefix, *map(str, coords)])

    def read(self, window: Window, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Fill `out` (shape of the window) with the window's pixels; returns `out`."""
        ch, cw = self.chunk
        y1, x1 = window.y0 + window.h, window.x0 + window.w
        jobs: list[tuple[Any, ...]] = []
        rows = range(window.y0 // ch, (y1 - 1) // ch + 1)
        cols = range(window.x0 // cw, (x1 - 1) // cw + 1)

        def target(cy: int, cx: int) -> tuple[tuple[slice, slice], tuple[slice, slice]]:
            top, left = max(cy * ch, window.y0), max(cx * cw, window.x0)
            bottom, right = min((cy + 1) * ch, y1), min((cx + 1) * cw, x1)
            destination = (
                slice(top - window.y0, bottom - window.y0),
                slice(left - window.x0, right - window.x0),
            )
            source = (
                slice(top - cy * ch, bottom - cy * ch),
                slice(left - cx * cw, right - cx * cw),
            )
            return destination, source

        if self.shard is None:
            for cy in rows:
                for cx in cols:
                    jobs.append((out, self._key((cy, cx)), 0, 0, *target(cy, cx)))
            list(self._executor.map(self._load, jobs))
            return out
        per_y, per_x = self.shard[0] // ch, self.shard[1] // cw
        descriptors: list[int] = []
        try:
            shards: dict[tuple[int, int], Any] = {}
            for cy in rows:
                for cx in cols:
                    shard = (cy // per_y, cx // per_x)
                    if shard not in shards:
                        shards[shard] = self._open_shard(shard, descriptors)
                    fd, index = shards[shard]
                    destination, source = target(cy, cx)
                    if index is None:
                        jobs.append((out, None, 0, 0, destination, source))
                        continue
                    offset, nbytes = (int(v) for v in index[cy % per_y, cx % per_x])
                    if offset == _EMPTY:
                        jobs.append((out, None, 0, 0, destination, source))
                    else:
                        jobs.append((out, fd, offset, nbytes, destination, source))
            list(self._executor.map(self._load, jobs))
        finally:
            for fd in descriptors:
                os.close(fd)
        return out

    def _open_shard(self, shard: tuple[int, int], descriptors: list[int]) -> tuple[int, Any]:
        """Open a shard file and read its index: `(fd, index[y, x] = (offset, nbytes))`."""
        assert self.shard is not None
        try:
            fd = os.open(self._key(shard), os.O_RDONLY)
        except FileNotFoundError:
            return -1, None
        descriptors.append(fd)
        per_y, per_x = self.shard[0] // self.chunk[0], self.shard[1] // self.chunk[1]
        index_bytes = per_y * per_x * 16
        size = os.fstat(fd).st_size
        tail = os.pread(fd, index_bytes + 4, size - index_bytes - 4)
        if google_crc32c.value(tail[:index_bytes]) != int.from_bytes(tail[index_bytes:], "little"):
            raise ValueError(f"raw reader: shard {shard} index checksum mismatch")
        index = np.frombuffer(tail, dtype="<u8", count=per_y * per_x * 2)
        return fd, index.reshape(per_y, per_x, 2)

    def _scratch(self) -> np.ndarray[Any, Any]:
        scratch: np.ndarray[Any, Any] | None = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = np.empty(self.chunk, dtype=self.dtype)
        return scratch

    def _load(self, job: tuple[Any, ...]) -> None:
        """One chunk: read its bytes (whole file, or a range of an open shard), decode, copy."""
        out, where, offset, nbytes, destination, source = job
        if where is None:
            out[destination] = self.fill_value
            return
        if isinstance(where, int):
            data = os.pread(where, nbytes, offset)
        else:
            try:
                with open(where, "rb", buffering=0) as handle:
                    data = handle.read()
            except FileNotFoundError:
                out[destination] = self.fill_value
                return
        scratch = self._scratch()
        self._codec.decode(data, out=scratch)
        out[destination] = scratch[source]


# -- one dataset ---------------------------------------------------------------------


def _clock(read: Callable[[], Any]) -> float:
    """Seconds `read()` took; its result is freed after the clock stops."""
    start = time.perf_counter()
    result = read()
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def _ts_context(cache_bytes: int) -> tensorstore.Context:
    return tensorstore.Context(
        {
            "cache_pool": {"total_bytes_limit": cache_bytes},
            "data_copy_concurrency": {"limit": THREADS},
            "file_io_concurrency": {"limit": THREADS},
        }
    )


class DatasetBench:
    """Every method's handle on one store, and the five measurements over it."""

    def __init__(self, config: Config, dataset: Dataset, path: Path) -> None:
        self.config = config
        self.dataset = dataset
        self.path = path
        self.ours = napari_lazy_zarr.open_array(str(path), concurrency=THREADS)
        self.zarr = zarr.open_array(str(path), mode="r")
        self.dask = dask.array.from_zarr(str(path))
        self.ts_cold = self._open_tensorstore(0)
        self.ts_warm = self._open_tensorstore(TS_WARM_CACHE_BYTES)
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="raw")
        self.raw = RawReader(path, self.pool)
        self.raw_out = np.zeros((config.window, config.window), dtype=self.raw.dtype)
        # Section 6: one decoding thread each, so the difference is per-chunk work.
        self.ours_serial = napari_lazy_zarr.open_array(str(path), concurrency=1)
        self.serial_pool = ThreadPoolExecutor(1, thread_name_prefix="raw-serial")
        self.raw_serial = RawReader(path, self.serial_pool)
        self._expected: dict[Window, np.ndarray[Any, Any]] = {}

    def close(self) -> None:
        self.ours.cache.close()
        self.ours_serial.cache.close()
        self.pool.shutdown()
        self.serial_pool.shutdown()

    def _open_tensorstore(self, cache_bytes: int) -> Any:
        spec = {
            "driver": self.dataset.tensorstore_driver,
            "kvstore": {"driver": "file", "path": str(self.path)},
        }
        return tensorstore.open(spec, read=True, context=_ts_context(cache_bytes)).result()

    # -- correctness ---------------------------------------------------------------

    def expected(self, window: Window) -> np.ndarray[Any, Any]:
        if window not in self._expected:
            self._expected[window] = synthetic_region(window.y0, window.x0, (window.h, window.w))
        return self._expected[window]

    def check(self, method: str, window: Window, data: Any) -> None:
        """Raise unless `data` is exactly the window's pixels."""
        data = np.asarray(data)
        expected = self.expected(window)
        if data.shape != expected.shape or data.dtype != expected.dtype:
            raise AssertionError(
                f"{self.dataset.label}: {method} returned {data.dtype}{data.shape}, "
                f"expected {expected.dtype}{expected.shape}"
            )
        if not np.array_equal(data, expected):
            wrong = int(np.count_nonzero(data != expected))
            raise AssertionError(
                f"{self.dataset.label}: {method} returned {wrong} wrong pixels for {window}"
            )

    def verify(self, windows: Sequence[Window]) -> None:
        """Check every method once on the first window (this also warms imports and pools)."""
        window = windows[0]
        self.ours.cache.evict_unpinned()
        loads = self.ours.cache.statistics.loads
        self.check("ours (cold)", window, self.ours[window.slices].result())
        loaded = self.ours.cache.statistics.loads - loads
        expected_refs = len(self.ours[window.slices].chunk_refs())
        if loaded != expected_refs:
            raise AssertionError(
                f"ours loaded {loaded} chunks for a cold window of {expected_refs}"
            )
        self.check("ours (warm)", window, self.ours[window.slices].result())
        self.ours.cache.evict_unpinned()
        partial = self.ours[window.slices].read_nonblocking()
        partial.request.done.result(timeout=60)
        partial.request.release()
        again = self.ours[window.slices].read_nonblocking()
        again.request.release()
        if not again.complete:
            raise AssertionError("ours: a completed non-blocking read is still incomplete")
        self.check("ours (non-blocking, completed)", window, again.data)
        self.check("raw", window, self.raw.read(window, self.raw_out))
        self.check("raw, 1 thread", window, self.raw_serial.read(window, self.raw_out))
        self.check("ours, 1 worker", window, self.ours_serial[window.slices].result())
        ys, xs = self.gather_points(window)
        expected = self.expected(window)[ys - window.y0, xs - window.x0]
        for method, gathered in (
            ("ours (gather)", self.ours.vindex[ys, xs].result()),
            ("tensorstore (gather)", self.ts_cold.vindex[ys, xs].read().result()),
        ):
            if not np.array_equal(gathered, expected):
                raise AssertionError(f"{self.dataset.label}: {method} returned wrong points")
        self.check("zarr-python", window, self.zarr[window.slices])
        self.check(
            "dask",
            window,
            self.dask[window.slices].compute(scheduler="threads", num_workers=THREADS),
        )
        self.check("tensorstore", window, self.ts_cold[window.slices].read().result())
        self.check("tensorstore (1 GB cache)", window, self.ts_warm[window.slices].read().result())
        fresh = napari_lazy_zarr.open_array(str(self.path), concurrency=THREADS)
        try:
            self.check("ours (fresh store)", window, fresh[window.slices].result())
        finally:
            fresh.cache.close()

    def warm_page_cache(self, windows: Sequence[Window]) -> None:
        """Read every file range the benchmark touches once, so no method pays for disk."""
        for window in windows:
            self.raw.read(window, self.raw_out)

    # -- 1. cold viewport ---------------------------------------------------------

    def cold_viewport(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """Blocking read of one window, no chunk cached anywhere (page cache warm).

        raw: `RawReader.read` into a preallocated output. ours: evict our chunk
        cache (untimed), then `array[window].result()` (indexing included).
        zarr-python: `z[window]`. dask: `d[window].compute(threads, 2 workers)`.
        TensorStore: `t[window].read().result()` with a 0-byte cache pool.
        """
        ours, raw, out = self.ours, self.raw, self.raw_out

        def ours_cold(window: Window) -> float:
            ours.cache.evict_unpinned()
            return _clock(lambda: ours[window.slices].result())

        return interleaved(
            {
                "raw": lambda w: _clock(lambda: raw.read(w, out)),
                "ours": ours_cold,
                "zarr-python": lambda w: _clock(lambda: self.zarr[w.slices]),
                "dask": lambda w: _clock(
                    lambda: self.dask[w.slices].compute(scheduler="threads", num_workers=THREADS)
                ),
                "tensorstore": lambda w: _clock(lambda: self.ts_cold[w.slices].read().result()),
            },
            windows,
            self.config.rounds,
        )

    # -- 2. warm viewport ---------------------------------------------------------

    def warm_viewport(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """Blocking read of one window whose chunks are all resident.

        ours: `view.result()` on a view read once before (every chunk READY).
        memcpy: `numpy.copyto` of an 8 MiB uint16 array of the window's shape into
        a preallocated one. memcpy, fresh output: the same copy into a newly
        allocated array (what any read returning a new array also pays).
        TensorStore: `t[window].read().result()` through a 1 GB cache pool already
        holding the window.
        """
        views = {window: self.ours[window.slices] for window in windows}
        for window, view in views.items():
            view.result()
            self.ts_warm[window.slices].read().result()
        shape = (self.config.window, self.config.window)
        source = np.full(shape, 12345, dtype=np.uint16)
        target = np.zeros(shape, dtype=np.uint16)
        misses = self.ours.cache.statistics.misses
        samples = interleaved(
            {
                "ours": lambda w: _clock(views[w].result),
                "memcpy": lambda w: _clock(lambda: np.copyto(target, source)),
                "memcpy, fresh output": lambda w: _clock(lambda: source.copy()),
                "tensorstore (1 GB cache)": lambda w: _clock(
                    lambda: self.ts_warm[w.slices].read().result()
                ),
            },
            windows,
            self.config.warm_rounds,
        )
        if self.ours.cache.statistics.misses != misses:
            raise AssertionError("ours: the warm viewport missed the cache")
        return samples

    # -- 3. non-blocking request --------------------------------------------------

    def nonblocking(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """`read_nonblocking()` on a cold view: time until it returns, and until done.

        The view is created and the cache evicted before the clock starts; after
        the return is timed, the request's `done` future is awaited (its time from
        the call is the second series) and the request released, untimed.
        """
        completed: list[float] = []

        def ours_nonblocking(window: Window) -> float:
            self.ours.cache.evict_unpinned()
            view = self.ours[window.slices]
            start = time.perf_counter()
            partial = view.read_nonblocking()
            returned = time.perf_counter() - start
            partial.request.done.result(timeout=60)
            completed.append(time.perf_counter() - start)
            partial.request.release()
            return returned

        samples = interleaved({"return": ours_nonblocking}, windows, self.config.rounds)
        samples["complete"] = completed
        return samples

    # -- 4. planning --------------------------------------------------------------

    def planning(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """Planning a viewport request: `view.chunk_refs()` on a fresh view.

        The view is taken from a new `ChunkedArray` over the same source and
        cache each time (untimed), so no plan an earlier read made and kept
        is reused: this is the cost of planning a window never seen before.
        Also timed separately: creating the view (`array[y0:y1, x0:x1]`, which
        composes an index transform).
        """
        ours = self.ours

        def chunk_refs(window: Window) -> float:
            view = ChunkedArray(ours.source, ours.cache)[window.slices]
            return _clock(view.chunk_refs)

        return interleaved(
            {"chunk_refs": chunk_refs, "index": lambda w: _clock(lambda: ours[w.slices])},
            windows,
            self.config.rounds,
        )

    # -- 5. pan -------------------------------------------------------------------

    def pan(self, path: Sequence[Window]) -> dict[str, list[float]]:
        """Time per step along the pan path, each method starting from cold.

        Per round and method: reset its cache (ours: evict; TensorStore: a new
        1 GB cache pool), read the start window untimed, then time each step's
        blocking read. zarr-python and dask have no chunk cache and re-read
        every step's chunks. The last step's pixels are checked in the first round.
        """
        start, steps = path[0], path[1:]
        checked: set[str] = set()

        def walk(name: str, read: Callable[[Window], Any]) -> list[float]:
            read(start)
            times = []
            for window in steps:
                begin = time.perf_counter()
                data = read(window)
                times.append(time.perf_counter() - begin)
            if name not in checked:
                self.check(f"{name} (pan)", steps[-1], data)
                checked.add(name)
            del data
            return times

        def ours(_: int) -> list[float]:
            self.ours.cache.evict_unpinned()
            return walk("ours", lambda w: self.ours[w.slices].result())

        def ts(_: int) -> list[float]:
            store = self._open_tensorstore(TS_WARM_CACHE_BYTES)
            return walk("tensorstore", lambda w: store[w.slices].read().result())

        return interleaved(
            {
                "ours": ours,
                "zarr-python": lambda _: walk("zarr-python", lambda w: self.zarr[w.slices]),
                "dask": lambda _: walk(
                    "dask",
                    lambda w: self.dask[w.slices].compute(
                        scheduler="threads", num_workers=THREADS
                    ),
                ),
                "tensorstore (1 GB cache)": ts,
            },
            [0],
            self.config.pan_rounds,
        )

    # -- 6. per-chunk overhead -----------------------------------------------------

    def per_chunk(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """Cold window, one decoding thread each: ours (`concurrency=1`) and raw (1 thread).

        ``per chunk`` holds, per (round, window), ``(ours - raw) / chunks`` of the
        two reads made back to back on that case: what ours adds per chunk beyond
        reading and decoding it.
        """
        ours, raw, out = self.ours_serial, self.raw_serial, self.raw_out
        chunks = {w: len(ours[w.slices].chunk_refs()) for w in windows}
        order: list[Window] = []

        def ours_cold(window: Window) -> float:
            ours.cache.evict_unpinned()
            order.append(window)
            return _clock(lambda: ours[window.slices].result())

        samples = interleaved(
            {"raw, 1 thread": lambda w: _clock(lambda: raw.read(w, out)), "ours": ours_cold},
            windows,
            self.config.rounds,
        )
        samples["per chunk"] = [
            (mine - floor) / chunks[window]
            for mine, floor, window in zip(
                samples["ours"], samples["raw, 1 thread"], order, strict=True
            )
        ]
        return samples

    # -- 7. point gather ----------------------------------------------------------

    def gather_points(self, window: Window) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """`GATHER_POINTS` seeded random (y, x) points inside `window`."""
        rng = np.random.default_rng((self.config.seed, window.y0, window.x0))
        ys = rng.integers(window.y0, window.y0 + window.h, GATHER_POINTS)
        xs = rng.integers(window.x0, window.x0 + window.w, GATHER_POINTS)
        return ys, xs

    def gather(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """`vindex[ys, xs]` of `GATHER_POINTS` points in the window, cold and warm.

        Indexing is timed with the read (each method builds its indexed view
        per read, as a caller would). Cold: ours evicts its chunk cache first
        (untimed), TensorStore reads with a 0-byte cache pool. Warm: ours with
        every chunk of the window resident, TensorStore through its 1 GB pool
        holding them.
        """
        points = {window: self.gather_points(window) for window in windows}
        ours, ts_cold, ts_warm = self.ours, self.ts_cold, self.ts_warm

        def ours_cold(window: Window) -> float:
            ours.cache.evict_unpinned()
            ys, xs = points[window]
            return _clock(lambda: ours.vindex[ys, xs].result())

        def ours_warm(window: Window) -> float:
            ours[window.slices].result()  # untimed: the window's chunks resident
            ys, xs = points[window]
            return _clock(lambda: ours.vindex[ys, xs].result())

        def ts(store: Any) -> Callable[[Window], float]:
            def read(window: Window) -> float:
                ys, xs = points[window]
                return _clock(lambda: store.vindex[ys, xs].read().result())

            return read

        for window in windows:
            ts_warm[window.slices].read().result()
        return interleaved(
            {
                "ours, cold": ours_cold,
                "tensorstore, cold": ts(ts_cold),
                "ours, warm": ours_warm,
                "tensorstore (1 GB cache), warm": ts(ts_warm),
            },
            windows,
            self.config.rounds,
        )

    # -- 8. first view of a freshly opened store -----------------------------------

    def fresh_open(self, windows: Sequence[Window]) -> dict[str, list[float]]:
        """The first blocking read of a window from a store opened just before, untimed.

        What a new store costs before its first chunk (issue 24's outside
        harness): ours opens `open_array(path, concurrency=2)` anew for every
        window (a new cache, its worker threads not started yet, no shard index
        read), the open untimed, then times `array[window].result()` and closes
        the cache (untimed). TensorStore opens the store anew (a new context,
        cache pool 0), the open untimed, and times the read. raw parses the
        metadata anew (untimed) and reads with its 2-thread pool (threads
        running: the floor). Process-wide state (imports, the recycled chunk
        memory, the OS page cache) stays warm for every method alike.
        """
        out = self.raw_out

        def ours_fresh(window: Window) -> float:
            array = napari_lazy_zarr.open_array(str(self.path), concurrency=THREADS)
            try:
                return _clock(lambda: array[window.slices].result())
            finally:
                array.cache.close()

        def ts_fresh(window: Window) -> float:
            store = self._open_tensorstore(0)
            return _clock(lambda: store[window.slices].read().result())

        def raw_fresh(window: Window) -> float:
            reader = RawReader(self.path, self.pool)
            return _clock(lambda: reader.read(window, out))

        return interleaved(
            {"raw": raw_fresh, "ours": ours_fresh, "tensorstore": ts_fresh},
            windows,
            self.config.rounds,
        )


# -- report --------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


@dataclass(frozen=True, slots=True)
class Target:
    measurement: str
    section: str
    method: str
    reference: str | None
    """Reference method for a ratio target; None for an absolute target (ms)."""
    limit: float
    unit: Literal["ms", "µs"] = "ms"
    """How an absolute target is shown (the limit and the samples are in ms)."""


TARGETS: Final = (
    Target("1. cold viewport: ours / raw", "cold", "ours", "raw", 1.10),
    Target("1. cold viewport: ours / TensorStore", "cold", "ours", "tensorstore", 1.00),
    Target("2. warm viewport: ours / memcpy", "warm", "ours", "memcpy", 2.00),
    Target("3. non-blocking request returns", "nonblocking", "return", None, 2.0),
    Target("4. planning: chunk_refs()", "planning", "chunk_refs", None, 1.0),
    Target("6. per-chunk overhead beyond decode", "per_chunk", "per chunk", None, 0.1, "µs"),
    Target(
        "7. 10,000-point gather, cold: ours / TensorStore",
        "gather",
        "ours, cold",
        "tensorstore, cold",
        1.20,
    ),
    Target(
        "7. 10,000-point gather, warm: ours / TensorStore",
        "gather",
        "ours, warm",
        "tensorstore (1 GB cache), warm",
        1.20,
    ),
    Target("8. first view of a fresh store: ours / raw", "fresh", "ours", "raw", 1.10),
    Target(
        "8. first view of a fresh store: ours / TensorStore", "fresh", "ours", "tensorstore", 1.00
    ),
)


def _section_table(
    results: dict[str, dict[str, dict[str, list[float]]]],
    section: str,
    reference: str | None,
) -> str:
    """Median ms per method (rows) and dataset (columns), with ratios to `reference`."""
    labels = list(results)
    methods = list(next(iter(results.values()))[section])
    rows = []
    for method in methods:
        cells = []
        for label in labels:
            samples = results[label][section]
            value = median_ms(samples[method])
            cell = _ms(value)
            if reference is not None and method != reference:
                cell += f" ({_ratio(value / median_ms(samples[reference]))})"
            cells.append(cell)
        rows.append([method, *cells])
    counts = {len(results[label][section][methods[0]]) for label in labels}
    note = f"n = {'/'.join(map(str, sorted(counts)))} samples per cell"
    if reference is not None:
        note += f"; in parentheses: ratio of medians to {reference}"
    header = ["method", *(f"{label} (ms)" for label in labels)]
    return markdown_table(header, rows) + f"\n{note}.\n"


def _per_chunk_table(results: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """Section 6: one row per dataset; the 1-thread pair and the 2-thread one of section 1."""
    rows = []
    for label, sections in results.items():
        serial = sections["per_chunk"]
        rows.append(
            [
                label,
                _ms(median_ms(serial["raw, 1 thread"])),
                _ms(median_ms(serial["ours"])),
                f"{median_ms(serial['per chunk']) * 1e3:.0f}",
                f"{median_ms(serial['per chunk, 2 threads']) * 1e3:.0f}",
            ]
        )
    header = [
        "dataset",
        "raw, 1 thread (ms)",
        "ours, 1 worker (ms)",
        "per chunk, 1 thread (µs)",
        "per chunk, 2 threads (µs)",
    ]
    counts = {len(sections["per_chunk"]["ours"]) for sections in results.values()}
    note = f"n = {'/'.join(map(str, sorted(counts)))} pairs per dataset"
    return markdown_table(header, rows) + f"\n{note}.\n"


def _gather_table(results: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """Section 7: per method and dataset, with ours' ratio to TensorStore in the same state."""
    labels = list(results)
    references = {
        "ours, cold": "tensorstore, cold",
        "ours, warm": "tensorstore (1 GB cache), warm",
    }
    rows = []
    for method in results[labels[0]]["gather"]:
        cells = []
        for label in labels:
            samples = results[label]["gather"]
            value = median_ms(samples[method])
            cell = _ms(value)
            if method in references:
                cell += f" ({_ratio(value / median_ms(samples[references[method]]))})"
            cells.append(cell)
        rows.append([method, *cells])
    counts = {len(results[label]["gather"]["ours, cold"]) for label in labels}
    note = (
        f"n = {'/'.join(map(str, sorted(counts)))} samples per cell; in parentheses: "
        "ratio of medians to TensorStore in the same state"
    )
    header = ["method", *(f"{label} (ms)" for label in labels)]
    return markdown_table(header, rows) + f"\n{note}.\n"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Facts about one run that the report states."""

    elapsed: float
    """Seconds spent measuring (data generation excluded)."""
    chunks_per_window: tuple[int, ...]
    """The distinct numbers of chunks the viewport windows touch."""
    load_before: float
    load_after: float
    """The 1-minute load average before and after measuring."""


def report(
    config: Config, results: dict[str, dict[str, dict[str, list[float]]]], info: RunInfo
) -> str:
    """The Markdown section for docs/benchmarks.md."""
    labels = list(results)
    summary = []
    for target in TARGETS:
        for label in labels:
            samples = results[label][target.section]
            ours = median_ms(samples[target.method])
            if target.reference is None and target.unit == "µs":
                measured, reference_ms = ours, ""
                limit, shown = f"<= {target.limit * 1e3:g} µs", f"{ours * 1e3:.0f} µs"
            elif target.reference is None:
                measured, reference_ms, limit = ours, "", f"<= {target.limit:g} ms"
                shown = f"{_ms(measured)} ms"
            else:
                reference = median_ms(samples[target.reference])
                measured, reference_ms = ours / reference, _ms(reference)
                limit, shown = f"<= {_ratio(target.limit)}", _ratio(measured)
            met = "yes" if measured <= target.limit else "**no**"
            summary.append([target.measurement, label, _ms(ours), reference_ms, shown, limit, met])

    cold_ratios = []
    for numerator, denominator in (
        ("ours", "raw"),
        ("ours", "tensorstore"),
        ("zarr-python", "raw"),
        ("dask", "raw"),
        ("tensorstore", "raw"),
    ):
        cells = []
        for label in labels:
            samples = results[label]["cold"]
            cells.append(_ratio(median_ms(samples[numerator]) / median_ms(samples[denominator])))
        cold_ratios.append([f"{numerator} / {denominator}", *cells])

    touched = " or ".join(map(str, info.chunks_per_window))
    lines = [
        "## Engine: chunk engine vs raw decode, zarr-python, dask, TensorStore",
        "",
        f"Run: {environment_line(['napari-lazy-zarr', 'numpy', 'zarr', 'numcodecs', 'dask', 'tensorstore'])}.",  # noqa: E501
        "",
        f"Data: the synthetic uint16 image ({config.size}x{config.size}) stored three ways: "
        f"Zarr v3 zstd level 1 in {config.chunk}x{config.chunk} chunks; the same in "
        f"{config.shard}x{config.shard} shards of {config.chunk}x{config.chunk} inner chunks; "
        f"Zarr v2 blosc-lz4 in {config.chunk}x{config.chunk} chunks. "
        f"{config.windows} viewports of {config.window}x{config.window} at seeded random, "
        f"chunk-unaligned positions (each touches {touched} chunks); "
        f"the pan is {config.pan_steps} steps of {config.pan_step} px to the right. "
        f"Every method uses 2 threads. Every method's pixels were checked against the "
        f"generator outside the timings. The OS page cache is warm for every method alike "
        f"(all files were read before timing): cold means no *chunk* cache, not cold disk. "
        f"Measured in {info.elapsed:.0f} s (data generation excluded); 1-minute load "
        f"average {info.load_before:.2f} before, {info.load_after:.2f} after (above 0 means "
        f"something else was running on the 2 cores).",
        "",
        "Generate with `./dev bench engine`; the code and the precise definition of each "
        "measurement are in `bench/engine.py`.",
        "",
        "Reading the numbers:",
        "",
        "- *raw* is the floor for a reader written in Python that does nothing but read, "
        "decode (numcodecs releases the GIL) and copy, into a preallocated output; ours and "
        "the peers return a new array. TensorStore has no Python on its read path and can "
        "come in under raw.",
        "- zarr-python and dask keep no chunk cache, so every pan step re-reads all of its "
        "chunks; ours and TensorStore load only the chunks a step newly exposes (a column "
        "of 5 every other step).",
        "- With another process on the 2 cores, a second decode thread often has no core to "
        "run on, which shrinks multi-threaded speedups for every method alike.",
        "",
        "### Targets",
        "",
        markdown_table(
            ["measurement", "dataset", "ours (ms)", "ref. (ms)", "measured", "target", "met?"],
            summary,
        ),
        "### 1. Cold viewport (blocking read, chunk cache empty), median ms",
        "",
        "raw: exactly the touched chunk files (or shard byte ranges via the shard index) "
        "read and decoded with numcodecs on a 2-thread pool into a preallocated output. "
        "ours: `open_array(path, concurrency=2)`, `cache.evict_unpinned()` before each read, "
        "then `array[y0:y1, x0:x1].result()`. zarr-python: `zarr.open_array(path)[...]`, "
        "default config. dask: `from_zarr(path)[...].compute(scheduler='threads', "
        "num_workers=2)`. TensorStore: cache pool 0, 2 copy / 2 I/O threads.",
        "",
        _section_table(results, "cold", "raw"),
        markdown_table(["ratio of medians", *labels], cold_ratios),
        "### 2. Warm viewport (all chunks resident), median ms",
        "",
        "ours: `view.result()` with every chunk READY (returns a new array). memcpy: "
        "`numpy.copyto` of an 8 MiB uint16 source into a preallocated output of the window's "
        "shape (the target's reference). memcpy, fresh output: the same copy into a newly "
        "allocated array. TensorStore: a warm 1 GB cache pool.",
        "",
        _section_table(results, "warm", "memcpy"),
        "### 3. Non-blocking request on a cold view, median ms",
        "",
        "return: time until `read_nonblocking()` returns (the placeholder image, the pinned "
        "request, the loads queued). complete: time from the call until `request.done` "
        "resolves.",
        "",
        _section_table(results, "nonblocking", None),
        "### 4. Planning a viewport request, median ms",
        "",
        "chunk_refs: `view.chunk_refs()` on a freshly created view of a new array over the "
        "same source (no plan kept from an earlier read). index: creating the view, "
        "`array[y0:y1, x0:x1]`.",
        "",
        _section_table(results, "planning", None),
        "### 5. Pan, median ms per step",
        "",
        "Each round starts cold for every method, reads the start window untimed, then "
        "times each step's blocking read. ours and TensorStore keep what earlier steps "
        "loaded; zarr-python and dask re-read every chunk of every step.",
        "",
        _section_table(results, "pan", "tensorstore (1 GB cache)"),
        "### 6. Per-chunk overhead beyond decode",
        "",
        "A cold window read with one decoding thread on each side: ours "
        "(`open_array(path, concurrency=1)`, cache evicted before each read) and raw (its "
        "pool of 1 thread), back to back on the same window. per chunk: the median over "
        "those pairs of (ours - raw) / chunks in the window, in µs: what ours adds to "
        "reading and decoding a chunk. With 2 threads (section 1) the same difference is "
        "shown for comparison; there a second core hides part of it.",
        "",
        _per_chunk_table(results),
        "### 7. 10,000-point gather (`vindex`), median ms",
        "",
        f"{GATHER_POINTS:,} seeded random points inside each window; each read builds its "
        "indexed view (`array.vindex[ys, xs]`) and reads it. cold: ours with its chunk cache "
        "evicted, TensorStore with a 0-byte cache pool. warm: ours with the window's chunks "
        "resident, TensorStore through a 1 GB cache pool holding them.",
        "",
        _gather_table(results),
        "### 8. First view of a freshly opened store, median ms",
        "",
        "A new handle for every window, its open untimed, then the first blocking read "
        "timed: ours a new `open_array(path, concurrency=2)` (a new cache and workers, no "
        "shard index read yet; closed after the read, untimed); TensorStore a new "
        "`tensorstore.open` (new context, cache pool 0); raw its metadata parsed anew, "
        "reading with its running 2-thread pool. In section 1 the handles are reused.",
        "",
        _section_table(results, "fresh", "raw"),
    ]
    return "\n".join(lines)


# -- entry point ---------------------------------------------------------------------


def _median_line(samples: dict[str, list[float]]) -> str:
    return ", ".join(f"{name} {_ms(median_ms(times))}" for name, times in samples.items())


def run(quick: bool = False) -> str:
    """Run the engine benchmark (`QUICK` or `FULL`) and return its Markdown section."""
    config = QUICK if quick else FULL
    generation = time.perf_counter()
    paths = {dataset: ensure_store(config, dataset) for dataset in DATASETS}
    print(f"[engine] data ready in {time.perf_counter() - generation:.1f} s", flush=True)
    windows = viewport_windows(config)
    path = pan_path(config)
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    touched: set[int] = set()
    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        print(
            f"[engine] note: 1-minute load average is {load_before:.2f}; something else is "
            "using the CPUs, expect noisier numbers",
            flush=True,
        )
    started = time.perf_counter()
    for dataset in DATASETS:
        bench = DatasetBench(config, dataset, paths[dataset])
        try:
            bench.warm_page_cache([*windows, *path])
            bench.verify(windows)
            touched.update(len(bench.ours[w.slices].chunk_refs()) for w in windows)
            sections: dict[str, dict[str, list[float]]] = {}
            for name, measure, cases in (
                ("cold", bench.cold_viewport, windows),
                ("warm", bench.warm_viewport, windows),
                ("nonblocking", bench.nonblocking, windows),
                ("planning", bench.planning, windows),
                ("pan", bench.pan, path),
                ("per_chunk", bench.per_chunk, windows),
                ("gather", bench.gather, windows),
                ("fresh", bench.fresh_open, windows),
            ):
                begin = time.perf_counter()
                sections[name] = measure(cases)
                print(
                    f"[engine] {dataset.label}: {name} ({time.perf_counter() - begin:.1f} s): "
                    f"{_median_line(sections[name])} ms",
                    flush=True,
                )
            # Section 1's pairs give the same difference with 2 threads (interleaved()
            # lists each method's samples round by round, in the order of the windows).
            chunks = [len(bench.ours[w.slices].chunk_refs()) for w in windows]
            sections["per_chunk"]["per chunk, 2 threads"] = [
                (mine - floor) / chunks[index % len(windows)]
                for index, (mine, floor) in enumerate(
                    zip(sections["cold"]["ours"], sections["cold"]["raw"], strict=True)
                )
            ]
            results[dataset.label] = sections
        finally:
            bench.close()
    info = RunInfo(
        elapsed=time.perf_counter() - started,
        chunks_per_window=tuple(sorted(touched)),
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )
    return report(config, results, info)
