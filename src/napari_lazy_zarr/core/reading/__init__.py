"""Reading: one view's cells assembled from resident chunks.

`plans` says which chunks a selection needs and how they land in the output,
`bounds` how much a read or a displayed view may cost (`ViewBounds`),
`cache_reader` serves zarr-indexing parts from a cache (and holds `lazy_for`, the
grid-partitioned `LazyArray` every read starts from), `array` holds `ChunkedArray`,
the lazy array over a source and a cache. Plans and the reader need of a cache only
the `ChunkLookup` / `ChunkLoader` protocols; `array` alone talks to `ChunkCache`.
"""

from napari_lazy_zarr.core.reading.array import (
    ChunkedArray,
    PartialRead,
)
from napari_lazy_zarr.core.reading.bounds import DEFAULT_BOUNDS, ViewBounds
from napari_lazy_zarr.core.reading.cache_reader import (
    CacheReader,
    ChunkLoader,
    apply_transform,
    lazy_for,
)
from napari_lazy_zarr.core.reading.plans import (
    MAX_VIEW_CHUNKS,
    Fallback,
    PartsPlan,
    PointPlan,
    ReadPlan,
    StridedPlan,
    check_view_size,
    count_chunks,
    plan_read,
)

__all__ = [
    "DEFAULT_BOUNDS",
    "MAX_VIEW_CHUNKS",
    "CacheReader",
    "ChunkLoader",
    "ChunkedArray",
    "Fallback",
    "PartialRead",
    "PartsPlan",
    "PointPlan",
    "ReadPlan",
    "StridedPlan",
    "ViewBounds",
    "apply_transform",
    "check_view_size",
    "count_chunks",
    "lazy_for",
    "plan_read",
]
