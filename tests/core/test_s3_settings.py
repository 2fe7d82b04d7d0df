"""The ``[s3]`` settings: resolved like every setting, applied only where set.

What obstore reads itself (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``...)
must keep working: the S3 configuration carries only what the user set in our settings,
and the credentials of a profile of the shared credentials file, which obstore does not
read (botocore did).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.settings import Settings, current_settings
from napari_lazy_zarr.core.storage.remote_errors import (
    HttpAccessDeniedError,
    HttpConnectError,
)
from napari_lazy_zarr.core.storage.s3 import (
    S3_SETTINGS,
    S3CredentialsError,
    explain_s3_failure,
    s3_endpoint,
    s3_store_config,
)

if TYPE_CHECKING:
    from pathlib import Path


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    return {
        "NAPARI_LAZY_ZARR_SETTINGS": str(tmp_path / "settings.toml"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
        **values,
    }


def _settings(env: dict[str, str]) -> Settings:
    return current_settings(env, names=S3_SETTINGS)


def test_nothing_set_leaves_obstore_its_own_configuration(tmp_path: Path) -> None:
    env = _env(tmp_path, AWS_ENDPOINT_URL="http://elsewhere:9000", AWS_ACCESS_KEY_ID="k")
    # obstore reads AWS_ENDPOINT_URL and the keys itself: nothing to add.
    assert s3_store_config(_settings(env), env) == {}
    assert s3_endpoint(_settings(env), env) == "http://elsewhere:9000"
    assert s3_endpoint(Settings(), {"AWS_REGION": "eu-west-3"}) == (
        "https://s3.eu-west-3.amazonaws.com"
    )


def test_the_file_then_the_environment(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text(
        '[s3]\ns3_endpoint_url = "https://minio.lab.org:9000"\ns3_region = "eu-west-1"\n'
        's3_anon = true\ns3_profile = "lab"\n'
    )
    chosen = _settings(_env(tmp_path))
    assert (chosen.s3_endpoint_url, chosen.s3_region, chosen.s3_anon, chosen.s3_profile) == (
        "https://minio.lab.org:9000",
        "eu-west-1",
        True,
        "lab",
    )
    assert s3_store_config(chosen, _env(tmp_path)) == {
        "endpoint": "https://minio.lab.org:9000",
        "region": "eu-west-1",
        "skip_signature": True,  # anonymous: no credentials looked for
    }
    (tmp_path / "aws-credentials").write_text(
        "[other]\naws_access_key_id = AKIDOTHER\naws_secret_access_key = s3cret\n"
    )
    env = _env(
        tmp_path,
        NAPARI_LAZY_ZARR_S3_ENDPOINT_URL="http://127.0.0.1:9000",
        NAPARI_LAZY_ZARR_S3_ANON="0",
        NAPARI_LAZY_ZARR_S3_REGION="us-west-2",
        NAPARI_LAZY_ZARR_S3_PROFILE="other",
    )
    assert s3_store_config(_settings(env), env) == {
        "endpoint": "http://127.0.0.1:9000",
        "region": "us-west-2",
        "access_key_id": "AKIDOTHER",
        "secret_access_key": "s3cret",
    }  # the variable turned anonymous access off again: the profile's keys sign


def test_aws_profile_and_the_default_profile_are_read_from_the_credentials_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "aws-credentials").write_text(
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n\n"
        "[lab]\naws_access_key_id = AKIDLAB\naws_secret_access_key = l\n"
        "aws_session_token = t\n"
    )
    env = _env(tmp_path)
    assert s3_store_config(_settings(env), env)["access_key_id"] == "AKIDDEFAULT"
    env = _env(tmp_path, AWS_PROFILE="lab")
    assert s3_store_config(_settings(env), env) == {
        "access_key_id": "AKIDLAB",
        "secret_access_key": "l",
        "session_token": "t",
    }


def test_an_unknown_profile_is_refused_by_name(tmp_path: Path) -> None:
    env = _env(tmp_path, NAPARI_LAZY_ZARR_S3_PROFILE="nope")
    with pytest.raises(MetadataError, match=r"\[s3\] s3_profile: the profile 'nope' is not"):
        s3_store_config(_settings(env), env)
    env = _env(tmp_path, AWS_PROFILE="nope")
    with pytest.raises(MetadataError, match=r"AWS_PROFILE: the profile 'nope'"):
        s3_store_config(_settings(env), env)


def test_no_credentials_anywhere_without_the_metadata_service_is_said_at_once(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, AWS_EC2_METADATA_DISABLED="true")
    with pytest.raises(S3CredentialsError, match="s3_anon = true"):
        s3_store_config(_settings(env), env)
    assert s3_store_config(_settings(_env(tmp_path)), _env(tmp_path)) == {}  # IMDS asked


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
        _settings(_env(tmp_path, **{name: value}))


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
    url = "s3://b/x.zarr"
    missing = explain_s3_failure(url, S3CredentialsError("none"), "http://e")
    assert missing is not None
    assert "s3_anon = true" in str(missing)
    assert "AWS_PROFILE" in str(missing)
    denied = HttpAccessDeniedError("403", url="u", status=403, retry_after=None)
    wrapped = RuntimeError("open failed")
    wrapped.__cause__ = denied
    explained = explain_s3_failure(url, wrapped, "http://e")
    assert explained is not None
    assert str(explained).startswith("s3://b/x.zarr: access denied by http://e")
    down = explain_s3_failure(url, HttpConnectError("refused", url="u"), "http://e")
    assert down is not None
    assert "does not answer" in str(down)
    assert "s3_endpoint_url" in str(down)
    assert explain_s3_failure(url, ValueError("bad"), "http://e") is None
