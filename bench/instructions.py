"""Instructions per chunk, counted under callgrind: the engine's per-chunk work, not timed.

``python -m bench instructions [--quick]`` (``./dev bench instructions``). Needs
``valgrind`` on the PATH.

Timings on this 2-core machine move 2x between identical runs, which hides a
change of 10-30 µs a chunk. An instruction count does not move: every read runs
on one thread (the cache's `InlineExecutor`, the raw reader's chunks one after
another), with ``PYTHONHASHSEED=0``, and callgrind counts the instructions
executed (``Ir``) inside the reads only (``--toggle-collect`` on the
``functools.reduce`` that runs them; the eviction between two reads runs in a
nested one, which toggles counting off). Two runs of the same code differ by
under 0.02 %.

Per dataset of the engine benchmark (`bench.engine`), one process each:

- *raw*: `bench.engine.RawReader`, reading, decoding (numcodecs) and copying only;
- *ours*: `ChunkedArray` over `open_zarr_source`, its cache evicted between reads;
- *ours <PREVIOUS>*: the same with the package of `bench.PREVIOUS` (a temporary
  worktree), the revision before issue 24's work.

The same windows are read in each (the engine's first 4 random 2048² windows,
1 in ``--quick``), twice untimed first (imports, pools, shard indexes). *beyond
raw* is (ours - raw) / chunks; it is split by where the instructions ran: the
codec libraries (blosc, lz4, zstd; the same work on both sides, up to the
library: imagecodecs or zstandard against numcodecs), the Python interpreter
(``libpython``), NumPy, the C library (``memcpy``, ``malloc``), the rest.
Instructions are not time (a cache miss costs more than an add), but Python's
bookkeeping is instructions, and what it costs shows here without noise.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import (
    PREVIOUS,
    check_package,
    environment_line,
    markdown_table,
    package_env,
    previous_package,
    worker_result,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["GROUPS", "group_of", "per_object", "run"]

WINDOWS_FULL = 4
WINDOWS_QUICK = 1
TIMEOUT = 900.0  # one process under callgrind: ~70 s for 4 full windows

GROUPS = ("codecs", "Python", "NumPy", "libc", "other")


def group_of(obj: str) -> str:
    """Where an object file's instructions count (`GROUPS`).

    >>> group_of("/usr/lib/x86_64-linux-gnu/libc.so.6")
    'libc'
    >>> group_of("/x/site-packages/imagecodecs.libs/libblosc-0efaad68.so.1.21.6")
    'codecs'
    >>> group_of("/x/numcodecs/zstd.cpython-313-x86_64-linux-gnu.so")
    'codecs'
    >>> group_of("/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0")
    'Python'
    """
    name = obj.rsplit("/", 1)[-1]
    if re.search(r"blosc|lz4|zstd|zlib|numcodecs|imagecodecs|zstandard", obj):
        return "codecs"
    if name.startswith(("libpython", "python")):
        return "Python"
    if "/numpy/" in obj:
        return "NumPy"
    if name.startswith(("libc.so", "libm.so", "ld-linux")):
        return "libc"
    return "other"


_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?)(?:\s+\[(.+)\])?\s*$")


def per_object(annotated: str) -> dict[str, int]:
    """Instructions per `GROUPS` entry from ``callgrind_annotate --inclusive=no`` output.

    A line without ``[object]`` is code inlined from a header (e.g. CPython's
    ``Include/object.h`` inside the interpreter loop): it counts where its file
    belongs, CPython's sources with the interpreter.

    >>> per_object(
    ...     "1,000 (50.00%)  ???:LZ4_decompress_safe [/a/liblz4.so.1]\\n"
    ...     "  600 (30.00%)  ceval.c:_PyEval_EvalFrameDefault [/b/libpython3.13.so.1.0]\\n"
    ...     "  100 ( 5.00%)  /b/Python-3.13.0/Include/object.h:_PyEval_EvalFrameDefault\\n"
    ...     "  300 (15.00%)  memmove.S:__memcpy_avx_unaligned_erms [/c/libc.so.6]\\n"
    ... )
    {'codecs': 1000, 'Python': 700, 'NumPy': 0, 'libc': 300, 'other': 0}
    """
    totals = dict.fromkeys(GROUPS, 0)
    for line in annotated.splitlines():
        found = _LINE.match(line)
        if not found or found[2] == "PROGRAM TOTALS":
            continue
        count = int(found[1].replace(",", ""))
        if found[3] is not None:
            totals[group_of(found[3])] += count
        elif re.search(r"/Python-[\d.]+/|python-build", found[2]):
            totals["Python"] += count
        else:
            totals["other"] += count
    return totals


def _count(method: str, label: str, quick: bool, previous: Path | None) -> dict[str, Any]:
    """One process under callgrind: its result and instructions per group."""
    env, package = package_env(previous)
    env["PYTHONHASHSEED"] = "0"
    spec = {"method": method, "dataset": label, "quick": quick}
    with tempfile.TemporaryDirectory(prefix="lazy-zarr-ir-") as folder:
        output, counts = Path(folder) / "result.json", Path(folder) / "callgrind.out"
        spec["output"] = str(output)
        result = worker_result(
            "bench.instructions",
            spec,
            output=output,
            env=env,
            timeout=TIMEOUT,
            what=f"{method} on {label}",
            prefix=(
                "valgrind",
                "--tool=callgrind",
                "--toggle-collect=functools_reduce",
                f"--callgrind-out-file={counts}",
            ),
        )
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(counts)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    check_package(result, package, f"{method} on {label}")
    result["groups"] = per_object(annotated)
    total = re.search(r"^\s*([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", annotated, re.MULTILINE)
    if total is None or int(total[1].replace(",", "")) != sum(result["groups"].values()):
        raise RuntimeError(f"{method} on {label}: the groups do not add up to the total")
    return result


def _worker(spec: dict[str, Any]) -> None:
    """Read the windows (the counted part runs inside `functools.reduce`); write the result."""
    import functools

    import numpy as np

    import napari_lazy_zarr
    from bench.engine import DATASETS, FULL, QUICK, RawReader, ensure_store, viewport_windows

    config = QUICK if spec["quick"] else FULL
    dataset = next(d for d in DATASETS if d.label == spec["dataset"])
    path = ensure_store(config, dataset)
    windows = viewport_windows(config)[: WINDOWS_QUICK if spec["quick"] else WINDOWS_FULL]

    class Inline:  # the raw reader's pool, on this thread
        def map(self, job: Any, items: Any) -> Any:
            return map(job, items)

    raw = RawReader(path, Inline())  # type: ignore[arg-type]
    if spec["method"] == "raw":
        out = np.empty((windows[0].h, windows[0].w), dtype=raw.dtype)

        def read(window: Any, counted: bool) -> np.ndarray[Any, Any]:
            return raw.read(window, out)
    else:
        from napari_lazy_zarr.core.cache.cache import ChunkCache
        from napari_lazy_zarr.core.executors import InlineExecutor
        from napari_lazy_zarr.core.reading.array import ChunkedArray
        from napari_lazy_zarr.core.sources.zarr import open_zarr_source

        cache = ChunkCache(4 << 30, executor=InlineExecutor())
        array = ChunkedArray(open_zarr_source(str(path)), cache)

        def read(window: Any, counted: bool) -> np.ndarray[Any, Any]:
            if counted:  # a nested reduce: callgrind stops counting inside it
                functools.reduce(lambda _, __: cache.evict_unpinned(), [0], None)
            else:
                cache.evict_unpinned()
            return np.asarray(array[window.slices].result())

    for window in windows:  # checked against the raw reader, not counted
        expected = raw.read(window, np.empty((window.h, window.w), dtype=raw.dtype)).copy()
        np.testing.assert_array_equal(read(window, False), expected)
        read(window, False)
    functools.reduce(lambda _, window: read(window, True), windows, None)
    chunks = sum(
        len(range(w.y0 // config.chunk, (w.y0 + w.h - 1) // config.chunk + 1))
        * len(range(w.x0 // config.chunk, (w.x0 + w.w - 1) // config.chunk + 1))
        for w in windows
    )
    Path(spec["output"]).write_text(
        json.dumps({"package": str(Path(napari_lazy_zarr.__file__).parent), "chunks": chunks}),
        encoding="utf-8",
    )


def _k(value: float) -> str:
    return f"{value / 1e3:,.0f}k"


def report(results: dict[str, dict[str, dict[str, Any]]], methods: Sequence[str]) -> str:
    """The Markdown section: instructions per chunk per method, and ours beyond raw by group."""

    def per_chunk(one: dict[str, Any], group: str | None = None) -> float:
        count = sum(one["groups"].values()) if group is None else one["groups"][group]
        return float(count) / one["chunks"]

    totals = markdown_table(
        ["dataset", *(f"{m} (per chunk)" for m in methods)],
        (
            [label, *(_k(per_chunk(by_method[m])) for m in methods)]
            for label, by_method in results.items()
        ),
    )
    rows = []
    for label, by_method in results.items():
        raw = by_method["raw"]
        for method in methods:
            if method != "raw":
                diffs = [per_chunk(by_method[method], g) - per_chunk(raw, g) for g in GROUPS]
                rows.append([label, method, _k(sum(diffs)), *(_k(d) for d in diffs)])
    beyond = markdown_table(["dataset", "method", "total", *GROUPS], rows)
    return f"{totals}\nBeyond raw, per chunk, by where the instructions ran:\n\n{beyond}"


def run(quick: bool = False) -> str:
    """Count every method on every dataset; the Markdown section."""
    from bench.engine import DATASETS, FULL, QUICK, ensure_store

    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        raise RuntimeError("bench instructions needs valgrind (callgrind) on the PATH")

    for dataset in DATASETS:  # written here, not under callgrind
        ensure_store(QUICK if quick else FULL, dataset)
    previous_label = f"ours {PREVIOUS} (previous)"
    methods = ["raw", "ours", previous_label]
    # Counts do not depend on the load: two processes at once on the 2 cores.
    with previous_package() as previous, ThreadPoolExecutor(2) as pool:
        trees = {"raw": None, "ours": None, previous_label: previous}
        futures = {
            (dataset.label, method): pool.submit(
                _count, "raw" if method == "raw" else "ours", dataset.label, quick, tree
            )
            for dataset in DATASETS
            for method, tree in trees.items()
        }
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for (label, method), future in futures.items():
            results.setdefault(label, {})[method] = future.result()
    windows = WINDOWS_QUICK if quick else WINDOWS_FULL
    return "\n".join(
        [
            "## Instructions per chunk (callgrind): the engine's per-chunk work, counted",
            "",
            environment_line(["numpy", "zarr", "numcodecs"]),
            "",
            f"The engine benchmark's stores, its first {windows} random 2048² window(s) "
            "read cold on one thread (ours: `InlineExecutor`, cache evicted between reads); "
            "instructions executed inside the reads (``Ir``, callgrind), divided by the "
            "chunks read. Deterministic: two runs of the same code differ by under 0.02 %. "
            "Generate with `./dev bench instructions` (needs valgrind); the code and the "
            "definitions are in `bench/instructions.py`.",
            "",
            report(results, methods),
            "",
            "Reading it: the *Python* column is the cache's and the source's bookkeeping "
            "(what issue 24's per-chunk target is about). *codecs* compares libraries, not "
            "work: ours decodes zstd with `zstandard` and blosc with imagecodecs, raw both "
            "with numcodecs; `zstandard`'s Huffman loop executes more instructions than "
            "numcodecs' yet took less time here (one 512² uint16 chunk into a reused "
            "buffer, medians of 15 interleaved passes: 646 µs against 689 µs). *libc* is "
            "mostly `memcpy` and `malloc`.",
        ]
    )


if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1].startswith("{"):  # a worker: its spec (`worker_result`)
        _worker(json.loads(sys.argv[1]))
    else:
        print(run(quick="--quick" in sys.argv[1:]))
