"""RFC-5 coordinate transformations (OME-Zarr 0.6) as point maps, and the graph they form.

`parse_transform` turns one ``coordinateTransformations`` entry into its
forward map and, where one exists in closed form or is declared (a
``bijection``'s ``inverse``), its backward map: `PointMap`s of matrices
(`Linear`: identity, scale, translation, mapAxis, projectAxis, affine,
rotation, byDimension and sequences of them compose into one matrix) and
vector fields (`FieldStep`: displacements, coordinates). Parameters are
inline or in a zarr array (``path``), read through the caller's
`Resolver`. Every number must be finite as a float: ``1e400`` or ``10**400``
is a `MetadataError` naming the place, never an ``OverflowError``.

`TransformGraph` holds the coordinate systems (nodes, ``(group path,
name)``) and transformations (edges) of an image or a scene, and `route`
finds the shortest chain between two systems: its forward map (placement)
and the backward map rendering needs, each edge followed backwards by its
exact or declared inverse, or, for a field without one, by `FieldStep`'s
fixed-point inverse (`Route.approximated` names them).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.sources.warp import FieldStep, Linear, PointMap, VectorField

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "TRANSFORM_TYPES",
    "Edge",
    "Resolver",
    "Route",
    "SystemRef",
    "TransformGraph",
    "UnshowableTransform",
    "compose",
    "exact_inverse",
    "linear_part",
    "matrix_of",
    "parse_transform",
]

type SystemRef = tuple[str, str]
"""A coordinate system: the path of the group declaring it (``""``: the root), its name."""

TRANSFORM_TYPES: Final = (
    "identity", "scale", "translation", "mapAxis", "projectAxis", "affine", "rotation",
    "sequence", "byDimension", "bijection", "displacements", "coordinates",
)  # fmt: skip
_MAX_MATRIX: Final = 6  # rows or columns of a matrix parameter (5 axes + 1)


class UnshowableTransform(Exception):
    """A transformation this reader parses but cannot apply (the message says why)."""


class Resolver(Protocol):
    """What parsing needs from the store: parameter arrays and vector fields by path."""

    def parameters(self, path: str) -> np.ndarray[Any, Any]:
        """The (small) array at `path`, read whole."""
        ...

    def field(self, path: str, kind: str, interpolation: str) -> VectorField:
        """The vector field (a multiscale group) at `path`."""
        ...


# -- point maps ---------------------------------------------------------------------


def _homogeneous(matrix: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    rows, cols = matrix.shape
    out = np.zeros((rows + 1, cols))
    out[:rows] = matrix
    out[rows, cols - 1] = 1.0
    return out


def compose(first: PointMap, then: PointMap) -> PointMap:
    """`first`, then `then`; adjacent matrices multiplied into one.

    Examples
    --------
    >>> a = PointMap((Linear(np.array([[2.0, 1.0]])),))
    >>> b = PointMap((Linear(np.array([[3.0, 0.0]])),))
    >>> compose(a, b).steps[0].matrix
    array([[6., 3.]])
    """
    steps: list[Any] = list(first.steps)
    for step in then.steps:
        if steps and isinstance(step, Linear) and isinstance(steps[-1], Linear):
            merged = _homogeneous(step.matrix) @ _homogeneous(steps[-1].matrix)
            steps[-1] = Linear(merged[:-1])
        else:
            steps.append(step)
    return PointMap(tuple(steps))


def matrix_of(mapping: PointMap, ndim: int) -> np.ndarray[Any, Any] | None:
    """The one matrix ((M) x (`ndim` + 1)) `mapping` is, or None when it holds a field."""
    matrix = np.eye(ndim, ndim + 1)
    for step in mapping.steps:
        if not isinstance(step, Linear):
            return None
        matrix = (_homogeneous(step.matrix) @ _homogeneous(matrix))[:-1]
    return matrix


def linear_part(mapping: PointMap, ndim: int) -> np.ndarray[Any, Any] | None:
    """The matrix of `mapping` with its fields left out (an image's place before warping)."""
    return matrix_of(PointMap(tuple(s for s in mapping.steps if isinstance(s, Linear))), ndim)


def exact_inverse(mapping: PointMap, ndim: int) -> PointMap | None:
    """The closed-form inverse of an all-matrix `mapping` (square, invertible), else None."""
    matrix = matrix_of(mapping, ndim)
    if matrix is None or matrix.shape[0] != ndim:
        return None
    full = _homogeneous(matrix)
    if abs(np.linalg.det(full)) < 1e-300:
        return None
    return PointMap((Linear(np.linalg.inv(full)[:-1]),))


def _approximate_inverse(mapping: PointMap) -> PointMap | None:
    """`mapping` backwards, fields followed by fixed-point iteration (None: a matrix is
    singular)."""
    steps: list[Any] = []
    for step in reversed(mapping.steps):
        if isinstance(step, FieldStep):
            steps.append(FieldStep(step.field, inverted=not step.inverted, level=step.level))
            continue
        if step.matrix.shape[0] != step.matrix.shape[1] - 1:
            return None
        full = _homogeneous(step.matrix)
        if abs(np.linalg.det(full)) < 1e-300:
            return None
        steps.append(Linear(np.linalg.inv(full)[:-1]))
    return PointMap(tuple(steps))


# -- parsing -------------------------------------------------------------------------


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetadataError(f"{where}: must be a number, got {value!r:.60}")
    try:
        number = float(value)
    except OverflowError:
        raise MetadataError(
            f"{where}: the number {str(value)[:20]}... does not fit a double (overflow)"
        ) from None
    if not math.isfinite(number):
        raise MetadataError(f"{where}: must be finite, got {number}")
    return number


def _vector(value: Any, where: str) -> np.ndarray[Any, Any]:
    if not isinstance(value, list):
        raise MetadataError(f"{where}: must be a list of numbers, got {value!r:.60}")
    return np.array([_number(v, f"{where}.{i}") for i, v in enumerate(value)], dtype=np.float64)


def _matrix(value: Any, where: str) -> np.ndarray[Any, Any]:
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise MetadataError(f"{where}: must be a list of rows of numbers, got {value!r:.60}")
    if len(value) > _MAX_MATRIX or any(len(r) != len(value[0]) for r in value):
        raise MetadataError(f"{where}: rows of unequal length, or more than {_MAX_MATRIX}")
    return np.array([_vector(r, f"{where}.{i}") for i, r in enumerate(value)])


def _stored(resolver: Resolver, path: Any, where: str, ndim: int) -> np.ndarray[Any, Any]:
    if not isinstance(path, str) or not path:
        raise MetadataError(f"{where}: 'path' must name an array, got {path!r:.60}")
    array = np.asarray(resolver.parameters(path), dtype=np.float64)
    if array.ndim != ndim or array.size > _MAX_MATRIX * _MAX_MATRIX:
        raise MetadataError(
            f"{where}: the parameters at {path!r} have shape {array.shape}, "
            f"expected {ndim} dimension(s) of at most {_MAX_MATRIX} values"
        )
    if not np.all(np.isfinite(array)):
        raise MetadataError(f"{where}: the parameters at {path!r} are not all finite")
    return array


def _sized(n: int | None, length: int, where: str, what: str) -> int:
    if n is not None and n != length:
        raise MetadataError(f"{where}: {what} has {length} values for {n} axes")
    return length


def _check(matrix: np.ndarray[Any, Any], where: str) -> np.ndarray[Any, Any]:
    if not np.all(np.isfinite(matrix)):
        raise MetadataError(f"{where}: the transformation overflows (its matrix is not finite)")
    return matrix


def parse_transform(
    document: Any,
    *,
    n_in: int | None,
    n_out: int | None,
    where: str,
    resolver: Resolver,
) -> tuple[PointMap, PointMap | None, int, int]:
    """One transformation: ``(forward, backward or None, input dims, output dims)``.

    `n_in` and `n_out` are its coordinate systems' dimensions when known.

    Raises
    ------
    MetadataError
        Malformed parameters (the message names `where`), overflowing numbers.
    UnshowableTransform
        A well-formed transformation that cannot be applied (a field inside a
        ``byDimension``, dimensions that do not follow).

    Examples
    --------
    >>> forward, backward, n, m = parse_transform(
    ...     {"type": "rotation", "rotation": [[0, -1], [1, 0]]},
    ...     n_in=2, n_out=2, where="t", resolver=None)
    >>> forward.steps[0].matrix.tolist(), backward.steps[0].matrix.tolist() == [[0, 1, 0], [-1, 0, 0]]
    ([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0]], True)
    >>> parse_transform({"type": "scale", "scale": [10**400, 1]}, n_in=2, n_out=2,
    ...                 where="image.zarr: t", resolver=None)
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.MetadataError: image.zarr: t.scale.0: the number 10000000000000000000... does not fit a double (overflow)
    """  # noqa: E501
    if not isinstance(document, dict):
        raise MetadataError(f"{where}: must be an object, got {document!r:.60}")
    kind = document.get("type")
    if kind not in TRANSFORM_TYPES:
        raise UnshowableTransform(f"{where}: unknown transformation type {kind!r:.40}")
    n = n_in if n_in is not None else n_out
    if kind in ("bijection", "sequence", "byDimension"):
        return _parse_wrapper(
            document, kind, n_in=n_in, n_out=n_out, where=where, resolver=resolver
        )
    if kind in ("displacements", "coordinates"):
        interpolation = document.get("interpolation", "linear")
        if interpolation == "bspline-cubic":
            interpolation = "cubic"
        if interpolation not in ("nearest", "linear", "cubic"):
            raise UnshowableTransform(
                f"{where}: {kind} interpolation {interpolation!r:.30} is not one of "
                "nearest, linear, cubic"
            )
        path = document.get("path")
        if not isinstance(path, str) or not path:
            raise MetadataError(f"{where}: a {kind} transformation needs a 'path'")
        field = resolver.field(path, kind, interpolation)
        dims = field.ndim
        _sized(n_in, dims, where, f"the field at {path!r}")
        forward = PointMap((FieldStep(field),))
        return forward, None, dims, dims if kind == "displacements" else (n_out or dims)
    if kind == "identity":
        if n is None:
            raise UnshowableTransform(f"{where}: an identity between systems of unknown size")
        matrix = np.eye(n, n + 1)
    elif kind in ("scale", "translation"):
        values = (
            _vector(document[kind], f"{where}.{kind}")
            if kind in document
            else _stored(resolver, document.get("path"), where, 1)
        )
        size = _sized(n, len(values), where, f"the {kind}")
        if kind == "scale":
            if np.any(values == 0):
                raise MetadataError(f"{where}: a scale of 0 ({values.tolist()}) is not invertible")
            matrix = np.hstack([np.diag(values), np.zeros((size, 1))])
        else:
            matrix = np.hstack([np.eye(size), values[:, None]])
    elif kind == "mapAxis":
        order = document.get("mapAxis")
        if (
            not isinstance(order, list)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in order)
            or sorted(order) != list(range(len(order)))
        ):
            raise MetadataError(f"{where}: mapAxis must be a permutation, got {order!r:.60}")
        size = _sized(n, len(order), where, "mapAxis")
        matrix = np.zeros((size, size + 1))
        for out_axis, in_axis in enumerate(order):
            matrix[out_axis, in_axis] = 1.0
    elif kind == "projectAxis":
        matrix = _project_axis(document, n_in, n_out, where)
    else:  # affine, rotation
        values = (
            _matrix(document[kind], f"{where}.{kind}")
            if kind in document
            else _stored(resolver, document.get("path"), where, 2)
        )
        if kind == "rotation":
            size = _sized(n, values.shape[0], where, "the rotation")
            if values.shape != (size, size):
                raise MetadataError(f"{where}: a rotation must be square, got {values.shape}")
            matrix = np.hstack([values, np.zeros((size, 1))])
        else:
            if n_in is not None and values.shape[1] != n_in + 1:
                raise MetadataError(
                    f"{where}: an affine over {n_in} axes needs {n_in + 1} columns, "
                    f"got {values.shape[1]}"
                )
            if n_out is not None and values.shape[0] != n_out:
                raise MetadataError(f"{where}: {values.shape[0]} rows for {n_out} output axes")
            matrix = values
    matrix = _check(matrix, where)
    forward = PointMap((Linear(matrix),))
    dims_in = matrix.shape[1] - 1
    return forward, exact_inverse(forward, dims_in), dims_in, matrix.shape[0]


def _project_axis(
    document: dict[str, Any], n_in: int | None, n_out: int | None, where: str
) -> np.ndarray[Any, Any]:
    dropped = document.get("droppedInputs") or []
    created = document.get("createdOutputs") or []
    for what, values in (("droppedInputs", dropped), ("createdOutputs", created)):
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
        ):
            raise MetadataError(f"{where}: {what} must be axis indices, got {values!r:.60}")
    if n_in is None:
        if n_out is None:
            raise UnshowableTransform(f"{where}: a projectAxis between systems of unknown size")
        n_in = n_out + len(dropped) - len(created)
    size_out = n_in - len(dropped) + len(created)
    _sized(n_out, size_out, where, "the projected output")
    kept = [a for a in range(n_in) if a not in dropped]
    matrix = np.zeros((size_out, n_in + 1))
    source = iter(kept)
    for out_axis in range(size_out):
        if out_axis in created:
            continue
        matrix[out_axis, next(source)] = 1.0
    return matrix


def _parse_wrapper(
    document: dict[str, Any],
    kind: str,
    *,
    n_in: int | None,
    n_out: int | None,
    where: str,
    resolver: Resolver,
) -> tuple[PointMap, PointMap | None, int, int]:
    if kind == "bijection":
        if "forward" not in document or "inverse" not in document:
            raise MetadataError(f"{where}: a bijection needs 'forward' and 'inverse'")
        forward, _, dims_in, dims_out = parse_transform(
            document["forward"],
            n_in=n_in,
            n_out=n_out,
            where=f"{where}.forward",
            resolver=resolver,
        )
        inverse, _, _, _ = parse_transform(
            document["inverse"],
            n_in=dims_out,
            n_out=dims_in,
            where=f"{where}.inverse",
            resolver=resolver,
        )
        return forward, inverse, dims_in, dims_out
    items = document.get("transformations")
    if not isinstance(items, list) or not items:
        raise MetadataError(f"{where}: 'transformations' must be a non-empty list")
    if kind == "sequence":
        forward = PointMap(())
        backward: PointMap | None = PointMap(())
        dims: int | None = n_in
        first_in: int | None = None
        for index, item in enumerate(items):
            last = index == len(items) - 1
            part, back, item_in, item_out = parse_transform(
                item,
                n_in=dims,
                n_out=n_out if last else None,
                where=f"{where}.transformations.{index}",
                resolver=resolver,
            )
            first_in = item_in if first_in is None else first_in
            forward = compose(forward, part)
            backward = None if backward is None or back is None else compose(back, backward)
            dims = item_out
        assert first_in is not None
        assert dims is not None
        return forward, backward, first_in, dims
    # byDimension: each item maps some input axes to some output axes.
    if n_in is None or n_out is None:
        raise UnshowableTransform(f"{where}: a byDimension between systems of unknown size")
    matrix = np.zeros((n_out, n_in + 1))
    covered: set[int] = set()
    for index, item in enumerate(items):
        here = f"{where}.transformations.{index}"
        if not isinstance(item, dict):
            raise MetadataError(f"{here}: must be an object")
        axes_in, axes_out = item.get("inputAxes"), item.get("outputAxes")
        for what, axes, bound in (("inputAxes", axes_in, n_in), ("outputAxes", axes_out, n_out)):
            if not isinstance(axes, list) or not all(
                isinstance(a, int) and not isinstance(a, bool) and 0 <= a < bound for a in axes
            ):
                raise MetadataError(f"{here}.{what}: must be axis indices below {bound}")
        assert isinstance(axes_in, list)
        assert isinstance(axes_out, list)
        part, _, _, _ = parse_transform(
            item.get("transformation"),
            n_in=len(axes_in),
            n_out=len(axes_out),
            where=f"{here}.transformation",
            resolver=resolver,
        )
        sub = matrix_of(part, len(axes_in))
        if sub is None:
            raise UnshowableTransform(f"{here}: a field inside a byDimension cannot be applied")
        if covered & set(axes_out):
            raise MetadataError(f"{here}: output axes {axes_out} are produced twice")
        covered |= set(axes_out)
        for row, out_axis in enumerate(axes_out):
            for col, in_axis in enumerate(axes_in):
                matrix[out_axis, in_axis] = sub[row, col]
            matrix[out_axis, -1] = sub[row, -1]
    if covered != set(range(n_out)):
        raise MetadataError(
            f"{where}: byDimension leaves output axes {sorted(set(range(n_out)) - covered)} unset"
        )
    forward = PointMap((Linear(_check(matrix, where)),))
    return forward, exact_inverse(forward, n_in), n_in, n_out


# -- the graph -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Edge:
    """One transformation between two coordinate systems.

    Attributes
    ----------
    source, target
        Its ``input`` and ``output`` systems.
    forward
        Points of `source` to `target`.
    backward
        Points of `target` to `source`, exact or declared; None when only an
        approximation exists (a field's fixed-point inverse).
    name
        The transformation as the user knows it: its ``name``, else its type
        and where it is declared.
    """

    source: SystemRef
    target: SystemRef
    forward: PointMap
    backward: PointMap | None
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Route:
    """The chain of transformations from one system to another.

    Attributes
    ----------
    forward
        Points of the start system to the end system (placement).
    backward
        Points of the end system back to the start (rendering), or None
        when a step has no inverse at all (a singular matrix, a projection).
    approximated
        The fields followed backwards by fixed-point iteration.
    edges
        The transformations used, in order.
    """

    forward: PointMap
    backward: PointMap | None
    approximated: tuple[str, ...]
    edges: tuple[Edge, ...]


class TransformGraph:
    """Coordinate systems joined by transformations; `route` finds the way between two.

    Examples
    --------
    >>> scale = PointMap((Linear(np.array([[2.0, 0.0]])),))
    >>> graph = TransformGraph([Edge(("a", "x"), ("", "world"), scale, None, "s")])
    >>> route = graph.route(("", "world"), ("a", "x"), ndim=1)
    >>> route.forward.steps[0].matrix
    array([[0.5, 0. ]])
    """

    def __init__(self, edges: Iterable[Edge]) -> None:
        self.edges = tuple(edges)
        self._next: dict[SystemRef, list[tuple[Edge, bool]]] = {}
        for edge in self.edges:
            self._next.setdefault(edge.source, []).append((edge, True))
            self._next.setdefault(edge.target, []).append((edge, False))

    @property
    def systems(self) -> tuple[SystemRef, ...]:
        """Every system an edge touches, in the order first met."""
        return tuple(self._next)

    def route(self, start: SystemRef, end: SystemRef, *, ndim: int) -> Route | None:
        """The shortest chain from `start` to `end` (None: not connected, or a step is not
        invertible where the chain needs it)."""
        if start == end:
            return Route(PointMap(()), PointMap(()), (), ())
        previous: dict[SystemRef, tuple[SystemRef, Edge, bool]] = {}
        queue = deque([start])
        seen = {start}
        while queue:
            here = queue.popleft()
            for edge, along in self._next.get(here, ()):
                there = edge.target if along else edge.source
                if there in seen:
                    continue
                seen.add(there)
                previous[there] = (here, edge, along)
                queue.append(there)
        if end not in previous:
            return None
        steps: list[tuple[Edge, bool]] = []
        node = end
        while node != start:
            node, edge, along = previous[node]
            steps.append((edge, along))
        steps.reverse()
        forward = PointMap(())
        backward: PointMap | None = PointMap(())
        approximated: list[str] = []
        for edge, along in steps:
            ahead = edge.forward if along else edge.backward
            back = edge.backward if along else edge.forward
            if ahead is None:  # a field walked backwards for placement: its inverse
                ahead = _approximate_inverse(edge.forward)
                approximated.append(edge.name)
            if back is None:
                back = _approximate_inverse(edge.forward)
                if back is not None and any(isinstance(s, FieldStep) for s in edge.forward.steps):
                    approximated.append(edge.name)
            if ahead is None:
                return None
            forward = compose(forward, ahead)
            backward = None if backward is None or back is None else compose(back, backward)
        return Route(
            forward, backward, tuple(dict.fromkeys(approximated)), tuple(e for e, _ in steps)
        )


def systems_of(document: Any, where: str) -> list[tuple[str, tuple[dict[str, Any], ...]]]:
    """``(name, axes)`` of a ``coordinateSystems`` list (MetadataError when malformed)."""
    if not isinstance(document, list):
        raise MetadataError(f"{where}: coordinateSystems must be a list, got {document!r:.60}")
    found: list[tuple[str, tuple[dict[str, Any], ...]]] = []
    for index, entry in enumerate(document):
        here = f"{where}.{index}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise MetadataError(f"{here}: a coordinate system needs a 'name' string")
        axes = entry.get("axes")
        if not isinstance(axes, list) or not all(
            isinstance(a, dict) and isinstance(a.get("name"), str) for a in axes
        ):
            raise MetadataError(f"{here}.axes: must be a list of axes with names")
        if entry["name"] in (name for name, _ in found):
            raise MetadataError(f"{here}: coordinate system {entry['name']!r} declared twice")
        found.append((entry["name"], tuple(axes)))
    return found


def reference(value: Any, context: str, where: str) -> tuple[str | None, str]:
    """A transformation's ``input`` or ``output``: ``(group path or None, name)``.

    The path is relative to `context` (the declaring group); a bare string is a name.
    """
    if isinstance(value, str):
        return None, value
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise MetadataError(f"{where}: must name a coordinate system, got {value!r:.60}")
    path = value.get("path")
    if path is None:
        return None, value["name"]
    if not isinstance(path, str) or any(p in ("", ".", "..") for p in path.strip("/").split("/")):
        raise MetadataError(
            f"{where}.path: must be a relative path below the group, got {path!r:.60}"
        )
    joined = f"{context}/{path.strip('/')}" if context else path.strip("/")
    return joined, value["name"]


def describe_types(document: Any) -> str:
    """A transformation's type, with its parts' for wrappers (``sequence[scale, affine]``)."""
    if not isinstance(document, dict):
        return "?"
    kind = str(document.get("type"))
    items = document.get("transformations")
    if kind in ("sequence", "byDimension") and isinstance(items, list):
        inner = [
            describe_types(
                i.get("transformation") if kind == "byDimension" and isinstance(i, dict) else i
            )
            for i in items
        ]
        return f"{kind}[{', '.join(inner)}]"
    if kind == "bijection":
        parts = (describe_types(document.get(side)) for side in ("forward", "inverse"))
        return f"bijection[{', '.join(parts)}]"
    return kind


def axes_count(systems: Sequence[tuple[str, tuple[dict[str, Any], ...]]], name: str) -> int | None:
    """The number of axes of the system called `name` among `systems` (None if absent)."""
    return next((len(axes) for n, axes in systems if n == name), None)
