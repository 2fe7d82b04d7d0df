"""Deterministic synthetic images written chunk by chunk (demo, sample data, benchmarks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

__all__ = ["default_cache_dir", "synthetic_region", "write_sample_store"]


def default_cache_dir() -> Path:
    """Where generated stores are kept between runs (`$XDG_CACHE_HOME/napari-lazy-zarr`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "napari-lazy-zarr"


def synthetic_region(
    y0: int, x0: int, shape: tuple[int, int], *, seed: int = 0
) -> np.ndarray[Any, np.dtype[np.uint16]]:
    """A smooth uint16 image plus noise at `[y0:y0+h, x0:x0+w]` of an unbounded plane.

    Values depend only on the global coordinates and `seed`, so any tiling of
    the plane reproduces the same image.

    Examples
    --------
    >>> whole = synthetic_region(0, 0, (4, 6))
    >>> bool((synthetic_region(2, 3, (2, 3)) == whole[2:, 3:]).all())
    True
    """
    h, w = shape
    y = np.arange(y0, y0 + h, dtype=np.float32)[:, None]
    x = np.arange(x0, x0 + w, dtype=np.float32)[None, :]
    smooth = (
        20000.0
        + 12000.0 * np.sin(x / 911.0) * np.cos(y / 1237.0)
        + 6000.0 * np.sin((x + y) / 173.0)
    )
    # Noise that depends only on the global coordinates (a hash), not on the tiling.
    yy = np.arange(y0, y0 + h, dtype=np.uint64)[:, None]
    xx = np.arange(x0, x0 + w, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        mixed = (yy * np.uint64(0x9E3779B97F4A7C15)) ^ (xx * np.uint64(0xC2B2AE3D27D4EB4F))
        mixed ^= np.uint64(seed) * np.uint64(0x165667B19E3779F9)
        mixed ^= mixed >> np.uint64(29)
        mixed *= np.uint64(0xBF58476D1CE4E5B9)
        mixed ^= mixed >> np.uint64(32)
    noise = (mixed & np.uint64(0x3FF)).astype(np.float32) - 512.0
    return np.clip(smooth + noise, 0, 65535).astype(np.uint16)


def write_sample_store(
    path: str | os.PathLike[str],
    *,
    shape: tuple[int, int] = (8192, 8192),
    chunks: tuple[int, int] = (512, 512),
    shards: tuple[int, int] | None = None,
    zarr_format: Literal[2, 3] = 3,
    codec: Literal["zstd", "blosc-lz4"] = "zstd",
    seed: int = 0,
) -> zarr.Array[Any]:
    """Write a synthetic uint16 image as a zarr array, one write unit at a time.

    The write unit is the shard (or chunk), so memory stays bounded for
    stores of any size. Zstd level 1 by default; `blosc-lz4` for Zarr v2-style
    stores.
    """
    compressor: Any
    if zarr_format == 2:
        import numcodecs

        compressor = (
            numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
            if codec == "blosc-lz4"
            else numcodecs.Zstd(level=1)
        )
    else:
        compressor = (
            BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
            if codec == "blosc-lz4"
            else ZstdCodec(level=1)
        )
    array = zarr.create_array(
        store=os.fspath(path),
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype="uint16",
        compressors=compressor,
        zarr_format=zarr_format,
        fill_value=0,
        overwrite=True,
    )
    unit = shards if shards is not None else chunks
    for y0 in range(0, shape[0], unit[0]):
        for x0 in range(0, shape[1], unit[1]):
            h = min(unit[0], shape[0] - y0)
            w = min(unit[1], shape[1] - x0)
            array[y0 : y0 + h, x0 : x0 + w] = synthetic_region(y0, x0, (h, w), seed=seed)
    return array
