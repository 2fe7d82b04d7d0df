"""Writing the stores the cases attack: hand-made metadata and chunks, or zarr-python's own."""

from __future__ import annotations

import json
import os
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

BYTES_CODEC = {"name": "bytes", "configuration": {"endian": "little"}}
MISSING = 2**64 - 1  # a shard index entry for an absent inner chunk


def ramp(shape: tuple[int, ...], dtype: Any = "u2", *, salt: int = 0) -> np.ndarray[Any, Any]:
    """Distinct, deterministic pixels (the oracle of most cases)."""
    values = (np.arange(int(np.prod(shape)), dtype=np.uint64) * 7 + 13 + salt * 101) % 65_521
    return values.astype(dtype).reshape(shape)


def write_files(root: Path, files: dict[str, Any]) -> Path:
    """Write `files` (bytes as is, str as text, anything else as JSON) under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content)
        else:
            target.write_text(json.dumps(content))
    return root


def v2_meta(
    shape: tuple[int, ...], chunks: tuple[int, ...], *, compressor: Any = None, filters: Any = None
) -> dict[str, Any]:
    return {
        "zarr_format": 2,
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": "<u2",
        "compressor": compressor,
        "fill_value": 0,
        "filters": filters,
        "order": "C",
    }


def v3_meta(shape: tuple[int, ...], chunks: tuple[int, ...], codecs: list[Any]) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs,
        "attributes": {},
    }


def sharded_meta(
    shape: tuple[int, ...], shard: tuple[int, ...], inner: tuple[int, ...], codecs: list[Any]
) -> dict[str, Any]:
    sharding = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(inner),
            "codecs": codecs,
            "index_codecs": [BYTES_CODEC, {"name": "crc32c"}],
            "index_location": "end",
        },
    }
    return v3_meta(shape, shard, [sharding])


def shard_index(entries: list[tuple[int, int]]) -> bytes:
    """A shard index (at the end of a shard): (offset, nbytes) per inner chunk, then crc32c."""
    import google_crc32c

    index = b"".join(struct.pack("<QQ", offset, nbytes) for offset, nbytes in entries)
    return index + struct.pack("<I", google_crc32c.value(index))


def zarr_array(
    path: Path,
    data: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    *,
    zarr_format: int = 3,
    shards: tuple[int, ...] | None = None,
    overwrite: bool = False,
    compressors: Any = None,
) -> Path:
    """`data` written by zarr-python, uncompressed (chunk bytes are the pixels) unless
    `compressors` are given (zarr's bytes-to-bytes codecs: ``Crc32cCodec()`` keeps them)."""
    import zarr

    array = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=chunks,
        shards=shards,
        dtype=data.dtype,
        compressors=compressors,
        zarr_format=zarr_format,  # type: ignore[arg-type]
        overwrite=overwrite,
        fill_value=0,
    )
    array[...] = data
    return path


def make_special(path: Path, kind: str) -> None:
    """Replace `path` by a FIFO, a symlink to /dev/zero, a directory or a sparse 1 GiB file."""
    if path.is_dir() and not path.is_symlink():
        os.rmdir(path) if not any(path.iterdir()) else None
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
        (path / "x").write_bytes(b"x")
    elif kind == "sparse-1GiB":
        with open(path, "wb") as handle:
            handle.truncate(1 << 30)
    else:
        raise ValueError(kind)


SPECIAL_KINDS = ("fifo", "dev-zero", "directory", "sparse-1GiB")


def metadata_only(path: Path, shape: list[int], chunks: list[int]) -> Path:
    """A v2 uint8 array of `shape` and `chunks` with no chunk written (all fill value)."""
    path.mkdir(parents=True)
    meta = {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    (path / ".zarray").write_text(json.dumps(meta))
    return path
