"""Benchmarks for napari-lazy-zarr (``python -m bench``; ``./dev bench``).

Each benchmark module exposes ``run(quick: bool) -> str``, which measures and
returns a Markdown section. The full run writes the sections into
``docs/benchmarks.md`` under a common header; ``--quick`` is a short smoke run
on small data that only prints.

This package holds the helpers the benchmarks share: where generated data
lives, interleaved timing, Markdown formatting, and the results file.
`bench.ab` is no benchmark of its own: it runs the engine and view benchmarks
on two revisions of the project, interleaved (``python -m bench ab``).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = [
    "DATA_DIR",
    "PREVIOUS",
    "RESULTS_FILE",
    "ROOT",
    "check_package",
    "environment_line",
    "interleaved",
    "markdown_table",
    "median_ms",
    "package_env",
    "previous_package",
    "worker_result",
    "write_section",
]

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(__file__).resolve().parent / ".data"
"""Generated stores (gitignored); each store is written once and reused."""
RESULTS_FILE = ROOT / "docs" / "benchmarks.md"

HEADER = """\
# Benchmarks

Measured on the development machine: **2 cores** (AMD EPYC, KVM guest), shared
with other work, so absolute numbers are noisy. To keep comparisons fair under
that noise, every table reports **medians of interleaved runs**: within one run,
the competing methods are timed alternately on the same inputs (the order rotates
per input, over several rounds), never one method's batch after another's.
Compare ratios within a table rather than absolute times across runs.

Reproduce with `./dev bench` (all benchmarks; rewrites this file) or
`./dev bench engine` (one benchmark). `./dev bench --quick` is a short smoke run on
small data that prints its tables and leaves this file alone. Generated data is
kept in `bench/.data/` and reused between runs.

`./dev bench ab -- A B` compares two revisions of this project instead (A/B, in
`bench/ab.py`): the engine and view benchmarks' key figures, each revision in a
fresh process per round, the rounds in ABBA order, reported as ratios B/A beside
control figures that show the machine's own noise; a full run writes its section
here, `--quick` only prints.
"""

_SECTION = re.compile(r"<!-- bench:(?P<name>[\w-]+) -->\n.*?<!-- /bench:(?P=name) -->\n", re.S)


@dataclass(frozen=True, slots=True)
class Window:
    """A viewport rectangle in (level-0) pixel coordinates."""

    y0: int
    x0: int
    h: int
    w: int

    @property
    def slices(self) -> tuple[slice, slice]:
        return slice(self.y0, self.y0 + self.h), slice(self.x0, self.x0 + self.w)

    def chunks(self, chunk: int) -> set[tuple[int, int]]:
        """The (row, column) grid positions of the chunks the window touches."""
        return {
            (cy, cx)
            for cy in range(self.y0 // chunk, (self.y0 + self.h - 1) // chunk + 1)
            for cx in range(self.x0 // chunk, (self.x0 + self.w - 1) // chunk + 1)
        }


def generated_store(
    path: Path, params: dict[str, Any], write: Callable[[], object], label: str
) -> Path:
    """`path`, written by `write()` on first use only; returns it.

    A marker file beside it holding `params` is written once the store is
    complete; a store without a matching marker (interrupted, or written with
    other parameters) is deleted and written again.
    """
    marker = path.with_suffix(".complete")
    if marker.exists() and path.is_dir() and json.loads(marker.read_text()) == params:
        return path
    marker.unlink(missing_ok=True)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{label}] generating {path} ...", flush=True)
    started = time.perf_counter()
    write()
    marker.write_text(json.dumps(params) + "\n")
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    print(
        f"[{label}] generated {path} ({size / 2**20:.0f} MiB) in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    return path


def median_ms(samples: Sequence[float]) -> float:
    """The median of `samples` (seconds), in milliseconds."""
    return statistics.median(samples) * 1e3


def interleaved[T](
    methods: dict[str, Callable[[T], float | list[float]]],
    cases: Sequence[T],
    rounds: int,
    *,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, list[float]]:
    """Time every method on every case, `rounds` times, interleaved.

    Each method callable does its own untimed preparation and returns the
    seconds its timed part took (or a list of samples, e.g. one per pan step).
    For each (round, case) the methods run one after another in an order
    rotated by one position each time, so no method always runs first (cold
    branch predictors, CPU frequency, a neighbour's load burst) or right after
    a particular other method.
    """
    names = list(methods)
    samples: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for round_index in range(rounds):
        for case in cases:
            shift = turn % len(names)
            for name in names[shift:] + names[:shift]:
                measured = methods[name](case)
                if isinstance(measured, list):
                    samples[name].extend(measured)
                else:
                    samples[name].append(measured)
            turn += 1
        if on_round is not None:
            on_round(round_index)
    return samples


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table; the first column left-aligned, the rest right-aligned."""
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join([":---"] + ["---:"] * (len(header) - 1)) + " |",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def _git_revision() -> str:
    try:
        revision = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return revision + ("+dirty src" if dirty else "")


def environment_line(packages: Sequence[str]) -> str:
    """One line naming the date, revision, machine and package versions of a run."""
    versions = ", ".join(f"{name} {_version(name)}" for name in packages)
    return (
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; revision {_git_revision()}; "
        f"{os.cpu_count()} CPUs ({platform.machine()}), Python {platform.python_version()}; "
        f"{versions}"
    )


PREVIOUS = "b5af8ec"
"""The revision before issue 24's work: the viewer benchmarks' A/B baseline."""


@contextlib.contextmanager
def previous_package(revision: str = PREVIOUS) -> Iterator[Path]:
    """`revision` checked out into a temporary worktree (`bench.ab.checked_out`), removed
    afterwards.

    A benchmark's worker process measures that revision's package with
    ``PYTHONPATH=<tree>/src:<this checkout>`` (this checkout's bench code, the
    old package) and reports ``napari_lazy_zarr.__file__``, which the parent
    checks: an editable install would otherwise win silently.
    """
    from bench.ab import checked_out  # bench.ab imports this package

    with checked_out([revision]) as (previous,):
        yield previous.root


def package_env(previous: Path | None = None) -> tuple[dict[str, str], Path]:
    """The environment of a benchmark's worker process and the package it must import:
    this checkout's, or with `previous` (a `previous_package` tree) that tree's, put
    first on ``PYTHONPATH`` before this checkout (whose bench code the worker runs)."""
    env = dict(os.environ)
    package = ROOT / "src"
    if previous is not None:
        package = previous / "src"
        env["PYTHONPATH"] = os.pathsep.join([str(package), str(ROOT)])
    return env, package


def check_package(result: dict[str, Any], package: Path, label: str) -> None:
    """Fail the run unless the worker's reported ``napari_lazy_zarr.__file__`` (`result`'s
    ``"package"``) is under `package` (from `package_env`)."""
    if Path(result["package"]) != (package / "napari_lazy_zarr").resolve():
        raise RuntimeError(f"{label}: imported {result['package']}, not {package}")


def write_section(name: str, body: str, path: Path = RESULTS_FILE) -> None:
    """Put `body` into the results file as section `name`, keeping the other sections.

    The file is the common header followed by sections delimited by
    ``<!-- bench:NAME -->`` / ``<!-- /bench:NAME -->`` markers; a section of the
    same name is replaced in place, a new one is appended.
    """
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    sections = {m["name"]: m.group(0) for m in _SECTION.finditer(existing)}
    sections[name] = f"<!-- bench:{name} -->\n{body.rstrip()}\n<!-- /bench:{name} -->\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = HEADER + "".join("\n" + section for section in sections.values())
    path.write_text(text, encoding="utf-8")


def worker_result(
    module: str,
    spec: dict[str, Any],
    *,
    output: Path,
    env: dict[str, str],
    timeout: float,
    what: str,
    prefix: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``python -m <module> <spec as JSON>`` in a fresh process; its JSON result.

    The worker writes its result to `output` (read, then deleted). A non-zero
    exit, or no result, raises naming `what` with the tail of the worker's
    standard error. `prefix` runs the process under another program (e.g.
    ``valgrind --tool=callgrind``).
    """
    import sys

    completed = subprocess.run(
        [*prefix, sys.executable, "-m", module, json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if completed.returncode != 0 or not output.exists():
        tail = "\n".join(completed.stderr.strip().splitlines()[-25:])
        raise RuntimeError(f"{what} failed with exit code {completed.returncode}:\n{tail}")
    result: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
    output.unlink()
    return result
