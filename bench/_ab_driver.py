"""The A/B driver: one revision's key figures, measured in a fresh process (see `bench.ab`).

`bench.ab` runs the *text* of this file with ``python -c TEXT SPEC`` in the
revision's temporary worktree, with ``PYTHONPATH=<worktree>/src:<worktree>``:
every import below then resolves to the revision under test, its package and
its bench code alike (`identify` reports where they came from). The revision may
be older than this file, so the driver uses only what `bench.engine` and
`bench.view_cycle` have had since 12a7b36, with the same signatures:
`Config`, `FULL`/`QUICK`, `DATASETS`, `ensure_store`, `viewport_windows`,
`pan_path` and `DatasetBench` with its seven section methods (each returns
``{method: [seconds, ...]}``; `fresh_open`, the eighth, since d6a326a, when
present); `data_root`, `ensure_plain`/`_pyramid`/`_volume`/`_warm_up`,
`warm_page_cache`, `serve`, `run_worker`, `_location` (since 973d4a0
`store_location`), `OURS`, `OPEN_LATENCY`, `Case` and the worker results' keys.
Nothing here formats a report: it writes
``{"figures": [[group, figure, unit, control, value], ...]}`` as JSON to the
spec's ``output`` file.

The spec (JSON) names a ``task``: ``identify`` (where the package and bench code
come from; also writes the data the benchmarks use once, and compiles the
revision's bytecode, so that no measured process pays for either), ``engine``
``view``, ``steps`` (the view benchmark's local 4D steps alone) or ``remote``, and
``quick``.

``remote`` (since issue 47) measures remote reads headless, through public calls every
revision since 7660ee2 has (`open_array`, `read_zarr`, `store_for` with ``get_sync``,
`bench.remote.ensure_store`/`pan_views`, `bench.shard_reads.ensure_store`/`windows`,
`bench.remote_stores.ensure_data`, `bench.http_plate._server_process`,
`tests.conformance.cases.write_plate`), the server in a process of its own.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

type Figure = list[Any]
"""``[group, figure, unit, control, value]``: ``control`` marks a figure whose code is
the same whatever the revision's package is (a gauge of the machine's noise)."""

ENGINE_FIGURES = (
    # (section, method, figure, unit, control)
    ("cold", "ours", "cold viewport: ours", "ms", False),
    ("cold", "raw", "cold viewport: raw decode", "ms", True),
    ("warm", "ours", "warm viewport: ours", "ms", False),
    ("warm", "memcpy", "warm viewport: memcpy", "ms", True),
    ("nonblocking", "return", "non-blocking request: returns", "ms", False),
    ("nonblocking", "complete", "non-blocking request: complete", "ms", False),
    ("planning", "chunk_refs", "planning: chunk_refs()", "ms", False),
    ("pan", "ours", "pan: ours, per step", "ms", False),
    ("per_chunk", "per chunk", "per-chunk overhead, 1 worker", "µs", False),
    ("gather", "ours, cold", "10,000-point gather: ours, cold", "ms", False),
    ("gather", "ours, warm", "10,000-point gather: ours, warm", "ms", False),
    ("fresh", "ours", "first view of a fresh store: ours", "ms", False),
    ("fresh", "raw", "first view of a fresh store: raw decode", "ms", True),
)
"""The engine benchmark's figures of ours (and two controls), per dataset."""
ENGINE_PAIRED = (
    # (section, method, reference, figure): the median of per-sample ratios
    ("cold", "ours", "raw", "cold viewport: ours / raw decode, paired"),
    ("warm", "ours", "memcpy", "warm viewport: ours / memcpy, paired"),
    ("fresh", "ours", "raw", "first view of a fresh store: ours / raw decode, paired"),
)
"""Ratios of ours to a control timed right beside it in the same process: what a
slower or busier machine moves less than it moves the times themselves."""


def _engine_config(quick: bool) -> Any:
    from dataclasses import replace

    from bench import engine

    if quick:
        return replace(engine.QUICK, windows=2, rounds=2, warm_rounds=2, pan_steps=3)
    # The A/B rounds repeat the whole measurement: fewer passes per process than the
    # engine benchmark's own run, over the same data and windows.
    return replace(engine.FULL, rounds=3, warm_rounds=6, pan_rounds=3)


def _engine_datasets(quick: bool) -> list[Any]:
    from bench import engine

    # Quick: the plain store only (a smoke test); full: the plain, sharded and v2 stores.
    return list(engine.DATASETS[:1] if quick else engine.DATASETS)


def _view_config(quick: bool) -> Any:
    from bench import view_cycle

    return view_cycle.QUICK if quick else view_cycle.FULL


def _view_cases(quick: bool, steps_only: bool = False) -> list[Any]:
    """Ours on: opening the pyramid over HTTP in a fresh napari (quick: only this); the
    plain array (the view target) and the pyramid over HTTP; the local 4D steps (the
    only case with `steps_only`)."""
    from bench.view_cycle import OPEN_LATENCY, Case

    if steps_only:
        return [Case("local", "volume")]
    config = _view_config(quick)
    opening = Case("open", "pyramid", OPEN_LATENCY, warm_up=False)
    if quick:
        return [opening]
    return [
        Case("remote", "plain", max(config.latencies), warm_up=True),
        Case("remote", "pyramid", min(config.latencies), warm_up=True),
        opening,
        Case("local", "volume"),
    ]


def identify(spec: dict[str, Any]) -> dict[str, Any]:
    """Where `napari_lazy_zarr` and `bench` come from; the data written, bytecode compiled."""
    import compileall

    import bench
    import napari_lazy_zarr
    from bench import engine, view_cycle

    root = Path(bench.__file__).resolve().parent.parent
    for folder in ("src", "bench", "tests/remote"):
        compileall.compile_dir(str(root / folder), quiet=1)
    compileall.compile_file(str(root / "tests" / "__init__.py"), quiet=1)
    quick = bool(spec["quick"])
    if "engine" in spec["names"]:
        config = _engine_config(quick)
        for dataset in _engine_datasets(quick):
            engine.ensure_store(config, dataset)
    if "remote" in spec["names"]:
        _remote_data(quick)
    if {"view", "steps"} & set(spec["names"]):
        config = _view_config(quick)
        view_cycle.ensure_plain(config)
        view_cycle.ensure_pyramid(config)
        view_cycle.ensure_volume(config)
        view_cycle.ensure_warm_up(config)
        if not quick:
            # The first napari process after a while reads napari's and Qt's files from
            # disk: this one, untimed, so that the first measured one does not.
            import napari.qt  # noqa: F401
    return {"package": napari_lazy_zarr.__file__, "bench": bench.__file__, "figures": []}


def measure_engine(spec: dict[str, Any]) -> dict[str, Any]:
    """`ENGINE_FIGURES` per dataset: the median of each method's samples (ms, µs)."""
    from bench import engine, median_ms

    quick = bool(spec["quick"])
    config = _engine_config(quick)
    windows = engine.viewport_windows(config)
    path = engine.pan_path(config)
    figures: list[Figure] = []
    for dataset in _engine_datasets(quick):
        measured = engine.DatasetBench(config, dataset, engine.ensure_store(config, dataset))
        try:
            measured.warm_page_cache([*windows, *path])
            measured.verify(windows)  # every method's pixels, before any timing
            sections = {
                "cold": measured.cold_viewport(windows),
                "warm": measured.warm_viewport(windows),
                "nonblocking": measured.nonblocking(windows),
                "planning": measured.planning(windows),
                "pan": measured.pan(path),
                "per_chunk": measured.per_chunk(windows),
                "gather": measured.gather(windows),
            }
            if hasattr(measured, "fresh_open"):  # since d6a326a: absent from older revisions
                sections["fresh"] = measured.fresh_open(windows)
        finally:
            measured.close()
        for section, method, figure, unit, control in ENGINE_FIGURES:
            if section not in sections:
                continue
            value = median_ms(sections[section][method])
            figures.append(
                [dataset.label, figure, unit, control, value * 1e3 if unit == "µs" else value]
            )
        for section, method, reference, figure in ENGINE_PAIRED:
            if section not in sections:
                continue
            samples = sections[section]
            paired = [x / y for x, y in zip(samples[method], samples[reference], strict=True)]
            figures.append([dataset.label, figure, "×", False, statistics.median(paired)])
    return {"figures": figures}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _view_figures(case: Any, run: Any) -> list[Figure]:
    from bench.view_cycle import _between

    if run.error is not None:
        raise RuntimeError(f"the view worker on {case.label} failed: {run.error}")
    result = run.result
    if result is not None:
        for name in ("check", "check_3d"):
            check = result.get(name)
            if check is not None and not check["ok"]:
                raise AssertionError(f"{case.label}: wrong pixels ({name}): {check}")
    group = f"ours, {case.label}"
    if case.kind == "remote":
        return [
            [
                group,
                "view complete, from the open call",
                "s",
                False,
                _between(run, "open_started", "view_complete"),
            ],
            [
                group,
                "view complete, after open returned",
                "s",
                False,
                _between(run, "view_started", "view_complete"),
            ],
        ]
    if result is None:  # killed at its deadline
        return [[group, "viewer.open + first on_draw", "s", False, math.inf]]
    if case.kind == "open":
        return [
            [group, "viewer.open + first on_draw", "s", False, result["open"] + result["draw"]],
            [
                group,
                "home view complete, from the open call",
                "s",
                False,
                _between(run, "open_started", "home_complete"),
            ],
        ]
    steps = result["steps"]

    def of(kinds: tuple[str, ...], name: str) -> list[float]:
        return [1e3 * step[name] for step in steps if step["kind"] in kinds]

    two, three = ("2D pan", "2D z", "2D t"), ("3D rotate", "3D t")
    return [
        [group, "2D steps: main-thread slicing, median", "ms", False, _median(of(two, "slicing"))],
        [group, "2D steps: main-thread slicing, max", "ms", False, max(of(two, "slicing"))],
        [group, "3D steps: main-thread slicing, max", "ms", False, max(of(three, "slicing"))],
        [group, "2D steps: longest stall, median", "ms", False, _median(of(two, "stall"))],
        [group, "2D steps: complete, median", "ms", False, _median(of(two, "complete"))],
        [group, "3D steps: complete, median", "ms", False, _median(of(three, "complete"))],
        [group, "3D steps: longest stall, median", "ms", False, _median(of(three, "stall"))],
        [group, "3D t: complete, median", "ms", False, _median(of(("3D t",), "complete"))],
        [group, "3D switch: complete", "ms", False, _median(of(("3D switch",), "complete"))],
        [group, "one 2D repaint (napari's)", "ms", True, 1e3 * result["paint_2d"]],
        [group, "one 3D repaint (napari's)", "ms", True, 1e3 * result["paint_3d"]],
    ]


def measure_view(spec: dict[str, Any]) -> dict[str, Any]:
    """Ours in napari on `_view_cases`: one worker process per case, as the view benchmark runs."""
    from tests.remote.server import FaultyServer

    from bench import view_cycle

    quick = bool(spec["quick"])
    config = _view_config(quick)
    root = view_cycle.data_root(config)
    view_cycle.warm_page_cache(root)
    figures: list[Figure] = []
    with (
        tempfile.TemporaryDirectory(prefix="ab-view-") as scratch,
        view_cycle.serve(root) as (server, _, _),
        FaultyServer(root) as warm_server,
    ):
        for run_id, case in enumerate(_view_cases(quick, spec["task"] == "steps")):
            server.faults.latency = case.latency
            locate = getattr(view_cycle, "store_location", None) or view_cycle._location
            location = locate(case, view_cycle.OURS, server.url, warm_server.url, root)
            run = view_cycle.run_worker(
                config,
                view_cycle.OURS,
                case,
                location=location,
                scratch=Path(scratch),
                run_id=run_id,
                wait_settled=False,
            )
            figures += _view_figures(case, run)
    return {"figures": figures}


REMOTE_LATENCY = 0.020  # seconds the server adds to each request (bench.remote's)
PLATE_LATENCY = 0.100  # an HCS plate's open over slow HTTP (bench.http_plate's)
CLIENT_THREADS = 32  # ranged or whole reads in flight through a store (the loaders for URLs)


def _remote_data(quick: bool) -> tuple[Any, Any, tuple[int, int], Any]:
    """The pyramid (`bench.remote`), the sharded store (`bench.shard_reads`), its size and
    shard, and the client workload's files (`bench.remote_stores`), written once."""
    from bench import remote, remote_stores, shard_reads

    config = remote.QUICK if quick else remote.FULL
    size, shard = (4096, 2048) if quick else (16384, 4096)
    return (
        remote.ensure_store(config),
        shard_reads.ensure_store(size, shard),
        (size, shard),
        remote_stores.ensure_data(remote_stores.QUICK if quick else remote_stores.FULL),
    )


def _cold_views(url: str, views: list[Any], path: str = "") -> list[float]:
    """Seconds each view took to read cold: a fresh open (not timed) per view."""
    import time

    from napari_lazy_zarr import open_array

    taken = []
    for view in views:
        array = open_array(url, path=path)
        try:
            begin = time.perf_counter()
            array[view.slices].result(timeout=300)
            taken.append(time.perf_counter() - begin)
        finally:
            array.cache.close()
    return taken


def _client_reads(url: str, data: Any) -> tuple[float, float]:
    """Seconds for the ranged reads, and for the whole-file reads, of `data` through the
    store `store_for` gives (its ``get_sync``), `CLIENT_THREADS` at once."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from zarr.abc.store import RangeByteRequest

    from napari_lazy_zarr.core.storage.local import store_for

    store, _ = store_for(url)
    times = []
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        calls = (
            [
                lambda r=r: store.get_sync("blob.bin", byte_range=RangeByteRequest(*r))
                for r in data.ranges
            ],
            [lambda k=k: store.get_sync(k) for k in sorted(data.files)],
        )
        for batch in calls:
            list(pool.map(lambda call: call(), batch[:2]))  # warm connections, untimed
            begin = time.perf_counter()
            found = list(pool.map(lambda call: call(), batch))
            times.append(time.perf_counter() - begin)
            if any(value is None for value in found):
                raise AssertionError(f"{url}: a read found nothing")
    return times[0], times[1]


def measure_remote(spec: dict[str, Any]) -> dict[str, Any]:
    """Remote reads of this revision: cold views of chunks and of shards over 20 ms (and
    chunks over 0 ms), a store's ranged and whole reads, an HCS plate over 100 ms."""
    import time

    import numpy as np
    from tests.conformance.cases import write_plate

    from bench import remote, remote_stores, shard_reads
    from bench.http_plate import _server_process
    from napari_lazy_zarr._reader import read_zarr

    quick = bool(spec["quick"])
    pyramid, sharded, (size, _), data = _remote_data(quick)
    config = remote.QUICK if quick else remote.FULL
    views = remote.pan_views(config)[:: 2 if quick else 3]
    figures: list[Figure] = []
    group = "remote"
    # First, before this process starts a thread: the server is forked (`serve_apart`, the
    # remote-clients benchmark's lean server, which reads only the range asked).
    counters = remote_stores.Counters()
    counters.latency = REMOTE_LATENCY
    with remote_stores.serve_apart(data.root, counters) as base:
        ranges, files = _client_reads(base, data)
    figures.append(
        [
            group,
            f"{len(data.ranges)} ranged reads, {CLIENT_THREADS} threads, 20 ms",
            "ms",
            False,
            1e3 * ranges,
        ]
    )
    figures.append(
        [
            group,
            f"{len(data.files)} whole files, {CLIENT_THREADS} threads, 20 ms",
            "ms",
            False,
            1e3 * files,
        ]
    )
    for latency in (REMOTE_LATENCY, 0.0):
        with _server_process(pyramid.parent, latency) as (base, _):
            taken = _cold_views(f"{base}/{pyramid.name}", views, path="0")
        figures.append(
            [
                group,
                f"cold {config.window}² view, 512² chunks, {latency * 1e3:.0f} ms",
                "ms",
                False,
                1e3 * statistics.median(taken),
            ]
        )
    with _server_process(sharded.parent, REMOTE_LATENCY) as (base, requests):
        before = requests()
        windows = shard_reads.windows(size, 2 if quick else 6)
        taken = _cold_views(f"{base}/{sharded.name}", windows)
        asked = (requests() - before) / len(windows)
    figures.append(
        [
            group,
            "cold 2048² view of a sharded array, 20 ms",
            "ms",
            False,
            1e3 * statistics.median(taken),
        ]
    )
    figures.append([group, "requests per sharded view (with the opens)", "", False, asked])
    with tempfile.TemporaryDirectory(prefix="ab-plate-") as folder:
        rows, columns = (2, 3) if quick else (8, 12)
        plate = write_plate(Path(folder), rows, columns, 1)
        with _server_process(plate.path.parent, PLATE_LATENCY) as (base, requests):
            before = requests()
            begin = time.perf_counter()
            layers = read_zarr(f"{base}/{plate.path.name}")
            opened = time.perf_counter() - begin
            coarsest = np.asarray(layers[0][0][-1])  # the mosaic's coarsest level, exact
            pixels = time.perf_counter() - begin
            asked = requests() - before
        if coarsest.size == 0:
            raise AssertionError("the plate's coarsest level is empty")
    plate_group = f"plate {rows}x{columns}, 100 ms"
    figures.append([plate_group, "read_zarr (the reader's open)", "ms", False, 1e3 * opened])
    figures.append([plate_group, "open + coarsest level read", "ms", False, 1e3 * pixels])
    figures.append([plate_group, "requests", "", False, asked])
    return {"figures": figures}


TASKS = {
    "identify": identify,
    "engine": measure_engine,
    "view": measure_view,
    "steps": measure_view,
    "remote": measure_remote,
}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    result = TASKS[spec["task"]](spec)
    Path(spec["output"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
