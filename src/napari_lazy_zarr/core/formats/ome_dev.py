"""OME-Zarr development versions (``0.5-dev``, ``0.5-dev-spatialdata``) read as their base.

A writer that follows a draft of the next specification labels its metadata
``<base>-dev[-<suffix>]``: SpatialData 0.8 writes ``0.5-dev-spatialdata``. Its
multiscales, datasets and axes are the base version's; what the drafts add is
coordinate transformations with named ``input`` and ``output`` coordinate
systems, ``identity`` and ``sequence`` transforms. `as_base_version` rewrites
such a document into the base version: the version fields, and the
transforms of one output coordinate system (``"global"`` when there are
several, else the first listed) composed into one scale and translation.
Anything it cannot compose (an affine, a rotation) is left as it is, for the
base version's validation to refuse by name. The caller warns
(`MetadataWarning`) that a development version was read as its base.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Final

__all__ = ["DEFAULT_COORDINATE_SYSTEM", "as_base_version", "dev_base"]

DEFAULT_COORDINATE_SYSTEM: Final = "global"
"""The output coordinate system read when a dev document lists several (SpatialData's default)."""

_DEV_VERSION: Final = re.compile(r"(\d+\.\d+)-dev(?:-.*)?", re.DOTALL)
_PLAIN: Final = (["scale"], ["scale", "translation"])  # what the base versions allow


def dev_base(version: str) -> str | None:
    """The base version of a development version (``"0.5-dev-x"`` → ``"0.5"``), else None.

    Examples
    --------
    >>> dev_base("0.5-dev-spatialdata"), dev_base("0.4-dev"), dev_base("0.5"), dev_base("0.5dev")
    ('0.5', '0.4', None, None)
    """
    match = _DEV_VERSION.fullmatch(version)
    return None if match is None else match.group(1)


def as_base_version(document: dict[str, Any], version: str, base: str) -> dict[str, Any]:
    """A copy of an OME `document` declaring development `version`, as its `base` version.

    Every ``version`` field that says `version` says `base`; each multiscale's and
    dataset's ``coordinateTransformations`` that use the drafts' forms are
    composed into ``[scale]`` or ``[scale, translation]`` (see the module).

    Examples
    --------
    >>> system = {"output": {"name": "global"}}
    >>> document = {"version": "0.5-dev-spatialdata", "multiscales": [{
    ...     "coordinateTransformations": [{"type": "sequence", **system, "transformations": [
    ...         {"type": "scale", "scale": [1.0, 0.5, 0.5]},
    ...         {"type": "translation", "translation": [0.0, 3.0, 4.0]}]}]}]}
    >>> normal = as_base_version(document, "0.5-dev-spatialdata", "0.5")
    >>> normal["version"], normal["multiscales"][0]["coordinateTransformations"]
    ('0.5', [{'type': 'scale', 'scale': [1.0, 0.5, 0.5]}, {'type': 'translation', 'translation': [0.0, 3.0, 4.0]}])
    """  # noqa: E501
    normal = copy.deepcopy(document)
    if normal.get("version") == version:
        normal["version"] = base
    multiscales = normal.get("multiscales")
    for multiscale in multiscales if isinstance(multiscales, list) else ():
        if not isinstance(multiscale, dict):
            continue
        if multiscale.get("version") == version:
            multiscale["version"] = base
        _compose_in(multiscale)
        datasets = multiscale.get("datasets")
        for dataset in datasets if isinstance(datasets, list) else ():
            if isinstance(dataset, dict):
                _compose_in(dataset)
    return normal


def _compose_in(holder: dict[str, Any]) -> None:
    """Replace `holder`'s draft-form ``coordinateTransformations`` by their composition."""
    transforms = holder.get("coordinateTransformations")
    if not isinstance(transforms, list) or not all(isinstance(t, dict) for t in transforms):
        return
    systems = [_output(t) for t in transforms if _output(t) is not None]
    if [t.get("type") for t in transforms] in _PLAIN and len(set(systems)) <= 1:
        return  # the base version's form (extra input/output keys are harmless)
    if systems:
        chosen = DEFAULT_COORDINATE_SYSTEM if DEFAULT_COORDINATE_SYSTEM in systems else systems[0]
        transforms = [t for t in transforms if _output(t) in (chosen, None)]
    composed = _compose(transforms)
    if composed is None:
        return  # an affine, a rotation...: the validator names it
    scale, translation = composed
    if not scale:  # identities only
        holder.pop("coordinateTransformations")
        return
    result: list[dict[str, Any]] = [{"type": "scale", "scale": scale}]
    if any(t != 0 for t in translation):
        result.append({"type": "translation", "translation": translation})
    holder["coordinateTransformations"] = result


def _output(transform: dict[str, Any]) -> str | None:
    output = transform.get("output")
    if isinstance(output, dict) and isinstance(output.get("name"), str):
        return str(output["name"])
    return output if isinstance(output, str) else None


def _compose(transforms: list[Any]) -> tuple[list[float], list[float]] | None:
    """``(scale, translation)`` of `transforms` applied in order ([] and [] for identities),
    or None when one of them is not a scale, translation, identity or sequence of those."""
    scale: list[float] = []
    translation: list[float] = []
    for transform in transforms:
        kind = transform.get("type") if isinstance(transform, dict) else None
        if kind == "identity":
            continue
        if kind == "sequence":
            inner = transform.get("transformations")
            part = _compose(inner) if isinstance(inner, list) else None
            if part is None:
                return None
            steps = [("scale", part[0]), ("translation", part[1])] if part[0] else []
        elif kind in ("scale", "translation") and _is_vector(transform.get(kind)):
            steps = [(kind, list(transform[kind]))]
        else:
            return None
        for step, vector in steps:
            if not scale:
                scale, translation = [1.0] * len(vector), [0.0] * len(vector)
            if len(vector) != len(scale):
                return None
            if step == "scale":  # s * (S x + T) = (s S) x + s T
                scale = [s * v for s, v in zip(scale, vector, strict=True)]
                translation = [t * v for t, v in zip(translation, vector, strict=True)]
            else:
                translation = [t + v for t, v in zip(translation, vector, strict=True)]
    return scale, translation


def _is_vector(value: Any) -> bool:
    """A list of numbers, each finite as a double: what can be composed without overflow
    (``10**400`` is left for the validator to name, not an ``OverflowError`` here)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and all(_finite(v) for v in value)
    )


def _finite(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False
