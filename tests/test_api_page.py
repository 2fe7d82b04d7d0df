"""docs/api.md against the package: every name it documents is importable where it says.

The page said "Everything below is importable from `napari_lazy_zarr`", false for about 60
names (`ViewController`, `AxisMap`, `HttpStore`, `LoadClass`, `EventReason`...). Each section
now names the modules its names come from; this test imports each documented class (a
CamelCase name) and each function a bullet documents (``- `name(...)` ``) from one of the
modules its section names, and fails on a name none of them has.
"""

from __future__ import annotations

import builtins
import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
MODULE = re.compile(r"`((?:napari_lazy_zarr|zarr_indexing)(?:\.[a-z_]+)*)`")
CLASS = re.compile(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)[`(\[]")
FUNCTION = re.compile(r"^- `([a-z_][a-z0-9_]*)\(", re.MULTILINE)


def _sections() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    return [(part.splitlines()[0], part) for part in parts[1:]]


def _modules(section: str) -> list[ModuleType]:
    """The modules `section` names (for `a.b.name`, a function named in full: `a.b`)."""
    found: dict[str, ModuleType] = {}
    for dotted in MODULE.findall(section):
        parts = dotted.split(".")
        while parts:
            try:
                module = importlib.import_module(".".join(parts))
            except ModuleNotFoundError:
                parts.pop()
                continue
            found[module.__name__] = module
            break
    return list(found.values())


def test_every_documented_name_is_importable_where_its_section_says() -> None:
    wrong: list[str] = []
    checked = 0
    for title, section in _sections():
        modules = _modules(section)
        assert modules, f"section {title!r} names no module its names come from"
        for name in dict.fromkeys(CLASS.findall(section) + FUNCTION.findall(section)):
            checked += 1
            if not any(hasattr(module, name) for module in (*modules, builtins)):
                wrong.append(f"{title}: {name} (from {[m.__name__ for m in modules]})")
    assert checked > 60  # the page documents its names (a guard against passing vacuously)
    assert not wrong, "\n".join(wrong)


def test_the_open_array_line_gives_its_whole_signature() -> None:
    import inspect

    from napari_lazy_zarr import open_array

    text = PAGE.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("- `open_array("))
    for parameter in list(inspect.signature(open_array).parameters)[1:]:
        assert f"{parameter}=" in line, parameter
