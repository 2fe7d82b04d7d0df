"""One layer's viewport: its request cycle from a viewer's read to the chunks that fill it.

The pure policy (how the layer's axes map to the store's, what a read asks
for, stand-ins from coarser levels, what to load ahead) sits beside the value
types; `ViewController` is the one stateful piece, answering each read at once
and keeping the answer converging as chunks land. `FailureLog` follows the
layer's failed chunks for the user. Qt-free, as all of `core` is (ndv's
`models/` vs `controllers/` split is the model).
"""

from napari_lazy_zarr.core.viewport.axes import (
    AxisMap,
    Box,
    box_bytes,
    chunk_ranges,
    level_box,
    level_index,
    view_box,
)
from napari_lazy_zarr.core.viewport.contrast import contrast_selection
from napari_lazy_zarr.core.viewport.controller import ViewController
from napari_lazy_zarr.core.viewport.failures import ChunkFailure, FailureLog, root_cause
from napari_lazy_zarr.core.viewport.fallback import coarser_fill, covered, waiting_region
from napari_lazy_zarr.core.viewport.frames import (
    ViewFrame,
    ViewKind,
    ViewRequest,
    is_plane_step,
)
from napari_lazy_zarr.core.viewport.prefetch import (
    MotionTracker,
    PlaneMotion,
    lookahead_planes,
    playback_level,
    prefetch_chunks,
    prefetch_ring,
    volume_level,
)

__all__ = [
    "AxisMap",
    "Box",
    "ChunkFailure",
    "FailureLog",
    "MotionTracker",
    "PlaneMotion",
    "ViewController",
    "ViewFrame",
    "ViewKind",
    "ViewRequest",
    "box_bytes",
    "chunk_ranges",
    "coarser_fill",
    "contrast_selection",
    "covered",
    "is_plane_step",
    "level_box",
    "level_index",
    "lookahead_planes",
    "playback_level",
    "prefetch_chunks",
    "prefetch_ring",
    "root_cause",
    "view_box",
    "volume_level",
    "waiting_region",
]
