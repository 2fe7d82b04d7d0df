"""S3 stores from the settings, and S3 failures explained.

Every ``s3://`` store (`store_for`) and every ``s3://`` reference a kerchunk
file points to is read by obstore's S3 store configured by `s3_store_config`:
the ``[s3]`` settings (endpoint, region, anonymous access, AWS profile) where the
user set them, and otherwise obstore's own reading of the environment
(``AWS_ENDPOINT_URL``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ACCESS_KEY_ID``..., web identity and container credentials, the
instance metadata service). obstore does not read the shared credentials
file: a profile (``[s3] s3_profile``, else ``AWS_PROFILE``, else
``default``) is read here from ``~/.aws/credentials``
(``AWS_SHARED_CREDENTIALS_FILE``), as a regular file. Credentials are never
settings and never shown.

`s3_errors` turns what a store raises when it cannot be opened (no credentials,
access denied, no such bucket, an endpoint that does not answer) into a
`LazyZarrError` naming the URL and the setting to change.
"""

from __future__ import annotations

import configparser
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core.errors import (
    LazyZarrError,
    LoadTimeoutError,
    MetadataError,
    StoreNotFoundError,
)
from napari_lazy_zarr.core.settings import Settings, current_settings
from napari_lazy_zarr.core.storage.files import read_regular_file
from napari_lazy_zarr.core.storage.remote_errors import (
    HttpAccessDeniedError,
    HttpConnectError,
    NoSuchBucketError,
    RemoteSetupError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "S3_SCHEMES",
    "S3_SETTINGS",
    "S3CredentialsError",
    "explain_s3_failure",
    "is_s3",
    "s3_endpoint",
    "s3_errors",
    "s3_store_config",
]

S3_SCHEMES: Final = frozenset({"s3", "s3a"})
"""The URL schemes of S3 stores."""
S3_SETTINGS: Final = ("s3_endpoint_url", "s3_region", "s3_anon", "s3_profile")
"""The `Settings` fields of the ``[s3]`` section."""
_CREDENTIAL_VARIABLES: Final = (
    "AWS_ACCESS_KEY_ID",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)  # credentials obstore finds itself
_PROFILE_KEYS: Final = {
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
}
_MAX_AWS_FILE: Final = 1 << 20
_ANON_HINT: Final = (
    "for a public bucket turn on anonymous access ([s3] s3_anon = true, "
    "NAPARI_LAZY_ZARR_S3_ANON=1); otherwise give credentials the AWS way "
    "(AWS_PROFILE or [s3] s3_profile, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
    "~/.aws/credentials)"
)
_ENDPOINT_HINT: Final = (
    "check the endpoint ([s3] s3_endpoint_url, NAPARI_LAZY_ZARR_S3_ENDPOINT_URL, "
    "or AWS_ENDPOINT_URL)"
)


class S3CredentialsError(RemoteSetupError):
    """No credentials to sign S3 requests with (and no instance metadata service to ask)."""


def is_s3(url: str) -> bool:
    """Whether `url` is an ``s3://`` (or ``s3a://``) URL.

    Examples
    --------
    >>> is_s3("S3://bucket/image.zarr"), is_s3("https://example.org/image.zarr")
    (True, False)
    """
    return url.split("://", 1)[0].lower() in S3_SCHEMES if "://" in url else False


def s3_endpoint(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """The endpoint S3 requests go to: the setting, ``AWS_ENDPOINT_URL(_S3)``, else AWS's.

    Examples
    --------
    >>> s3_endpoint(Settings(s3_endpoint_url="http://127.0.0.1:9000"), {})
    'http://127.0.0.1:9000'
    >>> s3_endpoint(Settings(s3_region="eu-west-1"), {})
    'https://s3.eu-west-1.amazonaws.com'
    """
    env = os.environ if environ is None else environ
    found = (
        settings.s3_endpoint_url.strip()
        or env.get("AWS_ENDPOINT_URL_S3", "")
        or env.get("AWS_ENDPOINT_URL", "")
        or env.get("AWS_ENDPOINT", "")
    )
    if found:
        return found.rstrip("/")
    return f"https://s3.{_region(settings, env) or 'us-east-1'}.amazonaws.com"


def _region(settings: Settings, env: Mapping[str, str]) -> str:
    return (
        settings.s3_region.strip()
        or env.get("AWS_REGION", "")
        or env.get("AWS_DEFAULT_REGION", "")
    )


def s3_store_config(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """obstore's S3 configuration (`obstore.store.S3Config`) for `settings`.

    The endpoint and region where set (or the environment's, which obstore
    reads too); anonymous access as ``skip_signature``; credentials from the
    profile named in the settings, else (when the environment holds none obstore
    finds itself) from ``AWS_PROFILE``'s or the default profile.

    Raises
    ------
    RemoteSetupError
        A profile named but not found (`S3CredentialsError`: none at all).
    S3CredentialsError
        No credentials anywhere and the instance metadata service turned off
        (``AWS_EC2_METADATA_DISABLED``).

    Examples
    --------
    >>> s3_store_config(Settings(s3_endpoint_url="http://127.0.0.1:9000", s3_anon=True), {})
    {'endpoint': 'http://127.0.0.1:9000', 'skip_signature': True}
    """
    env = os.environ if environ is None else environ
    config: dict[str, Any] = {}
    if settings.s3_endpoint_url.strip():
        config["endpoint"] = settings.s3_endpoint_url.strip()
    if settings.s3_region.strip():
        config["region"] = settings.s3_region.strip()
    if settings.s3_anon:
        config["skip_signature"] = True
        return config
    named = settings.s3_profile.strip()
    if not named and any(env.get(name) for name in _CREDENTIAL_VARIABLES):
        return config  # obstore reads these itself (a profile named in the settings wins)
    profile = named or env.get("AWS_PROFILE", "")
    found = _profile_credentials(profile or "default", env)
    if found is not None:
        return {**config, **found}
    if profile:
        where = "[s3] s3_profile" if named else "AWS_PROFILE"
        raise RemoteSetupError(
            f"{where}: the profile {profile!r} is not in "
            f"{_aws_file(env, 'AWS_SHARED_CREDENTIALS_FILE', 'credentials')}: name a profile "
            "of ~/.aws/credentials ([s3] s3_profile, NAPARI_LAZY_ZARR_S3_PROFILE, or "
            "AWS_PROFILE)"
        )
    if env.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true":
        raise S3CredentialsError(f"no AWS credentials were found: {_ANON_HINT}")
    return config  # obstore asks the instance metadata service


def _aws_file(env: Mapping[str, str], variable: str, name: str) -> str:
    return os.path.expanduser(env.get(variable) or os.path.join("~", ".aws", name))


def _profile_credentials(profile: str, env: Mapping[str, str]) -> dict[str, str] | None:
    """The keys of `profile` in the shared credentials file (None: no such file or profile)."""
    path = _aws_file(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials")
    try:
        data = read_regular_file(path, limit=_MAX_AWS_FILE, error=MetadataError)
    except FileNotFoundError:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(data.decode("utf-8", "replace"), source=path)
    except configparser.Error:
        raise MetadataError(f"{path}: not an AWS credentials file") from None
    if not parser.has_section(profile):
        return None
    section = parser[profile]
    found = {ours: section[key].strip() for key, ours in _PROFILE_KEYS.items() if key in section}
    return found if "access_key_id" in found else None


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the errors it was raised from, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def explain_s3_failure(url: str, error: BaseException, endpoint: str) -> LazyZarrError | None:
    """What went wrong opening `url` from `endpoint`, naming the setting to change; None: unknown.

    Examples
    --------
    >>> explain_s3_failure("s3://b/x.zarr", ValueError("bad"), "AWS") is None
    True
    """
    for link in _chain(error):
        if isinstance(link, S3CredentialsError):
            return MetadataError(
                f"{url}: no AWS credentials were found to sign requests to {endpoint}: "
                f"{_ANON_HINT}"
            )
        if isinstance(link, HttpAccessDeniedError):
            return MetadataError(
                f"{url}: access denied by {endpoint} (HTTP {link.status}): {_ANON_HINT}; "
                f"and {_ENDPOINT_HINT}"
            )
        if isinstance(link, HttpConnectError | LoadTimeoutError):
            return MetadataError(
                f"{url}: the S3 endpoint {endpoint} does not answer ({link}): {_ENDPOINT_HINT}"
            )
        if isinstance(link, NoSuchBucketError):
            bucket = url.split("://", 1)[1].split("/", 1)[0]
            return StoreNotFoundError(
                f"{url}: there is no bucket {bucket!r} at {endpoint}: {_ENDPOINT_HINT}"
            )
    return None


def _configured_endpoint() -> str:
    """The endpoint S3 requests go to, as configured (never raises: it only names it)."""
    try:
        return s3_endpoint(current_settings(names=S3_SETTINGS))
    except Exception:  # an invalid setting is reported by the open itself
        return "the S3 endpoint"


@contextmanager
def s3_errors(url: str, endpoint: str = "") -> Iterator[None]:
    """Failures to open the S3 store `url`, explained (`explain_s3_failure`).

    No credentials, access denied and an endpoint that does not answer become
    a `MetadataError`, a missing bucket a `StoreNotFoundError`, each naming the
    URL and the setting to change; other failures (and any URL not S3) pass
    through unchanged. Wrapped around `zarr_errors`' mapping, it reads the
    errors that mapping was raised from.
    """
    if not is_s3(url):
        yield
        return
    try:
        yield
    except Exception as error:
        explained = explain_s3_failure(url, error, endpoint or _configured_endpoint())
        if explained is None:
            raise
        raise explained from error
