"""Every decode backend reads every layout like NumPy: one property suite, then bad input.

Stores are written at test time by zarr-python (v2 blosc and zstd, v3 zstd,
v3 sharded; clipped edge chunks; chunks holding only the fill value are not
stored, so they read as absent) and by TensorStore itself. For each backend
installed, every chunk of the read grid must equal the NumPy slice, and
random selections through a `ChunkedArray` over a threaded cache must equal
NumPy's.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from zarr_indexing.testing import apply_selection, basic_selections

from napari_lazy_zarr.core import (
    ChunkCache,
    ChunkedArray,
    ChunkReadError,
    ChunkState,
    InlineExecutor,
    LoadCancelledError,
    LoadTimeoutError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
    ZarrChunkSource,
    open_zarr_source,
)
from napari_lazy_zarr.core.keys import ChunkRef, chunk_bounds, grid_shape
from napari_lazy_zarr.core.settings import Timeouts
from napari_lazy_zarr.core.sources.backends import (
    BACKENDS,
    TensorStoreChunkSource,
    ZarrsChunkSource,
    available_backends,
    choose_backend,
    open_backend_source,
)
from napari_lazy_zarr.core.storage.retry import NO_RETRY
from tests.remote.server import Faults, FaultyServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

AVAILABLE = available_backends()
EVERY_BACKEND = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(name not in AVAILABLE, reason=f"{name} is not installed"),
    )
    for name in BACKENDS
]
OPTIONAL_BACKENDS = [param for param in EVERY_BACKEND if param.values[0] != "zarr"]


# -- the layouts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """A store on disk and the NumPy array it holds (absent chunks included)."""

    name: str
    path: Path
    data: np.ndarray[Any, Any]
    fill_value: Any


def _values(shape: tuple[int, ...], dtype: str) -> np.ndarray[Any, Any]:
    """Distinct, position-dependent values (never the fill value 0 for unsigned types)."""
    values = np.arange(1, 1 + int(np.prod(shape)), dtype=np.int64).reshape(shape)
    if np.dtype(dtype).kind == "f":
        return (values / 7).astype(dtype)
    return (values % (np.iinfo(dtype).max - 1) + 1).astype(dtype)


def _with_holes(data: np.ndarray[Any, Any], fill: Any, holes: tuple[Any, ...]) -> Any:
    """`data` with chunk-aligned regions set to the fill value: zarr does not store them."""
    data = data.copy()
    for hole in holes:
        data[hole] = fill
    return data


def _zarr_layout(
    root: Path,
    name: str,
    *,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: str,
    zarr_format: int,
    compressors: Any,
    fill_value: Any,
    holes: tuple[Any, ...],
    shards: tuple[int, ...] | None = None,
    absent: str | None = None,
) -> Layout:
    data = _with_holes(_values(shape, dtype), fill_value or 0, holes)
    path = root / f"{name}.zarr"
    array = zarr.create_array(
        store=str(path),
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        zarr_format=zarr_format,  # type: ignore[arg-type]
        compressors=compressors,
        fill_value=fill_value,
    )
    array[...] = data
    if absent is not None:  # the holes really are missing from the store
        assert not (path / absent).exists()
    return Layout(name, path, data, fill_value)


def _tensorstore_layout(root: Path, driver: str) -> Layout:
    ts = pytest.importorskip("tensorstore")
    path = root / f"ts-{driver}.zarr"
    shape, chunks = (30, 41), (8, 8)
    data = _with_holes(_values(shape, "uint16"), 0, ((slice(8, 24), slice(0, 16)),))
    store = ts.open(
        {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}},
        create=True,
        dtype="uint16",
        shape=shape,
        chunk_layout=ts.ChunkLayout(chunk_shape=chunks),
    ).result()
    # Write around the hole only, so its chunks are never stored.
    store[:8].write(data[:8]).result()
    store[24:].write(data[24:]).result()
    store[8:24, 16:].write(data[8:24, 16:]).result()
    return Layout(f"tensorstore {driver}", path, data, None)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Layout]:
    root = tmp_path_factory.mktemp("backends")
    made = [
        _zarr_layout(
            root,
            "v2-blosc-u2",
            shape=(37, 53),
            chunks=(8, 16),
            dtype="uint16",
            zarr_format=2,
            compressors=numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE),
            fill_value=0,
            holes=((slice(8, 16), slice(16, 32)),),
            absent="1.1",
        ),
        _zarr_layout(
            root,
            "v2-zstd-f4-null",
            shape=(29, 31),
            chunks=(10, 10),
            dtype="float32",
            zarr_format=2,
            compressors=numcodecs.Zstd(level=1),
            fill_value=None,
            holes=((slice(20, 29), slice(0, 10)),),
            absent="2.0",
        ),
        _zarr_layout(
            root,
            "v3-zstd-i2",
            shape=(5, 17, 19),
            chunks=(2, 8, 8),
            dtype="int16",
            zarr_format=3,
            compressors=zarr.codecs.ZstdCodec(level=1),
            fill_value=-3,
            holes=((slice(2, 4), slice(0, 8), slice(8, 16)),),
            absent="c/1/0/1",
        ),
        _zarr_layout(
            root,
            "v3-sharded-u1",
            shape=(70, 90),
            chunks=(8, 10),
            dtype="uint8",
            zarr_format=3,
            compressors=zarr.codecs.ZstdCodec(level=1),
            fill_value=0,
            shards=(32, 40),
            # One inner chunk of a stored shard, and a whole shard.
            holes=((slice(8, 16), slice(10, 20)), (slice(32, 64), slice(40, 80))),
            absent="c/1/1",
        ),
    ]
    if "tensorstore" in AVAILABLE:
        made += [_tensorstore_layout(root, "zarr3"), _tensorstore_layout(root, "zarr")]
    return {layout.name: layout for layout in made}


LAYOUT_NAMES = [
    "v2-blosc-u2",
    "v2-zstd-f4-null",
    "v3-zstd-i2",
    "v3-sharded-u1",
    "tensorstore zarr3",
    "tensorstore zarr",
]


def _layout(layouts: dict[str, Layout], name: str) -> Layout:
    if name not in layouts:
        pytest.skip(f"{name}: tensorstore is not installed")
    return layouts[name]


# -- the property suite ---------------------------------------------------------------


@pytest.mark.parametrize("backend", EVERY_BACKEND)
@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_every_chunk_equals_numpy(layouts: dict[str, Layout], name: str, backend: str) -> None:
    layout = _layout(layouts, name)
    source = open_backend_source(layout.path, backend=backend)
    reference = open_zarr_source(layout.path)
    # The same read grid (inner chunks when sharded), extent, dtype and fill value.
    assert source.shape == layout.data.shape
    assert source.dtype == layout.data.dtype
    assert grid_shape(source) == grid_shape(reference)
    for g, r in zip(source.grid, reference.grid, strict=True):
        assert [g.chunk_offset(i) for i in range(4)] == [r.chunk_offset(i) for i in range(4)]
    assert source.fill_value == reference.fill_value
    assert source.fill_value.dtype == layout.data.dtype
    for coords in np.ndindex(*grid_shape(source)):
        lo, hi = chunk_bounds(source.grid, coords, source.shape)
        expected = layout.data[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]
        chunk = source.read_chunk(coords)
        assert chunk.dtype == expected.dtype
        np.testing.assert_array_equal(chunk, expected)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_random_selections_through_a_chunked_array_equal_numpy(
    layouts: dict[str, Layout], name: str, backend: str
) -> None:
    layout = _layout(layouts, name)
    source = open_backend_source(layout.path, backend=backend)

    @settings(max_examples=15, deadline=None)
    @given(selection=basic_selections(layout.data.shape))
    def check(selection: tuple[Any, ...]) -> None:
        cache.evict_unpinned()  # every example reads its chunks through the backend
        expected = apply_selection(layout.data, selection, "basic")
        np.testing.assert_array_equal(array[selection].result(timeout=30), expected)

    # Two worker threads: backends are read from workers, several at once, as in use.
    with ChunkCache(64 << 20, concurrency=2) as cache:
        array = ChunkedArray(source, cache)
        check()


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_every_open_is_a_new_identity(layouts: dict[str, Layout], backend: str) -> None:
    path = layouts["v3-zstd-i2"].path
    first = open_backend_source(path, backend=backend)
    second = open_backend_source(path, backend=backend)
    kinds = {
        "zarr": ZarrChunkSource,
        "tensorstore": TensorStoreChunkSource,
        "zarrs": ZarrsChunkSource,
    }
    assert type(first) is kinds[backend]
    assert first.identity != second.identity
    assert str(first.identity) == str(path)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_array_inside_a_group(tmp_path: Path, backend: str) -> None:
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    data = _values((12, 9), "uint16")
    group.create_array("image", shape=data.shape, chunks=(5, 5), dtype=data.dtype)[...] = data
    source = open_backend_source(tmp_path / "g.zarr", path="image", backend=backend)
    with ChunkCache(1 << 20, executor=InlineExecutor()) as inline:
        np.testing.assert_array_equal(ChunkedArray(source, inline).result(), data)


# -- choosing a backend -----------------------------------------------------------------


def test_auto_is_zarr_python(layouts: dict[str, Layout]) -> None:
    path = layouts["v3-zstd-i2"].path
    assert choose_backend("auto", path) == "zarr"
    assert choose_backend("auto", "https://example.org/a.zarr") == "zarr"
    assert type(open_backend_source(path)) is type(open_zarr_source(path))


def test_unknown_backend_names_the_allowed_ones(layouts: dict[str, Layout]) -> None:
    with pytest.raises(ValueError, match=r"'auto', 'zarr', 'tensorstore', 'zarrs'"):
        open_backend_source(layouts["v3-zstd-i2"].path, backend="numpy")


@pytest.mark.parametrize("backend", ["tensorstore", "zarrs"])
def test_a_backend_not_installed_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, layouts: dict[str, Layout], backend: str
) -> None:
    # An environment without the package: the finder does not find it.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == backend else find_spec(name, *args),
    )
    assert backend not in available_backends()
    # What pip can install today (the plugin is not on the package index), and its extra.
    with pytest.raises(
        UnsupportedDataError, match=rf"pip install {backend} \(the plugin's \[{backend}\] extra\)"
    ):
        open_backend_source(layouts["v3-zstd-i2"].path, backend=backend)


@pytest.mark.parametrize("backend", OPTIONAL_BACKENDS)
def test_zip_stores_are_left_to_zarr_python(
    layouts: dict[str, Layout], tmp_path: Path, backend: str
) -> None:
    layout = layouts["v3-zstd-i2"]
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for file in layout.path.rglob("*"):
            if file.is_file():
                zipped.write(file, file.relative_to(layout.path).as_posix())
    with pytest.raises(UnsupportedDataError, match=r"use backend='zarr'"):
        open_backend_source(archive, backend=backend)


def test_zarrs_reads_local_directories_only() -> None:
    if "zarrs" not in AVAILABLE:
        pytest.skip("zarrs is not installed")
    with pytest.raises(UnsupportedDataError, match=r"local directories only"):
        open_backend_source("http://127.0.0.1:9/a.zarr", backend="zarrs")


# -- bad input, the same for every backend ------------------------------------------------


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_missing_store(tmp_path: Path, backend: str) -> None:
    with pytest.raises(StoreNotFoundError, match=r"nope\.zarr"):
        open_backend_source(tmp_path / "nope.zarr", backend=backend)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_group_is_not_an_array(tmp_path: Path, backend: str) -> None:
    zarr.open_group(tmp_path / "g.zarr", mode="w").create_array("x", shape=(2,), dtype="u1")
    with pytest.raises(NotAZarrStoreError, match=r"'x'"):
        open_backend_source(tmp_path / "g.zarr", backend=backend)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_object_dtype_is_refused_before_any_read(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "objects.zarr"
    path.mkdir()
    zarray = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "|O",
        "compressor": None,
        "fill_value": None,
        "filters": [{"id": "pickle"}],
        "order": "C",
    }
    (path / ".zarray").write_text(json.dumps(zarray))
    with pytest.raises(UnsafeDataError, match=r"objects\.zarr"):
        open_backend_source(path, backend=backend)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_string_dtype_is_unsupported(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "text.zarr"
    zarr.create_array(path, shape=(3,), dtype="<U4", fill_value="")[...] = ["a", "b", "c"]
    with pytest.raises(UnsupportedDataError, match=r"text\.zarr"):
        open_backend_source(path, backend=backend)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_garbage_chunk_fails_naming_it_and_the_rest_is_served(
    tmp_path: Path, backend: str
) -> None:
    data = _values((24, 24), "uint16")
    path = tmp_path / "bad.zarr"
    zarr.create_array(
        path,
        shape=data.shape,
        chunks=(8, 8),
        dtype=data.dtype,
        compressors=zarr.codecs.ZstdCodec(),
    )[...] = data
    (path / "c" / "2" / "1").write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 10)
    source = open_backend_source(path, backend=backend, retry=NO_RETRY)
    with pytest.raises(ChunkReadError, match=r"'c/2/1' \(grid position \(2, 1\)"):
        source.read_chunk((2, 1))
    with ChunkCache(1 << 20, executor=InlineExecutor()) as inline:
        array = ChunkedArray(source, inline)
        with pytest.raises(ChunkReadError, match=r"c/2/1"):
            array.result()
        assert inline.state(ChunkRef.of(source, (2, 1)).key) is ChunkState.FAILED
        np.testing.assert_array_equal(array[:16].result(), data[:16])


# -- TensorStore over HTTP ------------------------------------------------------------------


@pytest.fixture
def served(layouts: dict[str, Layout]) -> Iterator[tuple[str, Layout, Faults]]:
    if "tensorstore" not in AVAILABLE:
        pytest.skip("tensorstore is not installed")
    layout = layouts["v3-sharded-u1"]
    faults = Faults()
    with FaultyServer(layout.path.parent, faults) as server:
        try:
            yield f"{server.url}/{layout.path.name}", layout, faults
        finally:
            faults.release.set()  # no request stays stalled past the test


def test_tensorstore_over_http_equals_numpy(served: tuple[str, Layout, Faults]) -> None:
    url, layout, _ = served
    source = open_backend_source(url, backend="tensorstore")
    assert isinstance(source, TensorStoreChunkSource)
    with ChunkCache(16 << 20, concurrency=2) as threaded:
        result = ChunkedArray(source, threaded)[5:60, 7:83].result(timeout=30)
    np.testing.assert_array_equal(result, layout.data[5:60, 7:83])


def test_tensorstore_transient_errors_are_retried(served: tuple[str, Layout, Faults]) -> None:
    url, layout, faults = served
    source = open_backend_source(url, backend="tensorstore")
    shard = f"{layout.path.name}/c/0/0"
    faults.errors[shard] = 503
    faults.error_times[shard] = 1  # once: the retry succeeds
    np.testing.assert_array_equal(source.read_chunk((0, 0)), layout.data[:8, :10])
    assert faults.injected == 1
    faults.errors[shard] = 403  # refused: not retried
    del faults.error_times[shard]
    with pytest.raises(ChunkReadError, match=r"access denied, not retried"):
        source.read_chunk((0, 0))
    assert faults.injected == 2


def test_tensorstore_read_is_bounded_in_time(served: tuple[str, Layout, Faults]) -> None:
    url, layout, faults = served
    source = open_backend_source(
        url, backend="tensorstore", retry=NO_RETRY, timeouts=Timeouts(total=0.5)
    )
    faults.silent.add(f"{layout.path.name}/c/0/0")  # the server never answers
    with pytest.raises(LoadTimeoutError, match=r"c/0/0.*no result within 0\.5 s"):
        source.read_chunk((0, 0))


def test_tensorstore_cancel_load_ends_a_read_in_flight(
    served: tuple[str, Layout, Faults],
) -> None:
    url, layout, faults = served
    source = open_backend_source(url, backend="tensorstore", retry=NO_RETRY)
    assert isinstance(source, TensorStoreChunkSource)
    faults.silent.add(f"{layout.path.name}/c/0/0")
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            source.read_chunk((0, 1))
        except BaseException as error:
            outcome.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    assert faults.silenced.wait(10)  # the read is in flight, waiting on the server
    source.cancel_load((0, 1))
    reader.join(10)
    assert not reader.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], LoadCancelledError)


def test_open_array_takes_a_backend(tmp_path: Path) -> None:
    from napari_lazy_zarr import open_array

    path = tmp_path / "a.zarr"
    data = np.arange(40 * 30, dtype="u2").reshape(40, 30)
    zarr.create_array(str(path), shape=data.shape, chunks=(16, 16), dtype="u2")[...] = data
    for backend in available_backends():
        image = open_array(path, backend=backend)
        try:
            np.testing.assert_array_equal(image[3:37, 5:29].result(timeout=30), data[3:37, 5:29])
        finally:
            image.cache.close()
    with pytest.raises(ValueError, match="unknown backend 'fast'"):
        open_array(path, backend="fast")
