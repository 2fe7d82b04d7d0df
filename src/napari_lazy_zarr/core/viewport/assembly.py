"""Frames built from resident chunks: the one place a view's pixels are written.

A frame (`ViewFrame`) is built whole by one thread and then never written
again: `first_frame` from the cache alone, `next_frame` from the previous
frame of the same view (one copy) plus what landed since. Both read the cache
only through `ChunkCache.lookup_many` / `lookup` and write nothing but the new
frame's own buffer, which is made read-only before it is returned. A frame is a
view: it takes a *partial* chunk (an overview chunk combined without a failed
stored chunk, that chunk's cells at the fill value) as resident
(``partial=True``); the exact door (`ChunkedArray.result`) never does, and
neither does a stand-in (a partial coarse chunk does not stand in for a finer
one: the next coarser level or the placeholder does).

Frames of up to `POOLED_FRAME_BYTES` take their memory from `FRAME_MEMORY`, a
`BlockPool`: a frame's block returns to the pool once nothing references it
any more (napari replaced the slice that held it, and every view of it is
gone), and serves the next frame of the same size, so steady panning maps no
new memory. Nothing is recycled on a guess (`core.buffers`).

Stand-ins (a coarser level's values upsampled into the cells of chunks still
loading, `fallback.stand_ins`) are drawn when `compose` is asked for; FAILED
chunks always get the placeholder (the level's fill value), so a failure is
never disguised.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core.buffers import BlockPool
from napari_lazy_zarr.core.viewport.fallback import covered, stand_ins
from napari_lazy_zarr.core.viewport.frames import ViewFrame

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.reading.plans import ReadPlan
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.axes import Box
    from napari_lazy_zarr.core.viewport.frames import ViewRequest

__all__ = [
    "FRAME_MEMORY",
    "POOLED_FRAME_BYTES",
    "first_frame",
    "held_frame",
    "next_frame",
    "placeholder_frame",
    "volume_due",
]

POOLED_FRAME_BYTES: Final = 64 << 20
"""Frames up to this size reuse pooled memory; larger ones (volumes) are allocated each
time, zeroed by the kernel where the fill value is zero (pages never written cost nothing)."""

FRAME_MEMORY: Final = BlockPool(256 << 20)
"""The blocks of frames nobody references any more, kept for the next frames."""


def first_frame(
    request: ViewRequest,
    plan: ReadPlan,
    cache: ChunkCache,
    sources: Sequence[ChunkSource],
    *,
    compose: bool = False,
) -> ViewFrame:
    """A frame of `request` from what `cache` holds now: resident chunks copied, the
    others the placeholder (or, with `compose`, a coarser level's values)."""
    keys = tuple(ref.key for ref in plan.refs)
    source = sources[request.level]
    ready, failed = cache.lookup_many(keys, partial=True)
    missing = set(keys).difference(ready)
    buffer, clean = _new_buffer(plan, source)
    if missing and not clean:
        _fill(buffer, plan, missing, len(keys), source)
    for key, data in ready.items():
        plan.copy_chunk(buffer, key, data)
    drawn = _stand_ins(request, missing - set(failed), sources, cache) if compose else None
    return _finish(request, plan, buffer, keys, missing, failed, (), sources, drawn)


def next_frame(
    base: ViewFrame,
    plan: ReadPlan,
    cache: ChunkCache,
    sources: Sequence[ChunkSource],
    *,
    compose: bool = False,
) -> ViewFrame | None:
    """The frame after `base` (same view): a copy of it with the chunks that landed since
    and the failures since; with `compose`, the stand-ins drawn again from what coarser
    levels hold now. None when nothing changed and nothing is to be composed."""
    assert base.buffer is not None
    ready, failed = cache.lookup_many(base.missing, partial=True)
    newly_failed = failed - base.failed
    retried = base.failed - failed  # queued again: still the placeholder until it lands
    missing = set(base.missing).difference(ready)
    drawn = _stand_ins(base.request, missing - failed, sources, cache) if compose else None
    if not ready and not newly_failed and not retried and drawn is None:
        return None  # the frame would be the same
    source = sources[base.request.level]
    buffer, _ = _new_buffer(plan, source)
    np.copyto(buffer, base.buffer)
    for key, data in ready.items():
        plan.copy_chunk(buffer, key, data)
    for key in newly_failed:  # shown as the placeholder, not as a stand-in
        plan.fill_missing(buffer, key, source.fill_value, None)
    provisional = base.provisional.difference(ready, newly_failed)
    request, keys = base.request, base.keys
    return _finish(request, plan, buffer, keys, missing, failed, provisional, sources, drawn)


def placeholder_frame(
    request: ViewRequest, plan: ReadPlan, sources: Sequence[ChunkSource]
) -> ViewFrame:
    """A frame of `request` showing only the placeholder, every chunk missing: what a
    read answers at once while the real frame is built off its thread (a volume)."""
    keys = tuple(ref.key for ref in plan.refs)
    source = sources[request.level]
    buffer, clean = _new_buffer(plan, source)
    if keys and not clean:
        _fill(buffer, plan, keys, len(keys), source)
    return _finish(request, plan, buffer, keys, set(keys), set(), (), sources, None)


def held_frame(frame: ViewFrame, shown: ViewFrame) -> ViewFrame:
    """`frame`'s bookkeeping over `shown`'s pixels: the answer of a read that holds the
    last presentable frame of another plane while `frame`'s plane fills in."""
    return ViewFrame(
        frame.request,
        shown.data,
        frame.keys,
        frame.missing,
        frame.provisional,
        frame.failed,
        held=True,
        backdrop=frame.backdrop,
        buffer=frame.buffer,
    )


def volume_due(base: ViewFrame, waiting: Collection[ChunkKey], cache: ChunkCache) -> bool:
    """Whether a volume's next frame is worth its copy: all that `base` lacked and still
    waits for (`waiting`) has landed, or half of it (so a volume of n chunks is copied
    about log2(n) times as it loads, not n); or a FAILED chunk it shows was retried."""
    if not waiting:
        return bool(base.missing)
    ready, failed = cache.lookup_many(waiting, partial=True)
    landed = len(ready) + len(failed)
    return landed == len(waiting) or 2 * landed >= len(waiting)


def _stand_ins(
    request: ViewRequest,
    waiting: Collection[ChunkKey],
    sources: Sequence[ChunkSource],
    cache: ChunkCache,
) -> tuple[np.ndarray[Any, Any], Box, np.ndarray[Any, Any]] | None:
    """The coarser levels' values for the `waiting` chunks' cells (`fallback.stand_ins`),
    or None when nothing waits or no coarser level has anything resident."""
    return stand_ins(request, waiting, sources, cache.lookup) if waiting else None


def _finish(
    request: ViewRequest,
    plan: ReadPlan,
    buffer: np.ndarray[Any, Any],
    keys: tuple[ChunkKey, ...],
    missing: set[ChunkKey],
    failed: Collection[ChunkKey],
    provisional: Collection[ChunkKey],
    sources: Sequence[ChunkSource],
    drawn: tuple[np.ndarray[Any, Any], Box, np.ndarray[Any, Any]] | None,
) -> ViewFrame:
    """Draw the stand-ins (`drawn`) into the cells still waiting, seal the buffer and wrap
    it in a frame."""
    failed = frozenset(failed)
    waiting = missing - failed
    backdrop = False
    if drawn is not None and waiting:
        stand_in, region, found = drawn
        fill_value = sources[request.level].fill_value
        for key in waiting:
            plan.fill_missing(buffer, key, fill_value, stand_in)
        provisional = {key for key in waiting if covered(key, region, found)}
        backdrop = bool(found.all())
    buffer.flags.writeable = False
    data = plan.finish(buffer)
    data.flags.writeable = False  # a new array when upsampled; a view of `buffer` otherwise
    return ViewFrame(
        request,
        data,
        keys,
        frozenset(missing),
        frozenset(provisional),
        failed,
        backdrop=backdrop,
        buffer=buffer,
    )


def _new_buffer(plan: ReadPlan, source: ChunkSource) -> tuple[np.ndarray[Any, Any], bool]:
    """A writable buffer for `plan`, and whether its cells already hold the placeholder.

    Pooled memory (holding whatever it held) for a frame of up to
    `POOLED_FRAME_BYTES`; else fresh memory, zeroed by the kernel when the placeholder
    is zero (the pages of cells never written then cost nothing: a volume's)."""
    shape = plan.buffer_shape
    dtype = source.dtype
    nbytes = math.prod(shape) * dtype.itemsize
    if 0 < nbytes <= POOLED_FRAME_BYTES and not dtype.hasobject:
        return FRAME_MEMORY.lease(nbytes).view(dtype).reshape(shape), False
    if _is_zero(source.fill_value, dtype):
        return np.zeros(shape, dtype=dtype), True
    return np.empty(shape, dtype=dtype), False


def _fill(
    buffer: np.ndarray[Any, Any],
    plan: ReadPlan,
    missing: Collection[ChunkKey],
    count: int,
    source: ChunkSource,
) -> None:
    """Give the cells of the `missing` chunks (of `count` in all) the placeholder."""
    if len(missing) == count:
        buffer.fill(source.fill_value)  # a cold view: one contiguous fill
    else:
        for key in missing:
            plan.fill_missing(buffer, key, source.fill_value, None)


def _is_zero(value: Any, dtype: np.dtype[Any]) -> bool:
    """Whether `value` as `dtype` is all zero bytes: what a zeroed buffer holds (-0.0 is
    not, NaN is not).

    >>> _is_zero(0, np.dtype("u2")), _is_zero(0.0, np.dtype("f4")), _is_zero(-0.0, np.dtype("f4"))
    (True, True, False)
    >>> _is_zero(float("nan"), np.dtype("f8")), _is_zero(7, np.dtype("u1"))
    (False, False)
    """
    try:
        return not np.asarray(value, dtype=dtype).tobytes().strip(b"\0")
    except (TypeError, ValueError, OverflowError):
        return False
