"""OME-Zarr 0.6 image documents: their coordinate systems, read as 0.5 plus transformations.

In 0.6 (RFC-5) a multiscale declares ``coordinateSystems``; each dataset's
one transformation (``identity``, ``scale``, or a ``sequence`` of a scale and
a translation) maps its array to the *intrinsic* system (the one every
dataset names as ``output``), whose axes are the image's; the multiscale's own
``coordinateTransformations`` join the intrinsic system to its other systems
(and to its label images'). `split_v06` returns the document in the 0.5 form
`core.formats.ngff` validates (axes, plain scale and translation per dataset)
beside the systems and the multiscale's transformations, which
`core.formats.placement` turns into places. Drafts (``0.6.dev4``,
``0.6rc0``) are read as 0.6; the caller warns.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.formats.transforms import systems_of

__all__ = ["V06_VERSION", "V06Image", "is_v06", "split_v06"]

V06_VERSION: Final = "0.6"


def is_v06(version: Any) -> bool:
    """Whether `version` is 0.6 or one of its drafts (``0.6.dev4``, ``0.6rc0``).

    Examples
    --------
    >>> is_v06("0.6"), is_v06("0.6.dev4"), is_v06("0.6rc0"), is_v06("0.60"), is_v06("0.5")
    (True, True, True, False, False)
    """
    if not isinstance(version, str) or not version.startswith("0.6"):
        return False
    rest = version[3:]
    return rest == "" or rest.startswith((".dev", "rc", "-dev", "dev", "a", "b"))


@dataclass(frozen=True, slots=True)
class V06Image:
    """A 0.6 image document split for reading.

    Attributes
    ----------
    document
        The OME attributes in 0.5 form (for `core.formats.ngff.parse_image`).
    systems
        The first multiscale's coordinate systems, ``(name, axes)`` in order.
    intrinsic
        The name of the intrinsic system (the datasets' ``output``).
    transforms
        The first multiscale's own ``coordinateTransformations`` (as written).
    """

    document: dict[str, Any]
    systems: tuple[tuple[str, tuple[dict[str, Any], ...]], ...]
    intrinsic: str
    transforms: tuple[Any, ...]


def split_v06(document: dict[str, Any], where: str) -> V06Image:
    """`document` (an image's ``ome`` object, version 0.6) split into its 0.5 form and the rest.

    Raises
    ------
    MetadataError
        No multiscales or coordinate systems, datasets naming different or
        undeclared intrinsic systems, or a dataset transformation 0.6 does not
        allow there.

    Examples
    --------
    >>> axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    >>> level = {"path": "0", "coordinateTransformations": [{"type": "sequence",
    ...     "input": {"path": "0"}, "output": {"name": "physical"}, "transformations": [
    ...     {"type": "scale", "scale": [2, 2]}, {"type": "translation", "translation": [1, 0]}]}]}
    >>> split = split_v06({"version": "0.6", "multiscales": [{
    ...     "coordinateSystems": [{"name": "physical", "axes": axes}], "datasets": [level]}]}, "a")
    >>> split.intrinsic
    'physical'
    >>> level0 = split.document["multiscales"][0]["datasets"][0]
    >>> [t["type"] for t in level0["coordinateTransformations"]]
    ['scale', 'translation']
    """
    normal = copy.deepcopy(document)
    normal["version"] = "0.5"
    multiscales = normal.get("multiscales")
    if (
        not isinstance(multiscales, list)
        or not multiscales
        or not isinstance(multiscales[0], dict)
    ):
        raise MetadataError(
            f"{where}: invalid OME-Zarr 0.6 image metadata: multiscales: "
            "must be a non-empty list of objects"
        )
    first = multiscales[0]
    systems = tuple(
        systems_of(first.get("coordinateSystems"), f"{where}: multiscales.0.coordinateSystems")
    )
    if not systems:
        raise MetadataError(f"{where}: multiscales.0.coordinateSystems: must list at least one")
    outputs: list[str] = []
    identities: list[dict[str, Any]] = []
    datasets = first.get("datasets")
    for index, dataset in enumerate(datasets if isinstance(datasets, list) else ()):
        if not isinstance(dataset, dict):
            continue
        here = f"{where}: multiscales.0.datasets.{index}.coordinateTransformations"
        transforms = dataset.get("coordinateTransformations")
        if (
            not isinstance(transforms, list)
            or len(transforms) != 1
            or not isinstance(transforms[0], dict)
        ):
            raise MetadataError(f"{here}: must hold exactly one transformation (0.6)")
        (transform,) = transforms
        output = transform.get("output")
        name = output.get("name") if isinstance(output, dict) else output
        if not isinstance(name, str):
            raise MetadataError(f"{here}.0.output: must name the intrinsic coordinate system")
        outputs.append(name)
        dataset["coordinateTransformations"] = _plain(transform, here)
        identities.append(dataset)
    if not outputs:
        raise MetadataError(f"{where}: multiscales.0.datasets: must list at least one dataset")
    if len(set(outputs)) != 1:
        raise MetadataError(
            f"{where}: the datasets map to different coordinate systems {sorted(set(outputs))}: "
            "every level maps to the one intrinsic system"
        )
    intrinsic = outputs[0]
    axes = next((axes for name, axes in systems if name == intrinsic), None)
    if axes is None:
        raise MetadataError(
            f"{where}: the datasets map to coordinate system {intrinsic!r}, which the "
            f"multiscale does not declare (it declares {[n for n, _ in systems]})"
        )
    for dataset in identities:
        if not dataset["coordinateTransformations"]:  # identity: pixels are the intrinsic units
            dataset["coordinateTransformations"] = [{"type": "scale", "scale": [1.0] * len(axes)}]
    for entry in multiscales:
        if isinstance(entry, dict):
            entry.pop("coordinateSystems", None)
            entry.pop("version", None)
    own = first.pop("coordinateTransformations", None)
    first["axes"] = [_axis(a) for a in axes]
    if own is not None and not isinstance(own, list):
        raise MetadataError(f"{where}: multiscales.0.coordinateTransformations: must be a list")
    return V06Image(normal, systems, intrinsic, tuple(own or ()))


def _axis(axis: dict[str, Any]) -> dict[str, Any]:
    """An axis in 0.5 form (0.6 adds ``discrete`` and ``longName``)."""
    return {k: v for k, v in axis.items() if k in ("name", "type", "unit")}


def _plain(transform: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A dataset's 0.6 transformation as the 0.5 list ``[scale(, translation)]``."""
    kind = transform.get("type")
    if kind == "identity":
        return []
    if kind == "scale":
        return [{"type": "scale", "scale": transform.get("scale")}]
    if kind == "sequence":
        inner = transform.get("transformations")
        if (
            isinstance(inner, list)
            and len(inner) == 2
            and all(isinstance(t, dict) for t in inner)
            and [t.get("type") for t in inner] == ["scale", "translation"]
        ):
            return [
                {"type": "scale", "scale": inner[0].get("scale")},
                {"type": "translation", "translation": inner[1].get("translation")},
            ]
    raise MetadataError(
        f"{where}.0: a dataset's transformation must be identity, scale, or a sequence of a "
        f"scale and a translation (0.6), got {kind!r:.40}"
    )
