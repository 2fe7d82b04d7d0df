"""Deterministic synthetic images, computed chunk by chunk or written (sample, benchmarks)."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import platformdirs
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

from napari_lazy_zarr.core.executors import run_concurrently
from napari_lazy_zarr.core.formats.ome import ImageSpec, LevelSpec
from napari_lazy_zarr.core.sources.composite import FunctionSource

if TYPE_CHECKING:
    from collections.abc import Callable

    from zarr_indexing import IndexDomain

__all__ = [
    "SAMPLE_CHUNK",
    "SAMPLE_SIZE",
    "default_cache_dir",
    "is_complete",
    "sample_image_spec",
    "sample_level_shapes",
    "sample_level_sources",
    "synthetic_cells",
    "synthetic_region",
    "write_sample_ome_zarr",
    "write_sample_store",
]


def default_cache_dir() -> Path:
    """Where generated stores are kept between runs: the user's cache folder.

    `platformdirs.user_cache_dir`: ``$XDG_CACHE_HOME/napari-lazy-zarr`` (else
    ``~/.cache/napari-lazy-zarr``) on Linux, ``~/Library/Caches/napari-lazy-zarr``
    on macOS, ``%LOCALAPPDATA%\\napari-lazy-zarr`` on Windows.
    """
    return Path(platformdirs.user_cache_dir("napari-lazy-zarr", appauthor=False, opinion=False))


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


_NOISE_PERIOD = 509  # prime: the noise tile never lines up with chunk edges
_NOISE = np.random.default_rng(12345).integers(0, 4, size=(_NOISE_PERIOD, _NOISE_PERIOD))


def _mix(values: np.ndarray[Any, Any], seed: int) -> np.ndarray[Any, Any]:
    """A cheap integer hash (splitmix64 finaliser) of each value."""
    mixed = values.astype(np.uint64)
    with np.errstate(over="ignore"):
        mixed = (mixed + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)) * np.uint64(
            0xBF58476D1CE4E5B9
        )
        mixed ^= mixed >> np.uint64(31)
        mixed *= np.uint64(0x94D049BB133111EB)
        mixed ^= mixed >> np.uint64(29)
    return mixed


def synthetic_cells(
    y0: int, x0: int, shape: tuple[int, int], *, step: int = 1, seed: int = 0, cell: int = 256
) -> np.ndarray[Any, np.dtype[np.uint16]]:
    """A microscopy-like uint16 image: one bright blob per `cell`² tile on a dark background.

    Pixel `(i, j)` of the result is the image at global coordinates
    `(y0 + step * i, x0 + step * j)`, so `step = 2^k` yields pyramid level k
    exactly (nearest-neighbour decimation of level 0).

    Examples
    --------
    >>> whole = synthetic_cells(0, 0, (512, 512))
    >>> bool((synthetic_cells(100, 40, (8, 8)) == whole[100:108, 40:48]).all())
    True
    >>> bool((synthetic_cells(0, 0, (256, 256), step=2) == whole[::2, ::2]).all())
    True
    """
    h, w = shape
    y = y0 + step * np.arange(h, dtype=np.int64)
    x = x0 + step * np.arange(w, dtype=np.int64)
    cy, cx = y // cell, x // cell
    # Blob parameters per tile, computed for the few tiles the region meets.
    tiles_y = np.arange(cy[0], cy[-1] + 1) if h else np.zeros(0, np.int64)
    tiles_x = np.arange(cx[0], cx[-1] + 1) if w else np.zeros(0, np.int64)
    hashed = _mix(tiles_y[:, None] * 1_000_003 + tiles_x[None, :], seed)
    radius = 24 + (hashed & np.uint64(63)).astype(np.int64)
    span = np.maximum(cell - 2 * radius, 1)
    centre_y = radius + (hashed >> np.uint64(8)).astype(np.int64) % span + tiles_y[:, None] * cell
    centre_x = radius + (hashed >> np.uint64(24)).astype(np.int64) % span + tiles_x[None, :] * cell
    peak = 2000 + ((hashed >> np.uint64(40)) & np.uint64(0xFFF)).astype(np.int64) * 8
    iy = (cy - (tiles_y[0] if h else 0))[:, None]
    ix = (cx - (tiles_x[0] if w else 0))[None, :]
    dy = (y[:, None] - centre_y[iy, ix]).astype(np.float32)
    dx = (x[None, :] - centre_x[iy, ix]).astype(np.float32)
    r = radius[iy, ix].astype(np.float32)
    r2 = (dy * dy + dx * dx) / (r * r)
    noise = _NOISE[(y % _NOISE_PERIOD)[:, None], (x % _NOISE_PERIOD)[None, :]]
    value = np.where(r2 < 1.0, 300 + peak[iy, ix] * (1 - r2) + noise * 4, 100)
    return value.astype(np.uint16)


SAMPLE_SIZE: Final = 32768
"""The side of the sample pyramid's level 0 (napari's sample data and the demo)."""
SAMPLE_CHUNK: Final = 512
"""The sample pyramid's chunk side."""
_SCALE = 0.25  # micrometres per level-0 pixel
_LABEL, _COLOR, _WINDOW = "synthetic cells", "00FF88", (100, 20000)  # the omero channel


def sample_level_shapes(size: int, smallest: int = 512) -> list[tuple[int, int]]:
    """The level shapes of the `size`² pyramid: halved until a side is at most `smallest`.

    Examples
    --------
    >>> sample_level_shapes(2048)
    [(2048, 2048), (1024, 1024), (512, 512)]
    """
    shapes: list[tuple[int, int]] = []
    factor = 1
    while True:
        side = math.ceil(size / factor)
        shapes.append((side, side))
        if side <= smallest:
            return shapes
        factor *= 2


def write_sample_ome_zarr(
    path: str | os.PathLike[str],
    *,
    size: int = SAMPLE_SIZE,
    chunk: int = SAMPLE_CHUNK,
    smallest: int = 512,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> list[tuple[int, int]]:
    """Write the `synthetic_cells` image as an OME-Zarr 0.5 (Zarr v3) pyramid; returns its
    level shapes.

    Levels halve the size until it is at most `smallest`; each is written
    chunk by chunk (memory stays bounded), blosc-zstd with bit-shuffle, by
    `workers` threads of the worker pool at once. The OME metadata is written
    last, so a store without it is incomplete (`is_complete`). `progress` is
    called with (chunks written, chunks in all) after every chunk, from the
    writing threads.
    """
    root = zarr.open_group(os.fspath(path), mode="w", zarr_format=3)
    shapes = sample_level_shapes(size, smallest)
    total = sum(math.ceil(h / chunk) * math.ceil(w / chunk) for h, w in shapes)
    written = itertools.count(1)
    codec = BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")
    for level, shape in enumerate(shapes):
        step = 2**level
        array = root.create_array(
            str(level),
            shape=shape,
            chunks=(chunk, chunk),
            dtype="uint16",
            compressors=codec,
            fill_value=0,
        )

        def write(
            origin: tuple[int, int], array: zarr.Array[Any] = array, step: int = step
        ) -> None:
            y0, x0 = origin
            h, w = min(chunk, array.shape[0] - y0), min(chunk, array.shape[1] - x0)
            array[y0 : y0 + h, x0 : x0 + w] = synthetic_cells(
                y0 * step, x0 * step, (h, w), step=step
            )
            if progress is not None:
                progress(next(written), total)

        origins = [(y, x) for y in range(0, shape[0], chunk) for x in range(0, shape[1], chunk)]
        run_concurrently(write, origins, concurrency=workers, name="lazy-zarr-sample-write")
    root.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [
            {
                "name": _LABEL,
                "axes": [
                    {"name": "y", "type": "space", "unit": "micrometer"},
                    {"name": "x", "type": "space", "unit": "micrometer"},
                ],
                "datasets": [
                    {
                        "path": str(level),
                        "coordinateTransformations": [
                            {"type": "scale", "scale": [_SCALE * 2**level, _SCALE * 2**level]}
                        ],
                    }
                    for level in range(len(shapes))
                ],
            }
        ],
        "omero": {
            "channels": [
                {
                    "label": _LABEL,
                    "color": _COLOR,
                    "active": True,
                    "window": {
                        "min": 0,
                        "max": 65535,
                        "start": _WINDOW[0],
                        "end": _WINDOW[1],
                    },
                }
            ]
        },
    }
    return shapes


def sample_image_spec(
    size: int = SAMPLE_SIZE, *, smallest: int = 512, name: str = "synthetic cells"
) -> ImageSpec:
    """The `ImageSpec` `describe_store` gives the written pyramid, without the store.

    Examples
    --------
    >>> spec = sample_image_spec(2048)
    >>> [level.shape for level in spec.levels], spec.contrast_limits
    ([(2048, 2048), (1024, 1024), (512, 512)], ((100.0, 20000.0),))
    """
    levels = tuple(
        LevelSpec(
            str(level),
            shape,
            (_SCALE * 2**level, _SCALE * 2**level),
            (0.0, 0.0),
        )
        for level, shape in enumerate(sample_level_shapes(size, smallest))
    )
    return ImageSpec(
        name=name,
        kind="image",
        levels=levels,
        axis_names=("y", "x"),
        axis_units=("micrometer", "micrometer"),
        channel_names=(_LABEL,),
        channel_colors=(f"#{_COLOR}",),
        contrast_limits=((float(_WINDOW[0]), float(_WINDOW[1])),),
        channel_visible=(True,),
        version="0.5",
    )


def sample_level_sources(
    size: int = SAMPLE_SIZE, *, chunk: int = SAMPLE_CHUNK, smallest: int = 512
) -> list[FunctionSource]:
    """The pyramid's levels computed by `synthetic_cells`, chunk by chunk, on demand.

    The same pixels as the stored levels of `write_sample_ome_zarr`, with the
    same chunk grid: the chunk cache's workers compute each chunk when a view
    needs it, so nothing is computed by the caller (napari's main thread).

    Examples
    --------
    >>> level = sample_level_sources(2048)[2]
    >>> bool((level.read_chunk((0, 0)) == synthetic_cells(0, 0, (512, 512), step=4)).all())
    True
    """

    def level_function(step: int) -> Callable[[IndexDomain], np.ndarray[Any, Any]]:
        def compute(box: IndexDomain) -> np.ndarray[Any, Any]:
            (y0, x0), (y1, x1) = box.inclusive_min, box.exclusive_max
            return synthetic_cells(y0 * step, x0 * step, (y1 - y0, x1 - x0), step=step)

        return compute

    return [
        FunctionSource(
            level_function(2**level),
            shape=shape,
            dtype="uint16",
            chunks=(chunk, chunk),
            name=("napari-lazy-zarr synthetic cells", size, level),
        )
        for level, shape in enumerate(sample_level_shapes(size, smallest))
    ]


def is_complete(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds a whole `write_sample_ome_zarr` pyramid (its OME metadata, written
    last, is there)."""
    metadata = Path(path) / "zarr.json"
    try:
        if not metadata.is_file():  # nor a FIFO, whose open would block
            return False
        with open(metadata, "rb") as handle:
            document = json.loads(handle.read(1 << 20))
        return "multiscales" in document["attributes"]["ome"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
