"""Odd stores real writers make (issue 50): written at test time by the writers named.

- dask: an array one group below the root (``to_zarr(component="grp/arr")``).
- zarr-python: a string array (Zarr v2 ``vlen-utf8``, v3 ``string``) beside an image in a
  group: the image is shown, the strings skipped with one note.
- ome-zarr-py plate: wells with uneven field counts (the plate's ``field_count`` the most
  any well has); a missing field is the fill value.
- zarr-python: a 1 x 1,000,000 row (virtual levels that never make an axis 1 pixel).
- webknossos layout: coarser levels padded past the data (to a whole shard), larger than a
  finer level, as webknossos 4.3 writes them (zarr-python, Zarr v3 shards and OME 0.5
  metadata by hand: webknossos itself is not installable here).

Expected layers follow `tests/conformance/cases.py`'s convention.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conformance.cases import Case, Written

__all__ = [
    "NOT_IMAGES_WARNING",
    "ROW",
    "TEXTURE_WARNING",
    "UNEVEN_FIELDS",
    "WEBKNOSSOS_SHARD",
    "cases",
    "write_webknossos_layer",
]

# The one note a group with non-image arrays beside its images gives (a MetadataWarning).
NOT_IMAGES_WARNING = r".*arrays that are not images, not shown: .*strings are not pixels.*"

# napari's own warning for a plane wider than a GL texture (a row of a million pixels): it
# shows the plane downsampled, as its built-in reader's layer.
TEXTURE_WARNING = r"data shape .* exceeds GL_MAX_TEXTURE_SIZE"


def _written(path: Path, layers: tuple[np.ndarray[Any, Any], ...]) -> Written:
    from tests.conformance.cases import Written

    return Written(path, layers)


def _ramp(shape: tuple[int, ...], dtype: Any = np.uint16, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    grid = np.indices(shape).sum(axis=0)
    return ((grid * 37) % 3000 + rng.integers(0, 500, shape)).astype(dtype)


# -- dask --------------------------------------------------------------------------------


def _dask_component(folder: Path, zarr_format: int) -> Written:
    import dask.array as da

    data = _ramp((60, 90), seed=zarr_format)
    path = folder / f"dask-component-v{zarr_format}.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        da.from_array(data, chunks=32).to_zarr(
            str(path), component="grp/arr", zarr_format=zarr_format
        )
    return _written(path, (data,))


# -- zarr-python: strings beside an image ------------------------------------------------


def _strings_beside(folder: Path, zarr_format: int) -> Written:
    data = _ramp((64, 80), seed=10 + zarr_format)
    path = folder / f"strings-v{zarr_format}.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)  # type: ignore[arg-type]
    group.create_array("image", data=data, chunks=(32, 32))
    names = group.create_array("names", shape=(3,), dtype=str)  # v2: "|O" + vlen-utf8
    names[:] = np.array(["DAPI", "GFP", "mCherry"])
    return _written(path, (data,))


# -- zarr-python: one row of a million pixels ---------------------------------------------

ROW = (1, 1_000_000)


def _row(folder: Path) -> Written:
    data = _ramp(ROW, seed=7)
    path = folder / "row.zarr"
    zarr.create_array(str(path), shape=ROW, chunks=(1, 65_536), dtype=data.dtype)[...] = data
    return _written(path, (data,))


# -- webknossos' layout: coarse levels padded to whole shards ----------------------------

WEBKNOSSOS_SHARD = (4096, 4096, 32)  # x, y, z: the shard the webknossos 4.3 store had
_WK_VOXEL = (11.24, 11.24, 25.0)  # nanometres per voxel along x, y, z
_WK_MAGS = ((1, 1, 1), (2, 2, 1), (4, 4, 1))


def write_webknossos_layer(folder: Path, shape: tuple[int, int, int] = (192, 160, 40)) -> Written:
    """A webknossos 4.3 style layer, written with zarr-python (webknossos itself is not
    installable here): a dataset folder with a ``color`` layer, a Zarr v3 group whose NGFF
    0.5 ``multiscales`` name its magnifications ``1``, ``2-2-1``, ``4-4-1`` over axes
    ``c, x, y, z`` (nanometres; scale = voxel size x mag), each a uint8 array of 32³ inner
    chunks (transpose to F order, bytes, zstd) in shards. As webknossos does, the coarse
    magnifications are padded to whole shards of 4096 x 4096 x 32: larger than mag 1, the
    data in their first cells, zeros (the fill value) beyond. Mag 1 is stored unpadded (its
    own shard divides the data) so the test can read it whole. Expected: one layer, mag 1.
    """
    from zarr.codecs import BytesCodec, TransposeCodec, ZstdCodec

    rng = np.random.default_rng(50)
    data = rng.integers(1, 255, (1, *shape), dtype=np.uint8)
    dataset = folder / "wk-dataset"
    layer = dataset / "color"
    group = zarr.open_group(str(layer), mode="w", zarr_format=3)
    datasets = []
    for mag in _WK_MAGS:
        name = "1" if mag == (1, 1, 1) else "-".join(map(str, mag))
        level = data[:, :: mag[0], :: mag[1], :: mag[2]]
        if mag == (1, 1, 1):
            stored, shard = level.shape, (1, 64, 64, 32)
        else:
            shard = (1, *WEBKNOSSOS_SHARD)
            stored = tuple(-(-n // s) * s for n, s in zip(level.shape, shard, strict=True))
        array = group.create_array(
            name,
            shape=stored,
            chunks=(1, 32, 32, 32),
            shards=shard,
            dtype="uint8",
            fill_value=0,
            dimension_names=["c", "x", "y", "z"],
            filters=[TransposeCodec(order=[3, 2, 1, 0])],
            serializer=BytesCodec(),
            compressors=[ZstdCodec(level=5, checksum=True)],
        )
        array[tuple(slice(0, n) for n in level.shape)] = level
        scale = [1.0, *(v * m for v, m in zip(_WK_VOXEL, mag, strict=True))]
        datasets.append(
            {"path": name, "coordinateTransformations": [{"type": "scale", "scale": scale}]}
        )
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": a, "type": "space", "unit": "nanometer"} for a in "xyz"
    ]
    group.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [{"name": "color", "axes": axes, "datasets": datasets}],
    }
    properties = {
        "id": {"name": "wk-dataset"},
        "scale": {"unit": "nanometer", "factor": _WK_VOXEL},
    }
    (dataset / "datasource-properties.json").write_text(json.dumps(properties))
    return _written(layer, (data[0],))


# -- ome-zarr-py: a plate whose wells hold different numbers of fields -------------------

UNEVEN_FIELDS = (2, 5, 1, 1, 4, 6)
"""Fields of each well of the uneven plate (2 x 3 wells, row by row): 19 fields, 38 field
planes of 2 channels. Laid out by the first well's count (2 slots), 10 fields (20 planes)
showed, and the wells of 1 field failed their second slot."""


def _uneven_plate(folder: Path) -> Written:
    from tests.conformance.cases import write_plate

    # The plate's field_count is the most fields any well holds, as the spec says.
    return write_plate(folder, 2, 3, max(UNEVEN_FIELDS), per_well=UNEVEN_FIELDS)


def cases() -> tuple[Case, ...]:
    from tests.conformance.cases import Case

    found: list[Case] = []
    for zarr_format in (2, 3):
        found.append(
            Case(
                "dask",
                f"to_zarr(component='grp/arr') v{zarr_format}",
                lambda f, z=zarr_format: _dask_component(f, z),
            )
        )
    for zarr_format in (2, 3):
        found.append(
            Case(
                "zarr-python + strings",
                f"v{zarr_format} image beside a string array",
                lambda f, z=zarr_format: _strings_beside(f, z),
            )
        )
    found.append(Case("zarr-python row", "1 x 1,000,000 uint16", _row))
    found.append(
        Case("webknossos layout", "mags 1, 2-2-1, 4-4-1 padded to shards", write_webknossos_layer)
    )
    found.append(
        Case(
            "ome-zarr-py plate",
            f"2×3 wells of {'/'.join(map(str, UNEVEN_FIELDS))} fields",
            _uneven_plate,
        )
    )
    return tuple(found)
