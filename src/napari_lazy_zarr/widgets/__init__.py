"""Qt widgets for napari-lazy-zarr (the only package that may import Qt)."""
