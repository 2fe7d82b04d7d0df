"""The chunk engine: sources, the byte-bounded chunk cache, worker loading, lazy arrays.

Nothing here imports Qt or napari.
"""

from napari_lazy_zarr.core.array import ChunkedArray, PartialRead, open_array
from napari_lazy_zarr.core.cache import (
    DEFAULT_TOTAL_BYTES_LIMIT,
    CacheStatistics,
    ChunkCache,
    ChunkRef,
    Request,
    default_concurrency,
)
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LazyZarrError,
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.loader import InlineExecutor, ManualExecutor
from napari_lazy_zarr.core.reader import CacheReader
from napari_lazy_zarr.core.source import ArraySource, ChunkSource
from napari_lazy_zarr.core.state import (
    LEGAL_MOVES,
    ChunkEvent,
    ChunkKey,
    ChunkState,
    IllegalTransitionError,
)
from napari_lazy_zarr.core.zarr_source import ZarrChunkSource, open_zarr_source

__all__ = [
    "DEFAULT_TOTAL_BYTES_LIMIT",
    "LEGAL_MOVES",
    "ArraySource",
    "CacheReader",
    "CacheStatistics",
    "ChunkCache",
    "ChunkEvent",
    "ChunkKey",
    "ChunkReadError",
    "ChunkRef",
    "ChunkSource",
    "ChunkState",
    "ChunkedArray",
    "IllegalTransitionError",
    "InlineExecutor",
    "LazyZarrError",
    "ManualExecutor",
    "MetadataError",
    "NotAZarrStoreError",
    "PartialRead",
    "Request",
    "StoreNotFoundError",
    "UnsafeDataError",
    "UnsupportedDataError",
    "ZarrChunkSource",
    "default_concurrency",
    "open_array",
    "open_zarr_source",
]
