"""One layer's viewport: its request cycle from a viewer's read to the chunks that fill it.

The pure policy (how the layer's axes map to the store's, what a read asks
for, stand-ins from coarser levels, what to load ahead) sits beside the value
types; `ViewController` is the one stateful piece, answering each read at once
and keeping the answer converging as chunks land. `FailureLog` follows the
layer's failed chunks for the user. Qt-free, as all of `core` is (ndv's
`models/` vs `controllers/` split is the model).
"""

from napari_lazy_zarr.core.viewport.controller import (
    AxisMap,
    MotionTracker,
    PlaneMotion,
    ViewController,
    ViewKind,
    ViewRequest,
    ViewResult,
    chunk_ranges,
    coarser_fill,
    level_box,
    level_index,
    lookahead_planes,
    playback_level,
    prefetch_chunks,
    prefetch_ring,
    view_box,
    volume_level,
)
from napari_lazy_zarr.core.viewport.failures import ChunkFailure, FailureLog, root_cause

__all__ = [
    "AxisMap",
    "ChunkFailure",
    "FailureLog",
    "MotionTracker",
    "PlaneMotion",
    "ViewController",
    "ViewKind",
    "ViewRequest",
    "ViewResult",
    "chunk_ranges",
    "coarser_fill",
    "level_box",
    "level_index",
    "lookahead_planes",
    "playback_level",
    "prefetch_chunks",
    "prefetch_ring",
    "root_cause",
    "view_box",
    "volume_level",
]
