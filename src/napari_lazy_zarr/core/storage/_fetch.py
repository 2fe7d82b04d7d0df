"""Bounded reads of referenced bytes: local files and remote URLs (obstore, fsspec).

Each read is capped (`Cap`) before it is made, and a remote one is made within
`Timeouts`; `ManifestStore` reads its references through these. ``http(s)://``,
``s3://``, ``gs://`` and ``az://`` references are read through the same bounded
stores as zarr stores (`core.storage.remote.RemoteFiles`: their caps, proxies,
CA bundle, headers and S3 settings); other protocols with fsspec.
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
from napari_lazy_zarr.core.storage.remote import REMOTE_SCHEMES, RemoteFiles
from napari_lazy_zarr.core.storage.remote_errors import HttpBodyTooLargeError

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
    files: RemoteFiles | None = None,
) -> bytes:
    """What `byte_range` asks of a remote reference, within `cap` bytes and `timeouts`.

    A byte range is fetched as asked; a whole file (`length` None) is fetched
    whole, at most `cap` bytes, and then windowed. URLs obstore reads go through
    `files` (the stores its owner keeps, one per origin or bucket, which
    remember the sizes earlier answers gave: a later answer must agree; None:
    stores made for this read alone); other protocols through fsspec.
    """
    own = files is None and url.split("://", 1)[0].lower() in REMOTE_SCHEMES
    reader = RemoteFiles(timeouts) if own else files
    get: Callable[[str, int, int | None, Cap, Timeouts], bytes] = _fsspec_get
    if reader is not None and url.split("://", 1)[0].lower() in REMOTE_SCHEMES:
        get = functools.partial(_obstore_get, files=reader)
    try:
        if length is None:
            whole = get(url, offset, None, cap, timeouts)
            start, stop = window(len(whole), byte_range)
            return whole[start:stop]
        start, stop = window(length, byte_range)
        if stop == start:
            return b""
        data = get(url, offset + start, stop - start, cap, timeouts)
    finally:
        if own and reader is not None:
            reader.close()
    if len(data) != stop - start:
        raise OSError(
            f"{url} holds {len(data)} of the {stop - start} bytes at offset {offset + start} "
            "(the file is shorter than the reference)"
        )
    return data


def _obstore_get(
    url: str,
    start: int,
    count: int | None,
    cap: Cap,
    timeouts: Timeouts,
    *,
    files: RemoteFiles,
) -> bytes:
    """`count` bytes of `url` from `start` (None: to its end, at most `cap`) through `files`.

    Their errors are ``OSError``s (`HttpError`, `LoadTimeoutError`); a body over
    the cap is reworded with what sets the cap, and 404 is `FileNotFoundError`.
    """
    asked = OffsetByteRequest(start) if count is None else RangeByteRequest(start, start + count)
    try:
        body = files.read(url, None if (start, count) == (0, None) else asked, cap.size)
    except HttpBodyTooLargeError as error:
        if error.declared is not None:
            raise _TooLargeError(cap.refusal(f"{url} declares", error.declared)) from error
        raise _TooLargeError(
            f"{url} holds more than {cap.what} ({cap.size:,}); refused"
        ) from error
    return bytes(body)


def _fsspec_get(url: str, start: int, count: int | None, cap: Cap, timeouts: Timeouts) -> bytes:
    """`count` bytes of `url` from `start` (None: to its end, at most `cap`) read with fsspec.

    Only the bytes referenced are asked for; an asynchronous file system is
    given `timeouts.total` per call.
    """
    filesystem, path = _remote(url)

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

    if count is None:
        size = int(call("size", path))
        if size - start > cap.size:
            raise _TooLargeError(cap.refusal(f"{url} holds from offset {start}", size - start))
        count = size - start
    data = bytes(call("cat_file", path, start=start, end=start + count))
    if len(data) > count:
        raise OSError(f"{url}: {len(data):,} bytes answered for a range of {count:,}")
    return data


def _remote(url: str) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError as error:
        raise OSError(f"reading {url!r} needs fsspec, which is not installed") from error
    filesystem, path = fsspec.core.url_to_fs(url)
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
