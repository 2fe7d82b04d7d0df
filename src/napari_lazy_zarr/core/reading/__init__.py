"""Reading: one view's cells assembled from resident chunks.

`plans` says which chunks a selection needs and how they land in the output,
`cache_reader` serves zarr-indexing parts from the chunk cache, and `array` holds
`ChunkedArray`, the lazy array over a source and a cache.
"""
