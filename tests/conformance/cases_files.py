"""Conformance cases of issue 23's file writers: ngff-zarr's ``.ozx``, tifffile's
references with imagecodecs codecs, and xarray's ``Dataset.to_zarr``.

Each store is written at test time by the writer itself. Expected layers: an
OME image's channels (ngff-zarr), tifffile's own decode of the TIFF the
references point into (`tifffile.imread`; JPEG is lossy, so the writer's
decode is the oracle), the data variable of an xarray Dataset (its 1-D
coordinate arrays are not images). `cases()` builds them; the import of
`tests.conformance.cases` is inside it, so `cases.py` can add these at its end
without an import cycle.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conformance.cases import Case, Written

__all__ = ["cases", "write_ozx"]


def _ramp(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray[Any, Any]:
    """Smooth data with some noise (predictors and JPEG are made for smooth data)."""
    rng = np.random.default_rng(seed)
    grid = np.indices(shape).sum(axis=0)
    return ((grid * 37 + (grid**2) // 11) % 200 + rng.integers(0, 40, shape)).astype(dtype)


# -- ngff-zarr: zipped OME-Zarr (RFC-9) ------------------------------------------------


def write_ozx(folder: Path, dims: str) -> Written:
    """An OME-Zarr 0.5 image of axes `dims` zipped by ngff-zarr (`to_ngff_zarr("x.ozx")`)."""
    import ngff_zarr as nz

    from tests.conformance.cases import Written

    extent = {"c": 2, "z": 3, "y": 96, "x": 80}
    shape = tuple(extent[d] for d in dims)
    data = _ramp(shape, np.uint16, seed=len(dims))
    image = nz.to_ngff_image(
        data, dims=list(dims), scale={d: 0.5 if d in "yx" else 1.0 for d in dims}, name="cells"
    )
    # dask_bin_shrink: the default (itkwasm) warns under NumPy 2.5 (tests turn warnings to errors).
    multiscales = nz.to_multiscales(
        image, scale_factors=[2], chunks=32, method=nz.Methods.DASK_BIN_SHRINK
    )
    path = folder / f"cells-{dims}.ozx"
    nz.to_ngff_zarr(str(path), multiscales, version="0.5")  # sharded by default for .ozx
    layers = tuple(data) if "c" in dims else (data,)
    return Written(path, layers)


# -- tifffile: kerchunk references with imagecodecs codecs -----------------------------


def _tiff_references(
    folder: Path, name: str, data: np.ndarray[Any, Any], zarr_format: int, **layout: Any
) -> Written:
    import tifffile

    from tests.conformance.cases import Written

    tiff = folder / f"{name}.tif"
    tifffile.imwrite(tiff, data, tile=(32, 32), **layout)
    path = folder / f"{name}.json"
    with tifffile.TiffFile(tiff) as tif, tif.aszarr() as store:
        store.write_fsspec(str(path), url=".", version=1, zarr_format=zarr_format)
    return Written(path, (tifffile.imread(tiff),))


_TIFF_LAYOUTS: tuple[tuple[str, int, tuple[int, ...], Any, dict[str, Any]], ...] = (
    ("LZW + predictor", 2, (96, 80), np.uint16, {"compression": "lzw", "predictor": True}),
    ("JPEG RGB tiles", 2, (96, 80, 3), np.uint8, {"compression": "jpeg", "photometric": "rgb"}),
    ("zarr_format=3 LZW", 3, (96, 80), np.uint16, {"compression": "lzw", "predictor": True}),
    ("deflate", 2, (96, 80), np.int16, {"compression": "zlib"}),
    ("zstd", 2, (96, 80), np.float32, {"compression": "zstd"}),
)


# -- xarray: Dataset.to_zarr -------------------------------------------------------------


def _xarray(folder: Path, zarr_format: int, dims: tuple[str, ...], consolidated: bool) -> Written:
    import xarray as xr

    from tests.conformance.cases import Written

    extent = {"t": 3, "y": 64, "x": 72}
    shape = tuple(extent[d] for d in dims)
    data = _ramp(shape, np.float32, seed=zarr_format)
    coords = {d: np.arange(extent[d]) * (0.5 if d in "yx" else 2.0) for d in dims}
    dataset = xr.Dataset({"intensity": (dims, data)}, coords=coords)
    path = folder / f"xarray-v{zarr_format}-{''.join(dims)}-{consolidated}.zarr"
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not in the Zarr v3 specification.
        warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
        dataset.to_zarr(
            str(path),
            zarr_format=zarr_format,
            consolidated=consolidated,
            encoding={"intensity": {"chunks": tuple(min(32, n) for n in shape)}},
        )
    return Written(path, (data,))


def cases() -> tuple[Case, ...]:
    from tests.conformance.cases import Case

    found: list[Case] = [
        Case("ngff-zarr .ozx", f"0.5 {dims} sharded", lambda f, d=dims: write_ozx(f, d))
        for dims in ("yx", "cyx", "zyx")
    ]
    for label, zarr_format, shape, dtype, layout in _TIFF_LAYOUTS:
        found.append(
            Case(
                "tifffile references",
                label,
                lambda f, n=label, z=zarr_format, s=shape, t=dtype, o=layout: _tiff_references(
                    f, n.replace(" ", "-").replace("=", ""), _ramp(s, t), z, **o
                ),
            )
        )
    for zarr_format in (2, 3):
        for dims in (("y", "x"), ("t", "y", "x")):
            for consolidated in (True, False):
                name = f"v{zarr_format} {''.join(dims)}{' consolidated' if consolidated else ''}"
                found.append(
                    Case(
                        "xarray",
                        name,
                        lambda f, z=zarr_format, d=dims, c=consolidated: _xarray(f, z, d, c),
                    )
                )
    return tuple(found)
