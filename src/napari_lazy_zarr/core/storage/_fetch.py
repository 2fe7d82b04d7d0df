"""Bounded reads of referenced bytes: local files and remote URLs (HTTP, fsspec).

Each read is capped (`Cap`) before it is made, and a remote one is made within
`Timeouts`; `ManifestStore` reads its references through these. ``http(s)://``
references are read with the same bounded client as `HttpStore`
(`core.storage.transport.HttpClient`: its pool, caps, proxies, CA bundle and
headers), never a second one.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)

from napari_lazy_zarr.core.storage.files import (
    FileStamp,
    read_stamped,
)
from napari_lazy_zarr.core.storage.s3 import is_s3, s3_options, s3_read_error
from napari_lazy_zarr.core.storage.transport import HttpBodyTooLargeError, HttpClient

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
    client: HttpClient | None = None,
) -> bytes:
    """What `byte_range` asks of a remote reference, within `cap` bytes and `timeouts`.

    A byte range is fetched as asked; a whole file (`length` None) is fetched
    whole, at most `cap` bytes, and then windowed. ``http(s)://`` goes through
    `client` (the bounded `HttpClient` the store shares; None: a new one of
    `timeouts`), which remembers the sizes earlier answers gave: a later answer
    must agree. Redirects are refused (`HttpClient.max_redirects` 0 is asked of
    a client made here): they could lead where the reference policy does not
    allow.
    """
    get: Callable[[str, int, int | None, Cap, Timeouts], bytes] = _fsspec_get
    if url.split("://", 1)[0].lower() in ("http", "https"):
        get = functools.partial(_http_get, client=client or HttpClient(timeouts, max_redirects=0))
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


def _http_get(
    url: str,
    start: int,
    count: int | None,
    cap: Cap,
    timeouts: Timeouts,
    *,
    client: HttpClient,
) -> bytes:
    """`count` bytes of `url` from `start` (None: to its end, at most `cap`) through `client`.

    The client's errors are ``OSError``s (`HttpError`, `LoadTimeoutError`); a
    body over the cap is reworded with what sets the cap, and 404 is
    `FileNotFoundError` (a reference names bytes that must exist).
    """
    asked = OffsetByteRequest(start) if count is None else RangeByteRequest(start, start + count)
    try:
        body = client.get(url, None if (start, count) == (0, None) else asked, cap.size)
    except HttpBodyTooLargeError as error:
        if error.declared is not None:
            raise _TooLargeError(cap.refusal(f"{url} declares", error.declared)) from error
        raise _TooLargeError(
            f"{url} holds more than {cap.what} ({cap.size:,}); refused"
        ) from error
    if body is None:
        raise FileNotFoundError(f"{url}: not found (HTTP 404)")
    return bytes(body)


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
