"""napari-lazy-zarr: view Zarr arrays far larger than memory, lazily, without blocking.

The public Python API::

    import napari_lazy_zarr
    image = napari_lazy_zarr.open_array("image.zarr", total_bytes_limit=512 << 20)
    tile = image[0:2048, 0:2048].result()      # blocks until the chunks are resident
    image.cache.statistics                     # hits, misses, loads, resident bytes, ...

Composite sources (concatenation, stacks, constants, functions, casts, kerchunk
references) are described in docs/composite-sources.md; dask arrays and graphs
(`from_dask`, computed locally or on a dask.distributed cluster) in docs/dask.md.
Every read is bounded in bytes and time (`Timeouts`, `RetryPolicy`).

The plugin's settings (`Settings`, resolved by `current_settings`) live on
napari's *Preferences* page, in the environment and in a settings file;
`configure` sets the shared chunk cache's capacity and loaders for this
session (docs/user-guide.md, "Settings").

For scripts: `wait_until_complete(viewer)` returns once every plugin layer of a
napari viewer shows its complete view, and `sample_path()` the sample pyramid's
store (written first, blocking, if need be).
"""

from importlib.metadata import PackageNotFoundError, version

from napari_lazy_zarr._layer_data import wait_until_complete
from napari_lazy_zarr._reader import configure
from napari_lazy_zarr._sample_data import sample_path
from napari_lazy_zarr.core import (
    ArraySource,
    CacheClosedError,
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
    CropSource,
    DisabledFeatureError,
    FunctionSource,
    IncompatibleSourcesError,
    LazyZarrError,
    LoadTimeoutError,
    ManifestSource,
    MetadataError,
    MetadataWarning,
    MissingCodecError,
    NotAZarrStoreError,
    PartialRead,
    PlanTooLargeError,
    ReadOnlyError,
    RetryPolicy,
    StackSource,
    StoreNotFoundError,
    Timeouts,
    UnsafeDataError,
    UnsupportedDataError,
    UnsupportedDtypeError,
    ZarrChunkSource,
    open_array,
    open_stack,
)
from napari_lazy_zarr.core.settings import Settings, current_settings
from napari_lazy_zarr.dask import from_dask

try:
    __version__ = version("napari-lazy-zarr")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ArraySource",
    "CacheClosedError",
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
    "CropSource",
    "DisabledFeatureError",
    "FunctionSource",
    "IncompatibleSourcesError",
    "LazyZarrError",
    "LoadTimeoutError",
    "ManifestSource",
    "MetadataError",
    "MetadataWarning",
    "MissingCodecError",
    "NotAZarrStoreError",
    "PartialRead",
    "PlanTooLargeError",
    "ReadOnlyError",
    "RetryPolicy",
    "Settings",
    "StackSource",
    "StoreNotFoundError",
    "Timeouts",
    "UnsafeDataError",
    "UnsupportedDataError",
    "UnsupportedDtypeError",
    "ZarrChunkSource",
    "__version__",
    "configure",
    "current_settings",
    "from_dask",
    "open_array",
    "open_stack",
    "sample_path",
    "wait_until_complete",
]
