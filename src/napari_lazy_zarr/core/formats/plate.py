"""OME-Zarr HCS plates as one mosaic per level: wells by row and column, fields side by side.

A plate (``plate`` metadata: rows, columns, wells, optionally ``field_count``;
each well a group whose ``well.images`` lists its fields, each field an
OME-Zarr image) is shown as one image whose last two axes tile the fields:
well (row r, column c), field slot f sits at rows ``r * height`` and columns
``(c * slots + f) * width`` of the mosaic. Level k of the mosaic is every
field's own level k, so coarse levels come from the wells' pyramids.

Wells need not hold the same number of fields. Every well gets the same
number of *slots*: the plate's ``field_count`` (the most fields any well has,
by the spec) or the first well's count if that is more; slot f of a well
shows the f-th field its own ``well.images`` lists, and a slot past its last
field is an explicit placeholder, the fill value, never a failure.

Nothing is opened per well up front. `describe_plate` reads the plate's
metadata, the first listed well's and its first field's (the *template*: its
axes, channels, levels, shapes, dtype, chunks). Every other well's field list
is read (one metadata document, `WellFields`) by the first read of one of its
slots, on a worker thread; every other field is a `FieldSource` that assumes
the template's shape, dtype and grid, and opens its array (one metadata
document) on its first chunk read. A field whose array differs from the
template, or is missing, fails its own chunks with a message naming it, and
the rest of the plate still shows. Wells the plate does not list are the fill
value and cost nothing.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from napari_lazy_zarr.core.errors import LazyZarrError, MetadataError, MetadataWarning
from napari_lazy_zarr.core.formats.ome import store_name
from napari_lazy_zarr.core.keys import chunk_bounds
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
    "MAX_MOSAIC_FIELDS",
    "FieldSource",
    "PlateLayout",
    "WellFields",
    "describe_plate",
    "field_opener",
    "is_plate",
    "plate_level_sources",
    "well_reader",
]


MAX_MOSAIC_FIELDS: Final = 1 << 14
"""Field slots a plate's mosaic may hold (wells x slots): a ``field_count``, or a first
well listing more fields, than this allows is cut to fit, with a `MetadataWarning`. Every
slot is a source at each level: 32,768 slots of a 2-level plate took 0.45 s and +37 MiB to
open here, so a ``field_count`` of 10**9 would exhaust memory. 16,384 is a 1536-well plate
with 10 fields a well, a 384-well plate with 42, a 96-well plate with 170."""


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
        The first listed well's field paths (its ``images``), in order.
    slots
        Field slots in every well of the mosaic: the plate's ``field_count``
        or the first well's field count, whichever is more (at most what
        `MAX_MOSAIC_FIELDS` allows). A well's fields past its slots are not shown.
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
    slots: int
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


def _well_fields(attributes: Any, where: str) -> tuple[str, ...]:
    """The field paths a well's ``well.images`` lists (either format's attributes)."""
    document = attributes.get("ome", attributes) if isinstance(attributes, dict) else None
    well = document.get("well") if isinstance(document, dict) else None
    images = well.get("images") if isinstance(well, dict) else None
    if not isinstance(images, list):
        raise MetadataError(f"{where}: no OME well metadata (a ``well.images`` list)")
    try:
        return tuple(str(image["path"]) for image in images)
    except (TypeError, KeyError) as error:
        raise MetadataError(f"{where}: a well image without a path: {error!r}") from None


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
        fields = _well_fields(dict(well_group.attrs.asdict()), f"{location}/{first}")
    finally:
        forget_metadata(store)
    if not fields:
        raise MetadataError(f"{location}/{first}: the well lists no fields")
    slots = _slots(location, plate.get("field_count"), len(fields), len(rows) * len(columns))
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
            shape=_mosaic_shape(level.shape, len(rows), len(columns) * slots),
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
        slots,
        replace(template, name=name, levels=mosaic_levels),
        tuple(level.path for level in template.levels),
        field_shapes,
        template_path,
        template,
        zarr_format,
    )


def _slots(location: str, field_count: Any, first: int, wells: int) -> int:
    """Field slots per well: the plate's ``field_count`` (the most fields a well has) or the
    first well's count, whichever is more, cut to `MAX_MOSAIC_FIELDS` over the plate's wells.
    An absent or invalid ``field_count`` (not a positive integer) leaves the first well's."""
    counted = (
        field_count if isinstance(field_count, int) and not isinstance(field_count, bool) else 0
    )
    wanted = max(first, counted)
    allowed = max(1, MAX_MOSAIC_FIELDS // max(1, wells))
    if wanted > allowed:
        warnings.warn(
            MetadataWarning(
                f"{location}: {wanted:,} fields a well (the plate's field_count or its first "
                f"well's) are more than a mosaic of {wells:,} wells shows ({MAX_MOSAIC_FIELDS:,} "
                f"fields in all); the first {allowed:,} fields of each well are shown"
            ),
            stacklevel=3,
        )
        return allowed
    return wanted


def _mosaic_shape(field: tuple[int, ...], rows: int, columns: int) -> tuple[int, ...]:
    return (*field[:-2], field[-2] * rows, field[-1] * columns)


class WellFields:
    """One well's field paths, read from its own metadata by the first read that needs them.

    Thread-safe: the first `field` call reads the well's metadata (one
    document, on the worker thread that reads the well's first chunk) under a
    lock; later calls use the list. A well whose metadata cannot be read
    raises the same `MetadataError`, naming the well, for every call.

    Examples
    --------
    >>> well = WellFields("B/3", lambda path: ("0", "1"))
    >>> well.field(1), well.field(2)
    ('1', None)
    """

    def __init__(
        self,
        path: str,
        reader: Callable[[str], Sequence[str]],
        *,
        known: Sequence[str] | None = None,
    ) -> None:
        self.path = path
        self._reader = reader
        self._lock = threading.Lock()
        self._fields: tuple[str, ...] | LazyZarrError | None = (
            None if known is None else tuple(known)
        )

    def field(self, slot: int) -> str | None:
        """The path of the well's field in `slot` (0-based), or None past its last field."""
        with self._lock:
            if self._fields is None:
                try:
                    self._fields = tuple(self._reader(self.path))
                except LazyZarrError as error:
                    self._fields = MetadataError(f"plate well {self.path}: {error}")
            fields = self._fields
        if isinstance(fields, LazyZarrError):
            raise fields
        return fields[slot] if slot < len(fields) else None

    def __repr__(self) -> str:
        return f"WellFields({self.path!r})"


class FieldSource(SourceFields):
    """One field slot's level, opened on its first read and checked against the template.

    Thread-safe: the first `read_chunk` finds the slot's field in its well
    (`WellFields`) and opens its array (one metadata document) under a lock;
    later reads use it. A slot past the well's last field reads as the fill
    value: an explicit placeholder, not a failure. A field whose shape, dtype
    or grid differs from the template, or that cannot be opened, raises the
    same `MetadataError` for every chunk, naming the field (its path, its well
    and field: ``"B/3/1/s0 (well B/3, field 1)"``) and the difference.
    """

    def __init__(
        self,
        location: str,
        well: WellFields,
        slot: int,
        level_path: str,
        template: ChunkSource,
        opener: Callable[[str], ChunkSource],
    ) -> None:
        self._well = well
        self._slot = slot
        self._level_path = level_path
        self._template = template
        self._opener = opener
        self._identity = ("plate-field", location, well.path, slot, level_path)
        self._shape = tuple(template.shape)
        self._dtype = np.dtype(template.dtype)
        self._fill_value = template.fill_value
        self._grid = tuple(template.grid)
        self._lock = threading.Lock()
        self._opened: ChunkSource | LazyZarrError | None = None
        self._empty = False

    def _source(self) -> ChunkSource | None:
        with self._lock:
            if self._opened is None and not self._empty:
                try:
                    field = self._well.field(self._slot)
                except LazyZarrError as error:
                    self._opened = error
                else:
                    if field is None:
                        self._empty = True
                    else:
                        self._opened = self._open(field)
            if isinstance(self._opened, LazyZarrError):
                raise self._opened
            return self._opened

    def _open(self, field: str) -> ChunkSource | LazyZarrError:
        path = f"{self._well.path}/{field}/{self._level_path}"
        try:
            opened = self._opener(path)
            self._check(opened)
        except LazyZarrError as error:
            where = f"well {self._well.path}, field {field}"
            return MetadataError(f"plate field {path} ({where}): {error}")
        return opened

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
        source = self._source()
        if source is None:  # the well has no field in this slot: the placeholder
            lo, hi = chunk_bounds(self._grid, coords, self._shape)
            shape = tuple(b - a for a, b in zip(lo, hi, strict=True))
            return np.full(shape, self._fill_value, dtype=self._dtype)
        return source.read_chunk(coords)

    def __repr__(self) -> str:
        return f"FieldSource({self._well.path!r}, slot={self._slot}, {self._level_path!r})"


def plate_level_sources(
    layout: PlateLayout,
    template_sources: Sequence[ChunkSource],
    opener: Callable[[str], ChunkSource],
    wells_reader: Callable[[str], Sequence[str]] | None = None,
) -> list[ChunkSource]:
    """One mosaic source per level: rows of wells concatenated, each row its slots in order.

    `template_sources` are the first field's levels (already open); `opener`
    opens a field level's array from its path inside the plate (called on a
    worker thread, on the field's first chunk read); `wells_reader` reads a
    well's field paths from its path inside the plate (by default
    `well_reader`), once per well, on the first read of one of its slots.
    """
    read_well = well_reader(layout) if wells_reader is None else wells_reader
    first = layout.wells[0][2]
    # One field list per well, shared by every level (and every channel's layer).
    wells = {
        (row, column): WellFields(path, read_well, known=layout.fields if path == first else None)
        for row, column, path in layout.wells
    }
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
                for slot in range(layout.slots):
                    if well is None:
                        members.append(blank)
                    elif well.path == first and slot == 0:
                        members.append(template)
                    else:
                        members.append(
                            FieldSource(layout.location, well, slot, level_path, template, opener)
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

    def open_field(path: str) -> ChunkSource:
        full = f"{layout.location}/{path}"
        node = _open_in_plate(layout, path)
        if not isinstance(node, zarr.Array):
            raise NotAZarrStoreError(f"{full}: is a zarr group, not an array")
        return ZarrChunkSource(node, location=full)

    return open_field


def well_reader(layout: PlateLayout) -> Callable[[str], tuple[str, ...]]:
    """Reads a well's field paths by its path in the plate: one metadata document (the
    group's, in the plate's Zarr format; vetted as for any store)."""
    import zarr

    def read_well(path: str) -> tuple[str, ...]:
        full = f"{layout.location}/{path}"
        node = _open_in_plate(layout, path)
        if not isinstance(node, zarr.Group):
            raise MetadataError(f"{full}: is a zarr array, not a well's group")
        return _well_fields(dict(node.attrs.asdict()), full)

    return read_well


def _open_in_plate(layout: PlateLayout, path: str) -> Any:
    from napari_lazy_zarr.core.storage.vetting import check_local

    store, local_dir = store_for(layout.location)
    try:
        if local_dir is not None:
            check_local(os.path.join(local_dir, path))
        return open_node(
            store,
            path,
            f"{layout.location}/{path}",
            zarr_format=layout.zarr_format,
            consolidated=False,
        )
    finally:
        forget_metadata(store)


def _chunks_of(source: ChunkSource) -> tuple[int, ...]:
    return tuple(
        max(1, int(g.chunk_size(0))) if n else 1
        for g, n in zip(source.grid, source.shape, strict=True)
    )
