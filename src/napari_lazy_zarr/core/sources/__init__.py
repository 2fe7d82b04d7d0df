"""Sources: what yields decoded chunks (the TensorStore "drivers").

The chunk source protocol (`protocol`) and every source: zarr arrays with their bounded
decode and shard reads, composites, dask graphs, decimated pyramid levels, the optional
TensorStore and zarrs backends, kerchunk references. A source reads bytes through
`storage` and knows nothing of the cache above it.
"""
