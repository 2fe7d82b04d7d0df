"""Widget tests: the napari tests' fixtures, and a fixture failing any test that leaks Qt.

`_catch_qt_leaks` follows ndv's fixture of that name: after each passing test
(and after napari's fixture has closed its viewers), no widget of this
package may be alive, no new top-level widget may remain, no new QTimer may
be running, and no signal may still call into an object of this package.
It checks *before* any garbage collection of its own: cleanup must not wait
for the collector. `_fail_on_guarded_errors` fails a test in which a paint
event or timer slot raised: the guard (`widgets._guarded`) logs such errors
instead of letting them reach Qt's event loop, where pytest-qt would see them.
"""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING, Any

import pytest

from napari_lazy_zarr.widgets._guarded import logger as guard_logger
from tests.napari.conftest import (
    fresh_shared_cache,
    ome_store,
    pytest_collection_modifyitems,
    recorded_reads,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "_catch_qt_leaks",
    "_fail_on_guarded_errors",
    "fresh_shared_cache",
    "ome_store",
    "pytest_collection_modifyitems",
    "recorded_reads",
]

_PACKAGE = "napari_lazy_zarr.widgets"


def _ours(obj: Any) -> bool:
    """Whether `obj` (or the object a bound method is bound to) comes from the widgets package."""
    try:
        target = getattr(obj, "__self__", obj)
        module = getattr(obj, "__module__", "") or ""
    except RuntimeError:  # a Qt wrapper whose C++ object is gone
        target, module = obj, ""
    return type(target).__module__.startswith(_PACKAGE) or module.startswith(_PACKAGE)


def _live(obj: Any) -> bool:
    from qtpy.compat import isalive  # sip's isdeleted or shiboken's isValid

    try:
        return bool(isalive(obj))
    except TypeError:
        return False


def deleted(obj: Any) -> bool:
    """Whether `obj`'s C++ object is gone, once the deletions Qt deferred have run.

    A `deleteLater` made inside an event handler runs when control returns to
    the event loop that dispatched it: napari's top-level loop in use, which a
    test's `qtbot.waitUntil` (a nested loop) is not under Qt 5. Sending the
    deferred deletions is what that return would do.
    """
    from qtpy.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return not _live(obj)


def running_timers() -> dict[int, str]:
    """The QTimers alive and active (found through the collector's object list), described."""
    from qtpy.QtCore import QTimer

    return {
        id(o): f"QTimer(interval={o.interval()}, parent={type(o.parent()).__name__})"
        for o in gc.get_objects()
        if isinstance(o, QTimer) and _live(o) and o.isActive()
    }


def connections_to_ours() -> list[str]:
    """Every psygnal or napari-event connection whose slot belongs to the widgets package."""
    from napari.utils.events import EventEmitter
    from psygnal import SignalInstance

    found = []
    for obj in gc.get_objects():
        if isinstance(obj, SignalInstance):
            # psygnal keeps no public list of its slots. A SignalInstance torn down
            # half-way (kept by a failed test's traceback) has none: skip it rather than
            # fail every later test.
            try:
                slots = list(obj._slots)
            except AttributeError:
                continue
            for slot in slots:
                callback = slot.dereference()
                if callback is not None and _ours(callback):
                    found.append(f"{obj.name} -> {callback!r}")
        elif isinstance(obj, EventEmitter):
            for callback in list(obj.callbacks):
                if isinstance(callback, tuple):  # (weakref to object, method name)
                    target = callback[0]()
                    if target is not None and _ours(target):
                        found.append(f"{obj.source!r}.{callback[1]}")
                elif _ours(callback):
                    found.append(repr(callback))
    return found


def _process_deletions(qapp: Any) -> None:
    from qtpy.QtCore import QCoreApplication, QEvent

    for _ in range(3):
        qapp.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture(autouse=True)
def _catch_qt_leaks(request: pytest.FixtureRequest, qapp: Any) -> Iterator[None]:
    """Fail a test that leaves a widget, a running timer or a connection of ours behind."""
    from psygnal.qt import start_emitting_from_queue

    # The glue's process-wide psygnal queue timer (started on the first layer, never
    # stopped; same interval as `LayerLoader.attach`) belongs to no test.
    start_emitting_from_queue(msec=10)
    top_before = set(qapp.topLevelWidgets())
    timers_before = running_timers()
    connections_before = set(connections_to_ours())
    failures_before = request.session.testsfailed
    yield
    if request.session.testsfailed - failures_before:
        return  # a failed test's traceback holds its objects: nothing to learn here
    _process_deletions(qapp)
    try:
        from vispy.app.backends._qt import CanvasBackendDesktop

        allow: tuple[type, ...] = (CanvasBackendDesktop,)
    except (ImportError, RuntimeError):
        allow = ()
    new_top = [
        w for w in qapp.topLevelWidgets() if w not in top_before and not isinstance(w, allow)
    ]
    widgets = [w for w in qapp.allWidgets() if _ours(w)]
    timers = [t for i, t in running_timers().items() if i not in timers_before]
    connections = [c for c in connections_to_ours() if c not in connections_before]
    problems = []
    if new_top:
        problems.append(f"top-level widgets left: {new_top}")
    if widgets:
        problems.append(f"widgets of {_PACKAGE} still alive: {widgets}")
    if timers:
        problems.append(f"QTimers still running: {timers}")
    if connections:
        problems.append(f"signals still connected to {_PACKAGE}: {connections}")
    if problems:
        test = f"{request.node.path.name}::{request.node.name}"
        raise AssertionError(f"Qt leaks after {test!r}: " + "; ".join(problems))


class _Collected(logging.Handler):
    """The records logged while attached."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def guarded_errors() -> Iterator[list[logging.LogRecord]]:
    """What the paint and timer guard logs during the test (a test asking expects some)."""
    handler = _Collected()
    guard_logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        guard_logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _fail_on_guarded_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """The guard keeps a paint or timer failure from napari's event loop: not from the tests."""
    if "guarded_errors" in request.fixturenames:
        yield
        return
    handler = _Collected()
    guard_logger.addHandler(handler)
    try:
        yield
    finally:
        guard_logger.removeHandler(handler)
    if handler.records:
        raise AssertionError(
            "a paint event or timer slot failed: "
            + "; ".join(handler.format(record) for record in handler.records)
        )
