"""napari-lazy-zarr: view Zarr arrays far larger than memory, lazily, without blocking.

The public Python API::

    import napari_lazy_zarr
    image = napari_lazy_zarr.open_array("image.zarr", total_bytes_limit=512 << 20)
    tile = image[0:2048, 0:2048].result()      # blocks until the chunks are resident
    image.cache.statistics                     # hits, misses, loads, resident bytes, ...

Composite sources (concatenation, stacks, constants, functions, casts, kerchunk
references) are described in docs/composite-sources.md.
"""

from importlib.metadata import PackageNotFoundError, version

from napari_lazy_zarr.core import (
    ArraySource,
    CacheStatistics,
    CastSource,
    ChunkCache,
    ChunkedArray,
    ChunkEvent,
    ChunkKey,
    ChunkReadError,
    ChunkSource,
    ChunkState,
    ConcatSource,
    ConstantSource,
    FunctionSource,
    IncompatibleSourcesError,
    LazyZarrError,
    ManifestSource,
    MetadataError,
    NotAZarrStoreError,
    PartialRead,
    ReadOnlyError,
    StackSource,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
    ZarrChunkSource,
    open_array,
    open_stack,
)

try:
    __version__ = version("napari-lazy-zarr")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ArraySource",
    "CacheStatistics",
    "CastSource",
    "ChunkCache",
    "ChunkEvent",
    "ChunkKey",
    "ChunkReadError",
    "ChunkSource",
    "ChunkState",
    "ChunkedArray",
    "ConcatSource",
    "ConstantSource",
    "FunctionSource",
    "IncompatibleSourcesError",
    "LazyZarrError",
    "ManifestSource",
    "MetadataError",
    "NotAZarrStoreError",
    "PartialRead",
    "ReadOnlyError",
    "StackSource",
    "StoreNotFoundError",
    "UnsafeDataError",
    "UnsupportedDataError",
    "ZarrChunkSource",
    "__version__",
    "open_array",
    "open_stack",
]
