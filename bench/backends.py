"""The decode backends benchmark: zarr-python, TensorStore and zarrs behind `ChunkSource`.

``python -m bench.backends [--quick]`` prints Markdown tables (``run(quick)``
returns them, for ``python -m bench``).

Three stores of the same synthetic uint16 image (16384², `write_sample_store`):
Zarr v3 with zstd level 1 in 512² chunks, the same sharded (4096² shards of 512²
inner chunks), and Zarr v2 with blosc-lz4 in 512² chunks, kept in
``bench/.data/backends-<mode>/``. Windows are 2048² at seeded, chunk-unaligned
positions (25 chunks each; `bench.engine.viewport_windows`).

1. **Cold window**, interleaved, medians: each backend as a `ChunkSource`
   under a `ChunkedArray` with a 2-worker `ChunkCache`, evicted (untimed)
   before each read (``zarr`` is `open_array(path, concurrency=2)`); the peers
   in the same rounds: TensorStore directly (cache pool 0, 2 copy and 2 I/O
   threads) and zarr-python with the zarrs pipeline reading the whole window
   in one call (the batched use zarrs is built for).
2. **One chunk**: `read_chunk` of each of a window's 25 chunks in turn on one
   thread (what one cache worker does per load), per chunk.

Every method's output is checked against `synthetic_region` before timing.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import tensorstore
import zarr

from bench import (
    Window,
    environment_line,
    interleaved,
    markdown_table,
    median_ms,
)
from bench.engine import DATASETS, Config, _clock, ensure_store, viewport_windows
from napari_lazy_zarr.core import ChunkCache, ChunkedArray, open_array
from napari_lazy_zarr.core.keys import grid_shape
from napari_lazy_zarr.core.sample import synthetic_region
from napari_lazy_zarr.core.sources.backends import (
    ZARRS_PIPELINE_CONFIG,
    available_backends,
    open_backend_source,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["FULL", "QUICK", "main", "run"]

THREADS: Final = 2
FULL: Final = Config(
    "full", size=16384, shard=4096, windows=6, rounds=6, warm_rounds=0, pan_steps=0, pan_rounds=0
)
QUICK: Final = Config(
    "quick", size=4096, shard=2048, windows=2, rounds=2, warm_rounds=0, pan_steps=0, pan_rounds=0
)


def _check(label: str, window: Window, data: Any) -> None:
    expected = synthetic_region(window.y0, window.x0, (window.h, window.w))
    if not np.array_equal(np.asarray(data), expected):
        raise AssertionError(f"{label}: wrong pixels for {window}")


class DatasetBench:
    """Every method's handle on one store."""

    def __init__(self, path: Path) -> None:
        self.backends = list(available_backends())
        self.sources: dict[str, ChunkSource] = {}
        self.arrays: dict[str, ChunkedArray] = {}
        for name in self.backends:
            if name == "zarr":
                array = open_array(str(path), concurrency=THREADS)
            else:
                source = open_backend_source(path, backend=name)
                array = ChunkedArray(source, ChunkCache(1 << 30, concurrency=THREADS))
            self.arrays[name] = array
            self.sources[name] = array.source
        context = tensorstore.Context(
            {
                "cache_pool": {"total_bytes_limit": 0},
                "data_copy_concurrency": {"limit": THREADS},
                "file_io_concurrency": {"limit": THREADS},
            }
        )
        driver = "zarr3" if (path / "zarr.json").exists() else "zarr"
        spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
        self.tensorstore = tensorstore.open(spec, read=True, context=context).result()
        self.zarrs_direct: Any = None
        if "zarrs" in self.backends:
            with zarr.config.set({**ZARRS_PIPELINE_CONFIG, "threading.max_workers": THREADS}):
                self.zarrs_direct = zarr.open_array(
                    zarr.storage.LocalStore(path, read_only=True), mode="r"
                )

    def close(self) -> None:
        for array in self.arrays.values():
            array.cache.close()

    def cold_methods(self) -> dict[str, Callable[[Window], float | list[float]]]:
        methods: dict[str, Callable[[Window], float | list[float]]] = {}
        for name, array in self.arrays.items():

            def cold(window: Window, array: ChunkedArray = array) -> float | list[float]:
                array.cache.evict_unpinned()
                return _clock(lambda: array[window.slices].result())

            methods[f"{name} backend (ChunkedArray)"] = cold
        methods["TensorStore direct"] = lambda w: _clock(
            lambda: self.tensorstore[w.slices].read().result()
        )
        if self.zarrs_direct is not None:
            methods["zarrs direct (one call)"] = lambda w: _clock(
                lambda: self.zarrs_direct[w.slices]
            )
        return methods

    def verify(self, window: Window) -> None:
        """Every method once on `window`: right pixels, and the page cache warmed."""
        for name, array in self.arrays.items():
            array.cache.evict_unpinned()
            _check(name, window, array[window.slices].result())
        _check("TensorStore", window, self.tensorstore[window.slices].read().result())
        if self.zarrs_direct is not None:
            _check("zarrs direct", window, self.zarrs_direct[window.slices])

    def chunk_coords(self, window: Window, chunk: int) -> list[tuple[int, int]]:
        return sorted(window.chunks(chunk))

    def one_chunk(self, windows: Sequence[Window], chunk: int, rounds: int) -> dict[str, float]:
        """Median ms per `read_chunk` on one thread, each backend, interleaved per window."""

        def per_chunk(source: ChunkSource) -> Callable[[Window], float | list[float]]:
            def read(window: Window) -> float | list[float]:
                samples = []
                for coords in self.chunk_coords(window, chunk):
                    start = time.perf_counter()
                    source.read_chunk(coords)
                    samples.append(time.perf_counter() - start)
                return samples

            return read

        samples = interleaved(
            {name: per_chunk(source) for name, source in self.sources.items()}, windows, rounds
        )
        return {name: median_ms(values) for name, values in samples.items()}


def _ratio(value: float, peer: float) -> str:
    return f"{value / peer:.2f}×"


def run(quick: bool) -> str:
    config = QUICK if quick else FULL
    windows = viewport_windows(config)
    cold_rows: list[list[str]] = []
    chunk_rows: list[list[str]] = []
    cold: dict[str, dict[str, float]] = {}
    chunk_ms: dict[str, dict[str, float]] = {}
    for dataset in DATASETS:
        path = ensure_store(config, dataset, folder=f"backends-{config.mode}", name="backends")
        bench = DatasetBench(path)
        try:
            sizes = grid_shape(bench.sources["zarr"])
            print(f"[backends] {dataset.label}: {sizes[0]}x{sizes[1]} read chunks", flush=True)
            for window in windows:
                bench.verify(window)
            samples = interleaved(bench.cold_methods(), windows, config.rounds)
            cold[dataset.label] = {name: median_ms(s) for name, s in samples.items()}
            chunk_ms[dataset.label] = bench.one_chunk(windows, config.chunk, config.rounds)
        finally:
            bench.close()
    methods = list(next(iter(cold.values())))
    for method in methods:
        row = [method]
        for dataset in DATASETS:
            values = cold[dataset.label]
            peer = values["TensorStore direct"]
            row.append(f"{values[method]:.1f} ({_ratio(values[method], peer)})")
        cold_rows.append(row)
    for name in next(iter(chunk_ms.values())):
        row = [name]
        for dataset in DATASETS:
            values = chunk_ms[dataset.label]
            row.append(f"{values[name]:.2f} ({_ratio(values[name], values['zarr'])})")
        chunk_rows.append(row)
    header = ["method", *(dataset.label for dataset in DATASETS)]
    samples_per = config.windows * config.rounds
    return (
        "## Decode backends\n\n"
        f"{environment_line(['zarr', 'tensorstore', 'zarrs', 'numpy'])}\n\n"
        f"### Cold 2048² window, ms (× TensorStore direct)\n\n"
        f"{config.size}² uint16 image, 25 chunks of {config.chunk}² per window; medians of "
        f"{samples_per} interleaved reads ({config.windows} windows × {config.rounds} "
        "rounds); 2 threads everywhere.\n\n"
        + markdown_table(header, cold_rows)
        + "\n### One chunk, `read_chunk` on one thread, ms (× zarr backend)\n\n"
        + f"Medians of {samples_per * 25} reads.\n\n"
        + markdown_table(["backend", *(dataset.label for dataset in DATASETS)], chunk_rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backends", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small data, few rounds")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(run(args.quick))
    print(f"[backends] {time.perf_counter() - started:.0f} s in all", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
