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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.formats.transforms import compose, linear_part
from napari_lazy_zarr.core.sources.warp import FieldStep, Linear, PointMap

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.formats.transforms import SystemRef, TransformGraph

__all__ = ["Placement", "TransformWarning", "place", "system_label"]


class TransformWarning(UserWarning):
    """An OME image's transforms cannot be drawn as written; the message names the
    transformation (or values) and what is shown instead."""


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
