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
``view`` or ``steps`` (the view benchmark's local 4D steps alone), and ``quick``.
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
            [group, "view complete, from the open call", "s", False,
             _between(run, "open_started", "view_complete")],
            [group, "view complete, after open returned", "s", False,
             _between(run, "view_started", "view_complete")],
        ]  # fmt: skip
    if result is None:  # killed at its deadline
        return [[group, "viewer.open + first on_draw", "s", False, math.inf]]
    if case.kind == "open":
        return [
            [group, "viewer.open + first on_draw", "s", False, result["open"] + result["draw"]],
            [group, "home view complete, from the open call", "s", False,
             _between(run, "open_started", "home_complete")],
        ]  # fmt: skip
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


TASKS = {
    "identify": identify,
    "engine": measure_engine,
    "view": measure_view,
    "steps": measure_view,
}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    result = TASKS[spec["task"]](spec)
    Path(spec["output"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
