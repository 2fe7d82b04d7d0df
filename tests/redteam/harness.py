"""Running red-team cases: each in its own subprocess, bounded in time, its peak RSS measured.

A `Case` is a function of a `Context`. It builds its inputs (stores, files, a
server URL), calls `Context.begin` -- from there on it is timed and measured --
and then does what a user would: opens, reads, closes. It returns a line saying
what it saw when all was as it should be, raises `Finding` for what it saw
wrong (pixels that differ from the NumPy oracle, a call that did not return in
time), or lets the engine's exception escape, which the harness classifies.

Outcomes (`OUTCOMES`):

``ok``
    The case saw what it should: the oracle's pixels, or the behaviour it checks.
``clear-error``
    A `LazyZarrError` whose message names the case's path or URL (or, for
    argument checks, the builtin `TypeError`/`ValueError` naming the argument).
``hang``
    Over the case's wall-clock bound (or a call the case times, over its own bound).
``wrong-pixels``
    Data served that differs from what the store holds.
``raw-exception``
    Anything else escaping, or a crash of the subprocess.
``memory``
    The resident peak grew more than `MEMORY_SLACK` above the case's cache
    limit, or a `MemoryError` anywhere in the exception's chain.

Each case says which outcomes are acceptable (`Case.accept`).

How the bounds are enforced: the parent starts every case as a fresh process
forked from a ``multiprocessing`` fork server that has imported the engine
(never forked from pytest's threaded process), at most `WORKERS` at a time.
At `Context.begin` the child resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``), caps its address space (``RLIMIT_AS``) at its
current size plus `ADDRESS_SPACE_HEADROOM` so a runaway allocation fails
instead of swapping a shared machine, and arms a watchdog thread that reports
a hang, with the stuck threads' innermost frames, after the case's `bound`.
The parent kills a child that does not report within the bound plus a grace
period (a thread holding the GIL in C code can starve the watchdog). The
child leaves with ``os._exit``: threads stuck in storage must not hold it up.
"""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import re
import resource
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from napari_lazy_zarr.core import ChunkCache, ChunkedArray

Outcome = Literal["ok", "clear-error", "hang", "wrong-pixels", "raw-exception", "memory"]
OUTCOMES: tuple[Outcome, ...] = (
    "ok",
    "clear-error",
    "hang",
    "wrong-pixels",
    "raw-exception",
    "memory",
)

BOUND = 10.0  # seconds a case may take from `begin` (HTTP cases: `HTTP_BOUND`)
HTTP_BOUND = 12.0
GRACE = 5.0  # beyond the bound, before the parent kills a child whose watchdog did not report
BUILD_BACKSTOP = 180.0  # building inputs (the first bombs are compressed then cached)
CACHE_LIMIT = 16 << 20  # the cache limit a case sets unless it says otherwise
MEMORY_SLACK = 64 << 20  # resident growth allowed above the cache limit
ADDRESS_SPACE_HEADROOM = 3 << 29  # 1.5 GiB: a 512 MiB bomb is measured, not refused
WORKERS = 2


class Finding(Exception):
    """Raised by a case for what it observed: an outcome other than a raised error."""

    def __init__(self, outcome: Outcome, detail: str) -> None:
        super().__init__(detail)
        self.outcome: Outcome = outcome
        self.detail = detail


@dataclass(frozen=True)
class Case:
    """One red-team case: its id, its class of attack, what it does, and what is acceptable.

    `builtin` lists builtin exception types that count as a clear error when their
    message names `mentions` (argument validation).
    """

    id: str
    kind: str
    run: Callable[[Context], str] = field(compare=False)
    accept: frozenset[Outcome] = frozenset({"clear-error"})
    bound: float = BOUND
    cache_limit: int = CACHE_LIMIT
    builtin: tuple[type[BaseException], ...] = ()
    mentions: str = ""


@dataclass(frozen=True)
class Result:
    """What happened to one case."""

    case: str
    kind: str
    outcome: Outcome
    detail: str
    seconds: float
    peak_bytes: int
    accepted: bool


# ============================================================================
# In the child
# ============================================================================


def _status_value(key: str) -> int:
    """A ``kB`` field of /proc/self/status, in bytes (0 where there is no procfs)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _supports(function: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(function).parameters


class Context:
    """What a case runs with, in its subprocess: its directory, the server, the engine's knobs."""

    def __init__(self, case: Case, root: Path, server: str, connection: Any) -> None:
        self.case = case
        self.root = root
        self.server = server
        self._connection = connection
        self._send_lock = threading.Lock()
        self._sent = False
        self._begun: float | None = None
        self._rss_before = 0
        self._watchdog = threading.Event()

    # -- timing and measuring ----------------------------------------------

    def begin(self) -> None:
        """Inputs are built: start the clock, the memory cap and the peak-RSS measurement."""
        if self._begun is not None:
            return
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # reset VmHWM to the current resident size
        self._rss_before = _status_value("VmRSS")
        size = _status_value("VmSize")
        if size:
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            limit = size + ADDRESS_SPACE_HEADROOM
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        self._begun = time.perf_counter()
        self._connection.send(("begun",))
        threading.Thread(target=self._watch, name="redteam-watchdog", daemon=True).start()

    @property
    def elapsed(self) -> float:
        return 0.0 if self._begun is None else time.perf_counter() - self._begun

    @property
    def wait(self) -> float:
        """Seconds a blocking call may still wait and leave time to report (>= 0.5)."""
        return max(0.5, self.case.bound - 1.0 - self.elapsed)

    def peak_bytes(self) -> int:
        return max(0, _status_value("VmHWM") - self._rss_before) if self._begun else 0

    def resident_bytes(self) -> int:
        """Resident growth now since `begin` (VmRSS)."""
        return max(0, _status_value("VmRSS") - self._rss_before) if self._begun else 0

    def report(self, outcome: Outcome, detail: str) -> None:
        """Send the result (once; the watchdog and the case race for it) and leave."""
        with self._send_lock:
            if self._sent:
                return
            self._sent = True
            peak = self.peak_bytes()
            if outcome not in ("memory", "hang") and peak > self.case.cache_limit + MEMORY_SLACK:
                detail = (
                    f"resident peak +{peak >> 20} MiB over a {self.case.cache_limit >> 20} MiB "
                    f"cache limit; then {outcome}: {detail}"
                )
                outcome = "memory"
            self._connection.send(
                ("report", outcome, self.clean(detail), round(self.elapsed, 3), peak)
            )
        os._exit(0)

    def _watch(self) -> None:
        if self._watchdog.wait(self.case.bound):
            return
        self.report("hang", f"over the {self.case.bound:.0f} s bound; {_stuck_threads()}")

    def clean(self, text: str) -> str:
        text = text.replace(str(self.root), "<case>").replace(self.server, "<server>")
        return re.sub(r"[\s\x00-\x1f]+", " ", text).replace("|", "\\|")[:300]

    # -- the engine, configured for short bounds ------------------------------

    def cache(self, limit: int | None = None, *, concurrency: int = 2) -> ChunkCache:
        from napari_lazy_zarr.core import ChunkCache

        return ChunkCache(
            self.case.cache_limit if limit is None else limit, concurrency=concurrency
        )

    def open(
        self, location: str | Path, *, path: str = "", cache: ChunkCache | None = None
    ) -> ChunkedArray:
        """`open_array` with the case's short timeouts (where the API takes them)."""
        from napari_lazy_zarr.core import open_array

        options: dict[str, Any] = {}
        # `timeouts=` arrives with the bounded-load work; until then the defaults apply.
        if _supports(open_array, "timeouts"):
            options["timeouts"] = case_timeouts()
        return open_array(
            os.fspath(location),
            path=path,
            cache=cache if cache is not None else self.cache(),
            **options,
        )

    def url(self, store: str, behaviour: str = "plain") -> str:
        """The URL of `store` (in this case's directory) served with `behaviour`."""
        return f"{self.server}/{behaviour}/{self.root.name}/{store}"

    def read(self, array: ChunkedArray, selection: Any = ...) -> np.ndarray[Any, Any]:
        """`array[selection].result(...)` within the bound; a wait that runs out is a hang."""
        from napari_lazy_zarr.core import LazyZarrError

        wait = self.wait
        try:
            return array[selection].result(timeout=wait)
        except TimeoutError as error:
            if isinstance(error, LazyZarrError):
                raise
            raise Finding("hang", f"read still waiting after {wait:.1f} s") from error

    def expect(self, got: np.ndarray[Any, Any], expected: np.ndarray[Any, Any], what: str) -> str:
        """Compare with the oracle: a line for `ok`, or a `Finding` of wrong pixels."""
        same_kind = got.shape == expected.shape and got.dtype == expected.dtype
        if same_kind and np.array_equal(got, expected, equal_nan=got.dtype.kind in "fc"):
            return f"{what}: pixels match"
        differs = "?"
        if got.shape == expected.shape:
            wrong = got != expected
            differs = f"{int(wrong.sum())} of {got.size} differ"
            if wrong.any():
                index = tuple(int(i) for i in np.argwhere(wrong)[0])
                differs += f", e.g. {got[index]!r} where the store holds {expected[index]!r}"
        raise Finding(
            "wrong-pixels",
            f"{what}: got {got.shape} {got.dtype}, expected {expected.shape} {expected.dtype}; "
            + differs,
        )


def case_timeouts() -> Any:
    """Short request caps for every case: a stuck request fails in about a second."""
    from napari_lazy_zarr.core.settings import Timeouts

    return Timeouts(connect=0.5, read=0.5, total=1.0)


def _stuck_threads() -> str:
    """Where the case's threads are: each one's innermost frame and innermost frame of ours."""
    frames = sys._current_frames()
    parts = []
    for thread in threading.enumerate():
        if thread.name == "redteam-watchdog" or thread.ident not in frames:
            continue
        stack = traceback.extract_stack(frames[thread.ident])
        if not stack:
            continue
        inner = stack[-1]
        text = f"{thread.name} at {_short(inner.filename)}:{inner.lineno} ({inner.name})"
        ours = [f for f in stack if "napari_lazy_zarr" in f.filename]
        if ours and ours[-1] is not inner:
            text += f" via {_short(ours[-1].filename)}:{ours[-1].lineno} ({ours[-1].name})"
        parts.append(text)
    # The interesting threads first: the case's own and the engine's loaders.
    parts.sort(key=lambda p: not p.startswith(("MainThread", "lazy-zarr-load")))
    return "stuck: " + "; ".join(parts[:3])


def _short(filename: str) -> str:
    for marker in ("site-packages" + os.sep, "src" + os.sep, "lib" + os.sep + "python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def classify(error: BaseException, context: Context) -> tuple[Outcome, str]:
    """The outcome of an exception that escaped a case."""
    from napari_lazy_zarr.core import LazyZarrError

    chain = _chain(error)
    name = f"{type(error).__name__}: {error}"
    if any(isinstance(e, MemoryError) for e in chain):
        return "memory", f"MemoryError in the chain of {name}"
    if isinstance(error, LazyZarrError):
        text = str(error)
        if context.root.name in text or (context.case.mentions and context.case.mentions in text):
            return "clear-error", name
        return "raw-exception", f"does not name the path: {name}"
    case = context.case
    if case.builtin and isinstance(error, case.builtin):
        if case.mentions in str(error):
            return "clear-error", name
        return "raw-exception", f"does not name {case.mentions!r}: {name}"
    frames = traceback.extract_tb(chain[-1].__traceback__)
    where = f" [at {_short(frames[-1].filename)}:{frames[-1].lineno}]" if frames else ""
    return "raw-exception", f"{type(error).__module__}.{name}{where}"


def _child(case_id: str, root: str, server: str, connection: Any) -> None:
    from tests.redteam.cases import CASES_BY_ID

    case = CASES_BY_ID[case_id]
    context = Context(case, Path(root), server, connection)
    Path(root).mkdir(parents=True, exist_ok=True)
    try:
        detail = case.run(context)
        outcome: Outcome = "ok"
    except Finding as finding:
        outcome, detail = finding.outcome, finding.detail
    except BaseException as error:  # everything escaping is classified, MemoryError included
        outcome, detail = classify(error, context)
    context.begin()  # a case that failed while building is still reported
    context.report(outcome, detail)


# ============================================================================
# In the parent
# ============================================================================


def _slug(index: int, case_id: str) -> str:
    return f"{index:03d}-" + re.sub(r"[^A-Za-z0-9]+", "-", case_id).strip("-")[:60]


def _run_one(context: Any, case: Case, root: Path, server: str) -> Result:
    parent, child = context.Pipe()
    process = context.Process(target=_child, args=(case.id, str(root), server, child), daemon=True)
    started = time.perf_counter()
    process.start()
    child.close()
    try:
        message = parent.recv() if parent.poll(BUILD_BACKSTOP) else None
        if message is not None and message[0] == "begun":
            started = time.perf_counter()
            message = parent.recv() if parent.poll(case.bound + GRACE) else None
        if message is None:
            outcome: Outcome = "hang"
            detail, seconds, peak = "no report within the bound (killed)", case.bound + GRACE, 0
        else:
            _, outcome, detail, seconds, peak = message
    except EOFError:
        process.join(5)
        outcome, detail, peak = "raw-exception", f"crashed (exit code {process.exitcode})", 0
        seconds = time.perf_counter() - started
    finally:
        process.join(2)
        if process.is_alive():
            process.kill()
            process.join(5)
        parent.close()
    return Result(case.id, case.kind, outcome, detail, seconds, peak, outcome in case.accept)


def run_cases(
    cases: Sequence[Case], *, workdir: Path, server: str, workers: int = WORKERS
) -> dict[str, Result]:
    """Run `cases`, `workers` at a time, each in its own process and directory under `workdir`."""
    context = multiprocessing.get_context("forkserver")
    # A fork server that has imported the engine: each case starts in milliseconds.
    context.set_forkserver_preload(
        ["tests.redteam.cases", "napari_lazy_zarr.core", "zarr.storage", "obstore"]
    )
    roots = {case.id: workdir / _slug(i, case.id) for i, case in enumerate(cases)}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="redteam") as pool:
        futures = {
            case.id: pool.submit(_run_one, context, case, roots[case.id], server) for case in cases
        }
        return {case_id: future.result() for case_id, future in futures.items()}


# ============================================================================
# The summary
# ============================================================================


def summary(results: Iterable[Result], cases: Sequence[Case]) -> str:
    """Markdown: the figures, a table per class of attack, and a row per case."""
    rows = list(results)
    limits = {case.id: case.cache_limit for case in cases}
    count = {outcome: sum(r.outcome == outcome for r in rows) for outcome in OUTCOMES}
    over = max((r.peak_bytes - limits[r.case] for r in rows), default=0)
    failing = [r for r in rows if not r.accepted]
    lines = [
        "| figure | value |",
        "|---|---|",
        f"| cases | {len(rows)} |",
        f"| acceptable outcome / failing | {len(rows) - len(failing)} / {len(failing)} |",
        f"| ok (oracle pixels or the behaviour checked) | {count['ok']} |",
        f"| clear errors | {count['clear-error']} |",
        f"| hangs (target 0) | {count['hang']} |",
        f"| wrong pixels (target 0) | {count['wrong-pixels']} |",
        f"| raw exceptions | {count['raw-exception']} |",
        f"| memory (peak RSS > cache limit + 64 MiB) | {count['memory']} |",
        f"| largest peak RSS over the cache limit (target ≤ 64 MiB) | {max(0, over) >> 20} MiB |",
        "",
        "| class | cases | " + " | ".join(OUTCOMES) + " | failing |",
        "|---|---|" + "---|" * (len(OUTCOMES) + 1),
    ]
    kinds = list(dict.fromkeys(r.kind for r in rows))
    for kind in kinds:
        mine = [r for r in rows if r.kind == kind]
        counts = " | ".join(str(sum(r.outcome == o for r in mine)) for o in OUTCOMES)
        lines.append(f"| {kind} | {len(mine)} | {counts} | {sum(not r.accepted for r in mine)} |")
    lines += [
        "",
        "| case | outcome | acceptable | peak RSS | s | detail |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        peak = f"{r.peak_bytes / 2**20:.0f} MiB"
        lines.append(
            f"| `{r.case}` | {r.outcome} | {'yes' if r.accepted else '**no**'} | {peak} | "
            f"{r.seconds:.1f} | {r.detail} |"
        )
    return "\n".join(lines) + "\n"
