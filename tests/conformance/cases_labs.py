"""The lab writers' corpus (issue 23): stores written at test time by ngff-zarr, iohub,
bioio-ome-zarr and spatialdata, each with its own public API.

Expected layers follow the project's convention (`tests/conformance/cases.py`):
one per OME channel (the writer's array with that channel taken), one per label
image, an HCS plate as one mosaic per channel. Arrays are small (at most
100 × 100 pixels, a few channels): the corpus must stay fast.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conformance.cases import Case, Written

__all__ = ["CASES", "SPATIALDATA_WARNINGS", "build"]

# What opening a SpatialData store warns about, by design (docs/user-guide.md): its
# OME version is a development version, and it writes channels without colour or window.
SPATIALDATA_WARNINGS = r".*(is a development version|invalid optional omero metadata).*"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The writers' own deprecation noise (dask, pandas, zarr under them) is not ours to fix;
    pytest's ``filterwarnings = error`` would make it fail the write."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _written(path: Path, layers: tuple[np.ndarray[Any, Any], ...]) -> Written:
    from tests.conformance.cases import Written

    return Written(path, layers)


def _data(shape: tuple[int, ...], seed: int, dtype: Any = np.uint16) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).integers(0, 4000, shape).astype(dtype)


def _channels(data: np.ndarray[Any, Any], axis: int | None) -> tuple[np.ndarray[Any, Any], ...]:
    """The expected layers of an image: one per channel along `axis` (or the image)."""
    if axis is None:
        return (data,)
    return tuple(np.take(data, c, axis=axis) for c in range(data.shape[axis]))


# -- ngff-zarr -------------------------------------------------------------------------


def _ngff_zarr(folder: Path, version: str, dims: str, *, sharded: bool = False) -> Written:
    import ngff_zarr as nz

    extent = {"c": 2, "z": 4, "y": 64, "x": 80}
    data = _data(tuple(extent[d] for d in dims), seed=len(dims))
    image = nz.to_ngff_image(
        data,
        dims=list(dims),
        scale={d: {"z": 2.0, "y": 0.5, "x": 0.5}[d] for d in dims if d != "c"},
        translation={d: 1.0 for d in dims if d != "c"},
        name="img",
    )
    with _quiet():
        multiscales = nz.to_multiscales(image, scale_factors=[2], chunks=32)
    path = folder / f"ngff-zarr-{version}-{dims}{'-sharded' if sharded else ''}.ome.zarr"
    kwargs: dict[str, Any] = {"chunks_per_shard": 2} if sharded else {}
    with _quiet():
        nz.to_ngff_zarr(str(path), multiscales, version=version, **kwargs)
    return _written(path, _channels(data, dims.find("c") if "c" in dims else None))


# -- iohub -----------------------------------------------------------------------------

_IOHUB_CHANNELS = ["DAPI", "GFP"]
_IOHUB_FOV = (1, 2, 3, 48, 64)  # TCZYX


def _iohub_fov(folder: Path) -> Written:
    from iohub.ngff import open_ome_zarr

    path = folder / "iohub-fov.ome.zarr"
    data = _data(_IOHUB_FOV, seed=5)
    with (
        _quiet(),
        open_ome_zarr(str(path), layout="fov", mode="w-", channel_names=_IOHUB_CHANNELS) as fov,
    ):
        fov.create_image("0", data, chunks=(1, 1, 1, 32, 32))
    return _written(path, _channels(data, 1))


def _iohub_plate(folder: Path) -> Written:
    """Two wells (A/1, A/2) of one field each: one mosaic per channel, wells side by side."""
    from iohub.ngff import open_ome_zarr

    path = folder / "iohub-plate.ome.zarr"
    t, c, z, y, x = _IOHUB_FOV
    mosaic = np.zeros((t, c, z, y, 2 * x), np.uint16)
    with (
        _quiet(),
        open_ome_zarr(str(path), layout="hcs", mode="w-", channel_names=_IOHUB_CHANNELS) as plate,
    ):
        for column in range(2):
            data = _data(_IOHUB_FOV, seed=10 + column)
            position = plate.create_position("A", str(column + 1), "0")
            position.create_image("0", data, chunks=(1, 1, 1, 32, 32))
            mosaic[..., column * x : (column + 1) * x] = data
    return _written(path, _channels(mosaic, 1))


# -- bioio-ome-zarr --------------------------------------------------------------------


def _bioio(folder: Path, zarr_format: int) -> Written:
    from bioio_ome_zarr.writers import Channel, OMEZarrWriter

    path = folder / f"bioio-v{zarr_format}.ome.zarr"
    data = _data((2, 3, 64, 64), seed=7)  # CZYX
    writer = OMEZarrWriter(
        str(path),
        level_shapes=[data.shape, (2, 3, 32, 32)],
        dtype=data.dtype,
        chunk_shape=[(1, 1, 32, 32), (1, 1, 32, 32)],
        zarr_format=zarr_format,  # type: ignore[arg-type]
        image_name="cells",
        channels=[
            Channel(
                label="DAPI",
                color="0000FF",
                window={"min": 0, "max": 4000, "start": 0, "end": 3000},
            ),
            Channel(
                label="GFP",
                color="00FF00",
                window={"min": 0, "max": 4000, "start": 50, "end": 2000},
            ),
        ],
        axes_names=["c", "z", "y", "x"],
        axes_types=["channel", "space", "space", "space"],
        axes_units=[None, "micrometer", "micrometer", "micrometer"],
        physical_pixel_size=[1.0, 2.0, 0.5, 0.5],
    )
    with _quiet():
        writer.write_full_volume(data)
    return _written(path, _channels(data, 0))


# -- spatialdata -----------------------------------------------------------------------


def _spatialdata(folder: Path) -> tuple[Path, Any]:
    import spatialdata as sd
    from spatialdata.models import Image2DModel, Labels2DModel
    from spatialdata.transformations import Scale

    image = Image2DModel.parse(
        _data((2, 60, 80), seed=8),
        dims=("c", "y", "x"),
        c_coords=["DAPI", "GFP"],
        transformations={"global": Scale([0.5, 0.5], axes=("y", "x"))},
    )
    labels = Labels2DModel.parse(_data((60, 80), seed=9, dtype=np.uint8) % 5, dims=("y", "x"))
    data = sd.SpatialData(images={"raw": image}, labels={"cells": labels})
    path = folder / "blobs.zarr"
    with _quiet():
        data.write(str(path))
    return path, data


def _spatialdata_root(folder: Path) -> Written:
    path, data = _spatialdata(folder)
    raw = np.asarray(data.images["raw"].values)
    return _written(path, (*_channels(raw, 0), np.asarray(data.labels["cells"].values)))


def _spatialdata_element(folder: Path) -> Written:
    path, data = _spatialdata(folder)
    return _written(path / "images" / "raw", _channels(np.asarray(data.images["raw"].values), 0))


def build() -> tuple[Case, ...]:
    # Imported here, not at the top: tests/conformance/cases.py adds these cases to its own
    # CASES when it is imported, whichever of the two modules is imported first.
    from tests.conformance.cases import Case

    cases: list[Case] = []
    for version, dims in (("0.4", "yx"), ("0.4", "cyx"), ("0.5", "zyx"), ("0.5", "cyx")):
        cases.append(
            Case(
                "ngff-zarr", f"{version} {dims}", lambda f, v=version, d=dims: _ngff_zarr(f, v, d)
            )
        )
    cases.append(
        Case("ngff-zarr", "0.5 cyx sharded", lambda f: _ngff_zarr(f, "0.5", "cyx", sharded=True))
    )
    cases.append(Case("iohub", "FOV tczyx, 2 channels", _iohub_fov))
    cases.append(Case("iohub", "HCS plate, 2 wells", _iohub_plate))
    for zarr_format in (2, 3):
        cases.append(
            Case(
                "bioio-ome-zarr",
                f"OMEZarrWriter v{zarr_format} czyx",
                lambda f, z=zarr_format: _bioio(f, z),
            )
        )
    cases.append(Case("spatialdata", "root: 1 image + 1 labels", _spatialdata_root))
    cases.append(Case("spatialdata", "images/raw opened directly", _spatialdata_element))
    return tuple(cases)


CASES: tuple[Case, ...] = build()
