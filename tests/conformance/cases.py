"""The conformance corpus: stores written by third-party writers, never by this project.

One `Case` per store: a group (the writer), a name, and `write(folder)` that
writes the store with the writer's public API and returns a `Written`: the path
to open and, per expected layer in order, the writer's full-resolution array
(channel taken). `tests/napari/test_conformance.py` opens every case in a real
viewer; `docs/compatibility.py` opens the same cases with three readers and
writes `docs/compatibility.md`. Arrays are small: the corpus must stay fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from tests.conformance import cases_files, cases_odd

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = ["CASES", "GROUPS", "Case", "Written", "cases_of"]


@dataclass(frozen=True)
class Written:
    """A written store: where to open it and, per expected layer, the writer's array."""

    path: Path | str  # a URL for the remote cases (cases_remote.py)
    layers: tuple[np.ndarray[Any, Any], ...]


@dataclass(frozen=True)
class Case:
    group: str
    name: str
    write: Callable[[Path], Written]

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"


def _random(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    if dtype.kind == "f":
        return (rng.random(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    high = min(int(info.max), 2**40)
    return rng.integers(max(int(info.min), -(2**40)), high, size=shape, endpoint=True).astype(
        dtype
    )


# -- ome-zarr-py ---------------------------------------------------------------------

OME_AXES = ("yx", "zyx", "cyx", "czyx", "tyx", "tzyx", "tcyx", "tczyx")
_EXTENT = {"t": 2, "c": 3, "z": 3, "y": 72, "x": 88}
_COLORS = ("FF00FF", "00FF00", "123456")
_WINDOWS = ((100.0, 30_000.0), (0.0, 65_535.0), (2_000.0, 9_000.0))


def _omero(n_channels: int) -> dict[str, Any]:
    return {
        "channels": [
            {
                "label": f"ch{i}",
                "color": _COLORS[i],
                "active": i != 1,
                "window": {"min": 0, "max": 65535, "start": _WINDOWS[i][0], "end": _WINDOWS[i][1]},
            }
            for i in range(n_channels)
        ],
        "rdefs": {"model": "color"},
    }


def _ome_image(folder: Path, version: str, axes: str, *, labels: bool) -> Written:
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image, write_labels

    shape = tuple(_EXTENT[a] for a in axes)
    data = _random(shape, np.uint16, seed=len(axes))
    path = folder / f"{axes}-{version}.ome.zarr"
    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(str(path), mode="w", zarr_format=2 if version == "0.4" else 3)
    chunks = tuple(32 if a in "yx" else 1 for a in axes)
    metadata: dict[str, Any] = {}
    if "c" in axes:
        from ome_zarr_models.common.omero import Omero

        # ome-zarr-py 0.21 takes omero metadata only as an ome-zarr-models model.
        metadata["omero"] = Omero.model_validate(_omero(_EXTENT["c"]))
    write_image(
        data,
        group,
        axes=axes,
        fmt=fmt,
        scale_factors=(2,),
        scale={a: {"z": 2.0, "y": 0.5, "x": 0.5}.get(a, 1.0) for a in axes},
        axes_units={a: "micrometer" for a in "zyx" if a in axes},
        storage_options={"chunks": chunks},
        **metadata,
    )
    expected: list[np.ndarray[Any, Any]] = (
        [np.take(data, c, axis=axes.index("c")) for c in range(_EXTENT["c"])]
        if "c" in axes
        else [data]
    )
    if labels:
        label_axes = axes.replace("c", "")
        label_shape = tuple(_EXTENT[a] for a in label_axes)
        label = (np.arange(int(np.prod(label_shape))).reshape(label_shape) // 500 % 4).astype(
            np.uint8
        )
        write_labels(
            label,
            group,
            name="cells",
            axes=label_axes,
            fmt=fmt,
            scale_factors=(2,),
            storage_options={"chunks": tuple(32 if a in "yx" else 1 for a in label_axes)},
            label_metadata={
                "colors": [
                    {"label-value": 1, "rgba": [255, 0, 0, 255]},
                    {"label-value": 2, "rgba": [0, 255, 0, 128]},
                    {"label-value": 3, "rgba": [0, 0, 255, 255]},
                ],
                "properties": [
                    {"label-value": v, "class": name}
                    for v, name in ((1, "nucleus"), (2, "cytoplasm"), (3, "membrane"))
                ],
            },
        )
        expected.append(label)
    return Written(path, tuple(expected))


# -- zarr-python ---------------------------------------------------------------------

DTYPES = (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64", ">u2", ">f8",
)  # fmt: skip
_SHAPE = (2, 50, 70)
_CHUNKS = (1, 32, 32)


def _zarr_array(
    folder: Path,
    name: str,
    zarr_format: int,
    dtype: str = "uint16",
    *,
    fill_value: Any = None,
    order: str = "C",
    compressors: Any = "auto",
    shards: tuple[int, ...] | None = None,
    partial: bool = False,
) -> Written:
    path = folder / f"{name}.zarr"
    data = _random(_SHAPE, dtype, seed=zarr_format)
    kwargs: dict[str, Any] = {"compressors": compressors}
    if fill_value is not None:
        kwargs["fill_value"] = fill_value
    if zarr_format == 2:
        kwargs["order"] = order
    if shards is not None:
        kwargs["shards"] = shards
    array = zarr.create_array(
        str(path),
        shape=_SHAPE,
        chunks=_CHUNKS,
        dtype=np.dtype(dtype),
        zarr_format=zarr_format,  # type: ignore[arg-type]
        **kwargs,
    )
    if partial:  # only the first plane written: the second is the fill value
        array[0] = data[0]
    else:
        array[...] = data
    return Written(path, (np.asarray(zarr.open_array(str(path), mode="r")[...]),))


def _v2_null_fill(folder: Path) -> Written:
    written = _zarr_array(folder, "v2-fill-null", 2, "float32", partial=True)
    metadata = json.loads((written.path / ".zarray").read_text())
    metadata["fill_value"] = None
    (written.path / ".zarray").write_text(json.dumps(metadata))
    return Written(written.path, (np.asarray(zarr.open_array(str(written.path))[...]),))


def _codec(name: str, zarr_format: int) -> Any:
    if name == "none":
        return None
    if zarr_format == 2:
        import numcodecs

        return {
            "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
            "zstd": numcodecs.Zstd(level=3),
            "gzip": numcodecs.GZip(level=5),
        }[name]
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    return {"blosc": BloscCodec(), "zstd": ZstdCodec(), "gzip": GzipCodec()}[name]


# -- TensorStore ---------------------------------------------------------------------


def _tensorstore(folder: Path, driver: str, dtype: str, *, sharded: bool = False) -> Written:
    import tensorstore as ts

    path = folder / f"{driver}-{dtype}{'-sharded' if sharded else ''}.zarr"
    data = _random(_SHAPE, dtype, seed=3)
    spec: dict[str, Any] = {
        "driver": driver,
        "kvstore": {"driver": "file", "path": str(path)},
        "create": True,
        "delete_existing": True,
    }
    if driver == "zarr":
        spec["metadata"] = {"shape": list(_SHAPE), "dtype": np.dtype(dtype).str}
    else:
        spec["metadata"] = {"shape": list(_SHAPE), "data_type": dtype}
        if sharded:
            spec["metadata"]["chunk_grid"] = {
                "name": "regular",
                "configuration": {"chunk_shape": [1, 64, 64]},
            }
            spec["metadata"]["codecs"] = [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [1, 32, 32],
                        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    },
                }
            ]
    store = ts.open(spec).result()
    store[...] = data
    return Written(path, (data,))


# -- kerchunk ------------------------------------------------------------------------


def _hdf5(folder: Path, count: int) -> list[tuple[Path, np.ndarray[Any, Any]]]:
    import h5py

    (folder / "h5").mkdir(parents=True, exist_ok=True)
    files = []
    for t in range(count):
        data = _random((60, 80), "float32", seed=t)
        path = folder / "h5" / f"t{t}.h5"
        with h5py.File(path, "w") as handle:
            handle.create_dataset("data", data=data, chunks=(32, 40), compression="gzip")
        files.append((path, data))
    return files


def _single_hdf5(folder: Path) -> Written:
    from kerchunk.hdf import SingleHdf5ToZarr

    ((h5, data),) = _hdf5(folder, 1)
    path = h5.parent / "single.json"
    path.write_text(json.dumps(SingleHdf5ToZarr(str(h5)).translate()))
    return Written(path, (data,))


def _multi_hdf5(folder: Path) -> Written:
    from kerchunk.combine import MultiZarrToZarr
    from kerchunk.hdf import SingleHdf5ToZarr

    files = _hdf5(folder, 3)
    singles = [SingleHdf5ToZarr(str(h5)).translate() for h5, _ in files]
    combined = MultiZarrToZarr(singles, concat_dims=["t"], coo_map={"t": "INDEX"}).translate()
    path = files[0][0].parent / "combined.json"
    path.write_text(json.dumps(combined))
    # MultiZarrToZarr adds the 1-D coordinate array `t` beside the data: not an image.
    return Written(path, (np.stack([data for _, data in files]),))


# -- bioformats2raw ------------------------------------------------------------------


def _bioformats2raw(folder: Path) -> Written:
    """bioformats2raw's layout 3: a top group, series `0/`, `1/` (OME-Zarr images), `OME/`."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    path = folder / "bf2raw.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    expected = []
    for series in range(2):
        data = _random((2, 64, 80), np.uint16, seed=series)
        write_image(
            data,
            root.create_group(str(series)),
            axes="cyx",
            fmt=FormatV04(),
            scale_factors=(2,),
            storage_options={"chunks": (1, 32, 32)},
        )
        expected.extend(data)
    ome = root.create_group("OME")
    ome.attrs["series"] = ["0", "1"]
    (path / "OME" / "METADATA.ome.xml").write_text("<OME/>")
    return Written(path, tuple(expected))


# -- HCS plates ----------------------------------------------------------------------

PLATE_FIELD = (2, 64, 64)  # (c, y, x) of one field


def write_plate(
    folder: Path,
    rows: int,
    columns: int,
    fields: int,
    *,
    name: str = "plate.ome.zarr",
    field_prefix: str = "",
    per_well: Sequence[int] | None = None,
) -> Written:
    """An NGFF 0.4 plate by ome-zarr-py (`write_plate_metadata`, `write_well_metadata`,
    `write_image` per field: 3 levels), every well present; expected: one mosaic per
    channel, wells by row and column, a well's fields side by side. Fields are named
    ``f"{field_prefix}{index}"`` (writers name them ``"0"``, ``"1"``...).

    `fields` is the plate's ``field_count`` and each well's field slots in the mosaic;
    `per_well`, when given, the number of fields each well holds (row by row), a slot
    past a well's last field expected as the fill value (0)."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata
    from ome_zarr_models.common.omero import Omero

    path = folder / name
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    row_names = [chr(ord("A") + r) for r in range(rows)]
    column_names = [str(c + 1) for c in range(columns)]
    wells = [f"{r}/{c}" for r in row_names for c in column_names]
    fmt = FormatV04()
    write_plate_metadata(root, row_names, column_names, wells, fmt=fmt, field_count=fields)
    channels, height, width = PLATE_FIELD
    mosaic = np.zeros((channels, rows * height, columns * fields * width), np.uint16)
    omero = Omero.model_validate(_omero(channels))
    for r, row in enumerate(row_names):
        for c, column in enumerate(column_names):
            well = root.require_group(row).require_group(column)
            count = fields if per_well is None else per_well[r * columns + c]
            paths = [f"{field_prefix}{f}" for f in range(count)]
            write_well_metadata(well, [{"path": p} for p in paths], fmt=fmt)
            for f in range(count):
                data = _random(PLATE_FIELD, np.uint16, seed=(r * columns + c) * fields + f)
                write_image(
                    data,
                    well.require_group(paths[f]),
                    axes="cyx",
                    fmt=fmt,
                    scale_factors=(2, 4),
                    storage_options={"chunks": (1, 32, 32)},
                    omero=omero,
                )
                x = (c * fields + f) * width
                mosaic[:, r * height : (r + 1) * height, x : x + width] = data
    return Written(path, tuple(mosaic))


def _build() -> tuple[Case, ...]:
    cases: list[Case] = []
    for version in ("0.4", "0.5"):
        for axes in OME_AXES:
            cases.append(
                Case(
                    "ome-zarr-py",
                    f"{version} {axes}",
                    lambda f, v=version, a=axes: _ome_image(f, v, a, labels=False),
                )
            )
        cases.append(
            Case(
                "ome-zarr-py",
                f"{version} czyx + labels",
                lambda f, v=version: _ome_image(f, v, "czyx", labels=True),
            )
        )
    for fmt in (2, 3):
        for dtype in DTYPES:
            cases.append(
                Case(
                    "zarr-python",
                    f"v{fmt} {dtype}",
                    lambda f, z=fmt, d=dtype: _zarr_array(f, f"v{z}-{d}", z, d),
                )
            )
        for codec in ("blosc", "zstd", "gzip", "none"):
            cases.append(
                Case(
                    "zarr-python",
                    f"v{fmt} {codec}",
                    lambda f, z=fmt, c=codec: _zarr_array(
                        f, f"v{z}-{c}", z, compressors=_codec(c, z)
                    ),
                )
            )
        fills: tuple[tuple[str, str, Any], ...] = (
            ("fill 0", "uint16", 0),
            ("fill 7", "uint16", 7),
            ("fill -3", "int16", -3),
            ("fill nan", "float32", float("nan")),
            ("fill inf", "float32", float("inf")),
            ("fill -inf", "float64", float("-inf")),
            ("fill true", "bool", True),
        )
        for label, dtype, value in fills:
            cases.append(
                Case(
                    "zarr-python",
                    f"v{fmt} {label}",
                    lambda f, z=fmt, d=dtype, v=value, n=label: _zarr_array(
                        f, f"v{z}-{n.replace(' ', '-')}", z, d, fill_value=v, partial=True
                    ),
                )
            )
    cases.append(Case("zarr-python", "v2 fill null", _v2_null_fill))
    for order in ("C", "F"):
        cases.append(
            Case(
                "zarr-python",
                f"v2 order {order}",
                lambda f, o=order: _zarr_array(f, f"v2-order-{o}", 2, "int32", order=o),
            )
        )
    cases.append(
        Case(
            "zarr-python",
            "v3 sharded",
            lambda f: _zarr_array(f, "v3-sharded", 3, shards=(2, 64, 64)),
        )
    )
    for driver in ("zarr", "zarr3"):
        for dtype in ("uint8", "int16", "float32"):
            cases.append(
                Case(
                    "tensorstore",
                    f"{driver} {dtype}",
                    lambda f, d=driver, t=dtype: _tensorstore(f, d, t),
                )
            )
    cases.append(
        Case(
            "tensorstore",
            "zarr3 sharded",
            lambda f: _tensorstore(f, "zarr3", "uint16", sharded=True),
        )
    )
    cases.append(Case("kerchunk", "SingleHdf5ToZarr", _single_hdf5))
    cases.append(Case("kerchunk", "MultiZarrToZarr", _multi_hdf5))
    cases.append(Case("bioformats2raw", "layout 3, two series", _bioformats2raw))
    cases.append(
        Case("ome-zarr-py plate", "3×4 wells, 2 fields", lambda f: write_plate(f, 3, 4, 2))
    )
    return tuple(cases)


def _with_labs() -> tuple[Case, ...]:
    # Imported here: they import Case and Written from this module.
    from tests.conformance import cases_labs, cases_ome_versions

    return (
        _build()
        + cases_labs.build()
        + cases_files.cases()
        + cases_odd.cases()
        + cases_ome_versions.build()
    )


CASES: tuple[Case, ...] = _with_labs()
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(case.group for case in CASES))


def cases_of(group: str) -> tuple[Case, ...]:
    return tuple(case for case in CASES if case.group == group)
