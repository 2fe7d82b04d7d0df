"""Bounded decoding: a compressed stage never yields more than its expected size.

The second bound on what the engine reads (`napari_lazy_zarr.core.storage.files`
holds the first): `bounded_decode` lets a stage yield at most its expected size
plus a small slack (`decode_limit`). Codecs whose frames declare their decoded
size (zstd, blosc, lz4) are checked from the header before any allocation;
stream codecs (gzip, zlib, bz2, lzma) are decompressed here with a cap, and
the decoded bytes are passed on.

`BoundedDecode` runs zarr's synchronous codec chain with its compressors
decoded here, bounded, and the common chains (zstd or blosc alone) decoded
straight into recycled memory (`decode_into`); `ZarrChunkSource` and the shard
reader (`_sharding`) decode every chunk through it.
"""

from __future__ import annotations

import bz2
import lzma
import math
import struct
import sys
import threading
import zlib
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.codecs import BytesCodec

from napari_lazy_zarr.core.buffers import CHUNK_MEMORY
from napari_lazy_zarr.core.sources import _zarr_compat as compat

if TYPE_CHECKING:
    from collections.abc import Buffer, Callable, Iterable, Iterator, Mapping, Sequence

    from zarr.abc.buffer import Buffer as ZarrBuffer


DECODE_SLACK: Final = 64 << 10
"""Bytes a decoded stage may exceed its expected size by (compressor framing, padding)."""

__all__ = [
    "DECODABLE_CODECS",
    "DECODE_SLACK",
    "INTO_CODECS",
    "OUT_CODECS",
    "SHAPED_CODECS",
    "SIZE_BOUNDED_CODECS",
    "BoundedDecode",
    "Codec",
    "ExpansionError",
    "bounded_decode",
    "decode_into",
    "decode_limit",
    "native_decode",
    "native_decoding",
    "unbounded_codecs",
]


type Codec = Literal["zstd", "gzip", "zlib", "bz2", "lzma", "blosc", "lz4", "crc32c"]


OUT_CODECS: Final[frozenset[str]] = frozenset(
    f"imagecodecs_{name}"
    for name in (
        "lzw", "zstd", "deflate", "zlib", "zopfli", "lzma", "bz2", "packbits", "brotli",
        "lz4", "lz4f", "snappy", "lzf", "lzham",
        "zlibng", "isal", "blosc2", "lzfse", "lz4h5", "chunked", "pglz", "zstd1", "aec",
        "bitshuffle",
    )
)  # fmt: skip
"""imagecodecs' stream codecs (tifffile's references name them): decoded by the numcodecs
codec into a buffer one byte longer than the limit, where each stops or fails (checked
for each, a 64 MiB stream into a 1 MiB buffer: zlibng, isal, deflate, zlib, zopfli, zstd,
zstd1, blosc, blosc2, lz4, lz4h5, lzf, snappy, brotli, lzham, pglz, chunked, aec and
bitshuffle refuse the small buffer; lzfse, lz4f, lzw, bz2 and lzma stop at its end.
Measured, an LZW stream expands up to ~1,300x, a zstd frame ~32,000x, a 32-byte blosc2
chunk to 256 MiB)."""

SIZE_BOUNDED_CODECS: Final[frozenset[str]] = frozenset(
    name
    for base in (
        # The chunk's own layout and text: bytes, a transpose, strings.
        "bytes", "endian", "transpose", "sharding_indexed", "vlen-utf8", "vlen-bytes",
        "vlen-array", "json2", "msgpack2", "categorize", "base64", "cast_value",
        "scale_offset",
        # Checksums (a few bytes off) and filters that keep (or fix) the size.
        "crc32", "crc32c", "adler32", "fletcher32", "jenkins_lookup3", "checksum",
        "shuffle", "delta", "fixedscaleoffset", "astype", "quantize", "bitround", "packbits",
        "xor", "bitorder", "floatpred", "byteshuffle", "float24", "bfloat16",
    )
    for name in (base, f"numcodecs.{base}", f"imagecodecs_{base}")
    if name != "imagecodecs_packbits"  # imagecodecs' PackBits is a stream (RLE): OUT_CODECS
)  # fmt: skip
"""Codecs whose decoded size is the chunk's, or a fixed multiple of what they are given
(itself capped: `core.storage.files`): never a decompression bomb, left to zarr as they are.
"""

SHAPED_CODECS: Final[frozenset[str]] = frozenset(
    f"{prefix}{name}"
    for prefix in ("imagecodecs_", "numcodecs.")
    for name in (
        "jpeg", "jpeg2k", "jpegls", "jpegxl", "jpegxr", "jpegxs", "htj2k", "ljpeg", "png",
        "spng", "apng", "webp", "avif", "heif", "gif", "bmp", "tga", "qoi", "pcx", "dds", "exr",
        "tiff", "lerc", "zfp", "zfpy", "pcodec", "sperr", "sz3", "rcomp", "hcomp", "eer",
        "ccittrle", "ccittfax3", "ccittfax4", "dicomrle", "packints", "pixarlog", "plio",
        "rgbe", "ultrahdr", "wavpack", "meshopt", "b2nd", "wic",
    )
)  # fmt: skip
"""Image and array codecs: they decode to the dimensions their own header declares, not
to a stream's length (a known limit: a forged header may declare a large image)."""

DECODABLE_CODECS: Final[frozenset[str]] = frozenset(
    {"zstd", "gzip", "zlib", "bz2", "lzma", "blosc", "lz4", "crc32c", *OUT_CODECS}
)
"""Bytes-to-bytes codecs `bounded_decode` handles (zarr v3 names, numcodecs ids)."""


class ExpansionError(ValueError):
    """Encoded bytes would decode to more than their expected size (a decompression bomb).

    Permanent: the same bytes expand the same way next time. The source that
    reads the chunk wraps it in a `ChunkReadError` naming the key.
    """


def decode_limit(expected: int) -> int:
    """The most bytes a stage expected to yield `expected` bytes may yield.

    Compressors add framing (zstd and lz4 a few bytes per 128 KiB block, blosc
    16 bytes per block); 1/128 plus `DECODE_SLACK` covers every one of them on
    incompressible data.

    Examples
    --------
    >>> decode_limit(1 << 20)
    1122304
    """
    return expected + expected // 128 + DECODE_SLACK


def _expanded(codec: str, expected: int, detail: str) -> ExpansionError:
    return ExpansionError(
        f"{codec} data expands beyond its expected {expected:,} bytes ({detail}): "
        "refusing to decode it"
    )


def _streams(
    make: Callable[[], Any], data: Buffer, limit: int, codec: str, expected: int, multi: bool
) -> bytes:
    """Decompress with `make()` decompressors, at most `limit` bytes; concatenated
    streams too when `multi` (as gzip, bz2 and xz readers do)."""
    parts: list[bytes] = []
    produced = 0
    pending: Buffer | bytes = data
    while True:
        decompressor = make()
        out = decompressor.decompress(pending, limit + 1 - produced)
        produced += len(out)
        parts.append(out)
        if produced > limit:
            raise _expanded(codec, expected, f"more than {limit:,} bytes decoded")
        if not decompressor.eof:
            raise ValueError(f"{codec} stream is truncated or corrupt")
        rest: bytes = decompressor.unused_data
        # gzip readers ignore zero padding after the last member
        if not (multi and rest.strip(b"\0")):
            break
        pending = rest
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd(data: Buffer, limit: int, expected: int) -> bytes:
    import zstandard

    view = memoryview(data)
    declared = zstandard.frame_content_size(view)
    if declared > limit:
        raise _expanded("zstd", expected, f"its frame declares {declared:,}")
    dctx = zstandard.ZstdDecompressor()
    if declared > 0:
        try:  # one frame, decoded into an allocation of exactly its declared size
            return dctx.decompress(view, allow_extra_data=False)
        except zstandard.ZstdError:
            pass  # more frames follow: stream them, bounded
    reader = dctx.stream_reader(view, read_across_frames=True)
    parts: list[bytes] = []
    produced = 0
    while True:
        part = reader.read(limit + 1 - produced)
        if not part:
            break
        parts.append(part)
        produced += len(part)
        if produced > limit:
            raise _expanded("zstd", expected, f"more than {limit:,} bytes decoded")
    return b"".join(parts)


def _blosc(data: Buffer, limit: int, expected: int) -> Buffer:
    from numcodecs import blosc

    view = memoryview(data).cast("B")
    if len(view) < 16:
        raise ValueError(f"blosc data of {len(view)} bytes is shorter than its header")
    (declared,) = struct.unpack_from("<I", view, 4)
    if declared > limit:
        raise _expanded("blosc", expected, f"its header declares {declared:,}")
    decoded: Buffer = blosc.decompress(view)
    return decoded


def _lz4(data: Buffer, limit: int, expected: int) -> Buffer:
    import numcodecs

    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise ValueError(f"lz4 data of {len(view)} bytes is shorter than its size prefix")
    (declared,) = struct.unpack_from("<i", view, 0)
    if declared > limit:
        raise _expanded("lz4", expected, f"its size prefix declares {declared:,}")
    decoded: Buffer = numcodecs.LZ4().decode(view)
    return decoded


def _crc32c(data: Buffer) -> Buffer:
    from numcodecs.checksum32 import CRC32C

    decoded: Buffer = CRC32C(location="end").decode(memoryview(data).cast("B"))
    return decoded


INTO_CODECS: Final = frozenset({"zstd", "blosc"})
"""Codecs `decode_into` decodes straight into a caller's buffer."""


_ZSTD = threading.local()  # a decompression context per thread (they are not thread-safe)


def _imagecodecs_blosc() -> Callable[..., Any] | None:
    """imagecodecs' blosc decoder (the ``codecs`` extra), or None when not installed."""
    try:
        import imagecodecs
    except ImportError:
        return None
    if not imagecodecs.BLOSC.available:
        return None
    decode: Callable[..., Any] = imagecodecs.blosc_decode
    return decode


# Measured here on a worker thread, per 512² uint16 blosc-lz4 chunk decoded into recycled
# memory: imagecodecs' c-blosc 179-206 µs, numcodecs' 215-220 µs (both one thread,
# the GIL released). For zstd the `zstandard` stream decoder stays: 595 µs against
# imagecodecs' 690 µs. Looked up on the first blosc decode (not at import: a store of
# other codecs never loads imagecodecs).
_UNRESOLVED: Final = object()
_NATIVE_BLOSC: Any = _UNRESOLVED


def _native_blosc() -> Callable[..., Any] | None:
    global _NATIVE_BLOSC
    found = _NATIVE_BLOSC
    if found is _UNRESOLVED:
        found = _NATIVE_BLOSC = _imagecodecs_blosc()  # a race only looks it up twice
    native: Callable[..., Any] | None = found
    return native


def native_decode() -> bool:
    """Whether `decode_into` decodes blosc with imagecodecs (else numcodecs).

    Chosen automatically: imagecodecs when it is installed (the ``codecs`` extra).

    Examples
    --------
    >>> isinstance(native_decode(), bool)
    True
    """
    return _native_blosc() is not None


@contextmanager
def native_decoding(enabled: bool) -> Iterator[None]:
    """Within the block, blosc decodes with imagecodecs (`enabled`, when installed) or
    numcodecs: both paths made testable. Not thread-safe: for tests and benchmarks.

    Examples
    --------
    >>> with native_decoding(False):
    ...     native_decode()
    False
    """
    global _NATIVE_BLOSC
    previous = _NATIVE_BLOSC
    _NATIVE_BLOSC = _imagecodecs_blosc() if enabled else None
    try:
        yield
    finally:
        _NATIVE_BLOSC = previous


def _blosc_header(view: memoryview, expected: int) -> None:
    """Refuse a blosc frame whose header does not describe exactly `expected` bytes held in
    `view` (c-blosc trusts the header's compressed size: a larger one reads past the data)."""
    if len(view) < 16:
        raise ValueError(f"blosc data of {len(view)} bytes is shorter than its header")
    declared, _, compressed = struct.unpack_from("<III", view, 4)
    if declared > expected:
        raise _expanded("blosc", expected, f"its header declares {declared:,}")
    if declared < expected:
        raise ValueError(
            f"blosc data declares {declared:,} bytes, fewer than the {expected:,} of its chunk"
        )
    if not 16 <= compressed <= len(view):
        raise ValueError(
            f"blosc header gives {compressed:,} compressed bytes; the data holds {len(view):,}"
        )


def decode_into(codec: str, data: Buffer, out: np.ndarray[Any, Any]) -> None:
    """Decode `data` (one bytes-to-bytes stage) into `out`, which it must fill exactly.

    Bounded by construction: nothing is written past `out`, and data declaring
    or holding more (or fewer) bytes than `out` is refused. `codec` is one of
    `INTO_CODECS` (a ``numcodecs.`` prefix is ignored); `out` a writable,
    C-contiguous uint8 array. blosc decodes with imagecodecs when installed
    (`native_decode`), else numcodecs; the header is checked first either way.

    Raises
    ------
    ExpansionError
        The data declares or holds more bytes than `out`.
    ValueError
        The data is corrupt or truncated, or `codec` cannot decode into a buffer.

    Examples
    --------
    >>> import numpy as np
    >>> import zstandard
    >>> out = np.empty(1000, dtype=np.uint8)
    >>> decode_into("zstd", zstandard.compress(bytes(range(10)) * 100), out)
    >>> out[:12].tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    >>> decode_into("zstd", zstandard.compress(bytes(2000)), out)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.sources._decode.ExpansionError: zstd data expands beyond its expected 1,000 ...
    """  # noqa: E501 (the doctest's exception line)
    name = codec.removeprefix("numcodecs.")
    expected = out.nbytes
    view = memoryview(data).cast("B")
    if name == "zstd":
        import zstandard

        declared = zstandard.frame_content_size(view)
        if declared > expected:
            raise _expanded("zstd", expected, f"its frame declares {declared:,}")
        dctx = getattr(_ZSTD, "dctx", None)
        if dctx is None:
            dctx = _ZSTD.dctx = zstandard.ZstdDecompressor()
        target = memoryview(out).cast("B")
        with dctx.stream_reader(view, read_across_frames=True) as reader:
            filled = 0
            while filled < expected:
                count = reader.readinto(target[filled:])
                if not count:
                    raise ValueError(
                        f"zstd data decodes to {filled:,} bytes, fewer than the {expected:,} "
                        "of its chunk"
                    )
                filled += count
            if reader.read(1):
                raise _expanded("zstd", expected, "more bytes follow")
        return
    if name == "blosc":
        _blosc_header(view, expected)
        if not expected:  # blosc cannot decompress into an empty buffer
            return
        native = _native_blosc()
        if native is not None:
            # c-blosc's contextual decoder, the GIL released, never writing past `out`
            # (it refuses a destination smaller than the header's size).
            try:
                native(view, numthreads=1, out=out)
            except Exception as error:  # imagecodecs.BloscError, corrupt data
                raise ValueError(f"blosc data does not decode: {error}") from error
            return
        from numcodecs import blosc

        try:
            blosc.decompress(view, out)
        except RuntimeError as error:
            raise ValueError(f"blosc data does not decode: {error}") from error
        return
    raise ValueError(f"codec {codec!r} does not decode into a buffer")


def bounded_decode(
    codec: str, data: Buffer, expected: int, config: Mapping[str, Any] | None = None
) -> Buffer:
    """Decode one bytes-to-bytes stage, refusing output beyond `decode_limit(expected)`.

    `codec` is a name in `DECODABLE_CODECS` (a ``numcodecs.`` prefix is
    ignored); `config` its configuration (only lzma's ``format`` and
    ``filters`` matter for decoding). The declared size of zstd, blosc and lz4
    data is checked before decoding; gzip, zlib, bz2 and lzma are streamed
    with a cap. The result decodes exactly as zarr-python and numcodecs would.

    Raises
    ------
    ExpansionError
        The data would decode to more than the limit.
    ValueError
        `codec` is not one of `DECODABLE_CODECS`.

    Examples
    --------
    >>> import zlib
    >>> bounded_decode("zlib", zlib.compress(bytes(1000)), expected=1000) == bytes(1000)
    True
    >>> bounded_decode("zlib", zlib.compress(bytes(10**7)), expected=1000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.sources._decode.ExpansionError: zlib data expands beyond its expected 1,000 ...
    """  # noqa: E501 (the doctest's exception line)
    name = codec.removeprefix("numcodecs.")
    limit = decode_limit(expected)
    if name == "zstd":
        return _zstd(data, limit, expected)
    if name == "blosc":
        return _blosc(data, limit, expected)
    if name == "lz4":
        return _lz4(data, limit, expected)
    if name == "crc32c":
        return _crc32c(data)
    if name == "zlib":
        return _streams(zlib.decompressobj, data, limit, name, expected, multi=False)
    if name == "gzip":
        return _streams(lambda: zlib.decompressobj(31), data, limit, name, expected, multi=True)
    if name == "bz2":
        return _streams(bz2.BZ2Decompressor, data, limit, name, expected, multi=True)
    if name == "lzma":
        options = dict(config or {})
        form = options.get("format", lzma.FORMAT_XZ)
        filters = options.get("filters")

        def make() -> lzma.LZMADecompressor:
            return lzma.LZMADecompressor(format=form, filters=filters)

        return _streams(make, data, limit, name, expected, multi=form != lzma.FORMAT_RAW)
    if name in OUT_CODECS:
        return _into_out(name, data, limit, expected, config)
    raise ValueError(f"no bounded decoder for codec {codec!r}")


def _into_out(
    name: str, data: Buffer, limit: int, expected: int, config: Mapping[str, Any] | None
) -> Buffer:
    """An imagecodecs stream decoded by its numcodecs codec into `limit` + 1 bytes at most."""
    import numcodecs

    codec = numcodecs.get_codec({**(config or {}), "id": name})
    out = np.empty(limit + 1, dtype=np.uint8)
    try:
        decoded = memoryview(codec.decode(data, out=out))
    except Exception as error:  # the codec's own error: a stream too long for `out`, or corrupt
        raise ValueError(
            f"{name} data does not decode within {limit:,} bytes (its chunk's {expected:,} "
            f"and slack): {type(error).__name__}: {error}"
        ) from error
    if decoded.nbytes > limit:
        raise ExpansionError(
            f"{name} data expands beyond its expected {expected:,} bytes (limit {limit:,})"
        )
    return decoded


# -- zarr's codec chain, bounded -------------------------------------------------


def unbounded_codecs(names: Iterable[str]) -> tuple[str, ...]:
    """Of codec `names` left to another decoder than `bounded_decode`, those whose output
    nothing bounds: every one but `SIZE_BOUNDED_CODECS` and `SHAPED_CODECS`.

    Examples
    --------
    >>> unbounded_codecs(["bytes", "crc32c", "imagecodecs_zlibng", "numcodecs.zlib"])
    ('imagecodecs_zlibng', 'numcodecs.zlib')
    """
    return tuple(
        name
        for name in names
        if name not in SIZE_BOUNDED_CODECS
        and name.removeprefix("numcodecs.") not in SIZE_BOUNDED_CODECS
        and name not in SHAPED_CODECS
    )


def _codec_id(codec: Any) -> tuple[str, dict[str, Any]]:
    """A codec's name and configuration, for zarr v3 codecs and numcodecs objects alike."""
    if hasattr(codec, "get_config"):  # numcodecs (a Zarr v2 compressor)
        config = dict(codec.get_config())
        return str(config.pop("id", "")), config
    document = codec.to_dict()
    return str(document.get("name", "")), dict(document.get("configuration") or {})


def _filters_ratio(filters: Sequence[Any] | None) -> int:
    """How much larger than the chunk Zarr v2 filters can make the compressor's output.

    Only filters that encode to a wider dtype (``astype``/``encode_dtype``) grow it.
    """
    ratio = 1.0
    for codec in filters or ():
        encoded = getattr(codec, "astype", None) or getattr(codec, "encode_dtype", None)
        decoded = getattr(codec, "dtype", None) or getattr(codec, "decode_dtype", None)
        if encoded is not None and decoded is not None:
            ratio *= max(1.0, np.dtype(encoded).itemsize / np.dtype(decoded).itemsize)
    return math.ceil(ratio)


class BoundedDecode:
    """zarr's synchronous codec chain, with its compressors decoded within the chunk's size.

    The bytes-to-bytes codecs (and a Zarr v2 compressor) that `bounded_decode`
    knows are run here in decode order, each refusing output beyond the
    chunk's decoded size (`decode_limit`); the rest of the chain (array-bytes
    and array-array codecs, any codec after an unknown one) is zarr's own
    transform, handed the decoded bytes. Stream codecs are decoded once, here,
    not twice. Thread-safe (no state after construction).
    """

    unbounded: tuple[str, ...] = ()
    """Codecs left to zarr whose output size nothing bounds: a stream codec this does not
    decode, or one it knows placed where it cannot decode it (after a filter it cannot
    decode). The source refuses such an array at open."""

    def __init__(self, transform: Any, codecs: Sequence[Any] | None = None) -> None:
        """`transform`: zarr's synchronous chain (a `ChunkTransform`); or None and its
        `codecs`, some without a synchronous form, when the ones left once this takes
        over the compressors have one (else `TypeError`)."""
        if codecs is None:
            codecs = compat.transform_codecs(transform)
        array_array = [c for c in codecs if isinstance(c, ArrayArrayCodec)]
        array_bytes: Any = next(c for c in codecs if isinstance(c, ArrayBytesCodec))
        bytes_bytes = [c for c in codecs if isinstance(c, BytesBytesCodec)]
        stages: list[tuple[str, dict[str, Any]]] = []
        for codec in reversed(bytes_bytes):
            name, config = _codec_id(codec)
            if name.removeprefix("numcodecs.") not in DECODABLE_CODECS:
                break  # its output feeds the ones after it: zarr decodes the rest
            stages.append((name, config))
        rest = bytes_bytes[: len(bytes_bytes) - len(stages)]
        ratio = 1
        if not rest and hasattr(array_bytes, "filters"):
            # A Zarr v2 chunk decodes its compressor, then its filters last to first; a
            # compressor may also be a filter (numcodecs allows it): bound those too.
            compressor = array_bytes.compressor
            filters = list(array_bytes.filters or ())
            if compressor is not None and _codec_id(compressor)[0] in DECODABLE_CODECS:
                stages.append(_codec_id(compressor))
                compressor = None
            while compressor is None and filters and _codec_id(filters[-1])[0] in DECODABLE_CODECS:
                stages.append(_codec_id(filters.pop()))
            if len(filters) != len(array_bytes.filters or ()) or compressor is None:
                array_bytes = compat.v2_codec_with(
                    array_bytes, compressor=compressor, filters=tuple(filters) or None
                )
            ratio = _filters_ratio(filters)
            self.unbounded = unbounded_codecs(
                _codec_id(codec)[0] for codec in (*filters, compressor) if codec is not None
            )
        self.unbounded += unbounded_codecs(_codec_id(codec)[0] for codec in rest)
        self.stages = tuple(stages)
        # The common chains (bytes + zstd or blosc; a Zarr v2 zstd or blosc compressor
        # without filters) decode straight into recycled memory (`decode_pooled`).
        self._into: str | None = None
        self._v2 = hasattr(array_bytes, "filters")
        if (
            len(stages) == 1
            and stages[0][0].removeprefix("numcodecs.") in INTO_CODECS
            and not array_array
            and not rest
            and (
                (self._v2 and not array_bytes.filters and array_bytes.compressor is None)
                or (
                    isinstance(array_bytes, BytesCodec)
                    and array_bytes.endian in (None, sys.byteorder)
                )
            )
        ):
            self._into = stages[0][0]
        tail = (*array_array, array_bytes, *rest)
        if transform is None:
            self._tail = compat.chunk_transform(tail)
        else:
            self._tail = compat.transform_with_codecs(transform, tail) if stages else transform
        self._array_array = tuple(array_array)
        self._ratio = ratio
        self._itemsize: int | None = None

    def _bytes_per_element(self, spec: Any) -> int:
        """Bytes per element the array-bytes codec decodes (after casts, if any)."""
        if self._itemsize is None:
            for codec in self._array_array:  # e.g. a cast: the bytes codec sees another dtype
                spec = codec.resolve_metadata(spec)
            self._itemsize = int(spec.dtype.to_native_dtype().itemsize) * self._ratio
        return self._itemsize

    def decode_pooled(self, raw: ZarrBuffer, spec: Any) -> np.ndarray[Any, Any] | None:
        """`raw` decoded into a block of `CHUNK_MEMORY` (pages already mapped), as
        zarr's chain would decode it; None when this chain cannot (then `decode_chunk`).
        """
        if self._into is None:
            return None
        dtype = spec.dtype.to_native_dtype()
        if not self._v2 and not dtype.isnative:
            return None
        if dtype.hasobject:
            return None
        shape = tuple(int(n) for n in spec.shape)
        block = CHUNK_MEMORY.lease(math.prod(shape) * dtype.itemsize)
        decode_into(self._into, raw.as_numpy_array(), block)
        # As zarr's V2Codec: a view in the stored dtype, in the array's order.
        order = spec.config.order if self._v2 else "C"
        decoded: np.ndarray[Any, Any] = block.view(dtype).reshape(shape, order=order)
        return decoded

    def decode_chunk(self, raw: ZarrBuffer, spec: Any) -> Any:
        """`raw`, the bytes of a chunk described by `spec`, decoded (an NDBuffer)."""
        if not self.stages:
            return self._tail.decode_chunk(raw, spec)
        expected = math.prod(spec.shape) * self._bytes_per_element(spec)
        data: Any = raw.as_numpy_array()
        for name, config in self.stages:
            data = bounded_decode(name, data, expected, config)
        return self._tail.decode_chunk(spec.prototype.buffer.from_bytes(data), spec)
