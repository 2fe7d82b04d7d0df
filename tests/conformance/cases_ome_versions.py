"""OME-Zarr 0.1 to 0.3 and 0.6 stores, written at test time by the writers of those versions.

0.1, 0.2 and 0.3 by ome-zarr-py 0.10.3, the last release that writes them; it
needs zarr 2, so it runs in a venv of its own made once per machine by `uv`
(or ``python -m venv`` and pip) under the temporary folder, keyed by version
(`legacy_python`; about 2 s with uv's cache warm). 0.6 by ngff-zarr 0.50
(images, a scene placing one image by each transformation type, a scene with
two coordinate systems, a displacement field) and by ome-zarr-py 0.21 (an
image with labels, a scene).

`SCENE_PLACEMENTS` holds, per image of the every-transformation scene, the
matrix its transformation is (intrinsic → ``world``): the placement tests'
oracle, beside ome-zarr-py's own transformation graph.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.conformance.cases import Case, Written

__all__ = [
    "LEGACY_WRITER",
    "LEVEL0_SCALE",
    "LEVEL0_TRANSLATION",
    "NAPARI_OME_ZARR_TYPES",
    "SCENE_PLACEMENTS",
    "LegacyWriterUnavailable",
    "build",
    "legacy_python",
    "write_field_image",
    "write_legacy",
    "write_scene",
]

LEGACY_WRITER: Final = "ome-zarr==0.10.3"
LEVEL0_SCALE: Final = (0.5, 0.5)
LEVEL0_TRANSLATION: Final = (1.0, 2.0)
_M: Final = ((0.8, -0.6, 5.0), (0.6, 0.8, 1.0))


def _writer[**P, R](write: Callable[P, R]) -> Callable[P, R]:
    """`write` with the writers' own deprecation noise (itkwasm, dask under ngff-zarr)
    silenced: pytest's ``filterwarnings = error`` would fail the write."""

    @functools.wraps(write)
    def quiet(*args: P.args, **kwargs: P.kwargs) -> R:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            # ome-zarr-py 0.21 writing 0.6 metadata through ome-zarr-models
            warnings.filterwarnings("ignore", "Pydantic serializer warnings", UserWarning)
            return write(*args, **kwargs)

    return quiet


class LegacyWriterUnavailable(RuntimeError):
    """The venv with ome-zarr-py 0.10 cannot be made: the package index is unreachable."""


def _matrix(rows: Any) -> np.ndarray[Any, Any]:
    return np.vstack([np.asarray(rows, dtype=float), [0.0, 0.0, 1.0]])


# Per image: the transformation's matrix, intrinsic (y, x) → world (y, x), homogeneous.
SCENE_PLACEMENTS: Final[dict[str, np.ndarray[Any, Any]]] = {
    "identity": np.eye(3),
    "scale": np.diag([2.0, 3.0, 1.0]),
    "translation": _matrix([[1, 0, 5.0], [0, 1, -7.0]]),
    "affine": _matrix(_M),
    "rotation": _matrix([[0, -1, 0], [1, 0, 0]]),
    # scale 2, then rotation [[0, 1], [-1, 0]], then translation (3, 4)
    "sequence": _matrix([[0, 2, 3.0], [-2, 0, 4.0]]),
    "mapaxis": _matrix([[0, 1, 0], [1, 0, 0]]),
    "bydimension": _matrix([[2, 0, 0], [0, 1, 4.0]]),
    "bijection": _matrix(_M),
    "array": _matrix(_M),
}
ATLAS: Final = np.diag([0.5, 0.25, 1.0])  # world → atlas


# -- 0.1 to 0.3: ome-zarr-py 0.10 in a venv with zarr 2 -------------------------------


def _uv() -> str | None:
    found = shutil.which("uv")
    if found:
        return found
    local = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "uv"
    return str(local) if local.exists() else None


_UNREACHABLE = (
    "failed to fetch",
    "connection",
    "network",
    "temporary failure in name resolution",
    "could not find a version",
    "no matching distribution",
    "dns",
)


def legacy_python() -> Path:
    """The Python of a venv holding ome-zarr-py 0.10.3 (made once, under the temp folder).

    Raises
    ------
    LegacyWriterUnavailable
        The package index cannot be reached (the message says what failed).
    """
    tag = f"{LEGACY_WRITER.replace('==', '-')}-py{sys.version_info.major}{sys.version_info.minor}"
    home = Path(tempfile.gettempdir()) / "napari-lazy-zarr-test-venvs" / tag
    python = home / "bin" / "python"
    if (home / "ready").exists():
        return python
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    uv = _uv()
    if uv is not None:
        steps = [
            [uv, "venv", "-q", "--python", sys.executable, str(home)],
            [uv, "pip", "install", "-q", "--python", str(python), LEGACY_WRITER],
        ]
    else:
        steps = [
            [sys.executable, "-m", "venv", str(home)],
            [str(python), "-m", "pip", "install", "-q", LEGACY_WRITER],
        ]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    for step in steps:
        done = subprocess.run(
            step, capture_output=True, text=True, env=env, timeout=600, check=False
        )
        if done.returncode != 0:
            output = (done.stderr + done.stdout).strip()
            if any(word in output.lower() for word in _UNREACHABLE):
                raise LegacyWriterUnavailable(
                    f"{LEGACY_WRITER} cannot be installed: {output[-400:]}"
                )
            raise RuntimeError(f"{' '.join(step)} failed: {output[-2000:]}")
    (home / "ready").write_text("ok")
    return python


_LEGACY_SCRIPT: Final = r"""
import json, sys
import numpy as np, zarr
from ome_zarr.format import FormatV01, FormatV02, FormatV03
from ome_zarr.io import parse_url
from ome_zarr.writer import write_image, write_labels

version, path, arrays = sys.argv[1], sys.argv[2], sys.argv[3]
fmt = {"0.1": FormatV01(), "0.2": FormatV02(), "0.3": FormatV03()}[version]
axes = "tczyx" if version != "0.3" else "czyx"
shape = {"t": 1, "c": 2, "z": 2, "y": 48, "x": 56}
data = np.random.default_rng(7).integers(0, 60000, [shape[a] for a in axes], dtype=np.uint16)
root = zarr.group(store=parse_url(path, mode="w", fmt=fmt).store)
write_image(data, root, fmt=fmt, axes=None if version != "0.3" else axes)
label_axes = axes.replace("c", "") if version == "0.3" else axes
label_shape = [1 if a == "c" else shape[a] for a in label_axes]
labels = (np.arange(int(np.prod(label_shape))).reshape(label_shape) // 300 % 4).astype(np.uint8)
write_labels(labels, root, name="cells", fmt=fmt, axes=None if version != "0.3" else label_axes)
np.save(arrays + "-image.npy", data)
np.save(arrays + "-labels.npy", labels)
"""


def _written(path: Path, layers: tuple[np.ndarray[Any, Any], ...]) -> Written:
    from tests.conformance.cases import Written  # here: that module imports this one

    return Written(path, layers)


def write_legacy(folder: Path, version: str) -> Written:
    """An OME-Zarr `version` (0.1-0.3) image with 2 channels and a label image, by
    ome-zarr-py 0.10.3; expected: a layer per channel, then the labels."""
    python = legacy_python()
    path = folder / f"v{version}.ome.zarr"
    arrays = folder / "arrays"
    subprocess.run(
        [str(python), "-c", _LEGACY_SCRIPT, version, str(path), str(arrays)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    data = np.load(f"{arrays}-image.npy")
    labels = np.load(f"{arrays}-labels.npy")
    channel = 1 if version != "0.3" else 0
    layers = [np.take(data, c, axis=channel) for c in range(data.shape[channel])]
    layers.append(np.take(labels, 0, axis=1) if version != "0.3" else labels)
    return _written(path, tuple(layers))


# -- 0.6: ngff-zarr and ome-zarr-py ----------------------------------------------------


def _image(
    name: str, seed: int, shape: tuple[int, int] = (40, 50)
) -> tuple[Any, np.ndarray[Any, Any]]:
    import ngff_zarr as nz

    data = (np.random.default_rng(seed).random(shape) * 200 + 20).astype(np.uint8)
    image = nz.to_ngff_image(
        data,
        dims=("y", "x"),
        scale=dict(zip("yx", LEVEL0_SCALE, strict=True)),
        translation=dict(zip("yx", LEVEL0_TRANSLATION, strict=True)),
        name=name,
    )
    return nz.to_multiscales(image, scale_factors=[2], chunks=32), data


@_writer
def _ngff_image(folder: Path, axes: str) -> Written:
    import ngff_zarr as nz

    shape = {"c": 2, "z": 3, "y": 48, "x": 40}
    data = (np.random.default_rng(3).random([shape[a] for a in axes]) * 4000).astype(np.uint16)
    scale = {"z": 2.0, "y": 0.5, "x": 0.25}
    image = nz.to_ngff_image(
        data, dims=tuple(axes), scale={a: scale[a] for a in axes if a != "c"}, name="img"
    )
    path = folder / f"{axes}-0.6.ome.zarr"
    nz.to_ngff_zarr(
        str(path), nz.to_multiscales(image, scale_factors=[2], chunks=16), version="0.6"
    )
    if "c" in axes:
        return _written(path, tuple(np.take(data, c, axis=axes.index("c")) for c in range(2)))
    return _written(path, (data,))


# The types napari-ome-zarr 0.11 applies (its affine of a byDimension fails: "Affine
# transformation could not be computed"; a bijection is an UnsupportedTransformation).
NAPARI_OME_ZARR_TYPES: Final = (
    "identity", "scale", "translation", "affine", "rotation", "sequence", "mapaxis",
)  # fmt: skip


@_writer
def write_scene(
    folder: Path, *, types: tuple[str, ...] | None = None, atlas: bool = True
) -> Written:
    """A scene placing one image by each transformation type (or those of `types`) in
    ``world`` (then, with `atlas`, in ``atlas``, world scaled), one affine's parameters
    in a zarr array (ngff-zarr 0.50)."""
    import ngff_zarr as nz
    import zarr
    from ngff_zarr.v06 import zarr_metadata as v06

    def ref(path: str) -> Any:
        return v06.CoordinateSystemIdentifier(path=path, name="intrinsic")

    world = v06.CoordinateSystemIdentifier(name="world")
    matrix = [list(row) for row in _M]
    inverse = np.linalg.inv(_matrix(_M))[:2].tolist()
    item = v06.ByDimensionItem
    transforms: dict[str, Any] = {
        "identity": v06.Identity(),
        "scale": v06.Scale(scale=[2.0, 3.0]),
        "translation": v06.Translation(translation=[5.0, -7.0]),
        "affine": v06.Affine(affine=matrix),
        "rotation": v06.Rotation(rotation=[[0.0, -1.0], [1.0, 0.0]]),
        "sequence": v06.TransformSequence(
            transformations=[
                v06.Scale(scale=[2.0, 2.0]),
                v06.Rotation(rotation=[[0.0, 1.0], [-1.0, 0.0]]),
                v06.Translation(translation=[3.0, 4.0]),
            ]
        ),
        "mapaxis": v06.MapAxis(mapAxis=[1, 0]),
        "bydimension": v06.ByDimension(
            transformations=[
                item(transformation=v06.Scale(scale=[2.0]), inputAxes=[0], outputAxes=[0]),
                item(
                    transformation=v06.Translation(translation=[4.0]),
                    inputAxes=[1],
                    outputAxes=[1],
                ),
            ]
        ),
        "bijection": v06.Bijection(
            forward=v06.Affine(affine=matrix), inverse=v06.Affine(affine=inverse)
        ),
        "array": v06.Affine(affine=None, path="coordinateTransformations/affine"),  # type: ignore[arg-type]
    }
    path = folder / "scene.ome.zarr"
    images = {}
    layers = []
    chosen = {k: v for k, v in transforms.items() if types is None or k in types}
    for seed, (name, transform) in enumerate(chosen.items()):
        images[name], data = _image(name, seed)
        layers.append(data)
        transform.input, transform.output = ref(name), world
    to_atlas = v06.Scale(
        scale=[0.5, 0.25], input=world, output=v06.CoordinateSystemIdentifier(name="atlas")
    )
    yx = [v06.Axis(name=a, type="space", unit="micrometer") for a in "yx"]
    systems = [v06.CoordinateSystem(name="world", axes=yx)]
    if atlas:
        systems.append(v06.CoordinateSystem(name="atlas", axes=yx))
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    stored = root.create_group("coordinateTransformations").create_array(
        "affine", shape=(2, 3), dtype="f8"
    )
    stored[...] = np.asarray(_M)
    scene = nz.NgffScene(
        images=images,
        coordinateTransformations=[*chosen.values(), *([to_atlas] if atlas else [])],
        coordinateSystems=systems,
    )
    nz.to_ome_zarr(str(path), scene, version="0.6", overwrite=False)
    return _written(path, tuple(layers))


FIELD_SIZE: Final = 256
FIELD_SPACING: Final = 4.0


def field_arrays(size: int = FIELD_SIZE) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The warped image (uint16, smooth) and its displacement field ((2, n/4, n/4) float32,
    in intrinsic units, sampled every `FIELD_SPACING` pixels)."""
    yy, xx = np.mgrid[0:size, 0:size]
    data = ((np.sin(yy / 9.0) + np.cos(xx / 13.0)) * 1000 + 3000).astype(np.uint16)
    fy, fx = np.mgrid[0 : size // 4, 0 : size // 4] * FIELD_SPACING
    field = np.stack([6 * np.sin(fx / 40.0), 8 * np.cos(fy / 50.0)]).astype(np.float32)
    return data, field


@_writer
def write_field_image(folder: Path, size: int = FIELD_SIZE, *, chunks: int = 64) -> Written:
    """An image whose multiscale declares a ``displacements`` field (its child ``field``)
    from its intrinsic system to ``warped`` (ngff-zarr 0.50: `declare_field_transform`)."""
    import ngff_zarr as nz
    from ngff_zarr.v06 import zarr_metadata as v06

    data, field = field_arrays(size)
    path = folder / "field.ome.zarr"
    multiscales = nz.to_multiscales(
        nz.to_ngff_image(data, dims=("y", "x"), name="moving"), scale_factors=[2], chunks=chunks
    )
    metadata = multiscales.metadata.to_version("0.6")
    warped = v06.CoordinateSystem(
        name="warped", axes=[v06.Axis(name=a, type="space") for a in "yx"]
    )
    metadata = replace(metadata, coordinateSystems=[*metadata.coordinateSystems, warped])
    multiscales = nz.declare_field_transform(
        replace(multiscales, metadata=metadata),
        path="field",
        input_system="intrinsic",
        output_system="warped",
    )
    nz.to_ome_zarr(str(path), multiscales, version="0.6")
    vectors = nz.to_ngff_image(
        field,
        dims=("c", "y", "x"),
        scale={"c": 1.0, "y": FIELD_SPACING, "x": FIELD_SPACING},
        name="field",
    )
    vectors = replace(vectors, axes_types={"c": "displacement"})
    nz.to_ome_zarr(
        str(path / "field"),
        nz.to_multiscales(vectors, scale_factors=[2], chunks=32),
        version="0.6",
    )
    return _written(path, (data,))


@_writer
def _ome_zarr_py_labels(folder: Path) -> Written:
    """An OME-Zarr 0.6 image with a label image, by ome-zarr-py 0.21."""
    from ome_zarr import OMEZarrImage, OMEZarrLabels, OMEZarrMultiscale

    data = (np.random.default_rng(5).random((2, 3, 40, 48)) * 4000).astype(np.uint16)
    labels = (np.arange(3 * 40 * 48).reshape(3, 40, 48) // 500 % 4).astype(np.uint8)
    scale = {"c": 1.0, "z": 2.0, "y": 0.5, "x": 0.5}
    label_image = OMEZarrLabels(
        OMEZarrImage(labels, axes="zyx", scale={k: scale[k] for k in "zyx"}, name="cells"),
        scale_factors=[2],
    )
    image = OMEZarrMultiscale(
        OMEZarrImage(data, axes="czyx", scale=scale, name="cells-image"),
        scale_factors=[2],
        labels={"cells": label_image},
    )
    path = folder / "labels-0.6.ome.zarr"
    image.to_ome_zarr(str(path), version="0.6")
    return _written(path, (data[0], data[1], labels))


def build() -> tuple[Case, ...]:
    """The conformance cases of this module."""
    from tests.conformance.cases import Case

    cases = [
        Case(
            "ome-zarr-py 0.10",
            f"{version} tczyx + labels" if version != "0.3" else "0.3 czyx + labels",
            lambda f, v=version: write_legacy(f, v),
        )
        for version in ("0.1", "0.2", "0.3")
    ]
    cases += [
        Case("ngff-zarr 0.6", "0.6 yx", lambda f: _ngff_image(f, "yx")),
        Case("ngff-zarr 0.6", "0.6 czyx", lambda f: _ngff_image(f, "czyx")),
        Case("ngff-zarr 0.6", "scene, every transformation", write_scene),
        Case(
            "ngff-zarr 0.6",
            "scene, the types napari-ome-zarr applies",
            lambda f: write_scene(f, types=NAPARI_OME_ZARR_TYPES, atlas=False),
        ),
        Case("ngff-zarr 0.6", "displacement field", write_field_image),
        Case("ome-zarr-py 0.6", "0.6 czyx + labels", _ome_zarr_py_labels),
    ]
    return tuple(cases)


def scene_document(path: Path) -> dict[str, Any]:
    """The scene's ``ome`` attributes (for messages)."""
    return json.loads((path / "zarr.json").read_text())["attributes"]["ome"]
