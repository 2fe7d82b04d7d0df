"""Short names for chunks: relative to the store, readable in a narrow dock.

A chunk key's source is the array's whole location (``file:///…/image.ome.zarr/0``),
which fills a table column before the chunk's position appears. Chunks of the
viewer's layers are named by level and grid position instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from napari_lazy_zarr.core.keys import chunk_coords

if TYPE_CHECKING:
    from collections.abc import Hashable, Sequence

    from napari_lazy_zarr.core import ChunkKey, ChunkSource
    from napari_lazy_zarr.widgets._mirror import LayerSources

__all__ = ["ChunkNamer", "short_source"]


def short_source(identity: Hashable) -> str:
    """A source's identity without its directories: the store's name and the array's path.

    Examples
    --------
    >>> short_source("file:///data/run1/image.ome.zarr/0")
    'image.ome.zarr/0'
    >>> short_source(("file:///data/a.zarr", "decimated", 4, (0, 1)))
    'a.zarr ÷4'
    >>> short_source(("file:///data/row.zarr", "decimated", (2, 8), (0, 1)))
    'row.zarr ÷2×8'
    >>> short_source("memory-array")
    'memory-array'
    """
    if isinstance(identity, tuple) and len(identity) >= 3 and identity[1] == "decimated":
        factor = identity[2]  # one factor, or one per axis (a row's levels)
        shown = "×".join(map(str, factor)) if isinstance(factor, tuple) else factor
        return f"{short_source(identity[0])} ÷{shown}"
    text = str(identity).rstrip("/")
    parts = [p for p in text.split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        if ".zarr" in parts[i] or parts[i].endswith(".json"):
            return "/".join(parts[i:])
    return "/".join(parts[-2:]) if len(parts) > 1 and "://" not in text[-8:] else text


class ChunkNamer:
    """Names chunks by layer, level and grid position: ``L1 (3, 5)``.

    Chunks of `inspected` get the level and position only; other layers' chunks
    are prefixed with the layer's name; chunks of any other source keep a short
    form of their key (`short_source`).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkRef
    >>> from napari_lazy_zarr.widgets._mirror import LayerSources
    >>> levels = (ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="file:///d/a.zarr/0"),)
    >>> namer = ChunkNamer([LayerSources("cells", levels)], inspected="cells")
    >>> namer(ChunkRef.of(levels[0], (1, 0)).key)
    'L0 (1, 0)'
    >>> ChunkNamer([LayerSources("cells", levels)], inspected=None)(
    ...     ChunkRef.of(levels[0], (1, 1)).key)
    'cells L0 (1, 1)'
    >>> other = ArraySource(np.zeros((8,)), chunks=(4,), name="file:///d/b.zarr/0")
    >>> namer(ChunkRef.of(other, (1,)).key)
    'b.zarr/0[4:8]'
    """

    def __init__(self, layers: Sequence[LayerSources], inspected: str | None) -> None:
        self._inspected = inspected
        self._levels: dict[Hashable, list[tuple[LayerSources, int, ChunkSource]]] = {}
        for layer in layers:
            for level, source in enumerate(layer.levels):
                self._levels.setdefault(source.identity, []).append((layer, level, source))
        self._names: dict[ChunkKey, str] = {}

    def __call__(self, key: ChunkKey) -> str:
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = self._name(key)
            if len(self._names) > 100_000:  # a bounded memo
                self._names.clear()
        return name

    def _name(self, key: ChunkKey) -> str:
        owners = self._levels.get(key.source)
        if not owners:
            box = ", ".join(
                f"{lo}:{hi}" for lo, hi in zip(key.inclusive_min, key.exclusive_max, strict=True)
            )
            return f"{short_source(key.source)}[{box}]"
        layer, level, source = next(
            ((layer, level, s) for layer, level, s in owners if layer.owns(key)), owners[0]
        )
        position = "(" + ", ".join(str(c) for c in chunk_coords(source, key)) + ")"
        if layer.name == self._inspected:
            return f"L{level} {position}"
        return f"{layer.name} L{level} {position}"
