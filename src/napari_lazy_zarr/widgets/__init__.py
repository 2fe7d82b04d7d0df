"""Qt widgets for napari-lazy-zarr (the only package that imports Qt, superqt and magicgui).

`ChunkInspector` is the dock widget: for every chunk of the level napari
displays, what the view shows (final, a coarser level standing in, the fill
value), its state and why it is not final yet; the levels and planes resident
under the view, rates over time, the state machine with live counts, the event
log and the cache's controls. Qt-free models (`_grid_state`, `_mirror`,
`_view_cells`, `_view_reads`, `_explain`, `_summary`, `_names`, `_rates`,
`_displayed`) sit beside thin Qt views; `_inspector` wires them.
`CoordinateSystemChoice` re-places an OME-Zarr 0.6 store's layers in another of
its coordinate systems.
"""

from napari_lazy_zarr.widgets._coordinate_systems import CoordinateSystemChoice
from napari_lazy_zarr.widgets._inspector import ChunkInspector

__all__ = ["ChunkInspector", "CoordinateSystemChoice"]
