"""What a PyPI or napari-hub visitor gets: the built wheel and sdist, read back.

Builds both with the project's own build backend (hatchling, as pip would) into a
temporary folder, and checks what the issue tracker asked for: the licence notice
travels with both, the classifiers are in the metadata and no project URL leads to
an address that is not public yet, the description is the README and every file it
links to travels in the sdist, and the npe2 manifest is inside the wheel.
"""

from __future__ import annotations

import email
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A markdown link or image whose target is neither absolute nor an anchor of the same page.
RELATIVE_LINK = re.compile(r"\]\((?!https?://|#)([^)]+)\)")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    script = (
        "import sys, hatchling.build as b; "
        "print(b.build_wheel(sys.argv[1])); print(b.build_sdist(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    wheel, sdist = done.stdout.split()
    return out / wheel, out / sdist


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_licence_notice_travels_with_wheel_and_sdist(built: tuple[Path, Path]) -> None:
    wheel, sdist = built
    notice = (ROOT / "LICENSE").read_text()
    assert "BSD 3-Clause" in notice
    with zipfile.ZipFile(wheel) as archive:
        (licence,) = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(licence).decode() == notice
    with tarfile.open(sdist) as archive:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in archive.getnames()}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "napari.yaml"} <= names
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == "BSD-3-Clause"
    assert metadata.get_all("License-File") == ["LICENSE"]


def test_classifiers_and_no_link_that_leads_nowhere(built: tuple[Path, Path]) -> None:
    metadata = _metadata(built[0])
    classifiers = metadata.get_all("Classifier") or []
    assert "Framework :: napari" in classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert "License-Expression" in metadata  # the licence is an SPDX expression, no classifier
    # The repository's address is not public yet: a project URL would lead nowhere (the
    # github.com ones did). Add them when it is, with the README's links made absolute.
    assert metadata.get_all("Project-URL") is None


def test_the_description_is_the_readme_and_its_links_travel_in_the_sdist(
    built: tuple[Path, Path],
) -> None:
    wheel, sdist = built
    metadata = _metadata(wheel)
    assert metadata["Description-Content-Type"] == "text/markdown"
    readme = (ROOT / "README.md").read_text()
    description = metadata.get_payload(decode=True)
    assert isinstance(description, bytes)
    assert description.decode("utf-8").strip() == readme.strip()
    relative = RELATIVE_LINK.findall(readme)
    assert relative, "the README links its docs relatively"
    with tarfile.open(sdist) as archive:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in archive.getnames()}
    for target in relative:  # each to a file a reader of the sdist has
        assert target.split("#", 1)[0] in names, target


def test_the_wheel_carries_the_npe2_manifest(built: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(built[0]) as archive:
        manifest = archive.read("napari_lazy_zarr/napari.yaml").decode()
        entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        assert "napari_lazy_zarr:napari.yaml" in archive.read(entry_points).decode()
    assert manifest == (ROOT / "napari.yaml").read_text()
