"""The docs as a reader uses them: every code block of README.md and docs/*.md runs as written.

- Python blocks run in a folder holding the stores they open (written at test time with
  zarr-python): a page's blocks in order, in one namespace, as a reader pastes them; blocks of
  ``>>>`` lines are a page's doctest. An undefined name, a wrong signature or an error fails.
- TOML blocks (the settings file's examples) load as the settings file (`current_settings`):
  a key that is not a setting, or a value out of bounds, fails.
- Every menu path they name (*File ▸ Open Sample ▸ ...*, *Plugins ▸ ...*) is an item of a real
  napari window's menus, as napari 0.9 spells it.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from tests.conformance.cases_ome_versions import write_scene

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
MENU_PATH = re.compile(r"\*((?:File|View|Layers|Plugins|Window|Help) ▸ [^*]+?)\*")


def _blocks(page: Path, language: str) -> list[str]:
    return [
        body for lang, body in FENCE.findall(page.read_text(encoding="utf-8")) if lang == language
    ]


PYTHON_PAGES = [page for page in PAGES if _blocks(page, "python")]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stores the blocks open, by the names they use."""
    folder = tmp_path_factory.mktemp("docs")
    # README: an image large enough for its reads ([0:2048, 4096:6144], a point at row 5000).
    y, x = np.indices((6144, 6144), dtype=np.uint16)
    image = zarr.create_array(
        str(folder / "image.zarr"), shape=(6144, 6144), chunks=(512, 512), dtype="u2"
    )
    image[...] = (y // 7 + x // 5) % 4096
    # docs/dask.md and the user guide: a scan to filter, a group holding an array at A/1/0.
    scan = zarr.create_array(
        str(folder / "scan.zarr"), shape=(2048, 2048), chunks=(256, 256), dtype="u2"
    )
    scan[...] = ((y[:2048, :2048] ^ x[:2048, :2048]) % 1024).astype("u2")
    plate = zarr.open_group(str(folder / "plate.zarr"), mode="w")
    plate.create_array("A/1/0", shape=(64, 64), dtype="u1")[...] = 1
    # The user guide's coordinate systems: an OME-Zarr 0.6 scene with a system "atlas"
    # (ngff-zarr writes it: scene.ome.zarr).
    write_scene(folder)
    return folder


def test_the_docs_have_blocks_to_run() -> None:
    assert {page.name for page in PYTHON_PAGES} >= {
        "README.md",
        "user-guide.md",
        "dask.md",
        "composite-sources.md",
    }


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda page: page.name)
def test_every_python_block_runs_as_written(
    page: Path,
    stores: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_napari_viewer: Callable[..., Any],  # a display, and napari's leak checks
) -> None:
    import napari

    monkeypatch.chdir(stores)
    blocks = _blocks(page, "python")
    examples = "\n".join(block for block in blocks if block.lstrip().startswith(">>>"))
    scripts = [block for block in blocks if not block.lstrip().startswith(">>>")]
    try:
        if examples:
            test = doctest.DocTestParser().get_doctest(examples, {}, page.name, str(page), 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            runner.run(test)
            assert runner.failures == 0, f"{page.name}: {runner.failures} examples failed"
        namespace: dict[str, Any] = {"__name__": f"docs.{page.stem}"}
        for number, block in enumerate(scripts):
            exec(compile(block, f"{page.name}, Python block {number + 1}", "exec"), namespace)
    finally:
        napari.Viewer.close_all()  # the blocks' own viewers (their layers' work cancelled)


@pytest.mark.parametrize(
    "page", [page for page in PAGES if _blocks(page, "toml")], ids=lambda page: page.name
)
def test_every_settings_file_example_loads(page: Path, tmp_path: Path) -> None:
    from napari_lazy_zarr.core.settings import SETTINGS_VARIABLE, current_settings

    for number, block in enumerate(_blocks(page, "toml")):
        path = tmp_path / f"settings-{number}.toml"
        path.write_text(block, encoding="utf-8")
        current_settings({SETTINGS_VARIABLE: str(path)})  # raises MetadataError naming the key


def _menu_paths(viewer: Any) -> set[str]:
    """Every item of the window's menus, as "File ▸ Open Sample ▸ ..." (napari fills some
    submenus when they are about to show)."""
    found: set[str] = set()

    def walk(menu: Any, path: list[str]) -> None:
        menu.aboutToShow.emit()
        for action in menu.actions():
            if action.isSeparator():
                continue
            text = action.text().replace("&", "")
            if action.menu() is not None:
                walk(action.menu(), [*path, text])
            else:
                found.add(" ▸ ".join([*path, text]))

    for action in viewer.window._qt_window.menuBar().actions():
        if action.menu() is not None:
            walk(action.menu(), [action.text().replace("&", "")])
    return found


def test_every_menu_path_the_docs_name_is_in_napari(
    make_napari_viewer: Callable[..., Any],
) -> None:
    viewer = make_napari_viewer(show=True)
    real = _menu_paths(viewer)
    named = {
        " ".join(match.split()): page.name
        for page in PAGES
        for match in MENU_PATH.findall(page.read_text(encoding="utf-8"))
    }
    assert len(named) >= 4  # the inspector, the sample, Preferences, Open
    missing = {path: page for path, page in named.items() if path not in real}
    assert not missing, f"menu paths napari does not have: {missing}"
