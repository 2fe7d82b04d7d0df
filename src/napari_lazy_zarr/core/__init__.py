"""The chunk engine: sources, the byte-bounded chunk cache, worker loading, lazy arrays.

Nothing here imports Qt or napari.
"""

from napari_lazy_zarr.core.cache import (
    DEFAULT_STALLED_AFTER,
    DEFAULT_TOTAL_BYTES_LIMIT,
    CacheStatistics,
    ChunkCache,
    LoadClass,
    Request,
    check_concurrency,
    check_total_bytes_limit,
    default_concurrency,
)
from napari_lazy_zarr.core.errors import (
    CacheClosedError,
    ChunkReadError,
    DisabledFeatureError,
    IncompatibleSourcesError,
    LazyZarrError,
    LoadCancelledError,
    LoadTimeoutError,
    MetadataError,
    MetadataWarning,
    MissingCodecError,
    NotAZarrStoreError,
    PlanTooLargeError,
    ReadOnlyError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
    UnsupportedDtypeError,
)
from napari_lazy_zarr.core.executors import DaemonExecutor, InlineExecutor, ManualExecutor
from napari_lazy_zarr.core.formats.stack import StackFile, open_stack
from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef, CompositeIdentity
from napari_lazy_zarr.core.open import open_array
from napari_lazy_zarr.core.reading.array import ChunkedArray, PartialRead
from napari_lazy_zarr.core.reading.cache_reader import CacheReader
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.sources.backends import (
    BACKENDS,
    TensorStoreChunkSource,
    ZarrsChunkSource,
    available_backends,
    choose_backend,
    open_backend_source,
)
from napari_lazy_zarr.core.sources.composite import (
    CastSource,
    ConcatSource,
    ConstantSource,
    CropSource,
    FunctionSource,
    StackSource,
)
from napari_lazy_zarr.core.sources.dask import (
    DEFAULT_COMPUTE_TIMEOUT,
    DaskRunner,
    DaskSource,
    coarsened_levels,
)
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.sources.protocol import (
    ArraySource,
    BatchSource,
    CancellableSource,
    ChunkSource,
    DerivedSource,
    KeepingSource,
)
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_zarr_source
from napari_lazy_zarr.core.states import (
    LEGAL_MOVES,
    ChunkEvent,
    ChunkState,
    EventReason,
    IllegalTransitionError,
)
from napari_lazy_zarr.core.storage.references import ManifestStore
from napari_lazy_zarr.core.storage.remote import RemoteStore
from napari_lazy_zarr.core.storage.retry import RetryPolicy
from napari_lazy_zarr.core.viewport import AxisMap, ViewController, ViewFrame, ViewRequest

ViewResult = ViewFrame
"""Deprecated alias of `ViewFrame` (its name in 0.1; kept so that the public API loses no name).

The old name promised an immutable result; its `data` is the live buffer the
controller keeps filling (see `ViewFrame`). Use `ViewFrame`.
"""

__all__ = [
    "BACKENDS",
    "DEFAULT_COMPUTE_TIMEOUT",
    "DEFAULT_STALLED_AFTER",
    "DEFAULT_TIMEOUTS",
    "DEFAULT_TOTAL_BYTES_LIMIT",
    "LEGAL_MOVES",
    "ArraySource",
    "AxisMap",
    "BatchSource",
    "CacheClosedError",
    "CacheReader",
    "CacheStatistics",
    "CancellableSource",
    "CastSource",
    "ChunkCache",
    "ChunkEvent",
    "ChunkKey",
    "ChunkReadError",
    "ChunkRef",
    "ChunkSource",
    "ChunkState",
    "ChunkedArray",
    "CompositeIdentity",
    "ConcatSource",
    "ConstantSource",
    "CropSource",
    "DaemonExecutor",
    "DaskRunner",
    "DaskSource",
    "DerivedSource",
    "DisabledFeatureError",
    "EventReason",
    "FunctionSource",
    "IllegalTransitionError",
    "IncompatibleSourcesError",
    "InlineExecutor",
    "KeepingSource",
    "LazyZarrError",
    "LoadCancelledError",
    "LoadClass",
    "LoadTimeoutError",
    "ManifestSource",
    "ManifestStore",
    "ManualExecutor",
    "MetadataError",
    "MetadataWarning",
    "MissingCodecError",
    "NotAZarrStoreError",
    "PartialRead",
    "PlanTooLargeError",
    "ReadOnlyError",
    "RemoteStore",
    "Request",
    "RetryPolicy",
    "StackFile",
    "StackSource",
    "StoreNotFoundError",
    "TensorStoreChunkSource",
    "Timeouts",
    "UnsafeDataError",
    "UnsupportedDataError",
    "UnsupportedDtypeError",
    "ViewController",
    "ViewFrame",
    "ViewRequest",
    "ViewResult",
    "ZarrChunkSource",
    "ZarrsChunkSource",
    "available_backends",
    "check_concurrency",
    "check_total_bytes_limit",
    "choose_backend",
    "coarsened_levels",
    "default_concurrency",
    "open_array",
    "open_backend_source",
    "open_stack",
    "open_zarr_source",
]
