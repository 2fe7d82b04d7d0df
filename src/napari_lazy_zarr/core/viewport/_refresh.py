"""Whether the viewer shows what has landed: one controller's refresh bookkeeping.

Private to the package: `ViewController` owns one `Refreshes` and exposes it as
`settled`, `slice_applied`, `refresh_skipped` and `wait_until_settled`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Hashable

__all__ = ["Refreshes"]

_VIEW = "view"
"""The kind napari reads in every slice (`ViewKind`)."""


class Refreshes:
    """Reads, change signals and applied slices, on one condition variable (thread-safe).

    `view_changed` is emitted at most once until the next read (`changed`);
    a refresh is pending from that signal until the viewer applies a slice read
    after it (`slice_applied`), or says it will not read (`refresh_skipped`).
    Settled is `complete()` with no refresh pending. Waiters are woken on every
    change of either (`notify` for changes of `complete()`), as napari's
    `_LayerSlicer.wait_until_idle` waits on its futures rather than polling.

    `complete` is called with the condition held: it must not wait for a lock
    held by a thread that calls into this object.
    """

    def __init__(self, complete: Callable[[], bool]) -> None:
        self._complete = complete
        self._condition = threading.Condition()
        self.reads = 0
        self._kind_reads: dict[Hashable, int] = {}  # reads per view kind
        self._signalled = False  # view_changed emitted, not yet followed by a read
        self._pending = False  # a landing not yet shown by an applied slice
        # Per changed kind: its reads and the view's reads at its latest change.
        self._asked: dict[Hashable, tuple[int, int]] = {}
        self._closed = False

    def read(self, kind: Hashable) -> None:
        """A read of view `kind` registered its view: the next change may be signalled again.

        Counted once the view is registered, not as the read begins: a landing in the
        view it replaces, or in this one before, asks for no read after this one
        (measured, the switch to 3D: a chunk of the 2D view landing during napari's
        first 3D read had it read, upload and paint that volume twice, 1.9-2.7 s each
        under software rendering, while the finer level waited).
        """
        with self._condition:
            self.reads += 1
            self._kind_reads[kind] = self._kind_reads.get(kind, 0) + 1
            self._signalled = False

    def changed(self, kinds: Collection[Hashable]) -> bool:
        """Something the shown views of `kinds` lacked landed: whether to emit
        `view_changed` now. Pending until each of those kinds, or the view, is read again
        (`slice_applied`)."""
        with self._condition:
            if self._closed:
                return False
            view = self._kind_reads.get(_VIEW, 0)
            for kind in kinds:
                self._asked[kind] = (self._kind_reads.get(kind, 0), view)
            self._pending = True
            emit = not self._signalled
            self._signalled = True
            self._condition.notify_all()
        return emit

    def slice_applied(self) -> None:
        """The viewer shows a slice: if it read every changed kind after its last change, it
        is final. napari reads the view, then the thumbnail: a landing in the view between
        the two is not in this slice. A read of the view counts for every kind (in 3D
        napari reads no thumbnail until it locks a finer level)."""
        with self._condition:
            reads = self._kind_reads
            view = reads.get(_VIEW, 0)
            if all(reads.get(k, 0) > at or view > v for k, (at, v) in self._asked.items()):
                self._pending = False
                self._asked.clear()
                self._condition.notify_all()

    def refresh_skipped(self) -> None:
        """The viewer will not read again (layer hidden): stop waiting for it."""
        with self._condition:
            self._pending = False
            self._asked.clear()
            self._signalled = False
            self._condition.notify_all()

    def notify(self) -> None:
        """`complete()` may have changed: wake the waiters to look again."""
        with self._condition:
            self._condition.notify_all()

    def close(self) -> None:
        """Wake every waiter for good (they return what is true now)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    @property
    def pending(self) -> bool:
        """A change was signalled and no slice read after it has been applied yet."""
        with self._condition:
            return self._pending

    @property
    def settled(self) -> bool:
        with self._condition:
            return self._settled()

    def _settled(self) -> bool:
        return not self._pending and self._complete()

    def wait_until_settled(self, timeout: float | None = None) -> bool:
        """Block until settled (True), `timeout` seconds pass or `close` (what is true then)."""
        with self._condition:
            self._condition.wait_for(lambda: self._closed or self._settled(), timeout)
            return self._settled()
