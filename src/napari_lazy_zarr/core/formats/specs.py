"""Layer specs: what `describe_store` makes of a store, one napari layer's worth each.

`LevelSpec` is one resolution level (a zarr array and its place); `ImageSpec` an image
or label image with its levels, axes, channels and rendering; `CoordinateFrame` an
OME-Zarr 0.6 image's coordinate systems and transformations before it is placed.
Values only: `core.formats.ome` makes them, the reader turns them into layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import zarr

    from napari_lazy_zarr.core.formats.transforms import Edge, SystemRef
    from napari_lazy_zarr.core.sources.warp import PointMap

__all__ = ["CoordinateFrame", "ImageSpec", "LevelSpec"]


@dataclass(frozen=True, slots=True, eq=False)
class CoordinateFrame:
    """An OME-Zarr 0.6 image's coordinate systems and the transformations it declares.

    Attributes
    ----------
    intrinsic
        Its intrinsic system (the one its levels map to).
    systems
        Every system it declares, with its number of axes.
    edges
        The transformations of its multiscale (to its other systems, its labels').
    """

    intrinsic: SystemRef
    systems: tuple[tuple[SystemRef, int], ...]
    edges: tuple[Edge, ...]


@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One resolution level of an image: a zarr array and its place in world space.

    Attributes
    ----------
    path
        The array's path inside the store (``""`` for an array at the root).
    shape
        The array's shape.
    scale
        World units per pixel along each axis (1.0 when the metadata gives none).
    translate
        World position of the first pixel along each axis (0.0 when none).
    """

    path: str
    shape: tuple[int, ...]
    scale: tuple[float, ...]
    translate: tuple[float, ...]
    # The array `describe_store` opened for this level, when it stays readable:
    # `open_level_sources` reads through it instead of fetching its metadata again.
    _array: zarr.Array[Any] | None = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One napari layer's worth of a store: an image or label image, finest level first.

    Attributes
    ----------
    name
        The layer name: a SpatialData element's name, else the multiscales ``name``,
        else the group or array path,
        else the store's basename without its suffix (`store_name`: ``cells.ome.zarr``
        shows as ``cells``) for what sits at the root.
    kind
        ``"labels"`` for an OME-Zarr label image, else ``"image"``.
    levels
        The resolution levels, finest (level 0) first, as napari expects.
    axis_names, axis_units
        Per axis, from the OME ``axes`` (plain arrays: their ``dimension_names``
        or ``dim_<i>``, no units).
    channel_axis
        Index of the axis of type ``"channel"``, else None.
    channel_names, channel_colors, contrast_limits, channel_visible
        Per channel (one for an image without a channel axis), from OME
        ``omero.channels``: ``label`` (``"<multiscales name>: <label>"`` when the
        multiscales has a name, as napari-ome-zarr names it; ``"<name> [<index>]"`` when
        the channel has no label), ``color`` as
        ``#RRGGBB`` (``#FFFFFF`` for every channel when ``omero.rdefs.model`` is
        ``"greyscale"``, and where a channel gives no valid colour), ``window`` start and
        end (None unless every channel has a usable one), ``active`` (True when absent).
        None without (usable) omero metadata.
    label_colors
        For a label image, ``(label value, (r, g, b, a))`` pairs (0-255) from its
        ``image-label`` ``colors``, in order; None when it gives none.
    label_properties
        For a label image, its ``image-label`` ``properties``, by label value (or None).
    version
        The NGFF version (``"0.1"`` to ``"0.6"``), or None for plain zarr.
    affine
        OME-Zarr 0.6: the matrix (homogeneous, over the store's axes) taking the
        image's intrinsic coordinate system to the shown one, applied after the
        levels' scale and translation; None when those say it all.
    warps
        OME-Zarr 0.6: when a displacement or coordinate field is on the way to
        the shown system, per level the map from an output pixel to the input
        pixel it shows (`core.sources.warp.WarpSource`); else None.
    coordinate_system
        OME-Zarr 0.6: the coordinate system the image is shown in.
    coordinate_systems
        OME-Zarr 0.6: the systems it could be shown in (`describe_store`'s
        ``coordinate_system=`` takes one of them).
    frame
        OME-Zarr 0.6: its coordinate systems and transformations as read, which
        `core.formats.placement.place_specs` routes through.
    """

    name: str
    kind: Literal["image", "labels"]
    levels: tuple[LevelSpec, ...]
    axis_names: tuple[str, ...]
    axis_units: tuple[str | None, ...]
    channel_axis: int | None = None
    channel_names: tuple[str, ...] | None = None
    channel_colors: tuple[str, ...] | None = None
    contrast_limits: tuple[tuple[float, float], ...] | None = None
    channel_visible: tuple[bool, ...] | None = None
    label_colors: tuple[tuple[int, tuple[int, int, int, int]], ...] | None = None
    label_properties: tuple[dict[str, Any], ...] | None = None
    version: str | None = None
    affine: tuple[tuple[float, ...], ...] | None = None
    warps: tuple[PointMap, ...] | None = None
    coordinate_system: str | None = None
    coordinate_systems: tuple[str, ...] = ()
    frame: CoordinateFrame | None = field(default=None, repr=False, compare=False, kw_only=True)
