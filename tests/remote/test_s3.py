"""S3 stores on a real S3-compatible server (moto on 127.0.0.1), opened through the settings.

Every store is written INTO the server by its writer (zarr-python's FsspecStore,
ome-zarr-py, h5py + kerchunk) with the writer's own storage options; the reader
is told the endpoint only through the plugin's ``[s3]`` settings (or the AWS
variables botocore reads itself), never through the writer's options.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._reader import contrast_sample, read_zarr
from napari_lazy_zarr.core.errors import MetadataError, StoreNotFoundError
from napari_lazy_zarr.core.formats.ome import describe_store, open_level_sources
from napari_lazy_zarr.core.keys import chunk_bounds, grid_shape
from napari_lazy_zarr.core.sources.zarr import open_zarr_source
from tests.remote.conftest import fresh_shared_cache
from tests.remote.s3server import S3Server, s3

if TYPE_CHECKING:
    from pathlib import Path

    from napari_lazy_zarr.core.sources import ChunkSource

__all__ = ["fresh_shared_cache", "s3"]

ENDPOINT = "NAPARI_LAZY_ZARR_S3_ENDPOINT_URL"


def _whole(source: ChunkSource) -> np.ndarray[Any, Any]:
    """Every chunk of `source` read and put in place (the reader's pixels)."""
    out = np.zeros(source.shape, source.dtype)
    for coords in itertools.product(*(range(n) for n in grid_shape(source))):
        lo, hi = chunk_bounds(source.grid, coords, source.shape)
        box = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        out[box] = source.read_chunk(coords)
    return out


def _data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).integers(0, 60_000, shape, dtype=np.uint16)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_zarr_array_written_into_s3_opens_through_the_endpoint_setting(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, zarr_format: int
) -> None:
    bucket = s3.bucket("lab")
    data = _data((70, 90), seed=zarr_format)
    group = zarr.open_group(
        f"{bucket}/v{zarr_format}.zarr",
        mode="w",
        zarr_format=zarr_format,  # type: ignore[arg-type]
        storage_options=s3.options(),
    )
    group.create_array("raw", shape=data.shape, chunks=(32, 32), dtype=data.dtype)[...] = data
    monkeypatch.setenv(ENDPOINT, s3.endpoint)  # the reader's only way to the server
    source = open_zarr_source(f"{bucket}/v{zarr_format}.zarr", path="raw")
    np.testing.assert_array_equal(_whole(source), data)


def test_stores_opened_on_many_threads_each_read_their_own_array(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache's workers and a plate's fields open stores on dozens of threads at once:
    each gets its own obstore store (its connections closed with it) and reads its array."""
    bucket = s3.bucket("fanout")
    arrays = {f"a{index}.zarr": _data((40, 30), seed=index) for index in range(8)}
    for name, data in arrays.items():
        zarr.create_array(
            f"{bucket}/{name}", shape=data.shape, chunks=(20, 15), dtype=data.dtype,
            storage_options=s3.options(),
        )[...] = data  # fmt: skip
    monkeypatch.setenv(ENDPOINT, s3.endpoint)

    def opened(name: str) -> np.ndarray[Any, Any]:
        return _whole(open_zarr_source(f"{bucket}/{name}"))

    with concurrent.futures.ThreadPoolExecutor(len(arrays)) as pool:
        results = list(pool.map(opened, arrays))
    for pixels, data in zip(results, arrays.values(), strict=True):
        np.testing.assert_array_equal(pixels, data)


def test_an_ome_zarr_image_written_into_s3_opens_from_the_settings_file(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    bucket = s3.bucket("images")
    data = _data((2, 64, 96), seed=4)
    root = zarr.open_group(
        f"{bucket}/cells.ome.zarr", mode="w", zarr_format=2, storage_options=s3.options()
    )
    write_image(
        data, root, axes="cyx", fmt=FormatV04(), scale_factors=(2,),
        storage_options={"chunks": (1, 32, 32)},
    )  # fmt: skip
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[s3]\ns3_endpoint_url = "{s3.endpoint}"\ns3_region = "us-east-1"\n')
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(settings))
    url = f"{bucket}/cells.ome.zarr"
    (image,) = describe_store(url)
    levels = open_level_sources(url, image)
    np.testing.assert_array_equal(_whole(levels[0]), data)
    datasets = root.attrs["multiscales"][0]["datasets"]  # type: ignore[index,call-overload]
    written = zarr.open_array(
        f"{url}/{datasets[1]['path']}", mode="r", storage_options=s3.options()
    )
    np.testing.assert_array_equal(_whole(levels[1]), written[...])  # the writer's level
    layers = read_zarr(url)  # the napari reader: one layer per channel
    assert [kind for _, _, kind in layers] == ["image", "image"]
    for layer_levels, _, _ in layers:
        # The contrast limits, sampled in the background from the coarsest level over S3.
        sample = contrast_sample(layer_levels[0].loader)
        assert sample is not None
        top = layer_levels[-1].array.result(timeout=30)
        assert sample.future.result(timeout=30) == (float(top.min()), float(top.max()))


def test_a_public_bucket_opens_anonymously_without_credentials(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.bucket("open-data", public=True)
    data = _data((50, 60), seed=7)
    zarr.create_array(
        f"{bucket}/pub.zarr", shape=data.shape, chunks=(25, 30), dtype=data.dtype,
        storage_options=s3.options(),
    )[...] = data  # fmt: skip
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv(ENDPOINT, s3.endpoint)
    # Signed requests need credentials: without any the error says to go anonymous.
    with pytest.raises(MetadataError, match=r"no AWS credentials.*s3_anon = true") as caught:
        open_zarr_source(f"{bucket}/pub.zarr")
    assert s3.endpoint in str(caught.value)
    monkeypatch.setenv("NAPARI_LAZY_ZARR_S3_ANON", "1")
    np.testing.assert_array_equal(_whole(open_zarr_source(f"{bucket}/pub.zarr")), data)


def test_access_denied_names_the_url_and_the_settings(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto import settings as moto_settings

    bucket = s3.bucket("private")
    zarr.create_array(f"{bucket}/p.zarr", shape=(8, 8), dtype="u1", storage_options=s3.options())[
        ...
    ] = 1
    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks keys
    monkeypatch.setenv(ENDPOINT, s3.endpoint)
    with pytest.raises(MetadataError) as caught:
        open_zarr_source(f"{bucket}/p.zarr")
    message = str(caught.value)
    assert message.startswith(f"{bucket}/p.zarr: access denied by {s3.endpoint}")
    assert "s3_anon" in message
    assert "s3_endpoint_url" in message
    assert "testing" not in message  # the key id is never shown


def test_an_unknown_profile_names_the_setting(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.bucket("profiles")
    monkeypatch.setenv(ENDPOINT, s3.endpoint)
    monkeypatch.setenv("NAPARI_LAZY_ZARR_S3_PROFILE", "no-such-profile")
    with pytest.raises(MetadataError, match=r"no-such-profile.*\[s3\] s3_profile"):
        describe_store(f"{bucket}/image.zarr")


def test_a_missing_bucket_is_named_with_its_endpoint(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.bucket("exists")
    monkeypatch.setenv(ENDPOINT, s3.endpoint)
    with pytest.raises(StoreNotFoundError, match=r"no bucket 'nope' at http://127\.0\.0\.1"):
        describe_store("s3://nope/image.zarr")
    # A missing store in a bucket that exists is still "no zarr array or group".
    with pytest.raises(Exception, match="no zarr array or group found"):
        describe_store("s3://exists/image.zarr")


def test_a_wrong_endpoint_fails_fast_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv(ENDPOINT, f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NAPARI_LAZY_ZARR_TIMEOUT_CONNECT", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        attempt = pool.submit(describe_store, "s3://bucket/image.zarr")
        with pytest.raises(MetadataError, match=rf"127\.0\.0\.1:{port} does not answer"):
            attempt.result(timeout=60)  # bounded by botocore's timeouts and retries


def test_s3_kerchunk_references_read_with_the_settings(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import h5py
    from kerchunk.hdf import SingleHdf5ToZarr

    bucket = s3.bucket("hdf")
    data = _data((48, 64), seed=11)
    local = tmp_path / "h5"
    local.mkdir()
    with h5py.File(local / "scan.h5", "w") as handle:
        handle.create_dataset("image", data=data, chunks=(16, 32))
    s3.upload(local, f"{bucket}/h5")
    url = f"{bucket}/h5/scan.h5"
    with s3.filesystem().open(url.removeprefix("s3://"), "rb") as remote:
        references = SingleHdf5ToZarr(remote, url, inline_threshold=0).translate()
    (tmp_path / "scan.json").write_text(json.dumps(references))
    monkeypatch.setenv("NAPARI_LAZY_ZARR_ALLOWED_REMOTES", bucket)
    monkeypatch.setenv(ENDPOINT, s3.endpoint)  # what reads the referenced bytes
    (image,) = describe_store(str(tmp_path / "scan.json"))
    (level,) = open_level_sources(str(tmp_path / "scan.json"), image)
    np.testing.assert_array_equal(_whole(level), data)
