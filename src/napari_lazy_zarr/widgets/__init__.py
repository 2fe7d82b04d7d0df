"""Qt widgets for napari-lazy-zarr (the only package that imports Qt, superqt and magicgui).

`ChunkInspector` is the dock widget: the chunk map of a layer's level, the
state machine with live counts, the event log, statistics and controls.
"""

from napari_lazy_zarr.widgets._inspector import ChunkInspector

__all__ = ["ChunkInspector"]
