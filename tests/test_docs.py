"""docs/architecture.md against the code: the package map and the viewport's path, hop by hop.

The map is written from the modules' docstrings by ``docs/architecture_map.py``; these tests
fail when a module is added, moved or removed (or its summary changed) without the page,
and when a hop of the one-viewport path names a function that does not exist.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "napari_lazy_zarr"
PAGE = ROOT / "docs" / "architecture.md"
# A hop names its code as `path/inside/the/package.py::Qualified.name`.
HOP = re.compile(r"`([\w/]+\.py)::([\w.]+)`")


def _map_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "architecture_map", ROOT / "docs" / "architecture_map.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_map_is_what_the_code_says() -> None:
    script = _map_script()
    assert script.main(["--check"]) == 0, "run `./dev run python docs/architecture_map.py`"


def test_every_module_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    found = sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py"))
    assert len(found) > 60  # the scan sees the package (a guard against passing vacuously)
    missing = [name for name in found if f"`{name}`" not in page]
    assert not missing, f"modules missing from {PAGE.name}: {missing}"


def _defines(path: Path, qualified: str) -> bool:
    """Whether module `path` defines `qualified` (a function, class, or a class's method)."""
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for part in qualified.split("."):
        match = [
            node
            for node in scope
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name == part
        ]
        if not match:
            return False
        scope = match[0].body if isinstance(match[0], ast.ClassDef) else []
    return True


def test_every_hop_of_the_viewport_path_names_real_code() -> None:
    page = PAGE.read_text(encoding="utf-8")
    section = page.partition("## One viewport, hop by hop")[2].partition("\n## ")[0]
    hops = HOP.findall(section)
    assert len(hops) >= 10, "the hop-by-hop section is missing or names no code"
    wrong = [
        f"{module}::{name}"
        for module, name in hops
        if not (PACKAGE / module).is_file() or not _defines(PACKAGE / module, name)
    ]
    assert not wrong, f"hops naming code that does not exist: {wrong}"


def test_the_hop_check_can_fail() -> None:
    reader = PACKAGE / "core" / "viewport" / "controller.py"
    assert _defines(reader, "ViewController.read")
    assert not _defines(reader, "ViewController.no_such_method")
    assert not _defines(reader, "NoSuchClass")
