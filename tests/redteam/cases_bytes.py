"""Bytes checked against what was asked, and metadata bookkeeping capped (issue 22).

Mislabelled HTTP answers (another range honestly labelled, a 206 without or
with a garbled ``Content-Range``, 410 Gone) must never be served as pixels;
metadata that would make the engine build an object per entry (a zip of
200,000 members, a manifest of 1,000,000 references) is refused before the
objects are built; an offset of 2**64 is a clear error; OME scales of 1e308
or 5e-324 open in pixel units (warned), never at absurd world extents.
"""

from __future__ import annotations

import json
import struct
import warnings
import zipfile
from typing import TYPE_CHECKING

import numpy as np

from tests.redteam.harness import HTTP_BOUND, Case, Context, Finding
from tests.redteam.stores import ramp, v2_meta, write_files, zarr_array

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

KIND = "bytes and bookkeeping"
SHAPE, CHUNKS, SHARDS = (64, 64), (16, 16), (64, 64)


def _mislabelled(
    behaviour: str, *, sharded: bool, zarr_format: int = 3
) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        expected = ramp(SHAPE)
        zarr_array(
            context.root / "a.zarr",
            expected,
            CHUNKS,
            zarr_format=zarr_format,
            shards=SHARDS if sharded else None,
        )
        context.begin()
        array = context.open(context.url("a.zarr", behaviour))
        return context.expect(context.read(array), expected, behaviour)

    return run


def _zip_members(count: int) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        side = int(np.ceil(np.sqrt(count - 1)))
        meta = v2_meta((side, side), (1, 1)) | {"dtype": "|u1"}
        path = context.root / "many.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr(".zarray", json.dumps(meta))
            for index in range(count - 1):
                archive.writestr(f"{index // side}.{index % side}", b"\x01")
        context.begin()
        data = context.read(context.open(path), (slice(0, 4), slice(0, 4)))
        raise Finding("memory", f"a {count:,}-member zip opened, read {data.shape}")

    return run


def _zip_patched(count: int, *, keep_zip64: bool) -> Callable[[Context], str]:
    """`count` members (zipfile writes a ZIP64 record past 65,535), then the classic record's
    counts patched to 1,000: with `keep_zip64` zipfile still reads the ZIP64 record (its
    locator precedes the classic one); without it, zipfile walks the whole directory."""

    def run(context: Context) -> str:
        side = int(np.ceil(np.sqrt(count - 1)))
        meta = v2_meta((side, side), (1, 1)) | {"dtype": "|u1"}
        path = context.root / "patched.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr(".zarray", json.dumps(meta))
            for index in range(count - 1):
                archive.writestr(f"{index // side}.{index % side}", b"\x01")
        data = bytearray(path.read_bytes())
        eocd = data.rindex(b"PK\x05\x06")
        data[eocd + 8 : eocd + 12] = struct.pack("<HH", 1000, 1000)
        if not keep_zip64:
            del data[eocd - 76 : eocd]  # the ZIP64 record (56 bytes) and its locator (20)
        path.write_bytes(bytes(data))
        context.begin()
        read = context.read(context.open(path), (slice(0, 4), slice(0, 4)))
        raise Finding("memory", f"a {count:,}-member zip with patched counts opened: {read.shape}")

    return run


def _manifest_references(count: int) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        from napari_lazy_zarr.core import ChunkedArray, ManifestSource

        side = int(np.ceil(np.sqrt(count)))
        zarray = v2_meta((side * 4, side * 4), (4, 4)) | {"dtype": "|u1"}
        (context.root / "d.bin").write_bytes(b"")
        with open(context.root / "refs.json", "w") as handle:
            handle.write('{"version": 1, "refs": {".zarray": ' + json.dumps(json.dumps(zarray)))
            for index in range(count):
                handle.write(f', "{index // side}.{index % side}": ["d.bin", {16 * index}, 16]')
            handle.write("}}")
        context.begin()
        array = ChunkedArray(ManifestSource(context.root / "refs.json"), context.cache())
        raise Finding("memory", f"a {count:,}-reference manifest opened as {array.shape}")

    return run


def _reference_offset(key: str, offset: int) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        from napari_lazy_zarr.core import ChunkedArray, ManifestSource

        meta = json.dumps(v2_meta((4, 4), (4, 4))).encode()
        (context.root / "d.bin").write_bytes(meta + ramp((4, 4)).tobytes())
        refs = {".zarray": ["d.bin", 0, len(meta)], "0.0": ["d.bin", len(meta), 32]}
        refs[key] = ["d.bin", offset, 32]
        write_files(context.root, {"refs.json": {"version": 1, "refs": refs}})
        context.begin()
        array = ChunkedArray(ManifestSource(context.root / "refs.json"), context.cache())
        data = context.read(array)
        raise Finding("wrong-pixels", f"offset {offset} served {data.shape} data")

    return run


def _ome_scale(value: float) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        import zarr

        from napari_lazy_zarr.core.formats.ome import TransformWarning, describe_store

        expected = ramp(SHAPE)
        # The coarser level twice as coarse, where that is still a finite JSON number.
        factors = [1.0, 2.0 if value * 2 < float("inf") else 1.0]
        datasets = [
            {"path": str(level), "coordinateTransformations": [
                {"type": "scale", "scale": [value * factors[level]] * 2}]}
            for level in range(2)
        ]  # fmt: skip
        axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
        ome = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}
        group = zarr.create_group(str(context.root / "i.zarr"), attributes={"ome": ome})
        for level in range(2):
            step = 2**level
            group.create_array(str(level), shape=(64 // step,) * 2, chunks=CHUNKS, dtype="u2")
            group[str(level)][...] = expected[::step, ::step]
        context.begin()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (image,) = describe_store(str(context.root / "i.zarr"))
        warned = [w for w in caught if issubclass(w.category, TransformWarning)]
        scales = [level.scale for level in image.levels]
        extent = max(s * n for s, n in zip(scales[0], image.levels[0].shape, strict=True))
        if not warned or not 1 <= extent <= 1e6:
            raise Finding("wrong-pixels", f"scale {value}: levels at {scales}, warned {warned}")
        data = context.read(context.open(context.root / "i.zarr", path="0"))
        context.expect(data, expected, f"scale {value}")
        return f"scale {value:g}: opened in pixel units {scales}, warned; pixels match"

    return run


def cases() -> Iterator[Case]:
    for behaviour, what in (
        ("chunk-shifted-range", "a 206 of another range, honestly labelled"),
        ("chunk-unlabelled-range", "a 206 without Content-Range"),
        ("chunk-garbled-range", "a 206 with a garbled Content-Range"),
    ):
        yield Case(
            f"bytes: sharded inner chunk over HTTP, {what}",
            KIND,
            _mislabelled(behaviour, sharded=True),
            bound=HTTP_BOUND,
        )
    for zarr_format in (2, 3):
        yield Case(
            f"bytes: v{zarr_format} chunk over HTTP answered 410 Gone",
            KIND,
            _mislabelled("chunk-gone-410", sharded=False, zarr_format=zarr_format),
            bound=HTTP_BOUND,
        )
    yield Case("bytes: a zip of 200,000 members", KIND, _zip_members(200_000))
    yield Case(
        "bytes: a zip of 300,000 members, classic counts patched, ZIP64 record kept",
        KIND,
        _zip_patched(300_000, keep_zip64=True),
    )
    yield Case(
        "bytes: a zip of 300,000 members, classic counts patched, no ZIP64 record",
        KIND,
        _zip_patched(300_000, keep_zip64=False),
    )
    yield Case("bytes: a manifest of 1,000,000 references", KIND, _manifest_references(10**6))
    yield Case(
        "bytes: a .zarray reference at offset 2**64", KIND, _reference_offset(".zarray", 2**64)
    )
    yield Case("bytes: a chunk reference at offset 2**64", KIND, _reference_offset("0.0", 2**64))
    for value in (1e308, 5e-324):
        yield Case(
            f"bytes: OME scale {value:g} (opens in pixel units, warned)",
            KIND,
            _ome_scale(value),
            accept=frozenset({"ok"}),
        )
