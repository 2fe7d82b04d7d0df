"""napari sample data: the synthetic cells OME-Zarr pyramid, generated once and kept."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.sample import default_cache_dir, write_sample_ome_zarr

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["sample_path", "sample_pyramid"]

SAMPLE_SIZE = 32768


def sample_path(size: int = SAMPLE_SIZE, directory: Path | None = None) -> Path:
    """The sample OME-Zarr pyramid of `size`², written on first use (about a minute and
    360 MB for 32768² on 2 cores) into the user cache directory and reused afterwards."""
    directory = default_cache_dir() if directory is None else directory
    path = directory / f"cells-{size}.ome.zarr"
    marker = path / ".complete"
    if not marker.exists():
        print(f"napari-lazy-zarr: generating {path} (once; later runs reuse it) ...", flush=True)
        start = time.perf_counter()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_sample_ome_zarr(path, size=size)
        marker.touch()
        print(f"napari-lazy-zarr: generated in {time.perf_counter() - start:.0f} s", flush=True)
    return path


def sample_pyramid() -> list[tuple[Any, dict[str, Any], str]]:
    """The npe2 sample-data command: the pyramid as lazy, non-blocking layer data."""
    from napari_lazy_zarr._reader import read_zarr

    return read_zarr(str(sample_path()))
