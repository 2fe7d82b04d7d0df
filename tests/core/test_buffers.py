"""Decoded chunks in recycled memory: a block is reused only when no array can see it,
and decoding into a block is bounded exactly by its size."""

from __future__ import annotations

import gc
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs import blosc

from napari_lazy_zarr.core.buffers import BlockPool
from napari_lazy_zarr.core.sources._decode import (
    ExpansionError,
    decode_into,
    native_decode,
    native_decoding,
)
from napari_lazy_zarr.core.sources.zarr import open_zarr_source

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

try:
    import imagecodecs
except ImportError:  # the `codecs` extra is not installed: only the numcodecs path runs
    imagecodecs = None


@pytest.fixture(params=["native", "numcodecs"])
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both blosc decode paths: imagecodecs (when installed) and the numcodecs fallback."""
    native = request.param == "native"
    if native and imagecodecs is None:
        pytest.skip("imagecodecs (the codecs extra) is not installed")
    with native_decoding(native):
        assert native_decode() is native
        yield request.param


def test_a_block_comes_back_only_when_no_view_of_it_is_left() -> None:
    pool = BlockPool(1 << 20)
    block = pool.lease(1024)
    chunk = block.view("u2").reshape(16, 32)
    chunk[...] = 7
    chunk.flags.writeable = False
    row = chunk[3]  # a view the cache's caller kept
    del block, chunk
    gc.collect()
    assert pool.free_bytes == 0
    other = pool.lease(1024)  # must not be the kept view's memory
    other[...] = 0
    assert (row == 7).all()
    del row
    assert pool.free_bytes == 1024
    again = pool.lease(1024)
    assert pool.free_bytes == 0
    assert again.flags.writeable


def test_the_pool_keeps_at_most_its_limit() -> None:
    pool = BlockPool(3000)
    blocks = [pool.lease(1000) for _ in range(5)]
    del blocks
    assert pool.free_bytes == 3000
    pool.clear()
    assert pool.free_bytes == 0


def test_leases_and_returns_from_many_threads() -> None:
    pool = BlockPool(1 << 20)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(200):
                block = pool.lease(256)
                block[...] = (seed + i) % 251
                assert (block == (seed + i) % 251).all()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert pool.free_bytes <= 4 * 256


# The decode path (`decoder`) is chosen once for every example: no state to reset.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.binary(min_size=0, max_size=5000),
    codec=st.sampled_from(["zstd", "blosc"]),
    frames=st.integers(1, 3),
    cname=st.sampled_from([b"lz4", b"zstd", b"blosclz", b"zlib", b"lz4hc"]),
    shuffle=st.sampled_from([blosc.NOSHUFFLE, blosc.SHUFFLE, blosc.BITSHUFFLE]),
    typesize=st.sampled_from([1, 2, 4, 8]),
)
def test_decode_into_fills_exactly_what_the_data_holds(
    decoder: str,
    data: bytes,
    codec: str,
    frames: int,
    cname: bytes,
    shuffle: int,
    typesize: int,
) -> None:
    if codec == "zstd":
        parts = [data[i::frames] for i in range(frames)]
        encoded = b"".join(zstandard.compress(p) for p in parts)
        plain = b"".join(parts)
    else:
        encoded = blosc.compress(data, cname, 5, shuffle, typesize)
        plain = data
    out = np.empty(len(plain), dtype=np.uint8)
    decode_into(codec, encoded, out)
    assert out.tobytes() == plain
    if plain:
        with pytest.raises(ValueError, match=r"fewer|more|expands"):
            decode_into(codec, encoded, np.empty(len(plain) + 1, dtype=np.uint8))
        with pytest.raises(ExpansionError):
            decode_into(codec, encoded, np.empty(len(plain) - 1, dtype=np.uint8))


def test_a_blosc_frame_declaring_more_than_its_chunk_is_refused(decoder: str) -> None:
    frame = bytearray(blosc.compress(bytes(8192), b"zstd", 5, blosc.SHUFFLE, 2))
    frame[4:8] = (512 << 20).to_bytes(4, "little")  # declares 512 MiB
    with pytest.raises(ExpansionError, match="declares"):
        decode_into("blosc", bytes(frame), np.empty(8192, dtype=np.uint8))
    # A header claiming more compressed bytes than the data holds would make c-blosc
    # read past the data: refused before decoding, on either path.
    frame = bytearray(blosc.compress(bytes(range(256)) * 32, b"lz4", 5, blosc.SHUFFLE, 2))
    frame[12:16] = (len(frame) + 64).to_bytes(4, "little")
    with pytest.raises(ValueError, match="compressed bytes"):
        decode_into("blosc", bytes(frame), np.empty(8192, dtype=np.uint8))


def test_corrupt_blosc_data_is_a_value_error(decoder: str) -> None:
    data = np.random.default_rng(1).integers(0, 50, 4096, dtype=np.uint16).tobytes()
    frame = bytearray(blosc.compress(data, b"lz4", 5, blosc.SHUFFLE, 2))
    frame[16:20] = (1 << 30).to_bytes(4, "little")  # the first block starts past the end
    with pytest.raises(ValueError, match="does not decode"):
        decode_into("blosc", bytes(frame), np.empty(len(data), dtype=np.uint8))


def test_a_zstd_bomb_is_refused_before_it_is_decoded() -> None:
    bomb = zstandard.compress(bytes(64 << 20))
    with pytest.raises(ExpansionError, match="declares"):
        decode_into("zstd", bomb, np.empty(1 << 16, dtype=np.uint8))
    # A frame that hides its size is cut off at the buffer's end.
    hidden = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(64 << 20))
    with pytest.raises(ExpansionError, match="more bytes follow"):
        decode_into("zstd", hidden, np.empty(1 << 16, dtype=np.uint8))


@pytest.mark.parametrize(
    ("zarr_format", "compressor", "order", "dtype"),
    [
        (3, "zstd", "C", "<u2"),
        (3, "blosc", "C", "<f4"),
        (2, "zstd", "C", "<i2"),
        (2, "blosc", "F", "<u2"),  # a Fortran-ordered v2 chunk, as zarr reshapes it
        (2, "zstd", "C", ">u2"),  # big-endian v2: the stored dtype, converted once
    ],
)
def test_pooled_decoding_reads_like_zarr(
    decoder: str, tmp_path: Path, zarr_format: int, compressor: str, order: str, dtype: str
) -> None:
    from zarr.codecs import BloscCodec, ZstdCodec

    rng = np.random.default_rng(3)
    data = rng.integers(0, 30_000, size=(37, 29)).astype(dtype)
    path = str(tmp_path / "a.zarr")
    if zarr_format == 3:
        codec: Any = ZstdCodec() if compressor == "zstd" else BloscCodec()
        array = zarr.create_array(
            path, shape=data.shape, chunks=(8, 16), dtype=dtype, compressors=codec
        )
    else:
        import numcodecs

        codec = numcodecs.Zstd() if compressor == "zstd" else numcodecs.Blosc()
        array = zarr.create_array(
            path,
            shape=data.shape,
            chunks=(8, 16),
            dtype=dtype,
            compressors=codec,
            zarr_format=2,
            order=order,
        )
    array[...] = data
    source = open_zarr_source(path)
    assert source._decoder is not None
    assert source._decoder._into == compressor  # the pooled path is the one tested
    for r in range(5):
        for c in range(2):
            np.testing.assert_array_equal(
                source.read_chunk((r, c)), data[r * 8 : r * 8 + 8, c * 16 : c * 16 + 16]
            )


def test_sharded_blosc_inner_chunks_read_like_numpy(decoder: str, tmp_path: Path) -> None:
    from zarr.codecs import BloscCodec

    data = np.random.default_rng(5).integers(0, 4000, size=(70, 90)).astype("<u2")
    path = str(tmp_path / "s.zarr")
    array = zarr.create_array(
        path, shape=data.shape, chunks=(16, 16), shards=(32, 48), dtype="<u2",
        compressors=BloscCodec(cname="lz4", shuffle="bitshuffle"),
    )  # fmt: skip
    array[...] = data
    source = open_zarr_source(path)
    coords = [(r, c) for r in range(5) for c in range(6)]
    batched = source.read_chunks(coords)  # the batch path (one call per shard)
    for (r, c), one in zip(coords, batched, strict=True):
        expected = data[r * 16 : r * 16 + 16, c * 16 : c * 16 + 16]
        np.testing.assert_array_equal(source.read_chunk((r, c)), expected)
        assert not isinstance(one, BaseException)
        np.testing.assert_array_equal(one, expected)
