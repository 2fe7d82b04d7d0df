"""Write docs/architecture.md's package map from the code.

Run `./dev run python docs/architecture_map.py`.

Every module of `src/napari_lazy_zarr`, folder by folder, with the summary line of its
docstring, goes between the two marker comments of docs/architecture.md. With `--check` it
writes nothing and exits 1 when the page is not what the code says (tests/test_docs.py runs
that check, so a module added, moved or removed without the page fails the suite);
`--lines` prints each module's line count as well (for closing notes and reviews).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "napari_lazy_zarr"
PAGE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- package map: written by docs/architecture_map.py, do not edit by hand -->"
END = "<!-- end of the package map -->"

# Folders in the order of the layers, bottom up (tests/core/test_layers.py holds the rule).
FOLDERS = (
    "core",
    "core/storage",
    "core/sources",
    "core/formats",
    "core/cache",
    "core/reading",
    "core/viewport",
    "",
    "widgets",
)
FOLDER_TITLES = {
    "core": "leaves and the public API (errors, keys, states, executors, settings, testing)",
    "core/storage": "bytes: bounded reads of files, stores, HTTP and references",
    "core/sources": "chunks: every chunk source, over storage",
    "core/formats": "metadata → layer specs; nothing here reads a chunk",
    "core/cache": "residency: what is in memory, and the workers filling it",
    "core/reading": "one view's cells assembled from resident chunks",
    "core/viewport": "one layer's request cycle (pure policy beside the stateful controller)",
    "": "the napari glue",
    "widgets": "the chunk inspector (the only package importing Qt)",
}


def modules() -> list[Path]:
    """Every module of the package, as paths relative to `PACKAGE`."""
    return sorted(path.relative_to(PACKAGE) for path in PACKAGE.rglob("*.py"))


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / path).read_text(encoding="utf-8")))
    if not docstring:
        raise SystemExit(f"{path}: no module docstring; the package map needs one")
    return " ".join(docstring.split("\n\n")[0].split()).replace("|", "\\|")


def folder_of(path: Path) -> str:
    return path.parent.as_posix() if path.parent != Path() else ""


def package_map(lines: bool = False) -> str:
    """The map as markdown: one table per folder, one row per module."""
    found = modules()
    unknown = sorted({folder_of(p) for p in found} - set(FOLDERS))
    if unknown:
        raise SystemExit(f"folders missing from FOLDERS in {__file__}: {unknown}")
    parts: list[str] = []
    for folder in FOLDERS:
        members = [p for p in found if folder_of(p) == folder]
        if not members:
            continue
        shown = f"{folder}/" if folder else "napari_lazy_zarr/"
        parts.append(f"**`{shown}`** — {FOLDER_TITLES[folder]}\n")
        parts.append("| module | lines | holds |" if lines else "| module | holds |")
        parts.append("|---|---|---|" if lines else "|---|---|")
        for path in members:
            name = f"`{path.as_posix()}`"
            if lines:
                count = len((PACKAGE / path).read_text(encoding="utf-8").splitlines())
                parts.append(f"| {name} | {count} | {summary(path)} |")
            else:
                parts.append(f"| {name} | {summary(path)} |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def page_with_map(page: str) -> str:
    """`page` with the text between the markers replaced by the current map."""
    head, begin, rest = page.partition(BEGIN)
    _old, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} ... {END!r} are missing")
    return f"{head}{BEGIN}\n\n{package_map()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    parser.add_argument("--lines", action="store_true", help="print the map with line counts")
    args = parser.parse_args(argv)
    if args.lines:
        print(package_map(lines=True))
        return 0
    page = PAGE.read_text(encoding="utf-8")
    wanted = page_with_map(page)
    if args.check:
        if wanted != page:
            print(f"{PAGE} is out of date: run `./dev run python docs/architecture_map.py`")
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
