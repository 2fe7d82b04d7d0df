"""`QLiveWhileShown`: a widget docked in napari, live only while shown; its `Subscriptions`.

napari never calls `close()` on a docked widget. A `QLiveWhileShown` is
*live* — timer running, connected to the viewer and to what it follows —
only while it is shown: hiding it (its dock hidden, a tab in front of it, the
viewer closing) makes it idle (`_stop`: the subclass stops its timer and
undoes every connection); showing it again makes it live (`_start`).
Removing the dock (`remove_dock_widget`, the dock's close button) re-parents
the widget to nothing: it then deletes itself. If the widget is destroyed by
other means, its `destroyed` signal undoes the connections (they are kept
apart from the widget in `Subscriptions`, holding it only weakly).
`weakly` holds a callback the same way, for child widgets that call back
into their owner.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import TYPE_CHECKING, Any

from qtpy.QtCore import QEvent
from qtpy.QtWidgets import QWidget

if TYPE_CHECKING:
    from collections.abc import Callable

    from qtpy.QtGui import QHideEvent, QShowEvent

__all__ = ["QLiveWhileShown", "Subscriptions", "release_on_destroyed", "weakly"]


class Subscriptions:
    """Signal connections to undo together.

    Holds each slot weakly (the widget's bound methods), so it can outlive the
    widget — it is what the widget's `destroyed` signal calls — without
    keeping the widget alive.
    """

    def __init__(self) -> None:
        self._pairs: list[tuple[Any, weakref.WeakMethod[Callable[..., Any]]]] = []

    def connect(self, signal: Any, slot: Callable[..., Any]) -> None:
        """Connect a psygnal signal or a napari event emitter to a bound method."""
        signal.connect(slot)
        self._pairs.append((signal, weakref.WeakMethod(slot)))

    def disconnect(self, signal: Any, slot: Callable[..., Any]) -> None:
        """Undo the connections of `slot` to `signal` (none: nothing happens)."""
        kept = []
        for pair in self._pairs:
            if pair[0] is signal and pair[1]() == slot:
                with contextlib.suppress(Exception):
                    signal.disconnect(slot)
            else:
                kept.append(pair)
        self._pairs = kept

    def clear(self, *_: Any) -> None:
        """Undo every connection whose slot still exists (idempotent)."""
        pairs, self._pairs = self._pairs, []
        for signal, weak in reversed(pairs):
            slot = weak()
            if slot is not None:
                with contextlib.suppress(Exception):  # a signal already torn down by its owner
                    signal.disconnect(slot)


def release_on_destroyed(links: Subscriptions, widget: weakref.ref[Any], *_: Any) -> None:
    """The widget's C++ object is gone: undo its connections, free its Python side.

    napari's dock stores itself on the docked widget (`widget._parent`) while
    holding the widget: a reference cycle only the garbage collector would
    break, keeping the widget's Python side (and what it connected) alive
    until then. Dropping napari's back-reference lets it go at once.
    """
    links.clear()
    inspector = widget()
    if inspector is not None:
        vars(inspector).pop("_parent", None)


def weakly[T](callback: Callable[..., T]) -> Callable[[], Callable[..., T] | None]:
    """A getter of `callback` that holds a bound method weakly (None once its object is gone).

    Any other callable is held as it is.

    Examples
    --------
    >>> class Owner:
    ...     def name(self) -> str:
    ...         return "owner"
    >>> owner = Owner()
    >>> get = weakly(owner.name)
    >>> get()()
    'owner'
    >>> del owner
    >>> get() is None
    True
    """
    if hasattr(callback, "__self__"):
        return weakref.WeakMethod(callback)
    return lambda: callback


class QLiveWhileShown(QWidget):
    """A widget that is live only while shown, and deletes itself once its dock is removed.

    Subclasses connect through `_links` in `_start` and stop their timers in
    `_stop` (the connections are undone there too); neither is called twice in
    a row. `cleanup` stops it for good.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._links = Subscriptions()
        # Undo the connections even if the widget is deleted without being hidden first.
        self.destroyed.connect(
            functools.partial(release_on_destroyed, self._links, weakref.ref(self))
        )
        self._live = False
        self._closed = False
        self._docked = False

    @property
    def live(self) -> bool:
        """Whether the timer runs and the signals are connected (while shown)."""
        return self._live

    def showEvent(self, event: QShowEvent | None) -> None:
        super().showEvent(event)
        self._go_live()

    def hideEvent(self, event: QHideEvent | None) -> None:
        self._go_idle()
        super().hideEvent(event)

    def event(self, event: QEvent | None) -> bool:
        if event is not None and event.type() == QEvent.Type.ParentChange:
            if self.parent() is not None:
                self._docked = True
            elif self._docked:
                # napari's remove_dock_widget (and the dock's close button) only
                # re-parents the widget: it would linger, orphaned. It is gone for good.
                self.cleanup()
                self.deleteLater()
        return super().event(event)

    def cleanup(self) -> None:
        """Stop for good: timer stopped, every signal disconnected (idempotent).

        Not needed in napari (hiding or removing the dock does it); for
        widgets made by hand.
        """
        self._go_idle()
        self._closed = True

    def _go_live(self) -> None:
        if self._live or self._closed:
            return
        self._live = True
        self._start()

    def _go_idle(self) -> None:
        if not self._live:
            return
        self._live = False
        self._stop()

    def _start(self) -> None:
        """Connect and start (shown)."""

    def _stop(self) -> None:
        """Stop and disconnect (hidden): `_links.clear()` at least."""
        self._links.clear()
