"""The import layers of `napari_lazy_zarr.core` (issue 21), read from the source with `ast`.

As the "no Qt in core" guard in ``test_api.py`` does for foreign packages, this
checks the engine's own imports: the modules already moved into the layered
layout (``shared/LAYOUT.md``) import only downward, and no module imports a
private name from another one. Imports under ``if TYPE_CHECKING:`` never run,
so they create no cycle and are left out of the layer check (not of the
private-name check); imports inside functions run, so they count.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import napari_lazy_zarr.core

CORE = Path(napari_lazy_zarr.core.__file__).parent
PACKAGE = "napari_lazy_zarr.core"

# Bottom-up: each layer may import the layers it lists (and itself, for a package).
# Modules not named here are still in the flat layout and are not checked yet;
# issue 21's later steps add `sources`, `formats`, `cache`, `reading`, `viewport`.
LEAVES = ("errors", "keys", "states", "executors")
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "keys": frozenset({"errors"}),
    "states": frozenset({"errors"}),
    "executors": frozenset({"errors"}),
    # Read-grid helpers the sources share (`sources/_grid.py` once sources/ exists).
    "_grid": frozenset(),
    # Configuration everyone reads: the leaves, nothing above them.
    "settings": frozenset({*LEAVES}),
    # Bounded byte reads: the leaves and the settings, nothing that knows a chunk.
    "storage": frozenset({*LEAVES, "settings", "storage"}),
    # Recycled memory for decoded chunks (the zarr source decodes into it): a leaf.
    "buffers": frozenset(),
    # What is in memory and the workers filling it: the leaves and the chunk source
    # protocol (`source` today, `sources.protocol` once sources/ exists), never storage
    # or formats.
    "cache": frozenset({*LEAVES, "source", "sources"}),
}

# Private names imported across modules: none is left (issue 21 made the 16 it found public,
# most of them in `storage/vetting.py` and `_grid.py`). Should one be allowed again, it
# goes here with its reason; an entry that no longer occurs fails the test.
PRIVATE_IMPORTS_LEFT: frozenset[tuple[str, str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    """One ``from napari_lazy_zarr.core.<target> import <name>`` in module `module`."""

    module: str
    target: str
    name: str
    type_only: bool
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(path: Path) -> list[Import]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module + ".").startswith(PACKAGE + "."):
                target = node.module.removeprefix(PACKAGE).lstrip(".")
            else:
                return
            for alias in node.names:
                found.append(Import(module, target, alias.name, type_only, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    target = alias.name.removeprefix(PACKAGE + ".")
                    found.append(Import(module, target, "", type_only, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return found


def _all_imports() -> list[Import]:
    return [found for path in sorted(CORE.rglob("*.py")) for found in _imports_of(path)]


def _is_module(dotted: str) -> bool:
    path = CORE.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _layer(module: str) -> str | None:
    top = module.split(".")[0]
    return top if top in ALLOWED else None


def _resolved(found: Import) -> str:
    """The module imported from: ``from core import keys`` imports module ``keys``."""
    if not found.target and found.name:
        return found.name
    if found.name and _is_module(f"{found.target}.{found.name}"):
        return f"{found.target}.{found.name}"
    return found.target


def test_the_parser_sees_the_engine() -> None:
    # A guard against a scan that finds nothing (and so would pass vacuously).
    imports = _all_imports()
    assert len(imports) > 200
    assert any(
        (found.module, found.target, found.name, found.type_only)
        == ("cache.cache", "states", "LEGAL_MOVES", False)
        for found in imports
    )
    assert any(found.type_only for found in imports)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_downward(layer: str) -> None:
    modules = [
        _module_name(path)
        for path in sorted(CORE.rglob("*.py"))
        if _layer(_module_name(path)) == layer
    ]
    assert modules, f"no module of layer {layer!r}: the table is out of date"
    wrong = [
        f"{found.module}:{found.line} imports {_resolved(found)}"
        for found in _all_imports()
        if found.module in modules
        and not found.type_only
        and _resolved(found).split(".")[0] not in ALLOWED[layer]
        and _resolved(found).split(".")[0] != layer
    ]
    assert not wrong, f"{layer} may import only {sorted(ALLOWED[layer])}: {wrong}"


def test_no_private_name_is_imported_across_modules() -> None:
    private = {
        (found.module, found.target, found.name)
        for found in _all_imports()
        if found.name.startswith("_")
        and not found.name.startswith("__")
        # A private module (`_zarr_compat`) is how shared helpers are meant to be kept.
        and not _is_module(f"{found.target}.{found.name}".lstrip("."))
        and found.target != found.module
    }
    new = sorted(private - PRIVATE_IMPORTS_LEFT)
    assert not new, f"private names imported across modules (make them public): {new}"
    gone = sorted(PRIVATE_IMPORTS_LEFT - private)
    assert not gone, f"no longer imported, strike them off PRIVATE_IMPORTS_LEFT: {gone}"
