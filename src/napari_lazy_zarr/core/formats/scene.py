"""OME-Zarr 0.6 scenes, and the transformations of a group as graph edges.

`scene_specs` reads a scene group (``ome.scene``): the images its transformations
reference (each with its labels), placed by `core.formats.placement.place_specs`
in the chosen coordinate system. `transformation_edges` parses the
``coordinateTransformations`` a group declares (a scene's, a multiscale's) into
`core.formats.transforms.Edge`s, their parameters and vector fields read through a
`StoreResolver`; one that cannot be applied is one `TransformWarning` and is left out.
The store is walked through the `StoreWalk` protocol (`core.formats.ome`'s walk).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np
import zarr

from napari_lazy_zarr.core.errors import (
    LazyZarrError,
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.formats.ngff import parse_image
from napari_lazy_zarr.core.formats.ome_v06 import V06_VERSION, split_v06
from napari_lazy_zarr.core.formats.placement import TransformWarning
from napari_lazy_zarr.core.formats.transforms import (
    Edge,
    UnshowableTransform,
    describe_types,
    parse_transform,
    reference,
    systems_of,
)
from napari_lazy_zarr.core.formats.versions import OmeVersion, ome_document
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource
from napari_lazy_zarr.core.storage.vetting import check_safe

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from napari_lazy_zarr.core.formats.specs import ImageSpec
    from napari_lazy_zarr.core.formats.transforms import SystemRef
    from napari_lazy_zarr.core.sources.warp import VectorField

__all__ = ["StoreResolver", "StoreWalk", "join_path", "scene_specs", "transformation_edges"]


class StoreWalk(Protocol):
    """What reading a scene needs of the walk through a store."""

    def full(self, path: str) -> str:
        """`path` inside the store as a user-facing location."""
        ...

    def open(self, path: str) -> zarr.Array[Any] | zarr.Group:
        """The node at `path` (vetted)."""
        ...

    def open_all(self, paths: Sequence[str]) -> list[zarr.Array[Any] | zarr.Group | LazyZarrError]:
        """The nodes at `paths`, each its node or its error."""
        ...

    def ome_image(
        self, group: zarr.Group, version: OmeVersion, document: dict[str, Any], *, label: str = ""
    ) -> tuple[ImageSpec, ...]:
        """An OME-Zarr image and its label images, unplaced."""
        ...

    def placed(
        self,
        specs: Sequence[ImageSpec],
        *,
        scene: tuple[tuple[Edge, ...], tuple[SystemRef, ...]] | None,
    ) -> tuple[ImageSpec, ...]:
        """`specs` placed in the chosen coordinate system."""
        ...


def join_path(parent: str, child: str) -> str:
    """`child` below the group path `parent` (``""``: the root).

    Examples
    --------
    >>> join_path("", "labels"), join_path("a/b", "/c/")
    ('labels', 'a/b/c')
    """
    return f"{parent}/{child.strip('/')}" if parent else child.strip("/")


def _present(
    opened: zarr.Array[Any] | zarr.Group | LazyZarrError, missing: str
) -> zarr.Array[Any] | zarr.Group:
    """A node `open_all` opened; one the store lacks is a `MetadataError` saying `missing`."""
    if isinstance(opened, StoreNotFoundError | NotAZarrStoreError):
        raise MetadataError(f"{missing}: {opened}") from opened
    if isinstance(opened, LazyZarrError):
        raise opened
    return opened


def scene_specs(walk: StoreWalk, group: zarr.Group, document: Any) -> tuple[ImageSpec, ...]:
    """A scene's images (and their labels), each placed in the chosen coordinate system."""
    full = walk.full(group.path)
    if not isinstance(document, dict):
        raise MetadataError(f"{full}: ome.scene must be an object, got {document!r:.60}")
    transforms = document.get("coordinateTransformations")
    if not isinstance(transforms, list) or not transforms:
        raise MetadataError(
            f"{full}: ome.scene.coordinateTransformations: must be a non-empty list"
        )
    own = document.get("coordinateSystems")
    systems = systems_of(own, f"{full}: ome.scene.coordinateSystems") if own is not None else []
    paths: list[str] = []
    for index, entry in enumerate(transforms):
        for side in ("input", "output"):
            value = entry.get(side) if isinstance(entry, dict) else None
            path, _ = reference(
                value, group.path, f"{full}: coordinateTransformations.{index}.{side}"
            )
            if path is not None and path not in paths:
                paths.append(path)
    specs: list[ImageSpec] = []
    dims = {(group.path, name): len(axes) for name, axes in systems}
    for path, opened in zip(paths, walk.open_all(paths), strict=True):
        node = _present(opened, f"{full}: the scene's image {path!r} is missing")
        ome = ome_document(node, walk.full(path)) if isinstance(node, zarr.Group) else None
        if ome is None or ome[0] != V06_VERSION or "multiscales" not in ome[1]:
            raise MetadataError(f"{full}: the scene's {path!r} is not an OME-Zarr 0.6 image")
        assert isinstance(node, zarr.Group)
        specs.extend(walk.ome_image(node, *ome))
    dims.update(pair for spec in specs if spec.frame is not None for pair in spec.frame.systems)
    edges = transformation_edges(walk, transforms, group.path, dims, full)
    scene_systems = tuple((group.path, name) for name, _ in systems)
    return walk.placed(specs, scene=(edges, scene_systems))


def transformation_edges(
    walk: StoreWalk,
    transforms: Sequence[Any],
    context: str,
    dims: Mapping[SystemRef, int],
    full: str,
) -> tuple[Edge, ...]:
    """The transformations declared in the group at `context` (an image's or a
    scene's), as graph edges; one that cannot be applied is warned about and left out."""
    edges = []
    resolver = StoreResolver(walk, context)
    for index, document in enumerate(transforms):
        where = f"{full}: coordinateTransformations.{index}"
        if not isinstance(document, dict):
            raise MetadataError(f"{where}: must be an object, got {document!r:.60}")
        ends = []
        for side in ("input", "output"):
            path, name = reference(document.get(side), context, f"{where}.{side}")
            ends.append((context if path is None else path, name))
        named = document.get("name")
        label = (
            named
            if isinstance(named, str)
            else f"{describe_types(document)} {ends[0][1]!r} -> {ends[1][1]!r}"
        )
        here = f"{full}: transformation {label!r}"
        counts = [dims.get(end) for end in ends]
        try:
            forward, backward, _, _ = parse_transform(
                document, n_in=counts[0], n_out=counts[1], where=here, resolver=resolver
            )
        except (UnshowableTransform, UnsupportedDataError, StoreNotFoundError) as error:
            warnings.warn(
                TransformWarning(
                    f"{error}; it is left out: the images it would place are shown "
                    "in their own coordinate system"
                ),
                stacklevel=4,
            )
            continue
        edges.append(Edge(ends[0], ends[1], forward, backward, label))
    return tuple(edges)


_MAX_PARAMETERS: Final = 64  # values of a transformation parameter array (a 6 x 6 matrix at most)


@dataclass(frozen=True, slots=True)
class StoreResolver:
    """Transformation parameters and vector fields of the group at `context` (the
    `core.formats.transforms.Resolver` of a store being walked)."""

    walk: StoreWalk
    context: str

    def parameters(self, path: str) -> np.ndarray[Any, Any]:
        full_path = join_path(self.context, path)
        where = self.walk.full(full_path)
        node = self.walk.open(full_path)
        if not isinstance(node, zarr.Array):
            raise MetadataError(f"{where}: transformation parameters must be an array")
        check_safe(where, node)
        if node.size > _MAX_PARAMETERS or np.dtype(node.dtype).kind not in "iuf":
            raise MetadataError(
                f"{where}: transformation parameters must be at most {_MAX_PARAMETERS} numbers, "
                f"got shape {node.shape} of {node.dtype}"
            )
        return np.asarray(node[...], dtype=np.float64)

    def field(self, path: str, kind: str, interpolation: str) -> VectorField:
        from napari_lazy_zarr.core.sources.warp import VectorField

        full_path = join_path(self.context, path)
        where = self.walk.full(full_path)
        node = self.walk.open(full_path)
        ome = ome_document(node, where) if isinstance(node, zarr.Group) else None
        if ome is None or ome[0] != V06_VERSION or not isinstance(node, zarr.Group):
            raise MetadataError(
                f"{where}: a {kind} field must be an OME-Zarr 0.6 multiscale group"
            )
        split = split_v06(ome[1], where)
        multiscale = parse_image(split.document, "0.5", where).multiscales[0]
        wanted = "displacement" if kind == "displacements" else "coordinate"
        vector = [i for i, axis in enumerate(multiscale.axes) if axis.type == wanted]
        if len(vector) != 1:
            raise MetadataError(f"{where}: a {kind} field needs one axis of type {wanted!r}")
        axis = vector[0]
        paths = [join_path(node.path, d.path) for d in multiscale.datasets]
        sources = []
        for level_path, opened in zip(paths, self.walk.open_all(paths), strict=True):
            array = _present(opened, f"{where}: field level {level_path!r} is missing")
            if not isinstance(array, zarr.Array) or np.dtype(array.dtype).kind not in "iuf":
                raise MetadataError(f"{where}: field level {level_path!r} must be a numeric array")
            check_safe(self.walk.full(level_path), array)
            sources.append(ZarrChunkSource(array, location=self.walk.full(level_path)))
        if len(sources[0].shape) != len(multiscale.axes):
            raise MetadataError(
                f"{where}: the field's arrays do not have its {len(multiscale.axes)} axes"
            )

        def spatial(values: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(v for i, v in enumerate(values) if i != axis)

        return VectorField(
            name=full_path,
            kind=kind,  # type: ignore[arg-type]  # checked by the caller
            levels=tuple(sources),
            scales=tuple(spatial(d.scale) for d in multiscale.datasets),
            translations=tuple(
                spatial(d.translation or (0.0,) * len(d.scale)) for d in multiscale.datasets
            ),
            vector_axis=axis,
            interpolation=interpolation,  # type: ignore[arg-type]
        )
