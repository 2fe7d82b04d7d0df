"""`ViewBounds`: how much one read, or one view napari shows, may cost — in one place.

A read through the exact door (`ChunkedArray.result`, `np.asarray` of layer data,
`open_array`) is refused with `PlanTooLargeError` over `max_chunks` chunks or over
its byte bound (the cache's `total_bytes_limit`, never below `min_bytes`). A view
napari's display shows is never refused for its level: over `view_chunks` chunks,
or `view_stored_chunks` stored chunks under a virtual level's, it is served from
the finest coarser level within both (`core.viewport`), and refused only when the
frame itself would be over `view_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_BOUNDS", "ViewBounds"]


@dataclass(frozen=True, slots=True)
class ViewBounds:
    """The bounds of one read and of one displayed view.

    Examples
    --------
    >>> bounds = ViewBounds()
    >>> bounds.read_bytes(1 << 30) == 1 << 30, bounds.read_bytes(0) == 256 << 20
    (True, True)
    >>> ViewBounds(view_chunks=4).view_chunks
    4
    """

    max_chunks: int = 65_536
    """Chunks one read may plan."""
    min_bytes: int = 256 << 20
    """The least byte bound of a read, whatever the cache's limit."""
    view_chunks: int = 8192
    """Chunks one displayed view may plan at its level (planning costs 5-10 µs each)."""
    view_stored_chunks: int = 65_536
    """Stored chunks one displayed view may cost (a virtual level's counted by its inputs)."""
    view_bytes: int = 256 << 20
    """The largest frame a displayed view served from a coarser level is upsampled into."""

    def read_bytes(self, cache_limit: int) -> int:
        """A read's byte bound for a cache of `cache_limit` bytes."""
        return max(cache_limit, self.min_bytes)


DEFAULT_BOUNDS: Final = ViewBounds()
"""The bounds every read and view has unless told otherwise."""
