"""Bounded file reads: regular files only, read whole or not at all.

Every byte the engine reads from storage is bounded twice, whatever the bytes
say; this module holds the first bound, `napari_lazy_zarr.core.sources._decode` the
second (decoding within the expected size).

- **Files** (`read_regular_file`): symlinks are resolved, the target is opened
  with ``O_NONBLOCK`` so that a FIFO or a device cannot block, and anything
  that is not a regular file is refused; at most the caller's cap is read (one
  byte more tells an oversized file); a file whose size, mtime or inode
  changes while it is read is read again, and a file modified moments ago is
  read again once quiet (`SETTLE_SECONDS`): never served torn by a writer whose
  writes of one file are less than that apart.
- **JSON** (`load_json`): a document is parsed only after its nesting depth is
  checked (`MAX_JSON_DEPTH`).

Nothing here imports zarr: the manifest and zarr sources both build on it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
from typing import Any, BinaryIO, Final, Literal, NamedTuple, overload

import numpy as np

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LazyZarrError,
    LoadTimeoutError,
    MetadataError,
    StoreNotFoundError,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "SETTLE_SECONDS",
    "FileChangedError",
    "FileStamp",
    "load_json",
    "open_regular_file",
    "read_regular_file",
    "read_stamped",
]


MAX_JSON_DEPTH: Final = 256
"""Nesting a metadata document may have (real ones nest < 12 deep; OME plates < 20)."""

TORN_READ_ATTEMPTS: Final = 5
"""Reads of a file that keeps changing before `FileChangedError`."""

SETTLE_SECONDS: Final = 0.05
"""How long a file must have been left alone before one read of it is trusted.

A file modified more recently than this may be in the middle of an in-place
rewrite: a writer descheduled between two ``write`` calls leaves the file half
old, half new with a stamp that no longer changes (and within one tick of the
filesystem's timestamp clock, jiffy-grained on many kernels, a change is not even
seen by ``fstat``: git's "racy clean" problem). Such a read waits until the file
has been quiet this long, then reads it again: it is served only if both reads and
the stamps agree. So an in-place rewrite whose writes are less than this apart is
never served torn; a writer that pauses longer between its writes of one file is
safe only if it replaces files atomically (write, then rename: zarr-python 3's
``LocalStore``) or its codec checks a checksum (``crc32c``).
"""
_SETTLE_NS: Final = int(SETTLE_SECONDS * 1e9)
_BLOCK: Final = 16 << 20  # bytes per read call: the time cap is checked between blocks
_OPEN_FLAGS: Final = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_BINARY", 0)
)


class FileChangedError(ChunkReadError):
    """A file kept changing while it was read; retrying later may succeed."""

    retryable = True


class FileStamp(NamedTuple):
    """What identifies one version of a file: equal stamps, same bytes (as far as stat can tell).

    A named tuple: one is made per file read and compared per shard read, in C (a frozen
    dataclass's generated `__eq__` cost 51 bytecodes a chunk of a sharded array).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     data, stamp = read_stamped(f.name, limit=10)
    >>> data, stamp.size
    (b'abc', 3)
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileStamp:
        return cls(
            status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns
        )


# -- files -------------------------------------------------------------------


def _refuse(error: type[LazyZarrError], path: str, why: str) -> LazyZarrError:
    return error(f"{path}: {why}")


def _open_regular(path: str, error: type[LazyZarrError]) -> tuple[int, os.stat_result]:
    """An fd of the regular file `path` (symlinks followed), opened so it cannot block,
    and the descriptor's `fstat` (what a stamped read starts from: one call fewer).

    No `realpath`: `stat` and `open` follow symlinks themselves, and resolving the
    path cost seven `lstat` calls (~45 µs) per chunk read.
    """
    # stat before open: a device is refused without opening it (opening some has effects).
    status = os.stat(path)
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if not stat.S_ISREG(status.st_mode):
        raise _refuse(
            error, path, "is a FIFO, device or socket, not a regular file; refusing to read it"
        )
    fd = os.open(path, _OPEN_FLAGS)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):  # swapped since the stat
            raise _refuse(error, path, "is not a regular file; refusing to read it")
    except BaseException:
        os.close(fd)
        raise
    return fd, opened


def _pread_all(fd: int, offset: int, count: int, deadline: float | None, path: str) -> bytes:
    """Up to `count` bytes at `offset` (fewer at end of file), checking `deadline` per block.

    Without a deadline, one read: joining blocks holds the file twice at its peak
    (measured: +100 MiB resident refusing a 35 MB manifest of 1,000,000 references).
    """
    if count <= _BLOCK or deadline is None:
        return os.pread(fd, count, offset)
    parts: list[bytes] = []
    done = 0
    while done < count:
        if deadline is not None and time.monotonic() > deadline:
            raise LoadTimeoutError(f"{path}: reading {count:,} bytes took too long")
        part = os.pread(fd, min(_BLOCK, count - done), offset + done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def open_regular_file(
    path: str | os.PathLike[str], *, error: type[LazyZarrError] = ChunkReadError
) -> BinaryIO:
    """`path` opened for reading in binary, refused (with `error`) unless a regular file.

    As `read_regular_file`: symlinks resolved, opened with ``O_NONBLOCK`` so a
    FIFO or device cannot block, the open descriptor checked. For readers that
    need a file object (zip archives); the caller closes it.

    Raises
    ------
    StoreNotFoundError
        The file does not exist.
    error (ChunkReadError by default)
        Not a regular file, or it cannot be opened.
    """
    where = os.fspath(path)
    try:
        fd, _ = _open_regular(where, error)
    except LazyZarrError:
        raise
    except FileNotFoundError as cause:
        raise StoreNotFoundError(f"{where}: no such file") from cause
    except OSError as cause:
        raise error(f"{where}: cannot open: {cause}") from cause
    return os.fdopen(fd, "rb")


@overload
def read_stamped(
    path: str | os.PathLike[str],
    *,
    limit: int,
    offset: int = ...,
    length: int | None = ...,
    suffix: int | None = ...,
    timeout: float | None = ...,
    settle: bool = ...,
    error: type[LazyZarrError] = ...,
    missing_ok: Literal[False] = ...,
) -> tuple[bytes, FileStamp]: ...
@overload
def read_stamped(
    path: str | os.PathLike[str],
    *,
    limit: int,
    offset: int = ...,
    length: int | None = ...,
    suffix: int | None = ...,
    timeout: float | None = ...,
    settle: bool = ...,
    error: type[LazyZarrError] = ...,
    missing_ok: bool,
) -> tuple[bytes, FileStamp] | None: ...
def read_stamped(
    path: str | os.PathLike[str],
    *,
    limit: int,
    offset: int = 0,
    length: int | None = None,
    suffix: int | None = None,
    timeout: float | None = None,
    settle: bool = True,
    error: type[LazyZarrError] = ChunkReadError,
    missing_ok: bool = False,
) -> tuple[bytes, FileStamp] | None:
    """`read_regular_file`, and the `FileStamp` of the version of the file read."""
    where = os.fspath(path)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        fd, before = _open_regular(where, error)
    except LazyZarrError:
        raise
    except (FileNotFoundError, NotADirectoryError) as cause:
        if missing_ok:
            return None
        raise StoreNotFoundError(f"{where}: no such file") from cause
    except IsADirectoryError as cause:
        # Not "absent" (zarr's LocalStore reads a directory as no value): a directory
        # where a chunk or document belongs is a broken store, and filling it with the
        # fill value would show made-up pixels as data.
        raise error(f"{where}: is a directory, not a regular file") from cause
    except OSError as cause:
        raise error(f"{where}: cannot open: {cause}") from cause
    try:
        for attempt in range(TORN_READ_ATTEMPTS):
            if attempt:  # the first read starts from the open's fstat
                before = os.fstat(fd)
            size = before.st_size
            if suffix is not None:
                start, count = max(0, size - suffix), min(suffix, size)
            else:
                start = offset
                count = max(0, size - offset) if length is None else length
            if count > limit:
                what = "file" if (suffix, length, offset) == (None, None, 0) else "byte range"
                raise _refuse(
                    error, where, f"{what} of {count:,} bytes is larger than the {limit:,} allowed"
                )
            whole = length is None and suffix is None
            # One byte more than stat says: a file that grew since is seen to have changed.
            data = _pread_all(fd, start, count + 1 if whole else count, deadline, where)
            after = os.fstat(fd)
            stamp = FileStamp.of(after)
            expected = count if whole else min(count, max(0, size - start))
            if _same_stat(after, before) and len(data) == expected:
                age = time.time_ns() - after.st_mtime_ns
                if age >= _SETTLE_NS:
                    return data, stamp
                # Written moments ago: a writer may sit between two writes of one rewrite.
                # Wait until the file has been quiet for the whole window (a future mtime,
                # from clock skew, waits the window once), then read it again: two equal
                # reads with one stamp across the window are one version. Without
                # `settle` (JSON documents: a torn one does not parse) the second read
                # follows at once, which still tells a write within one timestamp tick.
                if settle:
                    _settle(min(_SETTLE_NS, _SETTLE_NS - age) / 1e9, deadline)
                again = _pread_all(fd, start, count + 1 if whole else count, deadline, where)
                if again == data and _same_content(FileStamp.of(os.fstat(fd)), stamp):
                    return data, stamp
            time.sleep(0.001 * 2**attempt)  # let the writer finish: 1, 2, 4, 8 ms
        raise FileChangedError(
            f"{where}: the file changed while it was read, {TORN_READ_ATTEMPTS} times "
            "(another program is writing it); retry later"
        )
    except OSError as cause:
        if isinstance(cause, LazyZarrError):
            raise
        raise error(f"{where}: cannot read: {cause}") from cause
    finally:
        os.close(fd)


def _same_stat(now: os.stat_result, then: os.stat_result) -> bool:
    """`FileStamp.of(now) == FileStamp.of(then)`, without making the two stamps."""
    return (
        now.st_mtime_ns == then.st_mtime_ns
        and now.st_size == then.st_size
        and now.st_ctime_ns == then.st_ctime_ns
        and now.st_ino == then.st_ino
        and now.st_dev == then.st_dev
    )


def _same_content(now: FileStamp, then: FileStamp) -> bool:
    """The same bytes as far as stat tells, whatever happened to the name: a file replaced
    atomically (renamed over) changes the old inode's ctime (its link count drops), not
    its content, and this descriptor still reads the old inode."""
    return (now.device, now.inode, now.size, now.mtime_ns) == (
        then.device,
        then.inode,
        then.size,
        then.mtime_ns,
    )


def _settle(seconds: float, deadline: float | None) -> None:
    """Sleep `seconds`, or until `deadline` (monotonic) if that comes first."""
    if deadline is not None:
        seconds = min(seconds, deadline - time.monotonic())
    if seconds > 0:
        time.sleep(seconds)


@overload
def read_regular_file(
    path: str | os.PathLike[str],
    *,
    limit: int,
    offset: int = ...,
    length: int | None = ...,
    suffix: int | None = ...,
    timeout: float | None = ...,
    settle: bool = ...,
    error: type[LazyZarrError] = ...,
    missing_ok: Literal[False] = ...,
) -> bytes: ...
@overload
def read_regular_file(
    path: str | os.PathLike[str],
    *,
    limit: int,
    offset: int = ...,
    length: int | None = ...,
    suffix: int | None = ...,
    timeout: float | None = ...,
    settle: bool = ...,
    error: type[LazyZarrError] = ...,
    missing_ok: bool,
) -> bytes | None: ...
def read_regular_file(
    path: str | os.PathLike[str],
    *,
    limit: int,
    offset: int = 0,
    length: int | None = None,
    suffix: int | None = None,
    timeout: float | None = None,
    settle: bool = True,
    error: type[LazyZarrError] = ChunkReadError,
    missing_ok: bool = False,
) -> bytes | None:
    """The bytes of the regular file `path` (or of one byte range of it), at most `limit`.

    Symlinks are resolved; the file is opened with ``O_NONBLOCK`` and
    ``O_CLOEXEC`` and its open descriptor checked, so a FIFO, device, socket or
    directory is refused (with `error`) without blocking. A whole file larger
    than `limit`, or a range longer than it, is refused before it is read.
    `offset` and `length`, or `suffix` (the last `suffix` bytes), select a byte
    range; a range past the end of the file is returned short, as stores do.

    A file whose size, mtime, ctime or inode differs between the ``fstat``
    before and after the read is read again (`TORN_READ_ATTEMPTS` times in all,
    then `FileChangedError`, retryable). A file modified less than
    `SETTLE_SECONDS` ago is read again once it has been quiet that long (at once
    if not `settle`), and served only if both reads and stamps agree: a writer
    between two writes of one in-place rewrite, or a write within one tick of the
    filesystem clock, leaves no trace in ``fstat``.

    Raises
    ------
    StoreNotFoundError
        The file does not exist (unless `missing_ok`: then None).
    error (ChunkReadError by default)
        Not a regular file, larger than `limit`, or unreadable; the message names `path`.
    LoadTimeoutError
        The read took longer than `timeout` seconds (checked every 16 MiB).
    FileChangedError
        The file kept changing while it was read.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "chunk")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"0123456789")
    >>> read_regular_file(path, limit=100, offset=2, length=3)
    b'234'
    >>> read_regular_file(path, limit=4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.ChunkReadError: ...: file of 10 bytes is larger than the 4 allowed
    >>> os.mkfifo(os.path.join(folder, "fifo"))
    >>> read_regular_file(os.path.join(folder, "fifo"), limit=100)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.ChunkReadError: ...: is a FIFO, device or socket, not a ...
    >>> read_regular_file(os.path.join(folder, "absent"), limit=100, missing_ok=True) is None
    True
    """
    found = read_stamped(
        path,
        limit=limit,
        offset=offset,
        length=length,
        suffix=suffix,
        timeout=timeout,
        settle=settle,
        error=error,
        missing_ok=missing_ok,
    )
    return None if found is None else found[0]


# -- JSON ----------------------------------------------------------------------

_STRUCTURE: Final = bytes(range(256)).translate(None, b'[]{}"\\')
_ESCAPE: Final = re.compile(rb"\\.", re.DOTALL)
_STRING: Final = re.compile(rb'"[^"]*"')


def json_depth(data: bytes) -> int:
    """How deep the arrays and objects of JSON text `data` nest (strings skipped).

    Vectorised (no Python loop per character), so a 64 MiB document costs
    milliseconds.

    Examples
    --------
    >>> json_depth(b'{"a": [1, {"b": "[[[["}]}')
    3
    """
    # Escapes first (an escaped quote does not end a string), then all but []{}" go,
    # then whole strings.
    skeleton = _STRING.sub(b"", _ESCAPE.sub(b"", data).translate(None, _STRUCTURE))
    if not skeleton:
        return 0
    codes = np.frombuffer(skeleton, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


def load_json(
    data: bytes,
    *,
    where: str,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[LazyZarrError] = MetadataError,
) -> Any:
    """JSON text `data` parsed, nested at most `max_depth` deep; else `error` naming `where`.

    Examples
    --------
    >>> load_json(b'{"zarr_format": 3}', where="a.zarr/zarr.json")
    {'zarr_format': 3}
    >>> load_json(b"[" * 100_000, where="deep.json")
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.MetadataError: deep.json: JSON nested 100000 deep (at most 256)
    """
    check_json_depth(data, where=where, max_depth=max_depth, error=error)
    try:
        return json.loads(data)
    except RecursionError as cause:  # pragma: no cover - the depth check comes first
        raise error(f"{where}: JSON nested too deeply") from cause
    except ValueError as cause:
        raise error(f"{where}: malformed JSON: {cause}") from cause


def check_json_depth(
    data: bytes,
    *,
    where: str,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[LazyZarrError] = MetadataError,
) -> None:
    """Refuse JSON text nested deeper than `max_depth` (cheaply, without parsing it)."""
    # Fewer brackets than the limit cannot nest deeper: skip the scan for small documents.
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return
    depth = json_depth(data)
    if depth > max_depth:
        raise error(f"{where}: JSON nested {depth} deep (at most {max_depth})")
