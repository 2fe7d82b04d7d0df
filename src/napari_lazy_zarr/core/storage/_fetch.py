"""Bounded reads of referenced bytes: local files and remote URLs (HTTP, fsspec).

Each read is capped (`Cap`) before it is made, and a remote one is made within
`Timeouts`; `ManifestStore` reads its references through these.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import http.client
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)

from napari_lazy_zarr.core.storage._ranges import check_partial, range_header
from napari_lazy_zarr.core.storage.files import (
    FileStamp,
    read_stamped,
)
from napari_lazy_zarr.core.storage.s3 import is_s3, s3_options, s3_read_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_lazy_zarr.core.settings import (
        Timeouts,
    )

__all__ = [
    "Cap",
    "read_local",
    "read_remote",
    "window",
]


def read_local(
    path: str,
    offset: int,
    length: int | None,
    byte_range: ByteRequest | None,
    cap: Cap,
    opened: FileStamp | None,
    timeout: float,
) -> bytes:
    """What `byte_range` asks of `length` bytes at `offset` of a local file (None: all of it).

    Read as every local file is (`read_stamped`: a regular file only,
    at most `cap` bytes, re-read if it changes while it is read, never torn),
    and only as it was when the references were opened (`opened`: its stamp
    then, None if it could not be stat'ed): a file changed since is refused.
    Its offsets may describe the old file, and the source's identity is the
    old version; opening the references again reads the new one.
    """
    if length is None:  # a whole file: `byte_range` applies to the file itself
        start, count, suffix = 0, None, None
        match byte_range:
            case RangeByteRequest(start=first, end=end):
                start, count = first, max(0, end - first)
            case OffsetByteRequest(offset=first):
                start = first
            case SuffixByteRequest(suffix=last):
                suffix = last
        data, stamp = read_stamped(
            path, limit=cap.size, offset=start, length=count, suffix=suffix, timeout=timeout
        )
    else:
        start, stop = window(length, byte_range)
        data, stamp = read_stamped(
            path, limit=cap.size, offset=offset + start, length=stop - start, timeout=timeout
        )
        if len(data) != stop - start and stamp == opened:
            raise OSError(
                f"{path} holds {len(data)} of the {stop - start} bytes at offset "
                f"{offset + start} (the file is shorter than the reference)"
            )
    if stamp != opened:
        then = "did not exist or could not be read" if opened is None else "was different"
        raise OSError(
            f"{path} changed since the references were opened (it {then} then): its byte "
            "offsets may describe the old file; open the references again"
        )
    return data


def read_remote(
    url: str,
    offset: int,
    length: int | None,
    byte_range: ByteRequest | None,
    cap: Cap,
    timeouts: Timeouts,
    totals: dict[str, int] | None = None,
) -> bytes:
    """What `byte_range` asks of a remote reference, within `cap` bytes and `timeouts`.

    A byte range is fetched as asked; a whole file (`length` None) is fetched
    whole, at most `cap` bytes, and then windowed. `totals` (URL -> size) holds
    the sizes earlier HTTP answers gave: a later answer must agree.
    """
    get: Callable[[str, int, int | None, Cap, Timeouts], bytes] = _fsspec_get
    if url.split("://", 1)[0].lower() in ("http", "https"):
        get = functools.partial(_http_get, totals=totals)
    if length is None:
        whole = get(url, offset, None, cap, timeouts)
        start, stop = window(len(whole), byte_range)
        return whole[start:stop]
    start, stop = window(length, byte_range)
    if stop == start:
        return b""
    data = get(url, offset + start, stop - start, cap, timeouts)
    if len(data) != stop - start:
        raise OSError(
            f"{url} holds {len(data)} of the {stop - start} bytes at offset {offset + start} "
            "(the file is shorter than the reference)"
        )
    return data


class _RangeMismatchError(OSError):
    """A ``206`` answer for another range than the one asked (`check_partial`): retried."""

    retryable = True


class _HttpStatusError(OSError):
    """An HTTP error status: `status` and `retry_after` (seconds) say if and when to retry."""

    def __init__(self, message: str, status: int, retry_after: float | None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date), else None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _http_get(
    url: str,
    start: int,
    count: int | None,
    cap: Cap,
    timeouts: Timeouts,
    *,
    totals: dict[str, int] | None = None,
) -> bytes:
    """`count` bytes of `url` from `start` (None: to its end, at most `cap`), with time caps.

    One ``GET`` with a ``Range`` header and no content coding: a declared
    length over what was asked is refused before the body is read, a body is
    read no further than asked, a compressed answer is refused, and redirects
    are not followed (they could lead where the policy does not allow).
    `timeouts` caps connecting, every wait for data, and the whole request
    (`TimeoutError`, which `LoadTimeoutError` reports as retryable).
    """
    parts = urlsplit(url)
    https = parts.scheme.lower() == "https"
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    connect = min(timeouts.connect, timeouts.total)
    connection = kind(parts.hostname or "", parts.port, timeout=connect)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    wanted = cap.size + 1 if count is None else count
    deadline = time.monotonic() + timeouts.total
    phase = f"could not connect within {connect:g} s"
    late = f"{url}: no complete answer within {timeouts.total:g} s"

    def wait() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(late)
        return min(timeouts.read, left)

    response: http.client.HTTPResponse | None = None
    try:
        asked = (
            OffsetByteRequest(start) if count is None else RangeByteRequest(start, start + count)
        )
        headers = {"Range": range_header(asked), "Accept-Encoding": "identity"}
        connection.request("GET", target, headers=headers)
        sock = connection.sock
        assert sock is not None
        phase = f"no data for {timeouts.read:g} s"
        sock.settimeout(wait())
        response = connection.getresponse()
        _check_answer(url, response, start)
        if response.status == 416:  # the range starts past the end: a short file
            return b""
        if response.status == 206:
            known = None if totals is None else totals.get(url)
            span = check_partial(response.getheader("Content-Range"), asked, known)
            if isinstance(span, str):
                raise _RangeMismatchError(
                    f"{url}: asked for {headers['Range']}, the 206 answer is "
                    f"{response.getheader('Content-Range')!r}: {span}; refused"
                )
            wanted = min(wanted, span.length)
            if totals is not None and span.total is not None:
                totals[url] = span.total
        declared = response.getheader("Content-Length", "")
        if declared.isdigit() and int(declared) > cap.size and count is None:
            raise _TooLargeError(cap.refusal(f"{url} declares", int(declared)))
        if declared.isdigit() and int(declared) > wanted and response.status == 206:
            raise OSError(f"{url}: answers {int(declared):,} bytes for a range of {wanted:,}")
        body = bytearray()
        while len(body) < wanted:
            sock.settimeout(wait())
            # read1: what has arrived (read(n) would wait for all n, past the total cap)
            piece = response.read1(min(wanted - len(body), 1 << 16))
            if not piece:
                break
            body += piece
    except TimeoutError as error:
        overdue = time.monotonic() >= deadline - 0.01  # the socket's last wait was the rest
        raise TimeoutError(late if overdue else f"{url}: {phase}") from error
    except http.client.HTTPException as error:
        raise OSError(f"{url}: {type(error).__name__}: {error}") from error
    finally:
        if response is not None:
            response.close()
        connection.close()
    if count is None and len(body) > cap.size:
        raise _TooLargeError(f"{url} holds more than {cap.what} ({cap.size:,}); refused")
    return bytes(body)


def _check_answer(url: str, response: http.client.HTTPResponse, start: int) -> None:
    """Refuse an answer that is not (a range of) the file as stored."""
    status = response.status
    if status == 404:
        raise FileNotFoundError(f"{url}: not found (HTTP 404)")
    if status in (401, 403):
        raise PermissionError(f"{url}: access denied (HTTP {status})")
    if 300 <= status < 400:
        raise OSError(
            f"{url}: HTTP {status}: redirects to {response.getheader('Location')!r} are not "
            "followed; a reference must name the data's own URL"
        )
    if status not in (200, 206, 416):
        raise _HttpStatusError(
            f"{url}: HTTP {status} {response.reason}",
            status,
            _retry_after(response.getheader("Retry-After")),
        )
    coding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if coding != "identity":
        raise OSError(
            f"{url}: the answer is {coding!r}-encoded, though no encoding was accepted; refused "
            "(a compressed body could expand without bound)"
        )
    if status == 200 and start > 0:
        raise OSError(f"{url}: the server ignores range requests (HTTP 200 for bytes {start}-)")


def _fsspec_get(url: str, start: int, count: int | None, cap: Cap, timeouts: Timeouts) -> bytes:
    """`count` bytes of `url` from `start` (None: to its end, at most `cap`) read with fsspec.

    Only the bytes referenced are asked for; an asynchronous file system
    (s3, gcs, ...) is given `timeouts.total` per call. ``s3://`` URLs are read
    with the ``[s3]`` settings and `timeouts` as botocore's (`s3_options`), and
    their failures explained (`s3_read_error`).
    """
    filesystem, path = _remote(url, timeouts)

    def call(method: str, *args: Any, **options: Any) -> Any:
        if not getattr(filesystem, "async_impl", False):
            return getattr(filesystem, method)(*args, **options)
        from fsspec.asyn import sync  # type: ignore[import-untyped]

        async def capped() -> Any:
            job = getattr(filesystem, f"_{method}")(*args, **options)
            return await asyncio.wait_for(job, timeouts.total)

        try:
            return sync(filesystem.loop, capped)
        except TimeoutError as error:
            raise TimeoutError(f"{url}: no complete answer within {timeouts.total:g} s") from error

    try:
        if count is None:
            size = int(call("size", path))
            if size - start > cap.size:
                raise _TooLargeError(cap.refusal(f"{url} holds from offset {start}", size - start))
            count = size - start
        data = bytes(call("cat_file", path, start=start, end=start + count))
    except Exception as error:
        explained = s3_read_error(url, error) if is_s3(url) else None
        if explained is None:
            raise
        raise explained from error
    if len(data) > count:
        raise OSError(f"{url}: {len(data):,} bytes answered for a range of {count:,}")
    return data


def _remote(url: str, timeouts: Timeouts) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError as error:  # pragma: no cover - fsspec comes with napari
        raise OSError(f"reading {url!r} needs fsspec, which is not installed") from error
    filesystem, path = fsspec.core.url_to_fs(url, **s3_options(url, timeouts))
    return filesystem, path


def window(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    """The `[start, stop)` bytes `byte_range` asks of a value `length` bytes long."""
    match byte_range:
        case None:
            return 0, length
        case RangeByteRequest(start=start, end=end):
            return min(start, length), min(max(start, end), length)
        case OffsetByteRequest(offset=offset):
            return min(offset, length), length
        case SuffixByteRequest(suffix=suffix):
            return max(0, length - suffix), length
    raise TypeError(f"unexpected byte range {byte_range!r}")


@dataclass(frozen=True, slots=True)
class Cap:
    """The most bytes a key's value may hold, and what sets it (for messages)."""

    size: int
    what: str

    def refusal(self, holding: str, count: int) -> str:
        return f"{holding} {count:,} bytes, more than {self.what} ({self.size:,}); refused"


class _TooLargeError(OSError):
    """A referenced value is larger than its key's cap (found before reading it)."""
