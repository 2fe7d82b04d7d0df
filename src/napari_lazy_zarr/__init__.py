"""napari-lazy-zarr: view Zarr arrays far larger than memory, lazily, without blocking.

The public Python API::

    import napari_lazy_zarr
    image = napari_lazy_zarr.open_array("image.zarr", total_bytes_limit=512 << 20)
    tile = image[0:2048, 0:2048].result()      # blocks until the chunks are resident
    image.cache.statistics                     # hits, misses, loads, resident bytes, ...
"""

from importlib.metadata import PackageNotFoundError, version

from napari_lazy_zarr.core import (
    ArraySource,
    CacheStatistics,
    ChunkCache,
    ChunkedArray,
    ChunkEvent,
    ChunkKey,
    ChunkReadError,
    ChunkSource,
    ChunkState,
    LazyZarrError,
    MetadataError,
    NotAZarrStoreError,
    PartialRead,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
    ZarrChunkSource,
    open_array,
)

try:
    __version__ = version("napari-lazy-zarr")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ArraySource",
    "CacheStatistics",
    "ChunkCache",
    "ChunkEvent",
    "ChunkKey",
    "ChunkReadError",
    "ChunkSource",
    "ChunkState",
    "ChunkedArray",
    "LazyZarrError",
    "MetadataError",
    "NotAZarrStoreError",
    "PartialRead",
    "StoreNotFoundError",
    "UnsafeDataError",
    "UnsupportedDataError",
    "ZarrChunkSource",
    "__version__",
    "open_array",
]
