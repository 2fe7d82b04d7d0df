"""`core.ngff` against ome-zarr-models (the oracle): the same documents accepted, the same values.

Hypothesis writes OME 0.4 and 0.5 image attributes that follow the spec, then
mutates them: anything in the tree deleted, replaced by another JSON value,
duplicated or joined by an extra key; axes added, dropped, reordered or
retyped; vectors lengthened and shortened; transforms and datasets reordered.
Our validator and ome-zarr-models' ``ImageAttrs.model_validate`` (plus
``Omero``, ``LabelsAttrs`` and ``LabelBase`` for what ``ImageAttrs`` leaves
out) must agree on every document, except where `core.ngff` differs on
purpose (its module docstring lists the same differences):

- stricter, on what decides pixels and geometry: vector values that are not
  JSON numbers (``"0.5"``, ``true``), not finite, or zero scales; axis names
  that are not strings; label values and RGBA components that pydantic
  coerces from strings or booleans; transforms stored in arrays (``path``),
  which we cannot read without reading an array. Every such document must be
  refused.
- tolerant, on optional rendering metadata: ``omero`` never decides. A
  document is accepted exactly when the oracle accepts it without its
  ``omero``; its ``omero`` is reported as ignored (`Image.ignored`) exactly
  when the oracle refuses it (a window's missing or null ``min`` and ``max``
  filled in: we accept those) or we are stricter on it (colours that only
  contain ``RRGGBB``, window bounds pydantic coerces from strings or booleans).

Then documents written at test time by third-party writers (ome-zarr-py's
``write_image`` and ``write_labels``; ngff-zarr is not installed in the
development environment) are accepted with the axes, scales and translations
ome-zarr-models reads from them.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import pathlib
import re
import subprocess
import sys
import tempfile
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from hypothesis import event, given, settings
from hypothesis import strategies as st
from ome_zarr_models.common.image_label_types import LabelBase
from ome_zarr_models.common.omero import Omero as OracleOmero
from ome_zarr_models.exceptions import ValidationWarning
from ome_zarr_models.v04.image import ImageAttrs as OracleImage04
from ome_zarr_models.v04.labels import LabelsAttrs as OracleLabels04
from ome_zarr_models.v05.image import ImageAttrs as OracleImage05
from ome_zarr_models.v05.labels import LabelsAttrs as OracleLabels05

from napari_lazy_zarr.core import MetadataError, UnsupportedDataError
from napari_lazy_zarr.core.formats.ngff import (
    Image,
    NgffVersion,
    parse_image,
    parse_label_colors,
    parse_labels,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

WHERE = "store.zarr/image"
_NAMES = ("t", "c", "z", "y", "x", "angle", "q", "p")
# What a mutation may put anywhere in a document.
# A copy each time: `sampled_from` hands out the very same list and dict objects, which the
# mutations then edit in place: a later example would draw from an edited strategy
# (Hypothesis's FlakyStrategyDefinition, "data generation depending on external state").
_JSON_VALUES = st.sampled_from(
    [None, True, 0, 5, -1, 1.5, math.nan, math.inf, "x", "0.5", "", [], [1, 2], {}, {"a": 1}]
).map(copy.deepcopy)

# -- valid documents ----------------------------------------------------------------


@st.composite
def _axes(draw: st.DrawFn) -> list[dict[str, Any]]:
    """2 to 5 axes in an order the spec allows: time first, space last."""
    spaces = draw(st.sampled_from([2, 3]))
    time = draw(st.booleans())
    room = 5 - spaces - time
    middle = draw(
        st.lists(
            st.sampled_from(["channel", "custom", None]), unique=True, max_size=min(room, 2)
        ).filter(lambda kinds: not ("custom" in kinds and None in kinds))  # one custom at most
    )
    kinds = [*(["time"] if time else []), *middle, *["space"] * spaces]
    names = draw(
        st.lists(st.sampled_from(_NAMES), min_size=len(kinds), max_size=len(kinds), unique=True)
    )
    axes = []
    for name, kind in zip(names, kinds, strict=True):
        axis: dict[str, Any] = {"name": name}
        if kind is not None:
            axis["type"] = kind
        if kind in ("space", "time") and draw(st.booleans()):
            axis["unit"] = "micrometer" if kind == "space" else "second"
        axes.append(axis)
    return axes


_POSITIVE = st.one_of(st.integers(1, 8), st.floats(0.01, 100.0))
_OFFSETS = st.one_of(st.integers(-50, 50), st.floats(-100.0, 100.0))


def _transforms(draw: st.DrawFn, scale: list[Any]) -> list[dict[str, Any]]:
    transforms: list[dict[str, Any]] = [{"type": "scale", "scale": scale}]
    if draw(st.booleans()):
        offsets = draw(st.lists(_OFFSETS, min_size=len(scale), max_size=len(scale)))
        transforms.append({"type": "translation", "translation": offsets})
    return transforms


@st.composite
def _images(draw: st.DrawFn, version: NgffVersion) -> dict[str, Any]:
    """A valid image attributes document (0.4: ``.zattrs``; 0.5: the ``ome`` object)."""
    axes = draw(_axes())
    ndim = len(axes)
    scale = draw(st.lists(_POSITIVE, min_size=ndim, max_size=ndim))
    datasets = []
    for level in range(draw(st.integers(1, 3))):
        datasets.append(
            {"path": str(level), "coordinateTransformations": _transforms(draw, scale)}
        )
        factor = draw(st.sampled_from([1, 2, 2.5]))
        scale = [
            s * factor if axis.get("type") == "space" else s
            for s, axis in zip(scale, axes, strict=True)
        ]
    multiscale: dict[str, Any] = {"axes": axes, "datasets": datasets}
    if draw(st.booleans()):
        outer = draw(st.lists(_POSITIVE, min_size=ndim, max_size=ndim))
        multiscale["coordinateTransformations"] = _transforms(draw, outer)
    if draw(st.booleans()):
        multiscale["name"] = draw(st.sampled_from(["image", 5, None]))
    if version == "0.4" and draw(st.booleans()):
        multiscale["version"] = "0.4"
    document: dict[str, Any] = {"multiscales": [multiscale]}
    if version == "0.5":
        document["version"] = "0.5"
    if draw(st.booleans()):
        channels = draw(st.integers(1, 3))
        document["omero"] = {
            "channels": [
                {
                    "color": draw(st.sampled_from(["FF00FF", "00ff00", "#0000FF"])),
                    "window": {"min": 0, "max": 65535, "start": draw(_OFFSETS), "end": 3000},
                    "label": f"ch{index}",
                    "active": draw(st.booleans()),
                }
                for index in range(channels)
            ]
        }
        if draw(st.booleans()):
            document["omero"]["rdefs"] = {"model": draw(st.sampled_from(["color", "greyscale"]))}
    return document


# -- mutations ----------------------------------------------------------------------


def _places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every node in a JSON tree (the root is ``()``)."""
    places = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            places.extend(_places(child, (*path, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            places.extend(_places(child, (*path, index)))
    return places


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def _mutate_anywhere(draw: st.DrawFn, document: dict[str, Any]) -> None:
    """One generic edit at a node drawn from the whole tree."""
    path = draw(st.sampled_from(_places(document)[1:]))
    parent, key = _at(document, path[:-1]), path[-1]
    action = draw(st.sampled_from(["delete", "replace", "duplicate", "extra key"]))
    if action == "delete":
        del parent[key]
    elif action == "replace":
        parent[key] = draw(_JSON_VALUES)
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    elif isinstance(parent[key], dict):
        parent[key]["x-extra"] = draw(_JSON_VALUES)


def _multiscale(document: dict[str, Any]) -> dict[str, Any] | None:
    multiscales = document.get("multiscales")
    if isinstance(multiscales, list) and multiscales and isinstance(multiscales[0], dict):
        return multiscales[0]
    return None


def _mutate_semantics(draw: st.DrawFn, document: dict[str, Any]) -> None:
    """One edit of what the rules are about: axes, vectors, orders, colours, windows."""
    multiscale = _multiscale(document)
    if multiscale is None:
        return
    axes, datasets = multiscale.get("axes"), multiscale.get("datasets")
    vectors = [
        transform[field]
        for holder in [multiscale, *(datasets if isinstance(datasets, list) else [])]
        if isinstance(holder, dict) and isinstance(holder.get("coordinateTransformations"), list)
        for transform in holder["coordinateTransformations"]
        if isinstance(transform, dict)
        for field in ("scale", "translation")
        if isinstance(transform.get(field), list)
    ]
    axis_edits = ["add axis", "drop axis", "shuffle axes", "retype axis", "rename axis"]
    edit = draw(
        st.sampled_from(
            [
                *axis_edits, *axis_edits, "add axis",  # the axis rules have the most branches
                "lengthen vector", "shorten vector", "bad value", "swap transforms",
                "extra transform", "reverse datasets", "no datasets", "colour", "window",
                "dataset path", "version",
            ]
        )
    )  # fmt: skip
    if edit.endswith(("axis", "axes")) and isinstance(axes, list) and axes:
        index = draw(st.integers(0, len(axes) - 1))
        # Mostly with the vectors kept in step, so that the axis rules decide.
        in_step = draw(st.integers(0, 3)) > 0
        if edit == "add axis":
            kind = draw(st.sampled_from(["space", "time", "channel", "custom", "other", None]))
            axes.insert(index, {"name": draw(st.sampled_from(_NAMES)), "type": kind})
            for vector in vectors if in_step else ():
                vector.insert(index, 1.0)
        elif edit == "drop axis":
            del axes[index]
            for vector in vectors if in_step else ():
                del vector[index : index + 1]
        elif edit == "shuffle axes":
            axes[:] = draw(st.permutations(axes))
        elif isinstance(axes[index], dict):
            field, values = (
                ("type", st.sampled_from(["space", "time", "channel", "custom", None, 3]))
                if edit == "retype axis"
                else ("name", st.sampled_from([*_NAMES, None, 1]))
            )
            axes[index][field] = draw(values)
    elif edit in ("lengthen vector", "shorten vector", "bad value") and vectors:
        vector = draw(st.sampled_from(vectors))
        if edit == "lengthen vector":
            vector.append(1.0)
        elif edit == "shorten vector" and vector:
            vector.pop()
        elif vector:
            bad = st.sampled_from([0, 0.0, math.nan, -math.inf, "0.5", True, None, -2.0])
            vector[draw(st.integers(0, len(vector) - 1))] = draw(bad)
    elif (
        edit in ("swap transforms", "extra transform") and isinstance(datasets, list) and datasets
    ):
        dataset = draw(st.sampled_from(datasets))
        transforms = (
            dataset.get("coordinateTransformations") if isinstance(dataset, dict) else None
        )
        if isinstance(transforms, list):
            if edit == "swap transforms":
                transforms.reverse()
            else:
                extra = st.sampled_from(["identity", "scale", "translation", "affine"])
                transforms.append({"type": draw(extra), "scale": [1.0], "translation": [0.0]})
    elif edit == "reverse datasets" and isinstance(datasets, list):
        datasets.reverse()
    elif edit == "no datasets":
        multiscale["datasets"] = []
    elif edit == "dataset path" and isinstance(datasets, list) and datasets:
        dataset = draw(st.sampled_from(datasets))
        if isinstance(dataset, dict):
            dataset["path"] = draw(st.sampled_from([5, None, "", ["0"]]).map(copy.deepcopy))
    elif edit == "version":
        holder = multiscale if draw(st.booleans()) else document
        holder["version"] = draw(st.sampled_from(["0.4", "0.5", 0.4, None, "0.6"]))
    elif edit in ("colour", "window"):
        channels = (
            document.get("omero", {}).get("channels")
            if isinstance(document.get("omero"), dict)
            else None
        )
        if isinstance(channels, list) and channels and isinstance(channels[0], dict):
            channel = channels[0]
            if edit == "colour":
                channel["color"] = draw(
                    st.sampled_from(["red", "#GGGGGG", "FF00FF00", "xFF00FF", 255, "ff00aa"])
                )
            elif isinstance(channel.get("window"), dict):
                key = draw(st.sampled_from(["min", "max", "start", "end"]))
                if draw(st.booleans()):
                    channel["window"].pop(key)
                else:
                    channel["window"][key] = draw(st.sampled_from([None, "1", True, math.nan]))


@st.composite
def _documents(draw: st.DrawFn, version: NgffVersion) -> dict[str, Any]:
    """A valid document, then up to four edits (none for about a fifth)."""
    document = draw(_images(version))
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            _mutate_semantics(draw, document)
        elif len(_places(document)) > 1:
            _mutate_anywhere(draw, document)
    return document


# -- the deliberate differences -------------------------------------------------------


def _is_json_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in _items(value) if isinstance(item, dict)]


def _stricter(document: Any) -> list[str]:
    """Why `core.ngff` refuses `document` where ome-zarr-models may accept it (none: [])."""
    if not isinstance(document, dict):
        return []
    reasons = []
    for multiscale in _dicts(document.get("multiscales")):
        if any(
            "name" in axis and not isinstance(axis["name"], str)
            for axis in _dicts(multiscale.get("axes"))
        ):
            reasons.append("an axis name that is not a string")
        holders = [multiscale, *_dicts(multiscale.get("datasets"))]
        for holder in holders:
            transforms = _dicts(holder.get("coordinateTransformations"))
            for transform in transforms:
                kind = transform.get("type")
                vector = transform.get(kind) if kind in ("scale", "translation") else None
                if isinstance(vector, list):
                    if not all(_is_json_number(v) for v in vector):
                        reasons.append(f"a {kind} of non-numbers {vector}")
                    elif not all(math.isfinite(v) for v in vector):
                        reasons.append(f"a {kind} not finite {vector}")
                    elif kind == "scale" and 0 in vector:
                        reasons.append("a zero scale")
                elif kind == "scale" and isinstance(transform.get("path"), str):
                    reasons.append("a scale stored in an array")
                elif kind == "translation" and ("path" in transform or isinstance(vector, str)):
                    reasons.append("a translation stored in an array")
    return reasons


def _omero_stricter(document: Any) -> list[str]:
    """Why `core.ngff` ignores an ``omero`` block that ome-zarr-models may accept (none: [])."""
    reasons = []
    omero = document.get("omero") if isinstance(document, dict) else None
    for channel in _dicts(omero.get("channels")) if isinstance(omero, dict) else []:
        color = channel.get("color")
        if isinstance(color, str) and len(color.removeprefix("#")) != 6:
            reasons.append(f"colour {color!r} only contains RRGGBB")
        window = channel.get("window")
        for key in ("start", "end", "min", "max") if isinstance(window, dict) else ():
            if key in window and window[key] is not None and not _is_json_number(window[key]):
                reasons.append(f"window {key} {window[key]!r} is not a JSON number")
            elif key in ("start", "end") and window.get(key, 0) is None:
                reasons.append(f"window {key} is null")
    return reasons


def _without_omero(document: Any) -> Any:
    """`document` without its optional ``omero`` block (what may refuse an image)."""
    if not isinstance(document, dict):
        return document
    return {key: value for key, value in document.items() if key != "omero"}


def _oracle_omero(document: Any) -> Any:
    """ome-zarr-models' ``Omero`` of `document` (windows' range filled in), None when absent
    or null, or False when it refuses it."""
    raw = document.get("omero") if isinstance(document, dict) else None
    if raw is None:
        return None
    try:
        return OracleOmero.model_validate(_with_window_range({"omero": raw})["omero"])
    except Exception:  # ValidationError
        return False


def _with_window_range(document: Any) -> Any:
    """`document` with each window's missing or null ``min``/``max`` filled in (our tolerance)."""
    document = copy.deepcopy(document)
    omero = document.get("omero") if isinstance(document, dict) else None
    for channel in _dicts(omero.get("channels")) if isinstance(omero, dict) else []:
        window = channel.get("window")
        if isinstance(window, dict):
            for key in ("min", "max"):
                if window.get(key) is None:
                    window[key] = 0.0
    return document


# -- the two validators -----------------------------------------------------------------


def _oracle(document: Any, version: NgffVersion) -> Any:
    """What ome-zarr-models makes of `document`: (attrs, omero), or None when it refuses."""
    model = OracleImage04 if version == "0.4" else OracleImage05
    with warnings.catch_warnings():
        # It would reorder a (translation, scale) pair with this warning (its check of
        # the pair never matches, though: it refuses them, as we do).
        warnings.simplefilter("ignore", ValidationWarning)
        try:
            attrs = model.model_validate(document)
            if version == "0.4":
                return attrs, attrs.omero
            raw = document.get("omero")
            return attrs, None if raw is None else OracleOmero.model_validate(raw)
        except Exception:  # ValidationError, or IndexError from its scale-order check
            return None


def _refused[T](parse: Callable[[], T], prefix: str) -> T | None:
    """`parse()`, or None when it refuses (with a message that starts with `prefix`)."""
    message = ""
    try:
        return parse()
    except (MetadataError, UnsupportedDataError) as error:
        message = str(error)
    assert message.startswith(prefix), message
    return None


def _ours(document: Any, version: NgffVersion) -> Image | None:
    return _refused(lambda: parse_image(document, version, WHERE), f"{WHERE}: ")


def _assert_same_values(ours: Image, oracle: Any, *, omero: bool = True) -> None:
    """The values we read are those ome-zarr-models reads (with `omero`, its omero too)."""
    attrs, omero = oracle
    assert len(ours.multiscales) == len(attrs.multiscales)
    for mine, theirs in zip(ours.multiscales, attrs.multiscales, strict=True):
        assert [a.name for a in mine.axes] == [a.name for a in theirs.axes]
        assert [a.type for a in mine.axes] == [a.type for a in theirs.axes]
        assert [a.unit for a in mine.axes] == [
            a.unit if isinstance(a.unit, str) else None for a in theirs.axes
        ]
        assert mine.name == (theirs.name if isinstance(theirs.name, str) else None)
        for dataset, expected in zip(mine.datasets, theirs.datasets, strict=True):
            transforms = expected.coordinateTransformations
            assert dataset.path == expected.path
            assert dataset.scale == tuple(transforms[0].scale)
            assert dataset.translation == (
                tuple(transforms[1].translation) if len(transforms) == 2 else None
            )
        outer = theirs.coordinateTransformations
        assert mine.scale == (None if outer is None else tuple(outer[0].scale))
        assert mine.translation == (
            tuple(outer[1].translation) if outer is not None and len(outer) == 2 else None
        )
    if not omero:
        return
    assert (ours.omero is None) == (omero is None)
    if ours.omero is not None:
        assert [c.color for c in ours.omero.channels] == [
            "#" + c.color.removeprefix("#").upper() for c in omero.channels
        ]
        windows = [(c.window.start, c.window.end) for c in ours.omero.channels]
        expected_windows = [(c.window.start, c.window.end) for c in omero.channels]
        assert np.array_equal(windows, expected_windows, equal_nan=True)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@settings(max_examples=400)  # a few seconds: the mutations have many branches to reach
@given(data=st.data())
def test_agrees_with_ome_zarr_models(version: NgffVersion, data: st.DataObject) -> None:
    document = data.draw(_documents(version))
    ours = _ours(copy.deepcopy(document), version)
    reasons = _stricter(document)
    if reasons:
        event("ours stricter")
        assert ours is None, f"accepted despite {reasons}"
        return
    # The optional omero block never decides: the rest of the document does.
    oracle = _oracle(_without_omero(document), version)
    event("both accept" if oracle is not None else "ome-zarr-models refuses")
    assert (ours is not None) == (oracle is not None), "ome-zarr-models " + (
        "accepts" if oracle is not None else "refuses"
    )
    if ours is None:
        return
    omero = _oracle_omero(document)
    omero_valid = omero is not False and not _omero_stricter(document)
    event("omero ignored" if not omero_valid else "omero read")
    # An omero block either side refuses is reported (and its parts read as absent).
    assert (not ours.ignored) == omero_valid, ours.ignored
    _assert_same_values(ours, (oracle[0], omero if omero_valid else None), omero=omero_valid)


def test_axis_rules_agree_with_ome_zarr_models() -> None:
    """Every sequence of up to 5 axis types, and every order of 6 otherwise valid ones.

    Random documents rarely break one axis rule alone; enumerating them does
    (names unique, vectors to match). 0.4 only: both versions share the rules,
    and the oracle's 1.4 ms per document makes this the slowest test here.
    """
    kinds = ("space", "time", "channel", "custom", None)
    sequences = [types for ndim in range(6) for types in itertools.product(kinds, repeat=ndim)]
    sequences += sorted(set(itertools.permutations(["time", "channel", "custom", *["space"] * 3])))
    disagreements = []
    for types in sequences:
        axes = [
            {"name": name} if kind is None else {"name": name, "type": kind}
            for name, kind in zip(_NAMES, types, strict=False)
        ]
        transforms = [{"type": "scale", "scale": [1.0] * len(types)}]
        datasets = [{"path": "0", "coordinateTransformations": transforms}]
        document = {"multiscales": [{"axes": axes, "datasets": datasets}]}
        ours, oracle = _ours(document, "0.4"), _oracle(document, "0.4")
        if (ours is not None) != (oracle is not None):
            disagreements.append(types)
        elif ours is not None:
            _assert_same_values(ours, oracle)
    assert not disagreements, disagreements[:5]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("place", ["document", "multiscale"])
@pytest.mark.parametrize("value", ["0.4", "0.5", "0.6", 0.4, None, "absent"])
def test_versions_agree_with_ome_zarr_models(version: NgffVersion, place: str, value: Any) -> None:
    document = _valid(version)
    holder = document if place == "document" else document["multiscales"][0]
    holder.pop("version", None)
    if value != "absent":
        holder["version"] = value
    ours, oracle = _ours(document, version), _oracle(document, version)
    assert (ours is not None) == (oracle is not None)


def test_the_generated_documents_reach_both_answers() -> None:
    """The generator is no use if every document is valid, or every one invalid."""
    outcomes: dict[bool, int] = {True: 0, False: 0}

    @given(document=_documents("0.5"))
    def count(document: dict[str, Any]) -> None:
        outcomes[_ours(document, "0.5") is not None] += 1

    count()
    assert min(outcomes.values()) >= 10, outcomes


# -- examples of each difference and of the messages ---------------------------------


def _valid(version: NgffVersion) -> dict[str, Any]:
    axes = [
        {"name": "c", "type": "channel"},
        {"name": "y", "type": "space"},
        {"name": "x", "type": "space"},
    ]
    document: dict[str, Any] = {
        "multiscales": [
            {
                "axes": axes,
                "datasets": [
                    {
                        "path": str(level),
                        "coordinateTransformations": [
                            {"type": "scale", "scale": [1, 2**level, 2**level]}
                        ],
                    }
                    for level in range(2)
                ],
            }
        ],
        "omero": {
            "channels": [
                {"color": "FF0000", "window": {"start": 0, "end": 10, "min": 0, "max": 255}}
            ]
        },
    }
    if version == "0.5":
        document["version"] = "0.5"
    return document


def _scale(document: dict[str, Any], values: Any) -> None:
    document["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["scale"] = values


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: _scale(d, ["1", 1, 1]), r"scale: must be numbers, got \['1', 1, 1\]"),
        (lambda d: _scale(d, [True, 1, 1]), r"scale: must be numbers"),
        (lambda d: _scale(d, [1, -math.inf, 1]), r"scale: must be finite"),
        (lambda d: _scale(d, [1, 0, 1]), r"scale: must be non-zero"),
        (
            lambda d: d["multiscales"][0]["axes"][0].update(name=None),
            r"multiscales\.0\.axes\.0\.name: must be a string, got None",
        ),
    ],
)
def test_stricter_than_ome_zarr_models(
    version: NgffVersion, edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    document = _valid(version)
    edit(document)
    assert _oracle(document, version) is not None  # the oracle lets it through
    with pytest.raises(
        MetadataError, match=rf"^{WHERE}: invalid OME-Zarr {version} image metadata: .*{problem}"
    ):
        parse_image(document, version, WHERE)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_window_without_min_and_max_is_accepted(version: NgffVersion) -> None:
    document = _valid(version)
    window = document["omero"]["channels"][0]["window"]
    del window["min"]
    window["max"] = None
    assert _oracle(document, version) is None  # the oracle refuses it
    (channel,) = parse_image(document, version, WHERE).omero.channels  # type: ignore[union-attr]
    assert (channel.window.start, channel.window.end, channel.window.min, channel.window.max) == (
        0,
        10,
        None,
        None,
    )


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_transforms_stored_in_arrays_are_unsupported(version: NgffVersion) -> None:
    document = _valid(version)
    document["multiscales"][0]["datasets"][0]["coordinateTransformations"] = [
        {"type": "scale", "path": "s0"}
    ]
    assert _oracle(document, version) is not None
    with pytest.raises(
        UnsupportedDataError, match=rf"^{WHERE}: dataset '0': transforms stored in an array"
    ):
        parse_image(document, version, WHERE)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_translation_before_the_scale_is_refused(version: NgffVersion) -> None:
    """ome-zarr-models means to reorder this pair, but its check never matches: it refuses."""
    document = _valid(version)
    document["multiscales"][0]["datasets"][1]["coordinateTransformations"] = [
        {"type": "translation", "translation": [0, 1, 3]},
        {"type": "scale", "scale": [1, 2, 2]},
    ]
    assert _oracle(document, version) is None
    with pytest.raises(MetadataError, match=r"must be a scale, then optionally a translation"):
        parse_image(document, version, WHERE)


def test_at_most_four_problems_are_quoted() -> None:
    document = _valid("0.4")
    del document["multiscales"][0]["datasets"][0]["path"]
    del document["multiscales"][0]["datasets"][1]["path"]
    for axis in document["multiscales"][0]["axes"]:
        axis["name"] = 1
    with pytest.raises(MetadataError) as raised:
        parse_image(document, "0.4", WHERE)
    message = str(raised.value)
    assert message.count(": must be a string, got 1") == 3
    assert message.endswith("(and 1 more)"), message
    assert message.count("; ") == 3, message


# -- labels groups and image-label colours -------------------------------------------


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@given(
    labels=st.one_of(
        st.lists(st.one_of(st.sampled_from(["cells", "nuclei", ""]), _JSON_VALUES), max_size=3),
        _JSON_VALUES,
    ),
    extra=st.booleans(),
)
def test_labels_agree_with_ome_zarr_models(version: NgffVersion, labels: Any, extra: bool) -> None:
    document: dict[str, Any] = {"labels": labels}
    if extra:
        document["x-extra"] = 1
    if version == "0.5":
        document["version"] = "0.5"
    oracle_model = OracleLabels04 if version == "0.4" else OracleLabels05
    try:
        expected: tuple[str, ...] | None = tuple(oracle_model.model_validate(document).labels)
    except ValueError:
        expected = None
    ours = _refused(
        lambda: parse_labels(document, version, WHERE).labels,
        f"{WHERE}: invalid OME-Zarr {version} labels metadata: ",
    )
    assert ours == expected


_LABEL_VALUES = st.one_of(st.integers(-5, 5), st.sampled_from([1.0, 1.5, "1", True, None]))
_RGBA = st.one_of(
    st.none(),
    st.lists(
        st.one_of(st.integers(-1, 256), st.sampled_from([1.0, True, "1"])), min_size=3, max_size=5
    ),
    _JSON_VALUES,
)


@given(
    colors=st.one_of(
        st.lists(
            st.fixed_dictionaries({}, optional={"label-value": _LABEL_VALUES, "rgba": _RGBA}),
            max_size=4,
        ),
        _JSON_VALUES,
    )
)
def test_label_colours_agree_with_ome_zarr_models(colors: Any) -> None:
    try:
        expected = LabelBase.model_validate({"colors": colors}).colors
    except ValueError:
        expected = None
    ours = _refused(
        lambda: parse_label_colors({"colors": colors}, WHERE),
        f"{WHERE}: invalid OME-Zarr image-label metadata: ",
    )
    coerced = [
        c.get("label-value")
        for c in _dicts(colors)
        if isinstance(c.get("label-value"), str | bool)
    ]
    if coerced:  # stricter: a label value pydantic coerces from a string or a boolean
        assert ours is None
        return
    if colors is None:
        assert ours is None
        assert expected is None
        return
    assert (ours is not None) == (expected is not None)
    if ours is not None and expected is not None:
        assert [(c.value, c.rgba) for c in ours] == [(c.label_value, c.rgba) for c in expected]


# -- documents by third-party writers ------------------------------------------------


def _written_documents(path: Path, version: NgffVersion, axes: str) -> tuple[Any, Any, Any]:
    """Image, labels-group and image-label attributes that ome-zarr-py writes."""
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image, write_labels

    extent = {"t": 2, "c": 3, "z": 4, "y": 48, "x": 40}
    shape = tuple(extent[a] for a in axes)
    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(str(path), mode="w", zarr_format=fmt.zarr_format)  # type: ignore[arg-type]
    metadata: dict[str, Any] = {}
    if "c" in axes:
        metadata["omero"] = OracleOmero.model_validate(
            {
                "channels": [
                    {"color": "00FF00", "window": {"min": 0, "max": 255, "start": 0, "end": 99}}
                ]
                * 3
            }
        )
    write_image(
        np.zeros(shape, np.uint8),
        group,
        axes=axes,
        fmt=fmt,
        scale_factors=(2, 4),
        scale={a: {"z": 2.0, "y": 0.5, "x": 0.25}.get(a, 1.0) for a in axes},
        axes_units={a: "micrometer" for a in "zyx" if a in axes},
        **metadata,
    )
    label_axes = axes.replace("c", "")
    write_labels(
        np.zeros(tuple(extent[a] for a in label_axes), np.uint32),
        group,
        name="cells",
        axes=label_axes,
        fmt=fmt,
        scale_factors=(2,),
        label_metadata={"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]},
    )

    def ome(node: zarr.Group) -> Any:
        attributes = node.attrs.asdict()
        return attributes if version == "0.4" else attributes["ome"]

    labels = zarr.open_group(str(path / "labels"), mode="r")
    cells = zarr.open_group(str(path / "labels" / "cells"), mode="r")
    return ome(group), ome(labels), ome(cells)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("axes", ["yx", "cyx", "zyx", "tyx", "tczyx"])
def test_ome_zarr_py_documents(tmp_path: Path, version: NgffVersion, axes: str) -> None:
    image, labels, cells = _written_documents(tmp_path / "image.ome.zarr", version, axes)
    ours = parse_image(image, version, WHERE)
    _assert_same_values(ours, _oracle(image, version))
    (multiscale,) = ours.multiscales
    assert "".join(a.name for a in multiscale.axes) == axes
    assert [d.scale[-1] for d in multiscale.datasets] == [0.25, 0.5, 1.0]
    if version == "0.5" and "version" not in labels:
        labels = {**labels, "version": "0.5"}  # ome-zarr-py 0.21 leaves it out (layout adds it)
    assert parse_labels(labels, version, WHERE).labels == ("cells",)
    label_image = parse_image(cells, version, WHERE)
    _assert_same_values(label_image, _oracle(cells, version))
    colors = parse_label_colors(cells["image-label"], WHERE)
    assert [(c.value, c.rgba) for c in colors or ()] == [(1, (255, 0, 0, 255))]


def test_describing_an_ome_zarr_store_imports_no_ome_zarr_models(tmp_path: Path) -> None:
    """The plugin's runtime does without ome-zarr-models (its pydantic cap would downgrade the
    pydantic napari brings; the settings model is pydantic's, within napari's bounds)."""
    path = tmp_path / "image.ome.zarr"
    group = zarr.create_group(str(path), zarr_format=3, attributes={"ome": _valid("0.5")})
    for level in range(2):
        group.create_array(str(level), shape=(1, 8 >> level, 8 >> level), dtype="u1")
    code = (
        "import json, sys; from napari_lazy_zarr.core.formats.ome import describe_store;"
        f"(image,) = describe_store({json.dumps(str(path))});"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'ome_zarr_models'});"
        "print(image.axis_names, bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "('c', 'y', 'x')" in result.stdout


# -- transforms napari can draw (core.formats.ome) -----------------------------------------


def _image_store(tmp_path: Path, scales: list[list[float]], translation: Any = None) -> Path:
    """A 0.5 image of two levels (1 x 8 x 8, 1 x 4 x 4) with these dataset scales."""
    document = _valid("0.5")
    for dataset, scale in zip(document["multiscales"][0]["datasets"], scales, strict=True):
        dataset["coordinateTransformations"] = [{"type": "scale", "scale": scale}]
        if translation is not None:
            dataset["coordinateTransformations"].append(
                {"type": "translation", "translation": translation}
            )
    path = tmp_path / "image.ome.zarr"
    group = zarr.create_group(str(path), zarr_format=3, attributes={"ome": document})
    for level in range(2):
        group.create_array(str(level), shape=(1, 8 >> level, 8 >> level), dtype="u1")
    return path


UNDRAWABLE = [
    ([[1, 1e308, 1e308], [1, 1e308, 1e308]], None, r"scale 1e\+308 outside \[1e-15, 1e\+15\]"),
    ([[1, 5e-324, 5e-324], [1, 1e-323, 1e-323]], None, r"scale 4\.94066e-324 outside"),
    ([[1, -0.5, -0.5], [1, -0.25, -0.25]], None, r"scale -0\.5 outside"),
    ([[1, 1e-6, 1e4], [1, 2e-6, 2e4]], None, r"differ more than 1e\+09-fold between axes"),
    ([[1, 1, 1], [1e10, 1e10, 1e10]], None, r"more than 1e\+09 times the finest level.s 1"),
    ([[1, 1, 1], [1, 2, 2]], [0, 1e300, 0], r"translation 1e\+300 beyond"),
]


@pytest.mark.parametrize(("scales", "translation", "problem"), UNDRAWABLE)
def test_undrawable_transforms_open_in_pixel_units_with_a_warning(
    tmp_path: Path, scales: list[list[float]], translation: Any, problem: str
) -> None:
    from napari_lazy_zarr.core.formats.ome import TransformWarning, describe_store

    path = _image_store(tmp_path, scales, translation)
    with pytest.warns(TransformWarning) as caught:
        (image,) = describe_store(str(path))
    (warning,) = caught
    message = str(warning.message)
    assert message.startswith(f"{path}: the OME coordinate transforms cannot be drawn (")
    assert re.search(problem, message), message
    assert [level.scale for level in image.levels] == [(1.0, 1.0, 1.0), (1.0, 2.0, 2.0)]
    assert [level.translate for level in image.levels] == [(0.0, 0.0, 0.0)] * 2


def test_a_composed_scale_that_overflows_is_caught(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.formats.ome import TransformWarning, describe_store

    path = _image_store(tmp_path, [[1, 1e200, 1e200], [1, 2e200, 2e200]])
    group = zarr.open_group(str(path), mode="r+")
    document = dict(group.attrs)["ome"]
    document["multiscales"][0]["coordinateTransformations"] = [
        {"type": "scale", "scale": [1, 1e200, 1e200]}
    ]
    group.attrs["ome"] = document
    with pytest.warns(TransformWarning, match=r"scale inf outside"):
        (image,) = describe_store(str(path))
    assert image.levels[0].scale == (1.0, 1.0, 1.0)


# Within every bound: scales 1e-2..1e5, at most 1e7-fold apart between axes (the warning is
# for over 1e9-fold), translations up to 1e12 (the bound is 1e15).
@settings(max_examples=25, deadline=None)
@given(
    fine=st.lists(st.floats(1e-2, 1e2), min_size=2, max_size=2),
    factors=st.lists(st.floats(1, 1e3), min_size=2, max_size=2),
    shift=st.lists(st.floats(-1e12, 1e12), min_size=3, max_size=3),
)
def test_drawable_transforms_are_kept_as_written(
    fine: list[float], factors: list[float], shift: list[float]
) -> None:
    from napari_lazy_zarr.core.formats.ome import describe_store

    scales = [[1.0, *fine], [1.0, *(f * k for f, k in zip(fine, factors, strict=True))]]
    with tempfile.TemporaryDirectory() as folder:
        path = _image_store(pathlib.Path(folder), scales, shift)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no TransformWarning
            (image,) = describe_store(str(path))
    assert [list(level.scale) for level in image.levels] == scales
    assert all(list(level.translate) == shift for level in image.levels)
