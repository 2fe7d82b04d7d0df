"""The error contract: deep JSON, refused connections, malformed arguments, odd locations."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.redteam.cases_http import closed_port
from tests.redteam.harness import HTTP_BOUND, Case, Context, Finding
from tests.redteam.stores import BYTES_CODEC, ramp, v2_meta, v3_meta, write_files, zarr_array

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

KIND = "error contract"
SHAPE = (32, 32)
DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON nested 100,000 deep


def _opened(context: Context, what: str, array: Any) -> str:
    data = context.read(array)
    raise Finding("wrong-pixels", f"{what}: opened and read {data.shape} data")


def _deep_store(name: str, zarr_format: int, *, http: bool = False) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        store = zarr_array(context.root / "a.zarr", ramp(SHAPE), SHAPE, zarr_format=zarr_format)
        (store / name).write_text(DEEP)
        location = context.url("a.zarr") if http else store
        context.begin()
        return _opened(context, f"{name} nested 100,000 deep", context.open(location))

    return run


def _deep_group_member(context: Context) -> str:
    files = {".zgroup": DEEP, "a/.zarray": v2_meta(SHAPE, SHAPE), "a/0.0": ramp(SHAPE).tobytes()}
    store = write_files(context.root / "g.zarr", files)
    context.begin()
    return _opened(context, ".zgroup nested 100,000 deep", context.open(store, path="a"))


def _deep_manifest(inline: bool) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        from napari_lazy_zarr.core import ChunkedArray, ManifestSource

        path = context.root / "refs.json"
        if inline:  # the .zarray document, as a string inside the references
            path.write_text(json.dumps({"version": 1, "refs": {".zarray": DEEP}}))
        else:
            path.write_text(DEEP)
        context.begin()
        return _opened(context, "manifest", ChunkedArray(ManifestSource(path), context.cache()))

    return run


def _deep_stack(context: Context) -> str:
    from napari_lazy_zarr.core import ChunkedArray, open_stack

    path = context.root / "s.zstack.json"
    path.write_text(DEEP)
    context.begin()
    return _opened(context, "stack file", ChunkedArray(open_stack(path), context.cache()))


def _deep_read_zarr(context: Context) -> str:
    from napari_lazy_zarr._reader import read_zarr  # imports napari: before the clock starts

    store = zarr_array(context.root / "a.zarr", ramp(SHAPE), SHAPE)
    (store / "zarr.json").write_text(DEEP)
    context.begin()
    layers = read_zarr(str(store))
    raise Finding("wrong-pixels", f"read_zarr opened {len(layers)} layers from nested JSON")


def _refused(zarr_format: int) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        context.begin()
        url = f"http://127.0.0.1:{closed_port()}/{context.root.name}/a.zarr"
        return _opened(context, "closed port", context.open(url))

    return run


def _odd_location(make: Callable[[Context], str]) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        location = make(context)
        context.begin()
        return _opened(context, repr(location), context.open(location))

    return run


# -- malformed arguments ------------------------------------------------------------


_BAD_LIMITS: dict[str, Any] = {
    "NaN": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "-1": -1,
    '"1e9" (string)': "1e9",
}
_BAD_CONCURRENCY: dict[str, Any] = {
    "2.5": 2.5,
    '"4" (string)': "4",
    "True": True,
    "0": 0,
    "-1": -1,
    "NaN": float("nan"),
}


def _argument(call: str, name: str, value: Any) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        from napari_lazy_zarr.core import ChunkCache, open_array

        store = zarr_array(context.root / "a.zarr", ramp(SHAPE), SHAPE)
        context.begin()
        if call == "open_array":
            open_array(str(store), **{name: value})
        elif call == "ChunkCache":
            ChunkCache(**{name: value})
        else:  # a setter of a live cache
            setattr(ChunkCache(1 << 20), name, value)
        raise Finding("raw-exception", f"{call} accepted {name}={value!r} without an error")

    return run


def _argument_cases() -> Iterator[Case]:
    builtin = (TypeError, ValueError)
    for call in ("open_array", "ChunkCache"):
        for label, value in _BAD_LIMITS.items():
            yield Case(
                f"{call}(total_bytes_limit={label})",
                KIND,
                _argument(call, "total_bytes_limit", value),
                builtin=builtin,
                mentions="total_bytes_limit",
            )
        for label, value in _BAD_CONCURRENCY.items():
            yield Case(
                f"{call}(concurrency={label})",
                KIND,
                _argument(call, "concurrency", value),
                builtin=builtin,
                mentions="concurrency",
            )
    yield Case(
        "cache.total_bytes_limit = NaN",
        KIND,
        _argument("setter", "total_bytes_limit", float("nan")),
        builtin=builtin,
        mentions="total_bytes_limit",
    )
    yield Case(
        'cache.concurrency = "4"',
        KIND,
        _argument("setter", "concurrency", "4"),
        builtin=builtin,
        mentions="concurrency",
    )


def _nul(context: Context) -> str:
    return str(context.root / "a\x00b.zarr")


def _unknown_protocol(context: Context) -> str:
    return f"nosuchprotocol://{context.root.name}/a.zarr"


def _ftp_closed(context: Context) -> str:
    return f"ftp://127.0.0.1:{closed_port()}/{context.root.name}/a.zarr"


def _store_is_a_v3_group_of_deep_attributes(context: Context) -> str:
    document = v3_meta(SHAPE, SHAPE, [BYTES_CODEC])
    text = json.dumps(document)[:-1] + ', "x": ' + DEEP + "}"
    write_files(context.root / "a.zarr", {"zarr.json": text})
    return str(context.root / "a.zarr")


def cases() -> Iterator[Case]:
    for name, zarr_format in ((".zarray", 2), ("zarr.json", 3), (".zattrs", 2)):
        yield Case(f"{name} nested 100,000 deep", KIND, _deep_store(name, zarr_format))
    for name, zarr_format in ((".zarray", 2), ("zarr.json", 3)):
        yield Case(
            f"{name} nested 100,000 deep, over HTTP",
            KIND,
            _deep_store(name, zarr_format, http=True),
            bound=HTTP_BOUND,
        )
    yield Case(".zgroup nested 100,000 deep (array inside)", KIND, _deep_group_member)
    yield Case("manifest nested 100,000 deep", KIND, _deep_manifest(inline=False))
    yield Case("manifest's inline .zarray nested 100,000 deep", KIND, _deep_manifest(inline=True))
    yield Case("stack file nested 100,000 deep", KIND, _deep_stack)
    yield Case("read_zarr: zarr.json nested 100,000 deep", KIND, _deep_read_zarr)
    yield Case(
        "zarr.json with an unknown key nested 100,000 deep",
        KIND,
        _odd_location(_store_is_a_v3_group_of_deep_attributes),
    )
    for zarr_format in (2, 3):
        yield Case(
            f"connection refused at open (v{zarr_format} URL, closed port)",
            KIND,
            _refused(zarr_format),
            bound=HTTP_BOUND,
        )
    yield Case("a path with a NUL byte", KIND, _odd_location(_nul))
    yield Case("an unknown protocol", KIND, _odd_location(_unknown_protocol))
    yield Case("ftp:// to a closed port", KIND, _odd_location(_ftp_closed), bound=HTTP_BOUND)
    yield from _argument_cases()
