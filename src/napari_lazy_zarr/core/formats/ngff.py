"""OME-NGFF (OME-Zarr) 0.1 to 0.5 metadata, validated into values: axes, datasets, channels.

`parse_image`, `parse_labels` and `parse_label_colors` read the attribute
documents of an image group, a ``labels`` group and a label image's
``image-label``; they return frozen values or raise `MetadataError` naming the
location and up to four problems (``"multiscales.0.datasets: Field required"``).
Only the standard library is used: the plugin installs into napari's
environment without pinning napari's pydantic (ome-zarr-models 1.7 and 1.8
cap it below 2.13).

The rules are those ome-zarr-models 1.8 enforces on ``ImageAttrs``,
``LabelsAttrs``, ``Omero`` and the ``colors`` of ``image-label``, for what the
reader uses; tests/core/test_ngff.py holds the two to agreement on generated
documents, with ome-zarr-models as the oracle:

- ``multiscales``: a non-empty list; in 0.5 the document's ``version`` is
  ``"0.5"``, in 0.4 each multiscale's ``version`` is ``"0.4"`` or absent.
- ``axes``: 2 to 5, names unique; ``type`` a string or absent; 2 or 3 of type
  ``"space"``, and they come last; at most one ``"time"`` (then first), one
  ``"channel"`` and one of any other type (or none).
- ``datasets``: at least one, each a ``path`` string and
  ``coordinateTransformations`` of one scale, then optionally one translation
  (in that order), each vector as long as there are axes;
  vector scales never decrease from one dataset to the next (finest first).
- a multiscale's own ``coordinateTransformations``: absent, or a scale, then
  optionally a translation, as long as there are axes.
- ``omero.channels``: a list; each channel a ``color`` and a ``window`` with
  ``start`` and ``end``. These rules are checked, but ``omero`` is optional
  rendering metadata: what breaks them never refuses the image. The broken
  parts read as absent (a channel's ``color`` or ``window`` None, or no
  ``omero`` at all) and `Image.ignored` lists the problems, for the reader to
  warn about and fall back to its defaults.
- ``labels``: a list of strings; colours: unique ``label-value`` integers, each
  with ``rgba`` null or four integers 0-255.

Before 0.4 (ome-zarr-py's readers are the rules): 0.1 and 0.2 have no
``axes``, their arrays are 5-D ``tczyx``; 0.3 names its axes (``yx``;
``zyx``, ``cyx`` or ``tyx``; ``tzyx``, ``czyx`` or ``tcyx``; ``tczyx``),
their types implied by the name; datasets are paths only, without
transforms (`Dataset.scale` is empty: a level's scale is then the ratio of
the finest level's shape to its own). OME-Zarr 0.6 documents are read as
0.5 ones by `core.formats.ome_v06` first.

Deliberate differences (each listed in the oracle test too). Stricter, on
what decides pixels and geometry: vector values must be JSON numbers (not
``"0.5"`` nor ``true``, which pydantic coerces), finite, and scales non-zero;
axis names must be strings; label values and RGBA components are JSON
integers (not ``"1"`` or ``true``). In ``omero`` (reported in `Image.ignored`,
never refused): a colour is exactly ``RRGGBB`` or ``#RRGGBB`` (its pattern is
unanchored) and window bounds are JSON numbers. Tolerant, on optional
rendering metadata: a window's ``min`` and ``max`` may be absent or null, and
an invalid ``omero`` never refuses the image (ome-zarr-models refuses it).
Transforms stored in arrays (``path``), which ome-zarr-models accepts, raise
`UnsupportedDataError`: their vectors would have to be read from an array.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard

from napari_lazy_zarr.core.errors import MetadataError, UnsupportedDataError

__all__ = [
    "Axis",
    "Channel",
    "Dataset",
    "Image",
    "LabelColor",
    "Labels",
    "Multiscale",
    "NgffVersion",
    "Omero",
    "Window",
    "parse_image",
    "parse_label_colors",
    "parse_labels",
]

type NgffVersion = Literal["0.1", "0.2", "0.3", "0.4", "0.5"]
type _Loc = tuple[str | int, ...]

_MAX_PROBLEMS: Final = 4  # validation problems quoted in one error message
_AXIS_COUNTS: Final = range(2, 6)
_SPACE_AXIS_COUNTS: Final = (2, 3)
_TRANSFORM_TYPES: Final = ("identity", "scale", "translation")
_LEGACY: Final = ("0.1", "0.2", "0.3")  # no transforms; axes implied (0.1, 0.2) or named (0.3)
_IMPLIED_AXES: Final = "tczyx"
_NAMED_AXES: Final = ("yx", "zyx", "cyx", "tyx", "tzyx", "czyx", "tcyx", "tczyx")
_AXIS_TYPES: Final = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}
_HEX_COLOR: Final = re.compile(r"#?([0-9a-fA-F]{6})")


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis of a multiscale image.

    Attributes
    ----------
    name
        The axis name, unique in its multiscale.
    type
        ``"space"``, ``"time"``, ``"channel"``, another (custom) type, or None.
    unit
        The unit when it is a string (e.g. ``"micrometer"``), else None.
    """

    name: str
    type: str | None
    unit: str | None


@dataclass(frozen=True, slots=True)
class Dataset:
    """One resolution level of a multiscale: an array path and its inline transforms.

    Attributes
    ----------
    path
        The array's path relative to the image group.
    scale
        World units per pixel along each axis (finite, non-zero); empty before
        0.4, whose datasets have no transforms.
    translation
        World position of the first pixel along each axis, or None when not given.
    """

    path: str
    scale: tuple[float, ...]
    translation: tuple[float, ...] | None


@dataclass(frozen=True, slots=True)
class Multiscale:
    """One entry of ``multiscales``: axes, levels finest first, and transforms of them all.

    Attributes
    ----------
    axes
        The axes, in array-dimension order.
    datasets
        The levels, finest first (their vector scales never decrease).
    scale
        The multiscale's own scale, applied after each dataset's, or None.
    translation
        The multiscale's own translation, applied last, or None.
    name
        The ``name`` when it is a string, else None.
    """

    axes: tuple[Axis, ...]
    datasets: tuple[Dataset, ...]
    scale: tuple[float, ...] | None = None
    translation: tuple[float, ...] | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """A channel's display window.

    Attributes
    ----------
    start, end
        The contrast range to show (any JSON numbers, NaN included: whether
        they are usable as contrast limits is the reader's decision).
    min, max
        The range of the data, or None when the metadata leaves them out.
    """

    start: float
    end: float
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class Channel:
    """One ``omero`` channel.

    Attributes
    ----------
    color
        ``#RRGGBB``, upper case, or None when absent or invalid (see `Image.ignored`).
    window
        The display window, or None when absent or invalid.
    label
        The ``label``, as a string, or None when absent.
    active
        The ``active`` flag when it is a boolean, else None.
    """

    color: str | None
    window: Window | None
    label: str | None = None
    active: bool | None = None


@dataclass(frozen=True, slots=True)
class Omero:
    """The ``omero`` rendering metadata of an image.

    Attributes
    ----------
    channels
        One per channel, in order.
    model
        ``rdefs.model`` when it is a string (``"color"``, ``"greyscale"``), else None.
    """

    channels: tuple[Channel, ...]
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Image:
    """The validated OME attributes of an image group.

    Attributes
    ----------
    version
        ``"0.4"`` or ``"0.5"``.
    multiscales
        At least one; readers show the first.
    omero
        The rendering metadata, or None when absent (or null) or unusable (not an
        object, no list of ``channels``).
    ignored
        The problems of the optional ``omero`` block (``"loc: message"``, as in a
        `MetadataError`), whose parts read as absent; empty when it is valid.
    """

    version: NgffVersion
    multiscales: tuple[Multiscale, ...]
    omero: Omero | None = None
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Labels:
    """The OME attributes of an image's ``labels`` group.

    Attributes
    ----------
    labels
        The label images' paths relative to the ``labels`` group.
    """

    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LabelColor:
    """One entry of a label image's ``image-label.colors``.

    Attributes
    ----------
    value
        The label value (pixel value) the colour is for.
    rgba
        Red, green, blue and alpha, 0-255 each, or None when the entry gives null.
    """

    value: int
    rgba: tuple[int, int, int, int] | None


def parse_image(document: Any, version: NgffVersion, where: str) -> Image:
    """The OME attributes of an image group, validated.

    Parameters
    ----------
    document
        For 0.4, the group's ``.zattrs``; for 0.5, the ``ome`` object of its
        ``zarr.json`` attributes.
    version
        The NGFF version the group declares (its Zarr format decides it).
    where
        The group's user-facing location, for error messages.

    Raises
    ------
    MetadataError
        The document breaks the rules (the module docstring lists them); the
        message names `where` and up to four problems by location.
    UnsupportedDataError
        The document is valid but keeps a transform in an array.

    Examples
    --------
    >>> axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    >>> def level(path, factor):
    ...     return {"path": path, "coordinateTransformations": [
    ...         {"type": "scale", "scale": [factor, factor]}]}
    >>> image = parse_image(
    ...     {"version": "0.5",
    ...      "multiscales": [{"axes": axes, "datasets": [level("0", 0.5), level("1", 1)]}]},
    ...     "0.5",
    ...     "image.zarr",
    ... )
    >>> [a.name for a in image.multiscales[0].axes], image.multiscales[0].datasets[1].scale
    (['y', 'x'], (1.0, 1.0))
    >>> parse_image({"version": "0.5", "multiscales": [{"axes": axes}]}, "0.5", "image.zarr")
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.MetadataError: image.zarr: invalid OME-Zarr 0.5 image metadata: multiscales.0.datasets: Field required
    """  # noqa: E501
    check = _Checker()
    image = check.image(document, version)
    check.raise_problems(where, f"{version} image")
    if check.stored_transforms:
        place = check.stored_transforms[0]
        raise UnsupportedDataError(
            f"{where}: {place}: transforms stored in an array are not supported "
            "(only inline scale and translation vectors)"
        )
    assert image is not None  # no problems: every part was valid
    return image


def parse_labels(document: Any, version: NgffVersion, where: str) -> Labels:
    """The OME attributes of a ``labels`` group, validated.

    `document` is the group's ``.zattrs`` (0.4) or the ``ome`` object of its
    attributes (0.5, which must hold ``"version": "0.5"``).

    Raises
    ------
    MetadataError
        ``labels`` is missing or not a list of strings (or the 0.5 version is wrong).

    Examples
    --------
    >>> parse_labels({"labels": ["cells", "nuclei"]}, "0.4", "image.zarr/labels").labels
    ('cells', 'nuclei')
    >>> parse_labels({"labels": "cells"}, "0.4", "image.zarr/labels")
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.MetadataError: image.zarr/labels: invalid OME-Zarr 0.4 labels metadata: labels: must be a list, got 'cells'
    """  # noqa: E501
    check = _Checker()
    labels = check.labels(document, version)
    check.raise_problems(where, f"{version} labels")
    assert labels is not None
    return labels


def parse_label_colors(document: Any, where: str) -> tuple[LabelColor, ...] | None:
    """The ``colors`` of a label image's ``image-label`` object, validated (None without any).

    Only ``colors`` is read; ``properties`` and ``source`` are not used.

    Raises
    ------
    MetadataError
        A colour without ``label-value`` or ``rgba``, a label value twice, or an
        RGBA that is not four integers 0-255.

    Examples
    --------
    >>> colors = [{"label-value": 1, "rgba": [255, 0, 0, 255]}, {"label-value": 2, "rgba": None}]
    >>> parse_label_colors({"colors": colors}, "labels/cells")
    (LabelColor(value=1, rgba=(255, 0, 0, 255)), LabelColor(value=2, rgba=None))
    >>> parse_label_colors({"version": "0.4"}, "labels/cells") is None
    True
    """
    if not isinstance(document, dict) or document.get("colors") is None:
        return None
    check = _Checker()
    colors = check.label_colors(document["colors"], ("colors",))
    check.raise_problems(where, "image-label")
    assert colors is not None
    return colors


# -- the rules ----------------------------------------------------------------------


def _describe(value: Any) -> str:
    """`value` as quoted in a problem: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: Any) -> TypeGuard[int | float]:
    """Whether `value` is a JSON number (bool is an int in Python, not in JSON)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    """Whether `value` is a JSON integer (``1.0`` counts, as pydantic counts it)."""
    return _is_number(value) and math.isfinite(value) and value == int(value)


class _Checker:
    """Walks a document, collecting problems as ``"loc: message"`` lines.

    Each rule method returns its value, or None when it recorded a problem
    (a caller checks the problem count rather than the None, so one bad part
    does not hide the problems of its siblings).
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.stored_transforms: list[str] = []  # where a transform names an array

    def problem(self, loc: _Loc, message: str) -> None:
        self.problems.append(f"{'.'.join(str(part) for part in loc) or '(document)'}: {message}")

    def raise_problems(self, where: str, what: str) -> None:
        if not self.problems:
            return
        more = len(self.problems) - _MAX_PROBLEMS
        listed = "; ".join(self.problems[:_MAX_PROBLEMS])
        raise MetadataError(
            f"{where}: invalid OME-Zarr {what} metadata: {listed}"
            + (f" (and {more} more)" if more > 0 else "")
        )

    # -- JSON shapes

    def json_object(self, value: Any, loc: _Loc) -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.problem(loc, f"must be an object, got {_describe(value)}")
        return None

    def json_list(self, value: Any, loc: _Loc) -> list[Any] | None:
        if isinstance(value, list | tuple):
            return list(value)
        self.problem(loc, f"must be a list, got {_describe(value)}")
        return None

    def field(self, holder: dict[str, Any], key: str, loc: _Loc) -> Any:
        """`holder[key]`, or a "Field required" problem (and None)."""
        if key not in holder:
            self.problem((*loc, key), "Field required")
        return holder.get(key)

    def json_string(self, value: Any, loc: _Loc) -> str | None:
        if isinstance(value, str):
            return value
        self.problem(loc, f"must be a string, got {_describe(value)}")
        return None

    def numbers(self, value: Any, loc: _Loc, *, nonzero: bool = False) -> tuple[float, ...] | None:
        """A vector of finite JSON numbers (non-zero ones with `nonzero`)."""
        values = self.json_list(value, loc)
        if values is None:
            return None
        if not all(_is_number(v) for v in values):
            self.problem(loc, f"must be numbers, got {_describe(values)}")
            return None
        try:
            numbers = tuple(float(v) for v in values)
        except OverflowError:  # an integer beyond a double (10**400)
            self.problem(loc, f"must be finite, got {_describe(values)} (overflow)")
            return None
        if not all(math.isfinite(v) for v in numbers):
            self.problem(loc, f"must be finite, got {list(numbers)}")
            return None
        if nonzero and 0 in numbers:
            self.problem(loc, f"must be non-zero, got {list(numbers)}")
            return None
        return numbers

    # -- images

    def image(self, document: Any, version: NgffVersion) -> Image | None:
        start = len(self.problems)
        root = self.json_object(document, ())
        if root is None:
            return None
        if version == "0.5":
            declared = self.field(root, "version", ())
            if "version" in root and declared != "0.5":
                self.problem(("version",), f"must be '0.5', got {_describe(declared)}")
        multiscales: list[Multiscale | None] = []
        entries = self.field(root, "multiscales", ())
        if (
            "multiscales" in root
            and (listed := self.json_list(entries, ("multiscales",))) is not None
        ):
            if not listed:
                self.problem(("multiscales",), "must list at least one multiscale")
            multiscales = [
                self.multiscale(entry, ("multiscales", index), version)
                for index, entry in enumerate(listed)
            ]
        omero, ignored = None, tuple[str, ...]()
        if root.get("omero") is not None:
            # Optional rendering metadata: its problems are reported, never refuse the image.
            optional = _Checker()
            omero = optional.omero(root["omero"], ("omero",))
            ignored = tuple(optional.problems)
        if len(self.problems) > start:
            return None
        return Image(
            version=version,
            multiscales=tuple(m for m in multiscales if m is not None),
            omero=omero,
            ignored=ignored,
        )

    def multiscale(self, value: Any, loc: _Loc, version: NgffVersion) -> Multiscale | None:
        start = len(self.problems)
        entry = self.json_object(value, loc)
        if entry is None:
            return None
        if version in _LEGACY:
            return self.legacy_multiscale(entry, loc, version)
        if version == "0.4" and entry.get("version") not in (None, "0.4"):
            self.problem((*loc, "version"), f"must be '0.4', got {_describe(entry['version'])}")
        axes = self.axes(self.field(entry, "axes", loc), (*loc, "axes"), "axes" in entry)
        ndim = None if axes is None else len(axes)
        datasets: list[Dataset | None] = []
        if "datasets" in entry:
            datasets = self.datasets(entry["datasets"], (*loc, "datasets"), ndim)
        else:
            self.field(entry, "datasets", loc)
        scale = translation = None
        outer = entry.get("coordinateTransformations")
        if outer is not None:
            transforms = self.transforms(
                outer, (*loc, "coordinateTransformations"), ndim, place="multiscales"
            )
            if transforms is not None:
                scale, translation = transforms
        if len(self.problems) > start or axes is None:
            return None
        name = entry.get("name")
        return Multiscale(
            axes=axes,
            datasets=tuple(d for d in datasets if d is not None),
            scale=scale,
            translation=translation,
            name=name if isinstance(name, str) else None,
        )

    def legacy_multiscale(
        self, entry: dict[str, Any], loc: _Loc, version: NgffVersion
    ) -> Multiscale | None:
        """A 0.1, 0.2 or 0.3 multiscale: axes implied or named, datasets as paths."""
        start = len(self.problems)
        names: str | None = _IMPLIED_AXES
        if version == "0.3":
            listed = self.json_list(self.field(entry, "axes", loc), (*loc, "axes"))
            names = None
            if listed is not None:
                if all(isinstance(a, str) for a in listed) and "".join(listed) in _NAMED_AXES:
                    names = "".join(listed)
                else:
                    self.problem(
                        (*loc, "axes"),
                        f"must be one of {', '.join(_NAMED_AXES)} (OME-Zarr 0.3), "
                        f"got {_describe(listed)}",
                    )
        datasets: list[Dataset] = []
        listed = self.json_list(self.field(entry, "datasets", loc), (*loc, "datasets"))
        for index, item in enumerate(listed or ()):
            here = (*loc, "datasets", index)
            dataset = self.json_object(item, here)
            path = None
            if dataset is not None and "path" in dataset:
                path = self.json_string(dataset["path"], (*here, "path"))
            elif dataset is not None:
                self.field(dataset, "path", here)
            if path is not None:
                datasets.append(Dataset(path=path, scale=(), translation=None))
        if listed is not None and not listed:
            self.problem((*loc, "datasets"), "must list at least one dataset")
        if len(self.problems) > start or names is None:
            return None
        name = entry.get("name")
        return Multiscale(
            axes=tuple(Axis(name=a, type=_AXIS_TYPES[a], unit=None) for a in names),
            datasets=tuple(datasets),
            name=name if isinstance(name, str) and name.strip("/") else None,
        )

    def axes(self, value: Any, loc: _Loc, present: bool) -> tuple[Axis, ...] | None:
        if not present:
            return None
        start = len(self.problems)
        listed = self.json_list(value, loc)
        if listed is None:
            return None
        axes = [self.axis(item, (*loc, index)) for index, item in enumerate(listed)]
        if len(self.problems) > start:
            return None
        valid = tuple(a for a in axes if a is not None)
        if len(valid) not in _AXIS_COUNTS:
            self.problem(loc, f"must be 2 to 5 axes, got {len(valid)}")
        types = [a.type for a in valid]
        spaces = types.count("space")
        if spaces not in _SPACE_AXIS_COUNTS:
            self.problem(loc, f"must have 2 or 3 axes of type 'space', got {spaces}")
        for kind in ("time", "channel"):
            if types.count(kind) > 1:
                self.problem(loc, f"must have at most one axis of type {kind!r}")
        custom = [t for t in types if t not in ("space", "time", "channel")]
        if len(custom) > 1:
            self.problem(loc, f"must have at most one axis of another type, got {custom}")
        if spaces and any(t != "space" for t in types[-spaces:]):
            self.problem(loc, f"space axes must be at the end, got types {types}")
        if "time" in types and types[0] != "time":
            self.problem(loc, f"a time axis must be the first, got types {types}")
        names = [a.name for a in valid]
        if len(set(names)) != len(names):
            self.problem(loc, f"axis names must be unique, got {names}")
        return valid if len(self.problems) == start else None

    def axis(self, value: Any, loc: _Loc) -> Axis | None:
        start = len(self.problems)
        entry = self.json_object(value, loc)
        if entry is None:
            return None
        name = None
        if "name" in entry:
            name = self.json_string(entry["name"], (*loc, "name"))
        else:
            self.field(entry, "name", loc)
        kind = entry.get("type")
        if kind is not None and not isinstance(kind, str):
            self.problem((*loc, "type"), f"must be a string, got {_describe(kind)}")
        unit = entry.get("unit")
        if len(self.problems) > start or name is None:
            return None
        return Axis(name=name, type=kind, unit=unit if isinstance(unit, str) else None)

    def datasets(self, value: Any, loc: _Loc, ndim: int | None) -> list[Dataset | None]:
        listed = self.json_list(value, loc)
        if listed is None:
            return []
        if not listed:
            self.problem(loc, "must list at least one dataset")
        start = len(self.problems)
        datasets = [self.dataset(item, (*loc, index), ndim) for index, item in enumerate(listed)]
        if len(self.problems) == start:
            valid = [d for d in datasets if d is not None]
            for index, (finer, coarser) in enumerate(itertools.pairwise(valid)):
                if not all(f <= c for f, c in zip(finer.scale, coarser.scale, strict=False)):
                    self.problem(
                        loc,
                        f"dataset {index} has a larger scale ({list(finer.scale)}) than "
                        f"dataset {index + 1} ({list(coarser.scale)}): datasets go finest first",
                    )
                    break
        return datasets

    def dataset(self, value: Any, loc: _Loc, ndim: int | None) -> Dataset | None:
        start = len(self.problems)
        entry = self.json_object(value, loc)
        if entry is None:
            return None
        path = None
        if "path" in entry:
            path = self.json_string(entry["path"], (*loc, "path"))
        else:
            self.field(entry, "path", loc)
        transforms = None
        if "coordinateTransformations" in entry:
            transforms = self.transforms(
                entry["coordinateTransformations"],
                (*loc, "coordinateTransformations"),
                ndim,
                place=f"dataset {path!r}" if path is not None else f"dataset {loc[-1]}",
            )
        else:
            self.field(entry, "coordinateTransformations", loc)
        if len(self.problems) > start or path is None or transforms is None:
            return None
        scale, translation = transforms
        return Dataset(path=path, scale=scale or (), translation=translation)

    def transforms(
        self, value: Any, loc: _Loc, ndim: int | None, *, place: str
    ) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None] | None:
        """(scale, translation) of a ``coordinateTransformations`` list.

        A scale first, then optionally a translation. A vector stored in an
        array is None (and `place` is recorded as unsupported).
        """
        start = len(self.problems)
        listed = self.json_list(value, loc)
        if listed is None:
            return None
        entries = [self.json_object(item, (*loc, index)) for index, item in enumerate(listed)]
        if len(self.problems) > start:
            return None
        types = []
        for index, entry in enumerate(entries):
            assert entry is not None
            kind = self.field(entry, "type", (*loc, index))
            if "type" in entry and kind not in _TRANSFORM_TYPES:
                self.problem(
                    (*loc, index, "type"),
                    f"must be 'identity', 'scale' or 'translation', got {_describe(kind)}",
                )
            types.append(kind)
        if len(self.problems) > start:
            return None
        if types not in (["scale"], ["scale", "translation"]):
            self.problem(loc, f"must be a scale, then optionally a translation, got {types}")
            return None
        scale = translation = None
        stored = False
        for index, (kind, entry) in enumerate(zip(types, entries, strict=True)):
            assert entry is not None
            here = (*loc, index)
            if kind == "scale":
                if isinstance(entry.get("scale"), list) or "path" not in entry:
                    scale = self.numbers(
                        self.field(entry, "scale", here), (*here, "scale"), nonzero=True
                    )
                else:
                    stored = stored or self.json_string(entry["path"], (*here, "path")) is not None
            elif isinstance(entry.get("translation"), list):
                translation = self.numbers(entry["translation"], (*here, "translation"))
            elif isinstance(entry.get("translation"), str) or "path" in entry:
                stored = True  # ome-zarr-models' PathTranslation keeps the path in "translation"
            else:
                self.field(entry, "translation", here)
                if "translation" in entry:
                    self.problem((*here, "translation"), "must be a list of numbers")
        if len(self.problems) > start:
            return None
        if stored:
            self.stored_transforms.append(place)
            return None, None
        assert scale is not None
        for what, vector in (("scale", scale), ("translation", translation)):
            if vector is not None and ndim is not None and len(vector) != ndim:
                self.problem(loc, f"the {what} has {len(vector)} values for {ndim} axes")
        if len(self.problems) > start:
            return None
        return scale, translation

    # -- omero

    def omero(self, value: Any, loc: _Loc) -> Omero | None:
        """The ``omero`` block, tolerantly: None without a list of channels, else every
        channel, its invalid parts None (each one a problem recorded)."""
        entry = self.json_object(value, loc)
        if entry is None:
            return None
        if "channels" not in entry:
            self.field(entry, "channels", loc)
            return None
        listed = self.json_list(entry["channels"], (*loc, "channels"))
        if listed is None:
            return None
        channels = [
            self.channel(item, (*loc, "channels", index)) for index, item in enumerate(listed)
        ]
        rdefs = entry.get("rdefs")
        model = rdefs.get("model") if isinstance(rdefs, dict) else None
        return Omero(channels=tuple(channels), model=model if isinstance(model, str) else None)

    def channel(self, value: Any, loc: _Loc) -> Channel:
        """One channel; an invalid (or missing) colour or window is None."""
        entry = self.json_object(value, loc)
        if entry is None:
            return Channel(color=None, window=None)
        color = None
        if "color" in entry:
            text = self.json_string(entry["color"], (*loc, "color"))
            match = None if text is None else _HEX_COLOR.fullmatch(text)
            if text is not None and match is None:
                self.problem((*loc, "color"), f"must be RRGGBB (hexadecimal), got {text!r}")
            color = None if match is None else "#" + match.group(1).upper()
        else:
            self.field(entry, "color", loc)
        window = None
        if "window" in entry:
            window = self.window(entry["window"], (*loc, "window"))
        else:
            self.field(entry, "window", loc)
        label, active = entry.get("label"), entry.get("active")
        return Channel(
            color=color,
            window=window,
            label=None if label is None else str(label),
            active=active if isinstance(active, bool) else None,
        )

    def window(self, value: Any, loc: _Loc) -> Window | None:
        start = len(self.problems)
        entry = self.json_object(value, loc)
        if entry is None:
            return None
        bounds: dict[str, float | None] = {}
        for key in ("start", "end", "min", "max"):
            bound = entry.get(key)
            if key in ("start", "end") and key not in entry:
                self.field(entry, key, loc)
            elif bound is None and key in ("min", "max"):
                bounds[key] = None  # the data's range: optional here (see the module docstring)
            elif not _is_number(bound):
                self.problem((*loc, key), f"must be a number, got {_describe(bound)}")
            else:
                bounds[key] = float(bound)
        if len(self.problems) > start:
            return None
        lower, upper = bounds["start"], bounds["end"]
        assert lower is not None
        assert upper is not None
        return Window(start=lower, end=upper, min=bounds["min"], max=bounds["max"])

    # -- labels

    def labels(self, document: Any, version: NgffVersion) -> Labels | None:
        start = len(self.problems)
        root = self.json_object(document, ())
        if root is None:
            return None
        if version == "0.5":
            declared = self.field(root, "version", ())
            if "version" in root and declared != "0.5":
                self.problem(("version",), f"must be '0.5', got {_describe(declared)}")
        names: list[str | None] = []
        if "labels" in root:
            listed = self.json_list(root["labels"], ("labels",))
            names = [self.json_string(n, ("labels", i)) for i, n in enumerate(listed or ())]
        else:
            self.field(root, "labels", ())
        if len(self.problems) > start:
            return None
        return Labels(labels=tuple(n for n in names if n is not None))

    def label_colors(self, value: Any, loc: _Loc) -> tuple[LabelColor, ...] | None:
        start = len(self.problems)
        listed = self.json_list(value, loc)
        if listed is None:
            return None
        colors = [self.label_color(item, (*loc, index)) for index, item in enumerate(listed)]
        if len(self.problems) > start:
            return None
        values = [c.value for c in colors if c is not None]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            self.problem(loc, f"label values must be unique, got {twice} more than once")
            return None
        return tuple(c for c in colors if c is not None)

    def label_color(self, value: Any, loc: _Loc) -> LabelColor | None:
        start = len(self.problems)
        entry = self.json_object(value, loc)
        if entry is None:
            return None
        label = self.field(entry, "label-value", loc)
        if "label-value" in entry and not _is_integer(label):
            self.problem((*loc, "label-value"), f"must be an integer, got {_describe(label)}")
        rgba = self.field(entry, "rgba", loc)
        if rgba is not None and not (
            isinstance(rgba, list | tuple)
            and len(rgba) == 4
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in rgba)
        ):
            self.problem((*loc, "rgba"), f"must be 4 integers 0-255, got {_describe(rgba)}")
        if len(self.problems) > start:
            return None
        if rgba is None:
            return LabelColor(value=int(label), rgba=None)
        red, green, blue, alpha = rgba
        return LabelColor(value=int(label), rgba=(red, green, blue, alpha))
