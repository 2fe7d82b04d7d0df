"""The conformance corpus (`tests/conformance/cases.py`) in a real napari viewer (Xvfb).

Every store is written at test time by a third-party writer (ome-zarr-py,
zarr-python, TensorStore, kerchunk; a bioformats2raw layout; the lab writers of
`tests/conformance/cases_labs.py`: ngff-zarr, iohub, bioio-ome-zarr, spatialdata),
opened with this plugin, and its pixels compared with the writer's arrays — level 0 read through
the layer's lazy arrays and the slice napari displays. Where napari-ome-zarr
reads the case, its layers are the reference for the structure: layer count,
names, channel split, colormaps, contrast limits, visibility, scale, translate,
units and label colours. One viewer per writer keeps the corpus fast.
`docs/compatibility.py` runs the same cases and checks into docs/compatibility.md.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from napari_lazy_zarr._reader import napari_get_reader
from napari_lazy_zarr.core.errors import MetadataWarning
from tests.conformance.cases import GROUPS, cases_of
from tests.conformance.cases_labs import SPATIALDATA_WARNINGS
from tests.conformance.cases_odd import NOT_IMAGES_WARNING, TEXTURE_WARNING
from tests.conformance.cases_ome_versions import LegacyWriterUnavailable
from tests.conformance.check import open_case, structure_differences

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

# Cases this plugin does not read correctly, with the reason (also marked in the table).
KNOWN_FAILURES: dict[str, str] = {}

# Warnings this plugin gives by design for a writer's stores (MetadataWarning messages, as
# regular expressions; docs/user-guide.md says why). Any other warning fails the case.
EXPECTED_WARNINGS: dict[str, str] = {
    "spatialdata": SPATIALDATA_WARNINGS,
    "zarr-python + strings": NOT_IMAGES_WARNING,
}

# napari's own warnings for a writer's stores (regular expressions), as its built-in reader
# gives them too.
NAPARI_WARNINGS: dict[str, str] = {"zarr-python row": TEXTURE_WARNING}

# Lab writers whose stores this plugin shows as napari-ome-zarr does (layer by layer). Not
# ngff-zarr (napari-ome-zarr drops its translations; unlabelled channels are named apart) nor
# spatialdata (element names and the "global" transform, which napari-ome-zarr ignores).
SAME_AS_REFERENCE = (
    "iohub",
    "bioio-ome-zarr",
    "ome-zarr-py 0.10",
    "ngff-zarr 0.6",
    "ome-zarr-py 0.6",
)

# Accepted differences from napari-ome-zarr's layers ("<case>: <difference>", regular
# expressions), each a choice of this plugin documented in docs/user-guide.md.
ACCEPTED_DIFFERENCES: tuple[str, ...] = (
    # Without an omero window the limits come from the whole coarsest level (every plane);
    # napari-ome-zarr leaves them to napari, which uses the plane shown first.
    r"ome-zarr-py/0\.[45] t?z?yx: layer 0 contrast_limits: .*",
    # ome-zarr-py 0.10 names a root image "/", which napari-ome-zarr shows as the layer's
    # name; this plugin names it after the store.
    r"ome-zarr-py 0\.10/.*: layer [01] name: v0\.[123] \[[01]\] != /( \[1\])?",
    r"ome-zarr-py 0\.10/.*: layer 0 contrast_limits: .*",
    # ngff-zarr writes no channel labels: napari-ome-zarr names every channel's layer alike.
    r"ngff-zarr 0\.6/0\.6 czyx: layer 0 name: img \[0\] != img",
    # A scene's layers: napari-ome-zarr puts the whole transformation in napari's affine and
    # drops the datasets' translation; this plugin folds a scale and translation into the
    # layer's own and keeps the translation (tests/napari/test_ome_v06.py compares where
    # both put each pixel: they differ by the dropped translation alone).
    r"ngff-zarr 0\.6/scene, .*: layer \d (scale|translate|affine): .*",
    # uint8 without an omero window: napari-ome-zarr leaves the limits to napari (the dtype's
    # range here); this plugin samples the data (as for ome-zarr-py's 0.4 images above).
    r"ngff-zarr 0\.6/scene, .*: layer \d contrast_limits: .*",
)


def _claimed(path: str) -> bool:
    """Whether napari offers `path` to this plugin (npe2: the manifest's patterns and
    directories) and the plugin's reader hook claims it, as File ▸ Open would."""
    from napari.plugins import _npe2

    return "napari-lazy-zarr" in _npe2.get_readers(path) and napari_get_reader(path) is not None


@pytest.mark.parametrize("group", GROUPS)
def test_conformance_corpus(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, tmp_path: Path, group: str
) -> None:
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(700, 600)
    failures: dict[str, str] = {}
    differences: dict[str, list[str]] = {}
    for number, case in enumerate(cases_of(group)):
        folder = tmp_path / str(number)
        folder.mkdir()
        try:
            written = case.write(folder)
        except LegacyWriterUnavailable as unavailable:  # the package index is unreachable
            pytest.skip(str(unavailable))
        if not _claimed(str(written.path)):
            failures[case.id] = "not offered to napari-lazy-zarr, or refused by its reader hook"
            continue
        with warnings.catch_warnings():
            if group in EXPECTED_WARNINGS:
                warnings.filterwarnings("ignore", EXPECTED_WARNINGS[group], MetadataWarning)
            if group in NAPARI_WARNINGS:
                warnings.filterwarnings("ignore", NAPARI_WARNINGS[group], UserWarning)
            ours = open_case(viewer, written, "napari-lazy-zarr", qtbot.waitUntil)
        if not ours.ok:
            failures[case.id] = ours.error or "; ".join(ours.problems)
        if case.group in (
            "ome-zarr-py",
            "bioformats2raw",
            "ome-zarr-py plate",
            *SAME_AS_REFERENCE,
        ):
            reference = open_case(viewer, written, "napari-ome-zarr", qtbot.waitUntil)
            if reference.opened:
                found = [
                    d
                    for d in structure_differences(ours, reference)
                    if not any(re.fullmatch(p, f"{case.id}: {d}") for p in ACCEPTED_DIFFERENCES)
                ]
                if found:
                    differences[case.id] = found
    expected = {k: v for k, v in KNOWN_FAILURES.items() if k.startswith(f"{group}/")}
    assert sorted(failures) == sorted(expected), failures
    assert differences == {}
