"""Decode bombs: small chunk, shard and metadata files that expand to 512 MiB or more."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.redteam.bombs import deflated_bomb, payload, stored, zip_archive
from tests.redteam.harness import Case, Context, Finding
from tests.redteam.stores import (
    BYTES_CODEC,
    MISSING,
    ramp,
    shard_index,
    sharded_meta,
    v2_meta,
    v3_meta,
    write_files,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

KIND = "decode bomb"
SMALL = (64, 64)  # 8 KiB of uint16, as in the issue
LARGE = (1024, 512)  # 1 MiB: ~2 MiB blosc/lz4 bombs pass the chunk-file size check only here
_BLOSC_NAMES = ("lz4", "lz4hc", "blosclz", "zstd", "zlib")


def _large(bomb: str) -> bool:
    return bomb in ("lz4", "blosc-lz4", "blosc-lz4hc", "blosc-blosclz")


def _read_bomb(
    files: Callable[[Context], dict[str, Any]], name: str = "bomb.zarr"
) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        store = write_files(context.root / name, files(context))
        context.begin()
        data = context.read(context.open(store))
        raise Finding(
            "wrong-pixels",
            f"a chunk that decodes to 512 MiB was served as {data.shape} {data.dtype} data",
        )

    return run


_V2_COMPRESSORS: dict[str, dict[str, Any]] = {
    "zstd-declared": {"id": "zstd", "level": 3},
    "zstd-undeclared": {"id": "zstd", "level": 3},
    "gzip": {"id": "gzip", "level": 5},
    "zlib": {"id": "zlib", "level": 5},
    "bz2": {"id": "bz2", "level": 9},
    "lzma": {"id": "lzma", "format": 1, "check": -1, "preset": None, "filters": None},
    "lz4": {"id": "lz4", "acceleration": 1},
    **{
        f"blosc-{cname}": {
            "id": "blosc",
            "cname": cname,
            "clevel": 9,
            "shuffle": 0,
            "blocksize": 0,
        }
        for cname in _BLOSC_NAMES
    },
}


def _blosc_v3(cname: str) -> dict[str, Any]:
    configuration = {"cname": cname, "clevel": 9, "shuffle": "noshuffle", "typesize": 2}
    return {"name": "blosc", "configuration": {**configuration, "blocksize": 0}}


_V3_CODECS: dict[str, tuple[str, dict[str, Any]]] = {
    "zstd (declared size)": (
        "zstd-declared",
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    ),
    "zstd (no declared size)": (
        "zstd-undeclared",
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    ),
    "gzip": ("gzip", {"name": "gzip", "configuration": {"level": 5}}),
    **{f"blosc {cname}": (f"blosc-{cname}", _blosc_v3(cname)) for cname in _BLOSC_NAMES},
    "numcodecs.zlib": ("zlib", {"name": "numcodecs.zlib", "configuration": {"level": 5}}),
    "numcodecs.bz2": ("bz2", {"name": "numcodecs.bz2", "configuration": {"level": 9}}),
    "numcodecs.lzma": ("lzma", {"name": "numcodecs.lzma", "configuration": {}}),
    "numcodecs.lz4": ("lz4", {"name": "numcodecs.lz4", "configuration": {}}),
    "numcodecs.zstd": ("zstd-declared", {"name": "numcodecs.zstd", "configuration": {"level": 3}}),
    "numcodecs.gzip": ("gzip", {"name": "numcodecs.gzip", "configuration": {"level": 5}}),
}


def _v2_bomb(bomb: str, compressor: dict[str, Any]) -> Callable[[Context], dict[str, Any]]:
    chunks = LARGE if _large(bomb) else SMALL
    return lambda context: {
        ".zarray": v2_meta(chunks, chunks, compressor=compressor),
        "0.0": payload(bomb),
    }


def _v3_bomb(bomb: str, codec: dict[str, Any]) -> Callable[[Context], dict[str, Any]]:
    chunks = LARGE if _large(bomb) else SMALL
    return lambda context: {
        "zarr.json": v3_meta(chunks, chunks, [BYTES_CODEC, codec]),
        "c/0/0": payload(bomb),
    }


def _shard_bomb(bomb: str, codec: dict[str, Any]) -> Callable[[Context], dict[str, Any]]:
    """A 64 x 64 shard of four 32 x 32 inner chunks; inner chunk (0, 0) is the bomb."""

    def files(context: Context) -> dict[str, Any]:
        data = payload(bomb)
        index = shard_index([(0, len(data))] + [(MISSING, MISSING)] * 3)
        return {
            "zarr.json": sharded_meta(SMALL, SMALL, (32, 32), [BYTES_CODEC, codec]),
            "c/0/0": data + index,
        }

    return files


def _shard_range(offset: int, nbytes: int, sparse: bool) -> Callable[[Context], str]:
    """An uncompressed shard whose index says inner chunk (0, 0) is `nbytes` at `offset`."""

    def run(context: Context) -> str:
        store = write_files(
            context.root / "shard.zarr",
            {"zarr.json": sharded_meta(SMALL, SMALL, (32, 32), [BYTES_CODEC])},
        )
        index = shard_index([(offset, nbytes)] + [(MISSING, MISSING)] * 3)
        shard = store / "c" / "0" / "0"
        shard.parent.mkdir(parents=True)
        with open(shard, "wb") as handle:
            if sparse:
                handle.truncate(1 << 30)
                handle.seek(1 << 30)
            handle.write(index)
        context.begin()
        data = context.read(context.open(store))
        raise Finding("wrong-pixels", f"a shard with a bogus index served {data.shape} data")

    return run


def _parallel(bomb: str, compressor: dict[str, Any]) -> Callable[[Context], str]:
    """Four bomb chunks read at once by four loaders."""

    def run(context: Context) -> str:
        files: dict[str, Any] = {".zarray": v2_meta((128, 128), SMALL, compressor=compressor)}
        for key in ("0.0", "0.1", "1.0", "1.1"):
            files[key] = payload(bomb)
        store = write_files(context.root / "four.zarr", files)
        context.begin()
        cache = context.cache(concurrency=4)
        data = context.read(context.open(store, cache=cache))
        raise Finding("wrong-pixels", f"four bomb chunks were served as {data.shape} data")

    return run


def _zip(members: Callable[[], list[Any]], what: str) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        path = context.root / "store.zip"
        path.write_bytes(zip_archive(members()))
        context.begin()
        data = context.read(context.open(path))
        raise Finding("wrong-pixels", f"{what}: served {data.shape} {data.dtype} data")

    return run


def _chunk_bytes() -> bytes:
    return ramp(SMALL).tobytes()


def _zarray() -> bytes:
    return json.dumps(v2_meta(SMALL, SMALL)).encode()


def _zarr_json() -> bytes:
    return json.dumps(v3_meta(SMALL, SMALL, [BYTES_CODEC])).encode()


def _zip_cases() -> Iterator[Case]:
    encrypted, aes = 0x1, 99  # the "encrypted" flag bit; method 99 is WinZip AES
    table: dict[str, Callable[[], list[Any]]] = {
        "v2 chunk member is a deflate bomb": lambda: [
            stored(".zarray", _zarray()),
            deflated_bomb("0.0"),
        ],
        "v3 chunk member is a deflate bomb": lambda: [
            stored("zarr.json", _zarr_json()),
            deflated_bomb("c/0/0"),
        ],
        ".zarray member is a deflate bomb (512 MiB of JSON whitespace)": lambda: [
            deflated_bomb(".zarray", _zarray(), fill=0x20),
            stored("0.0", _chunk_bytes()),
        ],
        "zarr.json member is a deflate bomb (512 MiB of JSON whitespace)": lambda: [
            deflated_bomb("zarr.json", _zarr_json(), fill=0x20),
            stored("c/0/0", _chunk_bytes()),
        ],
        "encrypted chunk member": lambda: [
            stored(".zarray", _zarray()),
            stored("0.0", _chunk_bytes(), flags=encrypted),
        ],
        "encrypted .zarray member": lambda: [
            stored(".zarray", _zarray(), flags=encrypted),
            stored("0.0", _chunk_bytes()),
        ],
        "chunk member in an unsupported method (99, AES)": lambda: [
            stored(".zarray", _zarray()),
            stored("0.0", _chunk_bytes(), method=aes),
        ],
        ".zarray member in an unsupported method (99, AES)": lambda: [
            stored(".zarray", _zarray(), method=aes),
            stored("0.0", _chunk_bytes()),
        ],
    }
    for label, members in table.items():
        yield Case(f"zip: {label}", KIND, _zip(members, label))


# imagecodecs' stream codecs outside zarr's own (issue 50): each expands a small chunk to
# whatever its stream holds unless decoded into a bounded buffer.
_IMAGECODECS_STREAMS = ("zlibng", "isal", "blosc2", "lzfse", "lz4h5", "chunked")
_STREAM_BOMB = 256 << 20


def _imagecodecs_bomb(name: str, zarr_format: int) -> Callable[[Context], dict[str, Any]]:
    """A 1 MiB chunk whose stream, encoded by imagecodecs' own codec, holds 256 MiB."""

    def files(context: Context) -> dict[str, Any]:
        import numcodecs
        from imagecodecs.numcodecs import register_codecs

        register_codecs(verbose=False)
        data = bytes(
            numcodecs.get_codec({"id": f"imagecodecs_{name}"}).encode(bytes(_STREAM_BOMB))
        )
        if zarr_format == 2:
            meta = v2_meta(LARGE, LARGE, compressor={"id": f"imagecodecs_{name}"})
            return {".zarray": meta, "0.0": data}
        codec = {"name": f"imagecodecs_{name}", "configuration": {}}
        return {"zarr.json": v3_meta(LARGE, LARGE, [BYTES_CODEC, codec]), "c/0/0": data}

    return files


def cases() -> Iterator[Case]:
    for name in _IMAGECODECS_STREAMS:
        for zarr_format in (2, 3):
            yield Case(
                f"v{zarr_format} imagecodecs_{name} bomb (256 MiB in a 1 MiB chunk)",
                KIND,
                _read_bomb(_imagecodecs_bomb(name, zarr_format)),
            )
    for bomb, compressor in _V2_COMPRESSORS.items():
        yield Case(f"v2 compressor {bomb} bomb", KIND, _read_bomb(_v2_bomb(bomb, compressor)))
    zstd = _V2_COMPRESSORS["zstd-declared"]
    yield Case(
        "v2 filter zstd bomb (no compressor)",
        KIND,
        _read_bomb(
            lambda context: {
                ".zarray": v2_meta(SMALL, SMALL, filters=[zstd]),
                "0.0": payload("zstd-declared"),
            }
        ),
    )
    for label, (bomb, codec) in _V3_CODECS.items():
        yield Case(f"v3 codec {label} bomb", KIND, _read_bomb(_v3_bomb(bomb, codec)))
    for label in (
        "zstd (declared size)",
        "zstd (no declared size)",
        "gzip",
        "blosc zstd",
        "numcodecs.bz2",
    ):
        bomb, codec = _V3_CODECS[label]
        yield Case(
            f"sharded: inner chunk {label} bomb", KIND, _read_bomb(_shard_bomb(bomb, codec))
        )
    yield Case(
        "sharded: index points at a 1 GiB range of a sparse 1 GiB shard",
        KIND,
        _shard_range(0, 1 << 30, sparse=True),
    )
    yield Case(
        "sharded: index points at 1 GiB past the end of a small shard",
        KIND,
        _shard_range(0, 1 << 30, sparse=False),
    )
    yield Case("sharded: index entry of 2**62 bytes", KIND, _shard_range(0, 1 << 62, sparse=False))
    yield Case("four zstd bombs read in parallel (v2)", KIND, _parallel("zstd-declared", zstd))
    yield Case(
        "four gzip bombs read in parallel (v2)", KIND, _parallel("gzip", _V2_COMPRESSORS["gzip"])
    )
    yield from _zip_cases()
