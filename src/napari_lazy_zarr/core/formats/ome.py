"""What a zarr store holds, as napari layers: images, labels, levels, transforms, channels.

Everything here comes from metadata; no chunk is ever read. OME-Zarr metadata
(NGFF 0.4 on Zarr v2, 0.5 on Zarr v3) is validated by `core.ngff` (the rules
ome-zarr-models enforces, without its pydantic pin); array metadata by
zarr-python.

Why attribute documents, validated first, rather than a group-level reader
such as ome-zarr-models' ``Image.from_zarr``: that opens every level through
zarr-python before we can look at it, so (1) a level with a pickle codec or an
object dtype would fail inside zarr as an anonymous ``ValueError`` instead of
being refused by name (zarr_source's raw-metadata checks must see the JSON
first), (2) each level's metadata would be fetched twice — one extra request
per level on remote stores — and (3) its failures arrive as a mix of
exception types. Validating the attributes, then opening each level once
ourselves, keeps one parse per document and one error class per cause.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import zarr
import zarr.errors
import zarr.storage
from zarr.abc.store import RangeByteRequest

from napari_lazy_zarr.core.errors import (
    LazyZarrError,
    MetadataError,
    MetadataWarning,
    MissingCodecError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.formats.ngff import parse_image, parse_labels
from napari_lazy_zarr.core.formats.ome_dev import as_base_version, dev_base
from napari_lazy_zarr.core.formats.rendering import ChannelDisplay, label_colors, warn_ignored
from napari_lazy_zarr.core.formats.spatialdata import (
    IMAGE_GROUPS,
    OTHER_GROUPS,
    element_name,
    is_spatialdata,
    skipped_notice,
)
from napari_lazy_zarr.core.formats.stack import (
    STACK_SUFFIX,
    open_stack,
    read_stack_file,
    reference_file_kind,
)
from napari_lazy_zarr.core.settings import Timeouts, backend_from_settings
from napari_lazy_zarr.core.sources.backends import choose_backend, open_backend_source
from napari_lazy_zarr.core.sources.codecs import with_installed_codecs
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_node, open_zarr_source
from napari_lazy_zarr.core.storage.local import store_for
from napari_lazy_zarr.core.storage.memo import forget_metadata, prefetch_metadata, seed_metadata
from napari_lazy_zarr.core.storage.references import ManifestStore
from napari_lazy_zarr.core.storage.remote import REMOTE_SCHEMES, RemoteStore
from napari_lazy_zarr.core.storage.remote_errors import (
    HttpAccessDeniedError,
    HttpCertificateError,
)
from napari_lazy_zarr.core.storage.retry import NO_RETRY
from napari_lazy_zarr.core.storage.vetting import (
    MAX_METADATA_BYTES,
    METADATA_FILES,
    check_local,
    check_safe,
    is_url,
    metadata_files,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from napari_lazy_zarr.core.formats.ngff import Multiscale, NgffVersion
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "ImageSpec",
    "LevelSpec",
    "PlateStoreError",
    "TransformWarning",
    "describe_store",
    "looks_like_zarr",
    "open_level_sources",
    "open_source",
    "store_name",
]

# What `looks_like_zarr` accepts: a directory holding one of these files...
_MARKER_FILES: Final = (*METADATA_FILES, ".zattrs")
# ...a zipped store, a URL with one of these schemes ending in ".zarr", or an
# http(s) URL whose metadata document says zarr.
_URL_SCHEMES: Final = REMOTE_SCHEMES  # what obstore reads (`RemoteStore`)
_PROBE_TIMEOUT: Final = 2.0  # seconds `looks_like_zarr` may spend fetching a URL's metadata
_PROBE_BYTES: Final = 1 << 16  # of a metadata document read to recognise it
_ZARR_FORMAT: Final = re.compile(rb'"zarr_format"\s*:\s*([23])\b')
_SUPPORTED_VERSIONS: Final = ("0.4", "0.5")
MAX_LEVELS: Final = 64  # pyramid levels: 2**64 pixels would need no more
# Nodes opened at once (levels, label images). Each open is one round trip of metadata
# over HTTP (`prefetch_metadata`); 16 keep a pyramid's levels (and its labels group) in one.
_OPEN_CONCURRENCY: Final = 16


# Composed OME transforms beyond these are not a place in the world napari can draw (vispy
# draws in float32: 7 digits, and 3.4e38 at most, which a 2**63-pixel axis at a scale of
# 1e15 still fits). Neither napari-ome-zarr nor ome-zarr-models bounds a finite non-zero
# scale: such an image opens, with a warning, at the identity transform (pixel units).
_SCALE_BOUNDS: Final = (1e-15, 1e15)  # a positive world size of one pixel, in any unit
_MAX_TRANSLATION: Final = 1e15
_MAX_SCALE_RATIO: Final = 1e9  # between two axes of a level, or one axis of two levels


class TransformWarning(UserWarning):
    """An OME image's transforms are not drawable (non-positive, absurd, or wildly unequal
    scales); it opens at the identity transform, and the message names the path and values."""


class PlateStoreError(NotAZarrStoreError):
    """`describe_store` was given an OME-Zarr HCS plate (see `core.plate`).

    Carries the plate group's attributes and Zarr format, so describing the
    plate next fetches nothing twice.
    """

    attributes: dict[str, Any] | None = None
    zarr_format: Literal[2, 3] | None = None


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
    version
        The NGFF version (``"0.4"``, ``"0.5"``), or None for plain zarr.
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
    version: str | None = None


def looks_like_zarr(path: str | os.PathLike[str], *, timeout: float = _PROBE_TIMEOUT) -> bool:
    """Whether `path` looks like a zarr store, from its metadata alone; never raises.

    True for a directory holding ``zarr.json``, ``.zarray``, ``.zgroup`` or
    ``.zattrs`` (a few ``stat`` calls), for a ``*.zarr.zip`` or ``*.ozx`` file, for an
    ``http(s)://`` or ``s3://`` URL ending in ``.zarr`` (or ``.zarr/``), and for
    any other ``http(s)://`` URL whose ``zarr.json``, ``.zarray`` or ``.zgroup``
    is zarr metadata (fetched, at most `timeout` seconds in all; e.g. an array
    inside a store, ``.../image.ome.zarr/labels/cells``). No chunk is read, and
    local metadata is not parsed: `describe_store` gives the reasons a store
    that looks like zarr is not.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> _ = zarr.create_array(path, shape=(4,), dtype="u1")
    >>> looks_like_zarr(path), looks_like_zarr(tempfile.mkdtemp())
    (True, False)
    >>> looks_like_zarr("https://example.org/data/image.zarr/")
    True
    """
    try:
        location = os.fspath(path)
        if not location:  # "" would mean the working directory
            return False
        if is_url(location):
            scheme = location.split("://", 1)[0].lower()
            if scheme not in _URL_SCHEMES:
                return False
            if location.rstrip("/").lower().endswith(".zarr"):
                return True
            return scheme in ("http", "https") and _serves_zarr_metadata(location, timeout)
        if os.path.isfile(location):
            return location.lower().endswith((".zarr.zip", ".ozx"))  # .ozx: RFC-9
        # os.path.isfile swallows OSError and ValueError (a NUL byte): never raises.
        return any(os.path.isfile(os.path.join(location, name)) for name in _MARKER_FILES)
    except Exception:  # the napari reader hook must get an answer, whatever it is handed
        return False


def _serves_zarr_metadata(url: str, timeout: float) -> bool:
    """Whether the http(s) `url` serves zarr metadata (bounded in time and bytes; never raises).

    Each document is asked for by range (its first `_PROBE_BYTES`) through
    `RemoteStore`, within what is left of `timeout`, never retried. A server whose
    certificate is not trusted, or that denies access (401, 403), is claimed: the
    open then fails with the error saying what to set (the CA bundle, the request
    headers), where declining would leave napari's "no compatible reader".
    """
    deadline = time.monotonic() + timeout
    for name in METADATA_FILES:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        store = RemoteStore(
            url,
            timeouts=Timeouts(connect=remaining, read=remaining, total=remaining),
            retry=NO_RETRY,
            max_body_bytes=MAX_METADATA_BYTES,  # a server that ignores the range
        )
        try:
            head = store.read_sync(name, RangeByteRequest(0, _PROBE_BYTES), cap=_PROBE_BYTES)
        except (HttpCertificateError, HttpAccessDeniedError):
            return True
        except (LazyZarrError, OSError, ValueError):
            continue  # refused, timed out, too large, or not a URL it can fetch
        finally:
            store.close()
        if head is not None and _is_zarr_document(
            bytes(head), zarr_format=3 if name == "zarr.json" else 2
        ):
            return True
    return False


def _is_zarr_document(head: bytes, *, zarr_format: int) -> bool:
    """Whether `head` (a metadata document, or its first bytes) is zarr metadata of that format."""
    try:
        document = json.loads(head)
    except ValueError:  # cut short (a large zarr.json, e.g. consolidated): recognise its start
        match = _ZARR_FORMAT.search(head)
        return (
            head.lstrip().startswith(b"{")
            and match is not None
            and (int(match.group(1)) == zarr_format)
        )
    return isinstance(document, dict) and document.get("zarr_format") == zarr_format


def describe_store(
    path_or_url: str | os.PathLike[str], *, metadata: Mapping[str, Any] | None = None
) -> tuple[ImageSpec, ...]:
    """The images and label images in a zarr store, from its metadata alone.

    - A single array at the root: one single-level image named after the store.
    - An OME-Zarr image (NGFF 0.4 on Zarr v2, 0.5 on Zarr v3): its levels from
      ``multiscales[0].datasets`` with their composed scale and translation,
      axes, channel axis and ``omero`` channels; then one ``"labels"`` image per
      entry of its ``labels`` group.
    - A SpatialData root (`core.formats.spatialdata`): its ``images/*``, then its
      ``labels/*``, named after their elements; points, shapes and tables skipped.
    - Any other group: one single-level image per array directly in it, and the
      OME-Zarr images among its direct subgroups, in name order.

    An OME development version of 0.4 or 0.5 (``0.5-dev-spatialdata``) is read
    as its base (`core.formats.ome_dev`), and invalid optional rendering metadata
    gives its defaults (`core.formats.rendering`), each with a `MetadataWarning`.
    - A kerchunk reference file: what the store it describes holds, as above
      (named after the file, without ``.json``).
    - A stack file (``*.zstack.json``): one single-level image, the composite
      of the arrays it lists (see `core.manifest.StackFile`).

    No chunk is read. URLs are passed to zarr-python as they are. `metadata`:
    documents of this store already fetched (keys relative to it, None if absent).

    Raises
    ------
    StoreNotFoundError
        The path does not exist.
    NotAZarrStoreError
        The path holds no zarr metadata, or a group with no arrays or images.
    MetadataError
        Metadata is unreadable, malformed, or invalid OME-Zarr (the message
        names the path and the validation problems).
    UnsafeDataError
        An array uses an object dtype or a pickle codec.
    UnsupportedDataError
        An array's dtype cannot be shown as an image, an OME-Zarr version other
        than 0.4 or 0.5 (or their development versions), or transforms stored in arrays.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/plain.zarr"
    >>> group = zarr.create_group(path)
    >>> _ = group.create_array("raw", shape=(64, 64), dtype="u2")
    >>> (image,) = describe_store(path)
    >>> image.name, image.levels[0].shape, image.levels[0].scale
    ('raw', (64, 64), (1.0, 1.0))
    """
    location = os.fspath(path_or_url)
    kind = reference_file_kind(location)
    if kind == "stack":
        return (_stack_image(location),)
    basename = store_name(location)
    if kind == "kerchunk":
        store, local_dir = ManifestStore(location), None
        basename = basename.removesuffix(".json")
    else:
        store, local_dir = store_for(location)
    seed_metadata(store, metadata or {})  # documents a caller fetched already (a plate's field)
    try:
        # The root's documents of both formats in one round trip, not an array's then a group's.
        prefetch_metadata(store, [""], consolidated=True)
        root = open_node(store, "", location)
        walk = _Walk(
            location,
            local_dir,
            root.store,
            basename,
            zarr_format=root.metadata.zarr_format,
            # A zip store is closed below; kerchunk levels open as `ManifestSource`s.
            keep_arrays=not isinstance(store, zarr.storage.ZipStore | ManifestStore),
        )
        if isinstance(root, zarr.Array):
            check_safe(location, root)
            return (_plain_image(root, walk.basename, keep=walk.keep_arrays),)
        attributes: dict[str, Any] = dict(root.attrs.asdict())
        ome = attributes.get("ome")
        if "plate" in attributes or (isinstance(ome, dict) and "plate" in ome):
            error = PlateStoreError(
                f"{location}: an OME-Zarr HCS plate: its wells are not images "
                "(napari_lazy_zarr.core.formats.plate lays them out as one mosaic)"
            )
            error.attributes, error.zarr_format = attributes, root.metadata.zarr_format
            raise error
        return walk.group(root)
    finally:
        if isinstance(store, zarr.storage.ZipStore):
            store.close()
        forget_metadata(store)  # the arrays kept read their chunks straight from storage


# -- walking the store ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Walk:
    """The store being described: how to name, vet and open the nodes inside it."""

    location: str
    local_dir: str | None  # the store's directory when local: raw metadata is vetted first
    store: Any  # the zarr Store the root was opened from; nested nodes share it
    basename: str
    zarr_format: Literal[2, 3]  # the root's: a hierarchy has one format
    keep_arrays: bool  # whether levels keep their arrays for `open_level_sources`

    def full(self, path: str) -> str:
        """`path` inside the store as a user-facing location."""
        return f"{self.location.rstrip('/')}/{path}" if path else self.location

    def open(self, path: str) -> zarr.Array[Any] | zarr.Group:
        """The node at `path`, its raw metadata vetted first when the store is local.

        Vetting before zarr-python parses the JSON is what lets a pickle codec be
        refused by name (zarr 3.4 rejects it with an anonymous ValueError) and a
        broken document be named by file. Nodes opened by path are never listed:
        no consolidated metadata is fetched for them.
        """
        if self.local_dir is not None:
            check_local(os.path.join(self.local_dir, path))
        return open_node(
            self.store, path, self.full(path), zarr_format=self.zarr_format, consolidated=False
        )

    def open_all(self, paths: Sequence[str]) -> list[_Opened]:
        """The nodes at `paths`, in order, opened concurrently (each its node or its error).

        Errors are returned, not raised, so the caller reports them in the
        metadata's order whichever open finished first.
        """

        def attempt(path: str) -> _Opened:
            try:
                return self.open(path)
            except LazyZarrError as error:
                return error

        # Each node's documents, array's and group's, in one round for all (a remote store).
        prefetch_metadata(self.store, paths, zarr_format=self.zarr_format)
        if len(paths) <= 1:
            return [attempt(path) for path in paths]
        with ThreadPoolExecutor(
            min(len(paths), _OPEN_CONCURRENCY), thread_name_prefix="lazy-zarr-open"
        ) as pool:
            return list(pool.map(attempt, paths))

    def group(self, group: zarr.Group) -> tuple[ImageSpec, ...]:
        """An OME-Zarr image group's images, else those of a plain group."""
        ome = _ome_document(group, self.full(group.path))
        if ome is not None and "multiscales" in ome[1]:
            return self.ome_image(group, *ome)
        if is_spatialdata(group.attrs.asdict()):
            return self.spatialdata_root(group)
        return self.plain_group(group)

    def members(self, group: zarr.Group) -> list[tuple[str, zarr.Array[Any] | zarr.Group]]:
        """A group's direct members in name order, their raw metadata vetted first if local."""
        full = self.full(group.path)
        if self.local_dir is not None:
            self._vet_children(os.path.join(self.local_dir, group.path), full)
        try:
            # Listing parses each member's metadata: a codec zarr does not know yet is
            # registered from the installed packages first (`sources.codecs`).
            listed = with_installed_codecs(group.members, full)
            return sorted(listed, key=lambda member: member[0])
        except MissingCodecError:
            raise
        except (ValueError, TypeError, KeyError) as error:
            raise MetadataError(
                f"{full}: malformed zarr metadata in the group's members: "
                f"{type(error).__name__}: {error}"
            ) from error

    def spatialdata_root(self, group: zarr.Group) -> tuple[ImageSpec, ...]:
        """A SpatialData store's images, then its labels (`core.formats.spatialdata`).

        Its other elements (points, shapes, tables) are not images: logged, not shown.
        """
        full = self.full(group.path)
        kinds = dict(self.members(group))
        images: list[ImageSpec] = []
        skipped: dict[str, list[str]] = {}
        for kind in (*IMAGE_GROUPS, *OTHER_GROUPS):
            holder = kinds.get(kind)
            if not isinstance(holder, zarr.Group):
                continue
            for name, node in self.members(holder):
                ome = None
                if kind in IMAGE_GROUPS and isinstance(node, zarr.Group):
                    ome = _ome_document(node, self.full(node.path))
                if ome is None or "multiscales" not in ome[1] or not isinstance(node, zarr.Group):
                    skipped.setdefault(kind, []).append(name)
                    continue
                images.extend(self.ome_image(node, *ome, label=name if kind == "labels" else ""))
        skipped_notice(full, skipped)
        if not images:
            raise NotAZarrStoreError(
                f"{full}: a SpatialData store with no images or labels"
                + (f" (only {', '.join(skipped)})" if skipped else "")
            )
        return tuple(images)

    def plain_group(self, group: zarr.Group) -> tuple[ImageSpec, ...]:
        full = self.full(group.path)
        members = self.members(group)
        images: list[ImageSpec] = []
        unsupported: list[UnsupportedDataError] = []
        for _, node in members:
            if isinstance(node, zarr.Array):
                try:
                    check_safe(self.full(node.path), node)
                except UnsupportedDataError as error:
                    # E.g. a table of strings beside the images: not a layer, not fatal.
                    unsupported.append(error)
                    continue
                images.append(_plain_image(node, node.path, keep=self.keep_arrays))
                continue
            ome = _ome_document(node, self.full(node.path))
            if ome is not None and "multiscales" in ome[1]:
                images.extend(self.ome_image(node, *ome))
        if images:
            return tuple(images)
        if unsupported:
            raise unsupported[0]
        # Over plain HTTP a group's members can only be listed from consolidated metadata.
        hint = " (or its members cannot be listed over this URL)" if is_url(full) else ""
        raise NotAZarrStoreError(
            f"{full}: zarr group with no arrays (nor OME-Zarr images in its subgroups){hint}"
        )

    def _vet_children(self, directory: str, full: str) -> None:
        """Raw-metadata checks of a local group's children before zarr parses them."""
        try:
            children = sorted(entry.path for entry in os.scandir(directory) if entry.is_dir())
        except OSError as error:
            raise MetadataError(f"{full}: cannot list the group: {error}") from error
        for child in children:
            if metadata_files(child):
                check_local(child)

    def ome_image(
        self,
        group: zarr.Group,
        version: NgffVersion,
        document: dict[str, Any],
        *,
        label: str = "",
    ) -> tuple[ImageSpec, ...]:
        """An OME-Zarr image (or, with `label`, label image) and then its label images."""
        full = self.full(group.path)
        attributes = parse_image(document, version, full)
        multiscale, omero = attributes.multiscales[0], attributes.omero
        kind: Literal["image", "labels"] = (
            "labels" if label or "image-label" in document else "image"
        )
        paths = self._dataset_paths(group, multiscale, full)
        # The levels and the labels group in one round of requests.
        opened = self.open_all([*paths, *(() if label else (_join(group.path, "labels"),))])
        levels = self._levels(
            multiscale, full, paths, opened[: len(paths)], labels=kind == "labels"
        )
        axes = multiscale.axes
        channel_axis = next((i for i, a in enumerate(axes) if a.type == "channel"), None)
        # A SpatialData element is named after itself (its multiscales name is not its name).
        element = element_name(group.attrs.asdict(), group.path, self.basename)
        layer_name = label or element or multiscale.name or group.path or self.basename
        if attributes.ignored:
            warn_ignored(full, "omero", attributes.ignored, stacklevel=4)
        channels = ChannelDisplay()
        if kind == "image" and omero is not None:
            n_channels = 1 if channel_axis is None else levels[0].shape[channel_axis]
            # Channel layers are named after the image too; an image without a channel axis
            # is one layer, named after the image alone.
            title = (element or multiscale.name or None) if channel_axis is not None else None
            channels = ChannelDisplay.from_omero(omero, n_channels, layer_name, full, titled=title)
        colors = None
        if kind == "labels":
            colors = label_colors(document.get("image-label"), full)
        image = ImageSpec(
            name=layer_name,
            kind=kind,
            levels=levels,
            axis_names=tuple(a.name for a in axes),
            axis_units=tuple(a.unit for a in axes),
            channel_axis=channel_axis,
            channel_names=channels.names,
            channel_colors=channels.colors,
            contrast_limits=channels.limits,
            channel_visible=channels.visible,
            label_colors=colors,
            version=version,
        )
        if label:
            return (image,)
        return (image, *self._labels(group, version, opened[-1]))

    @staticmethod
    def _dataset_paths(group: zarr.Group, multiscale: Multiscale, full: str) -> list[str]:
        """The store paths of a multiscale's datasets (a bounded number, none twice)."""
        paths = [dataset.path for dataset in multiscale.datasets]
        if len(paths) > MAX_LEVELS:
            raise MetadataError(
                f"{full}: multiscales lists {len(paths)} datasets (at most {MAX_LEVELS})"
            )
        if len(set(paths)) != len(paths):
            raise MetadataError(f"{full}: multiscales lists a dataset path twice: {paths[:8]}")
        return [_join(group.path, path) for path in paths]

    def _levels(
        self,
        multiscale: Multiscale,
        full: str,
        paths: Sequence[str],
        opened: Sequence[_Opened],
        *,
        labels: bool,
    ) -> tuple[LevelSpec, ...]:
        """The levels of a multiscale: its datasets' store `paths` and `opened` nodes."""
        ndim = len(multiscale.axes)
        outer_scale = multiscale.scale or (1.0,) * ndim
        outer_translate = multiscale.translation or (0.0,) * ndim
        levels = []
        for index, dataset in enumerate(multiscale.datasets):
            path = paths[index]
            where = f"{full}: multiscales dataset {dataset.path!r}"
            node = _node(opened[index], missing=f"{where} is missing")
            if not isinstance(node, zarr.Array):
                raise MetadataError(f"{where} is a group, not an array")
            check_safe(self.full(path), node)
            if labels and np.dtype(node.dtype).kind not in "iu":
                # The NGFF labels spec requires integers, and so does napari's Labels layer.
                raise UnsupportedDataError(
                    f"{where}: a label image needs an integer dtype, not {np.dtype(node.dtype)}"
                )
            shape = tuple(int(s) for s in node.shape)
            if len(shape) != ndim:
                raise MetadataError(
                    f"{where} has {len(shape)} dimensions (shape {shape}) "
                    f"but the image has {ndim} axes"
                )
            scale, translate = dataset.scale, dataset.translation or (0.0,) * ndim
            # The multiscale's transforms apply after each dataset's own.
            levels.append(
                LevelSpec(
                    path=path,
                    shape=shape,
                    scale=tuple(o * s for o, s in zip(outer_scale, scale, strict=True)),
                    translate=tuple(
                        o * t + ot
                        for o, t, ot in zip(outer_scale, translate, outer_translate, strict=True)
                    ),
                    _array=node if self.keep_arrays else None,
                )
            )
        return _drawable(tuple(levels), full)

    def _labels(
        self, image: zarr.Group, version: NgffVersion, opened: _Opened
    ) -> tuple[ImageSpec, ...]:
        """The label images listed by the image's ``labels`` group (`opened`; none if absent)."""
        path = _join(image.path, "labels")
        full = self.full(path)
        if isinstance(opened, StoreNotFoundError | NotAZarrStoreError):
            return ()
        group = _node(opened)
        if not isinstance(group, zarr.Group):
            raise MetadataError(f"{full}: an OME-Zarr image's 'labels' must be a group")
        document = group.attrs.asdict()
        if version == "0.4":
            names = parse_labels(document, version, full).labels
        else:
            ome = document.get("ome")
            declared = ome.get("version") if isinstance(ome, dict) else None
            if (
                isinstance(ome, dict)
                and isinstance(declared, str)
                and dev_base(declared) == version
            ):
                ome = {**ome, "version": version}  # a development version, warned for the image
            if isinstance(ome, dict) and "version" not in ome:
                # ome-zarr-py 0.21 writes {"ome": {"labels": [...]}} without the version the
                # spec asks for; the image the group belongs to has it.
                ome = {**ome, "version": version}
            names = parse_labels(ome, version, full).labels
        labels: list[ImageSpec] = []
        label_paths = [_join(path, name) for name in names]
        for name, label_path, opened_label in zip(
            names, label_paths, self.open_all(label_paths), strict=True
        ):
            where = f"{full}: label {name!r}"
            node = _node(opened_label, missing=f"{where} is missing")
            ome = None
            if isinstance(node, zarr.Group):
                ome = _ome_document(node, self.full(label_path))
            if ome is None or ome[0] != version or not isinstance(node, zarr.Group):
                raise MetadataError(f"{where} is not an OME-Zarr {version} image group")
            labels.extend(self.ome_image(node, *ome, label=name))
        return tuple(labels)


type _Opened = zarr.Array[Any] | zarr.Group | LazyZarrError


def _node(opened: _Opened, *, missing: str | None = None) -> zarr.Array[Any] | zarr.Group:
    """The node `open_all` opened, or its error raised.

    With `missing`, a node that is not there is a `MetadataError` saying so:
    the metadata names a node the store lacks.
    """
    if missing is not None and isinstance(opened, StoreNotFoundError | NotAZarrStoreError):
        raise MetadataError(f"{missing}: {opened}") from opened
    if isinstance(opened, LazyZarrError):
        raise opened
    return opened


# -- OME metadata -----------------------------------------------------------


def _ome_document(group: zarr.Group, full: str) -> tuple[NgffVersion, dict[str, Any]] | None:
    """``(version, OME attributes)`` of an OME-Zarr group, else None.

    Only routes on the declared version; `core.ngff` validates the rest. Zarr v3
    groups keep OME metadata under ``ome`` (0.5), Zarr v2 groups at the top of
    ``.zattrs`` (0.4, whose version sits in each multiscale, or in none).
    """
    attributes = group.attrs.asdict()
    if group.metadata.zarr_format == 3:
        document = attributes.get("ome")
        if not isinstance(document, dict):
            return None
        version = document.get("version")
    else:
        multiscales = attributes.get("multiscales")
        if multiscales is None:
            return None
        document = attributes
        first = multiscales[0] if isinstance(multiscales, list) and multiscales else None
        version = first.get("version", "0.4") if isinstance(first, dict) else "0.4"
    zarr_format = group.metadata.zarr_format
    expected: NgffVersion = "0.5" if zarr_format == 3 else "0.4"
    base = dev_base(version) if isinstance(version, str) else None
    if isinstance(version, str) and base in _SUPPORTED_VERSIONS:
        # A draft of the next spec over a supported base (SpatialData: "0.5-dev-spatialdata").
        warnings.warn(
            MetadataWarning(
                f"{full}: OME-Zarr version {version!r} is a development version: "
                f"read as OME-Zarr {base}"
            ),
            stacklevel=3,
        )
        document = as_base_version(document, version, base)
        version = base
    # A version that is not a string is left to `parse_image` to reject.
    if isinstance(version, str) and version not in _SUPPORTED_VERSIONS:
        raise UnsupportedDataError(
            f"{full}: OME-Zarr version {version} is not supported "
            f"(supported: {', '.join(_SUPPORTED_VERSIONS)})"
        )
    if isinstance(version, str) and version != expected:
        raise MetadataError(
            f"{full}: OME-Zarr {version} metadata in a Zarr v{zarr_format} group "
            f"(OME-Zarr {expected} goes with Zarr v{zarr_format})"
        )
    return expected, document


# -- plain zarr -------------------------------------------------------------


def _plain_image(array: zarr.Array[Any], name: str, *, keep: bool) -> ImageSpec:
    """A single-level image of an array without OME metadata: unit scale, no offset.

    With `keep`, the level keeps `array` for `open_level_sources`.
    """
    shape = tuple(int(s) for s in array.shape)
    ndim = len(shape)
    # Zarr v3 arrays may name their dimensions; v2 arrays only by the `_ARRAY_DIMENSIONS`
    # attribute xarray (and tifffile, kerchunk) write.
    dimension_names: Sequence[str | None] = getattr(array.metadata, "dimension_names", None) or (
        (None,) * ndim
    )
    named = array.attrs.get("_ARRAY_DIMENSIONS") if array.metadata.zarr_format == 2 else None
    if isinstance(named, list) and len(named) == ndim and all(isinstance(n, str) for n in named):
        dimension_names = named
    axis_names = tuple(
        axis if isinstance(axis, str) and axis else f"dim_{i}"
        for i, axis in enumerate(dimension_names)
    )
    return ImageSpec(
        name=name,
        kind="image",
        levels=(
            LevelSpec(
                array.path, shape, (1.0,) * ndim, (0.0,) * ndim, _array=array if keep else None
            ),
        ),
        axis_names=axis_names,
        axis_units=(None,) * ndim,
    )


def _join(parent: str, child: str) -> str:
    return f"{parent}/{child.strip('/')}" if parent else child.strip("/")


# A store's own suffixes, not part of the name it shows as (as napari names a file's layer
# after its stem): longest first, so "cells.ome.zarr" is "cells", not "cells.ome".
_STORE_SUFFIXES: Final = (".ome.zarr.zip", ".zarr.zip", ".ome.zarr", ".zarr", ".ozx")


def store_name(location: str) -> str:
    """The name a store's root shows as in napari: its basename without the store suffix.

    Examples
    --------
    >>> store_name("/data/cells.ome.zarr"), store_name("https://host/a/raw.zarr/")
    ('cells', 'raw')
    >>> store_name("/data/plate.zarr.zip"), store_name("/data/volume")
    ('plate', 'volume')
    """
    if is_url(location):
        base = location.rstrip("/").rsplit("/", 1)[-1]
    else:
        base = os.path.basename(os.path.abspath(location))
    lowered = base.lower()
    for suffix in _STORE_SUFFIXES:
        if lowered.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base


# -- reference and stack files (core/sources/manifest.py, core/formats/stack.py) -------


def open_source(location: str | os.PathLike[str], *, path: str = "") -> ChunkSource:
    """The chunk source of an array `describe_store` listed (a level's `path` in `location`).

    A zarr array; an array described by a kerchunk reference file; or, for a
    stack file, the composite source it describes (`path` is then unused).
    """
    location = os.fspath(location)
    kind = reference_file_kind(location)
    if kind == "stack":
        return open_stack(location)
    if kind == "kerchunk":
        return ManifestSource(location, path=path)
    return open_zarr_source(location, path=path)


def open_level_sources(location: str | os.PathLike[str], spec: ImageSpec) -> list[ChunkSource]:
    """The chunk sources of `spec`'s levels (as `describe_store` gave them), finest first.

    A level whose array `describe_store` opened (any zarr store but a zipped
    one) is read through that array: nothing is fetched again, so a remote
    store's metadata documents are each fetched once from describing to
    reading. The other levels (zipped stores, kerchunk references) are opened
    by `open_source`, several at once.

    Raises
    ------
    LazyZarrError
        As `open_source`, naming the level's path.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/plain.zarr"
    >>> _ = zarr.create_array(path, shape=(64, 48), chunks=(32, 32), dtype="u2")
    >>> (image,) = describe_store(path)
    >>> (source,) = open_level_sources(path, image)
    >>> source.shape, source.grid[1].size
    ((64, 48), 32)
    """
    location = os.fspath(location)
    # The user's decode backend (settings file or NAPARI_LAZY_ZARR_BACKEND); "auto" is
    # zarr-python through our bounded reads (`core.backends`).
    backend = choose_backend(backend_from_settings(), location)

    def one(level: LevelSpec) -> ChunkSource:
        if level._array is None:
            return open_source(location, path=level.path)
        full = f"{location.rstrip('/')}/{level.path}" if level.path else location
        if backend != "zarr":
            return open_backend_source(location, path=level.path, backend=backend)
        return ZarrChunkSource(level._array, location=full)

    levels = spec.levels
    if len(levels) <= 1 or all(level._array is not None for level in levels):
        return [one(level) for level in levels]  # nothing to fetch: no threads
    with ThreadPoolExecutor(
        min(len(levels), _OPEN_CONCURRENCY), thread_name_prefix="lazy-zarr-open"
    ) as pool:
        return list(pool.map(one, levels))


def _stack_image(location: str) -> ImageSpec:
    """The one image a stack file describes: its composite, at unit scale."""
    stack = read_stack_file(location)
    shape = stack.open().shape
    ndim = len(shape)
    names = stack.axis_names or tuple(f"dim_{i}" for i in range(ndim))
    if len(names) != ndim:
        raise MetadataError(
            f"{location}: 'axis_names' has {len(names)} names for the stack's {ndim} axes"
        )
    return ImageSpec(
        name=stack.name or os.path.basename(location)[: -len(STACK_SUFFIX)],
        kind="image",
        levels=(LevelSpec("", shape, (1.0,) * ndim, (0.0,) * ndim),),
        axis_names=names,
        axis_units=(None,) * ndim,
    )


def _transform_problem(levels: Sequence[LevelSpec]) -> str | None:
    """What makes `levels`' composed transforms undrawable, or None.

    Examples
    --------
    >>> level = LevelSpec("0", (64, 64), (0.5, 0.5), (0.0, 0.0))
    >>> _transform_problem([level]) is None
    True
    >>> _transform_problem([LevelSpec("0", (64, 64), (1e308, 1e308), (0.0, 0.0))])
    "level '0': scale 1e+308 outside [1e-15, 1e+15]"
    """
    low, high = _SCALE_BOUNDS
    for level in levels:
        where = f"level {level.path!r}"
        for value in level.scale:
            if not low <= value <= high:  # NaN too
                return f"{where}: scale {value:g} outside [{low:g}, {high:g}]"
        for value in level.translate:
            if not abs(value) <= _MAX_TRANSLATION:
                return f"{where}: translation {value:g} beyond +-{_MAX_TRANSLATION:g}"
        if max(level.scale, default=1.0) > _MAX_SCALE_RATIO * min(level.scale, default=1.0):
            return (
                f"{where}: scales {list(level.scale)} differ more than "
                f"{_MAX_SCALE_RATIO:g}-fold between axes"
            )
    finest = levels[0].scale if levels else ()
    for level in levels[1:]:
        for fine, coarse in zip(finest, level.scale, strict=True):
            if coarse > _MAX_SCALE_RATIO * fine:
                return (
                    f"level {level.path!r}: scale {coarse:g} is more than "
                    f"{_MAX_SCALE_RATIO:g} times the finest level's {fine:g}"
                )
    return None


def _drawable(levels: tuple[LevelSpec, ...], full: str) -> tuple[LevelSpec, ...]:
    """`levels`, or, when their transforms are undrawable, the identity transform (warned).

    The identity: the finest level at unit scale and no offset, every other
    level at the ratio of the finest level's shape to its own.
    """
    problem = _transform_problem(levels)
    if problem is None:
        return levels
    warnings.warn(
        TransformWarning(
            f"{full}: the OME coordinate transforms cannot be drawn ({problem}); "
            "opened in pixel units (scale 1, no translation) instead"
        ),
        stacklevel=4,
    )
    finest = levels[0].shape
    return tuple(
        replace(
            level,
            scale=tuple(f / n if n else 1.0 for f, n in zip(finest, level.shape, strict=True)),
            translate=(0.0,) * len(level.shape),
        )
        for level in levels
    )
