"""What the inspector writes about the view: its summary, the levels' and planes' tooltips.

Qt-free, on the main thread: `view_summary` counts the view's chunks by what
they show (final, provisional and from which level, fill value) and, for
those not final, by why (`REASON_WORDS`); the chunk under the pointer is
explained by `describe_chunk` (`_explain`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.widgets._grid_state import STATE_CODES, ChunkGridState, Shown
from napari_lazy_zarr.widgets._view_cells import stand_in_levels

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from napari_lazy_zarr.core import ChunkKey
    from napari_lazy_zarr.core.cache import CacheCounters
    from napari_lazy_zarr.widgets._view_cells import PlaneResidency, ViewCells

    ParkedAndDeferred = Callable[[], tuple[frozenset[ChunkKey], frozenset[ChunkKey]]]

__all__ = [
    "REASON_WORDS",
    "level_tooltips",
    "mask_of",
    "not_final_reasons",
    "plane_tooltips",
    "view_summary",
]

REASON_WORDS: Final = {
    "queued": "queued",
    "in flight": "in flight",
    "parked": "parked (view moved on)",
    "deferred": "waiting for finer chunks",
    "failed": "failed",
    "evicted": "evicted under the budget",
    "not admitted": "not admitted (pinned bytes exceed the budget)",
    "not requested": "not requested yet",
}
"""How the summary words each reason (the keys of `REASONS`)."""


def view_summary(
    cells: ViewCells,
    grid: ChunkGridState,
    grids: Sequence[ChunkGridState | None],
    stats: CacheCounters,
    parked_and_deferred: ParkedAndDeferred | None,
) -> str:
    """The view's chunks by what they show and, for those not final, by reason.

    `grids` are the layer's levels (for the levels standing in);
    `parked_and_deferred` is the cache's method of that name (None: no cache).
    """
    shown = cells.shown_now(grid)
    total = int(shown.size)
    counts = np.bincount(shown.ravel(), minlength=len(Shown))
    parts = [f"{counts[Shown.FINAL]:,} final"]
    if counts[Shown.PROVISIONAL]:
        levels = stand_in_levels(cells, grids)
        found = sorted({int(v) for v in np.unique(levels[shown == Shown.PROVISIONAL])} - {-1})
        source = (
            f" from level {found[0]}"
            if len(found) == 1
            else f" from levels {', '.join(map(str, found))}"
            if found
            else ""
        )
        parts.append(f"{counts[Shown.PROVISIONAL]:,} provisional{source}")
    if counts[Shown.FILL] + counts[Shown.FAILED]:
        parts.append(f"{counts[Shown.FILL] + counts[Shown.FAILED]:,} fill value")
    text = f"View at level {cells.level}: {total:,} chunks — " + ", ".join(parts) + "."
    reasons = not_final_reasons(cells, grid, shown, stats, parked_and_deferred)
    if reasons:
        text += "\nNot final: " + ", ".join(f"{n:,} {why}" for why, n in reasons.items()) + "."
    return text


def not_final_reasons(
    cells: ViewCells,
    grid: ChunkGridState,
    shown: np.ndarray[Any, Any],
    stats: CacheCounters,
    parked_and_deferred: ParkedAndDeferred | None,
) -> dict[str, int]:
    """How many of the view's chunks that are not final wait for each reason."""
    waiting = shown != Shown.FINAL
    if not waiting.any():
        return {}
    codes = grid.codes[cells.block]
    by_state = np.bincount(codes[waiting], minlength=len(STATE_CODES))
    counts: dict[str, int] = {}
    queued = int(by_state[STATE_CODES[ChunkState.QUEUED]])
    if queued and parked_and_deferred is not None and (stats.parked or stats.deferred):
        # Parked and deferred chunks are QUEUED too: told apart by the cache's sets.
        is_queued = waiting & (codes == STATE_CODES[ChunkState.QUEUED])
        for keys, reason in zip(parked_and_deferred(), ("parked", "deferred"), strict=True):
            n = int(np.count_nonzero(mask_of(keys, grid, cells) & is_queued))
            if n:
                counts[reason] = n
                queued -= n
    evicted = "not admitted" if stats.pinned_bytes >= stats.total_bytes_limit else "evicted"
    for reason, n in (
        ("queued", queued),
        ("in flight", by_state[STATE_CODES[ChunkState.LOADING]]),
        ("failed", by_state[STATE_CODES[ChunkState.FAILED]]),
        (evicted, by_state[STATE_CODES[ChunkState.EVICTED]]),
        ("not requested", by_state[STATE_CODES[ChunkState.NEW]]),
    ):
        if n:
            counts[reason] = int(n)
    order = list(REASON_WORDS)
    return {REASON_WORDS[k]: counts[k] for k in sorted(counts, key=order.index)}


def mask_of(
    keys: Iterable[ChunkKey], grid: ChunkGridState, cells: ViewCells
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The chunks of the view's block among `keys` (keys of other sources ignored)."""
    mask = np.zeros(cells.shown.shape, dtype=bool)
    mine = [k for k in keys if k.source == grid.identity]
    if not mine:
        return mask
    flat = np.fromiter((grid.flat_of(k) for k in mine), dtype=np.int64, count=len(mine))
    coords = np.unravel_index(flat, grid.shape)
    relative = [c - s for c, s in zip(coords, cells.start, strict=True)]
    inside = np.ones(len(flat), dtype=bool)
    for axis, r in enumerate(relative):
        inside &= (r >= 0) & (r < mask.shape[axis])
    mask[tuple(r[inside] for r in relative)] = True
    return mask


def level_tooltips(coverage: Sequence[float | None], shown_level: int) -> list[str]:
    """Each level segment's tooltip: how much under the view is resident there.

    Examples
    --------
    >>> level_tooltips([0.5, None], 0)
    ['level 0: 50% of the chunks under the view resident (shown)', 'level 1: no grid']
    """
    return [
        f"level {i}: "
        + ("no grid" if f is None else f"{f:.0%} of the chunks under the view resident")
        + (" (shown)" if i == shown_level else "")
        for i, f in enumerate(coverage)
    ]


def plane_tooltips(name: str, plane: PlaneResidency, extent: int) -> list[str]:
    """Each chunk's tooltip along an undisplayed axis `name` of `extent` planes."""
    ends = [*plane.starts.tolist()[1:], extent]
    return [
        f"{name} {lo}"
        + (f"–{hi - 1}" if hi - lo > 1 else "")
        + f": {f:.0%} of the view's chunks resident"
        for lo, hi, f in zip(plane.starts.tolist(), ends, plane.fractions, strict=True)
    ]
