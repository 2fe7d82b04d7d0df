"""Guards for code Qt calls on its own: paint events and timer slots.

An exception escaping a Qt virtual (`paintEvent`) or a slot Qt's event loop
calls (a `QTimer`'s `timeout`) is handled differently by each binding: PyQt5
aborts the process, PySide6 prints it and may leave a `QPainter` active on a
device being destroyed (a segfault), PyQt6 prints it at every frame. Here
it is logged once, with its traceback, and stops there; the painter is always
ended.

`painting(device)` opens a `QPainter` and ends it whatever happens;
`logged_once` wraps a paint event or a slot so that what it raises is logged
the first time (per slot, exception type and raising line) and dropped
afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import traceback
from typing import TYPE_CHECKING

from qtpy.QtGui import QPainter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from qtpy.QtGui import QPaintDevice

__all__ = ["logged_once", "painting", "reported"]

logger = logging.getLogger(__name__)

_reported: set[tuple[str, str, str, int]] = set()
_lock = threading.Lock()


@contextlib.contextmanager
def painting(device: QPaintDevice) -> Iterator[QPainter]:
    """A `QPainter` on `device`, ended when the block exits, even by an exception.

    Examples
    --------
    >>> from qtpy.QtGui import QImage
    >>> image = QImage(4, 4, QImage.Format.Format_RGB32)
    >>> with painting(image) as painter:
    ...     painter.isActive()
    True
    >>> painter.isActive()
    False
    """
    painter = QPainter(device)
    try:
        yield painter
    finally:
        painter.end()


def _site(slot: Callable[..., object], error: BaseException) -> tuple[str, str, str, int]:
    """What identifies a failure: the slot, the exception's type and the line that raised it."""
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    return (
        slot.__qualname__,
        type(error).__qualname__,
        "" if last is None else last.filename,
        0 if last is None or last.lineno is None else last.lineno,
    )


def logged_once[**P](slot: Callable[P, None]) -> Callable[P, None]:
    """Wrap a paint event or a slot: an exception it raises is logged once, never re-raised.

    Qt calls these at every frame or tick: one bad state would otherwise flood
    the log (or, under PyQt5, abort napari). The first failure of each kind
    (slot, exception type, raising line) is logged at ERROR level with its
    traceback on the ``napari_lazy_zarr.widgets._guarded`` logger; repeats are
    dropped. `KeyboardInterrupt` and `SystemExit` pass through.

    Examples
    --------
    >>> calls = []
    >>> @logged_once
    ... def tick() -> None:
    ...     calls.append(1)
    ...     raise ValueError("bad state")
    >>> tick(); tick()
    >>> len(calls), len([s for s in reported() if s[0] == "tick"])
    (2, 1)
    """

    @functools.wraps(slot)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            slot(*args, **kwargs)
        except Exception as error:
            site = _site(slot, error)
            with _lock:
                first = site not in _reported
                _reported.add(site)
            if first:
                logger.error(
                    "%s raised %s (logged once; later repeats are not logged)",
                    slot.__qualname__,
                    type(error).__name__,
                    exc_info=error,
                )

    return guarded


def reported() -> frozenset[tuple[str, str, str, int]]:
    """The failures logged so far: (slot, exception type, file, line) of each."""
    with _lock:
        return frozenset(_reported)
