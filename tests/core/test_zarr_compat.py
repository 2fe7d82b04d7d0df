"""Contract tests: the zarr-python internals `_zarr_compat` uses still exist and do what it needs.

One test per compat function (or per override of a zarr-private hook), against
the installed zarr, with NumPy as the oracle: a zarr upgrade that moves one
fails here, by name, not deep in a chunk read.
"""

from __future__ import annotations

import asyncio
import threading
import zipfile
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.abc.store import RangeByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.codecs import ShardingCodec
from zarr.storage import LocalStore, LoggingStore, MemoryStore, WrapperStore, ZipStore

from napari_lazy_zarr.core.sources import _zarr_compat as compat
from napari_lazy_zarr.core.storage.local import BoundedLocalStore, BoundedZipStore
from napari_lazy_zarr.core.storage.memo import MetadataMemoStore

if TYPE_CHECKING:
    from pathlib import Path

    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest


def _data(shape: tuple[int, ...] = (12, 10)) -> np.ndarray[Any, Any]:
    return (np.arange(int(np.prod(shape))) % 65521).astype("u2").reshape(shape)


def _open(store: Any, path: str = "") -> zarr.Array[Any]:
    """An array opened as the engine opens it: with zarr's fused pipeline."""
    with zarr.config.set(compat.FUSED_PIPELINE_CONFIG):
        return zarr.open_array(store, path=path, mode="r")


def _written(tmp_path: Path, name: str = "a.zarr", **kwargs: Any) -> zarr.Array[Any]:
    data = kwargs.pop("data", _data())
    path = tmp_path / name
    zarr.create_array(path, shape=data.shape, dtype=data.dtype, **kwargs)[...] = data
    return _open(str(path))


def _spec(array: zarr.Array[Any], coords: tuple[int, ...]) -> Any:
    return compat.chunk_spec(
        array.metadata,
        compat.chunk_grid(array),
        coords,
        array.config,
        default_buffer_prototype(),
    )


def _raw(array: zarr.Array[Any], key: str, byte_range: ByteRequest | None = None) -> Buffer:
    raw = array.store_path.store.get_sync(key, byte_range=byte_range)  # type: ignore[attr-defined]
    assert raw is not None
    return raw  # type: ignore[no-any-return]


# -- arrays ---------------------------------------------------------------


def test_fused_pipeline_config_selects_a_synchronous_pipeline(tmp_path: Path) -> None:
    array = _written(tmp_path, chunks=(4, 4))
    assert type(array.async_array.codec_pipeline).__name__ == "FusedCodecPipeline"
    assert compat.sync_transform(array.async_array.codec_pipeline) is not None


def test_chunk_grid_and_regularity(tmp_path: Path) -> None:
    regular = _written(tmp_path, chunks=(4, 4))
    assert compat.has_regular_grid(regular)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        store = MemoryStore()
        zarr.create_array(store, shape=(8, 8), chunks=[[2, 3, 3], [4, 4]], dtype="u1")
        rectilinear = _open(store)
        assert not compat.has_regular_grid(rectilinear)
        assert compat.chunk_grid(rectilinear)[(1, 0)].codec_shape == (3, 4)


def test_chunk_spec_describes_one_stored_chunk(tmp_path: Path) -> None:
    array = _written(tmp_path, chunks=(5, 4), fill_value=7)
    prototype = default_buffer_prototype()
    spec = _spec(array, (2, 2))
    assert tuple(spec.shape) == (5, 4)  # the codec shape: edge chunks are whole
    assert spec.dtype.to_native_dtype() == np.dtype("u2")
    assert spec.fill_value == 7
    assert spec.prototype == prototype
    assert spec.config == array.config
    with pytest.raises(IndexError):
        _spec(array, (3, 0))
    # ZarrChunkSource makes a regular grid's spec once: every chunk's must be the same.
    assert compat.has_regular_grid(array)
    assert {_spec(array, (r, c)) for r in range(3) for c in range(3)} == {_spec(array, (0, 0))}


def test_config_with_order_replaces_only_the_order(tmp_path: Path) -> None:
    array = _written(tmp_path, chunks=(4, 4), zarr_format=2, order="F")
    assert array.metadata.order == "F"  # type: ignore[union-attr]
    config = compat.config_with_order(array.config, "F")
    assert config.order == "F"
    assert compat.config_with_order(config, "C") == compat.config_with_order(array.config, "C")


# -- codec pipeline -------------------------------------------------------


def test_sync_transform_decodes_a_stored_chunk(tmp_path: Path) -> None:
    data = _data()
    array = _written(tmp_path, data=data, chunks=(4, 4), compressors=zarr.codecs.ZstdCodec())
    transform = compat.sync_transform(array.async_array.codec_pipeline)
    assert transform is not None
    decoded = transform.decode_chunk(_raw(array, "c/1/2"), _spec(array, (1, 2)))
    np.testing.assert_array_equal(np.asarray(decoded.as_ndarray_like())[:, :2], data[4:8, 8:])
    assert compat.sync_transform(object()) is None


def test_transform_codecs_and_a_transform_over_fewer_of_them(tmp_path: Path) -> None:
    data = _data()
    array = _written(tmp_path, data=data, chunks=(4, 4), compressors=zarr.codecs.ZstdCodec())
    transform = compat.sync_transform(array.async_array.codec_pipeline)
    codecs = compat.transform_codecs(transform)
    assert [type(c).__name__ for c in codecs] == ["BytesCodec", "ZstdCodec"]
    # Decompress ourselves, hand zarr the chain without the compressor: the same pixels.
    tail = compat.transform_with_codecs(transform, codecs[:1])
    assert compat.transform_codecs(tail) == codecs[:1]
    plain = numcodecs.Zstd().decode(_raw(array, "c/0/1").as_numpy_array())
    prototype = default_buffer_prototype()
    decoded = tail.decode_chunk(prototype.buffer.from_bytes(plain), _spec(array, (0, 1)))
    np.testing.assert_array_equal(np.asarray(decoded.as_ndarray_like()), data[:4, 4:8])


def test_v2_codec_with_another_compressor(tmp_path: Path) -> None:
    data = _data()
    array = _written(
        tmp_path, data=data, chunks=(4, 4), zarr_format=2, compressors=numcodecs.Zstd()
    )
    transform = compat.sync_transform(array.async_array.codec_pipeline)
    (v2,) = compat.transform_codecs(transform)
    assert v2.compressor is not None
    bare = compat.v2_codec_with(v2, compressor=None, filters=None)
    assert bare.compressor is None
    assert bare.filters is None
    tail = compat.transform_with_codecs(transform, (bare,))
    plain = numcodecs.Zstd().decode(_raw(array, "1.0").as_numpy_array())
    prototype = default_buffer_prototype()
    decoded = tail.decode_chunk(prototype.buffer.from_bytes(plain), _spec(array, (1, 0)))
    np.testing.assert_array_equal(np.asarray(decoded.as_ndarray_like()), data[4:8, :4])


def test_sole_sharding_codec(tmp_path: Path) -> None:
    sharded = _written(tmp_path, "s.zarr", chunks=(2, 5), shards=(4, 10))
    codec = compat.sole_sharding_codec(sharded.async_array.codec_pipeline)
    assert isinstance(codec, ShardingCodec)
    assert tuple(codec.chunk_shape) == (2, 5)
    plain = _written(tmp_path, "p.zarr", chunks=(4, 4))
    assert compat.sole_sharding_codec(plain.async_array.codec_pipeline) is None
    assert compat.sole_sharding_codec(object()) is None


# -- sharding -------------------------------------------------------------


class _Getter:
    """What `load_shard_index` reads the index through (like `_IndexGetter`)."""

    def __init__(self, store: Any, key: str) -> None:
        self.store, self.key = store, key
        self.ranges: list[ByteRequest | None] = []

    def get_sync(
        self, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.ranges.append(byte_range)
        return self.store.get_sync(self.key, prototype=prototype, byte_range=byte_range)  # type: ignore[no-any-return]


def test_shard_index_ranges_and_inner_chunks_decode(tmp_path: Path) -> None:
    data = _data((12, 20))
    array = _written(
        tmp_path,
        data=data,
        chunks=(2, 5),
        shards=(4, 10),
        compressors=zarr.codecs.ZstdCodec(),
        fill_value=3,
    )
    codec = compat.sole_sharding_codec(array.async_array.codec_pipeline)
    assert codec is not None
    shard_spec = _spec(array, (1, 1))
    per_shard = compat.inner_chunks_per_shard(codec, shard_spec)
    assert per_shard == (2, 2)
    getter = _Getter(array.store_path.store, "c/1/1")
    index = compat.load_shard_index(codec, getter, per_shard)
    assert index is not None
    assert len(getter.ranges) == 1  # one read: the index only
    inner_spec = compat.inner_chunk_spec(codec, shard_spec)
    assert tuple(inner_spec.shape) == (2, 5)
    assert inner_spec.dtype == shard_spec.dtype
    transform = compat.inner_chunk_transform(codec, shard_spec)
    for inner in np.ndindex(*per_shard):
        found = compat.shard_chunk_range(index, inner)
        assert found is not None
        start, stop = found
        assert isinstance(start, int)
        assert 0 <= start < stop
        raw = _raw(array, "c/1/1", RangeByteRequest(start, stop))
        decoded = np.asarray(transform.decode_chunk(raw, inner_spec).as_ndarray_like())
        r, c = 4 + 2 * inner[0], 10 + 5 * inner[1]
        np.testing.assert_array_equal(decoded, data[r : r + 2, c : c + 5])


def test_absent_shards_and_inner_chunks(tmp_path: Path) -> None:
    path = tmp_path / "sparse.zarr"
    written = zarr.create_array(
        path, shape=(8, 20), chunks=(2, 5), shards=(4, 10), dtype="u2", fill_value=0
    )
    written[0:2, 0:5] = 9  # one inner chunk of shard (0, 0); shard (1, 1) never written
    array = _open(str(path))
    codec = compat.sole_sharding_codec(array.async_array.codec_pipeline)
    assert codec is not None
    per_shard = compat.inner_chunks_per_shard(codec, _spec(array, (0, 0)))
    store = array.store_path.store
    assert compat.load_shard_index(codec, _Getter(store, "c/1/1"), per_shard) is None
    index = compat.load_shard_index(codec, _Getter(store, "c/0/0"), per_shard)
    assert compat.shard_chunk_range(index, (0, 0)) is not None
    assert compat.shard_chunk_range(index, (1, 1)) is None


# -- stores -------------------------------------------------------------------


class _AsyncOnlyStore(WrapperStore[MemoryStore]):
    """A wrapper whose wrapped store cannot serve synchronous reads right now."""

    _supports_sync_io = False


def test_store_supports_sync_io(tmp_path: Path) -> None:
    local = LocalStore(tmp_path)
    assert compat.store_supports_sync_io(local)
    assert compat.store_supports_sync_io(LoggingStore(local, log_level="CRITICAL"))
    assert not compat.store_supports_sync_io(_AsyncOnlyStore(MemoryStore()))
    assert not compat.store_supports_sync_io(object())


def test_run_sync_runs_on_zarrs_loop_from_a_worker_thread() -> None:
    async def where() -> tuple[int, int]:
        await asyncio.sleep(0)
        return threading.get_ident(), 42

    results: list[tuple[int, int]] = []
    worker = threading.Thread(target=lambda: results.append(compat.run_sync(where())))
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    ((loop_thread, value),) = results
    assert value == 42
    assert loop_thread not in (worker.ident, threading.get_ident())


def test_a_bounded_local_store_without_its_root_reads_absent_keys(tmp_path: Path) -> None:
    # It reads files itself (no LocalStore open state): a missing root is missing keys.
    store = BoundedLocalStore(tmp_path / "absent", read_only=True)
    assert store.get_sync("zarr.json") is None


def test_a_bounded_zip_store_reads_members_from_many_threads(tmp_path: Path) -> None:
    # Its member reads go through an archive of its own, under its own lock.
    path = tmp_path / "a.zip"
    payloads = {f"m{i}": bytes([i]) * (1000 + i) for i in range(16)}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in payloads.items():
            archive.writestr(name, data)
    store = BoundedZipStore(path)
    prototype = default_buffer_prototype()
    wrong: list[str] = []

    def read(name: str) -> None:
        for _ in range(20):
            got = store.get_bounded(name, prototype)
            if got is None or got.to_bytes() != payloads[name]:
                wrong.append(name)

    threads = [threading.Thread(target=read, args=(name,)) for name in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert wrong == []
    assert store.get_bounded("absent", prototype) is None
    tail = store.get_bounded("m3", prototype, RangeByteRequest(1000, 1003))
    assert tail is not None
    assert tail.to_bytes() == bytes([3]) * 3


def test_bounded_zip_store_overrides_every_read_of_zip_store() -> None:
    # BoundedZipStore bounds `get` and `get_partial_values`; `Store`'s other reads
    # (`get_ranges`, `getsize`) go through `get`. A zarr whose ZipStore gains a read
    # path of its own (a `get_sync`, say) must have it bounded too before it is used.
    own_reads = {name for name in vars(ZipStore) if name.startswith("get")}
    assert own_reads == {"get", "get_partial_values"}
    assert not hasattr(ZipStore, "get_sync")
    for name in own_reads:
        assert name in vars(BoundedZipStore), name


def test_wrapper_store_copies_through_with_store(tmp_path: Path) -> None:
    # zarr copies a MetadataMemoStore (read-only ones while opening) through
    # WrapperStore's copy methods: the copies must share one memo, so `forget` reaches them.
    inner = MemoryStore()
    zarr.create_array(inner, shape=(4,), dtype="u1")
    store = MetadataMemoStore(inner)
    copy = store.with_read_only(True)
    assert isinstance(copy, MetadataMemoStore)
    assert copy.wrapped.read_only
    _open(copy)
    assert store._memo is copy._memo
    assert store._memo.documents
    store.forget()
    assert copy._memo.documents is None


def test_settle_reads_takes_the_outcome_of_a_read_nobody_awaits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read left on zarr's loop by a gather that raised for a sibling: once
    `settle_reads` returns it has ended and its failure was taken, so asyncio logs nothing
    when it is collected (the CLI printed "Task exception was never retrieved" and 20 lines
    of traceback after its one-line error when it exited under such a read)."""
    import gc

    gate = threading.Event()

    async def orphan_read() -> bytes:
        await asyncio.to_thread(gate.wait, 30)
        raise ConnectionRefusedError("refused")

    async def start() -> asyncio.Task[bytes]:
        return asyncio.get_running_loop().create_task(orphan_read())

    task = compat.run_sync(start())
    gate.set()
    compat.settle_reads(30)
    assert task.done()
    del task
    with caplog.at_level("ERROR", logger="asyncio"):
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
