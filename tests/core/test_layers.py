"""The import layers of `napari_lazy_zarr.core` (issue 21), read from the source with `ast`.

As the "no Qt in core" guard in ``test_api.py`` does for foreign packages, this
checks the engine's own imports: the modules already moved into the layered
layout (``shared/LAYOUT.md``) import only downward, no module imports a private
name from another one nor a private module of another package, and the core
modules import one another without a cycle. Imports under ``if TYPE_CHECKING:``
never run, so they create no cycle and are left out of the layer and cycle
checks (not of the private-name check); imports inside functions run, so they
count.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import napari_lazy_zarr.core

CORE = Path(napari_lazy_zarr.core.__file__).parent
PACKAGE = "napari_lazy_zarr.core"

# Bottom-up: each layer may import the layers it lists (and itself, for a package); a
# dotted entry allows that one module of a layer, not the rest of it.
# Modules not named here are still in the flat layout and are not checked yet;
# every layer of the layout is here.
LEAVES = ("errors", "slots", "keys", "states", "executors", "remote_values")
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    # A cheaper `__init__` for frozen dataclasses made per chunk: a leaf.
    "slots": frozenset(),
    "keys": frozenset({"errors"}),
    "states": frozenset({"errors", "slots"}),
    "executors": frozenset({"errors"}),
    # The syntax of the remote settings' values (endpoints, headers, proxies): a leaf.
    "remote_values": frozenset({"errors"}),
    # Configuration everyone reads: the leaves, nothing above them.
    "settings": frozenset({*LEAVES}),
    # Bounded byte reads: the leaves and the settings, nothing that knows a chunk.
    "storage": frozenset({*LEAVES, "settings", "storage"}),
    # Chunks: every source, over storage, and the recycled memory (`buffers`) the zarr
    # source decodes into.
    "sources": frozenset({*LEAVES, "settings", "storage", "sources", "buffers"}),
    # Metadata -> layer specs: opens sources, reads no chunk itself.
    "formats": frozenset({*LEAVES, "settings", "storage", "sources", "formats"}),
    # One view's cells from resident chunks: the cache, and of the sources only the protocol.
    "reading": frozenset({*LEAVES, "cache", "sources.protocol", "reading"}),
    # `open_array`: the one module tying reading, sources, formats and the cache together.
    "open": frozenset({*LEAVES, "settings", "storage", "sources", "formats", "cache", "reading"}),
    # Test aids shipped with the engine: the leaves and the chunk source protocol only.
    "testing": frozenset({*LEAVES, "sources.protocol"}),
    # One layer's request cycle: the leaves, what it reads through (the reading layer and
    # the cache), of the sources only the protocol (`is_derived`), and the recycled memory
    # its frames are built in (`buffers`).
    "viewport": frozenset(
        {*LEAVES, "reading", "cache", "sources.protocol", "buffers", "viewport"}
    ),
    # Recycled memory for decoded chunks (the zarr source decodes into it): a leaf.
    "buffers": frozenset(),
    # What is in memory and the workers filling it: the leaves and the chunk source
    # protocol, never storage or formats.
    "cache": frozenset({*LEAVES, "sources.protocol", "cache"}),
}

# The protocol every source implements sits at the bottom of `sources`: keys and errors only
# (type-only imports included), so the cache and the readers can depend on it alone.
PROTOCOL_IMPORTS: frozenset[str] = frozenset({"keys", "errors"})

# Import cycles among core modules that are left, each with its reason (none is: issue 21
# broke the three it found). An entry that no longer occurs fails the test.
CYCLES_LEFT: dict[frozenset[str], str] = {}

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
    if not found.target and found.name and _is_module(found.name):
        return found.name
    if found.name and _is_module(f"{found.target}.{found.name}".lstrip(".")):
        return f"{found.target}.{found.name}".lstrip(".")
    return found.target


def _allowed(target: str, allowed: frozenset[str]) -> bool:
    """Whether module `target` is in a layer of `allowed` (or is a dotted entry of it)."""
    return target.split(".")[0] in allowed or any(
        "." in entry and (target == entry or target.startswith(entry + ".")) for entry in allowed
    )


def _import_graph() -> dict[str, set[str]]:
    """Module -> the core modules it imports when run (``""`` is the core package).

    A submodule's import also runs its package's ``__init__``; that implicit edge is
    left out (a package re-exporting its modules would otherwise be a cycle with each).
    """
    graph: dict[str, set[str]] = {}
    for found in _all_imports():
        if found.type_only:
            continue
        target = _resolved(found)
        if target != found.module:
            graph.setdefault(found.module, set()).add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {t for targets in graph.values() for t in targets}):
        if node not in index:
            visit(node)
    return found


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
        and not _allowed(_resolved(found), ALLOWED[layer])
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


def test_the_source_protocol_imports_only_keys_and_errors() -> None:
    imports = [found for found in _all_imports() if found.module == "sources.protocol"]
    assert imports, "sources.protocol imports nothing of the engine: the scan is out of date"
    wrong = [
        f"sources.protocol:{found.line} imports {_resolved(found)}"
        for found in imports
        if _resolved(found).split(".")[0] not in PROTOCOL_IMPORTS
    ]
    assert not wrong, f"sources.protocol may import only {sorted(PROTOCOL_IMPORTS)}: {wrong}"


def test_private_modules_are_imported_only_inside_their_package() -> None:
    # `sources/_decode.py` is the sources' own helper: a format or a reader uses what
    # the package re-exports instead.
    wrong = []
    for found in _all_imports():
        target = _resolved(found)
        parts = target.split(".")
        private = [i for i, part in enumerate(parts) if part.startswith("_")]
        if not private:
            continue
        package = ".".join(parts[: private[0]])
        if not (found.module == package or found.module.startswith(package + ".")):
            wrong.append(f"{found.module}:{found.line} imports {target}")
    assert not wrong, f"private modules imported from outside their package: {wrong}"


def test_the_engine_has_no_import_cycle() -> None:
    graph = _import_graph()
    assert "sources.zarr" in graph["sources.backends"]  # the graph sees the engine
    cycles = {frozenset(cycle): cycle for cycle in _cycles(graph)}
    new = [cycle for key, cycle in cycles.items() if key not in CYCLES_LEFT]
    assert not new, f"import cycles among core modules (run-time imports): {new}"
    gone = [sorted(key) for key in CYCLES_LEFT if key not in cycles]
    assert not gone, f"no longer cycles, strike them off CYCLES_LEFT: {gone}"


def test_the_cycle_finder_finds_cycles() -> None:
    # A guard against a finder that never reports anything (and so would pass vacuously).
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]
