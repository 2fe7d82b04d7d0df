"""One layer's viewport: its request cycle, from a viewer's read to the chunks that fill it.

The pure policy sits beside the value types, as in ndv's `models/`: `axes`
(how the layer's axes map to the store's, boxes, level indices), `frames` (the
request a read makes and the immutable `ViewFrame` it gets back), `assembly`
(building frames from resident chunks), `fallback` (stand-ins from coarser
levels), `prefetch` (the ring, walks through z/t, level choice) and `contrast`
(the contrast-limit sample). `ViewController` (`controller`) is the stateful
piece, as ndv's `controllers/`: it answers each read at once with a frame;
`showing` keeps what its viewer was answered with, `requests` asks the cache,
`building` builds the next frames on its dispatch thread, with the volumes
(`volumes`) and the next frames of a walk through z/t (`planes`) it prepares.
`FailureLog` (`failures`) follows the layer's failed chunks for the user.
Qt-free, as all of `core` is.
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
from napari_lazy_zarr.core.viewport.contrast import (
    ContrastSample,
    contrast_selection,
    dtype_limits,
)
from napari_lazy_zarr.core.viewport.controller import ViewController
from napari_lazy_zarr.core.viewport.failures import ChunkFailure, FailureLog, root_cause
from napari_lazy_zarr.core.viewport.fallback import (
    coarser_fill,
    covered,
    stand_ins,
    waiting_region,
)
from napari_lazy_zarr.core.viewport.frames import (
    ViewFrame,
    ViewKind,
    ViewRequest,
    is_plane_step,
)
from napari_lazy_zarr.core.viewport.planes import PREPARED_PLANES, PreparedPlanes, planes_ahead
from napari_lazy_zarr.core.viewport.prefetch import (
    MotionTracker,
    PlaneMotion,
    lookahead_chunks,
    lookahead_planes,
    playback_level,
    prefetch_chunks,
    prefetch_ring,
    view_prefetch,
)
from napari_lazy_zarr.core.viewport.volumes import (
    PreparedVolumes,
    level_chunks,
    volume_box,
    volume_cost,
    volume_level,
    volume_steps,
)

__all__ = [
    "PREPARED_PLANES",
    "AxisMap",
    "Box",
    "ChunkFailure",
    "ContrastSample",
    "FailureLog",
    "MotionTracker",
    "PlaneMotion",
    "PreparedPlanes",
    "PreparedVolumes",
    "ViewController",
    "ViewFrame",
    "ViewKind",
    "ViewRequest",
    "box_bytes",
    "chunk_ranges",
    "coarser_fill",
    "contrast_selection",
    "covered",
    "dtype_limits",
    "is_plane_step",
    "level_box",
    "level_chunks",
    "level_index",
    "lookahead_chunks",
    "lookahead_planes",
    "planes_ahead",
    "playback_level",
    "prefetch_chunks",
    "prefetch_ring",
    "root_cause",
    "stand_ins",
    "view_box",
    "view_prefetch",
    "volume_box",
    "volume_cost",
    "volume_level",
    "volume_steps",
    "waiting_region",
]
