"""A/B: the engine and view-cycle benchmarks on two revisions, interleaved in one run.

``python -m bench.ab [A [B]] [NAME ...] [--rounds N] [--quick]``, or
``./dev bench ab -- [A [B]] [NAME ...]`` (under ``xvfb-run -a -s "-screen 0
1920x1080x24"`` for the view benchmark, which needs a display). A and B are git
revisions: A defaults to ``HEAD~1``, B to this checkout's working tree as it is
(uncommitted changes included); ``.`` also names the working tree. NAME is
``engine`` (`bench.engine`), ``view`` (`bench.view_cycle`) or ``steps`` (only the
view benchmark's local 4D steps, 2D and 3D: one napari session per process, for
a quicker verdict on them; never written to docs/) or ``remote`` (remote reads headless:
cold views over HTTP, sharded and not, a store's ranged and whole reads, an HCS plate over
100 ms; written to its own section, "A/B remote"); default engine and view.

How it measures:

- Each revision is checked out once into a temporary detached worktree (``git
  worktree add --detach``), removed at the end, also on an error or Ctrl-C. Its
  ``bench/.data`` is this checkout's (a symbolic link), so the stores are
  generated once for both.
- A measurement is one fresh process of this project's venv Python with
  ``PYTHONPATH=<worktree>/src:<worktree>`` and the worktree as its working
  directory, running the text of `bench._ab_driver` (``python -c``): the
  revision's package *and* its bench code are measured, and the driver uses only
  bench code that revisions since 12a7b36 have (see its docstring). A first
  process per revision checks that ``napari_lazy_zarr`` and ``bench`` are
  imported from the worktree, not from the venv's editable install, writes the
  data and compiles the bytecode.
- Rounds alternate the order ABBA: A, B, then B, A, then A, B, ...; in each round
  every benchmark measures both revisions once. Per figure the report gives the
  median over rounds of A and of B, the ratio of the medians B/A, and the
  spread: the lowest and highest ratio B/A of one round's pair.
- *Control* figures measure code that does not depend on the revision's package
  (numcodecs decoding the chunks itself, a NumPy copy, napari repainting): their
  ratios show how much the machine alone moved between the two sides.

A full run (5 rounds) writes its section ("A/B: <A> → <B>") into
``docs/benchmarks.md``; it takes tens of minutes, most of it the view
benchmark's napari sessions (4 per process: the plain array and the pyramid
over HTTP, opening the pyramid, the local 4D steps). ``--quick`` (2 rounds, the
engine's small data on one store, one napari session per process) only prints:
it is a smoke test of about 100 s of CPU time, under two minutes on an idle
machine (four at a load average of 5). On 2 shared cores, judge a ratio
against the control rows and the spread, and prefer a quiet machine and more
rounds (``--rounds 9``) for a verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bench import DATA_DIR, RESULTS_FILE, ROOT, environment_line, markdown_table, write_section

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["BENCHMARKS", "Revision", "main"]

BENCHMARKS: Final = {
    "engine": "bench/engine.py",
    "view": "bench/view_cycle.py",
    "steps": "bench/view_cycle.py",
    "remote": "bench/_ab_driver.py",
}
"""The benchmarks an A/B run can measure, and the code that defines their figures."""
WORKING_TREE: Final = "."
DRIVER: Final = Path(__file__).with_name("_ab_driver.py")
TARGET: Final = 1.05
"""Issue 21's acceptance: every ratio B/A within noise, at most 1.05x."""


@dataclass(frozen=True, slots=True)
class Revision:
    """One side of the comparison: what was asked for, and where it is checked out."""

    side: str
    """``A`` or ``B``."""
    name: str
    """The revision as given (``.``: the working tree)."""
    label: str
    """Its short commit (``+dirty``: a working tree with uncommitted changes in src/, bench/)."""
    root: Path
    """The worktree its processes run in."""


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def _short(name: str) -> str:
    try:
        return _git("rev-parse", "--short", "--verify", f"{name}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"bench.ab: {name!r} is not a revision of {ROOT}") from None


@contextlib.contextmanager
def checked_out(names: Sequence[str]) -> Iterator[list[Revision]]:
    """A `Revision` per name (sides A, B, ...), each in its own temporary worktree.

    ``.`` is this checkout itself. The worktrees are removed on the way out,
    whatever ended the run (the data folder is unlinked first, never deleted).
    """
    scratch = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    added: list[Path] = []
    try:
        revisions = []
        for side, name in zip("AB", names, strict=False):
            if name == WORKING_TREE:
                dirty = _git("status", "--porcelain", "--", "src", "bench")
                label = _short("HEAD") + ("+dirty" if dirty else "") + " (working tree)"
                revisions.append(Revision(side, name, label, ROOT))
                continue
            label = _short(name)
            root = scratch / side
            _git("worktree", "add", "--detach", "--quiet", str(root), label)
            added.append(root)
            if not (root / "bench").is_dir():
                raise SystemExit(f"bench.ab: revision {label} has no bench/")
            DATA_DIR.mkdir(parents=True, exist_ok=True)
            (root / "bench" / ".data").symlink_to(DATA_DIR, target_is_directory=True)
            revisions.append(Revision(side, name, label, root))
        yield revisions
    finally:
        for root in added:
            (root / "bench" / ".data").unlink(missing_ok=True)
            with contextlib.suppress(subprocess.CalledProcessError):
                _git("worktree", "remove", "--force", str(root))
        with contextlib.suppress(subprocess.CalledProcessError):
            _git("worktree", "prune")
        shutil.rmtree(scratch, ignore_errors=True)  # removes links, never follows them


def drive(revision: Revision, spec: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Run the driver's `spec` task in a fresh process of `revision`; its JSON result.

    The process (and any worker it starts) is its own process group, killed
    if it outlives `timeout` seconds or this process is interrupted.
    """
    with tempfile.TemporaryDirectory(prefix="bench-ab-run-") as folder:
        output, log = Path(folder) / "result.json", Path(folder) / "log.txt"
        env = dict(os.environ)
        env["PYTHONPATH"] = f"{revision.root / 'src'}{os.pathsep}{revision.root}"
        with open(log, "w", encoding="utf-8") as stream:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    DRIVER.read_text(encoding="utf-8"),
                    json.dumps({**spec, "output": str(output)}),
                ],
                cwd=revision.root,
                env=env,
                stdout=stream,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                process.wait(timeout=timeout)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
        if process.returncode != 0 or not output.exists():
            tail = "\n".join(log.read_text(encoding="utf-8").splitlines()[-30:])
            raise RuntimeError(
                f"bench.ab: {spec['task']} on {revision.side} ({revision.label}) failed "
                f"with exit code {process.returncode}:\n{tail}"
            )
        result: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
        return result


def identify(revision: Revision, names: Sequence[str], quick: bool) -> None:
    """Check that the revision's processes import its package and bench code, not others."""
    spec = {"task": "identify", "names": list(names), "quick": quick}
    found = drive(revision, spec, timeout=3600)  # the first one may write the data
    for what, folder in (("package", "src"), ("bench", "bench")):
        path = Path(found[what]).resolve()
        if not path.is_relative_to((revision.root / folder).resolve()):
            raise SystemExit(
                f"bench.ab: {revision.side}'s processes import {what} from {path}, "
                f"not from {revision.root / folder}"
            )
        print(f"[ab] {revision.side} ({revision.label}): {what} from {path}", flush=True)


type Key = tuple[str, str, str, str, bool]
"""(benchmark, group, figure, unit, control)."""


@dataclass(slots=True)
class Results:
    """Every round's value of every figure, per side (A, B)."""

    values: dict[Key, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, benchmark: str, side: str, figures: Sequence[Sequence[Any]]) -> None:
        for group, figure, unit, control, value in figures:
            key = (benchmark, str(group), str(figure), str(unit), bool(control))
            self.values.setdefault(key, {"A": [], "B": []})[side].append(float(value))


def order(round_index: int) -> tuple[str, str]:
    """The sides in round `round_index`: A, B; then B, A; then A, B; ... (ABBA)."""
    return ("A", "B") if round_index % 2 == 0 else ("B", "A")


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Facts about one run that the report states."""

    rounds: int
    quick: bool
    elapsed: float
    """Seconds spent measuring (the checks and data generation excluded)."""
    load_before: float
    load_after: float
    """The 1-minute load average before and after measuring."""


def measure(
    revisions: dict[str, Revision], names: Sequence[str], rounds: int, quick: bool
) -> tuple[Results, RunInfo]:
    """`rounds` ABBA rounds of every benchmark in `names`; the results, facts of the run."""
    results = Results()
    load_before = os.getloadavg()[0]
    if load_before > 1.0:
        print(
            f"[ab] note: the 1-minute load average is {load_before:.2f}: other work shares "
            "the CPUs, expect noisy ratios (the control rows show how noisy)",
            flush=True,
        )
    timeout = 600.0 if quick else 3600.0
    started = time.perf_counter()
    for round_index in range(rounds):
        for name in names:
            for side in order(round_index):
                revision = revisions[side]
                begin = time.perf_counter()
                found = drive(revision, {"task": name, "quick": quick}, timeout=timeout)
                results.add(name, side, found["figures"])
                print(
                    f"[ab] round {round_index + 1}/{rounds}: {name} on {side} "
                    f"({revision.label}) in {time.perf_counter() - begin:.0f} s",
                    flush=True,
                )
    elapsed = time.perf_counter() - started
    return results, RunInfo(rounds, quick, elapsed, load_before, os.getloadavg()[0])


def _value(value: float, unit: str) -> str:
    if math.isinf(value):
        return "killed"
    if math.isnan(value):
        return "n/a"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _ratio(value: float) -> str:
    if math.isinf(value):
        return "B killed"
    return "n/a" if math.isnan(value) else f"{value:.3f}x"


def _divide(b: float, a: float) -> float:
    """B/A; infinite when only B was killed; NaN when A was, or either is not positive
    (a difference such as the per-chunk overhead can be, under noise)."""
    if not (math.isfinite(a) and a > 0) or math.isnan(b) or b <= 0:
        return math.nan
    return b / a


def ratios(pair: dict[str, list[float]]) -> tuple[float, float, float, float, float]:
    """Median of A, median of B, their ratio B/A, the lowest and highest round's ratio."""
    a, b = (statistics.median(pair[side]) if pair[side] else math.nan for side in "AB")
    per_round = [_divide(y, x) for x, y in zip(pair["A"], pair["B"], strict=False)]
    finite = [r for r in per_round if math.isfinite(r)]
    low, high = (min(finite), max(finite)) if finite else (math.nan, math.nan)
    return a, b, _divide(b, a), low, high


def report(revisions: dict[str, Revision], results: Results, info: RunInfo) -> str:
    """The Markdown section: one table per benchmark, and the figures over the target."""
    a, b = revisions["A"], revisions["B"]
    lines = [
        f"## A/B: {a.label} → {b.label}",
        "",
        f"Run: {environment_line(['napari-lazy-zarr', 'numpy', 'zarr', 'napari'])} "
        f"(`bench/ab.py` from that checkout). A = `{a.name}` ({a.label}), B = `{b.name}` "
        f"({b.label}). {info.rounds} round{'s' * (info.rounds != 1)} in ABBA order; each "
        f"revision's benchmark ran in a fresh process per round, its own package and bench "
        f"code on `PYTHONPATH`"
        f"{' (--quick: small data, fewer cases)' if info.quick else ''}. Measured in "
        f"{info.elapsed:.0f} s; 1-minute load average {info.load_before:.2f} before, "
        f"{info.load_after:.2f} after (above 1 means other work shared the 2 cores).",
        "",
        "A and B: the median over rounds of the figure (itself the median of its samples "
        "within the round). B/A: the ratio of those medians; spread: the lowest and "
        "highest B/A of one round's pair. *control* rows measure code that does not depend "
        "on the revision's package: their ratios are the machine's noise between the two "
        "sides. Lower is better everywhere. Reproduce with "
        f"`./dev bench ab -- {a.name} {b.name}`.",
        "",
    ]
    over = []
    for name, where in BENCHMARKS.items():
        rows = []
        for key, pair in results.values.items():
            benchmark, group, figure, unit, control = key
            if benchmark != name:
                continue
            median_a, median_b, ratio, low, high = ratios(pair)
            flagged = not control and ratio > TARGET
            if flagged:
                over.append(f"{group}: {figure} ({_ratio(ratio)})")
            rows.append(
                [
                    group,
                    figure + (" (*control*)" if control else ""),
                    _value(median_a, unit),
                    _value(median_b, unit),
                    unit,
                    f"**{_ratio(ratio)}**" if flagged else _ratio(ratio),
                    f"{_ratio(low)} – {_ratio(high)}",
                ]
            )
        if not rows:
            continue
        lines += [
            f"### {name} (`{where}`)",
            "",
            markdown_table(["case", "figure", "A", "B", "unit", "B/A", "spread"], rows),
        ]
    checked = sum(not key[4] for key in results.values)
    lines.append(
        f"Ratios over {TARGET:.2f}x: {len(over)} of {checked} figures"
        + (": " + "; ".join(over) + "." if over else ".")
    )
    return "\n".join(lines) + "\n"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ab",
        description=(__doc__ or "").split("\n\n")[0],
        epilog=f"benchmarks: {', '.join(BENCHMARKS)}; '.' is the working tree",
    )
    parser.add_argument(
        "args",
        nargs="*",
        metavar="A B NAME",
        help="revision A (default HEAD~1), revision B (default: the working tree), "
        "then the benchmarks (default: all)",
    )
    parser.add_argument("--rounds", type=int, help="ABBA rounds (default 5; --quick: 2)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 rounds on small data and fewer cases; prints results, does not write docs/",
    )
    args = parser.parse_args(argv)
    revisions = [arg for arg in args.args if arg not in BENCHMARKS]
    names = [arg for arg in args.args if arg in BENCHMARKS]
    if len(revisions) > 2:
        parser.error(f"at most two revisions (A, B), got {revisions}")
    if args.args[: len(revisions)] != revisions:
        parser.error("the revisions come before the benchmark names")
    args.revisions = revisions + ["HEAD~1", WORKING_TREE][len(revisions) :]
    args.names = names or ["engine", "view"]
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if {"view", "steps"} & set(args.names) and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        parser.error(
            "the view benchmark needs a display: run under "
            "xvfb-run -a -s '-screen 0 1920x1080x24' (or name only 'engine')"
        )
    return args


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: workers killed, worktrees removed


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _terminate)
    with checked_out(args.revisions) as checkouts:
        revisions = {revision.side: revision for revision in checkouts}
        for revision in checkouts:
            identify(revision, args.names, args.quick)
        results, info = measure(revisions, args.names, args.rounds, args.quick)
    section = report(revisions, results, info)
    print(section)
    if args.quick or "steps" in args.names:
        why = "--quick" if args.quick else "steps"
        print(f"[ab] {why}: {RESULTS_FILE} left unchanged", flush=True)
    else:
        key = "ab-remote" if args.names == ["remote"] else "ab"
        write_section(key, section)
        print(f"[ab] wrote the '{key}' section of {RESULTS_FILE}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
