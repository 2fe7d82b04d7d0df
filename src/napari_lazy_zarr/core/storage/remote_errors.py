"""What a failed remote request was, as our errors: statuses, time caps, certificates, ranges.

obstore raises its own exceptions (``FileNotFoundError`` for 404, a
``PermissionDeniedError``/``UnauthenticatedError`` for 403/401, a ``GenericError``
for everything else) whose text ends in a ``Debug source:`` dump of the Rust
error. `remote_failure` reads that text once and returns the error the engine
acts on: its class says how it is retried (`core.storage.retry.classify`), its
message names the URL and the cause in a line, and quotes no secret (header
values and proxy credentials are scrubbed from everything quoted).

obstore exposes no response header on a failure, so a ``Retry-After`` is never
known here (`HttpStatusError.retry_after` is None): the retry policy waits longer
after a 429 or 503 instead (`RetryPolicy.rate_limit_delay`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.errors import ChunkReadError, LoadTimeoutError, MetadataError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.settings import Timeouts

__all__ = [
    "CA_BUNDLE_HINT",
    "HEADERS_HINT",
    "HttpAccessDeniedError",
    "HttpBodyTooLargeError",
    "HttpCertificateError",
    "HttpConnectError",
    "HttpError",
    "HttpRangeError",
    "HttpStatusError",
    "HttpTruncatedError",
    "NoSuchBucketError",
    "RangeIgnoredError",
    "RemoteSetupError",
    "range_past_end",
    "remote_failure",
]

CA_BUNDLE_HINT: Final = (
    "if the server's certificate is signed by your own certificate authority, name "
    "its PEM file in the setting [remote] ca_bundle (NAPARI_LAZY_ZARR_CA_BUNDLE, or "
    "Preferences > Plugin Preferences > napari-lazy-zarr > Remote access), or in SSL_CERT_FILE"
)
"""What an untrusted-certificate error tells the user to do."""
HEADERS_HINT: Final = (
    "access denied; a server that wants a token gets it from the request headers "
    'setting of its host: [remote.headers."host"] or NAPARI_LAZY_ZARR_HEADERS'
)
"""What a 401/403 tells the user to do."""
_TRANSIENT: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
_STATUS: Final = re.compile(r"non-2xx status code: (\d{3})(?: ([^:\n]*))?")
_NO_BUCKET: Final = "<Code>NoSuchBucket</Code>"
_RANGE_REFUSED: Final = ("UnexpectedRange", "NoContentRange", "ParseContentRange")
_RANGE_IGNORED: Final = ("NotPartial", "Range request not supported")
_TOO_FAR: Final = "StartTooLarge"  # a range starting past the end of the object
_OS_MESSAGE: Final = re.compile(r'message: "([^"]{1,200})"')
_CERTIFICATE: Final = re.compile(r"InvalidCertificate\(\s*(\w+)")
_PREFIX: Final = re.compile(r"^(?:Generic [\w ]+ error: )?(?:Error performing \w+ \S+ in \S+ - )?")


class RemoteSetupError(MetadataError):
    """A remote store cannot be set up from the settings (a CA bundle, a header rule, S3
    credentials): raised before any request, naming the setting."""


class HttpError(ChunkReadError):
    """A request the store could not answer with data; the message names the URL."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class HttpStatusError(HttpError):
    """An HTTP status other than success or 404: `status`, and `retry_after` seconds or None.

    408, 425, 429 and 5xx are transient (`core.storage.retry.classify` reads `status`).
    """

    def __init__(self, message: str, *, url: str, status: int, retry_after: float | None) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.retry_after = retry_after


class HttpAccessDeniedError(HttpStatusError, PermissionError):
    """HTTP 401, 403 or 407: credentials are missing or refused; never retried."""


class HttpRangeError(HttpError):
    """An answer that is not the byte range asked, or of a file that changed size meanwhile.

    Retried as transient (`retryable`): a proxy or a server mid-update may answer
    right next time; its bytes are never served as the range asked.
    """

    retryable = True


class HttpCertificateError(HttpError):
    """The server's TLS certificate is not trusted (`CA_BUNDLE_HINT` says what to do)."""


class HttpBodyTooLargeError(HttpError):
    """A body over its cap: `declared` its declared length (None: it ran past `cap`)."""

    def __init__(self, message: str, *, url: str, cap: int, declared: int | None) -> None:
        super().__init__(message, url=url)
        self.cap = cap
        self.declared = declared


class HttpTruncatedError(HttpError, ConnectionError):
    """The connection ended before the body did (transient)."""


class HttpConnectError(HttpError, ConnectionError):
    """No connection: refused, reset, unknown host (transient)."""


class NoSuchBucketError(HttpError):
    """The bucket of an object store's URL does not exist (not an absent key: zarr would read
    every key of it as missing)."""


class RangeIgnoredError(HttpError):
    """The server answered a range request with the whole object (the store reads it whole)."""


def _scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def remote_failure(
    url: str,
    error: BaseException,
    *,
    timeouts: Timeouts,
    elapsed: float,
    secrets: Sequence[str] = (),
    proxy: str = "",
) -> HttpError | LoadTimeoutError | None:
    """The error of a failed request for `url`, from obstore's `error`; None: an absent key.

    `elapsed` is how long the request took (which time cap ended it), `proxy`
    names the proxy it went through, `secrets` what no message may quote.
    """
    text = _scrub(str(error), secrets)
    head, _, debug = text.partition("\n\nDebug source:")
    where = url if not proxy else f"{url} (through the proxy {proxy})"
    if isinstance(error, FileNotFoundError):
        if _NO_BUCKET in text:
            return NoSuchBucketError(f"{url}: there is no such bucket", url=url)
        return None
    match = _STATUS.search(head)
    if match is not None:
        return _status_error(where, int(match.group(1)), (match.group(2) or "").strip())
    if "ProxyAuthRequired" in debug:
        return _status_error(where, 407, "Proxy Authentication Required")
    if any(marker in text for marker in _RANGE_IGNORED):
        return RangeIgnoredError(f"{where}: the server ignores byte ranges", url=url)
    reason = _PREFIX.sub(
        "", head.strip().splitlines()[0] if head.strip() else type(error).__name__
    )
    certificate = _CERTIFICATE.search(debug)
    if certificate is not None:
        return HttpCertificateError(
            f"{where}: the server's certificate is not trusted "
            f"(invalid peer certificate: {certificate.group(1)}); {CA_BUNDLE_HINT}",
            url=url,
        )
    if "kind: Timeout" in debug or "TimedOut" in debug:
        if elapsed >= 0.9 * timeouts.total:
            return LoadTimeoutError(
                f"{where}: no complete answer within {timeouts.total:g} s (Timeouts.total)"
            )
        if "kind: Connect" in debug:
            return LoadTimeoutError(
                f"{where}: no connection for {timeouts.connect:g} s (Timeouts.connect)"
            )
        return LoadTimeoutError(f"{where}: server silent for {timeouts.read:g} s (Timeouts.read)")
    if any(marker in debug for marker in _RANGE_REFUSED):
        return HttpRangeError(f"{where}: {reason}; refused (retried)", url=url)
    if "MissingContentLength" in debug:
        return HttpError(
            f"{where}: the answer declares no Content-Length; a body of unknown length is "
            "not read",
            url=url,
        )
    if "error following redirect" in head:
        return HttpError(
            f"{where}: a redirect that cannot be followed (to http:// from https://, or more "
            "than 10)",
            url=url,
        )
    detail = _OS_MESSAGE.findall(debug)
    cause = f"{reason}: {detail[-1]}" if detail else reason
    if "kind: Connect" in debug or "ConnectionRefused" in debug or "dns error" in debug:
        return HttpConnectError(f"{where}: cannot connect: {cause}", url=url)
    if "kind: Body" in debug or "IncompleteBody" in debug or "connection closed" in debug:
        return HttpTruncatedError(f"{where}: connection closed mid-answer: {cause}", url=url)
    if "kind: Request" in debug or "error sending request" in head:
        return HttpConnectError(f"{where}: the request failed: {cause}", url=url)
    return HttpError(f"{where}: {type(error).__name__}: {cause}", url=url)


def _status_error(where: str, status: int, reason: str) -> HttpStatusError:
    url = where.split(" (through the proxy ", 1)[0]
    said = f"HTTP {status} {reason}".rstrip()
    if status in (401, 403, 407):
        what = (
            "the proxy's credentials are missing or refused, not retried"
            if status == 407
            else HEADERS_HINT
        )
        return HttpAccessDeniedError(
            f"{where}: {said} ({what})", url=url, status=status, retry_after=None
        )
    kind = "transient" if status in _TRANSIENT else "refused"
    return HttpStatusError(f"{where}: {said} ({kind})", url=url, status=status, retry_after=None)


def range_past_end(error: BaseException) -> bool:
    """Whether obstore refused a range because it starts past the end of the object."""
    return _TOO_FAR in str(error)
