"""Odd stores real writers make (issue 50): written at test time by the writers named.

- dask: an array one group below the root (``to_zarr(component="grp/arr")``).
- zarr-python: a string array (Zarr v2 ``vlen-utf8``, v3 ``string``) beside an image in a
  group: the image is shown, the strings skipped with one note.
- ome-zarr-py plate: wells with uneven field counts (the plate's ``field_count`` the most
  any well has); a missing field is the fill value.
- zarr-python: a 1 x 1,000,000 row (virtual levels that never make an axis 1 pixel).
- webknossos layout: coarser levels padded past the data (to a whole shard), larger than a
  finer level, as webknossos 4.3 writes them (zarr-python, OME 0.4 metadata by hand:
  webknossos itself is not installed here).

Expected layers follow `tests/conformance/cases.py`'s convention.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conformance.cases import Case, Written

__all__ = ["NOT_IMAGES_WARNING", "ROW", "TEXTURE_WARNING", "UNEVEN_FIELDS", "cases"]

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
        Case(
            "ome-zarr-py plate",
            f"2×3 wells of {'/'.join(map(str, UNEVEN_FIELDS))} fields",
            _uneven_plate,
        )
    )
    return tuple(found)
