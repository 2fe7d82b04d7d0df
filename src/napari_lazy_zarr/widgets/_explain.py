"""Why a chunk is not final yet, in words: the text behind the chunk map's hover.

Qt-free. Reads a `ChunkStatus` (one locked snapshot of the cache's bookkeeping
about the chunk) and the cache's statistics; never touches the cache itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core import ChunkState, LoadClass
from napari_lazy_zarr.core.storage.retry import classify
from napari_lazy_zarr.widgets._grid_state import Shown

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core import CacheStatistics, ChunkEvent
    from napari_lazy_zarr.core.cache import CacheCounters, ChunkStatus

__all__ = ["REASONS", "describe_chunk", "failure_attempts", "reason", "shown_text", "size_text"]

REASONS: Final = {
    "final": "resident: the view shows its own values",
    "queued": "queued: waiting for a worker",
    "in flight": "loading on a worker now",
    "parked": "parked: queued for a view you left; loads only if a view asks again",
    "deferred": "waiting for the finer chunks it is built from (a virtual level)",
    "failed": "failed: shows the fill value until retried",
    "evicted": "evicted: least recently used when the cache was over its budget",
    "not admitted": "not admitted: pinned chunks fill the budget, unpinned ones are evicted",
    "not requested": "not requested yet",
}
"""The short reasons, as the view's summary counts them."""

_ATTEMPTS: Final = re.compile(r"after (\d+) attempts")


def size_text(nbytes: float) -> str:
    """Bytes, briefly.

    Examples
    --------
    >>> size_text(512), size_text(3 << 20), size_text(5.5 * (1 << 30))
    ('512 B', '3.0 MiB', '5.5 GiB')
    """
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def failure_attempts(error: BaseException) -> str:
    """How many reads a failure took, as its message tells.

    Examples
    --------
    >>> failure_attempts(OSError("... ConnectionResetError: reset (after 4 attempts)"))
    '4 attempts'
    >>> failure_attempts(OSError("... 403 (access denied, not retried)"))
    '1 attempt'
    """
    found = _ATTEMPTS.search(str(error))
    return f"{found[1]} attempts" if found else "1 attempt"


def _next_step(error: BaseException) -> str:
    verdict = classify(error)
    if verdict == "transient":
        return "storage failed in passing: retrying may succeed (click the chunk)"
    if verdict == "denied":
        return "access denied: fix the credentials or permissions, then retry"
    return "the stored data cannot be read as it is: retrying will fail the same way"


def reason(status: ChunkStatus, stats: CacheCounters | CacheStatistics) -> tuple[str, str]:
    """The short reason (a `REASONS` key) and a sentence for one chunk.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, ManualExecutor
    >>> source = ArraySource(np.zeros((8,)), chunks=(2,), name="s")
    >>> cache = ChunkCache(1 << 20, concurrency=1, executor=ManualExecutor())
    >>> request = cache.request([ChunkRef.of(source, (i,)) for i in range(3)])
    >>> key = ChunkRef.of(source, (0,)).key
    >>> reason(cache.status(key), cache.counters())
    ('queued', 'queued: position 2 (1 chunk to load first), needed by the view')
    >>> request.release(); cache.close()
    """
    state = status.state
    if state is ChunkState.READY:
        pinned = (
            f"pinned by {status.pins} view{'s' if status.pins > 1 else ''}"
            if status.pins
            else "no view pins it: evicted first when space is needed"
        )
        return "final", f"resident ({size_text(status.nbytes)}), {pinned}"
    if state is ChunkState.QUEUED:
        if status.parked:
            return "parked", REASONS["parked"]
        if status.inputs_missing:
            n = status.inputs_missing
            return "deferred", (
                f"waiting for {n} finer chunk{'s' if n > 1 else ''} it is built from "
                "(a virtual level)"
            )
        if status.stale:
            return "parked", "queued for a view you left: parked when it reaches the front"
        if status.queue_ahead is None:
            return "queued", "queued (being re-queued)"
        ahead = status.queue_ahead
        why = {
            LoadClass.NEEDED: "needed by the view",
            LoadClass.AHEAD: "a frame ahead of playback (after the view's chunks)",
            LoadClass.OVERVIEW: "overview work (after the view's chunks)",
            LoadClass.PREFETCH: "prefetch (after the view's chunks)",
            LoadClass.STALE: "for a view you left (after all current work)",
        }.get(status.load_class or LoadClass.NEEDED, "")
        more = "10,000+" if ahead >= 10_000 else f"{ahead:,}"
        return "queued", (
            f"queued: position {ahead + 1:,} ({more} chunk{'' if ahead == 1 else 's'} to load "
            f"first), {why}"
        )
    if state is ChunkState.LOADING:
        seconds = status.loading_seconds or 0.0
        built = f", built from {status.cost} stored chunks" if status.cost > 1 else ""
        return "in flight", f"loading on a worker for {seconds:.2f} s{built}"
    if state is ChunkState.FAILED:
        error = status.error
        if error is None:
            return "failed", "failed"
        return "failed", (
            f"failed after {failure_attempts(error)}: {error}\nnext: {_next_step(error)}"
        )
    if state is ChunkState.EVICTED:
        if stats.pinned_bytes >= stats.total_bytes_limit:
            return "not admitted", (
                f"not admitted: chunks pinned by views take {size_text(stats.pinned_bytes)} "
                f"of the {size_text(stats.total_bytes_limit)} budget, so a chunk no view pins "
                "is evicted as soon as it loads"
            )
        return "evicted", (
            "evicted: the least recently used chunk when the cache went over its "
            f"{size_text(stats.total_bytes_limit)} budget"
        )
    return "not requested", "not requested yet"


def shown_text(shown: Shown, stand_in: int | None) -> str:
    """What the view shows for a chunk, in words.

    Examples
    --------
    >>> shown_text(Shown.PROVISIONAL, 3)
    'shown: provisional, level 3 upsampled'
    """
    if shown is Shown.FINAL:
        return "shown: final (its own values)"
    if shown is Shown.PROVISIONAL:
        source = (
            f"level {stand_in}" if stand_in is not None and stand_in >= 0 else "a coarser level"
        )
        return f"shown: provisional, {source} upsampled"
    if shown is Shown.FILL:
        return "shown: the fill value (nothing resident at this or a coarser level)"
    if shown is Shown.FAILED:
        return "shown: the fill value (a failed chunk never shows a stand-in)"
    return "not in the view"


def describe_chunk(
    name: str,
    extent: str,
    status: ChunkStatus,
    stats: CacheCounters | CacheStatistics,
    shown: Shown,
    stand_in: int | None,
    history: Sequence[ChunkEvent],
    now: float,
) -> str:
    """The hover text of one chunk: what is shown, its state, why, and its latest moves."""
    lines = [f"{name}  {extent}", shown_text(shown, stand_in)]
    lines.append(f"state: {status.state.name}")
    why = reason(status, stats)[1]
    if shown is Shown.OUTSIDE and why.endswith("needed by the view"):
        # The view the map shows has moved on; its request reaches the cache a moment
        # later (the dispatch thread), and only then is this chunk parked.
        why = "queued for a view you left: parked when it reaches the front"
    lines.append(f"why: {why}")
    if history:
        lines.append("latest moves:")
        lines += [
            f"  {now - e.time:6.2f} s ago  {e.previous.name} → {e.current.name} ({e.detail})"
            for e in history
        ]
    if status.state is ChunkState.FAILED:
        lines.append("click to retry")
    return "\n".join(lines)
