"""Run the benchmarks: ``python -m bench [NAME ...] [--quick]``.

With no NAME every benchmark runs. A full run writes its section of
``docs/benchmarks.md``; ``--quick`` runs on small data with fewer rounds and
only prints (it is a smoke test, its numbers mean little).

``python -m bench ab [--] [A [B]] [NAME ...] [--quick]`` compares two revisions
instead (`bench.ab`: the engine and view benchmarks, A and B interleaved).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from bench import RESULTS_FILE, write_section

if TYPE_CHECKING:
    from collections.abc import Callable


def _benchmarks() -> dict[str, Callable[[bool], str]]:
    from bench import (
        backends,
        dask_view,
        engine,
        http_plate,
        inspector,
        instructions,
        napari_pan,
        pan_remote,
        playback,
        remote,
        remote_stores,
        s3_plate,
        sample_startup,
        shard_reads,
        view_cycle,
        volume,
    )

    return {
        "engine": engine.run,
        "napari": napari_pan.run,
        "remote": remote.run,
        "view": view_cycle.run,
        "inspector": inspector.run,
        "playback": playback.run,
        "pan-remote": pan_remote.run,
        "volume": volume.run,
        "dask": dask_view.run,
        "shards": shard_reads.run,
        "backends": backends.run,
        "remote-stores": remote_stores.run,
        "sample": sample_startup.run,
        "s3-plate": s3_plate.run,
        "http-plate": http_plate.run,
        "instructions": instructions.run,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ab"]:  # its own options: `./dev bench ab -- A B engine`
        from bench import ab

        rest = argv[1:]
        return ab.main(rest[1:] if rest[:1] == ["--"] else rest)
    benchmarks = _benchmarks()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(benchmarks)}; "
        "or 'ab [--] [A [B]] [NAME ...]' to compare two revisions (python -m bench.ab -h)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short smoke run on small data; prints results, does not write docs/",
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in benchmarks]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r} (choose from {', '.join(benchmarks)})")
    for name in args.names or list(benchmarks):
        started = time.perf_counter()
        section = benchmarks[name](args.quick)
        elapsed = time.perf_counter() - started
        print(section)
        print(f"[bench] {name}: {elapsed:.0f} s in all", flush=True)
        if args.quick:
            print(f"[bench] --quick: {RESULTS_FILE} left unchanged", flush=True)
        else:
            write_section(name, section)
            print(f"[bench] wrote the {name!r} section of {RESULTS_FILE}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
