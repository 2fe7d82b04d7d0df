"""Special files where the engine expects regular ones, and hostile kerchunk references."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.redteam.bombs import payload
from tests.redteam.harness import Case, Context, Finding
from tests.redteam.stores import (
    BYTES_CODEC,
    SPECIAL_KINDS,
    make_special,
    ramp,
    v2_meta,
    write_files,
    zarr_array,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from napari_lazy_zarr.core import ChunkedArray

SPECIAL = "special file"
KERCHUNK = "kerchunk manifest"
SHAPE, CHUNKS = (64, 64), (32, 32)
REFERENCED = (32, 32)  # the manifest arrays: one 32 x 32 uint16 chunk, 2,048 bytes


def _manifest_array(context: Context, manifest: Path) -> ChunkedArray:
    from napari_lazy_zarr.core import ChunkedArray, ManifestSource

    return ChunkedArray(ManifestSource(manifest), context.cache())


def _stack_array(context: Context, stack: Path) -> ChunkedArray:
    from napari_lazy_zarr.core import ChunkedArray, open_stack

    return ChunkedArray(open_stack(stack), context.cache())


def _refuse(context: Context, open_it: Callable[[], ChunkedArray], what: str) -> str:
    context.begin()
    data = context.read(open_it())
    raise Finding("wrong-pixels", f"{what}: served {data.shape} {data.dtype} data")


# -- special files in every place a file is opened --------------------------------------


def _store_file(
    zarr_format: int, shards: tuple[int, int] | None, name: str, kind: str
) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        store = zarr_array(
            context.root / "a.zarr", ramp(SHAPE), CHUNKS, zarr_format=zarr_format, shards=shards
        )
        make_special(store / name, kind)
        return _refuse(context, lambda: context.open(store), f"{name} is a {kind}")

    return run


def _manifest_refs(data_ref: Any) -> dict[str, Any]:
    zarray = v2_meta(REFERENCED, REFERENCED)
    return {"version": 1, "refs": {".zarray": json.dumps(zarray), "0.0": data_ref}}


def _manifest_file(kind: str) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        manifest = context.root / "refs.json"
        make_special(manifest, kind)
        return _refuse(
            context, lambda: _manifest_array(context, manifest), f"manifest is a {kind}"
        )

    return run


def _reference_target(kind: str, whole: bool) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        manifest = write_files(context.root, {})
        reference = ["data.bin"] if whole else ["data.bin", 0, 2048]
        (manifest / "refs.json").write_text(json.dumps(_manifest_refs(reference)))
        make_special(manifest / "data.bin", kind)

        def array() -> ChunkedArray:
            return _manifest_array(context, manifest / "refs.json")

        if kind == "sparse-1GiB" and not whole:
            # 2,048 bytes of a regular (sparse) file: valid zeros, to be served as such.
            context.begin()
            expected = np.zeros(REFERENCED, "<u2")
            return context.expect(context.read(array()), expected, "range of a sparse file")
        return _refuse(context, array, f"referenced file is a {kind}")

    return run


def _stack(kind: str, special: str) -> Callable[[Context], str]:
    """A stack of t0.zarr and t1.json; `special` (the stack file or t1.json) is a `kind`."""

    def run(context: Context) -> str:
        zarr_array(context.root / "t0.zarr", ramp(REFERENCED), REFERENCED, zarr_format=2)
        write_files(context.root, {"data.bin": ramp(REFERENCED).tobytes()})
        (context.root / "t1.json").write_text(json.dumps(_manifest_refs(["data.bin", 0, 2048])))
        stack = context.root / "movie.zstack.json"
        stack.write_text(
            json.dumps({"zstack": 1, "mode": "stack", "arrays": ["t0.zarr", "t1.json"]})
        )
        make_special(context.root / special, kind)
        return _refuse(context, lambda: _stack_array(context, stack), f"{special} is a {kind}")

    return run


def _zip_file(kind: str) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        path = context.root / "store.zip"
        make_special(path, kind)
        return _refuse(context, lambda: context.open(path), f"the zip file is a {kind}")

    return run


def _special_cases() -> Iterator[Case]:
    places: dict[str, tuple[int, tuple[int, int] | None, str]] = {
        "v2 chunk": (2, None, "0.0"),
        "v3 chunk": (3, None, "c/0/0"),
        "v3 shard": (3, SHAPE, "c/0/0"),
        "v2 .zarray": (2, None, ".zarray"),
        "v3 zarr.json": (3, None, "zarr.json"),
        "v2 .zattrs": (2, None, ".zattrs"),
    }
    for kind in SPECIAL_KINDS:
        for place, (zarr_format, shards, name) in places.items():
            yield Case(
                f"{place} is a {kind}", SPECIAL, _store_file(zarr_format, shards, name, kind)
            )
        yield Case(f"manifest is a {kind}", SPECIAL, _manifest_file(kind))
        sparse_range = kind == "sparse-1GiB"
        yield Case(
            f"manifest range reference [f, 0, 2048] to a {kind}",
            SPECIAL,
            _reference_target(kind, whole=False),
            accept=frozenset({"ok"}) if sparse_range else frozenset({"clear-error"}),
        )
        yield Case(
            f"manifest whole-file reference [f] to a {kind}",
            SPECIAL,
            _reference_target(kind, whole=True),
        )
        yield Case(f"stack file is a {kind}", SPECIAL, _stack(kind, "movie.zstack.json"))
        yield Case(f"stack member (kerchunk .json) is a {kind}", SPECIAL, _stack(kind, "t1.json"))
        if kind != "directory":  # a directory named .zip is a directory store
            yield Case(f"zip file is a {kind}", SPECIAL, _zip_file(kind))


# -- kerchunk references ---------------------------------------------------------------


def _inline_bomb(bomb: str, compressor: dict[str, Any]) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        zarray = v2_meta(REFERENCED, REFERENCED, compressor=compressor)
        inline = "base64:" + base64.b64encode(payload(bomb)).decode()
        refs = {"version": 1, "refs": {".zarray": json.dumps(zarray), "0.0": inline}}
        manifest = write_files(context.root, {"refs.json": refs}) / "refs.json"
        return _refuse(context, lambda: _manifest_array(context, manifest), f"inline {bomb} bomb")

    return run


def _big_file(path: Path, size: int, *, sparse: bool) -> None:
    with open(path, "wb") as handle:
        if sparse:
            handle.truncate(size)
        else:
            piece = bytes(range(256)) * 4096  # real data: 1 MiB written at a time
            for _ in range(size // len(piece)):
                handle.write(piece)


def _reference_to_big(
    key: str, reference: list[Any], size: int, *, sparse: bool = True, templates: bool = False
) -> Callable[[Context], str]:
    """A manifest whose `key` (".zarray" or "0.0") references big.bin (`size` bytes)."""

    def run(context: Context) -> str:
        _big_file(context.root / "big.bin", size, sparse=sparse)
        refs: dict[str, Any] = {
            ".zarray": json.dumps(v2_meta(REFERENCED, REFERENCED)),
            "0.0": ramp(REFERENCED).tobytes().decode("latin-1"),
        }
        refs[key] = reference
        document: dict[str, Any] = {"version": 1, "refs": refs}
        if templates:
            document["templates"] = {"d": str(context.root)}
        manifest = write_files(context.root, {"refs.json": document}) / "refs.json"
        return _refuse(
            context, lambda: _manifest_array(context, manifest), f"{key} -> {reference}"
        )

    return run


def _range_to_bomb(context: Context) -> str:
    data = payload("zstd-declared")
    write_files(context.root, {"bomb.bin": b"padding" + data})
    zarray = v2_meta(REFERENCED, REFERENCED, compressor={"id": "zstd", "level": 3})
    refs = {
        "version": 1,
        "refs": {".zarray": json.dumps(zarray), "0.0": ["bomb.bin", 7, len(data)]},
    }
    manifest = write_files(context.root, {"refs.json": refs}) / "refs.json"
    return _refuse(context, lambda: _manifest_array(context, manifest), "range onto a zstd bomb")


def _kerchunk_cases() -> Iterator[Case]:
    zstd = {"id": "zstd", "level": 3}
    inline = {
        "zstd-declared": zstd,
        "zstd-undeclared": zstd,
        "gzip": {"id": "gzip", "level": 5},
        "bz2": {"id": "bz2", "level": 9},
        "blosc-zstd": {"id": "blosc", "cname": "zstd", "clevel": 9, "shuffle": 0, "blocksize": 0},
    }
    for bomb, compressor in inline.items():
        yield Case(f"base64 inline {bomb} bomb", KERCHUNK, _inline_bomb(bomb, compressor))
    gib = 1 << 30
    yield Case(
        "chunk: whole-file reference to a sparse 1 GiB file",
        KERCHUNK,
        _reference_to_big("0.0", ["big.bin"], gib),
    )
    yield Case(
        "chunk: whole-file reference to a 256 MiB file of data",
        KERCHUNK,
        _reference_to_big("0.0", ["big.bin"], 256 << 20, sparse=False),
    )
    yield Case(
        ".zarray: whole-file reference to a sparse 1 GiB file",
        KERCHUNK,
        _reference_to_big(".zarray", ["big.bin"], gib),
    )
    yield Case(
        "chunk: 1 GiB range reference into a sparse 1 GiB file",
        KERCHUNK,
        _reference_to_big("0.0", ["big.bin", 0, gib], gib),
    )
    yield Case(
        ".zarray: 1 GiB range reference into a sparse 1 GiB file",
        KERCHUNK,
        _reference_to_big(".zarray", ["big.bin", 0, gib], gib),
    )
    yield Case(
        "chunk: range reference of 2**40 bytes (past the end of a 1 GiB file)",
        KERCHUNK,
        _reference_to_big("0.0", ["big.bin", 0, 1 << 40], gib),
    )
    yield Case(
        "chunk: range reference at offset 2**62",
        KERCHUNK,
        _reference_to_big("0.0", ["big.bin", 1 << 62, 2048], gib),
    )
    yield Case(
        "chunk: 1 GiB range reference through a {{template}}",
        KERCHUNK,
        _reference_to_big("0.0", ["{{d}}/big.bin", 0, gib], gib, templates=True),
    )
    yield Case("chunk: range reference onto a zstd bomb", KERCHUNK, _range_to_bomb)


def cases() -> Iterator[Case]:
    yield from _special_cases()
    yield from _kerchunk_cases()


__all__ = ["BYTES_CODEC", "cases"]
