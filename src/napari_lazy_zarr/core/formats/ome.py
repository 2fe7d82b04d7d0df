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
from dataclasses import dataclass, replace
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
from napari_lazy_zarr.core.executors import run_concurrently
from napari_lazy_zarr.core.formats.levels import TransformWarning, drawable_levels
from napari_lazy_zarr.core.formats.ngff import parse_image, parse_labels
from napari_lazy_zarr.core.formats.ome_dev import dev_base
from napari_lazy_zarr.core.formats.ome_v06 import V06_VERSION, is_v06, split_v06
from napari_lazy_zarr.core.formats.placement import place_specs
from napari_lazy_zarr.core.formats.rendering import (
    ChannelDisplay,
    label_colors,
    label_properties,
    warn_ignored,
)
from napari_lazy_zarr.core.formats.scene import scene_specs, transformation_edges
from napari_lazy_zarr.core.formats.spatialdata import (
    IMAGE_GROUPS,
    OTHER_GROUPS,
    element_name,
    is_spatialdata,
    skipped_notice,
)
from napari_lazy_zarr.core.formats.specs import CoordinateFrame, ImageSpec, LevelSpec
from napari_lazy_zarr.core.formats.stack import (
    STACK_SUFFIX,
    open_stack,
    read_stack_file,
    reference_file_kind,
)
from napari_lazy_zarr.core.formats.versions import (
    ZARR_V2_VERSIONS,
    OmeVersion,
    ome_document,
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

    from napari_lazy_zarr.core.formats.ngff import Multiscale
    from napari_lazy_zarr.core.formats.transforms import Edge, SystemRef
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
MAX_LEVELS: Final = 64  # pyramid levels: 2**64 pixels would need no more
# Nodes opened at once (levels, label images). Each open is one round trip of metadata
# over HTTP (`prefetch_metadata`); 16 keep a pyramid's levels (and its labels group) in one.
_OPEN_CONCURRENCY: Final = 16

# A plain group's subgroups searched for arrays: this deep, and this many groups in all
# (each is listed: a metadata read per member).
_MAX_NESTING: Final = 8
_MAX_NESTED_GROUPS: Final = 256
_BIOFORMATS2RAW: Final = "bioformats2raw.layout"  # the attribute of the layout's top group


class PlateStoreError(NotAZarrStoreError):
    """`describe_store` was given an OME-Zarr HCS plate (see `core.plate`).

    Carries the plate group's attributes and Zarr format, so describing the
    plate next fetches nothing twice.
    """

    attributes: dict[str, Any] | None = None
    zarr_format: Literal[2, 3] | None = None


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
    path_or_url: str | os.PathLike[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    coordinate_system: str | tuple[str, str] | None = None,
) -> tuple[ImageSpec, ...]:
    """The images and label images in a zarr store, from its metadata alone.

    - A single array at the root: one single-level image named after the store.
    - An OME-Zarr image (NGFF 0.1 to 0.4 on Zarr v2, 0.5 and 0.6 on Zarr v3): its levels from
      ``multiscales[0].datasets`` with their composed scale and translation,
      axes, channel axis and ``omero`` channels; then one ``"labels"`` image per
      entry of its ``labels`` group.
    - A SpatialData root (`core.formats.spatialdata`): its ``images/*``, then its
      ``labels/*``, named after their elements; points, shapes and tables skipped.
    - Any other group: one single-level image per array directly in it, and the
      OME-Zarr images among its direct subgroups, in name order.

    - An OME-Zarr 0.6 image is shown in its intrinsic coordinate system, a 0.6
      scene's images (and their labels) in the scene's first coordinate system
      (else the first image's), or in `coordinate_system` (a name, ``"<image
      path>: <name>"``, or ``(image path, name)``): see `core.formats.placement`.

    An OME development version of 0.4, 0.5 or 0.6 (``0.5-dev-spatialdata``, ``0.6.dev4``) is read
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
        An array's dtype cannot be shown as an image, or an OME-Zarr version other
        than 0.1 to 0.6 (or their development versions).

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
    try:
        return _describe(location, metadata, coordinate_system)
    except (ArithmeticError, RecursionError) as error:
        # Left in reading the metadata (a number past a float's range, nesting past the
        # stack): never a raw exception out of napari's reader.
        raise MetadataError(
            f"{location}: its metadata cannot be read: {type(error).__name__}: {error}"
        ) from error


def _describe(
    location: str,
    metadata: Mapping[str, Any] | None,
    coordinate_system: str | tuple[str, str] | None,
) -> tuple[ImageSpec, ...]:
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
            coordinate_system=coordinate_system,
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
    coordinate_system: str | tuple[str, str] | None = None  # OME-Zarr 0.6: where to show

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
        return run_concurrently(
            attempt, paths, concurrency=_OPEN_CONCURRENCY, name="lazy-zarr-open"
        )

    def group(self, group: zarr.Group) -> tuple[ImageSpec, ...]:
        """An OME-Zarr image group's images, else those of a plain group."""
        ome = ome_document(group, self.full(group.path))
        if ome is not None and "multiscales" in ome[1]:
            return self.placed(self.ome_image(group, *ome), scene=None)
        if ome is not None and ome[0] == V06_VERSION and "scene" in ome[1]:
            return self.scene(group, ome[1]["scene"])
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
                    ome = ome_document(node, self.full(node.path))
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
        """A group's arrays and OME-Zarr images, those of its plain subgroups too.

        Arrays that are not images (strings, records ...) are skipped with one
        `MetadataWarning` naming them; only a group holding nothing else is refused.
        """
        full = self.full(group.path)
        unsupported: list[UnsupportedDataError] = []
        images = self._group_images(group, unsupported, budget=[_MAX_NESTED_GROUPS], depth=0)
        if images:
            if unsupported:
                warnings.warn(
                    MetadataWarning(
                        f"{full}: arrays that are not images, not shown: "
                        + "; ".join(str(error) for error in unsupported[:4])
                        + ("; ..." if len(unsupported) > 4 else "")
                    ),
                    stacklevel=5,
                )
            return tuple(images)
        if unsupported:
            raise unsupported[0]
        # Over plain HTTP a group's members can only be listed from consolidated metadata.
        hint = " (or its members cannot be listed over this URL)" if is_url(full) else ""
        raise NotAZarrStoreError(
            f"{full}: zarr group with no arrays (nor OME-Zarr images in its subgroups){hint}"
        )

    def _group_images(
        self,
        group: zarr.Group,
        unsupported: list[UnsupportedDataError],
        *,
        budget: list[int],
        depth: int,
    ) -> list[ImageSpec]:
        """The images in `group` and, below `_MAX_NESTING` levels and within `budget`
        groups in all, in its plain subgroups (dask's ``to_zarr(component="grp/arr")``)."""
        images: list[ImageSpec] = []
        # bioformats2raw's "OME" group holds the OME-XML (METADATA.ome.xml, not zarr) and
        # the series list: metadata of the images beside it, not images.
        skipped = "OME" if _BIOFORMATS2RAW in group.attrs else None
        for name, node in self.members(group):
            if name == skipped:
                continue
            if isinstance(node, zarr.Array):
                try:
                    check_safe(self.full(node.path), node)
                except UnsupportedDataError as error:
                    # E.g. a table of strings beside the images: not a layer, not fatal.
                    unsupported.append(error)
                    continue
                images.append(_plain_image(node, node.path, keep=self.keep_arrays))
                continue
            ome = ome_document(node, self.full(node.path))
            if ome is not None and "multiscales" in ome[1]:
                images.extend(self.placed(self.ome_image(node, *ome), scene=None))
            elif ome is None and depth < _MAX_NESTING and budget[0] > 0:
                budget[0] -= 1
                images.extend(
                    self._group_images(node, unsupported, budget=budget, depth=depth + 1)
                )
        return images

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
        version: OmeVersion,
        document: dict[str, Any],
        *,
        label: str = "",
    ) -> tuple[ImageSpec, ...]:
        """An OME-Zarr image (or, with `label`, label image) and then its label images.

        An OME-Zarr 0.6 image's specs carry its coordinate systems and
        transformations; `group` (or `scene`) places them.
        """
        full = self.full(group.path)
        v06 = split_v06(document, full) if version == V06_VERSION else None
        attributes = parse_image(
            v06.document if v06 is not None else document,
            "0.5" if v06 is not None or version == V06_VERSION else version,
            full,
        )
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
            # Named after the image too, as by napari-ome-zarr: each channel, and an image without
            # a channel axis whose omero label is its own ("coins: Channel 0", not "cells: cells").
            title = element or multiscale.name or None
            titled = title if channel_axis is not None else None
            channels = ChannelDisplay.from_omero(
                omero, n_channels, layer_name, full, titled=titled
            )
            own = omero.channels[0].label if channels.names else None  # None: omero ignored
            if channel_axis is None and title and own not in (None, title):
                layer_name = f"{title}: {own}"
        colors = properties = None
        if kind == "labels":
            colors = label_colors(document.get("image-label"), full)
            properties = label_properties(document.get("image-label"), full)
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
            label_properties=properties,
            version=version,
        )
        if v06 is not None:
            image = replace(
                image,
                frame=CoordinateFrame(
                    intrinsic=(group.path, v06.intrinsic),
                    systems=tuple(((group.path, name), len(axes)) for name, axes in v06.systems),
                    edges=self.edges(
                        v06.transforms,
                        group.path,
                        {(group.path, name): len(axes) for name, axes in v06.systems},
                        full,
                    ),
                ),
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
        levels: list[LevelSpec] = []
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
            if not scale:  # before 0.4: no transforms; a level's scale is its shape's ratio
                finest = levels[0].shape if levels else shape
                scale = tuple(f / n if n else 1.0 for f, n in zip(finest, shape, strict=True))
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
        return drawable_levels(tuple(levels), full)

    # -- OME-Zarr 0.6: coordinate systems, transformations, scenes

    def scene(self, group: zarr.Group, document: Any) -> tuple[ImageSpec, ...]:
        """A scene's images and labels, placed (`core.formats.scene`)."""
        return scene_specs(self, group, document)

    def edges(
        self,
        transforms: Sequence[Any],
        context: str,
        dims: Mapping[SystemRef, int],
        full: str,
    ) -> tuple[Edge, ...]:
        """The transformations a group declares, as graph edges (`core.formats.scene`)."""
        return transformation_edges(self, transforms, context, dims, full)

    def placed(
        self,
        specs: Sequence[ImageSpec],
        *,
        scene: tuple[tuple[Edge, ...], tuple[SystemRef, ...]] | None,
    ) -> tuple[ImageSpec, ...]:
        """`specs` placed in the chosen coordinate system (`placement.place_specs`)."""
        return place_specs(
            specs,
            scene=scene,
            coordinate_system=self.coordinate_system,
            location=self.location,
            full=self.full,
        )

    def _labels(
        self, image: zarr.Group, version: OmeVersion, opened: _Opened
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
        if version in ZARR_V2_VERSIONS:
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
            if isinstance(ome, dict) and version == V06_VERSION and is_v06(ome.get("version")):
                ome = {**ome, "version": "0.5"}  # a labels group reads the same in 0.6
            names = parse_labels(ome, "0.5" if version == V06_VERSION else version, full).labels
        labels: list[ImageSpec] = []
        label_paths = [_join(path, name) for name in names]
        for name, label_path, opened_label in zip(
            names, label_paths, self.open_all(label_paths), strict=True
        ):
            where = f"{full}: label {name!r}"
            node = _node(opened_label, missing=f"{where} is missing")
            ome = None
            if isinstance(node, zarr.Group):
                ome = ome_document(node, self.full(label_path))
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
    return run_concurrently(one, levels, concurrency=_OPEN_CONCURRENCY, name="lazy-zarr-open")


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
