"""How a controller asks the cache for one view's chunks (its dispatch thread).

`request_view` asks for a view's own chunks (NEEDED), its ring and the planes
ahead of a walk through z or t (`prefetch.view_prefetch`), or, for a virtual
thumbnail, only the part of the overview under the displayed view
(`follow_overview`, OVERVIEW work): a virtual coarsest level costs every stored
chunk under it, so a view zoomed in on a stored level does not pay for the
overview at all.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from napari_lazy_zarr.core.cache import LoadClass
from napari_lazy_zarr.core.sources.protocol import is_derived
from napari_lazy_zarr.core.viewport._coarser import CoarserPlan
from napari_lazy_zarr.core.viewport.prefetch import overview_shown, view_prefetch

if TYPE_CHECKING:
    import threading
    from collections.abc import Collection, Hashable, Sequence

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkRef
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport.frames import ViewRequest
    from napari_lazy_zarr.core.viewport.prefetch import PlaneMotion
    from napari_lazy_zarr.core.viewport.showing import ShownView

__all__ = ["follow_overview", "request_view"]


def follow_overview(
    thumbnail: ShownView,
    view: ViewRequest | None,
    sources: Sequence[ChunkSource],
    lock: threading.Condition,
) -> bool:
    """A virtual thumbnail's chunks under the displayed `view` (`overview_shown`), the
    others deferred (not waited for); whether that changed what it waits for (`lock`'s
    waiters are woken). Not a virtual thumbnail: nothing to follow (False)."""
    if thumbnail.requested is None and not is_derived(sources[thumbnail.request.level]):
        return False
    refs = overview_shown(thumbnail.request, thumbnail.plan.refs, view, sources)
    keys = frozenset(ref.key for ref in refs)
    with lock:
        changed, thumbnail.requested = keys != thumbnail.requested, keys
        thumbnail.deferred = frozenset(ref.key for ref in thumbnail.plan.refs) - keys
        lock.notify_all()  # fewer chunks to wait for may complete the layer
    return changed


def request_view(
    cache: ChunkCache,
    owner: Hashable,
    shown: ShownView,
    sources: Sequence[ChunkSource],
    *,
    view: ViewRequest | None,
    lock: threading.Condition,
    prefetch: bool,
    held: Collection[int],
    ring: int,
    motion: PlaneMotion | None,
    lookahead_share: float,
) -> list[ChunkRef] | None:
    """Ask `cache` for `shown`'s chunks (as `owner`'s request) and what to load ahead; the
    chunks asked for ahead of a walk, or None when the cache was closed."""
    request = shown.request
    source = sources[request.level]
    ring_refs: list[ChunkRef] = []
    ahead: list[ChunkRef] = []
    if prefetch and request.kind == "view" and not isinstance(shown.plan, CoarserPlan):
        # (A view served coarser is over its bounds: a ring at its own level would be
        # as unbounded as the view.)
        ring_refs, ahead = view_prefetch(
            request,
            sources,
            held=set(held),
            ring=ring,
            motion=motion,
            latency=functools.partial(_load_latency, cache),
            concurrency=cache.concurrency,
            budget_bytes=int(cache.total_bytes_limit * lookahead_share),
        )
    load_class, refs = LoadClass.NEEDED, shown.plan.refs
    if request.kind == "thumbnail" and is_derived(source):
        # A virtual coarsest level costs every stored chunk under it: overview work,
        # only as far as the view shows it, never starving the view's chunks.
        follow_overview(shown, view, sources, lock)
        requested = shown.requested or frozenset()
        load_class = LoadClass.OVERVIEW
        refs = [ref for ref in shown.plan.refs if ref.key in requested]
    center = tuple((lo + hi) / 2 for lo, hi in request.box)
    try:
        cache.request(
            refs,
            view=owner,
            level=request.level,
            center=center,
            prefetch=ring_refs,
            ahead=ahead,
            load_class=load_class,
        )
    except RuntimeError:  # the cache was closed under us (viewer closing)
        return None
    return ahead


def _load_latency(cache: ChunkCache) -> float:
    """The cache's mean load time of a chunk, in seconds (0 before any load)."""
    latency = float(cache.statistics.load_latency_mean)
    return latency if math.isfinite(latency) else 0.0
