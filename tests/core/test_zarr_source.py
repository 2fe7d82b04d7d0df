"""ZarrChunkSource on real stores: formats, codecs, sharding, missing chunks, bad input."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest
import zarr

from napari_lazy_zarr.core import (
    ChunkCache,
    ChunkReadError,
    ChunkState,
    InlineExecutor,
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
    open_array,
    open_zarr_source,
)
from napari_lazy_zarr.core.keys import ChunkRef, chunk_bounds, grid_shape

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    MakeStore = Callable[..., tuple[Path, np.ndarray[Any, Any]]]


def _all_chunks_equal(path: Path, data: np.ndarray[Any, Any]) -> int:
    source = open_zarr_source(path)
    count = 0
    for coords in np.ndindex(*grid_shape(source)):
        lo, hi = chunk_bounds(source.grid, coords, source.shape)
        expected = data[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]
        np.testing.assert_array_equal(source.read_chunk(coords), expected)
        count += 1
    return count


@pytest.mark.parametrize(
    ("zarr_format", "compressors"),
    [
        (3, "auto"),
        (3, zarr.codecs.ZstdCodec(level=1)),
        (3, zarr.codecs.BloscCodec(cname="lz4")),
        (3, zarr.codecs.GzipCodec()),
        (3, None),
        (2, "auto"),
        (2, numcodecs.Blosc(cname="lz4")),
        (2, numcodecs.Zstd(level=3)),
        (2, None),
    ],
)
def test_every_chunk_equals_numpy(
    make_store: MakeStore, zarr_format: int, compressors: Any
) -> None:
    # 37 x 53 over 8 x 16 chunks: the last row and column of chunks are clipped.
    path, data = make_store(zarr_format=zarr_format, compressors=compressors)
    assert _all_chunks_equal(path, data) == 5 * 4


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64, np.bool_])
def test_dtypes_round_trip(make_store: MakeStore, dtype: Any) -> None:
    data = (np.arange(37 * 53).reshape(37, 53) % 7).astype(dtype)
    path, _ = make_store(data=data)
    _all_chunks_equal(path, data)


def test_sharded_array_reads_inner_chunks(make_store: MakeStore) -> None:
    path, data = make_store(shape=(70, 90), chunks=(8, 10), shards=(32, 40))
    source = open_zarr_source(path)
    # The read grid is the inner chunk grid (zarr's read_chunk_sizes), not the shards.
    assert grid_shape(source) == (9, 9)
    assert source.stored_key((5, 4)) == "c/1/1"
    assert _all_chunks_equal(path, data) == 81


def test_three_dimensional_array(make_store: MakeStore) -> None:
    path, data = make_store(shape=(5, 17, 19), chunks=(2, 8, 8))
    _all_chunks_equal(path, data)


def test_missing_chunk_is_fill_value_and_ready(
    make_store: MakeStore, inline_cache: ChunkCache
) -> None:
    path, data = make_store(fill_value=7)
    (path / "c" / "1" / "2").unlink()
    data = data.copy()
    data[8:16, 32:48] = 7
    source = open_zarr_source(path)
    ref = ChunkRef.of(source, (1, 2))
    with inline_cache.request([ref]) as request:
        assert request.complete
    assert inline_cache.state(ref.key) is ChunkState.READY
    image = open_array(path, cache=inline_cache)
    np.testing.assert_array_equal(image.result(), data)


def test_corrupt_chunk_fails_naming_the_key(
    make_store: MakeStore, inline_cache: ChunkCache
) -> None:
    path, data = make_store(compressors=zarr.codecs.ZstdCodec(level=1))
    chunk_file = path / "c" / "2" / "1"
    chunk_file.write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 10)
    image = open_array(path, cache=inline_cache)
    with pytest.raises(ChunkReadError, match=r"c/2/1"):
        image.result()
    source = image.source
    bad = ChunkRef.of(source, (2, 1)).key
    assert inline_cache.state(bad) is ChunkState.FAILED
    assert "c/2/1" in str(inline_cache.error(bad))
    # Every other chunk of the same request loaded and is served.
    np.testing.assert_array_equal(image[:16].result(), data[:16])
    np.testing.assert_array_equal(image[:, 32:].result(), data[:, 32:])


# -- bad input ---------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match=r"nope\.zarr: no such file"):
        open_zarr_source(tmp_path / "nope.zarr")


def test_a_file_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "image.tif"
    path.write_bytes(b"II*\x00")
    with pytest.raises(NotAZarrStoreError, match=r"image\.tif: is a file"):
        open_zarr_source(path)


def test_empty_directory(tmp_path: Path) -> None:
    path = tmp_path / "empty.zarr"
    path.mkdir()
    with pytest.raises(
        NotAZarrStoreError, match=r"empty\.zarr: not a zarr store: no zarr metadata"
    ):
        open_zarr_source(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"zarr_format": 3, "node_type": "array"', "malformed JSON"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"zarr_format": 3, "node_type": "array", "shape": "big"}', "malformed zarr metadata"),
    ],
)
def test_malformed_metadata(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broken.zarr"
    path.mkdir()
    (path / "zarr.json").write_text(text)
    with pytest.raises(MetadataError, match=rf"broken\.zarr.*{message}"):
        open_zarr_source(path)


def test_group_names_its_arrays(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("0", shape=(4,), dtype="u1")
    group.create_array("1", shape=(2,), dtype="u1")
    with pytest.raises(NotAZarrStoreError, match=r"is a zarr group.*'0', '1'"):
        open_zarr_source(tmp_path / "g.zarr")
    assert open_zarr_source(tmp_path / "g.zarr", path="1").shape == (2,)


def test_pickle_codec_refused_before_decoding(tmp_path: Path) -> None:
    """A v2 object array with a pickle filter: refused at open, nothing unpickled."""
    path = tmp_path / "evil.zarr"
    path.mkdir()
    (path / ".zarray").write_text(
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [2],
                "chunks": [2],
                "dtype": "|O",
                "compressor": None,
                "fill_value": None,
                "filters": [{"id": "pickle", "protocol": 5}],
                "order": "C",
            }
        )
    )
    # A chunk that would run code if unpickled.
    (path / "0").write_bytes(b"cos\nsystem\n(S'touch /tmp/pwned-by-lazy-zarr'\ntR.")
    with pytest.raises((UnsafeDataError, MetadataError), match=r"evil\.zarr"):
        open_zarr_source(path)


def test_pickle_filter_on_numeric_dtype_refused(tmp_path: Path) -> None:
    path = tmp_path / "pickled.zarr"
    path.mkdir()
    (path / ".zarray").write_text(
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [4],
                "chunks": [4],
                "dtype": "<u2",
                "compressor": None,
                "fill_value": 0,
                "filters": [{"id": "pickle"}],
                "order": "C",
            }
        )
    )
    with pytest.raises(UnsafeDataError, match=r"pickled\.zarr.*'pickle'.*arbitrary code"):
        open_zarr_source(path)


def test_string_dtype_is_unsupported(tmp_path: Path) -> None:
    array = zarr.create_array(str(tmp_path / "s.zarr"), shape=(3,), dtype=str)
    array[:] = np.array(["a", "b", "c"])
    with pytest.raises(UnsupportedDataError, match=r"s\.zarr: dtype .* cannot be shown"):
        open_zarr_source(tmp_path / "s.zarr")


def test_sharded_absent_inner_chunks_and_shards_are_fill_value(
    make_store: MakeStore, inline_cache: ChunkCache
) -> None:
    data = np.arange(70 * 90, dtype=np.uint16).reshape(70, 90) % 1000 + 1
    data[8:16, 10:20] = 5  # one whole inner chunk equal to the fill value: not stored
    data[32:64, 40:80] = 5  # one whole shard equal to the fill value: no shard object
    path, _ = make_store(data=data, chunks=(8, 10), shards=(32, 40), fill_value=5)
    assert not (path / "c" / "1" / "1").exists()
    assert _all_chunks_equal(path, data) == 81
    np.testing.assert_array_equal(open_array(path, cache=inline_cache).result(), data)


def test_zipped_store_reads_like_a_directory(make_store: MakeStore, tmp_path: Path) -> None:
    import shutil

    path, data = make_store()
    zipped = shutil.make_archive(str(tmp_path / "zipped.zarr"), "zip", root_dir=path)
    with pytest.raises(NotAZarrStoreError, match="is a file"):
        open_zarr_source(path / "zarr.json")
    assert _all_chunks_equal(zipped, data) == 20  # type: ignore[arg-type]


# -- fill values ---------------------------------------------------------------
# Zarr allows any value of the dtype, NaN and the infinities, and (Zarr v2) null:
# zarr-python reads null as the dtype's zero, and so must we, blocking or not.

SHAPE, CHUNKS = (10, 12), (4, 5)
WRITTEN = (slice(0, 4), slice(0, 10))  # two chunks of the twelve; the rest are absent


def _values(dtype: str) -> np.ndarray[Any, Any]:
    shape = tuple(s.stop - s.start for s in WRITTEN)
    values = np.arange(1, 1 + int(np.prod(shape))).reshape(shape) % 5 + 1
    return values.astype(dtype) if dtype != "bool" else values % 2 == 0


def _check_reads(path: Path, expected: np.ndarray[Any, Any], placeholder: Any) -> None:
    """Non-blocking before anything is loaded (the placeholder), then blocking (the data)."""
    with ChunkCache(64 << 20, executor=InlineExecutor()) as cache:
        image = open_array(path, cache=cache)
        assert image.dtype == expected.dtype
        assert isinstance(image.fill_value, np.generic)
        assert image.fill_value.dtype == expected.dtype
        partial = image.read_nonblocking()
        assert not partial.complete
        np.testing.assert_array_equal(partial.data, np.full(SHAPE, placeholder, expected.dtype))
        np.testing.assert_array_equal(image.result(), expected)
        np.testing.assert_array_equal(
            image[3:9, ::-2].read_nonblocking().data, expected[3:9, ::-2]
        )


@pytest.mark.parametrize(
    "dtype", ["uint8", "int16", "uint16", "int32", "float32", "float64", "complex64", "bool"]
)
def test_tensorstore_zarr_v2_defaults_null_fill_value(tmp_path: Path, dtype: str) -> None:
    ts = pytest.importorskip("tensorstore")
    path = tmp_path / "ts.zarr"
    store = ts.open(
        {"driver": "zarr", "kvstore": {"driver": "file", "path": str(path)}},
        create=True,
        dtype=dtype,
        shape=SHAPE,
        chunk_layout=ts.ChunkLayout(chunk_shape=CHUNKS),
    ).result()
    store[WRITTEN].write(_values(dtype)).result()
    assert json.loads((path / ".zarray").read_text())["fill_value"] is None
    expected = store.read().result()
    assert not expected[4:].any()  # TensorStore reads the absent chunks as zero too
    _check_reads(path, expected, placeholder=0)


@pytest.mark.parametrize(
    ("dtype", "fill_value"),
    [("uint16", None), ("float32", None), ("float32", float("nan")), ("int8", -3)],
)
def test_tensorstore_zarr3(tmp_path: Path, dtype: str, fill_value: Any) -> None:
    ts = pytest.importorskip("tensorstore")
    path = tmp_path / "ts3.zarr"
    metadata: dict[str, Any] = {"data_type": dtype}
    if fill_value is not None:
        metadata["fill_value"] = "NaN" if fill_value != fill_value else fill_value
    kvstore = {"driver": "file", "path": str(path)}
    store = ts.open(
        {"driver": "zarr3", "kvstore": kvstore, "metadata": metadata},
        create=True,
        shape=SHAPE,
        chunk_layout=ts.ChunkLayout(chunk_shape=CHUNKS),
    ).result()
    store[WRITTEN].write(_values(dtype)).result()
    expected = store.read().result()
    placeholder = 0 if fill_value is None else fill_value
    np.testing.assert_array_equal(expected[4:], np.full((6, 12), placeholder, dtype))
    _check_reads(path, expected, placeholder)


@pytest.mark.parametrize(
    ("dtype", "fill_value", "placeholder"),
    [
        ("uint16", None, 0),
        ("int16", None, 0),
        ("float32", None, 0.0),
        ("complex128", None, 0j),
        ("bool", None, False),
        ("float32", float("nan"), float("nan")),
        ("float64", float("inf"), float("inf")),
        ("float32", -float("inf"), -float("inf")),
        ("int16", -7, -7),
        ("float64", 2.5, 2.5),
        ("bool", True, True),
    ],
)
def test_zarr_python_v2_fill_values(
    tmp_path: Path, dtype: str, fill_value: Any, placeholder: Any
) -> None:
    path = tmp_path / "v2.zarr"
    array = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype=dtype, zarr_format=2, fill_value=fill_value
    )
    array[WRITTEN] = _values(dtype)
    written = json.loads((path / ".zarray").read_text())["fill_value"]
    assert (written is None) == (fill_value is None)
    expected = zarr.open_array(str(path), mode="r")[...]
    np.testing.assert_array_equal(expected[4:], np.full((6, 12), placeholder, dtype))
    _check_reads(path, expected, placeholder)


@pytest.mark.parametrize("fill_value", [float("nan"), -float("inf"), 1.5])
def test_zarr_python_v3_sharded_fill_values(tmp_path: Path, fill_value: float) -> None:
    """Absent inner chunks and absent shards hold the fill value (the shard reader's path)."""
    path = tmp_path / "sharded.zarr"
    array = zarr.create_array(
        str(path),
        shape=SHAPE,
        chunks=(2, 5),
        shards=CHUNKS,
        dtype="float32",
        fill_value=fill_value,
    )
    array[WRITTEN] = _values("float32")
    array[0:2, 0:5] = fill_value  # an inner chunk equal to the fill value: not stored
    expected = zarr.open_array(str(path), mode="r")[...]
    np.testing.assert_array_equal(expected[4:], np.full((6, 12), fill_value, "float32"))
    _check_reads(path, expected, fill_value)


def test_composites_over_a_null_fill_value_hold_a_value(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.sources.composite import (
        CastSource,
        ConcatSource,
        FunctionSource,
        StackSource,
    )

    path = tmp_path / "null.zarr"
    zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="u2", zarr_format=2, fill_value=None
    )
    assert json.loads((path / ".zarray").read_text())["fill_value"] is None
    source = open_zarr_source(path)
    composites = [
        source,
        ConcatSource([source, source], axis=1),
        StackSource([source, source]),
        CastSource(source, "float32"),
        FunctionSource(np.zeros, shape=SHAPE, dtype="i2", chunks=CHUNKS, fill_value=None),
    ]
    for composite in composites:
        value = composite.fill_value
        assert isinstance(value, np.generic), composite
        assert (value.dtype, value) == (composite.dtype, 0), composite


def test_local_stores_are_read_through_bounded_stores(make_store: MakeStore) -> None:
    from napari_lazy_zarr.core import Timeouts
    from napari_lazy_zarr.core.sources.zarr import ZarrIdentity
    from napari_lazy_zarr.core.storage.local import BoundedLocalStore

    path, data = make_store()
    source = open_zarr_source(path, timeouts=Timeouts(total=5.0))
    assert isinstance(source.array.store, BoundedLocalStore)
    assert source.timeouts.total == 5.0
    assert isinstance(source.identity, ZarrIdentity)
    assert str(source.identity) == str(path)
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data[:8, :16])


def test_a_sharded_inner_chunk_of_a_rewritten_shard_reads_the_new_index(
    make_store: MakeStore,
) -> None:
    path, data = make_store(shape=(64, 64), chunks=(8, 8), shards=(32, 32))
    source = open_zarr_source(path)
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data[:8, :8])  # index cached
    # Rewrite shard c/0/0 in place with other values (another layout of its bytes).
    array = zarr.open_array(str(path), mode="r+")
    array[:32, :32] = np.arange(32 * 32, dtype=data.dtype).reshape(32, 32)[::-1]
    expected = np.arange(32 * 32, dtype=data.dtype).reshape(32, 32)[::-1]
    np.testing.assert_array_equal(source.read_chunk((1, 1)), expected[8:16, 8:16])


@pytest.mark.parametrize("seed", range(12))
def test_every_chunk_reads_its_box_on_regular_grids(tmp_path: Path, seed: int) -> None:
    """A regular grid locates chunks by arithmetic: every chunk of random shapes, chunks and
    shards (edge chunks and partial shards included) reads NumPy's box."""
    import itertools

    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(1, 24, ndim))
    inner = tuple(int(n) for n in rng.integers(1, 7, ndim))
    shards = (
        tuple(i * int(k) for i, k in zip(inner, rng.integers(1, 4, ndim), strict=True))
        if seed % 2
        else None
    )
    data = rng.integers(0, 255, size=shape, dtype=np.uint8)
    path = str(tmp_path / "a.zarr")
    zarr.create_array(path, shape=shape, chunks=inner, shards=shards, dtype="u1")[...] = data
    source = open_zarr_source(path)
    grid = [range(-(-s // c)) for s, c in zip(shape, inner, strict=True)]
    for coords in itertools.product(*grid):
        lo, hi = chunk_bounds(source.grid, coords, shape)
        box = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        np.testing.assert_array_equal(source.read_chunk(coords), data[box])
        numpy_coords = tuple(np.int64(c) for c in coords)  # as a user may pass them
        np.testing.assert_array_equal(source.read_chunk(numpy_coords), data[box])  # type: ignore[arg-type]


def test_shard_indexes_count_in_the_cache_budget(tmp_path: Path) -> None:
    """The shard indexes a sharded array keeps are counted in the byte budget of the cache
    reading it: chunks are evicted to make room for them."""
    from napari_lazy_zarr.core import ChunkedArray, KeepingSource

    data = np.arange(256 * 256, dtype="u2").reshape(256, 256)
    path = str(tmp_path / "s.zarr")  # written by zarr-python: 8 x 8 inner chunks per shard
    zarr.create_array(path, shape=data.shape, chunks=(8, 8), shards=(64, 64), dtype="u2")[...] = (
        data
    )
    source = open_zarr_source(path)
    assert isinstance(source, KeepingSource)
    assert source.kept_bytes == 0
    index = 8 * 8 * 16  # (offset, length) per inner chunk, 8 bytes each
    chunk = 8 * 8 * 2
    limit = 64 * chunk  # 64 inner chunks; 16 shards' indexes would take 128 of them
    with ChunkCache(limit, executor=InlineExecutor()) as cache:
        image = ChunkedArray(source, cache)
        for row in range(0, 256, 64):  # one inner chunk of each shard, then a few more
            for col in range(0, 256, 64):
                np.testing.assert_array_equal(
                    image[row : row + 16, col : col + 16].result(timeout=10),
                    data[row : row + 16, col : col + 16],
                )
                stats = cache.statistics
                assert stats.kept_bytes == source.kept_bytes
                assert stats.resident_bytes + stats.kept_bytes <= max(limit, stats.kept_bytes)
        assert source.kept_bytes == 16 * index
        stats = cache.statistics
        assert stats.kept_bytes == 16 * index
        assert stats.resident_bytes == 0  # the indexes alone fill the budget
        cache.total_bytes_limit = 16 * index + 10 * chunk
        np.testing.assert_array_equal(image[:40, :16].result(timeout=10), data[:40, :16])
        assert cache.statistics.resident_bytes == 10 * chunk  # room for 10 chunks beside them
