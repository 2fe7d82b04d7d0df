"""Formats: metadata turned into layer specs; nothing here reads a chunk.

OME-NGFF attributes validated (`ngff`), what a store holds as layers (`ome`: OME-Zarr
images and labels, plain zarr arrays), their levels in world space (`levels`: transforms
napari can draw), optional rendering metadata as layer settings
(`rendering`), OME development versions read as their base (`ome_dev`), SpatialData's
layout (`spatialdata`), HCS plates as mosaics (`plate`) and stack files (`stack`). A
format reads metadata documents through `storage` and opens the `sources` its layers are
made of; the cache and the readers above never see it.
"""

from napari_lazy_zarr.core.formats.ngff import (
    Axis,
    Channel,
    Dataset,
    Image,
    LabelColor,
    Labels,
    Multiscale,
    NgffVersion,
    Omero,
    Window,
    parse_image,
    parse_label_colors,
    parse_labels,
)
from napari_lazy_zarr.core.formats.ome import (
    ImageSpec,
    LevelSpec,
    PlateStoreError,
    describe_store,
    looks_like_zarr,
    open_level_sources,
    open_source,
    store_name,
)
from napari_lazy_zarr.core.formats.plate import (
    FieldSource,
    PlateLayout,
    WellFields,
    describe_plate,
    field_opener,
    is_plate,
    plate_level_sources,
    well_reader,
)
from napari_lazy_zarr.core.formats.stack import (
    STACK_SUFFIX,
    ReferenceFileKind,
    StackFile,
    StackMember,
    open_stack,
    read_stack_file,
    reference_file_kind,
)

__all__ = [
    "STACK_SUFFIX",
    "Axis",
    "Channel",
    "Dataset",
    "FieldSource",
    "Image",
    "ImageSpec",
    "LabelColor",
    "Labels",
    "LevelSpec",
    "Multiscale",
    "NgffVersion",
    "Omero",
    "PlateLayout",
    "PlateStoreError",
    "ReferenceFileKind",
    "StackFile",
    "StackMember",
    "WellFields",
    "Window",
    "describe_plate",
    "describe_store",
    "field_opener",
    "is_plate",
    "looks_like_zarr",
    "open_level_sources",
    "open_source",
    "open_stack",
    "parse_image",
    "parse_label_colors",
    "parse_labels",
    "plate_level_sources",
    "read_stack_file",
    "reference_file_kind",
    "store_name",
    "well_reader",
]
