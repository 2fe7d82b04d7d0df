"""Bounded local stores and store opening.

`BoundedLocalStore` and `BoundedZipStore` are zarr-python's local and zip stores
with every read bounded (`read_regular_file`); `store_for` is what a location
opens with (a bounded `RemoteStore` over obstore, or an fsspec store for other
protocols, behind a `MetadataMemoStore` for URLs), `bounded_store` bounds a
store given by a user, and `zarr_errors` maps zarr-python's failures to open a
node to ours.
"""

from __future__ import annotations

import lzma
import os
import struct
import threading
import weakref
import zipfile
import zlib
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Self

import zarr
from zarr.abc.store import (
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)
from zarr.buffer import default_buffer_prototype

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    MetadataError,
    NotAZarrStoreError,
    ReadOnlyError,
)
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.storage._sync import SyncReads
from napari_lazy_zarr.core.storage.files import (
    check_json_depth,
    open_regular_file,
    read_regular_file,
)
from napari_lazy_zarr.core.storage.memo import MetadataMemoStore, is_metadata_key
from napari_lazy_zarr.core.storage.remote import REMOTE_SCHEMES, RemoteStore
from napari_lazy_zarr.core.storage.remote_errors import RemoteSetupError
from napari_lazy_zarr.core.storage.retry import classify
from napari_lazy_zarr.core.storage.s3 import s3_errors
from napari_lazy_zarr.core.storage.vetting import (
    MAX_METADATA_BYTES,
    METADATA_FILES,
    check_local,
    is_url,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest

__all__ = [
    "DEFAULT_MAX_VALUE_BYTES",
    "MAX_ZIP_DIRECTORY_BYTES",
    "MAX_ZIP_MEMBERS",
    "BoundedLocalStore",
    "BoundedZipStore",
    "bounded_store",
    "check_zip_directory",
    "range_arguments",
    "range_size",
    "store_for",
    "zarr_errors",
]


DEFAULT_MAX_VALUE_BYTES: Final = 1 << 30
"""The most bytes a bounded store returns for a key when the reader states no cap."""
MAX_ZIP_MEMBERS: Final = 65_535
"""Zip archives listing more members are refused, counted before their directory is read.

The most a classic (non-ZIP64) archive holds. Python's `zipfile` keeps a
`ZipInfo` of some 600 B per member, and opening an image reads the directory
twice (zarr's `ZipStore` when the array is opened, and ours): measured on the
2-core machine, 65,535 members cost +77 MiB and 1.1 s to open, where 200,000
cost +238 MiB and 3.6 s. A store of more chunks is better left unzipped (or
sharded: one member per shard).
"""
MAX_ZIP_DIRECTORY_BYTES: Final = 32 << 20
"""Zip archives whose central directory is larger are refused before it is read (100,000
members with names of 60 characters take 11 MB; `zipfile` reads it whole, comments too)."""
_EOCD: Final = struct.Struct("<4s4H2LH")  # end of central directory record (22 bytes)
_ZIP64_LOCATOR: Final = struct.Struct("<4sLQL")  # 20 bytes, just before the EOCD record
_ZIP64_EOCD: Final = struct.Struct("<4sQ2H2L4Q")  # 56 bytes
_DIRECTORY_ENTRY: Final = struct.Struct("<4s4B4HL2L5H2L")  # 46 bytes, as zipfile's centralDir
_EOCD_SEARCH: Final = _EOCD.size + (1 << 16)  # the record, and a comment of at most 64 KiB


class BoundedLocalStore(SyncReads, zarr.storage.LocalStore):
    """A read-only `LocalStore` whose every read is bounded (`read_regular_file`).

    Every key zarr-python reads through it -- metadata documents while an array
    is opened, shard indexes, chunks -- is read from a regular file only (a
    FIFO, device or socket is refused without blocking), at most
    `MAX_METADATA_BYTES` for a metadata document (whose JSON must nest at most
    `MAX_JSON_DEPTH` deep), at most the range's length for a byte range, and
    at most `max_bytes` otherwise. Torn reads are re-read.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> _ = zarr.create_array(path, shape=(4,), dtype="u1")
    >>> store = BoundedLocalStore(path)
    >>> zarr.open_array(store, mode="r").shape
    (4,)
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        read_only: bool = True,
        max_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        timeout: float | None = None,
    ) -> None:
        if not read_only:
            raise ReadOnlyError(f"{root}: a BoundedLocalStore can only be read")
        super().__init__(os.fspath(root), read_only=True)
        self.max_bytes = max_bytes
        self.timeout = timeout

    def with_read_only(self, read_only: bool = False) -> Self:
        # Always read-only: a writable copy is refused by the constructor.
        return type(self)(self.root, max_bytes=self.max_bytes, timeout=self.timeout)

    def read_bounded(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        """The bytes of `key` (None when absent), bounded as the class says."""
        path = os.path.join(str(self.root), key)
        metadata = is_metadata_key(key)
        limit = range_size(byte_range)
        if limit is None:
            limit = MAX_METADATA_BYTES if metadata else self.max_bytes
        error = MetadataError if metadata else ChunkReadError
        offset, length, suffix = range_arguments(byte_range)
        data = read_regular_file(
            path,
            limit=limit,
            offset=offset,
            length=length,
            suffix=suffix,
            timeout=self.timeout,
            settle=not metadata,  # a torn JSON document does not parse
            error=error,
            missing_ok=True,
        )
        if metadata and data is not None and byte_range is None:
            check_json_depth(data, where=path)
        return data

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        if prototype is None:
            prototype = default_buffer_prototype()
        data = self.read_bounded(key, byte_range)  # a missing root reads as absent keys
        return None if data is None else prototype.buffer.from_bytes(data)

    def __repr__(self) -> str:
        return f"BoundedLocalStore('{self.root}')"


_ZIP_FAILURES: Final = (
    RuntimeError,  # encrypted member, bad password
    NotImplementedError,  # unsupported compression method
    zipfile.BadZipFile,  # bad CRC, corrupt headers
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
)


class BoundedZipStore(zarr.storage.ZipStore):
    """A read-only `ZipStore` over a regular file whose member reads are bounded.

    The archive is opened with `open_regular_file` (a FIFO or device named
    ``.zip`` is refused without blocking). A member is refused before it is
    decompressed when it is encrypted or its declared size exceeds the cap
    (`MAX_METADATA_BYTES` for metadata documents, `max_bytes` otherwise), and
    at most the cap is decompressed whatever it declares; a failure to read a
    member (unsupported compression, bad CRC, corrupt data) is a
    `ChunkReadError` or `MetadataError` naming the archive and member.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_VALUE_BYTES
    ) -> None:
        self.location = os.fspath(path)
        archive = open_regular_file(self.location, error=NotAZarrStoreError)
        super().__init__(archive, mode="r")
        # Member reads go through an archive of our own (its own file handle, under its
        # own lock), not ZipStore's private one: zarr's listing and ours never share a seek.
        handle = open_regular_file(self.location, error=NotAZarrStoreError)
        try:
            check_zip_directory(handle, self.location)
            self._members = zipfile.ZipFile(handle, mode="r")
        except BaseException as cause:
            handle.close()
            archive.close()
            if isinstance(cause, zipfile.BadZipFile):
                raise NotAZarrStoreError(f"{self.location}: not a zip archive: {cause}") from cause
            raise
        self._members_lock = threading.Lock()
        # zipfile leaves a file object it was handed open; the store owns these.
        weakref.finalize(self, archive.close)
        weakref.finalize(self, handle.close)
        self.max_bytes = max_bytes

    def get_bounded(
        self,
        key: str,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None = None,
        *,
        limit: int | None = None,
    ) -> Buffer | None:
        """The bytes of member `key` (None when absent), at most `limit` (else the cap)."""
        metadata = is_metadata_key(key)
        error = MetadataError if metadata else ChunkReadError
        where = f"{self.location}: member {key!r}"
        if limit is None:
            limit = MAX_METADATA_BYTES if metadata else self.max_bytes
        with self._members_lock:
            archive = self._members
            try:
                info = archive.getinfo(key)
            except KeyError:
                return None
            if info.flag_bits & 0x1:
                raise error(f"{where}: the member is encrypted; refusing to read it")
            # Seeking into a compressed member decompresses up to the offset: the whole
            # member is bounded, not only the range asked for.
            if info.file_size > max(limit, self.max_bytes):
                raise error(
                    f"{where}: declares {info.file_size:,} bytes, more than the "
                    f"{max(limit, self.max_bytes):,} allowed"
                )
            size = info.file_size
            if byte_range is None:
                start, count = 0, size
            elif isinstance(byte_range, RangeByteRequest):
                start, count = byte_range.start, max(0, byte_range.end - byte_range.start)
            elif isinstance(byte_range, OffsetByteRequest):
                start, count = byte_range.offset, max(0, size - byte_range.offset)
            else:
                start = max(0, size - byte_range.suffix)
                count = min(byte_range.suffix, size)
            if count > limit:
                raise error(f"{where}: {count:,} bytes asked, more than the {limit:,} allowed")
            try:
                with archive.open(info) as member:
                    if start:
                        member.seek(start)
                    # zipfile stops at the declared size and checks the CRC at its end.
                    data = member.read(count)
            except _ZIP_FAILURES as cause:
                raise error(f"{where}: cannot read: {type(cause).__name__}: {cause}") from cause
        if metadata and byte_range is None:
            check_json_depth(data, where=f"{self.location}/{key}")
        return prototype.buffer.from_bytes(data)

    # Every read zarr makes of a ZipStore goes through these two (it has no get_sync).
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return self.get_bounded(key, prototype, byte_range)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return [self.get_bounded(key, prototype, byte_range) for key, byte_range in key_ranges]

    def __str__(self) -> str:
        return f"zip://{self.location}"

    def __repr__(self) -> str:
        return f"BoundedZipStore('{self.location}')"


def check_zip_directory(handle: BinaryIO, location: str) -> None:
    """Refuse a zip whose directory exceeds `MAX_ZIP_MEMBERS` or `MAX_ZIP_DIRECTORY_BYTES`.

    Read from the records `zipfile` will use, found as it finds them: the
    end-of-central-directory record (the last 22 bytes when they are one, else
    the last signature within the 64 KiB a comment may take), and the ZIP64 record
    just before its locator whenever a locator precedes it, whatever the classic
    counts say. The directory itself is then walked entry by entry, as `zipfile`
    walks it (its declared counts play no part there), before `zipfile` makes an
    object per member. An archive without a record is left to `zipfile`, which
    refuses it.

    Raises
    ------
    MetadataError
        Naming the archive, what its directory holds and the cap.
    """
    size = handle.seek(0, os.SEEK_END)
    start = max(0, size - _EOCD_SEARCH)
    handle.seek(start)
    tail = handle.read(size - start)
    at = len(tail) - _EOCD.size
    if not (at >= 0 and tail[at : at + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0"):
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or at + _EOCD.size > len(tail):
            handle.seek(0)
            return
    _, _, _, _, members, directory, offset, _ = _EOCD.unpack_from(tail, at)
    record_at = start + at  # the record's offset in the file
    concat = record_at - directory - offset  # bytes prepended to the archive, as zipfile
    if at >= _ZIP64_LOCATOR.size + _ZIP64_EOCD.size:
        signature, _, _, _ = _ZIP64_LOCATOR.unpack_from(tail, at - _ZIP64_LOCATOR.size)
        if signature == b"PK\x06\x07":
            fields = _ZIP64_EOCD.unpack_from(tail, at - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size)
            if fields[0] == b"PK\x06\x06":
                members, directory, offset = fields[7], fields[8], fields[9]
                concat = record_at - directory - offset - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size
    if members > MAX_ZIP_MEMBERS or directory > MAX_ZIP_DIRECTORY_BYTES:
        raise _zip_refusal(location, f"{members:,}", directory)
    handle.seek(max(0, offset + concat))
    if _directory_entries(handle.read(directory)) > MAX_ZIP_MEMBERS:
        raise _zip_refusal(location, f"more than {MAX_ZIP_MEMBERS:,}", directory)
    handle.seek(0)


def _directory_entries(directory: bytes) -> int:
    """The entries `zipfile` makes of a central directory (it walks them to its end),
    counted up to one past `MAX_ZIP_MEMBERS`."""
    count, position = 0, 0
    while position + _DIRECTORY_ENTRY.size <= len(directory) and count <= MAX_ZIP_MEMBERS:
        fields = _DIRECTORY_ENTRY.unpack_from(directory, position)
        if fields[0] != b"PK\x01\x02":
            break  # zipfile refuses the archive here
        position += _DIRECTORY_ENTRY.size + fields[12] + fields[13] + fields[14]
        count += 1
    return count


def _zip_refusal(location: str, members: str, directory: int) -> MetadataError:
    return MetadataError(
        f"{location}: the zip archive lists {members} members in a {directory:,}-byte "
        f"directory, more than the {MAX_ZIP_MEMBERS:,} members or "
        f"{MAX_ZIP_DIRECTORY_BYTES:,} bytes this reader opens; refused before reading it "
        "(unzip it, or store it sharded: one member per shard)"
    )


def bounded_store(store: Any, *, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> Any:
    """`store` (what `store_for` returns) with its local reads bounded.

    A local directory (a path string) becomes a `BoundedLocalStore`, a
    `ZipStore` of a file a `BoundedZipStore`; anything else is returned as is.
    """
    if isinstance(store, str) and not is_url(store):
        return BoundedLocalStore(store, timeout=timeouts.total)
    if (
        isinstance(store, zarr.storage.ZipStore)
        and not isinstance(store, BoundedZipStore)
        and store.path is not None
    ):
        return BoundedZipStore(store.path)
    return store


def store_for(location: str, *, timeouts: Timeouts | None = None) -> tuple[Any, str | None]:
    """What zarr-python opens `location` with, and its local directory (None for URLs, zips).

    Local paths are checked first (`StoreNotFoundError`, `NotAZarrStoreError`,
    `MetadataError`, pickle codecs refused by name). A `.zip` file needs its own
    store: zarr.open takes a string path as a directory. A remote URL gets a
    read-only store behind a `MetadataMemoStore` (the caller calls `forget` when
    it has opened what it needed): ``http(s)://``, ``s3://``, ``gs://`` and
    ``az://`` our bounded `RemoteStore` over obstore (each request within
    `timeouts`, bodies capped, metadata retried; S3 with the ``[s3]``
    settings), any other protocol an fsspec store (if fsspec is installed).
    ``file://`` URLs are left to zarr-python. Without `timeouts`, the user's
    (`timeouts_from_settings`: the settings file's ``[timeouts]`` and the
    ``NAPARI_LAZY_ZARR_TIMEOUT_*`` variables, else `DEFAULT_TIMEOUTS`).
    """
    if is_url(location):
        scheme = location.split("://", 1)[0].lower()
        if scheme == "file":
            return location, None
        if timeouts is None:
            from napari_lazy_zarr.core.settings import timeouts_from_settings

            timeouts = timeouts_from_settings()
        if scheme in REMOTE_SCHEMES and "?" in location:
            raise MetadataError(
                f"{location.split('?', 1)[0]}: a URL with a query (a signature, a token) cannot "
                "be opened: obstore's stores do not send it with each key; give a token as "
                'a request header instead ([remote.headers."host"])'
            )
        with zarr_errors(location):  # fsspec missing: an error naming what to install
            if scheme in REMOTE_SCHEMES:
                remote = RemoteStore(
                    location, timeouts=timeouts, max_metadata_bytes=MAX_METADATA_BYTES
                )
                return MetadataMemoStore(remote), None
            from zarr.storage import FsspecStore

            return MetadataMemoStore(FsspecStore.from_url(location, read_only=True)), None
    check_local(location)
    if os.path.isfile(location):  # check_local lets only .zip files through
        return BoundedZipStore(location), None
    return location, location


@contextmanager
def zarr_errors(full: str) -> Iterator[None]:
    """zarr-python's (and the store's) failures to open `full`, mapped to ours naming it.

    A `LoadCancelledError` (the store was closed meanwhile) and zarr's
    ``UnknownCodecError`` (valid metadata naming a codec not registered yet) pass
    through. An S3 store's failures name the setting to change (`s3_errors`).
    """
    with s3_errors(full):
        try:
            yield
        except RemoteSetupError:
            raise  # a setting of the remote store, already naming itself: not the metadata's
        except (FileNotFoundError, zarr.errors.NodeNotFoundError) as error:
            if full.startswith(("http://", "https://")):
                # A remote store answers None (absent) for HTTP 404 alone: say so, not
                # zarr's "No group found in store MetadataMemoStore(HttpStore(...))".
                raise NotAZarrStoreError(
                    f"{full}: not a zarr store: the server answered 404 Not Found for its "
                    f"zarr metadata ({', '.join(METADATA_FILES)})"
                ) from error
            raise NotAZarrStoreError(f"{full}: no zarr array or group found: {error}") from error
        except ImportError as error:
            # fsspec itself (the [remote] extra), or the package of the URL's protocol that
            # fsspec names ("Install paramiko to access SFTP"): never an extra that lacks it.
            how = (
                "install it with: pip install fsspec (the plugin's [remote] extra); "
                "http(s)://, s3://, gs:// and az:// need nothing more"
                if (error.name or "").split(".")[0] == "fsspec"
                else "install the package it names"
            )
            raise NotAZarrStoreError(
                f"{full}: opening this URL needs a package that is not installed ({error}); {how}"
            ) from error
        except zipfile.BadZipFile as error:
            raise NotAZarrStoreError(f"{full}: not a zip archive: {error}") from error
        except zarr.errors.UnknownCodecError:
            raise  # valid metadata: `sources.codecs` registers the installed codecs, or names it
        except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as error:
            raise MetadataError(
                f"{full}: malformed zarr metadata: {type(error).__name__}: {error}"
            ) from error
        except OSError as error:  # refused, unknown host, timed out, an HTTP status, a cut body
            raise MetadataError(f"{full}: cannot read zarr metadata: {_named(error)}") from error
        except Exception as error:
            # obstore's and fsspec's back ends' own errors (a listing refused, a dropped
            # connection) are no OSError: mapped too, never shown raw.
            library = type(error).__module__.split(".", 1)[0]
            if classify(error) == "permanent" and library not in ("obstore", "aiohttp", "fsspec"):
                raise
            raise MetadataError(f"{full}: cannot read zarr metadata: {_named(error)}") from error


def _named(error: BaseException) -> str:
    """`error` with its type's name, unless that name is private (``_ConnectError``): a
    class the user can neither look up nor catch says nothing its message does not."""
    name = type(error).__name__
    return str(error) if name.startswith("_") else f"{name}: {error}"


def range_size(byte_range: ByteRequest | None) -> int | None:
    """The bytes a zarr byte range asks for, where it says (None: a whole value, or to its end)."""
    if isinstance(byte_range, RangeByteRequest):
        return max(0, byte_range.end - byte_range.start)
    if isinstance(byte_range, SuffixByteRequest):
        return byte_range.suffix
    return None


def range_arguments(byte_range: ByteRequest | None) -> tuple[int, int | None, int | None]:
    """`read_regular_file`'s offset, length and suffix for a zarr byte range."""
    if byte_range is None:
        return 0, None, None
    if isinstance(byte_range, RangeByteRequest):
        return byte_range.start, max(0, byte_range.end - byte_range.start), None
    if isinstance(byte_range, OffsetByteRequest):
        return byte_range.offset, None, None
    if isinstance(byte_range, SuffixByteRequest):
        return 0, None, byte_range.suffix
    raise TypeError(f"unexpected byte range {byte_range!r}")
