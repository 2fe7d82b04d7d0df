"""The `napari-lazy-zarr` command.

For now its main job is `napari-lazy-zarr demo`: generate a sample store once
(kept in the user cache directory), open it through the engine, read a few
views blocking and non-blocking, and print what was read and the cache
statistics. The napari viewer takes over this command with the napari glue.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from napari_lazy_zarr.core import ChunkedArray, open_array
from napari_lazy_zarr.core.sample import default_cache_dir, synthetic_region, write_sample_store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core import CacheStatistics


def _sample_store(directory: Path, size: int) -> Path:
    path = directory / f"demo-{size}x{size}-v3-zstd.zarr"
    marker = path / ".complete"
    if not marker.exists():
        print(f"generating {path} (once; later runs reuse it) ...", flush=True)
        start = time.perf_counter()
        write_sample_store(path, shape=(size, size), chunks=(512, 512))
        marker.touch()
        print(f"  done in {time.perf_counter() - start:.1f} s", flush=True)
    return path


def _format_statistics(stats: CacheStatistics) -> str:
    mib = 1 << 20
    return "\n".join(
        [
            f"  hits {stats.hits}, misses {stats.misses} (hit rate {stats.hit_rate:.0%})",
            f"  loads {stats.loads}, failures {stats.failures}, evictions {stats.evictions}",
            f"  resident {stats.resident_bytes / mib:.1f} MiB of "
            f"{stats.total_bytes_limit / mib:.0f} MiB, pinned {stats.pinned_bytes / mib:.1f} MiB",
            f"  load latency mean {stats.load_latency_mean * 1e3:.2f} ms, "
            f"p95 {stats.load_latency_p95 * 1e3:.2f} ms",
            "  chunk states: "
            + ", ".join(f"{state.name} {count}" for state, count in stats.states.items()),
        ]
    )


def demo(directory: Path, size: int, total_bytes_limit: int, concurrency: int | None) -> int:
    """Read a few views of the sample store; returns 1 if any pixel differs from the generator."""
    path = _sample_store(directory, size)
    image = open_array(path, total_bytes_limit=total_bytes_limit, concurrency=concurrency)
    print(f"opened {path}")
    print(f"  shape {image.shape}, dtype {image.dtype}, chunks {image.chunks}")
    window = min(2048, size // 2)
    wrong = 0

    def check(view: ChunkedArray, data: np.ndarray, y: int, x: int) -> str:
        nonlocal wrong
        if np.array_equal(data, synthetic_region(y, x, data.shape)):
            return "pixels match the generator"
        wrong += 1
        return "WRONG PIXELS"

    try:
        # Two overlapping views (the second reuses cached chunks), then a distant one.
        for y, x in [(size // 8, size // 4), (size // 8 + 256, size // 4), (size // 2, 100)]:
            start = time.perf_counter()
            view = image[y : y + window, x : x + window]
            data = view.result(timeout=60)
            elapsed = (time.perf_counter() - start) * 1e3
            print(
                f"read [{y}:{y + window}, {x}:{x + window}] blocking in {elapsed:.1f} ms: "
                f"{len(view.chunk_refs())} chunks, mean {data.mean():.0f}, "
                f"{check(view, data, y, x)}"
            )
        y = x = size - window - 100
        view = image[y : y + window // 2, x : x + window // 2]
        start = time.perf_counter()
        partial = view.read_nonblocking()
        elapsed = (time.perf_counter() - start) * 1e3
        print(
            f"read [{y}:{y + window // 2}, {x}:{x + window // 2}] non-blocking: returned in "
            f"{elapsed:.2f} ms with {len(partial.missing)} of {len(view.chunk_refs())} "
            "chunks missing (shown as the fill value)"
        )
        partial.request.done.result(timeout=60)
        again = view.read_nonblocking()
        print(
            f"  view complete after {(time.perf_counter() - start) * 1e3:.1f} ms: "
            f"{check(view, again.data, y, x)}"
        )
        again.request.release()
        print("cache statistics:")
        print(_format_statistics(image.cache.statistics))
    finally:
        image.cache.close()
    return 1 if wrong else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="napari-lazy-zarr",
        description="View Zarr arrays far larger than memory, lazily, without blocking.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="read a generated sample store")
    demo_parser.add_argument(
        "--directory",
        type=Path,
        default=default_cache_dir(),
        help="where the sample store is generated and kept (default: %(default)s)",
    )
    demo_parser.add_argument(
        "--size", type=int, default=8192, help="side of the square sample image (pixels)"
    )
    demo_parser.add_argument(
        "--total-bytes-limit", type=int, default=256 << 20, help="cache capacity in bytes"
    )
    demo_parser.add_argument("--concurrency", type=int, default=None, help="loader threads")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.directory, args.size, args.total_bytes_limit, args.concurrency)
    return 2  # pragma: no cover - argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
