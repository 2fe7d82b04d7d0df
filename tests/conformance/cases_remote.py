"""Remote conformance cases: stores served by servers started for them, on 127.0.0.1.

`RemoteServers` starts, for the time of a ``with`` block, moto's S3 server and
an HTTPS server whose certificate is signed by a CA made now (trustme), and
configures every reader the standard way, through the environment:
``AWS_ENDPOINT_URL`` and dummy AWS credentials for S3, ``SSL_CERT_FILE`` for the
private CA. Each `RemoteCase` writes its store with a third-party writer -- into
the S3 server (ome-zarr-py, zarr-python with their own storage options), or
into the folder the HTTPS server serves -- and returns a `Written` whose path
is the URL. `docs/compatibility.py` opens them with the three readers (a
"Remote" table) and `tests/remote/test_remote_cases.py` with this plugin.

Enter `RemoteServers` before napari (and aiohttp) are imported where peers are
compared: aiohttp reads ``SSL_CERT_FILE`` once, when imported. One server of
each kind serves every case: s3fs keeps a file system per set of options, its
endpoint read from the environment when it was made.
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import zarr

from tests.conformance.cases import Written
from tests.remote.s3server import S3Server, aws_environment

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["REMOTE_CASES", "RemoteCase", "RemoteServers"]

_SHAPE = (2, 80, 96)  # (c, y, x) of the OME images
_ARRAY = (3, 70, 90)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HttpsServer:
    """Serves `root` over HTTPS on 127.0.0.1 (a free port) with `context`."""

    def __init__(self, root: Path, context: ssl.SSLContext) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        port = self._server.server_address[1]
        self.url = f"https://127.0.0.1:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class RemoteServers:
    """An S3 server and an HTTPS server with a private CA, every reader configured for them.

    Attributes (inside the ``with`` block): `s3` (the `S3Server`), `https_url`
    and `https_root` (the folder it serves). The environment is restored on exit.
    """

    def __init__(self, folder: Path) -> None:
        import trustme

        self._folder = folder
        self.https_root = folder / "https"
        self.https_root.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        self.ca_file = folder / "private-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        self._https = _HttpsServer(self.https_root, context)
        self.https_url = self._https.url
        self.s3 = S3Server()
        self._saved: dict[str, str] = {}

    def __enter__(self) -> Self:
        self._saved = dict(os.environ)
        aws_environment(self._folder)
        os.environ["SSL_CERT_FILE"] = str(self.ca_file)
        self.s3.__enter__()
        os.environ["AWS_ENDPOINT_URL"] = self.s3.endpoint  # botocore's own variable
        self.s3.bucket("remote")
        self._https.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._https.stop()
        self.s3.__exit__(*exc)
        os.environ.clear()
        os.environ.update(self._saved)


@dataclass(frozen=True)
class RemoteCase:
    group: str
    name: str
    write: Callable[[RemoteServers], Written]

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).integers(0, 60_000, shape, dtype=np.uint16)


def _ome_image(group: zarr.Group, seed: int) -> tuple[np.ndarray[Any, Any], ...]:
    """An NGFF 0.4 ``cyx`` image by ome-zarr-py into `group`; its channels."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    data = _data(_SHAPE, seed)
    write_image(
        data, group, axes="cyx", fmt=FormatV04(), scale_factors=(2,),
        storage_options={"chunks": (1, 32, 32)},
    )  # fmt: skip
    return tuple(data)


def _s3_ome(servers: RemoteServers) -> Written:
    url = "s3://remote/image.ome.zarr"
    group = zarr.open_group(url, mode="w", zarr_format=2, storage_options=servers.s3.options())
    return Written(url, _ome_image(group, seed=1))


def _s3_array(servers: RemoteServers) -> Written:
    url = "s3://remote/array.zarr"
    data = _data(_ARRAY, seed=2)
    zarr.create_array(
        url, shape=data.shape, chunks=(1, 32, 32), dtype=data.dtype, zarr_format=3,
        storage_options=servers.s3.options(),
    )[...] = data  # fmt: skip
    return Written(url, (data,))


def _https_ome(servers: RemoteServers) -> Written:
    group = zarr.open_group(str(servers.https_root / "image.ome.zarr"), mode="w", zarr_format=2)
    return Written(f"{servers.https_url}/image.ome.zarr", _ome_image(group, seed=3))


def _https_array(servers: RemoteServers) -> Written:
    data = _data(_ARRAY, seed=4)
    path = servers.https_root / "array.zarr"
    zarr.create_array(
        str(path), shape=data.shape, chunks=(1, 32, 32), dtype=data.dtype, zarr_format=3
    )[...] = data
    return Written(f"{servers.https_url}/array.zarr", (data,))


REMOTE_CASES: tuple[RemoteCase, ...] = (
    RemoteCase("S3 (moto, AWS_ENDPOINT_URL)", "ome-zarr-py 0.4 cyx", _s3_ome),
    RemoteCase("S3 (moto, AWS_ENDPOINT_URL)", "zarr-python v3 array", _s3_array),
    RemoteCase("HTTPS (private CA, SSL_CERT_FILE)", "ome-zarr-py 0.4 cyx", _https_ome),
    RemoteCase("HTTPS (private CA, SSL_CERT_FILE)", "zarr-python v3 array", _https_array),
)
"""The remote cases, each written inside `RemoteServers`."""
