"""Sources: what yields decoded chunks (the TensorStore "drivers").

The chunk source protocol (`protocol`: it imports only `keys`) and every source: zarr
arrays (`zarr`, with their bounded codec chain in `_decode` and shard reads in
`_sharding`), composites, dask graphs, decimated pyramid levels, the optional TensorStore
and zarrs backends, kerchunk references (`manifest`). A source reads bytes through
`storage` and knows nothing of the cache, the formats or the readers above it
(`tests/core/test_layers.py`). The package's private helpers are `_grid` (read grids),
`_decode`, `_sharding` and `_zarr_compat` (the zarr-python internals, contract-tested).
"""

from napari_lazy_zarr.core.sources._grid import (
    boundaries,
    grid_from_boundaries,
    grid_from_sizes,
)
from napari_lazy_zarr.core.sources.backends import (
    BACKENDS,
    ZARRS_PIPELINE_CONFIG,
    Backend,
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
    Tickets,
    coarsened_levels,
    resolve_client,
)
from napari_lazy_zarr.core.sources.decimated import (
    DecimatedSource,
    virtual_levels,
)
from napari_lazy_zarr.core.sources.manifest import (
    ManifestIdentity,
    ManifestSource,
)
from napari_lazy_zarr.core.sources.protocol import (
    ArraySource,
    BatchSource,
    CancellableSource,
    ChunkSource,
    DerivedSource,
    KeepingSource,
    SourceFields,
    fill_value_of,
    is_derived,
)
from napari_lazy_zarr.core.sources.zarr import (
    DEFAULT_RETRY,
    ZarrChunkSource,
    ZarrIdentity,
    open_node,
    open_zarr_source,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_COMPUTE_TIMEOUT",
    "DEFAULT_RETRY",
    "ZARRS_PIPELINE_CONFIG",
    "ArraySource",
    "Backend",
    "BatchSource",
    "CancellableSource",
    "CastSource",
    "ChunkSource",
    "ConcatSource",
    "ConstantSource",
    "CropSource",
    "DaskRunner",
    "DaskSource",
    "DecimatedSource",
    "DerivedSource",
    "FunctionSource",
    "KeepingSource",
    "ManifestIdentity",
    "ManifestSource",
    "SourceFields",
    "StackSource",
    "TensorStoreChunkSource",
    "Tickets",
    "ZarrChunkSource",
    "ZarrIdentity",
    "ZarrsChunkSource",
    "available_backends",
    "boundaries",
    "choose_backend",
    "coarsened_levels",
    "fill_value_of",
    "grid_from_boundaries",
    "grid_from_sizes",
    "is_derived",
    "open_backend_source",
    "open_node",
    "open_zarr_source",
    "resolve_client",
    "virtual_levels",
]
