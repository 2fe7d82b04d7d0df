"""The main thread's time inside this project's package: "our own main-thread work".

A viewer benchmark's step (camera move, paint, events) is mostly napari and vispy;
issue 24 asks for the plugin's own share of it (≤ 5 ms median per step, never a
single piece over 50 ms). `OwnTime` measures it with `sys.monitoring` (PEP 669):
a function of `napari_lazy_zarr` entered on the main thread from code that is not
the package's (napari slicing a layer's data, a Qt timer, a psygnal slot, an
event callback) starts a clock, and leaving that outermost frame (return, yield or
exception) stops it. What the package calls — NumPy, zarr, napari's
``layer.refresh()`` — counts as the package's: it is work the plugin asked for.

Overhead: every other code location is disabled after its first event
(`sys.monitoring.DISABLE`), so napari and vispy run uninstrumented; the
package's own functions pay one Python callback per call and return (about
0.5 µs each), on every thread. The figure is therefore an upper bound.

Figures (all in seconds): `total` since the last `reset`, `longest` single
outermost entry since then (`longest_where`: the package function it entered),
`entries` counted.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import CodeType

__all__ = ["OwnTime"]

_EVENTS = sys.monitoring.events


class OwnTime:
    """Time the main thread spends inside the package whose directory is `package`.

    Use as a context manager (or `start` / `stop`); one per process.
    """

    def __init__(self, package: str | Path | None = None) -> None:
        if package is None:
            import napari_lazy_zarr

            package = Path(napari_lazy_zarr.__file__).resolve().parent
        self._prefix = str(Path(package).resolve()) + "/"
        self._ours: dict[CodeType, bool] = {}
        self._main = threading.main_thread().ident
        self._depth = 0
        self._entered = 0.0
        self.total = 0.0
        self.longest = 0.0
        self.longest_where = ""
        self.entries = 0
        self._outer: CodeType | None = None
        self._tool = sys.monitoring.PROFILER_ID

    def _is_ours(self, code: CodeType) -> bool:
        known = self._ours.get(code)
        if known is None:
            known = self._ours[code] = code.co_filename.startswith(self._prefix)
        return known

    def _enter(self, code: CodeType, _offset: int) -> Any:
        if not self._is_ours(code):
            return sys.monitoring.DISABLE
        if threading.get_ident() != self._main:
            return None
        self._depth += 1
        if self._depth == 1:
            self._entered = time.perf_counter()
            self._outer = code
        return None

    def _leave(self, code: CodeType, _offset: int, _value: object) -> Any:
        if not self._is_ours(code):
            return sys.monitoring.DISABLE
        if threading.get_ident() != self._main or self._depth == 0:
            return None
        self._depth -= 1
        if self._depth == 0:
            spent = time.perf_counter() - self._entered
            self.total += spent
            self.entries += 1
            if spent > self.longest:
                self.longest = spent
                self.longest_where = _where(self._outer)
        return None

    def _unwind(self, code: CodeType, offset: int, exception: BaseException) -> Any:
        # PY_UNWIND cannot be disabled per location: only the package's frames count.
        if self._is_ours(code):
            self._leave(code, offset, exception)
        return None

    def reset(self) -> None:
        """Start the figures again (an entry in progress counts from now)."""
        self.total = self.longest = 0.0
        self.longest_where = ""
        self.entries = 0
        if self._depth:
            self._entered = time.perf_counter()

    def start(self) -> OwnTime:
        monitoring = sys.monitoring
        monitoring.use_tool_id(self._tool, "napari-lazy-zarr own time")
        monitoring.register_callback(self._tool, _EVENTS.PY_START, self._enter)
        monitoring.register_callback(self._tool, _EVENTS.PY_RESUME, self._enter)
        monitoring.register_callback(self._tool, _EVENTS.PY_RETURN, self._leave)
        monitoring.register_callback(self._tool, _EVENTS.PY_YIELD, self._leave)
        monitoring.register_callback(self._tool, _EVENTS.PY_UNWIND, self._unwind)
        monitoring.set_events(
            self._tool,
            _EVENTS.PY_START
            | _EVENTS.PY_RESUME
            | _EVENTS.PY_RETURN
            | _EVENTS.PY_YIELD
            | _EVENTS.PY_UNWIND,
        )
        return self

    def stop(self) -> None:
        monitoring = sys.monitoring
        monitoring.set_events(self._tool, 0)
        for event in (
            _EVENTS.PY_START,
            _EVENTS.PY_RESUME,
            _EVENTS.PY_RETURN,
            _EVENTS.PY_YIELD,
            _EVENTS.PY_UNWIND,
        ):
            monitoring.register_callback(self._tool, event, None)
        monitoring.free_tool_id(self._tool)

    def __enter__(self) -> OwnTime:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _where(code: CodeType | None) -> str:
    """``qualname (file:line)`` of a function's code, for a report."""
    if code is None:
        return ""
    return f"{code.co_qualname} ({Path(code.co_filename).name}:{code.co_firstlineno})"
