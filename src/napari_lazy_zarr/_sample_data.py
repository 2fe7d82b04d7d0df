"""napari sample data: the synthetic cells OME-Zarr pyramid, computed as it is viewed.

Each level is a `FunctionSource` over `synthetic_cells`
(`core.sample.sample_level_sources`), read like any store through the plugin's
chunk cache: a chunk is computed by the cache's workers when a view needs it,
never on napari's main thread, and nothing is written. The same pyramid as an
OME-Zarr store on disk: `write_sample` (``napari-lazy-zarr sample --write
PATH``), or `sample_path` for scripts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.sample import (
    SAMPLE_SIZE,
    default_cache_dir,
    is_complete,
    sample_image_spec,
    sample_level_sources,
    write_sample_ome_zarr,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_lazy_zarr.core.sources import ChunkSource

__all__ = [
    "SAMPLE_SIZE",
    "sample_layers",
    "sample_path",
    "sample_pyramid",
    "sample_title",
    "write_sample",
]

LayerDataTuple = tuple[Any, dict[str, Any], str]


def sample_title(size: int = SAMPLE_SIZE) -> str:
    """What the sample of `size`² is called where a store's location would be shown."""
    return f"napari-lazy-zarr sample ({size}x{size} synthetic cells)"


def sample_layers(size: int = SAMPLE_SIZE) -> list[LayerDataTuple]:
    """The sample pyramid of `size`² as lazy, non-blocking layer data; returns at once."""
    from napari_lazy_zarr._reader import layer_data, shared_cache

    sources: list[ChunkSource] = [*sample_level_sources(size)]
    return layer_data(sample_title(size), sample_image_spec(size), shared_cache(), sources=sources)


def sample_pyramid() -> list[LayerDataTuple]:
    """The npe2 sample-data command: the 32768² pyramid, shown at once (`sample_layers`)."""
    from napari_lazy_zarr._reader import watch_current_viewer

    layers = sample_layers(SAMPLE_SIZE)
    watch_current_viewer()
    return layers


def write_sample(
    path: str | os.PathLike[str],
    size: int = SAMPLE_SIZE,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write the sample pyramid of `size`² as an OME-Zarr 0.5 store at `path`, in this call.

    About a minute and 360 MB for 32768² on 2 cores. `progress` is called with
    (chunks written, chunks in all) after every chunk. A store interrupted
    midway has no OME metadata (`core.sample.is_complete`): written again, it
    is replaced.

    Raises
    ------
    FileExistsError
        `path` exists and is neither empty nor a sample store (nothing of the
        user's is ever overwritten).
    """
    target = Path(path)
    if target.exists() and not _replaceable(target):
        raise FileExistsError(
            f"{target}: exists and is not a napari-lazy-zarr sample store; "
            "give a new path (the store is written there)"
        )
    write_sample_ome_zarr(target, size=size, progress=progress)
    return target


def _replaceable(path: Path) -> bool:
    """An empty folder, or a (complete or interrupted) sample store of ours."""
    if not path.is_dir():
        return False
    names = set(os.listdir(path))
    levels = {name for name in names if name.isdigit()}
    return names <= {"zarr.json", ".complete", *levels} and (not names or "zarr.json" in names)


def sample_path(size: int = SAMPLE_SIZE, directory: Path | None = None) -> Path:
    """The complete sample OME-Zarr pyramid of `size`², written first if need be (blocking).

    For scripts: ``cells-{size}.ome.zarr`` in `directory` (default: the user
    cache directory, `core.sample.default_cache_dir`), written by `write_sample`
    the first time and reused afterwards.
    """
    path = (default_cache_dir() if directory is None else directory) / f"cells-{size}.ome.zarr"
    if not is_complete(path):
        print(f"napari-lazy-zarr: writing {path} (once; later runs reuse it) ...", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_sample(path, size)
    return path
