"""OME-Zarr HCS plates as one mosaic per level: wells by row and column, fields side by side.

A plate (``plate`` metadata: rows, columns, wells; each well a group whose
``well.images`` lists its fields, each field an OME-Zarr image) is shown as one
image whose last two axes tile the fields: well (row r, column c), field f sits
at rows ``r * height`` and columns ``(c * fields + f) * width`` of the mosaic.
Level k of the mosaic is every field's own level k, so coarse levels come from
the wells' pyramids.

Nothing is opened per well up front. `describe_plate` reads the plate's
metadata, the first listed well's and its first field's (the *template*: its
axes, channels, levels, shapes, dtype, chunks). Every other field is a
`FieldSource` that assumes the template's shape, dtype and grid, and opens its
array (one metadata document) on its first chunk read, on a worker thread; a
field whose array differs from the template, or is missing, fails its own
chunks with a message naming it, and the rest of the plate still shows. Wells
the plate does not list are the fill value and cost nothing.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from napari_lazy_zarr.core.errors import LazyZarrError, MetadataError
from napari_lazy_zarr.core.formats.ome import store_name
from napari_lazy_zarr.core.sources import boundaries
from napari_lazy_zarr.core.sources.composite import ConcatSource, ConstantSource
from napari_lazy_zarr.core.sources.protocol import SourceFields
from napari_lazy_zarr.core.sources.zarr import open_node
from napari_lazy_zarr.core.storage.local import store_for
from napari_lazy_zarr.core.storage.memo import (
    forget_metadata,
    known_metadata,
    prefetch_metadata,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from napari_lazy_zarr.core.formats.ome import ImageSpec
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "FieldSource",
    "PlateLayout",
    "describe_plate",
    "field_opener",
    "is_plate",
    "plate_level_sources",
]


@dataclass(frozen=True, slots=True)
class PlateLayout:
    """Where a plate's fields sit, and the template field the others are assumed to match.

    Attributes
    ----------
    location
        The plate's path or URL.
    rows, columns
        The plate's row and column names, in order.
    wells
        ``(row index, column index, well path)`` of each well the plate lists.
    fields
        The field paths inside a well (the first listed well's ``images``).
    image
        The template field's image (axes, channels, levels), its levels renamed
        to the level paths inside a field and reshaped to the mosaic.
    level_paths
        Each level's dataset path inside a field.
    field_shapes
        Each level's shape in one field.
    template_path
        The template field's path inside the plate (first well, first field).
    template
        The template field's own image, as `describe_store` gave it.
    zarr_format
        The plate's Zarr format (every field's).
    """

    location: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    wells: tuple[tuple[int, int, str], ...]
    fields: tuple[str, ...]
    image: ImageSpec
    level_paths: tuple[str, ...]
    field_shapes: tuple[tuple[int, ...], ...]
    template_path: str
    template: ImageSpec
    zarr_format: Literal[2, 3]


def _plate_document(attributes: Any) -> dict[str, Any] | None:
    document = attributes.get("ome", attributes)
    plate = document.get("plate") if isinstance(document, dict) else None
    return plate if isinstance(plate, dict) else None


_FIELD_GUESS: Final = "0"  # a well's first field, as ome-zarr-py, ngff-zarr, iohub, bioio write it


def is_plate(location: str | os.PathLike[str]) -> bool:
    """Whether `location` is a zarr group holding OME ``plate`` metadata (metadata only)."""
    location = os.fspath(location)
    store, _ = store_for(location)
    try:
        node = open_node(store, "", location)
    except LazyZarrError:
        return False
    finally:
        forget_metadata(store)
    return not hasattr(node, "shape") and _plate_document(node.attrs.asdict()) is not None


def describe_plate(
    location: str | os.PathLike[str],
    *,
    attributes: dict[str, Any] | None = None,
    zarr_format: Literal[2, 3] | None = None,
) -> PlateLayout:
    """The plate at `location`: its layout and template field (three metadata reads + a field's).

    `attributes` and `zarr_format`, when the caller already read the plate
    group (`core.layout.PlateStoreError` carries them), spare reading it again.

    Raises
    ------
    MetadataError
        No plate metadata, no wells, or a first well with no fields.
    LazyZarrError
        As `core.layout.describe_store` for the template field.
    """
    from napari_lazy_zarr.core.formats.ome import describe_store

    location = os.fspath(location).rstrip("/")
    store, _ = store_for(location)
    try:
        if attributes is None or zarr_format is None:
            root = open_node(store, "", location)
            attributes, zarr_format = dict(root.attrs.asdict()), root.metadata.zarr_format
        plate = _plate_document(attributes)
        if plate is None:
            raise MetadataError(f"{location}: no OME plate metadata")
        rows = tuple(str(r["name"]) for r in plate.get("rows", ()))
        columns = tuple(str(c["name"]) for c in plate.get("columns", ()))
        wells = tuple(
            (int(w["rowIndex"]), int(w["columnIndex"]), str(w["path"]))
            for w in plate.get("wells", ())
        )
        if not wells or not rows or not columns:
            raise MetadataError(f"{location}: the plate lists no wells")
        first = wells[0][2]
        # One round trip for the well and, guessed, its first field's group: writers
        # name it "0". Its documents as its own store's open asks for them (either
        # format's, consolidated); a wrong guess costs 404s in that same round.
        guessed = f"{first}/{_FIELD_GUESS}"
        prefetch_metadata(store, [first, guessed], consolidated=True)
        guess = known_metadata(store, guessed)
        well_group = open_node(
            store,
            first,
            f"{location}/{first}",
            zarr_format=zarr_format,
            consolidated=False,
        )
        well_document: dict[str, Any] = dict(well_group.attrs.asdict())
        well = well_document.get("ome", well_document).get("well", {})
        fields = tuple(str(image["path"]) for image in well.get("images", ()))
    finally:
        forget_metadata(store)
    if not fields:
        raise MetadataError(f"{location}/{first}: the well lists no fields")
    template_path = f"{first}/{fields[0]}"
    seeded = guess if fields[0] == _FIELD_GUESS else None  # else its own round trip, as before
    images = [
        s
        for s in describe_store(f"{location}/{template_path}", metadata=seeded)
        if s.kind == "image"
    ]
    if not images:
        raise MetadataError(f"{location}/{template_path}: the field holds no image")
    template = images[0]
    field_shapes = tuple(level.shape for level in template.levels)
    mosaic_levels = tuple(
        replace(
            level,
            path="",
            shape=_mosaic_shape(level.shape, len(rows), len(columns) * len(fields)),
            _array=None,
        )
        for level in template.levels
    )
    name = str(plate.get("name") or store_name(location))
    return PlateLayout(
        location,
        rows,
        columns,
        wells,
        fields,
        replace(template, name=name, levels=mosaic_levels),
        tuple(level.path for level in template.levels),
        field_shapes,
        template_path,
        template,
        zarr_format,
    )


def _mosaic_shape(field: tuple[int, ...], rows: int, columns: int) -> tuple[int, ...]:
    return (*field[:-2], field[-2] * rows, field[-1] * columns)


class FieldSource(SourceFields):
    """One field's level, opened on its first read and checked against the template.

    Thread-safe: the first `read_chunk` opens the array (one metadata document)
    under a lock; later reads use it. A field whose shape, dtype or grid
    differs from the template, or that cannot be opened, raises the same
    `MetadataError` for every chunk, naming the field (its path, and `where`:
    ``"well B/3, field 1"``) and the difference.
    """

    def __init__(
        self,
        location: str,
        path: str,
        template: ChunkSource,
        opener: Callable[[str], ChunkSource],
        *,
        where: str = "",
    ) -> None:
        self._path = path
        # The well and field, for messages: a user finds a field by them, not by its path.
        self._name = f"{path} ({where})" if where else path
        self._template = template
        self._opener = opener
        self._identity = ("plate-field", location, path)
        self._shape = tuple(template.shape)
        self._dtype = np.dtype(template.dtype)
        self._fill_value = template.fill_value
        self._grid = tuple(template.grid)
        self._lock = threading.Lock()
        self._opened: ChunkSource | LazyZarrError | None = None

    def _source(self) -> ChunkSource:
        with self._lock:
            if self._opened is None:
                try:
                    opened = self._opener(self._path)
                    self._check(opened)
                    self._opened = opened
                except LazyZarrError as error:
                    self._opened = MetadataError(f"plate field {self._name}: {error}")
            if isinstance(self._opened, LazyZarrError):
                raise self._opened
            return self._opened

    def _check(self, opened: ChunkSource) -> None:
        differences = []
        if tuple(opened.shape) != self._shape:
            differences.append(f"shape {tuple(opened.shape)} (expected {self._shape})")
        if np.dtype(opened.dtype) != self._dtype:
            differences.append(f"dtype {opened.dtype} (expected {self._dtype})")
        if not differences and any(
            boundaries(a, n) != boundaries(b, n)
            for a, b, n in zip(opened.grid, self._grid, self._shape, strict=False)
        ):
            differences.append("chunks differ from the first field's")
        if differences:
            raise MetadataError(
                f"differs from the plate's first field: {', '.join(differences)}; "
                "its chunks are not shown"
            )

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        return self._source().read_chunk(coords)

    def __repr__(self) -> str:
        return f"FieldSource({self._path!r})"


def plate_level_sources(
    layout: PlateLayout,
    template_sources: Sequence[ChunkSource],
    opener: Callable[[str], ChunkSource],
) -> list[ChunkSource]:
    """One mosaic source per level: rows of wells concatenated, each row its fields in order.

    `template_sources` are the first field's levels (already open); `opener`
    opens a field level's array from its path inside the plate (called on a
    worker thread, on the field's first chunk read).
    """
    wells = {(row, column): path for row, column, path in layout.wells}
    levels: list[ChunkSource] = []
    for level, (template, level_path) in enumerate(
        zip(template_sources, layout.level_paths, strict=True)
    ):
        shape = layout.field_shapes[level]
        blank = ConstantSource(
            shape, template.fill_value, template.dtype, chunks=_chunks_of(template)
        )
        rows: list[ChunkSource] = []
        for row in range(len(layout.rows)):
            members: list[ChunkSource] = []
            for column in range(len(layout.columns)):
                well = wells.get((row, column))
                for field in layout.fields:
                    if well is None:
                        members.append(blank)
                        continue
                    path = f"{well}/{field}/{level_path}"
                    if f"{well}/{field}" == layout.template_path:
                        members.append(template)
                    else:
                        where = f"well {well}, field {field}"
                        members.append(
                            FieldSource(layout.location, path, template, opener, where=where)
                        )
            rows.append(ConcatSource(members, axis=-1))
        levels.append(ConcatSource(rows, axis=-2))
    return levels


def field_opener(layout: PlateLayout) -> Callable[[str], ChunkSource]:
    """Opens a field level's array by its path in the plate: one metadata document.

    The plate's Zarr format is known, so zarr-python does not probe for the
    other format's documents, nor for consolidated metadata; the array's raw
    metadata is vetted first as for any store (`open_node`).
    """
    import zarr

    from napari_lazy_zarr.core.errors import NotAZarrStoreError
    from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource
    from napari_lazy_zarr.core.storage.vetting import check_local

    def open_field(path: str) -> ChunkSource:
        full = f"{layout.location}/{path}"
        store, local_dir = store_for(layout.location)
        try:
            if local_dir is not None:
                check_local(os.path.join(local_dir, path))
            node = open_node(store, path, full, zarr_format=layout.zarr_format, consolidated=False)
        finally:
            forget_metadata(store)
        if not isinstance(node, zarr.Array):
            raise NotAZarrStoreError(f"{full}: is a zarr group, not an array")
        return ZarrChunkSource(node, location=full)

    return open_field


def _chunks_of(source: ChunkSource) -> tuple[int, ...]:
    return tuple(
        max(1, int(g.chunk_size(0))) if n else 1
        for g, n in zip(source.grid, source.shape, strict=True)
    )
