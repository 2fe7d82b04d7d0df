"""Arrays napari cannot show, and chunk grids zarr leaves disabled, on stores zarr-python writes.

Complex arrays are read by `open_array` (Python users take ``np.abs`` of them;
the napari reader refuses them, tests/napari/test_files.py); structured,
string, date and duration arrays are refused wherever they are opened, with an
`UnsupportedDtypeError` naming the array, the dtype and the way out. A
rectilinear chunk grid (zarr v3, written by zarr-python with its
``array.rectilinear_chunks`` flag on) is read when the flag is on, and
otherwise refused naming the flag, not called malformed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core.errors import (
    DisabledFeatureError,
    UnsupportedDataError,
    UnsupportedDtypeError,
)
from napari_lazy_zarr.core.formats.ome import describe_store
from napari_lazy_zarr.core.sources import _zarr_compat as compat

if TYPE_CHECKING:
    from pathlib import Path


def _write(path: Path, data: np.ndarray[Any, Any], zarr_format: int, **kwargs: Any) -> Path:
    with warnings.catch_warnings():  # zarr warns that some v3 dtypes are not specified yet
        warnings.simplefilter("ignore")
        array = zarr.create_array(
            str(path),
            shape=data.shape,
            dtype=data.dtype,
            zarr_format=zarr_format,  # type: ignore[arg-type]
            **kwargs,
        )
        array[...] = data
    return path


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_complex_arrays_are_read_for_python(tmp_path: Path, zarr_format: int) -> None:
    """The engine reads them (the napari reader refuses them: tests/napari/test_files.py)."""
    rng = np.random.default_rng(0)
    data = (rng.random((40, 48)) + 1j * rng.random((40, 48))).astype("complex64")
    path = _write(tmp_path / "phase.zarr", data, zarr_format, chunks=(16, 16))
    image = open_array(path)
    try:
        np.testing.assert_array_equal(image[...].result(timeout=30), data)
    finally:
        image.cache.close()


NON_IMAGE: dict[str, tuple[np.ndarray[Any, Any], str]] = {
    "structured": (
        np.zeros((40, 48), dtype=[("intensity", "u2"), ("mask", "u1")]),
        r"\['intensity'\]",
    ),
    "unicode": (np.full((40, 48), "ab", dtype="<U2"), "strings are not pixels"),
    "bytes": (np.full((40, 48), b"ab", dtype="S2"), "byte strings are not pixels"),
    "datetime": (np.zeros((40, 48), dtype="datetime64[s]"), r"astype\('int64'\)"),
    "timedelta": (np.zeros((40, 48), dtype="timedelta64[ms]"), "durations are not pixels"),
}


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", sorted(NON_IMAGE))
def test_non_image_dtypes_name_the_array_the_dtype_and_the_way_out(
    tmp_path: Path, kind: str, zarr_format: int
) -> None:
    data, way_out = NON_IMAGE[kind]
    path = _write(tmp_path / f"{kind}.zarr", data, zarr_format)
    for opener in (describe_store, open_array):
        with warnings.catch_warnings():
            # zarr warns on opening a v3 dtype without a specification (fixed-length bytes)
            warnings.simplefilter("ignore", zarr.errors.UnstableSpecificationWarning)
            with pytest.raises(UnsupportedDtypeError, match=way_out) as refused:
                opener(path)
        assert str(refused.value).startswith(f"{path}: dtype {np.dtype(data.dtype)} ")
        assert isinstance(refused.value, UnsupportedDataError)


# -- rectilinear chunk grids ---------------------------------------------------------------


def _rectilinear(path: Path) -> np.ndarray[Any, Any]:
    data = np.arange(60 * 50, dtype=np.uint16).reshape(60, 50)
    with zarr.config.set({compat.RECTILINEAR_CHUNKS_FLAG: True}):
        array = zarr.create_array(
            str(path), shape=data.shape, chunks=[[10, 20, 30], [25, 25]], dtype="u2"
        )
        array[...] = data
        assert array.read_chunk_sizes == ((10, 20, 30), (25, 25))
    return data


def test_a_rectilinear_grid_names_the_flag_zarr_leaves_off(tmp_path: Path) -> None:
    _rectilinear(tmp_path / "rect.zarr")
    assert not zarr.config.get(compat.RECTILINEAR_CHUNKS_FLAG)
    for opener in (describe_store, open_array):
        with pytest.raises(DisabledFeatureError) as refused:
            opener(tmp_path / "rect.zarr")
        message = str(refused.value)
        assert "rectilinear chunk grid" in message
        assert "ZARR_ARRAY__RECTILINEAR_CHUNKS=True" in message
        assert "malformed" not in message


def test_a_rectilinear_grid_is_read_when_the_flag_is_on(tmp_path: Path) -> None:
    data = _rectilinear(tmp_path / "rect.zarr")
    with zarr.config.set({compat.RECTILINEAR_CHUNKS_FLAG: True}):
        image = open_array(tmp_path / "rect.zarr")
        try:
            np.testing.assert_array_equal(image[...].result(timeout=30), data)
            np.testing.assert_array_equal(image[5:35, 20:30].result(timeout=30), data[5:35, 20:30])
        finally:
            image.cache.close()


def test_the_environment_variable_zarr_reads_enables_it(tmp_path: Path) -> None:
    """What the error tells a napari user to set, set before the process starts."""
    data = _rectilinear(tmp_path / "rect.zarr")
    code = textwrap.dedent(
        """
        import numpy as np
        from napari_lazy_zarr import open_array
        image = open_array("rect.zarr")
        np.save("read.npy", image[...].result(timeout=30))
        image.cache.close()
        """
    )
    env = {**os.environ, "ZARR_ARRAY__RECTILINEAR_CHUNKS": "True"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "read.npy"), data)


def test_zarr_raises_the_disabled_error_compat_names(tmp_path: Path) -> None:
    """Contract: zarr 3.4's flag key and the (private) error class it raises without it."""
    _rectilinear(tmp_path / "rect.zarr")
    with pytest.raises(compat.RectilinearChunksDisabledError):
        zarr.open_array(str(tmp_path / "rect.zarr"), mode="r")
