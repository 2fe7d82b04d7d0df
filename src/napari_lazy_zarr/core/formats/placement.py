"""Where an OME-Zarr 0.6 layer is shown: a route through the transformation graph, made
napari's ``scale``, ``translate`` and ``affine`` — and a lazy warp where a field is on it.

`Placement` is what a layer needs to sit in a chosen coordinate system: a
matrix (intrinsic system → shown system, over the store's axes) applied after
the levels' own scale and translation, and, when the route holds a vector
field, one `PointMap` per level for `core.sources.warp.WarpSource` (output
pixel → input pixel; the output grid is the image's own grid placed by the
route's matrices, fields left out). `place` computes it from a
`TransformGraph`; what it cannot show (no route, a projection to another
number of axes, a matrix that mixes the channel axis with the others, a
field without an inverse in the direction needed) is one `TransformWarning`
naming the transformation and what is shown instead: the image in its own
(intrinsic) coordinate system.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.formats.levels import TransformWarning
from napari_lazy_zarr.core.formats.transforms import TransformGraph, compose, linear_part
from napari_lazy_zarr.core.sources.warp import FieldStep, Linear, PointMap

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from napari_lazy_zarr.core.formats.specs import ImageSpec
    from napari_lazy_zarr.core.formats.transforms import Edge, SystemRef

__all__ = ["Placement", "TransformWarning", "place", "place_specs", "system_label"]


@dataclass(frozen=True, slots=True, eq=False)
class Placement:
    """A layer's place in the shown coordinate system.

    Attributes
    ----------
    matrix
        Intrinsic → shown, ``(N+1) x (N+1)`` over the store's axes (homogeneous),
        applied after each level's scale and translation.
    warps
        Per level, output pixel → input pixel (None: no field on the route).
    system
        The shown system, as `system_label` names it.
    approximated
        Fields followed backwards by fixed-point iteration.
    """

    matrix: np.ndarray[Any, Any]
    warps: tuple[PointMap, ...] | None
    system: str
    approximated: tuple[str, ...] = ()


def system_label(ref: SystemRef) -> str:
    """How a system is named to the user: its name, with the image's path when it has one.

    Examples
    --------
    >>> system_label(("", "world")), system_label(("cells", "physical"))
    ('world', 'cells: physical')
    """
    path, name = ref
    return f"{path}: {name}" if path else name


def place(
    graph: TransformGraph,
    start: SystemRef,
    end: SystemRef,
    *,
    levels: Sequence[tuple[tuple[float, ...], tuple[float, ...]]],
    channel_axis: int | None,
    where: str,
) -> Placement | None:
    """`start` (an image's intrinsic system) placed in `end`, or None (warned) to stay in
    `start`. `levels`: each level's scale and translation (pixel → intrinsic)."""
    ndim = len(levels[0][0])
    shown = system_label(end)
    instead = f"shown in its own coordinate system {start[1]!r} instead of {shown!r}"
    route = graph.route(start, end, ndim=ndim)
    if route is None:
        _warn(f"{where}: no chain of invertible transformations leads to {shown!r}; {instead}")
        return None
    names = ", ".join(edge.name for edge in route.edges)
    matrix = linear_part(route.forward, ndim)
    if matrix is not None and channel_axis is not None:
        matrix = _channel_dropped(matrix, channel_axis, ndim)
    if matrix is None or matrix.shape != (ndim, ndim + 1):
        rows = None if matrix is None else matrix.shape[0]
        _warn(
            f"{where}: the transformation {names} maps {ndim} axes to {rows} "
            f"(a projection napari cannot show on these layers); {instead}"
        )
        return None
    if not np.all(np.isfinite(matrix)):
        raise MetadataError(f"{where}: the transformation {names} overflows (not finite)")
    if channel_axis is not None and not _keeps_axis(matrix, channel_axis):
        _warn(
            f"{where}: the transformation {names} mixes the channel axis with the others "
            f"(each channel is a layer of its own); {instead}"
        )
        return None
    full = np.vstack([matrix, np.eye(1, ndim + 1, ndim)])
    if not route.forward.fields:
        return Placement(full, None, shown)
    if route.backward is None:
        _warn(f"{where}: the transformation {names} has no inverse to render with; {instead}")
        return None
    warps = []
    for index, (scale, translation) in enumerate(levels):
        pixel = np.hstack([np.diag(scale), np.asarray(translation)[:, None]])
        to_pixel = np.hstack(
            [np.diag(1 / np.asarray(scale)), (-np.asarray(translation) / scale)[:, None]]
        )
        steps = tuple(
            FieldStep(s.field, s.inverted, level=index) if isinstance(s, FieldStep) else s
            for s in route.backward.steps
        )
        first = PointMap((Linear((full @ np.vstack([pixel, np.eye(1, ndim + 1, ndim)]))[:-1]),))
        warps.append(compose(compose(first, PointMap(steps)), PointMap((Linear(to_pixel),))))
    return Placement(full, tuple(warps), shown, route.approximated)


def _channel_dropped(
    matrix: np.ndarray[Any, Any], channel_axis: int, ndim: int
) -> np.ndarray[Any, Any]:
    """`matrix` with the channel axis put back when a ``projectAxis`` dropped it (CYX to YX):
    each channel is a layer of its own already, so napari shows that projection."""
    if matrix.shape != (ndim - 1, ndim + 1) or np.any(matrix[:, channel_axis]):
        return matrix
    row = np.zeros((1, ndim + 1))
    row[0, channel_axis] = 1.0
    return np.vstack([matrix[:channel_axis], row, matrix[channel_axis:]])


def _keeps_axis(matrix: np.ndarray[Any, Any], axis: int) -> bool:
    """Whether `matrix` maps `axis` to itself, unscaled, and no other axis onto it."""
    row = matrix[axis].copy()
    column = matrix[:, axis].copy()
    return bool(
        row[axis] == 1
        and column[axis] == 1
        and not np.any(np.delete(row, axis))
        and not np.any(np.delete(column, axis))
    )


def _warn(message: str) -> None:
    warnings.warn(TransformWarning(message), stacklevel=4)


def place_specs(
    specs: Sequence[ImageSpec],
    *,
    scene: tuple[tuple[Edge, ...], tuple[SystemRef, ...]] | None,
    coordinate_system: str | tuple[str, str] | None,
    location: str,
    full: Callable[[str], str],
) -> tuple[ImageSpec, ...]:
    """`specs` (images and their labels; a scene's with its `scene` edges and systems)
    placed in `coordinate_system` (by default the scene's first, else the first image's own).

    Labels follow their image: a label image without a transformation of its own shares
    its image's intrinsic system (on the axes it shares with it). `full` names a group
    path for messages.

    Raises
    ------
    MetadataError
        `coordinate_system` is none of the store's (the message lists them), or a
        transformation overflows.
    """
    if not specs or all(spec.frame is None for spec in specs):
        return tuple(specs)
    edges = list(scene[0] if scene is not None else ())
    systems: list[SystemRef] = list(scene[1] if scene is not None else ())
    for spec in specs:
        if spec.frame is None:
            continue
        edges.extend(spec.frame.edges)
        if spec.kind == "image":  # a label image's systems follow its image's
            systems.extend(ref for ref, _ in spec.frame.systems)
    graph = TransformGraph(edges)
    choices = tuple(dict.fromkeys(systems))
    first = next(spec.frame.intrinsic for spec in specs if spec.frame is not None)
    target = _target(choices, first, coordinate_system, location, is_scene=scene is not None)
    labels = tuple(system_label(ref) for ref in choices)
    placed: list[ImageSpec] = []
    shown: dict[SystemRef, tuple[ImageSpec, Placement | None]] = {}
    for spec in specs:
        if spec.frame is None:
            placed.append(spec)
            continue
        intrinsic = spec.frame.intrinsic
        where = full(intrinsic[0])
        levels = [(level.scale, level.translate) for level in spec.levels]
        owner = _owner(spec, shown) if spec.kind == "labels" else None
        start = intrinsic
        if owner is not None and intrinsic not in graph.systems:
            image, image_placement = owner
            if spec.axis_names != image.axis_names:
                # Labels without the image's channel (or time) axis: the image's matrix on
                # the axes they share.
                placement = _sub_placement(image, image_placement, spec, where)
                placed.append(_with_placement(spec, placement, start, labels))
                continue
            assert image.frame is not None
            start = image.frame.intrinsic
        placement = place(
            graph, start, target, levels=levels, channel_axis=spec.channel_axis, where=where
        )
        shown[intrinsic] = (spec, placement)
        placed.append(_with_placement(spec, placement, start, labels))
    return tuple(placed)


def _target(
    choices: Sequence[SystemRef],
    first: SystemRef,
    wanted: str | tuple[str, str] | None,
    location: str,
    *,
    is_scene: bool,
) -> SystemRef:
    """The system to show: `wanted`, else the scene's first, else the first image's own."""
    if wanted is not None:
        for ref in choices:
            unique = sum(r[1] == ref[1] for r in choices) == 1
            if wanted in (ref, system_label(ref)) or (wanted == ref[1] and unique):
                return ref
        raise MetadataError(
            f"{location}: no coordinate system {wanted!r}; the store declares "
            + ", ".join(repr(system_label(r)) for r in choices)
        )
    if is_scene and choices and not choices[0][0]:
        return choices[0]
    return first


def _with_placement(
    spec: ImageSpec, placement: Placement | None, intrinsic: SystemRef, choices: tuple[str, ...]
) -> ImageSpec:
    """`spec` placed: a matrix that only scales and shifts folds into its levels' scale and
    translation; another one is its `ImageSpec.affine`."""
    if placement is None:
        return replace(spec, coordinate_system=system_label(intrinsic), coordinate_systems=choices)
    matrix = placement.matrix
    ndim = matrix.shape[0] - 1
    linear = matrix[:ndim, :ndim]
    shift = matrix[:ndim, ndim]
    affine = None
    levels = spec.levels
    if np.count_nonzero(linear - np.diag(np.diag(linear))) == 0 and np.all(np.diag(linear) > 0):
        factors = np.diag(linear)
        levels = tuple(
            replace(
                level,
                scale=tuple(float(f * s) for f, s in zip(factors, level.scale, strict=True)),
                translate=tuple(
                    float(f * t + o)
                    for f, t, o in zip(factors, level.translate, shift, strict=True)
                ),
            )
            for level in levels
        )
    else:
        affine = tuple(tuple(float(v) for v in row) for row in matrix)
    return replace(
        spec,
        levels=levels,
        affine=affine,
        warps=placement.warps,
        coordinate_system=placement.system,
        coordinate_systems=choices,
    )


def _owner(
    label: ImageSpec, shown: Mapping[SystemRef, tuple[ImageSpec, Placement | None]]
) -> tuple[ImageSpec, Placement | None] | None:
    """The image a label image belongs to (``<image>/labels/<name>``), as placed."""
    assert label.frame is not None
    path = label.frame.intrinsic[0]
    for ref, found in shown.items():
        prefix = f"{ref[0]}/labels/" if ref[0] else "labels/"
        if found[0].kind == "image" and path.startswith(prefix):
            return found
    return None


def _sub_placement(
    image: ImageSpec, placement: Placement | None, label: ImageSpec, where: str
) -> Placement | None:
    """`image`'s placement on the axes `label` shares with it (by name), without its warps."""
    if placement is None:
        return None
    names = list(image.axis_names)
    if not all(name in names for name in label.axis_names):
        return None
    index = [names.index(name) for name in label.axis_names]
    matrix = placement.matrix
    rows = [*index, len(names)]
    others = [a for a in range(len(names)) if a not in index]
    if np.any(matrix[np.ix_(index, others)]):
        warnings.warn(
            TransformWarning(
                f"{where}: its image's transformation mixes axes the label image lacks; "
                "shown in its own coordinate system"
            ),
            stacklevel=5,
        )
        return None
    if placement.warps is not None:
        warnings.warn(
            TransformWarning(
                f"{where}: the label image has other axes than its warped image: shown "
                "placed as the image, without the field's warp"
            ),
            stacklevel=5,
        )
    return Placement(matrix[np.ix_(rows, rows)], None, placement.system)
