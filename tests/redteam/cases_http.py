"""A hostile HTTP server: bombs, endless bodies, silence, drips, resets, Retry-After, refusals.

And what the remote stack reads besides the server's answers: a CA-bundle setting naming a
FIFO, an S3 endpoint that accepts connections and never answers.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from tests.redteam.harness import HTTP_BOUND, Case, Context, Finding
from tests.redteam.hostile_server import HostileServer
from tests.redteam.stores import (
    BYTES_CODEC,
    MISSING,
    ramp,
    shard_index,
    sharded_meta,
    write_files,
    zarr_array,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

KIND = "HTTP"
SHAPE, CHUNKS = (64, 64), (32, 32)

# Misbehaviours no client can read data through: each must end in a clear error, in time.
_FAILING = (
    "huge-length",
    "endless-chunked",
    "endless-close",
    "gzip-bomb",
    "deflate-bomb",
    "silent",
    "drip",
    "stall-mid-body",
    "reset",
    "retry-after-503-3600",
)
# A rate limiter that relents after its Retry-After: a client that waits as told reads the data.
_RELENTING = ("retry-after-429-1", "retry-after-503-1", "retry-after-429-date")


def _served(zarr_format: int, behaviour: str) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        expected = ramp(SHAPE)
        zarr_array(context.root / "a.zarr", expected, CHUNKS, zarr_format=zarr_format)
        context.begin()
        array = context.open(context.url("a.zarr", behaviour))
        return context.expect(context.read(array), expected, behaviour)

    return run


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _refused_at_open(zarr_format: int) -> Callable[[Context], str]:
    def run(context: Context) -> str:
        context.begin()
        # The URL names the case's directory, so that a clear error names it too.
        array = context.open(f"http://127.0.0.1:{closed_port()}/{context.root.name}/a.zarr")
        raise Finding("wrong-pixels", f"opened {array!r} from a closed port")

    return run


def _refused_at_read(context: Context) -> str:
    """The server goes away between opening the array and reading a chunk."""
    zarr_array(context.root / "a.zarr", ramp(SHAPE), CHUNKS)
    server = HostileServer(context.root.parent).start()
    context.begin()
    array = context.open(f"{server.url}/plain/{context.root.name}/a.zarr")
    server.stop()
    data = context.read(array)
    raise Finding("wrong-pixels", f"read {data.shape} data from a server that is gone")


def _sharded_range(context: Context) -> str:
    """Over HTTP, a shard index pointing at a 1 GiB range of a sparse 1 GiB shard."""
    store = write_files(
        context.root / "s.zarr", {"zarr.json": sharded_meta(SHAPE, SHAPE, CHUNKS, [BYTES_CODEC])}
    )
    shard = store / "c" / "0" / "0"
    shard.parent.mkdir(parents=True)
    with open(shard, "wb") as handle:
        handle.truncate(1 << 30)
        handle.seek(1 << 30)
        handle.write(shard_index([(0, 1 << 30)] + [(MISSING, MISSING)] * 3))
    context.begin()
    data = context.read(context.open(context.url("s.zarr")))
    raise Finding("wrong-pixels", f"a shard with a bogus index served {data.shape} data")


def _ca_bundle_fifo(context: Context) -> str:
    """The ``[remote] ca_bundle`` setting names a FIFO: reading it must not block (a TLS
    library's ``fopen`` of it waits for a writer that never comes)."""
    fifo = context.root / "lab-ca.pem"
    context.root.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    os.environ["NAPARI_LAZY_ZARR_CA_BUNDLE"] = str(fifo)
    context.begin()
    array = context.open(f"https://127.0.0.1:{closed_port()}/{context.root.name}/a.zarr")
    raise Finding("wrong-pixels", f"opened {array!r} trusting a CA bundle that is a FIFO")


def _s3_silent_endpoint(context: Context) -> str:
    """An S3 endpoint that accepts connections (the kernel completes them: a listening
    socket nobody serves) and never answers: the open ends within the case's time caps."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    os.environ.update(
        {
            "NAPARI_LAZY_ZARR_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "NAPARI_LAZY_ZARR_S3_ANON": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    context.begin()
    try:
        array = context.open(f"s3://lab/{context.root.name}/a.zarr")
    finally:
        listener.close()
    raise Finding("wrong-pixels", f"opened {array!r} from an endpoint that never answers")


def cases() -> Iterator[Case]:
    for zarr_format in (2, 3):
        for name in _FAILING:
            yield Case(
                f"v{zarr_format} chunk: {name}",
                KIND,
                _served(zarr_format, f"chunk-{name}"),
                bound=HTTP_BOUND,
            )
        for name in _RELENTING:
            yield Case(
                f"v{zarr_format} chunk: {name} (then served)",
                KIND,
                _served(zarr_format, f"chunk-{name}"),
                accept=frozenset({"ok"}),
                bound=HTTP_BOUND,
            )
        for name in ("huge-length", "endless-chunked", "gzip-bomb", "silent", "drip"):
            yield Case(
                f"v{zarr_format} metadata at open: {name}",
                KIND,
                _served(zarr_format, f"meta-{name}"),
                bound=HTTP_BOUND,
            )
        yield Case(
            f"v{zarr_format} metadata at open: retry-after-503-1 (then served)",
            KIND,
            _served(zarr_format, "meta-retry-after-503-1"),
            accept=frozenset({"ok"}),
            bound=HTTP_BOUND,
        )
        yield Case(
            f"v{zarr_format} connection refused at open (closed port)",
            KIND,
            _refused_at_open(zarr_format),
            bound=HTTP_BOUND,
        )
    yield Case(
        "v3 connection refused at chunk read (server gone)",
        KIND,
        _refused_at_read,
        bound=HTTP_BOUND,
    )
    yield Case(
        "https: the CA bundle setting names a FIFO",
        KIND,
        _ca_bundle_fifo,
        bound=HTTP_BOUND,
    )
    yield Case(
        "s3: the endpoint accepts connections and never answers",
        KIND,
        _s3_silent_endpoint,
        bound=HTTP_BOUND,
    )
    yield Case(
        "v3 sharded: index points at a 1 GiB range (served by range)",
        KIND,
        _sharded_range,
        bound=HTTP_BOUND,
    )
