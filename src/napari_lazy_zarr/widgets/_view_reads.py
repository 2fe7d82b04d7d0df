"""`ViewReads`: the inspected layer's latest reads, from the dispatch thread to the main thread.

Qt-free. The controller answers napari's reads on its dispatch thread; the
inspector's slot turns each answer into `ViewCells` there (`arrive`: the
per-chunk work, off the main thread) and keeps only the latest of each kind
("view", "thumbnail"). The main thread's refresh takes what arrived (`take`)
and picks the read that shows the map's level (`choose`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from napari_lazy_zarr.widgets._view_cells import ViewCells

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.viewport import ViewFrame
    from napari_lazy_zarr.widgets._grid_state import ChunkGridState

__all__ = ["ViewReads"]


class ViewReads:
    """The latest read of each kind: arrived from the dispatch thread, then as applied.

    Thread contract: `arrive` runs on the controller's dispatch thread,
    `drop_arrivals` on either; everything else, `views` included, on the main
    thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived: dict[str, ViewCells] = {}
        self._previous: dict[str, ViewCells] = {}  # the dispatch thread's latest, per kind
        self.views: dict[str, ViewCells] = {}
        """The latest read of each kind the main thread has taken."""

    def arrive(self, result: ViewFrame, grids: Sequence[ChunkGridState | None]) -> None:
        """A read was answered (dispatch thread); kept if of one of `grids` (the levels shown)."""
        level = result.request.level
        grid = grids[level] if level < len(grids) else None
        if grid is None or (result.keys and result.keys[0].source != grid.identity):
            return
        kind = result.request.kind
        with self._lock:
            previous = self._arrived.get(kind) or self._previous.get(kind)
        cells = ViewCells.of(result, grid, previous)  # the per-chunk work, off the main thread
        with self._lock:
            self._arrived[kind] = self._previous[kind] = cells

    def drop_arrivals(self) -> None:
        """Forget what arrived and was not taken yet (another controller, or none, now)."""
        with self._lock:
            self._arrived = {}
            self._previous = {}

    def take(self) -> dict[str, ViewCells]:
        """What arrived since the last call, now also in `views` (main thread)."""
        with self._lock:
            arrived, self._arrived = self._arrived, {}
        self.views.update(arrived)
        return arrived

    def choose(self, level: int, grids: Sequence[ChunkGridState | None]) -> ViewCells | None:
        """The read showing `level` of `grids`, or None.

        napari reads a multiscale layer twice: its view at the displayed level and,
        for the thumbnail, the whole coarsest level — which is also what it shows
        when the coarsest level is displayed (from its own copy, without reading
        again). When no read of the level is known, the coarsest level's whole
        plane stands for it: it has no stand-ins, so each chunk shows its data or
        the fill value.
        """
        grid = grids[level] if level < len(grids) else None
        if grid is None:
            return None
        for kind in ("view", "thumbnail"):
            cells = self.views.get(kind)
            if cells is not None and cells.level == level:
                return cells
        if level == len(grids) - 1:
            return ViewCells.whole_plane(grid, level, self.views.get("view"))
        return None
