"""The public Python API: open_array and ChunkedArray as users script it."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import napari_lazy_zarr
from napari_lazy_zarr.core import (
    ArraySource,
    ChunkCache,
    ChunkedArray,
    ChunkReadError,
    InlineExecutor,
    NotAZarrStoreError,
)
from napari_lazy_zarr.core.reading.plans import PointPlan
from napari_lazy_zarr.core.testing import FaultySource

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    MakeStore = Callable[..., tuple[Path, np.ndarray[Any, Any]]]


def test_open_array_surface(make_store: MakeStore) -> None:
    path, data = make_store(shape=(37, 53), chunks=(8, 16))
    image = napari_lazy_zarr.open_array(path, total_bytes_limit=1 << 20, concurrency=3)
    try:
        assert (image.shape, image.dtype, image.ndim, image.size) == (
            (37, 53),
            np.dtype("uint16"),
            2,
            37 * 53,
        )
        assert image.chunks == (8, 16)
        assert image.cache.total_bytes_limit == 1 << 20
        assert image.cache.concurrency == 3
        view = image[3:30:2, ::-5]
        assert view.shape == data[3:30:2, ::-5].shape
        assert image.cache.statistics.loads == 0  # indexing reads nothing
        np.testing.assert_array_equal(view.result(timeout=30), data[3:30:2, ::-5])
        np.testing.assert_array_equal(np.asarray(view), data[3:30:2, ::-5])
        np.testing.assert_array_equal(np.asarray(view, dtype=np.float32), data[3:30:2, ::-5])
        rows, cols = [5, 1, 1, 36], [52, 0, 17]
        np.testing.assert_array_equal(image.oindex[rows, cols].result(), data[np.ix_(rows, cols)])
        np.testing.assert_array_equal(
            image.vindex[rows, [1, 2, 3, 4]].result(), data[rows, [1, 2, 3, 4]]
        )
        scalar = image[36, 52].result()
        assert scalar.shape == ()
        assert scalar == data[36, 52]
        assert len(image) == 37
    finally:
        image.cache.close()


def test_large_point_gather_uses_the_partition_tables() -> None:
    data = np.arange(2048 * 2048, dtype=np.uint32).reshape(2048, 2048)
    rng = np.random.default_rng(0)
    ys, xs = rng.integers(0, 2048, 10_000), rng.integers(0, 2048, 10_000)
    with ChunkCache(64 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(ArraySource(data, chunks=(32, 32)), cache)
        points = image.vindex[ys, xs]
        assert isinstance(points.plan(), PointPlan)
        np.testing.assert_array_equal(points.result(), data[ys, xs])
        # The same gather, non-blocking, once resident.
        partial = points.read_nonblocking()
        assert partial.complete
        np.testing.assert_array_equal(partial.data, data[ys, xs])
        partial.request.release()
        # A point gather of a plane of a 3-d array (a scalar index plus points).
        cube = ChunkedArray(ArraySource(data.reshape(4, 1024, 1024), chunks=(1, 64, 64)), cache)
        np.testing.assert_array_equal(
            cube.vindex[2, ys % 1024, xs % 1024].result(),
            data.reshape(4, 1024, 1024)[2, ys % 1024, xs % 1024],
        )


def test_nonblocking_placeholder_fallback_and_completion() -> None:
    from napari_lazy_zarr.core import ManualExecutor

    data = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    manual = ManualExecutor()
    with ChunkCache(1 << 20, executor=manual) as cache:
        image = ChunkedArray(ArraySource(data, chunks=(16, 16)), cache)
        view = image[8:40, 8:40]
        first = view.read_nonblocking(placeholder=-1)
        assert len(first.missing) == 9
        assert not first.complete
        assert (first.data == -1).all()
        called: list[bool] = []
        first.request.done.add_done_callback(lambda f: called.append(f.cancelled()))
        manual.run_next()  # the centre chunk loads first
        fallback = np.full(view.shape, 5.0, dtype=np.float32)
        second = view.read_nonblocking(fallback=fallback)
        assert len(second.missing) == 8
        assert called == [True]  # the first request was superseded by the second
        centre = data[16:32, 16:32]
        np.testing.assert_array_equal(second.data[8:24, 8:24], centre)
        assert (second.data[:8] == 5.0).all()
        manual.run_all()
        assert second.request.complete
        third = view.read_nonblocking()
        assert third.complete
        np.testing.assert_array_equal(third.data, data[8:40, 8:40])
        third.request.release()
        with pytest.raises(ValueError, match="fallback has shape"):
            view.read_nonblocking(fallback=np.zeros((2, 2), dtype=np.float32))


def test_blocking_read_names_the_failed_chunk() -> None:
    source = FaultySource(ArraySource(np.zeros((8, 8)), chunks=(4, 4), name="img"), {(1, 0)})
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(source, cache)  # type: ignore[arg-type]
        with pytest.raises(ChunkReadError, match=r"img'\)\[4:8, 0:4\] failed.*injected fault"):
            image.result()
        np.testing.assert_array_equal(image[:4].result(), np.zeros((4, 8)))


def test_blocking_read_timeout() -> None:
    from napari_lazy_zarr.core import ManualExecutor

    with ChunkCache(1 << 20, executor=ManualExecutor()) as cache:
        image = ChunkedArray(ArraySource(np.zeros((8, 8)), chunks=(4, 4)), cache)
        with pytest.raises(TimeoutError):
            image.result(timeout=0.01)


def test_core_imports_no_qt_and_no_napari() -> None:
    code = (
        "import sys, napari_lazy_zarr, napari_lazy_zarr.core;"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('napari', 'qtpy', 'PyQt5', 'PyQt6', 'PySide2', 'PySide6', 'superqt', 'magicgui')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_demo_command_reads_the_generated_store(tmp_path: Path) -> None:
    from napari_lazy_zarr.cli import main

    assert main(["engine-demo", "--directory", str(tmp_path), "--image-size", "2048"]) == 0
    # The second run reuses the store.
    assert main(["engine-demo", "--directory", str(tmp_path), "--image-size", "2048"]) == 0


def test_mixed_regular_and_irregular_axes_partition_exactly() -> None:
    """A grid with a fixed axis (clipped last chunk) beside an irregular one."""
    from zarr_indexing import FixedDimension, VaryingDimension

    data = np.arange(37 * 10).reshape(37, 10)

    source = ArraySource(data, chunks=(8, 10))
    source._grid = (
        FixedDimension(size=8, extent=37),
        VaryingDimension(edges=(3, 3, 4), extent=10),
    )
    with ChunkCache(1 << 20, executor=InlineExecutor()) as cache:
        image = ChunkedArray(source, cache)
        np.testing.assert_array_equal(
            image.oindex[[36, 0], [9, 1, 4]].result(), data[np.ix_([36, 0], [9, 1, 4])]
        )
        np.testing.assert_array_equal(image[30:, ::-1].result(), data[30:, ::-1])


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"concurrency": 2.5}, TypeError, r"concurrency must be an int >= 1, got 2\.5"),
        ({"concurrency": "4"}, TypeError, r"concurrency must be an int >= 1, got '4'"),
        ({"concurrency": True}, TypeError, r"concurrency must be an int >= 1, got True"),
        ({"concurrency": 0}, ValueError, r"concurrency must be an int >= 1, got 0"),
        ({"total_bytes_limit": float("nan")}, TypeError, r"total_bytes_limit .* got nan"),
        ({"total_bytes_limit": float("inf")}, TypeError, r"total_bytes_limit .* got inf"),
        ({"total_bytes_limit": 2.0**30}, TypeError, r"total_bytes_limit .* \(float\)"),
        ({"total_bytes_limit": -1}, ValueError, r"total_bytes_limit must be an int >= 0"),
        ({"timeouts": 5.0}, TypeError, r"timeouts must be a Timeouts, got 5\.0"),
        ({"retry": 3}, TypeError, r"retry must be a RetryPolicy, got 3"),
    ],
)
def test_open_array_checks_its_arguments_before_any_io(
    tmp_path: Path, arguments: dict[str, Any], error: type[Exception], match: str
) -> None:
    # The store does not exist: a bad argument is reported first, as a programming error.
    with pytest.raises(error, match=match):
        napari_lazy_zarr.open_array(tmp_path / "absent.zarr", **arguments)


def test_open_array_on_a_silent_server_fails_within_its_timeouts(tmp_path: Path) -> None:
    """A server that accepts and never answers: a clear error once the caps pass."""
    from napari_lazy_zarr.core import LazyZarrError, RetryPolicy, Timeouts
    from tests.remote.server import Faults, FaultyServer

    (tmp_path / "a.zarr").mkdir()
    faults = Faults(silent={"*"})
    timeouts = Timeouts(connect=0.5, read=0.5, total=1.0)
    with FaultyServer(tmp_path, faults) as server:
        url = f"{server.url}/a.zarr"
        with pytest.raises(LazyZarrError, match=r"a\.zarr") as raised:
            napari_lazy_zarr.open_array(url, timeouts=timeouts, retry=RetryPolicy(attempts=1))
    assert raised.value.__cause__ is not None or raised.value.__context__ is not None


def test_result_is_woken_by_close_from_another_thread() -> None:
    import threading

    from napari_lazy_zarr.core import CacheClosedError, ManualExecutor

    cache = ChunkCache(1 << 20, executor=ManualExecutor())  # nothing ever loads
    image = ChunkedArray(ArraySource(np.zeros((8, 8)), chunks=(4, 4)), cache)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            image.result(timeout=30)
        except BaseException as error:
            errors.append(error)

    queued = threading.Event()
    cache.state_changed.connect(lambda events: queued.set())  # after the request is made
    reader = threading.Thread(target=read)
    reader.start()
    assert queued.wait(timeout=30)
    cache.close()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert [type(e) for e in errors] == [CacheClosedError]


def test_a_url_whose_protocol_needs_a_package_names_it() -> None:
    import importlib.util

    # gs://, s3://, az:// and http(s):// are obstore's (a dependency); sftp:// is fsspec's,
    # with paramiko.
    if importlib.util.find_spec("paramiko") is not None:
        pytest.skip("paramiko is installed here")
    with pytest.raises(NotAZarrStoreError, match="paramiko") as raised:
        napari_lazy_zarr.open_array("sftp://example.org/image.zarr")
    # What to install is the package fsspec names, not an extra that does not hold it.
    assert "napari-lazy-zarr[remote]" not in str(raised.value)
