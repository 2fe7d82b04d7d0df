"""A real S3-compatible server on 127.0.0.1 for tests: moto's `ThreadedMotoServer`.

`S3Server` starts one (on a free port), makes buckets (private or public-read)
and gives the writers an s3fs file system signed with dummy credentials.
`aws_environment` makes botocore hermetic: dummy credentials, no shared
files, no instance metadata, no endpoint of the user's. The `s3` fixture is
both, per test; `tests/conformance/cases_remote.py` uses `S3Server` too.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Self

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator, MutableMapping
    from pathlib import Path

__all__ = ["AWS_DUMMY", "S3Server", "aws_environment", "s3"]

AWS_DUMMY = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Dummy credentials moto accepts (it checks no signature unless told to)."""
_CLEARED = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "FSSPEC_S3_ENDPOINT_URL",
    "FSSPEC_S3_ANON",
    "NAPARI_LAZY_ZARR_S3_ENDPOINT_URL",
    "NAPARI_LAZY_ZARR_S3_REGION",
    "NAPARI_LAZY_ZARR_S3_ANON",
    "NAPARI_LAZY_ZARR_S3_PROFILE",
)


def aws_environment(folder: Path, environ: MutableMapping[str, str] | None = None) -> None:
    """Make botocore hermetic in `environ` (default os.environ): dummy credentials only.

    The shared credentials and config files point into `folder` (absent), the
    instance metadata service is off, and no endpoint, region or profile of
    the user's (nor a settings file) leaks in.
    """
    env = os.environ if environ is None else environ
    for name in _CLEARED:
        env.pop(name, None)
    env.update(AWS_DUMMY)
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(folder / "aws-credentials")
    env["AWS_CONFIG_FILE"] = str(folder / "aws-config")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["NAPARI_LAZY_ZARR_SETTINGS"] = str(folder / "no-settings.toml")


class S3Server:
    """moto's S3 server on 127.0.0.1 (a free port), for the time of a ``with`` block.

    `endpoint` is its URL. File systems made here sign with the dummy
    credentials and are told the endpoint explicitly: what the readers under
    test are given is up to each test.
    """

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def __enter__(self) -> Self:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        # fsspec's cache keeps the file systems made for this endpoint (one per set of
        # options) to the end: an asynchronous one (zarr's) has no finaliser to close
        # its aiohttp session, and one garbage-collected open warns.
        self._server.stop()

    def options(self) -> dict[str, Any]:
        """Storage options a writer signs with (fsspec / zarr ``storage_options``)."""
        return {
            "endpoint_url": self.endpoint,
            "key": AWS_DUMMY["AWS_ACCESS_KEY_ID"],
            "secret": AWS_DUMMY["AWS_SECRET_ACCESS_KEY"],
            "token": AWS_DUMMY["AWS_SESSION_TOKEN"],
        }

    def filesystem(self) -> Any:
        """An s3fs file system on the server, signed with the dummy credentials."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.options())

    def bucket(self, name: str, *, public: bool = False) -> str:
        """Make bucket `name` (public: anyone may list and read it); its ``s3://`` URL."""
        client = self._client()
        client.create_bucket(Bucket=name)
        if public:
            policy = {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": "*",
                        # moto checks a HEAD against "s3:HeadObject" (AWS: GetObject)
                        "Action": ["s3:GetObject", "s3:HeadObject", "s3:ListBucket"],
                        "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"],
                    }
                ],
            }
            client.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))
        return f"s3://{name}"

    def upload(self, local: Path, url: str) -> str:
        """Copy the folder `local` to `url` (s3fs ``put``, recursive); returns `url`."""
        self.filesystem().put(str(local), url.removeprefix("s3://"), recursive=True)
        return url

    def _client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=AWS_DUMMY["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_DUMMY["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=AWS_DUMMY["AWS_SESSION_TOKEN"],
            region_name=AWS_DUMMY["AWS_DEFAULT_REGION"],
        )


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A moto S3 server for one test, botocore made hermetic (`aws_environment`)."""
    environ = dict(os.environ)
    aws_environment(tmp_path, environ)
    for name in set(os.environ) - set(environ):
        monkeypatch.delenv(name)
    for name, value in environ.items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)
    with S3Server() as server:
        yield server
