"""Hostile input: malformed, absurd and malicious metadata never crashes, hangs or explodes.

The contract (issue "Remote stores, faults and hostile input"), checked for every store here:

- ``napari_get_reader(path)`` returns None or ``read_zarr``, never raises, and is quick.
- ``read_zarr(path)`` (and ``open_array`` of the array a case targets) either opens with
  sane results -- finite, non-zero scales, finite translations and contrast limits, no
  level outside the store -- and a small corner of each level reads back through
  ``open_array(...)[...].result(timeout=...)``, or raises a ``LazyZarrError`` subclass
  whose message names the store path. Never another exception type.
- Invalid input is refused (cases marked ``"error"``); valid input opens (``"opens"``).
- No call takes longer than `CALL_TIMEOUT` seconds, and no case allocates more than
  `PEAK_LIMIT` bytes: see "How the bounds are enforced".
- Nothing from the metadata is evaluated or imported (`test_nothing_is_evaluated_or_imported`).

How the bounds are enforced
---------------------------
Every store is checked in one long-lived *worker subprocess* (forked from a
``multiprocessing`` fork server that has imported the engine, never from pytest's
threaded process), not in the pytest process:

- A crash (segfault, abort in a C codec) kills the worker, not pytest; it is reported
  and the worker restarted.
- Each call runs in a daemon thread joined with a timeout of `CALL_TIMEOUT`; a hang is
  reported and the worker killed (a stuck thread cannot be stopped otherwise).
- Memory, two ways, both covering native allocations that `tracemalloc` misses (zarr's
  and numcodecs' C code, file reads): before each case the worker lowers its soft
  ``RLIMIT_AS`` to its current address-space size plus `ADDRESS_SPACE_HEADROOM`, so a
  huge allocation fails at once with ``MemoryError`` instead of swapping a shared machine
  (and a ``MemoryError`` anywhere in an exception's chain is a violation, even when
  wrapped in a ``LazyZarrError``); and it resets the kernel's peak-RSS mark
  (``/proc/self/clear_refs``) so the resident growth (``VmHWM``) of the case can be held
  under `PEAK_LIMIT`. The limit is restored after each case.

Set ``HOSTILE_INPUT_TABLE=<file>`` to write the table of inputs and outcomes (markdown)
that docs/hostile-input.md records.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import multiprocessing
import os
import re
import shutil
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

CALL_TIMEOUT = 10.0  # seconds per call (reader hook, read_zarr, open_array, a corner read)
READER_HOOK_TIME = 2.0  # napari_get_reader must answer within this (it only stats)
CASE_BACKSTOP = 60.0  # seconds the parent waits for a whole case before killing the worker
ADDRESS_SPACE_HEADROOM = 1 << 30  # fresh address space a case may map (RLIMIT_AS)
PEAK_LIMIT = 200 << 20  # resident growth a case may cause (VmHWM)
CORNER = 64  # pixels read along each of the last two axes of a level
PROBE_MODULES = ("this", "antigravity")  # importable, harmless, never imported otherwise

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="needs a fork server, RLIMIT_AS, /proc and FIFOs (POSIX)"
)

Expect = Literal["error", "opens", "either"]
_OUTCOMES: dict[str, str] = {}  # case id -> outcome summary, for HOSTILE_INPUT_TABLE


# ============================================================================
# The worker: runs in the subprocess
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


@contextlib.contextmanager
def _memory_bound(report: dict[str, Any]) -> Iterator[None]:
    """Cap fresh address space at ADDRESS_SPACE_HEADROOM; record the resident peak growth."""
    import resource

    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset VmHWM to the current resident size
    rss_before = _status_value("VmRSS")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = _status_value("VmSize")
    if size:
        limit = size + ADDRESS_SPACE_HEADROOM
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        report["peak_bytes"] = max(0, _status_value("VmHWM") - rss_before)


def _bounded(call: Callable[[], Any]) -> tuple[str, Any, float]:
    """``("ok", value, s)``, ``("error", exception, s)`` or ``("hang", its stack, s)``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as error:  # everything is reported, MemoryError included
            box["error"] = error

    started = time.perf_counter()
    thread = threading.Thread(target=run, name="hostile-input-call", daemon=True)
    thread.start()
    thread.join(CALL_TIMEOUT)
    seconds = time.perf_counter() - started
    if thread.is_alive():
        # Where it is stuck: the innermost frames of the hung thread.
        frame = sys._current_frames().get(thread.ident or -1)
        stack = traceback.extract_stack(frame) if frame is not None else []
        return "hang", stack, seconds
    if "error" in box:
        return "error", box["error"], seconds
    return "ok", box.get("value"), seconds


def _chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _where(error: BaseException) -> str:
    """Where the root cause of `error` was raised (and the innermost frame of ours)."""
    chain = _chain(error)
    root = traceback.extract_tb(chain[-1].__traceback__)
    if not any(f"{os.sep}napari_lazy_zarr{os.sep}" in f.filename for f in root):
        # Raised outside our code and wrapped by it: ours are in the wrappers' frames.
        outer = [f for cause in chain[:-1] for f in traceback.extract_tb(cause.__traceback__)]
        root = [*outer, *root]
    return "raised " + _stack_where(root)


def _stack_where(frames: list[traceback.FrameSummary]) -> str:
    """The innermost frame of a stack, and the innermost frame of ours (src/) in it."""
    if not frames:
        return ""
    innermost = frames[-1]
    ours = [f for f in frames if f"{os.sep}napari_lazy_zarr{os.sep}" in f.filename]
    text = f"at {_short(innermost.filename)}:{innermost.lineno} ({innermost.name})"
    if ours and ours[-1] is not innermost:
        text += f"; via {_short(ours[-1].filename)}:{ours[-1].lineno} ({ours[-1].name})"
    return text


def _short(filename: str) -> str:
    for marker in ("site-packages" + os.sep, "src" + os.sep, "lib" + os.sep + "python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _call_report(name: str, status: str, value: Any, seconds: float) -> dict[str, Any]:
    from napari_lazy_zarr.core import LazyZarrError

    report: dict[str, Any] = {"call": name, "status": status, "seconds": round(seconds, 3)}
    if status == "hang":
        report["where"] = _stack_where(value)
        report["traceback"] = "".join(traceback.format_list(value[-6:]))
    if status == "error":
        chain = _chain(value)
        report.update(
            type=f"{type(value).__module__}.{type(value).__qualname__}",
            lazy=isinstance(value, LazyZarrError),
            message=str(value)[:600],
            chain=[type(e).__name__ for e in chain],
            memory_error=any(isinstance(e, MemoryError) for e in chain),
            where=_where(value),
            traceback="".join(traceback.format_exception(value, limit=-4))[-1500:],
        )
    return report


def _finite(values: Any) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in values)


def _layer_problems(layers: Any) -> list[str]:
    """What is not sane about read_zarr's layer data tuples."""
    problems: list[str] = []
    if not isinstance(layers, list) or not layers:
        return [f"read_zarr returned {type(layers).__name__} {layers!r:.80}, not layers"]
    for data, kwargs, layer_type in layers:
        name = kwargs.get("name")
        levels = data if isinstance(data, list) else [data]
        if layer_type not in ("image", "labels"):
            problems.append(f"layer {name!r}: type {layer_type!r}")
        for level in levels:
            shape = tuple(level.shape)
            if not all(isinstance(s, int) and s >= 0 for s in shape):
                problems.append(f"layer {name!r}: level shape {shape}")
            if len(shape) != len(kwargs["scale"]):
                problems.append(f"layer {name!r}: {len(shape)}-d level, scale {kwargs['scale']}")
        scale, translate = kwargs["scale"], kwargs["translate"]
        if not _finite(scale) or any(s == 0 for s in scale):
            problems.append(f"layer {name!r}: scale {scale} is not finite and non-zero")
        if not _finite(translate):
            problems.append(f"layer {name!r}: translate {translate} is not finite")
        limits = kwargs.get("contrast_limits")
        if limits is not None and not (_finite(limits) and limits[0] < limits[1]):
            problems.append(f"layer {name!r}: contrast limits {limits} not finite and increasing")
    return problems


def _corner(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A small corner: CORNER pixels of the last two axes, one index of the others."""
    return tuple(
        slice(0, min(extent, CORNER if axis >= len(shape) - 2 else 1))
        for axis, extent in enumerate(shape)
    )


def _check_store(store: str, array: str | None) -> dict[str, Any]:
    """Run the contract's calls on `store`; report what each did (no assertions here)."""
    from napari_lazy_zarr import _reader
    from napari_lazy_zarr._reader import napari_get_reader, read_zarr
    from napari_lazy_zarr.core import ChunkCache, open_array
    from napari_lazy_zarr.core.formats.ome import describe_store

    report: dict[str, Any] = {"calls": [], "problems": [], "layers": []}
    calls: list[dict[str, Any]] = report["calls"]
    status, value, seconds = _bounded(lambda: napari_get_reader(store))
    named = {id(read_zarr): "read_zarr", id(None): "None"}
    shown = named.get(id(value), repr(value)[:200]) if status == "ok" else repr(value)[:200]
    report["reader"] = {"status": status, "seconds": round(seconds, 3), "value": shown}
    if status == "hang":
        return report
    cache = ChunkCache(64 << 20, concurrency=2)
    _reader._shared_cache = cache
    hung = False
    try:
        status, value, seconds = _bounded(lambda: read_zarr(store))
        calls.append(_call_report("read_zarr", status, value, seconds))
        if status == "hang":
            hung = True
            return report
        targets: list[str] = []
        if status == "ok":
            report["problems"].extend(_layer_problems(value))
            report["layers"] = [
                {
                    "name": str(kwargs.get("name")),
                    "type": layer_type,
                    "axis_labels": [str(a) for a in kwargs.get("axis_labels", ())],
                    "levels": len(data) if isinstance(data, list) else 1,
                }
                for data, kwargs, layer_type in value
            ]
            status, specs, seconds = _bounded(lambda: describe_store(store))
            if status != "ok":
                calls.append(_call_report("describe_store", status, specs, seconds))
                hung = status == "hang"
                return report
            for spec in specs:
                for level in spec.levels:
                    if not _finite(level.scale) or 0 in level.scale:
                        report["problems"].append(f"level {level.path!r}: scale {level.scale}")
                    if not _finite(level.translate):
                        report["problems"].append(
                            f"level {level.path!r}: translate {level.translate}"
                        )
            for spec in specs[:4]:
                for level in (spec.levels[0], spec.levels[-1]):
                    parts = level.path.split("/")
                    if ".." in parts or os.path.isabs(level.path):
                        report["problems"].append(f"level path {level.path!r} leaves the store")
                    if level.path not in targets:
                        targets.append(level.path)
        if array is not None and array not in targets:
            targets.append(array)
        for target in targets:
            status, opened, seconds = _bounded(
                lambda target=target: open_array(store, path=target, cache=cache)
            )
            calls.append(_call_report(f"open_array({target!r})", status, opened, seconds))
            if status == "hang":
                hung = True
                return report
            if status != "ok":
                continue
            index = _corner(tuple(opened.shape))
            status, data, seconds = _bounded(
                lambda opened=opened, index=index: opened[index].result(timeout=CALL_TIMEOUT)
            )
            calls.append(_call_report(f"corner({target!r})", status, data, seconds))
            if status == "hang":
                hung = True
                return report
            if status == "ok":
                expected = tuple(s.stop - s.start for s in index)
                if tuple(data.shape) != expected or data.dtype != opened.dtype:
                    report["problems"].append(
                        f"corner of {target!r}: got {data.shape} {data.dtype}, "
                        f"expected {expected} {opened.dtype}"
                    )
        return report
    finally:
        if not hung:
            cache.close()


def _serve(connection: Any) -> None:
    """The worker's loop: receive (store, array), send back the report."""
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        store, array = request
        report: dict[str, Any] = {}
        modules_before = {m for m in PROBE_MODULES if m in sys.modules}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with _memory_bound(report):
                    report.update(_check_store(store, array))
            except BaseException as error:  # the harness itself failed: report it
                report["harness_error"] = "".join(traceback.format_exception(error))[-2500:]
        report["warnings"] = sorted(
            {
                f"{w.category.__name__}: {str(w.message)[:160]}"
                for w in caught
                if not w.category.__name__.startswith("Pydantic")  # napari's own imports
            }
        )
        report["imported"] = sorted(
            m for m in PROBE_MODULES if m in sys.modules and m not in modules_before
        )
        connection.send(report)


class _Worker:
    """The parent's handle on the worker subprocess (restarted after a hang or crash)."""

    def __init__(self) -> None:
        self._process: Any = None
        self._connection: Any = None

    def _start(self) -> None:
        # A fork server that has imported the engine (and napari.viewer, which read_zarr imports)
        # once: a worker killed after a hang is replaced in milliseconds, not seconds.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__, "napari_lazy_zarr._reader", "napari.viewer"])
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child,), daemon=True)
        process.start()
        child.close()
        self._process, self._connection = process, parent

    def stop(self) -> None:
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            connection.send(None)
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)
        connection.close()

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(5)
            self._connection.close()
        self._process = self._connection = None

    def check(self, store: Path, array: str | None) -> dict[str, Any]:
        if self._process is None:
            self._start()
        assert self._connection is not None
        self._connection.send((str(store), array))
        # The first case also waits for the worker's imports.
        if not self._connection.poll(CASE_BACKSTOP):
            self._kill()
            return {"worker": f"no answer within {CASE_BACKSTOP:.0f} s (killed)"}
        try:
            report: dict[str, Any] = self._connection.recv()
        except EOFError:
            code = self._process.exitcode if self._process is not None else None
            self._kill()
            return {"worker": f"worker crashed (exit code {code})"}
        calls = report.get("calls", [])
        if report.get("reader", {}).get("status") == "hang" or any(
            c["status"] == "hang" for c in calls
        ):
            self._kill()  # a thread is stuck in it
        return report


# ============================================================================
# The contract, checked in the parent
# ============================================================================


def _violations(
    report: dict[str, Any], store: Path, expect: Expect, array: str | None
) -> list[str]:
    """Every way `report` breaks the contract (empty when it holds)."""
    if "worker" in report:
        return [f"CRASH/HANG: {report['worker']}"]
    if "harness_error" in report:
        return [f"harness error:\n{report['harness_error']}"]
    found: list[str] = []
    reader = report["reader"]
    if reader["status"] == "hang":
        return [f"HANG: napari_get_reader did not return within {CALL_TIMEOUT} s"]
    if reader["status"] == "error":
        found.append(f"napari_get_reader raised {reader['value']}")
    elif reader["value"] not in ("None", "read_zarr"):
        found.append(f"napari_get_reader returned {reader['value']}")
    if reader["seconds"] > READER_HOOK_TIME:
        found.append(f"napari_get_reader took {reader['seconds']} s")
    if expect == "opens" and reader["value"] != "read_zarr":
        found.append(f"REFUSES VALID INPUT: napari_get_reader returned {reader['value']}")
    for call in report["calls"]:
        name = call["call"]
        if call["status"] == "hang":
            found.append(
                f"HANG: {name} did not return within {CALL_TIMEOUT} s; "
                f"stuck {call['where']}\n{call['traceback']}"
            )
            continue
        if call["status"] != "error":
            continue
        summary = f"{call['type']}: {call['message'][:300]} [{call['where']}]"
        if call["memory_error"]:
            found.append(f"HUGE ALLOCATION: {name} hit MemoryError ({summary})")
        elif not call["lazy"]:
            found.append(f"CRASH: {name} raised {summary}\n{call['traceback']}")
        elif str(store) not in call["message"]:
            found.append(f"{name}: message does not name the path: {call['message'][:300]}")
    primary = [c for c in report["calls"] if c["call"] in ("read_zarr", f"open_array({array!r})")]
    for call in primary:
        if expect == "error" and call["status"] == "ok":
            found.append(f"OPENS INVALID INPUT: {call['call']} succeeded")
        if expect == "opens" and call["status"] == "error" and not call["memory_error"]:
            found.append(f"REFUSES VALID INPUT: {call['call']} raised {call['type']}")
    if expect == "opens":
        found.extend(
            f"valid input: {c['call']} failed: {c.get('message', '')[:200]}"
            for c in report["calls"]
            if c["call"].startswith("corner") and c["status"] == "error"
        )
    found.extend(f"NOT SANE: {problem}" for problem in report["problems"])
    if report.get("peak_bytes", 0) > PEAK_LIMIT:
        found.append(f"HUGE ALLOCATION: resident peak grew {report['peak_bytes'] >> 20} MiB")
    if report.get("imported"):
        found.append(f"IMPORTED FROM METADATA: {report['imported']}")
    return found


def _outcome(report: dict[str, Any], store: Path, violations: list[str]) -> str:
    """A one-line summary of what read_zarr (or the first failing call) did."""

    def clean(text: str) -> str:
        text = text.replace(str(store.parent), "<tmp>").replace("\n", " ")
        return re.sub(r"\s+", " ", text).replace("|", "\\|")[:220]

    if violations:
        return "FAILS today: " + clean(violations[0].split("\n")[0])
    calls = {c["call"]: c for c in report["calls"]}
    first = calls.get("read_zarr")
    if first is None:
        return "?"
    if first["status"] == "ok":
        names = ", ".join(f"{layer['type']} {layer['name']!r}" for layer in report["layers"])
        extra = f"; warns {clean(report['warnings'][0])}" if report["warnings"] else ""
        return clean(f"opens: {names}") + extra
    name = first["type"].rsplit(".", 1)[-1]
    return f"{name}: " + clean(first["message"])


@pytest.fixture(scope="module")
def worker() -> Iterator[_Worker]:
    handle = _Worker()
    yield handle
    handle.stop()
    table = os.environ.get("HOSTILE_INPUT_TABLE")
    if table:
        rows = [
            f"| `{case.replace('|', chr(92) + '|')}` | {outcome} |"
            for case, outcome in _OUTCOMES.items()
        ]
        Path(table).write_text("| input | outcome |\n|---|---|\n" + "\n".join(rows) + "\n")


def _assert_contract(
    worker: _Worker,
    key: str,
    store: Path,
    expect: Expect,
    array: str | None,
) -> dict[str, Any]:
    report = worker.check(store, array)
    found = _violations(report, store, expect, array)
    _OUTCOMES[key] = _outcome(report, store, found)
    assert not found, f"{key}:\n" + "\n".join(found)
    return report


# ============================================================================
# Hand-written stores
# ============================================================================


class Raw(str):
    """File content written verbatim (not JSON-encoded)."""


_DROP = object()  # a value meaning "remove this key"
_CHUNK = bytes(range(256)) * 2  # one 16 x 16 uint16 chunk, little-endian, uncompressed


def _v2(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 2,
        "shape": [40, 60],
        "chunks": [16, 16],
        "dtype": "<u2",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
    return _apply(doc, changes)


def _v3(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [40, 60],
        "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 16]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
    }
    return _apply(doc, changes)


def _apply(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for key, value in changes.items():
        if value is _DROP:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def _grid(*chunk_shape: Any) -> dict[str, Any]:
    return {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}}


def _shard(shard: list[int], inner: Any, **configuration: Any) -> dict[str, Any]:
    """v3 changes making a sharded array: outer chunks `shard`, inner chunks `inner`."""
    sharding = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": inner,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "crc32c"},
            ],
            "index_location": "end",
            **configuration,
        },
    }
    return {"chunk_grid": _grid(*shard), "codecs": [sharding]}


_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
_PICKLE_V3 = {"name": "numcodecs.pickle", "configuration": {"protocol": 5}}


def _v2_store(zarray: Any, **more: Any) -> dict[str, Any]:
    return {".zarray": zarray, "0.0": _CHUNK, **more}


def _v3_store(zarr_json: Any, **more: Any) -> dict[str, Any]:
    """A v3 array's files; chunk c/0/0 written unless the array is sharded (no valid shard)."""
    codecs = zarr_json.get("codecs") if isinstance(zarr_json, dict) else None
    sharded = isinstance(codecs, list) and codecs and codecs[0].get("name") == "sharding_indexed"
    return {"zarr.json": zarr_json, **({} if sharded else {"c/0/0": _CHUNK}), **more}


_AXES = [
    {"name": "c", "type": "channel"},
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]


def _channel(color: str, label: str) -> dict[str, Any]:
    window = {"min": 0, "max": 65535, "start": 0, "end": 1000}
    return {"label": label, "color": color, "window": window, "active": True}


def _multiscale(name: str, shapes: list[list[int]]) -> dict[str, Any]:
    return {
        "name": name,
        "axes": copy.deepcopy(_AXES),
        "datasets": [
            {
                "path": str(i),
                "coordinateTransformations": [
                    {"type": "scale", "scale": [1.0, 0.5 * 2**i, 0.5 * 2**i]},
                    {"type": "translation", "translation": [0.0, 0.0, 0.0]},
                ],
            }
            for i in range(len(shapes))
        ],
    }


def _ome_group(
    version: str, attributes: dict[str, Any], shapes: list[list[int]], dtype: str, prefix: str
) -> dict[str, Any]:
    """Files of an OME group at `prefix` with one array per level (shapes), no chunks."""
    files: dict[str, Any] = {}
    if version == "0.5":
        files[f"{prefix}zarr.json"] = {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": {"ome": {"version": "0.5", **attributes}},
        }
    else:
        for multiscale in attributes.get("multiscales", []):
            multiscale["version"] = "0.4"
        files[f"{prefix}.zgroup"] = {"zarr_format": 2}
        files[f"{prefix}.zattrs"] = attributes
    for i, shape in enumerate(shapes):
        chunks = [1, 32, 32][-len(shape) :]
        if version == "0.5":
            files[f"{prefix}{i}/zarr.json"] = _v3(
                shape=shape,
                data_type={"<u2": "uint16", "<u4": "uint32"}[dtype],
                chunk_grid=_grid(*chunks),
                dimension_names=["c", "y", "x"][-len(shape) :],
            )
        else:
            files[f"{prefix}{i}/.zarray"] = _v2(shape=shape, chunks=chunks, dtype=dtype)
    return files


def _ome_store(version: str, *, labels: bool = False) -> dict[str, Any]:
    """A valid OME-Zarr image: 2 levels of (2, 64, 64) uint16, 2 omero channels."""
    attributes = {
        "multiscales": [_multiscale("cells", [[2, 64, 64], [2, 32, 32]])],
        "omero": {"channels": [_channel("0000FF", "DAPI"), _channel("00FF00", "GFP")]},
    }
    files = _ome_group(version, attributes, [[2, 64, 64], [2, 32, 32]], "<u2", "")
    if labels:
        files.update(_ome_group(version, {"labels": ["nuclei"]}, [], "<u4", "labels/"))
        label = {
            "image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]},
            "multiscales": [_multiscale("nuclei", [[1, 64, 64], [1, 32, 32]])],
        }
        files.update(
            _ome_group(version, label, [[1, 64, 64], [1, 32, 32]], "<u4", "labels/nuclei/")
        )
    return files


def _ome_attrs(files: dict[str, Any], version: str, prefix: str = "") -> dict[str, Any]:
    """The OME attributes of the group at `prefix`, to edit in place."""
    if version == "0.5":
        attributes: dict[str, Any] = files[f"{prefix}zarr.json"]["attributes"]["ome"]
        return attributes
    zattrs: dict[str, Any] = files[f"{prefix}.zattrs"]
    return zattrs


@dataclass(frozen=True)
class Case:
    """A hand-written store: its files, what it should do, and what to open directly.

    `array` is the array path `open_array` is also checked on (None: read_zarr only).
    `setup` makes what JSON cannot (symlinks, FIFOs, sparse files) given the store path.
    """

    id: str
    files: dict[str, Any]
    expect: Expect
    array: str | None = ""
    setup: Callable[[Path], None] | None = field(default=None, compare=False)


_OUTSIDE = "@OUTSIDE@"  # in a document: the absolute path of the directory holding the store


def _write(store: Path, files: dict[str, Any]) -> None:
    store.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = store / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, Raw):
            target.write_text(content)
        else:
            text = json.dumps(content)  # NaN and Infinity written as such
            target.write_text(text.replace(_OUTSIDE, str(store.parent) + "/"))


def _nested_list(depth: int) -> Raw:
    return Raw("[" * depth + "]" * depth)


def _nested_object(depth: int, leaf: str = "1") -> str:
    return '{"a": ' * depth + leaf + "}" * depth


def _symlink(name: str, target: str) -> Callable[[Path], None]:
    def make(store: Path) -> None:
        link = store / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)

    return make


def _fifo(name: str) -> Callable[[Path], None]:
    def make(store: Path) -> None:
        path = store / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.mkfifo(path)

    return make


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def make(store: Path) -> None:
        with open(store / name, "wb") as handle:
            handle.truncate(size)

    return make


def _store_is_a_symlink_loop(store: Path) -> None:
    shutil.rmtree(store)
    store.symlink_to(store.name)


def _outside_array(store: Path) -> None:
    """A valid array beside the store, for dataset paths that try to reach it."""
    _write(store.parent / "outside", {".zarray": _v2(shape=[2, 64, 64], chunks=[1, 32, 32])})
    _write(store.parent / "outside3", {"zarr.json": _v3(shape=[2, 64, 64])})


def _level_links_outside(store: Path) -> None:
    """Level 0 of the image replaced by a symlink to the array beside the store."""
    _outside_array(store)
    shutil.rmtree(store / "0")
    (store / "0").symlink_to(store.parent / "outside")


def _generic_json_cases() -> Iterator[Case]:
    """Broken documents in every metadata file slot."""
    v2, v3 = json.dumps(_v2()), json.dumps(_v3())
    slots: list[tuple[str, dict[str, Any], str, str | None]] = [
        (".zarray", _v2_store(_v2()), v2, ""),
        ("zarr.json", _v3_store(_v3()), v3, ""),
        (
            ".zgroup",
            {".zgroup": {"zarr_format": 2}, "a/.zarray": _v2()},
            '{"zarr_format": 2}',
            None,
        ),
        (".zattrs", _v2_store(_v2(), **{".zattrs": {}}), '{"a": [1, 2]}', ""),
    ]
    for slot, base, text, array in slots:
        bad: dict[str, Any] = {
            "empty file": Raw(""),
            "truncated JSON": Raw(text[: len(text) // 2]),
            "JSON list": [1, 2],
            "JSON string": "text",
            "JSON number": 42,
            "JSON null": None,
            "100,000-deep nested list": _nested_list(100_000),
            "invalid UTF-8": b'{"zarr_format": "\xff\xfe"}',
            "NUL bytes": Raw("\x00" * 64),
        }
        for label, content in bad.items():
            yield Case(f"{slot}: {label}", {**base, slot: content}, "error", array)
    # Deep but parseable nesting in an unknown key: valid JSON, spec-valid or not.
    yield Case(
        ".zarray: unknown key nested 2,000 deep",
        _v2_store(Raw(v2[:-1] + ', "x": ' + _nested_object(2000) + "}")),
        "either",
    )
    yield Case(
        ".zattrs: attribute nested 2,000 deep",
        _v2_store(_v2(), **{".zattrs": Raw('{"x": ' + _nested_object(2000) + "}")}),
        "either",
    )
    yield Case(
        "zarr.json: attribute nested 2,000 deep",
        _v3_store(Raw(v3[:-1] + ', "attributes": {"x": ' + _nested_object(2000) + "}}")),
        "either",
    )
    yield Case(
        ".zarray: 1.5 GiB metadata file (sparse, NUL bytes)",
        _v2_store(_v2()),
        "error",
        setup=_sparse(".zarray", 3 << 29),
    )
    yield Case(
        ".zattrs: 1.5 GiB attributes file (sparse, NUL bytes)",
        _v2_store(_v2()),
        "error",
        setup=_sparse(".zattrs", 3 << 29),
    )


def _v2_cases() -> Iterator[Case]:
    a = _v2_store
    error: dict[str, dict[str, Any]] = {
        "zarr_format 99": a(_v2(zarr_format=99)),
        'zarr_format "2" (string)': a(_v2(zarr_format="2")),
        "zarr_format missing": a(_v2(zarr_format=_DROP)),
        'shape "40,60" (string)': a(_v2(shape="40,60")),
        "shape {} (dict)": a(_v2(shape={"y": 40, "x": 60})),
        "shape [40.5, 60] (float)": a(_v2(shape=[40.5, 60])),
        "shape null": a(_v2(shape=None)),
        "shape missing": a(_v2(shape=_DROP)),
        "shape [-5, 60] (negative)": a(_v2(shape=[-5, 60])),
        "shape [2**64] (beyond int64)": a(_v2(shape=[2**64], chunks=[16])),
        "shape [2**63, 60] (int64 overflow)": a(_v2(shape=[2**63, 60])),
        "chunks dict": a(_v2(chunks={"y": 16, "x": 16})),
        'chunks "16" (string)': a(_v2(chunks="16")),
        "chunks [16] (rank 1 < 2)": a(_v2(chunks=[16])),
        "chunks [16, 16, 16] (rank 3 > 2)": a(_v2(chunks=[16, 16, 16])),
        "chunks [] (rank 0)": a(_v2(chunks=[])),
        "chunks [-16, 16] (negative)": a(_v2(chunks=[-16, 16])),
        "chunks [16.5, 16] (float)": a(_v2(chunks=[16.5, 16])),
        "dtype 5 (number)": a(_v2(dtype=5)),
        'dtype "banana"': a(_v2(dtype="banana")),
        "dtype null": a(_v2(dtype=None)),
        'dtype ["<u2"] (list)': a(_v2(dtype=["<u2"])),
        'fill_value "abc" for <u2': a(_v2(fill_value="abc")),
        "fill_value [1, 2] for <u2": a(_v2(fill_value=[1, 2])),
        "fill_value {} for <u2": a(_v2(fill_value={"a": 1})),
        "fill_value 70000 for <u2 (out of range)": a(_v2(fill_value=70000)),
        "fill_value -1 for <u2 (out of range)": a(_v2(fill_value=-1)),
        'fill_value "NaN" for <u2': a(_v2(fill_value="NaN")),
        'fill_value 2**70 for "<i8"': a(_v2(dtype="<i8", fill_value=2**70)),
        'order "Z"': a(_v2(order="Z")),
        "order 1": a(_v2(order=1)),
        'compressor "zstd" (string)': a(_v2(compressor="zstd")),
        "compressor {} (no id)": a(_v2(compressor={})),
        'compressor id "nosuchcodec"': a(_v2(compressor={"id": "nosuchcodec"})),
        "filters dict, not list": a(_v2(filters={"id": "delta", "dtype": "<u2"})),
        'filters ["zlib"] (strings)': a(_v2(filters=["zlib"])),
        'filters [{"id": "nosuchfilter"}]': a(_v2(filters=[{"id": "nosuchfilter"}])),
        'dimension_separator "|"': a(_v2(dimension_separator="|")),
        'dimension_separator "/../"': a(_v2(dimension_separator="/../")),
        # Code execution: pickle in every slot, object dtypes.
        'compressor {"id": "pickle"}': a(_v2(compressor={"id": "pickle"})),
        'compressor {"id": "PICKLE"}': a(_v2(compressor={"id": "PICKLE"})),
        'compressor {"id": "numcodecs.pickle"}': a(_v2(compressor={"id": "numcodecs.pickle"})),
        "filters [zlib, pickle] (pickle second)": a(
            _v2(filters=[{"id": "zlib", "level": 1}, {"id": "pickle"}])
        ),
        'dtype "|O" with compressor pickle': a(_v2(dtype="|O", compressor={"id": "pickle"})),
        'dtype "|O8" (object, spelled with size)': a(_v2(dtype="|O8", fill_value=None)),
        'dtype "O" with vlen-utf8 filter': a(
            _v2(dtype="O", fill_value=None, filters=[{"id": "vlen-utf8"}])
        ),
        'dtype "<U8" (unicode)': a(_v2(dtype="<U8", fill_value="")),
        'dtype "|S4" (bytes)': a(_v2(dtype="|S4", fill_value="")),
        'dtype "|V8" (void)': a(_v2(dtype="|V8", fill_value=None)),
        "dtype structured [[a, <u2], [b, <f4]]": a(
            _v2(dtype=[["a", "<u2"], ["b", "<f4"]], fill_value=None)
        ),
        'dtype "<M8[s]" (datetime)': a(_v2(dtype="<M8[s]", fill_value=None)),
        'dtype "<u2" with fill_value "__import__(...)"': a(
            _v2(fill_value="__import__('os').getcwd()")
        ),
    }
    for label, files in error.items():
        yield Case(f".zarray: {label}", files, "error")
    either: dict[str, dict[str, Any]] = {
        "chunks [0, 16] (zero)": a(_v2(chunks=[0, 16])),
        "fill_value 1.5 for <u2": a(_v2(fill_value=1.5)),
        "fill_value true for <u2": a(_v2(fill_value=True)),
        "shape [true, 60] (bool extent)": a(_v2(shape=[True, 60])),
        'compressor {"id": "zstd", "level": "max"}': a(
            _v2(compressor={"id": "zstd", "level": "max"})
        ),
        "2**62 elements: shape [2**31, 2**31], chunks [64, 64]": a(
            _v2(shape=[2**31, 2**31], chunks=[64, 64])
        ),
        "2**62 elements: shape [2**62], chunks [64]": a(_v2(shape=[2**62], chunks=[64])),
        "2**62 chunks of one pixel: shape [2**31, 2**31], chunks [1, 1]": a(
            _v2(shape=[2**31, 2**31], chunks=[1, 1])
        ),
        "one 2**62-element chunk: shape = chunks = [2**31, 2**31]": a(
            _v2(shape=[2**31, 2**31], chunks=[2**31, 2**31])
        ),
        "chunk larger than the array: chunks [2**40, 2**40]": a(_v2(chunks=[2**40, 2**40])),
        "shape [2**63 - 1], chunks [2**63 - 1]": a(_v2(shape=[2**63 - 1], chunks=[2**63 - 1])),
        "0-d: shape [], chunks []": {".zarray": _v2(shape=[], chunks=[]), "0": b"\x07\x00"},
        "zero extent: shape [0, 60]": a(_v2(shape=[0, 60])),
        "33 dimensions of 2": a(_v2(shape=[2] * 33, chunks=[1] * 33)),
        "65 dimensions (beyond numpy's 64)": a(_v2(shape=[1] * 65, chunks=[1] * 65)),
        "both .zarray and .zgroup": a(_v2(), **{".zgroup": {"zarr_format": 2}}),
    }
    for label, files in either.items():
        yield Case(f".zarray: {label}", files, "either")
    yield Case(".zarray: valid control", a(_v2()), "opens")
    yield Case(".zgroup: valid group, no arrays", {".zgroup": {"zarr_format": 2}}, "error", None)
    yield Case(".zgroup: zarr_format 99", {".zgroup": {"zarr_format": 99}}, "error", None)
    yield Case(
        ".zmetadata: consolidated metadata declaring a pickle array",
        {
            ".zgroup": {"zarr_format": 2},
            "a/.zarray": _v2(),
            ".zmetadata": {
                "zarr_consolidated_format": 1,
                "metadata": {
                    ".zgroup": {"zarr_format": 2},
                    "a/.zarray": _v2(),
                    "evil/.zarray": _v2(dtype="|O", compressor={"id": "pickle"}),
                },
            },
        },
        "error",
        "evil",
    )


def _v3_cases() -> Iterator[Case]:
    a = _v3_store
    error: dict[str, dict[str, Any]] = {
        'node_type "banana"': a(_v3(node_type="banana")),
        "node_type missing": a(_v3(node_type=_DROP)),
        "zarr_format 99": a(_v3(zarr_format=99)),
        "zarr_format 2 in zarr.json": a(_v3(zarr_format=2)),
        "shape {} (dict)": a(_v3(shape={"y": 40})),
        "shape [40.5, 60] (float)": a(_v3(shape=[40.5, 60])),
        "shape [-1, 60] (negative)": a(_v3(shape=[-1, 60])),
        "shape [2**64] (beyond int64)": a(_v3(shape=[2**64], chunk_grid=_grid(16))),
        "data_type 5 (number)": a(_v3(data_type=5)),
        'data_type "banana"': a(_v3(data_type="banana")),
        'data_type "string" (variable-length)': a(_v3(data_type="string", fill_value="")),
        'fill_value "abc" for uint16': a(_v3(fill_value="abc")),
        "fill_value [1, 2] for uint16": a(_v3(fill_value=[1, 2])),
        'fill_value "NaN" for uint16': a(_v3(fill_value="NaN")),
        "fill_value 70000 for uint16 (out of range)": a(_v3(fill_value=70000)),
        "fill_value missing": a(_v3(fill_value=_DROP)),
        'fill_value "0x7fc00000" for uint16': a(_v3(fill_value="0x7fc00000")),
        'chunk_grid name "banana"': a(
            _v3(chunk_grid={"name": "banana", "configuration": {"chunk_shape": [16, 16]}})
        ),
        'chunk_grid "regular" (string)': a(_v3(chunk_grid="regular")),
        "chunk_shape [-16, 16] (negative)": a(_v3(chunk_grid=_grid(-16, 16))),
        "chunk_shape [16] (rank 1 < 2)": a(_v3(chunk_grid=_grid(16))),
        'chunk_shape "16" (string)': a(
            _v3(chunk_grid={"name": "regular", "configuration": {"chunk_shape": "16"}})
        ),
        'chunk_key_encoding separator "../"': a(
            _v3(chunk_key_encoding={"name": "default", "configuration": {"separator": "../"}})
        ),
        'chunk_key_encoding name "banana"': a(_v3(chunk_key_encoding={"name": "banana"})),
        "codecs [] (no array-to-bytes codec)": a(_v3(codecs=[])),
        "codecs dict, not list": a(_v3(codecs=_BYTES)),
        'codecs [{"name": "nosuchcodec"}]': a(_v3(codecs=[{"name": "nosuchcodec"}])),
        "codecs [bytes, nosuchcodec]": a(_v3(codecs=[_BYTES, {"name": "nosuchcodec"}])),
        "codecs [bytes, bytes]": a(_v3(codecs=[_BYTES, _BYTES])),
        'codecs [zstd] with level "max" and no bytes codec': a(
            _v3(codecs=[{"name": "zstd", "configuration": {"level": "max"}}])
        ),
        'dimension_names ["y"] (wrong length)': a(_v3(dimension_names=["y"])),
        "dimension_names [1, 2] (numbers)": a(_v3(dimension_names=[1, 2])),
        'storage_transformers [{"name": "evil"}]': a(_v3(storage_transformers=[{"name": "evil"}])),
        "attributes [1] (list)": a(_v3(attributes=[1])),
        "unknown extension with must_understand true": a(
            _v3(**{"x-evil": {"name": "evil", "must_understand": True}})
        ),
        # Code execution: pickle in every codec slot.
        "codecs [bytes, numcodecs.pickle]": a(_v3(codecs=[_BYTES, _PICKLE_V3])),
        "codecs [numcodecs.pickle] alone": a(_v3(codecs=[_PICKLE_V3])),
        'codecs [bytes, {"name": "pickle"}]': a(_v3(codecs=[_BYTES, {"name": "pickle"}])),
        "sharding: numcodecs.pickle among the inner codecs": a(
            _v3(**_shard([32, 32], [16, 16], codecs=[_BYTES, _PICKLE_V3]))
        ),
        "sharding: numcodecs.pickle among the index codecs": a(
            _v3(**_shard([32, 32], [16, 16], index_codecs=[_BYTES, _PICKLE_V3]))
        ),
        "sharding within sharding, pickle innermost": a(
            _v3(
                **_shard(
                    [32, 32],
                    [16, 16],
                    codecs=[_shard([16, 16], [8, 8], codecs=[_BYTES, _PICKLE_V3])["codecs"][0]],
                )
            )
        ),
        "sharding: shard [32, 32] not divisible by inner [5, 5]": a(
            _v3(**_shard([32, 32], [5, 5]))
        ),
        "sharding: inner chunk [0, 16]": a(_v3(**_shard([32, 32], [0, 16]))),
        "sharding: inner chunk [16] (rank 1 < 2)": a(_v3(**_shard([32, 32], [16]))),
        "sharding: inner chunk [-16, 16]": a(_v3(**_shard([32, 32], [-16, 16]))),
        'sharding: index_location "middle"': a(
            _v3(**_shard([32, 32], [16, 16], index_location="middle"))
        ),
        "sharding: inner chunk larger than the shard": a(_v3(**_shard([16, 16], [32, 32]))),
    }
    for label, files in error.items():
        yield Case(f"zarr.json: {label}", files, "error")
    either: dict[str, dict[str, Any]] = {
        "chunk_shape [0, 16] (zero)": a(_v3(chunk_grid=_grid(0, 16))),
        'data_type {"name": "uint16"} (object form)': a(_v3(data_type={"name": "uint16"})),
        "2**62 elements: shape [2**31, 2**31], chunks [64, 64]": a(
            _v3(shape=[2**31, 2**31], chunk_grid=_grid(64, 64))
        ),
        "sharded 2**62 elements: shards [2**20, 2**20] of [64, 64]": a(
            _v3(shape=[2**31, 2**31], **_shard([2**20, 2**20], [64, 64]))
        ),
        "0-d: shape [], chunk_shape []": {
            "zarr.json": _v3(shape=[], chunk_grid=_grid()),
            "c": b"\x07\x00",
        },
        "33 dimensions of 2": a(_v3(shape=[2] * 33, chunk_grid=_grid(*[1] * 33))),
        "both zarr.json and .zarray": a(_v3(), **{".zarray": _v2(dtype="<f8")}),
    }
    for label, files in either.items():
        yield Case(f"zarr.json: {label}", files, "either")
    yield Case("zarr.json: valid control", a(_v3()), "opens")
    yield Case("zarr.json: valid sharded control", a(_v3(**_shard([32, 32], [16, 16]))), "opens")
    yield Case(
        'zarr.json: valid float32, fill_value "NaN", no chunks written',
        {"zarr.json": _v3(data_type="float32", fill_value="NaN")},
        "opens",
    )
    yield Case(
        "zarr.json: group with consolidated metadata declaring a pickle array",
        {
            "zarr.json": {
                "zarr_format": 3,
                "node_type": "group",
                "attributes": {},
                "consolidated_metadata": {
                    "kind": "inline",
                    "must_understand": False,
                    "metadata": {"evil": _v3(codecs=[_BYTES, _PICKLE_V3])},
                },
            },
        },
        "error",
        None,
    )
    yield Case(
        "zarr.json: group with consolidated metadata declaring a 2**62-element array",
        {
            "zarr.json": {
                "zarr_format": 3,
                "node_type": "group",
                "attributes": {},
                "consolidated_metadata": {
                    "kind": "inline",
                    "must_understand": False,
                    "metadata": {"huge": _v3(shape=[2**31, 2**31], chunk_grid=_grid(64, 64))},
                },
            },
        },
        "either",
        None,
    )


# Edits of a valid OME image's attributes: (label, edit, expect).
def _set_datasets(value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda ome: ome["multiscales"][0].__setitem__("datasets", value)


def _dataset(index: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda ome: _apply(ome["multiscales"][0]["datasets"][index], changes) and None


def _scale(index: int, scale: Any) -> Callable[[dict[str, Any]], None]:
    def edit(ome: dict[str, Any]) -> None:
        ome["multiscales"][0]["datasets"][index]["coordinateTransformations"][0]["scale"] = scale

    return edit


def _translation(index: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(ome: dict[str, Any]) -> None:
        transforms = ome["multiscales"][0]["datasets"][index]["coordinateTransformations"]
        transforms[1]["translation"] = value

    return edit


def _channel_field(index: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda ome: ome["omero"]["channels"][index].__setitem__(key, value)


def _many_datasets(count: int, same: bool) -> Callable[[dict[str, Any]], None]:
    def edit(ome: dict[str, Any]) -> None:
        first = ome["multiscales"][0]["datasets"][0]
        ome["multiscales"][0]["datasets"] = [
            {**copy.deepcopy(first), "path": "0" if same else str(i)} for i in range(count)
        ]

    return edit


def _ome_edits(outside: str) -> list[tuple[str, Callable[[dict[str, Any]], None], Expect]]:
    m = "multiscales"
    return [
        ("datasets missing", lambda ome: ome[m][0].pop("datasets"), "error"),
        ("datasets []", _set_datasets([]), "error"),
        ("datasets 5 (number)", _set_datasets(5), "error"),
        ('dataset path "9" (missing array)', _dataset(1, path="9"), "error"),
        ('dataset path "../outside" (leaves the store)', _dataset(1, path=outside), "error"),
        (
            "dataset path absolute (outside the store)",
            _dataset(1, path=_OUTSIDE + outside[3:]),
            "error",
        ),
        ('dataset path "" (the group itself)', _dataset(1, path=""), "error"),
        ("dataset path 5 (number)", _dataset(1, path=5), "error"),
        (
            "dataset coordinateTransformations missing",
            _dataset(0, coordinateTransformations=_DROP),
            "error",
        ),
        ("2 axes for 3-d arrays", lambda ome: ome[m][0]["axes"].pop(0), "error"),
        (
            "4 axes for 3-d arrays",
            lambda ome: ome[m][0]["axes"].insert(0, {"name": "t", "type": "time"}),
            "error",
        ),
        ("duplicate axis names", lambda ome: ome[m][0]["axes"][1].update(name="x"), "error"),
        ("scale of length 2 for 3 axes", _scale(0, [1.0, 0.5]), "error"),
        ("scale of strings", _scale(0, ["1", "0.5", "0.5"]), "error"),
        ("negative scale [1, -0.5, -0.5]", _scale(0, [1.0, -0.5, -0.5]), "either"),
        ("zero scale [1, 0, 0]", _scale(0, [1.0, 0.0, 0.0]), "error"),
        ("NaN scale", _scale(0, [1.0, math.nan, 0.5]), "error"),
        ("Infinity scale", _scale(0, [1.0, math.inf, 0.5]), "error"),
        ("Infinity translation", _translation(0, [0.0, -math.inf, 0.0]), "error"),
        ("1e308 scale (finite, absurd)", _scale(0, [1.0, 1e308, 1e308]), "either"),
        # On the coarsest level, out of reach of the models' finer-before-coarser check.
        ("NaN scale on the coarsest level", _scale(1, [1.0, math.nan, 1.0]), "error"),
        ("Infinity scale on the coarsest level", _scale(1, [1.0, math.inf, 1.0]), "error"),
        ("1e308 scale on the coarsest level", _scale(1, [1.0, 1e308, 1e308]), "either"),
        ("NaN translation on the coarsest level", _translation(1, [0.0, math.nan, 0.0]), "error"),
        # Optional rendering metadata: a warning and defaults, never a refused image.
        ('omero color "red"', _channel_field(0, "color", "red"), "opens"),
        ("omero color 255 (number)", _channel_field(0, "color", 255), "opens"),
        ('omero color "#GGGGGG"', _channel_field(0, "color", "#GGGGGG"), "opens"),
        ('omero color "0000FF00" (8 digits)', _channel_field(0, "color", "0000FF00"), "opens"),
        ("omero color missing", lambda ome: ome["omero"]["channels"][0].pop("color"), "opens"),
        (
            'omero window start "a"',
            _channel_field(0, "window", {"min": 0, "max": 1, "start": "a", "end": 1}),
            "opens",
        ),
        (
            "omero window start > end",
            _channel_field(0, "window", {"min": 0, "max": 9, "start": 9, "end": 1}),
            "either",
        ),
        (
            'omero channels "x" (string)',
            lambda ome: ome["omero"].__setitem__("channels", "x"),
            "opens",
        ),
        ("10,000 datasets, all but 2 missing", _many_datasets(10_000, same=False), "error"),
        ('10,000 datasets, all path "0"', _many_datasets(10_000, same=True), "either"),
        ("multiscales []", lambda ome: ome.__setitem__(m, []), "error"),
        ("multiscales {} (dict)", lambda ome: ome.__setitem__(m, {}), "error"),
        ('multiscales ["x"]', lambda ome: ome.__setitem__(m, ["x"]), "error"),
        ("multiscales name 5 (number)", lambda ome: ome[m][0].update(name=5), "either"),
    ]


def _label_edits() -> list[tuple[str, Callable[[dict[str, Any]], None], Expect]]:
    return [
        ('labels ["ghost"] (missing label)', lambda ome: ome.update(labels=["ghost"]), "error"),
        (
            'labels ["../.."] (leaves the labels group)',
            lambda ome: ome.update(labels=["../.."]),
            "error",
        ),
        ('labels [""] (the labels group itself)', lambda ome: ome.update(labels=[""]), "error"),
        ('labels ["/abs"]', lambda ome: ome.update(labels=["/abs"]), "error"),
        ('labels "nuclei" (string, not list)', lambda ome: ome.update(labels="nuclei"), "error"),
        ("labels [5] (number)", lambda ome: ome.update(labels=[5]), "error"),
    ]


def _ome_cases() -> Iterator[Case]:
    for version in ("0.4", "0.5"):
        v = f"OME {version}"
        yield Case(f"{v}: valid control", _ome_store(version), "opens", None)
        yield Case(
            f"{v}: valid control with labels", _ome_store(version, labels=True), "opens", None
        )
        for label, edit, expect in _ome_edits("../outside" if version == "0.4" else "../outside3"):
            files = _ome_store(version)
            edit(_ome_attrs(files, version))
            setup = _outside_array if "outside" in label else None
            yield Case(f"{v}: {label}", files, expect, None, setup)
        for label, edit, expect in _label_edits():
            files = _ome_store(version, labels=True)
            edit(_ome_attrs(files, version, "labels/"))
            yield Case(f"{v}: {label}", files, expect, None)
        files = _ome_store(version, labels=True)
        _ome_attrs(files, version, "labels/nuclei/")["multiscales"][0]["axes"].pop(0)
        yield Case(f"{v}: label image with 2 axes for 3-d arrays", files, "error", None)
        name = "zarr.json" if version == "0.5" else ".zattrs"
        files = _ome_store(version, labels=True)
        files[f"labels/{name}"] = Raw('{"labels": ["nuc')
        yield Case(f"{v}: labels group {name} truncated", files, "error", None)
        files = _ome_store(version)
        files["1/" + ("zarr.json" if version == "0.5" else ".zarray")] = (
            _v3(shape=[2, 32, 32], data_type="uint16", codecs=[_BYTES, _PICKLE_V3])
            if version == "0.5"
            else _v2(shape=[2, 32, 32], chunks=[1, 32, 32], compressor={"id": "pickle"})
        )
        yield Case(f"{v}: level 1 uses a pickle codec", files, "error", "1")
    files = _ome_store("0.4")
    _ome_attrs(files, "0.4")["multiscales"][0]["version"] = "0.5"
    yield Case("OME 0.4: version 0.5 in Zarr v2", files, "error", None)
    files = _ome_store("0.4")
    _ome_attrs(files, "0.4")["multiscales"][0]["version"] = 0.4
    yield Case("OME 0.4: version 0.4 as a number", files, "error", None)
    files = _ome_store("0.5")
    _ome_attrs(files, "0.5")["version"] = "99"
    yield Case('OME 0.5: version "99"', files, "error", None)


def _structural_cases() -> Iterator[Case]:
    yield Case(
        "store path is a symlink to itself (loop)", {}, "error", "", _store_is_a_symlink_loop
    )
    yield Case(
        "group member symlinked to the group (cycle)",
        {".zgroup": {"zarr_format": 2}, "a/.zarray": _v2()},
        "either",
        None,
        _symlink("loop", "."),
    )
    yield Case(
        ".zarray is a symlink loop",
        {"0.0": _CHUNK},
        "error",
        "",
        _symlink(".zarray", ".zarray"),
    )
    yield Case(
        "zarr.json is a symlink to /dev/zero", {}, "error", "", _symlink("zarr.json", "/dev/zero")
    )
    yield Case(
        ".zattrs is a symlink to /dev/zero",
        _v2_store(_v2()),
        "error",
        "",
        _symlink(".zattrs", "/dev/zero"),
    )
    yield Case(
        "chunk 0.0 is a symlink to /dev/zero",
        _v2_store(_v2()),
        "either",
        "",
        _symlink("0.0", "/dev/zero"),
    )
    yield Case(".zattrs is a FIFO", _v2_store(_v2()), "error", "", _fifo(".zattrs"))
    yield Case("chunk 0.0 is a FIFO", {".zarray": _v2()}, "either", "", _fifo("0.0"))
    yield Case(
        "OME 0.4: level 0 directory is a symlink to an array outside the store",
        _ome_store("0.4"),
        "either",
        None,
        _level_links_outside,
    )


CASES = [
    *_generic_json_cases(),
    *_v2_cases(),
    *_v3_cases(),
    *_ome_cases(),
    *_structural_cases(),
]


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_malformed_store(worker: _Worker, tmp_path: Path, case: Case) -> None:
    store = tmp_path / "store.zarr"
    _write(store, case.files)
    if case.setup is not None:
        case.setup(store)
    _assert_contract(worker, case.id, store, case.expect, case.array)


# ============================================================================
# Fuzzing: random mutations of valid documents
# ============================================================================

_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 1, 2**31, 2**62, 2**63, 2**64, -(2**63)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["<u2", "|O", "pickle", "numcodecs.pickle", "uint16", "regular", "..", "/", "NaN", ""]
    )
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into `document` (the root is ``()``)."""
    paths = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            paths.extend(_paths(value, (*prefix, key)))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            paths.extend(_paths(value, (*prefix, index)))
    return paths


def _get(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def _mutate(data: st.DataObject, document: Any) -> Any:
    """One random mutation of `document` (returned; the input is not changed)."""
    document = copy.deepcopy(document)
    # The root last: sampled_from favours early entries, and fields are the interesting part.
    paths = _paths(document)
    path = data.draw(st.sampled_from([*paths[1:], paths[0]]), label="path")
    kind = data.draw(
        st.sampled_from(["drop", "replace", "wrap", "nest-whole", "huge", "negate"]), label="how"
    )
    value = _get(document, path)
    if kind == "drop" and path:
        parent = _get(document, path[:-1])
        del parent[path[-1]]
        return document
    if kind == "replace" or (not path and kind == "drop"):
        new = data.draw(_JSON, label="value")
    elif kind == "wrap":
        new = data.draw(st.sampled_from([[value], {"value": value}, [value, value]]))
    elif kind == "nest-whole":
        new = copy.deepcopy(document)
    elif kind == "huge":
        new = data.draw(st.sampled_from([2**62, 2**63, 2**64, 10**30, [2**62, 2**62]]))
    else:
        new = -value if isinstance(value, int | float) and not isinstance(value, bool) else -1
    if not path:
        return new
    _get(document, path[:-1])[path[-1]] = new
    return document


_SEEDS: dict[str, tuple[dict[str, Any], str]] = {
    "v2 .zarray": (_v2_store(_v2()), ".zarray"),
    "v3 zarr.json": (_v3_store(_v3()), "zarr.json"),
    "OME 0.4 .zattrs": (_ome_store("0.4", labels=True), ".zattrs"),
}


@pytest.mark.parametrize("seed", list(_SEEDS))
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # The same 150 examples every run, so a failure reproduces; and no shrinking: a
    # hanging example costs CALL_TIMEOUT per attempt, and 1-3 mutations are small already.
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
)
@given(data=st.data())
def test_fuzzed_metadata(
    worker: _Worker, tmp_path_factory: pytest.TempPathFactory, seed: str, data: st.DataObject
) -> None:
    files, slot = _SEEDS[seed]
    document = files[slot]
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        document = _mutate(data, document)
    text = json.dumps(document)
    if data.draw(st.booleans(), label="truncate"):
        text = text[: data.draw(st.integers(0, max(0, len(text) - 1)), label="at")]
    store = tmp_path_factory.mktemp("fuzz") / "store.zarr"
    try:
        _write(store, {**files, slot: Raw(text)})
        array = "" if seed != "OME 0.4 .zattrs" else None
        report = worker.check(store, array)
        found = _violations(report, store, "either", array)
        assert not found, f"{seed} mutated to {text[:400]!r}:\n" + "\n".join(found)
    finally:
        shutil.rmtree(store.parent, ignore_errors=True)


# ============================================================================
# Nothing from the metadata is evaluated or imported
# ============================================================================


def _payloads(sentinel: Path) -> dict[str, str]:
    return {
        "__import__": f"__import__('os').system('touch {sentinel}')",
        "eval": f"eval(\"open('{sentinel}', 'w')\")",
        "module path": "this",
        "dotted attribute": "os.system",
        "entry point": "numcodecs.pickle:Pickle",
        "codec class path": "numcodecs.pickles.Pickle",
    }


_SLOTS: dict[str, tuple[Callable[[str], dict[str, Any]], Expect, str | None]] = {
    "v2 dtype": (lambda p: _v2_store(_v2(dtype=p)), "error", ""),
    "v2 compressor id": (lambda p: _v2_store(_v2(compressor={"id": p})), "error", ""),
    "v2 filter id": (lambda p: _v2_store(_v2(filters=[{"id": p}])), "error", ""),
    "v2 object_codec id (|O)": (
        lambda p: _v2_store(_v2(dtype="|O", fill_value=None, filters=[{"id": p}])),
        "error",
        "",
    ),
    "v2 float fill_value": (lambda p: _v2_store(_v2(dtype="<f4", fill_value=p)), "error", ""),
    "v3 data_type": (lambda p: _v3_store(_v3(data_type=p)), "error", ""),
    "v3 codec name": (lambda p: _v3_store(_v3(codecs=[_BYTES, {"name": p}])), "error", ""),
    "v3 array-to-bytes codec name": (lambda p: _v3_store(_v3(codecs=[{"name": p}])), "error", ""),
    "v3 chunk_key_encoding name": (
        lambda p: _v3_store(_v3(chunk_key_encoding={"name": p})),
        "error",
        "",
    ),
    "v3 chunk_grid name": (
        lambda p: _v3_store(
            _v3(chunk_grid={"name": p, "configuration": {"chunk_shape": [16, 16]}})
        ),
        "error",
        "",
    ),
    "v3 float fill_value": (
        lambda p: _v3_store(_v3(data_type="float32", fill_value=p)),
        "error",
        "",
    ),
    "v3 dimension_names": (lambda p: _v3_store(_v3(dimension_names=[p, "x"])), "opens", ""),
}


def _ome_with_axis_name(payload: str) -> dict[str, Any]:
    files = _ome_store("0.4")
    _ome_attrs(files, "0.4")["multiscales"][0]["axes"][1]["name"] = payload
    return files


@pytest.mark.parametrize("payload_kind", list(_payloads(Path("x"))))
@pytest.mark.parametrize("slot", [*_SLOTS, "OME axis name"])
def test_nothing_is_evaluated_or_imported(
    worker: _Worker, tmp_path: Path, slot: str, payload_kind: str
) -> None:
    sentinel = tmp_path / "pwned"
    payload = _payloads(sentinel)[payload_kind]
    if slot == "OME axis name":
        files, expect, array = _ome_with_axis_name(payload), "opens", None
    else:
        make, expect, array = _SLOTS[slot]
        files = make(payload)
    store = tmp_path / "store.zarr"
    _write(store, files)
    report = _assert_contract(worker, f"eval probe: {slot} = {payload_kind}", store, expect, array)
    assert not sentinel.exists(), f"{slot}: the metadata ran code: {sentinel} was created"
    if expect == "opens":  # free-form text: shown verbatim, never interpreted
        labels = {label for layer in report["layers"] for label in layer["axis_labels"]}
        assert payload in labels
