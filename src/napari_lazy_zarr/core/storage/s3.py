"""S3 storage options from the settings, and S3 failures explained.

Every ``s3://`` store (`store_for`) and every ``s3://`` reference a kerchunk
file points to (`read_remote`) is read by s3fs with `s3_storage_options`: the
``[s3]`` settings (endpoint, region, anonymous access, AWS profile) where the
user set them, the time caps as botocore's connect and read timeouts, and
otherwise s3fs's and botocore's own configuration untouched (``AWS_ENDPOINT_URL``,
``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``..., the shared
credentials file, ``FSSPEC_S3_*``). Credentials are never settings, never read
and never logged here: botocore finds them.

`s3_errors` turns what s3fs and botocore raise when a store cannot be opened
(no credentials, access denied, no such bucket, an endpoint that does not
answer) into a `LazyZarrError` naming the URL and the setting to change.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core.errors import MetadataError, StoreNotFoundError
from napari_lazy_zarr.core.settings import Settings, Timeouts, current_settings

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "S3_SCHEMES",
    "S3_SETTINGS",
    "explain_s3_failure",
    "is_s3",
    "s3_errors",
    "s3_options",
    "s3_read_error",
    "s3_storage_options",
]

S3_SCHEMES: Final = frozenset({"s3", "s3a"})
"""The URL schemes s3fs reads."""
S3_SETTINGS: Final = ("s3_endpoint_url", "s3_region", "s3_anon", "s3_profile")
"""The `Settings` fields of the ``[s3]`` section."""
_NESTED: Final = ("client_kwargs", "config_kwargs")  # s3fs options that are dicts
_UNREACHABLE: Final = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ClientConnectorError",
        "ClientConnectionError",
        "ServerDisconnectedError",
        "ConnectionRefusedError",
        "TimeoutError",
    }
)
_NO_CREDENTIALS: Final = frozenset({"NoCredentialsError", "PartialCredentialsError"})
_NO_PROFILE: Final = "ProfileNotFound"
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


_BOTOCORE_POOL: Final = 10  # botocore's default `max_pool_connections`


def is_s3(url: str) -> bool:
    """Whether `url` is an ``s3://`` (or ``s3a://``) URL.

    Examples
    --------
    >>> is_s3("S3://bucket/image.zarr"), is_s3("https://example.org/image.zarr")
    (True, False)
    """
    return url.split("://", 1)[0].lower() in S3_SCHEMES if "://" in url else False


def s3_storage_options(
    settings: Settings, timeouts: Timeouts, *, configured: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """s3fs's options for `settings` and `timeouts`, over fsspec's configured ones.

    `configured` is what fsspec's configuration (``FSSPEC_S3_*`` variables,
    fsspec's config files) gives ``s3`` (default: ``fsspec.config.conf``).
    The ``[s3]`` settings apply only where they are set (an empty endpoint,
    region or profile, and ``s3_anon=False``, leave s3fs's own choice, which
    reads the ``AWS_*`` variables and files); the dictionaries s3fs takes
    (``client_kwargs``, ``config_kwargs``) are merged key by key, the time caps
    always applying. Whole keys are read with one request (``max_concurrency=1``),
    and botocore's connection pool holds twice the loaders
    (``max_pool_connections``), unless fsspec's configuration sets them.

    Examples
    --------
    >>> options = s3_storage_options(
    ...     Settings(s3_endpoint_url="http://127.0.0.1:9000", s3_anon=True),
    ...     Timeouts(connect=2.0, read=5.0),
    ...     configured={},
    ... )
    >>> options["endpoint_url"], options["anon"], options["config_kwargs"]["connect_timeout"]
    ('http://127.0.0.1:9000', True, 2.0)
    >>> s3_storage_options(Settings(), Timeouts(), configured={})["config_kwargs"]
    {'connect_timeout': 10.0, 'read_timeout': 10.0, 'max_pool_connections': 64}
    """
    if configured is None:
        configured = _fsspec_configuration()
    ours: dict[str, Any] = {
        "config_kwargs": {"connect_timeout": timeouts.connect, "read_timeout": timeouts.read}
    }
    if settings.s3_endpoint_url:
        ours["endpoint_url"] = settings.s3_endpoint_url.strip()
    if settings.s3_region:
        ours["client_kwargs"] = {"region_name": settings.s3_region.strip()}
    if settings.s3_anon:
        ours["anon"] = True
    if settings.s3_profile:
        ours["profile"] = settings.s3_profile.strip()
    if "max_pool_connections" not in dict(configured.get("config_kwargs") or {}):
        # One file system serves every thread (`store_for`): botocore's pool of 10
        # connections would queue the cache's loaders (32 by default for a URL, and the
        # background budget beside them) and the metadata reads of an open behind each
        # other. Twice the loaders leaves room for both.
        loaders = max(settings.concurrency, settings.remote_concurrency)
        ours["config_kwargs"]["max_pool_connections"] = max(_BOTOCORE_POOL, 2 * loaders)
    if "max_concurrency" not in configured:
        # s3fs asks a key's size (HEAD) before every whole-key read when it may split it
        # into concurrent parts, and a missing key then costs a HEAD and a LIST: with one
        # part, a chunk or a metadata document is one GET. Measured on moto, opening a
        # 3x4-well plate: 67 requests (23 HEAD, 10 LIST, 34 GET) before, 23 after.
        ours["max_concurrency"] = 1
    # fsspec applies its configuration under explicit options, one level deep: a
    # dictionary given here would hide the configured one whole.
    options: dict[str, Any] = {}
    for key in _NESTED:
        merged = {**dict(configured.get(key) or {}), **ours.pop(key, {})}
        if merged:
            options[key] = merged
    options.update(ours)
    return options


def s3_options(
    url: str, timeouts: Timeouts | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The storage options `url` is read with: `s3_storage_options` for S3, else none.

    The ``[s3]`` settings, the loaders (for the connection pool) and the time caps
    (unless `timeouts` is given) are resolved now (`current_settings`), so an edit
    applies to what is read next.

    Raises
    ------
    MetadataError
        A setting is invalid (as `current_settings`).
    """
    if not is_s3(url):
        return {}
    names = (
        (*S3_SETTINGS, *_LOADERS)
        if timeouts is not None
        else (*S3_SETTINGS, *_LOADERS, *_TIMEOUTS)
    )
    settings = current_settings(environ, names=names)
    return s3_storage_options(settings, settings.timeouts if timeouts is None else timeouts)


_TIMEOUTS: Final = ("connect_timeout", "read_timeout", "total_timeout")
_LOADERS: Final = ("concurrency", "remote_concurrency")  # the connection pool's size


def _fsspec_configuration() -> dict[str, Any]:
    import fsspec.config  # type: ignore[import-untyped]

    found: dict[str, Any] = {}
    for protocol in ("s3a", "s3"):  # s3fs registers both; "s3" wins
        found.update(fsspec.config.conf.get(protocol, {}))
    return found


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the errors it was raised from, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _names(error: BaseException) -> set[str]:
    """The class names of `error` and the errors it was raised from (their MROs)."""
    return {kind.__name__ for link in _chain(error) for kind in type(link).__mro__}


def _innermost(error: BaseException, names: frozenset[str]) -> BaseException:
    """The first error raised (innermost) in `error`'s chain of a class named in `names`."""
    for link in reversed(_chain(error)):
        if {kind.__name__ for kind in type(link).__mro__} & names:
            return link
    return error


def explain_s3_failure(url: str, error: BaseException, endpoint: str = "") -> str | None:
    """What went wrong reading `url` and which setting changes it, or None when unknown.

    `endpoint` names the endpoint asked (default: the one configured, else AWS).

    Examples
    --------
    >>> explain_s3_failure("s3://b/x.zarr", PermissionError("Access Denied"), "AWS")
    ... # doctest: +ELLIPSIS
    's3://b/x.zarr: access denied by AWS (PermissionError: Access Denied): ...'
    >>> explain_s3_failure("s3://b/x.zarr", ValueError("bad")) is None
    True
    """
    failure = _failure(url, error, endpoint)
    return None if failure is None else str(failure)


def s3_read_error(url: str, error: BaseException) -> OSError | None:
    """`error` reading `url` explained as an `OSError` the retry policy classifies, or None.

    No credentials and access denied are a `PermissionError` (not retried), an
    endpoint that does not answer a `ConnectionError` (retried).
    """
    return _failure(url, error, "")


def _failure(url: str, error: BaseException, endpoint: str) -> OSError | None:
    names = _names(error)
    kinds = (
        (_NO_CREDENTIALS, PermissionError),
        (frozenset({_NO_PROFILE}), PermissionError),
        (frozenset({"PermissionError"}), PermissionError),
        (_UNREACHABLE, ConnectionError),
    )
    found = next(((group, kind) for group, kind in kinds if names & group), None)
    if found is None:
        return None
    group, kind = found
    cause = _innermost(error, group)
    said = f"{type(cause).__name__}: {cause}"
    where = endpoint or _configured_endpoint(url)
    if group is _NO_CREDENTIALS:
        message = f"no AWS credentials were found to sign requests to {where}: {_ANON_HINT}"
    elif _NO_PROFILE in group:
        message = (
            f"{said}: name a profile of ~/.aws/credentials or ~/.aws/config "
            "([s3] s3_profile, NAPARI_LAZY_ZARR_S3_PROFILE, or AWS_PROFILE)"
        )
    elif kind is PermissionError:
        message = f"access denied by {where} ({said}): {_ANON_HINT}; and {_ENDPOINT_HINT}"
    else:
        message = f"the S3 endpoint {where} does not answer ({said}): {_ENDPOINT_HINT}"
    return kind(f"{url}: {message}")


def _configured_endpoint(url: str) -> str:
    """The endpoint `url` is read from, as configured (never raises)."""
    try:
        filesystem = _filesystem(url)
        endpoint = filesystem.s3.meta.endpoint_url
    except Exception:  # only names it in a message
        return "the S3 endpoint"
    return str(endpoint)


def _filesystem(url: str) -> Any:
    import fsspec

    filesystem, _ = fsspec.core.url_to_fs(url, **s3_options(url))
    return filesystem


def _missing_bucket(url: str) -> StoreNotFoundError | None:
    """A `StoreNotFoundError` when `url`'s bucket does not exist (None: it does, or unknown)."""
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    try:
        filesystem = _filesystem(url)
        if filesystem.exists(bucket):
            return None
        endpoint = filesystem.s3.meta.endpoint_url
    except Exception:  # access denied to the bucket itself, a failing endpoint: unknown
        return None
    return StoreNotFoundError(
        f"{url}: there is no bucket {bucket!r} at {endpoint}: {_ENDPOINT_HINT}"
    )


@contextmanager
def s3_errors(url: str) -> Iterator[None]:
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
        message = explain_s3_failure(url, error)
        if message is not None:
            raise MetadataError(message) from error
        if _names(error) & {"FileNotFoundError", "NodeNotFoundError"}:
            missing = _missing_bucket(url)
            if missing is not None:
                raise missing from error
        raise
