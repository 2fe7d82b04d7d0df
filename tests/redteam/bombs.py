"""Decompression bombs: a few kilobytes that decode to `BOMB_BYTES` (512 MiB) of zeros.

Built in milliseconds where a format allows it, without compressing 512 MiB:

- deflate (zlib, gzip, zip members): one 8 MiB segment compressed by a fresh
  compressor and ended with a full flush holds no reference outside itself, so
  64 copies in a row are one valid deflate stream; an empty final block and the
  container's checksum (computed over zeros, piecewise) end it.
- bz2, lzma, gzip: their decoders read concatenated streams.
- zstd: a streaming compressor (declaring the content size up front, or not).
- blosc, lz4: the codec itself, once, cached on disk (`cache_dir`) between runs.
"""

from __future__ import annotations

import bz2
import lzma
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

BOMB_BYTES = 512 << 20
_PIECE = 8 << 20
_COPIES = BOMB_BYTES // _PIECE


def cache_dir() -> Path:
    """Where payloads are kept between runs (one directory per user and format version)."""
    return Path(tempfile.gettempdir()) / f"napari-lazy-zarr-redteam-{os.getuid()}-v1"


def _deflate_segment(piece: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(piece) + compressor.flush(zlib.Z_FULL_FLUSH)


def _checksums(piece: bytes, copies: int, tail: bytes = b"") -> tuple[int, int]:
    """(crc32, adler32) of `piece` repeated `copies` times then `tail`."""
    crc, adler = 0, 1
    for _ in range(copies):
        crc, adler = zlib.crc32(piece, crc), zlib.adler32(piece, adler)
    return zlib.crc32(tail, crc), zlib.adler32(tail, adler)


_FINAL_EMPTY_BLOCK = b"\x03\x00"


def deflate_member(fill: int = 0, tail: bytes = b"") -> tuple[bytes, int, int]:
    """A raw deflate stream of BOMB_BYTES bytes `fill` then `tail`: (stream, size, crc32)."""
    piece = bytes([fill]) * _PIECE
    body = _deflate_segment(piece) * _COPIES
    if tail:
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        body += compressor.compress(tail) + compressor.flush()
    else:
        body += _FINAL_EMPTY_BLOCK
    crc, _ = _checksums(piece, _COPIES, tail)
    return body, BOMB_BYTES + len(tail), crc


def _zlib() -> bytes:
    body, _, _ = deflate_member()
    _, adler = _checksums(bytes(_PIECE), _COPIES)
    return b"\x78\xda" + body + struct.pack(">I", adler)


def _gzip() -> bytes:
    body, size, crc = deflate_member()
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + body + struct.pack("<II", crc, size & 0xFFFFFFFF)


def _zstd(declared: bool) -> bytes:
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3, write_content_size=declared)
    stream = compressor.compressobj(size=BOMB_BYTES if declared else -1)
    piece = bytes(1 << 20)
    parts = [stream.compress(piece) for _ in range(BOMB_BYTES >> 20)]
    return b"".join(parts) + stream.flush()


def _codec(build: Callable[[], bytes]) -> Callable[[], bytes]:
    return build


def _numcodecs(codec: str, **config: object) -> Callable[[], bytes]:
    def build() -> bytes:
        import numcodecs

        encoded = numcodecs.get_codec({"id": codec, **config}).encode(bytes(BOMB_BYTES))
        return bytes(encoded)

    return build


BUILDERS: dict[str, Callable[[], bytes]] = {
    "zstd-declared": lambda: _zstd(True),
    "zstd-undeclared": lambda: _zstd(False),
    "zlib": _zlib,
    "gzip": _gzip,
    "bz2": lambda: bz2.compress(bytes(_PIECE), 9) * _COPIES,
    "lzma": lambda: lzma.compress(bytes(_PIECE), preset=0) * _COPIES,
    "lz4": _numcodecs("lz4", acceleration=1),
    **{
        f"blosc-{cname}": _numcodecs("blosc", cname=cname, clevel=9, shuffle=0, blocksize=0)
        for cname in ("lz4", "lz4hc", "blosclz", "zstd", "zlib")
    },
}


def payload(name: str) -> bytes:
    """The bomb `name` (a key of BUILDERS), from the disk cache or built and cached."""
    path = cache_dir() / f"{name}.bin"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    data = BUILDERS[name]()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    partial.write_bytes(data)
    os.replace(partial, path)  # atomic: a concurrent builder writes the same bytes
    return data


# -- zip archives, written by hand (zipfile cannot store precompressed or flagged members)


def zip_archive(members: list[tuple[str, bytes, int, int, int, int]]) -> bytes:
    """A zip of (name, stored bytes, method, crc32, size, flags) members, no extras."""
    out, central = bytearray(), bytearray()
    for name, data, method, crc, size, flags in members:
        encoded = name.encode()
        offset = len(out)
        out += struct.pack(
            "<4s5H3L2H",
            b"PK\x03\x04",
            20,
            flags,
            method,
            0,
            0x21,
            crc,
            len(data),
            size,
            len(encoded),
            0,
        )
        out += encoded + data
        central += struct.pack(
            "<4s6H3L5H2L",
            b"PK\x01\x02",
            20,
            20,
            flags,
            method,
            0,
            0x21,
            crc,
            len(data),
            size,
            len(encoded),
            0,
            0,
            0,
            0,
            0,
            offset,
        )
        central += encoded
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(out), 0
    )
    return bytes(out + central + end)


def stored(
    name: str, data: bytes, *, method: int = 0, flags: int = 0
) -> tuple[str, bytes, int, int, int, int]:
    """A member stored as is (method 0), or claiming `method`/`flags` it does not use."""
    return name, data, method, zlib.crc32(data), len(data), flags


def deflated_bomb(
    name: str, tail: bytes = b"", fill: int = 0
) -> tuple[str, bytes, int, int, int, int]:
    """A deflated member of BOMB_BYTES `fill` bytes then `tail`."""
    body, size, crc = deflate_member(fill, tail)
    return name, body, 8, crc, size, 0
