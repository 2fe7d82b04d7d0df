"""The ``[s3]`` settings: resolved like every setting, applied only where set.

What s3fs and botocore read themselves (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``,
``FSSPEC_S3_*``) must keep working: the storage options carry only what the
user set in our settings, over fsspec's configured options.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.settings import Settings, Timeouts, current_settings
from napari_lazy_zarr.core.storage.s3 import S3_SETTINGS, s3_options, s3_storage_options

if TYPE_CHECKING:
    from pathlib import Path


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    return {"NAPARI_LAZY_ZARR_SETTINGS": str(tmp_path / "settings.toml"), **values}


def test_nothing_set_leaves_s3fs_and_botocore_their_own_configuration(tmp_path: Path) -> None:
    env = _env(tmp_path, AWS_ENDPOINT_URL="http://elsewhere:9000", AWS_PROFILE="lab")
    options = s3_options("s3://bucket/image.zarr", Timeouts(connect=3, read=4), env)
    # Only the time caps and the pool: botocore reads AWS_ENDPOINT_URL and AWS_PROFILE
    # itself.
    assert options == {
        "config_kwargs": {"connect_timeout": 3, "read_timeout": 4, "max_pool_connections": 64},
        "max_concurrency": 1,  # whole keys in one GET (no HEAD first)
    }
    assert s3_options("https://example.org/image.zarr", Timeouts(), env) == {}


def test_the_file_then_the_environment(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text(
        '[s3]\ns3_endpoint_url = "https://minio.lab.org:9000"\ns3_region = "eu-west-1"\n'
        's3_anon = true\ns3_profile = "lab"\n'
    )
    chosen = current_settings(_env(tmp_path), names=S3_SETTINGS)
    assert (chosen.s3_endpoint_url, chosen.s3_region, chosen.s3_anon, chosen.s3_profile) == (
        "https://minio.lab.org:9000",
        "eu-west-1",
        True,
        "lab",
    )
    env = _env(
        tmp_path,
        NAPARI_LAZY_ZARR_S3_ENDPOINT_URL="http://127.0.0.1:9000",
        NAPARI_LAZY_ZARR_S3_ANON="0",
        NAPARI_LAZY_ZARR_S3_REGION="us-west-2",
        NAPARI_LAZY_ZARR_S3_PROFILE="other",
    )
    options = s3_options("s3://bucket/x.zarr", Timeouts(), env)
    assert options == {
        "client_kwargs": {"region_name": "us-west-2"},
        "config_kwargs": {
            "connect_timeout": 10.0,
            "read_timeout": 10.0,
            "max_pool_connections": 64,
        },
        "endpoint_url": "http://127.0.0.1:9000",
        "profile": "other",
        "max_concurrency": 1,
    }  # the variable turned anonymous access off again: no "anon" at all


def test_the_time_caps_come_from_the_settings_without_timeouts(tmp_path: Path) -> None:
    env = _env(tmp_path, NAPARI_LAZY_ZARR_TIMEOUT_CONNECT="2.5")
    options = s3_options("s3a://bucket/x.zarr", environ=env)
    assert options["config_kwargs"] == {
        "connect_timeout": 2.5,
        "read_timeout": 10.0,
        "max_pool_connections": 64,
    }


def test_the_connection_pool_holds_twice_the_loaders(tmp_path: Path) -> None:
    """One file system serves every thread: botocore's pool (10 by default) would queue
    the cache's 32 remote loaders behind each other."""
    for variables, pool in (
        ({}, 64),
        ({"NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY": "4"}, 10),  # never below botocore's
        ({"NAPARI_LAZY_ZARR_CONCURRENCY": "48"}, 96),  # loaders set: they count
    ):
        options = s3_options("s3://bucket/x.zarr", environ=_env(tmp_path, **variables))
        assert options["config_kwargs"]["max_pool_connections"] == pool, variables


def test_fsspecs_configured_options_are_merged_under_ours() -> None:
    configured = {
        "client_kwargs": {"region_name": "ap-south-1", "verify": False},
        "config_kwargs": {"retries": {"max_attempts": 2}, "connect_timeout": 99},
        "requester_pays": True,
        "max_concurrency": 4,
    }
    settings = Settings(s3_region="eu-central-1")
    options = s3_storage_options(settings, Timeouts(connect=1, read=2), configured=configured)
    assert options == {
        "client_kwargs": {"region_name": "eu-central-1", "verify": False},
        "config_kwargs": {
            "retries": {"max_attempts": 2},
            "connect_timeout": 1,
            "read_timeout": 2,
            "max_pool_connections": 64,
        },
    }  # the rest (requester_pays, max_concurrency) fsspec applies itself, under ours


def test_fsspec_environment_variables_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec.config

    monkeypatch.setattr(
        fsspec.config, "conf", {"s3": {"config_kwargs": {"max_pool_connections": 50}}}
    )
    options = s3_storage_options(Settings(), Timeouts())
    assert options["config_kwargs"]["max_pool_connections"] == 50


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("NAPARI_LAZY_ZARR_S3_ANON", "maybe", "NAPARI_LAZY_ZARR_S3_ANON: true or false"),
        ("NAPARI_LAZY_ZARR_S3_ENDPOINT_URL", "minio:9000", "an endpoint is an http(s) URL"),
        ("NAPARI_LAZY_ZARR_S3_ENDPOINT_URL", "ftp://host", "an endpoint is an http(s) URL"),
        ("NAPARI_LAZY_ZARR_S3_ENDPOINT_URL", "http://host:port", "an endpoint is an http(s)"),
    ],
)
def test_bad_values_are_refused_by_name(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    with pytest.raises(MetadataError, match=re.escape(message)):
        s3_options("s3://bucket/x.zarr", Timeouts(), _env(tmp_path, **{name: value}))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("true", True), ("Yes", True), ("on", True), ("0", False), ("off", False)],
)
def test_the_switch_reads_the_usual_spellings(tmp_path: Path, text: str, expected: bool) -> None:
    env = _env(tmp_path, NAPARI_LAZY_ZARR_S3_ANON=text)
    assert current_settings(env, names=["s3_anon"]).s3_anon is expected


def test_a_toml_switch_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text("[s3]\ns3_anon = 1\n")
    with pytest.raises(MetadataError, match=r"\[s3\] s3_anon: true or false is needed"):
        current_settings(_env(tmp_path), names=["s3_anon"])


def test_the_errors_name_the_setting_never_a_secret() -> None:
    from napari_lazy_zarr.core.storage.s3 import explain_s3_failure, s3_read_error

    class NoCredentialsError(Exception):  # botocore's, by name (no botocore import here)
        pass

    message = explain_s3_failure("s3://b/x.zarr", NoCredentialsError("none"), "http://e")
    assert message is not None
    assert "s3_anon = true" in message
    assert "AWS_PROFILE" in message
    denied = s3_read_error("s3://b/x.zarr", PermissionError("Forbidden"))
    assert isinstance(denied, PermissionError)
    assert str(denied).startswith("s3://b/x.zarr: access denied")
    down = s3_read_error("s3://b/x.zarr", ConnectionRefusedError("refused"))
    assert isinstance(down, ConnectionError)
    assert "s3_endpoint_url" in str(down)
