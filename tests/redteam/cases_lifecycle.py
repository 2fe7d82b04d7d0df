"""Lifecycle under stuck storage, stale pixels after a rewrite, torn reads, eviction cost."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.redteam.harness import HTTP_BOUND, Case, Context, Finding, Outcome
from tests.redteam.stores import ramp, zarr_array

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from napari_lazy_zarr.core import ChunkCache, ChunkedArray

LIFECYCLE = "lifecycle"
STALE = "stale pixels"
TORN = "torn reads"
EVICTION = "eviction cost"
SHAPE, CHUNKS = (64, 64), (32, 32)
CLOSE_BOUND = 1.0  # close() returns within this, whatever storage does
WAKE_BOUND = 3.0  # a thread blocked in result() is woken within this after close()
EXIT_BOUND = 3.0  # an interpreter with loads in flight exits within this after its last line
OTHER_VIEW_BOUND = 3.0  # another view's chunk is served within this beside a stuck one


# -- stuck storage ---------------------------------------------------------------------


def _loading(cache: ChunkCache) -> threading.Event:
    """An event set once any chunk of `cache` is LOADING."""
    from napari_lazy_zarr.core import ChunkState

    started = threading.Event()

    def seen(events: tuple[Any, ...]) -> None:
        if any(event.current is ChunkState.LOADING for event in events):
            started.set()

    cache.state_changed.connect(seen)
    started.callback = seen  # type: ignore[attr-defined]  # keep the slot alive
    return started


def _blocking(context: Context, cache: ChunkCache) -> ChunkedArray:
    """A source whose reads never return (Python code blocked: not cancellable)."""
    from napari_lazy_zarr.core import ChunkedArray, FunctionSource

    gate = threading.Event()

    def never(box: Any) -> np.ndarray[Any, Any]:
        gate.wait(600)
        return np.zeros(box.shape, "u2")

    source = FunctionSource(never, shape=SHAPE, dtype="u2", chunks=CHUNKS, name="never returns")
    return ChunkedArray(source, cache)


def _http(behaviour: str) -> Callable[[Context, ChunkCache], ChunkedArray]:
    """A store served with `behaviour`, opened with the engine's default timeouts."""

    def make(context: Context, cache: ChunkCache) -> ChunkedArray:
        from napari_lazy_zarr.core import open_array

        zarr_array(context.root / "a.zarr", ramp(SHAPE), CHUNKS)
        return open_array(context.url("a.zarr", behaviour), cache=cache)

    return make


_STUCK: dict[str, Callable[[Context, ChunkCache], ChunkedArray]] = {
    "HTTP accepts and never answers": _http("chunk-silent"),
    "HTTP drips a byte every 0.2 s": _http("chunk-drip"),
    "a Python source that never returns": _blocking,
}


def _start_stuck(
    context: Context, make: Callable[[Context, ChunkCache], ChunkedArray], concurrency: int = 2
) -> tuple[ChunkCache, ChunkedArray]:
    cache = context.cache(concurrency=concurrency)
    stuck = make(context, cache)
    loading = _loading(cache)
    context.begin()
    stuck.read_nonblocking(requester="stuck")
    if not loading.wait(context.wait / 2):
        raise Finding("hang", "the stuck load never started")
    return cache, stuck


def _timed(call: Callable[[], object], bound: float) -> float | None:
    """Seconds `call` took in a daemon thread, None if still running after `bound`."""
    started = time.perf_counter()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(bound)
    return None if thread.is_alive() else time.perf_counter() - started


def _close_while_stuck(
    make: Callable[[Context, ChunkCache], ChunkedArray],
) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        cache, _ = _start_stuck(context, make)
        seconds = _timed(cache.close, 3 * CLOSE_BOUND)
        if seconds is None or seconds > CLOSE_BOUND:
            took = "still running after 3 s" if seconds is None else f"took {seconds:.1f} s"
            raise Finding("hang", f"close() {took} (bound {CLOSE_BOUND:.0f} s)")
        return f"close() returned in {seconds:.2f} s"

    return run


def _woken_by_close(
    make: Callable[[Context, ChunkCache], ChunkedArray],
) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        from napari_lazy_zarr.core import LazyZarrError

        cache, stuck = _start_stuck(context, make)
        outcome: dict[str, Any] = {}

        def wait() -> None:
            try:
                outcome["value"] = stuck.result()  # no timeout: only close() can end it
            except BaseException as error:
                outcome["error"] = error

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        threading.Thread(target=cache.close, daemon=True).start()
        waiter.join(WAKE_BOUND)
        if waiter.is_alive():
            raise Finding("hang", f"result() still blocked {WAKE_BOUND:.0f} s after close()")
        error = outcome.get("error")
        if error is None:
            raise Finding("wrong-pixels", "result() returned data no storage gave")
        if not isinstance(error, LazyZarrError):
            raise Finding("raw-exception", f"woken with {type(error).__name__}: {error}")
        return f"woken with {type(error).__name__}: {error}"

    return run


_EXIT_SCRIPT = """
import sys, threading
import numpy as np
from napari_lazy_zarr.core import ChunkCache, ChunkedArray, ChunkState, FunctionSource, open_array

cache = ChunkCache(16 << 20, concurrency=2)
loading = threading.Event()
cache.state_changed.connect(
    lambda events: any(e.current is ChunkState.LOADING for e in events) and loading.set()
)
if sys.argv[1] == "blocking":
    gate = threading.Event()
    def never(box):
        gate.wait(600)
        return np.zeros(box.shape, "u2")
    array = ChunkedArray(FunctionSource(never, shape=(64, 64), dtype="u2", chunks=(32, 32)), cache)
else:
    array = open_array(sys.argv[1], cache=cache)
array.read_nonblocking()
loading.wait(20)
print("ready" if loading.is_set() else "never loading", flush=True)
"""


def exits_promptly(context: Context, script: list[str], what: str) -> str:
    """Run ``python -c *script`` (which prints "ready" once `what` is in flight, then
    ends): its interpreter must exit within `EXIT_BOUND` of that line."""
    process = subprocess.Popen(
        [sys.executable, "-c", *script],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        # The interpreter's start and the script's setup are not timed (importing dask and
        # the package took over 10 s on a loaded CI runner); the parent's build backstop
        # bounds them. The clock starts at "ready".
        line = process.stdout.readline().strip()
        context.begin()
        if line != "ready":
            raise Finding("hang", f"{what} never started ({line!r})")
        started = time.perf_counter()
        try:
            process.wait(EXIT_BOUND)
        except subprocess.TimeoutExpired:
            raise Finding(
                "hang",
                f"the interpreter still runs {EXIT_BOUND:.0f} s after its last line "
                f"({what} in flight)",
            ) from None
        return f"exited in {time.perf_counter() - started:.2f} s (code {process.returncode})"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def _exit_in_flight(target: str) -> Callable[[Context], str]:
    """A fresh interpreter starts a stuck load, then ends its script: it must exit promptly."""

    def run(context: Context) -> str:
        argument = target
        if target != "blocking":
            zarr_array(context.root / "a.zarr", ramp(SHAPE), CHUNKS)
            argument = context.url("a.zarr", target)
        return exits_promptly(context, [_EXIT_SCRIPT, argument], "the stuck load")

    return run


def _other_view(
    make: Callable[[Context, ChunkCache], ChunkedArray], other_over_http: bool
) -> Callable[[Context], str]:
    """Concurrency 1: a chunk of another view is served while one load is stuck."""

    def run(context: Context) -> str:
        from napari_lazy_zarr.core import LazyZarrError

        expected = ramp(SHAPE, salt=1)
        zarr_array(context.root / "other.zarr", expected, CHUNKS)
        cache, _ = _start_stuck(context, make, concurrency=1)
        other = context.open(
            context.url("other.zarr") if other_over_http else context.root / "other.zarr",
            cache=cache,
        )
        try:
            data = other[...].result(timeout=OTHER_VIEW_BOUND)
        except TimeoutError as error:
            if isinstance(error, LazyZarrError):
                raise
            raise Finding(
                "hang",
                f"another view waited {OTHER_VIEW_BOUND:.0f} s behind one stuck chunk "
                "(concurrency 1)",
            ) from error
        return context.expect(data, expected, "the other view")

    return run


def _read_after_close(context: Context) -> str:
    zarr_array(context.root / "a.zarr", ramp(SHAPE), CHUNKS)
    context.begin()
    array = context.open(context.root / "a.zarr")
    array.cache.close()
    data = context.read(array)
    raise Finding("wrong-pixels", f"a closed cache served {data.shape} data")


def _lifecycle_cases() -> Iterator[Case]:
    for label, make in _STUCK.items():
        yield Case(
            f"close() while a load is stuck ({label})",
            LIFECYCLE,
            _close_while_stuck(make),
            accept=frozenset({"ok"}),
            bound=HTTP_BOUND,
        )
        yield Case(
            f"a thread blocked in result() is woken by close() ({label})",
            LIFECYCLE,
            _woken_by_close(make),
            accept=frozenset({"ok"}),
            bound=HTTP_BOUND,
        )
    for label, target in (
        ("HTTP accepts and never answers", "chunk-silent"),
        ("HTTP drips", "chunk-drip"),
        ("a Python source that never returns", "blocking"),
    ):
        yield Case(
            f"an interpreter with loads in flight exits ({label})",
            LIFECYCLE,
            _exit_in_flight(target),
            accept=frozenset({"ok"}),
            bound=HTTP_BOUND + 8,  # a fresh interpreter imports the engine first
        )
    for label, make, over_http in (
        ("HTTP silent; other view local", _STUCK["HTTP accepts and never answers"], False),
        ("HTTP silent; other view over HTTP", _STUCK["HTTP accepts and never answers"], True),
        ("Python source never returns; other view local", _blocking, False),
    ):
        yield Case(
            f"concurrency 1, one stuck chunk: another view is served ({label})",
            LIFECYCLE,
            _other_view(make, over_http),
            accept=frozenset({"ok"}),
            bound=HTTP_BOUND,
        )
    yield Case(
        "a read after close() raises CacheClosedError",
        LIFECYCLE,
        _read_after_close,
        mentions="closed",
    )


# -- stale pixels ---------------------------------------------------------------------


def _age(store: Path, seconds: float) -> None:
    """Date every file of `store` `seconds` back: it was written a while before it is read."""
    when = time.time() - seconds
    for folder, _, names in os.walk(store):
        for name in names:
            os.utime(os.path.join(folder, name), (when, when))


def _stale(
    zarr_format: int, shards: tuple[int, int] | None, change: str, *, http: bool = False
) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        import zarr

        store = context.root / "s.zarr"
        old = ramp(SHAPE)
        zarr_array(store, old, CHUNKS, zarr_format=zarr_format, shards=shards)
        _age(store, 60)
        location = context.url("s.zarr") if http else store
        context.begin()
        cache = context.cache()
        context.expect(context.read(context.open(location, cache=cache)), old, "first open")
        new: np.ndarray[Any, Any]
        if change == "uint16 -> float32":
            new = (ramp(SHAPE, salt=1).astype("f4") / 65_536 + 0.5).astype("f4")
        else:
            new = ramp(SHAPE, salt=1)
        if change == "rewritten in place":
            zarr.open_array(str(store), mode="r+")[...] = new
        else:
            zarr_array(store, new, CHUNKS, zarr_format=zarr_format, shards=shards, overwrite=True)
        again = context.read(context.open(location, cache=cache))
        return context.expect(again, new, f"reopened after the store was {change}")

    return run


def _stale_cases() -> Iterator[Case]:
    layouts = {"v2": (2, None), "v3": (3, None), "v3 sharded": (3, SHAPE)}
    for label, (zarr_format, shards) in layouts.items():
        for change in ("rewritten", "rewritten in place", "uint16 -> float32"):
            yield Case(
                f"{label} store {change}, reopened through a shared cache",
                STALE,
                _stale(zarr_format, shards, change),
                accept=frozenset({"ok"}),
            )
    for change in ("rewritten in place", "uint16 -> float32"):
        yield Case(
            f"v3 store over HTTP {change}, reopened through a shared cache",
            STALE,
            _stale(3, None, change, http=True),
            accept=frozenset({"ok"}),
            bound=HTTP_BOUND,
        )


# -- torn reads -----------------------------------------------------------------------


_TORN_SECONDS = 1.5
_REST = 0.1  # seconds a writer "in two writes" leaves a whole version on disk


def _torn(
    zarr_format: int,
    shards: tuple[int, int] | None,
    readers: int,
    writer: str,
    pause: float = 0.0,
    *,
    checksum: bool = False,
) -> Callable[[Context], str]:
    """A writer rewrites an uncompressed chunk, A, B, A, ..., while readers read it.

    `writer` is ``"zarr"`` (zarr-python's own writes: a temporary file renamed
    over the chunk), ``"in place"`` (one ``write`` of the whole file over the old
    bytes, same size, nonstop), or ``"in two writes"`` (the first half, `pause`
    seconds, the second half, then a rest of `_REST` seconds: between its writes
    the file is half old, half new, at rest -- a writer descheduled mid-rewrite).
    `checksum` adds zarr's ``crc32c`` codec (v3). In-place writers may make a read
    a clear error (the file kept changing, or its checksum does not match), never
    torn pixels; zarr-python's atomic writes must always be read whole. Without a
    checksum, two writes less than `SETTLE_SECONDS` apart are the promise: a torn
    read during a rewrite the writer's thread was held up past that (the GIL, a
    busy machine: 34-39 ms for a 30 ms pause here) is reported, not a finding.
    """

    def run(context: Context) -> str:
        import zarr

        from napari_lazy_zarr.core import LazyZarrError
        from napari_lazy_zarr.core.storage.files import SETTLE_SECONDS

        store = context.root / "t.zarr"
        chunks = (32, 32) if shards else SHAPE
        oracles = {"A": ramp(SHAPE, salt=0), "B": ramp(SHAPE, salt=1)}
        path = store / ("0.0" if zarr_format == 2 else "c/0/0")
        encoded = {}
        for name in ("B", "A"):  # A stays on disk
            zarr_array(
                store,
                oracles[name],
                chunks,
                zarr_format=zarr_format,
                shards=shards,
                overwrite=True,
                compressors=[zarr.codecs.Crc32cCodec()] if checksum else None,
            )
            encoded[name] = path.read_bytes()
        assert len(encoded["A"]) == len(encoded["B"]), "versions must be the same size"
        stop = threading.Event()
        gaps: list[float] = []  # seconds from each rewrite's first write (mtime) to its second
        late: list[tuple[float, float]] = []  # those whose writes came the window apart or more
        reads: list[tuple[float, float, str]] = []  # (began, ended, what was seen)
        first_error: list[str] = []

        def write() -> None:
            target = zarr.open_array(str(store), mode="r+")
            turn = 0
            while not stop.is_set():
                name = "BA"[turn % 2]
                if writer == "zarr":
                    target[...] = oracles[name]
                elif writer == "in place":
                    handle = os.open(path, os.O_WRONLY)
                    try:
                        os.write(handle, encoded[name])
                    finally:
                        os.close(handle)
                elif writer == "truncate, then rewrite":
                    handle = os.open(path, os.O_WRONLY | os.O_TRUNC)  # empty from here
                    try:
                        stop.wait(pause)
                        os.write(handle, encoded[name])
                    finally:
                        os.close(handle)
                    stop.wait(_REST)
                else:
                    half = len(encoded[name]) // 2
                    handle = os.open(path, os.O_WRONLY)
                    try:
                        began = time.monotonic()
                        os.pwrite(handle, encoded[name][:half], 0)
                        first = os.fstat(handle).st_mtime_ns
                        stop.wait(pause)
                        os.pwrite(handle, encoded[name][half:], half)
                        # The engine's window starts at the first write's mtime: a writer
                        # descheduled (GIL, a busy machine) past it is beyond the promise.
                        apart = (time.time_ns() - first) / 1e9
                        if apart >= SETTLE_SECONDS:
                            late.append((began, time.monotonic()))
                        gaps.append(apart)
                    finally:
                        os.close(handle)
                    stop.wait(_REST)
                turn += 1

        context.begin()
        cache = context.cache(1 << 20)
        array = context.open(store, cache=cache)
        counts: Counter[str] = Counter()
        lock = threading.Lock()
        deadline = time.monotonic() + _TORN_SECONDS

        def whole(got: np.ndarray[Any, Any]) -> str:
            return next((n for n, o in oracles.items() if np.array_equal(got, o)), "torn")

        def per_chunk(got: np.ndarray[Any, Any]) -> str:
            # The inner chunks of a shard are read (and cached) one by one, each from one
            # version of the file: each must be whole, A or B. A view mixing versions
            # across chunks is what any chunked reader shows during a rewrite.
            names = set()
            for rows in range(0, SHAPE[0], chunks[0]):
                for cols in range(0, SHAPE[1], chunks[1]):
                    box = (slice(rows, rows + chunks[0]), slice(cols, cols + chunks[1]))
                    names.add(whole_block(got[box], box))
            return "torn" if "torn" in names else min(names)

        def whole_block(got: np.ndarray[Any, Any], box: tuple[slice, slice]) -> str:
            return next((n for n, o in oracles.items() if np.array_equal(got, o[box])), "torn")

        classify = per_chunk if shards else whole

        def read() -> None:
            while time.monotonic() < deadline:
                began = time.monotonic()
                try:
                    seen = classify(array.result(timeout=context.wait))
                except LazyZarrError as error:
                    seen = "error"
                    first_error.append(f"{type(error).__name__}: {str(error)[-160:]}")
                    cache.retry_failed()  # a user's retry: FAILED stays FAILED until then
                cache.evict_unpinned()  # the next read goes to the file again
                with lock:
                    counts[seen] += 1
                    reads.append((began, time.monotonic(), seen))

        threads = [threading.Thread(target=read, daemon=True) for _ in range(readers)]
        writing = threading.Thread(target=write, daemon=True)
        writing.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(context.wait)
        stop.set()
        writing.join(context.wait)
        total = sum(counts.values())
        text = (
            f"{total} reads: {counts['A']} A, {counts['B']} B, {counts['error']} clear errors, "
            f"{counts['torn']} torn"
        )
        if writer == "truncate, then rewrite" and counts["error"]:
            # The empty file lasts less than the settle window: read again, never failed.
            raise Finding("raw-exception", text + f"; first error: {first_error[0]}")
        if writer == "in two writes" and not checksum:  # a checksum catches any pause
            beyond = _beyond_the_window(reads, late)
            text += (
                f"; writes {min(gaps, default=0) * 1e3:.0f}-{max(gaps, default=0) * 1e3:.0f} ms "
                f"apart, {len(late)} of {len(gaps)} rewrites {SETTLE_SECONDS * 1e3:.0f} ms or "
                f"more (beyond the promise), {beyond} torn reads overlap those"
            )
            if counts["torn"] > beyond:
                raise Finding("wrong-pixels", text)
        elif counts["torn"]:
            raise Finding("wrong-pixels", text)
        if not total or (writer == "zarr" and not counts["A"] + counts["B"]):
            raise Finding("hang", "no read completed: " + text)
        return text

    return run


def _beyond_the_window(
    reads: list[tuple[float, float, str]], late: list[tuple[float, float]]
) -> int:
    """Torn reads that may have read a rewrite whose writes came `SETTLE_SECONDS` or more
    apart: beyond what the engine promises (storage/files.py), so not a finding.

    A read may serve chunks another reader loaded: loaded at most one read's length
    before it began (each reader evicts after each read). So a torn read overlaps a
    late rewrite if it began less than the longest read before the rewrite ended."""
    longest = max((ended - began for began, ended, _ in reads), default=0.0)
    return sum(
        seen == "torn" and any(start < ended and began - longest < end for start, end in late)
        for began, ended, seen in reads
    )


def _torn_cases() -> Iterator[Case]:
    ok: frozenset[Outcome] = frozenset({"ok"})
    table = {
        "v2 chunk rewritten by zarr-python while read": (2, None, 1, "zarr"),
        "v3 chunk rewritten by zarr-python while read": (3, None, 1, "zarr"),
        "v3 shard rewritten by zarr-python while read": (3, SHAPE, 1, "zarr"),
        "v2 chunk rewritten in place (one write each) while 4 threads read": (
            2,
            None,
            4,
            "in place",
        ),
    }
    for label, (zarr_format, shards, readers, writer) in table.items():
        yield Case(label, TORN, _torn(zarr_format, shards, readers, writer), accept=ok)
    # The promise that remains for in-place rewrites (storage/files.py SETTLE_SECONDS):
    # writes of one file less than 50 ms apart are never served torn, whatever the pause.
    for pause in (0.0, 0.005, 0.03):
        for zarr_format, shards in ((2, None), (3, (32, 32))):
            what = "shard" if shards else "chunk"
            label = (
                f"v{zarr_format} {what} rewritten in place in two writes "
                f"{pause * 1e3:.0f} ms apart while 2 threads read"
            )
            run = _torn(zarr_format, shards, 2, "in two writes", pause)
            yield Case(label, TORN, run, accept=ok)
    # A writer that truncates the file, then writes it whole 20 ms later (issue 50): the
    # empty file is one more version inside the window, read again, never a failed chunk.
    for zarr_format in (2, 3):
        label = (
            f"v{zarr_format} chunk truncated, then rewritten whole 20 ms later, "
            "while 2 threads read"
        )
        run = _torn(zarr_format, None, 2, "truncate, then rewrite", 0.02)
        yield Case(label, TORN, run, accept=ok)
    # Longer pauses are caught by a checksum only.
    label = "v3 crc32c chunk rewritten in place in two writes 200 ms apart while 2 threads read"
    run = _torn(3, None, 2, "in two writes", 0.2, checksum=True)
    yield Case(label, TORN, run, accept=ok)


# -- eviction cost --------------------------------------------------------------------


_EVICTION_BOUND = 5.0  # the quadratic rescan took 21 s for this; the fixed cache 0.6 s


def _eviction(limit: int, concurrency: int) -> Callable[[Context], str]:
    """One view of 8,100 small chunks (900 x 900, chunks 10 x 10) pinned over the limit."""

    def run(context: Context) -> str:
        from napari_lazy_zarr.core import ArraySource, ChunkedArray

        data = ramp((900, 900), "u1")
        source = ArraySource(data, chunks=(10, 10), name="eviction")
        context.begin()
        cache = context.cache(limit, concurrency=concurrency)
        started = time.perf_counter()
        got = context.read(ChunkedArray(source, cache))
        seconds = time.perf_counter() - started
        if seconds > _EVICTION_BOUND:
            raise Finding("hang", f"loading 8,100 chunks took {seconds:.1f} s")
        return context.expect(got, data, f"8,100 chunks in {seconds:.2f} s")

    return run


def _eviction_cases() -> Iterator[Case]:
    for limit, concurrency in ((0, 2), (400_000, 2), (0, 8)):
        yield Case(
            f"one view pins 8,100 chunks over a {limit:,}-byte limit (concurrency {concurrency})",
            EVICTION,
            _eviction(limit, concurrency),
            accept=frozenset({"ok"}),
        )


def cases() -> Iterator[Case]:
    yield from _lifecycle_cases()
    yield from _stale_cases()
    yield from _torn_cases()
    yield from _eviction_cases()
