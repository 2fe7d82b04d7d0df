"""Reference files: arrays whose bytes or members live in other files beside them.

Two small JSON formats open as arrays:

- **kerchunk references** (version 0, and version 1 with ``templates``): a
  mapping from zarr keys to inline data, ``[url]`` (a whole file) or
  ``[url, offset, length]`` (a byte range of a file). The array's zarr
  metadata (``.zarray`` / ``zarr.json``) is itself one of the references.
  `ManifestStore` serves the references as a read-only zarr store, so
  zarr-python's own codec pipeline decodes the chunks, and `ManifestSource`
  is the `ZarrChunkSource` over it.
- **stack files** (``*.zstack.json``): a list of zarr arrays (or kerchunk
  references) to concatenate or stack into one array (`StackFile`).

Relative paths in both resolve against the file's own folder. A reference
that resolves (``file://`` and ``~`` expanded, normalised, symbolic links
followed) inside that folder is accepted, absolute or relative: kerchunk writes
absolute paths and ``file://`` URLs. Anything else (a file elsewhere, ``..``
or a symbolic link leading out, another protocol such as ``https`` or ``s3``)
is refused with `UnsafeDataError` unless a `ReferencePolicy` allows it: the
user's (`ReferencePolicy.from_settings`: environment variables and the settings
file), or one given in Python. A protocol allowed in general still does not
reach loopback, link-local or private addresses: those must be named. A
reference file from elsewhere must not make the viewer read, and show,
arbitrary files of the person opening it, nor probe the network it sits on.

Every read is bounded, whatever the files say (see `ManifestStore`): only
regular files are read (`core.bounds`: a FIFO or a device named anywhere is
refused at once), reference and stack files up to a size cap and a JSON depth
limit, each reference up to its key's byte cap (checked before reading or
decoding) and, when remote, within `Timeouts`. A referenced file changed since
the references were opened is refused, never served torn or under the old
version's identity.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email.utils
import hashlib
import http.client
import ipaddress
import math
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn
from urllib.parse import urlsplit

import numpy as np
import zarr
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.buffer import default_buffer_prototype

from napari_lazy_zarr.core._sync_store import SyncReads
from napari_lazy_zarr.core.bounds import FileStamp, load_json, read_regular_file, read_stamped
from napari_lazy_zarr.core.composite import ConcatSource, StackSource
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LoadTimeoutError,
    MetadataError,
    NotAZarrStoreError,
    ReadOnlyError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.retry import RetryPolicy
from napari_lazy_zarr.core.settings import (
    DEFAULT_TIMEOUTS,
    SETTINGS_VARIABLE,
    RemoteLocation,
    Settings,
    Timeouts,
    current_settings,
    parse_remote,
    settings_path,
    url_path,
)
from napari_lazy_zarr.core.zarr_source import (
    DEFAULT_RETRY,
    MAX_METADATA_BYTES,
    ZarrChunkSource,
    ZarrIdentity,
    _check_document,
    _group_arrays,
    _is_url,
    open_node,
    open_zarr_source,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping

    from zarr.abc.buffer import Buffer, BufferPrototype

__all__ = [
    "ALLOWED_REMOTES_VARIABLE",
    "ALLOWED_ROOTS_VARIABLE",
    "MAX_MANIFEST_BYTES",
    "SETTINGS_VARIABLE",
    "ManifestIdentity",
    "ManifestSource",
    "ManifestStore",
    "ReferencePolicy",
    "StackFile",
    "StackMember",
    "open_stack",
    "read_stack_file",
    "reference_file_kind",
    "settings_path",
]

type ReferenceFileKind = Literal["kerchunk", "stack"]
type IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

STACK_SUFFIX: Final = ".zstack.json"
# Keys whose values zarr-python parses as array or group metadata: vetted before it does.
_METADATA_KEYS: Final = frozenset({".zarray", ".zgroup", "zarr.json", ".zmetadata"})
_TEMPLATE: Final = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_SNIFF_BYTES: Final = 1 << 16
_KERCHUNK_MARKERS: Final = (b'"refs"', b'.zarray"', b'.zgroup"', b'zarr.json"')
_METADATA_RETRY: Final = RetryPolicy()  # metadata read at open, retried as chunks are
MAX_MANIFEST_BYTES: Final = 256 << 20
"""Reference files larger than this are refused (kerchunk's output for a million chunks is
~100 MB; parsed, it takes several times that in memory)."""


def reference_file_kind(path: str | os.PathLike[str]) -> ReferenceFileKind | None:
    """``"stack"`` for a ``*.zstack.json`` file, ``"kerchunk"`` for kerchunk references, else None.

    Cheap (a ``stat`` and at most 64 KiB read) and never raises nor blocks: a
    JSON file is taken for kerchunk references when it is a regular file that
    starts like a JSON object naming ``refs`` or zarr metadata keys (a FIFO or
    a device named ``*.json`` is None). Nothing is validated here.

    Examples
    --------
    >>> import json, tempfile
    >>> path = tempfile.mkdtemp() + "/refs.json"
    >>> with open(path, "w") as handle:
    ...     json.dump({"version": 1, "refs": {}}, handle)
    >>> reference_file_kind(path), reference_file_kind(tempfile.mkdtemp())
    ('kerchunk', None)
    """
    try:
        location = os.fspath(path)
        lower = location.lower()
        if not lower.endswith(".json") or _is_url(location) or not os.path.isfile(location):
            return None
        if lower.endswith(STACK_SUFFIX):
            return "stack"
        head = read_regular_file(location, limit=_SNIFF_BYTES, length=_SNIFF_BYTES)
        if head.lstrip().startswith(b"{") and any(m in head for m in _KERCHUNK_MARKERS):
            return "kerchunk"
        return None
    except Exception:  # the napari reader hook must get an answer, whatever it is handed
        return None


def _read_json(location: str, what: str, limit: int) -> tuple[dict[str, Any], bytes]:
    """A JSON object from a small local file (a manifest, a stack file), with its bytes.

    Read as every local file is (`bounds.read_regular_file`: a regular file
    only, at most `limit` bytes, never torn) and parsed with a depth limit
    (`bounds.load_json`).

    Raises
    ------
    StoreNotFoundError
        No such file.
    MetadataError
        Not a regular file (a FIFO, a device, a directory), larger than
        `limit`, malformed or too deeply nested JSON, or not an object; the
        message names the file.
    """
    raw = read_regular_file(location, limit=limit, error=MetadataError)
    document = load_json(raw, where=f"{location}: the {what}")
    if not isinstance(document, dict):
        raise MetadataError(f"{location}: the {what} is not a JSON object")
    return document, raw


# -- where references may point -----------------------------------------------

ALLOWED_ROOTS_VARIABLE: Final = Settings.setting("allowed_roots").variable
"""Environment variable: local folders references may point into (separated like ``PATH``)."""
ALLOWED_REMOTES_VARIABLE: Final = Settings.setting("allowed_remotes").variable
"""Environment variable: protocols and locations references may reach (comma-separated)."""
# Protocols whose URL "host" is a bucket or container, not a network address.
_BUCKET_PROTOCOLS: Final = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "memory"}
)
_RESOLVE_TIMEOUT: Final = 2.0  # seconds a host name may take to resolve before it is refused


@dataclass(frozen=True, slots=True)
class ReferencePolicy:
    """Where references may point beyond their reference file's own folder.

    A reference that resolves (``file://`` and ``~`` expanded, normalised,
    symbolic links followed) inside the folder holding the reference file is
    always allowed, absolute or relative. A policy allows more; everything
    else is refused with `UnsafeDataError`.

    `ReferencePolicy.from_settings` is the user's policy, from the
    environment and the settings file; the readers use it unless given another.

    Attributes
    ----------
    roots
        Local folders references may also point into (``~`` expanded; compared
        after resolving symbolic links, so a link inside a root that leads out
        of it is refused).
    remotes
        What remote references may reach. A protocol (``"s3"``, ``"https"``)
        allows its URLs, except those whose host is, or resolves to, a
        loopback, link-local or private address. A location
        (``"s3://bucket"``, ``"https://data.example.org"``,
        ``"http://127.0.0.1:8000/data"``) allows the URLs under it, whatever
        its address: naming a host is how a private one is allowed.
    any_local
        Allow local files anywhere (what ``allow_outside=True`` asks).

    Raises
    ------
    ValueError
        A remote entry that is neither a protocol nor a location.

    Examples
    --------
    >>> policy = ReferencePolicy(roots=["/data"], remotes=["s3", "https://example.org"])
    >>> policy.union(ReferencePolicy(remotes=["gs"])).remotes
    ('s3', 'https://example.org', 'gs')
    """

    roots: tuple[str, ...] = ()
    remotes: tuple[str, ...] = ()
    any_local: bool = False

    def __post_init__(self) -> None:
        # Lists are welcome; the value stays hashable.
        object.__setattr__(self, "roots", tuple(os.fspath(root) for root in self.roots))
        object.__setattr__(self, "remotes", tuple(self.remotes))
        for entry in self.remotes:
            parse_remote(entry)

    @classmethod
    def from_settings(cls, environ: Mapping[str, str] | None = None) -> ReferencePolicy:
        """The user's policy: `Settings.allowed_roots` and `Settings.allowed_remotes`.

        What the environment, napari's Preferences and the settings file
        allow, together (`current_settings`). ``NAPARI_LAZY_ZARR_ALLOWED_ROOTS``
        lists folders separated by ``os.pathsep`` (``:``; ``;`` on Windows);
        ``NAPARI_LAZY_ZARR_ALLOWED_REMOTES`` lists protocols and locations
        separated by commas or spaces. The settings file (`settings_path`) may
        hold the same under ``[references]``::

            [references]
            allowed_roots = ["/data/hdf5", "~/scans"]
            allowed_remotes = ["s3://open-data", "https://data.example.org"]

        Relative folders in the file are relative to the file. A missing file is
        no settings. Read afresh on every call, so an edit applies to the next
        reference file opened.

        Raises
        ------
        MetadataError
            The settings file cannot be read or is malformed, or an entry is
            neither a protocol nor a location (the message names the file or
            the variable, and the entry).

        Examples
        --------
        >>> env = {"NAPARI_LAZY_ZARR_ALLOWED_REMOTES": "s3, https://example.org",
        ...        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"}
        >>> ReferencePolicy.from_settings(env).remotes
        ('s3', 'https://example.org')
        """
        settings = current_settings(environ)
        return cls(roots=settings.roots, remotes=settings.remotes)

    def union(self, other: ReferencePolicy) -> ReferencePolicy:
        """What either policy allows."""
        return ReferencePolicy(
            roots=tuple(dict.fromkeys((*self.roots, *other.roots))),
            remotes=tuple(dict.fromkeys((*self.remotes, *other.remotes))),
            any_local=self.any_local or other.any_local,
        )


def _address_kind(address: IPAddress) -> str | None:
    """``"loopback"``, ``"link-local"`` or ``"private"`` for a non-public address, else None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    # Private ranges, and everything else that is not public: 0.0.0.0 (which reaches
    # this machine), shared, reserved and multicast addresses.
    if address.is_private or not address.is_global or address.is_multicast:
        return "private"
    return None


def _resolve(host: str, timeout: float) -> list[IPAddress] | None:
    """The addresses `host` resolves to ([] if it does not), or None after `timeout` seconds.

    `socket.getaddrinfo` cannot be interrupted: it runs in a daemon thread
    that is left to finish on its own when it takes too long.
    """
    found: list[str] = []
    done = threading.Event()

    def run() -> None:
        try:
            found.extend(str(info[4][0]) for info in socket.getaddrinfo(host, None))
        except (OSError, UnicodeError):
            pass  # does not resolve: nothing can be reached through it
        finally:
            done.set()

    threading.Thread(target=run, name="lazy-zarr-resolve", daemon=True).start()
    if not done.wait(timeout):
        return None
    addresses: list[IPAddress] = []
    for text in found:
        try:
            addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
        except ValueError:
            continue
    return addresses


def _address_problem(host: str, timeout: float = _RESOLVE_TIMEOUT) -> str | None:
    """Why `host` may not be reached by protocol alone (a non-public address), else None."""
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return f"the loopback host {host!r}"
    try:
        literal: IPAddress | None = ipaddress.ip_address(name)
    except ValueError:
        literal = None
    if literal is not None:
        kind = _address_kind(literal)
        return None if kind is None else f"the {kind} address {literal}"
    addresses = _resolve(name, timeout)
    if addresses is None:
        return f"the host {host!r}, whose address did not resolve within {timeout:g} s"
    for address in addresses:
        kind = _address_kind(address)
        if kind is not None:
            return f"the {kind} address {address} ({host!r} resolves to it)"
    return None


@dataclass(frozen=True, slots=True)
class _Rules:
    """A policy prepared for checking: real roots, protocol names, locations."""

    roots: tuple[str, ...]
    protocols: frozenset[str]
    locations: tuple[RemoteLocation, ...]
    any_local: bool

    @classmethod
    def of(cls, policy: ReferencePolicy) -> _Rules:
        parsed = [parse_remote(entry) for entry in policy.remotes]
        return cls(
            roots=tuple(os.path.realpath(os.path.expanduser(root)) for root in policy.roots),
            protocols=frozenset(p for p in parsed if isinstance(p, str)),
            locations=tuple(p for p in parsed if isinstance(p, RemoteLocation)),
            any_local=policy.any_local,
        )


@dataclass(frozen=True, slots=True)
class _Target:
    """A resolved reference: a local file's real path, or an allowed URL."""

    path: str
    remote: bool = False


def _policy_source(
    policy: ReferencePolicy | None, allow_outside: bool, allow_protocols: Iterable[str]
) -> Callable[[], ReferencePolicy]:
    """The policy a reader uses, made when first needed: given, or the user's settings.

    The settings are read only once a reference leaves the reference file's
    folder, so a broken settings file does not stop files that need none.
    """
    explicit = ReferencePolicy(remotes=tuple(allow_protocols), any_local=bool(allow_outside))
    if policy is not None:
        combined = policy.union(explicit)
        return lambda: combined
    return lambda: ReferencePolicy.from_settings().union(explicit)


class _Resolver:
    """Resolves the paths a reference file names, refusing what its policy does not allow.

    Resolutions are remembered: a manifest's many references usually name a
    few files (and hosts).
    """

    def __init__(self, document: str, policy: Callable[[], ReferencePolicy]) -> None:
        self._document = document
        self._base = os.path.dirname(os.path.abspath(document))
        self._real_base = os.path.realpath(self._base)
        self._policy = policy
        self._rules: _Rules | None = None
        self._resolved: dict[str, _Target] = {}
        self._hosts: dict[str, str | None] = {}

    def resolve(self, reference: str, where: str) -> _Target:
        """Where `reference` (named in the file at `where`) points, or `UnsafeDataError`."""
        target = self._resolved.get(reference)
        if target is None:
            target = self._resolve(reference, where)
            self._resolved[reference] = target
        return target

    def _allowed(self) -> _Rules:
        if self._rules is None:
            self._rules = _Rules.of(self._policy())
        return self._rules

    def _resolve(self, reference: str, where: str) -> _Target:
        path = reference
        if "://" in reference:
            scheme = reference.split("://", 1)[0].lower()
            if scheme != "file":
                return self._remote(reference, scheme, where)
            path = reference[len("file://") :]
            if path.lower().startswith("localhost/"):
                path = path[len("localhost") :]
            if os.name == "nt" and re.match(r"/[A-Za-z]:", path):  # file:///C:/...
                path = path[1:]
        if not path:
            raise MetadataError(f"{self._document}: {where}: empty reference")
        return self._local(reference, path, where)

    def _local(self, reference: str, path: str, where: str) -> _Target:
        expanded = os.path.expanduser(path)
        lexical = os.path.normpath(os.path.join(self._base, expanded))
        real = os.path.realpath(lexical)
        if _inside(real, self._real_base):
            return _Target(real)
        rules = self._allowed()
        if rules.any_local or any(_inside(real, root) for root in rules.roots):
            return _Target(real)
        if not os.path.isabs(expanded) and not _inside(lexical, self._base):
            why = "escapes the reference file's folder with '..'"
        elif _inside(lexical, self._base) or _inside(lexical, self._real_base):
            why = f"leads through a symbolic link to {real}"
        else:
            why = "is outside the reference file's folder"
        folder = os.path.dirname(real)
        raise UnsafeDataError(
            f"{self._document}: {where}: reference {reference!r} {why}. References may point "
            f"only inside {self._real_base} unless allowed. To allow the files under {folder}, "
            f"add that folder to Allowed folders in napari's Preferences (Plugin Preferences > "
            f"Lazy Zarr), to the environment variable {ALLOWED_ROOTS_VARIABLE} or to "
            f"[references] allowed_roots in {settings_path()} "
            f"(in Python: policy=ReferencePolicy(roots=[{folder!r}]))"
        )

    def _remote(self, reference: str, scheme: str, where: str) -> _Target:
        try:
            parts = urlsplit(reference)
            host, port = (parts.hostname or "").lower(), parts.port
        except ValueError as error:
            raise MetadataError(
                f"{self._document}: {where}: malformed URL {reference!r}: {error}"
            ) from error
        rules = self._allowed()
        path = url_path(parts.path)
        if any(loc.covers(scheme, host, port, path) for loc in rules.locations):
            return _Target(reference, remote=True)
        shown_host = f"[{host}]" if ":" in host else host
        location = f"{scheme}://{shown_host}" + ("" if port is None else f":{port}")
        if scheme not in rules.protocols:
            self._refuse_remote(
                reference,
                where,
                f"uses the protocol {scheme!r}, which is not allowed",
                f"add {location!r} (this location) or {scheme!r} (any public {scheme} URL)",
                location,
            )
        if scheme not in _BUCKET_PROTOCOLS:
            if host not in self._hosts:
                self._hosts[host] = _address_problem(host) if host else "no host"
            problem = self._hosts[host]
            if problem is not None:
                self._refuse_remote(
                    reference,
                    where,
                    f"points to {problem}, which allowing the protocol {scheme!r} does not "
                    "allow (loopback, link-local and private addresses must be named)",
                    f"add {location!r}",
                    location,
                )
        return _Target(reference, remote=True)

    def _refuse_remote(
        self, reference: str, where: str, why: str, how: str, location: str
    ) -> NoReturn:
        raise UnsafeDataError(
            f"{self._document}: {where}: reference {reference!r} {why}. To allow it, {how} to "
            "Allowed remotes in napari's Preferences (Plugin Preferences > Lazy Zarr), to "
            f"the environment variable {ALLOWED_REMOTES_VARIABLE} or to [references] "
            f"allowed_remotes in {settings_path()} "
            f"(in Python: policy=ReferencePolicy(remotes=[{location!r}]))"
        )


def _inside(path: str, directory: str) -> bool:
    try:
        return os.path.commonpath([path, directory]) == directory
    except ValueError:  # different drives (Windows)
        return False


# -- kerchunk references as a zarr store -------------------------------------


@dataclass(frozen=True, slots=True)
class _Range:
    """A reference into a file: `length` bytes from `offset` (None: to the end of the file)."""

    target: _Target
    offset: int
    length: int | None
    url: str  # as written in the manifest, for messages

    def text(self) -> str:
        if self.length is None:
            return f"[{self.url!r}]"
        return f"[{self.url!r}, {self.offset}, {self.length}]"


def _window(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
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
class _Inline:
    """Inline data as the manifest writes it; decoded once its key's cap is known."""

    text: str
    base64: bool


@dataclass(frozen=True, slots=True)
class _Refused:
    """A key whose value is refused without reading (too large): reading it fails with `reason`."""

    reason: str


@dataclass(frozen=True, slots=True)
class _Cap:
    """The most bytes a key's value may hold, and what sets it (for messages)."""

    size: int
    what: str

    def refusal(self, holding: str, count: int) -> str:
        return f"{holding} {count:,} bytes, more than {self.what} ({self.size:,}); refused"


class _TooLargeError(OSError):
    """A referenced value is larger than its key's cap (found before reading it)."""


def _is_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in _METADATA_KEYS


def _version_of(path: str) -> FileStamp | None:
    """A local file's version now (None if it cannot be stat'ed: its read will say why)."""
    try:
        return FileStamp.of(os.stat(path))
    except (OSError, ValueError):
        return None


def _chunk_cap(document: dict[str, Any]) -> int | None:
    """The byte cap of one stored chunk (a shard, when sharded) of the array `document` describes.

    Twice the chunk's decoded size plus 1 MiB, as `ZarrChunkSource` allows a
    chunk file; None for a group, or a document that does not say (zarr-python
    refuses to open those). An irregular chunk grid is capped by the whole array.

    Examples
    --------
    >>> _chunk_cap({"zarr_format": 2, "shape": [100, 100], "chunks": [10, 10], "dtype": "<u2"})
    1048976
    >>> _chunk_cap({"zarr_format": 3, "node_type": "group"}) is None
    True
    """
    if document.get("zarr_format") == 3:
        if document.get("node_type") != "array":
            return None
        grid = document.get("chunk_grid")
        grid = grid if isinstance(grid, dict) else {}
        configuration = grid.get("configuration")
        if grid.get("name") == "regular" and isinstance(configuration, dict):
            shape = configuration.get("chunk_shape")
        else:
            shape = document.get("shape")
        dtype = document.get("data_type")
        name = dtype.get("name") if isinstance(dtype, dict) else dtype
    else:
        shape, name = document.get("chunks"), document.get("dtype")
    if not (
        isinstance(shape, list)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        return None
    return 2 * math.prod(shape) * _itemsize(name) + (1 << 20)


def _itemsize(name: Any) -> int:
    """Bytes per element of a zarr dtype; 16 (the largest numeric one) when NumPy cannot tell."""
    if isinstance(name, str):
        if re.fullmatch(r"r[0-9]+", name):  # raw bits (v3)
            return max(1, int(name[1:]) // 8)
        try:
            return max(1, np.dtype(name).itemsize)
        except Exception:  # not a NumPy dtype name: the generous default
            pass
    return 16


def _read_local(
    path: str,
    offset: int,
    length: int | None,
    byte_range: ByteRequest | None,
    cap: _Cap,
    opened: FileStamp | None,
    timeout: float,
) -> bytes:
    """What `byte_range` asks of `length` bytes at `offset` of a local file (None: all of it).

    Read as every local file is (`bounds.read_stamped`: a regular file only,
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
        start, stop = _window(length, byte_range)
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


def _read_remote(
    url: str,
    offset: int,
    length: int | None,
    byte_range: ByteRequest | None,
    cap: _Cap,
    timeouts: Timeouts,
) -> bytes:
    """What `byte_range` asks of a remote reference, within `cap` bytes and `timeouts`.

    A byte range is fetched as asked; a whole file (`length` None) is fetched
    whole, at most `cap` bytes, and then windowed.
    """
    get = _http_get if url.split("://", 1)[0].lower() in ("http", "https") else _fsspec_get
    if length is None:
        whole = get(url, offset, None, cap, timeouts)
        start, stop = _window(len(whole), byte_range)
        return whole[start:stop]
    start, stop = _window(length, byte_range)
    if stop == start:
        return b""
    data = get(url, offset + start, stop - start, cap, timeouts)
    if len(data) != stop - start:
        raise OSError(
            f"{url} holds {len(data)} of the {stop - start} bytes at offset {offset + start} "
            "(the file is shorter than the reference)"
        )
    return data


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


def _http_get(url: str, start: int, count: int | None, cap: _Cap, timeouts: Timeouts) -> bytes:
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
        headers = {"Range": f"bytes={start}-{'' if count is None else start + count - 1}"}
        connection.request("GET", target, headers={**headers, "Accept-Encoding": "identity"})
        sock = connection.sock
        assert sock is not None
        phase = f"no data for {timeouts.read:g} s"
        sock.settimeout(wait())
        response = connection.getresponse()
        _check_answer(url, response, start)
        if response.status == 416:  # the range starts past the end: a short file
            return b""
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


def _fsspec_get(url: str, start: int, count: int | None, cap: _Cap, timeouts: Timeouts) -> bytes:
    """`count` bytes of `url` from `start` (None: to its end, at most `cap`) read with fsspec.

    Only the bytes referenced are asked for; an asynchronous file system
    (s3, gcs, ...) is given `timeouts.total` per call.
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
    except ImportError as error:  # pragma: no cover - fsspec comes with napari
        raise OSError(f"reading {url!r} needs fsspec, which is not installed") from error
    filesystem, path = fsspec.core.url_to_fs(url)
    return filesystem, path


class ManifestStore(SyncReads, Store):
    """A read-only zarr store over a kerchunk reference file (version 0 or 1).

    Every reference is checked when the store is made: its form, its
    ``{{template}}`` names, and where it points (see the module docstring);
    the zarr metadata among them is parsed and vetted (pickle codecs and
    object dtypes refused by name, before zarr-python reads it). A key that
    is not in the references reads as absent (the array's fill value), as in
    kerchunk. Reads are synchronous file reads, so zarr's fused codec
    pipeline decodes in the calling worker thread; thread-safe.

    Every read is bounded. Only regular files are read (the manifest too;
    a FIFO or a device is refused at once, never waited on). A key's value
    may hold at most: for metadata documents, ``MAX_METADATA_BYTES``; for
    an array's chunk (or shard), twice its decoded size plus 1 MiB, as
    `ZarrChunkSource` allows a chunk file. A reference (``[url, offset,
    length]``, a whole file ``[url]``, inline or base64 data) over its key's
    cap is refused before it is read, naming the key; remote references are
    read within the cap and `timeouts`. A referenced local file is read as it
    was when the store was made: one changed since, before or while a read,
    is refused, never served torn (its offsets may describe the old file;
    open the manifest again to read the new one).

    Parameters
    ----------
    manifest
        The reference JSON file (at most `MAX_MANIFEST_BYTES`).
    policy
        Where references may point beyond the manifest's folder (default: the
        user's settings, `ReferencePolicy.from_settings`, read only if a
        reference leaves the folder).
    allow_outside
        Also allow local references anywhere.
    allow_protocols
        Also allow these protocols (``"s3"``, ``"https"``) or locations
        (``"https://example.org"``): ``http``/``https`` read with capped
        requests of our own, other protocols with fsspec.
    timeouts
        Time caps of one remote read (connect, idle read, total); a read over
        a cap raises `LoadTimeoutError`, which is retried as transient.

    Raises
    ------
    StoreNotFoundError, MetadataError
        The file is missing, not a regular file, too large, not JSON (or
        nested too deeply), or malformed as references (or the settings file
        is malformed, when it is needed), or a metadata document cannot be
        read within its cap.
    UnsafeDataError
        A reference is not allowed (the message names the manifest, the key,
        the reference, and how to allow it), or the metadata names a pickle
        codec or an object dtype.
    UnsupportedDataError
        Generated references (``gen``) or an unknown version.

    Examples
    --------
    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> zarray = {"zarr_format": 2, "shape": [4, 4], "chunks": [2, 4], "dtype": "<u2",
    ...           "compressor": None, "filters": None, "fill_value": 0, "order": "C"}
    >>> refs = {".zarray": json.dumps(zarray), "0.0": ["pixels.raw", 0, 1 << 30]}
    >>> with open(os.path.join(folder, "big.json"), "w") as handle:
    ...     json.dump({"version": 1, "refs": refs}, handle)
    >>> store = ManifestStore(os.path.join(folder, "big.json"))
    >>> try:
    ...     store.get_sync("0.0")
    ... except ChunkReadError as error:
    ...     print(str(error).split(": ", 2)[2])  # doctest: +NORMALIZE_WHITESPACE
    reference ['pixels.raw', 0, 1073741824] asks 1,073,741,824 bytes, more than any
    encoding of the chunk could take (1,048,608); refused before reading
    """

    supports_writes: bool = False
    supports_deletes: bool = False
    supports_listing: bool = True

    def __init__(
        self,
        manifest: str | os.PathLike[str],
        *,
        policy: ReferencePolicy | None = None,
        allow_outside: bool = False,
        allow_protocols: Iterable[str] = (),
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        super().__init__(read_only=True)
        if not isinstance(timeouts, Timeouts):
            raise TypeError(f"timeouts must be a Timeouts, got {timeouts!r}")
        self._manifest = os.fspath(manifest)
        self._timeouts = timeouts
        protocols = tuple(allow_protocols)
        self._options = (policy, bool(allow_outside), tuple(sorted(protocols)))
        document, raw = _read_json(self._manifest, "manifest", MAX_MANIFEST_BYTES)
        references, templates = _references(self._manifest, document)
        resolver = _Resolver(self._manifest, _policy_source(policy, allow_outside, protocols))
        self._entries: dict[str, bytes | _Range | _Inline | _Refused] = {
            key: self._entry(key, value, templates, resolver) for key, value in references.items()
        }
        del document, references  # the parsed manifest: can be large, and is no longer needed
        # The referenced files' versions now: reads check them, and they are the identity.
        self._opened = {
            path: _version_of(path)
            for path in sorted(
                {e.target.path for e in self._entries.values() if isinstance(e, _Range)}
            )
            if not _is_url(path)
        }
        self._caps: dict[str, int] = {}  # array path -> cap of one stored chunk (bytes)
        metadata = [key for key in self._entries if _is_metadata(key)]
        for key in metadata:
            self._decode_inline(key)
            cap = _chunk_cap(self._vet_metadata(key))
            if cap is not None:
                self._caps[key.rpartition("/")[0]] = cap
        for key in self._entries:
            self._decode_inline(key)
        digest = hashlib.blake2b(raw, digest_size=16)
        digest.update(repr(sorted(self._opened.items())).encode())
        self._version = digest.hexdigest()

    @property
    def manifest(self) -> str:
        """The reference file's path."""
        return self._manifest

    @property
    def version(self) -> str:
        """The manifest's version: a hash of its bytes and of the referenced local files'
        sizes, modification times and inodes when the store was made (remote files: their
        URLs only, as written in the manifest)."""
        return self._version

    @property
    def timeouts(self) -> Timeouts:
        """The time caps of one remote read."""
        return self._timeouts

    def _cap(self, key: str) -> _Cap:
        """The most bytes `key`'s value may hold: its array's chunk cap, or the metadata cap."""
        if not _is_metadata(key) and key.rsplit("/", 1)[-1] != ".zattrs":
            parts = key.split("/")
            for end in range(len(parts) - 1, -1, -1):
                cap = self._caps.get("/".join(parts[:end]))
                if cap is not None:
                    return _Cap(cap, "any encoding of the chunk could take")
        return _Cap(MAX_METADATA_BYTES, "a metadata document may take")

    def _entry(
        self, key: str, value: Any, templates: dict[str, str], resolver: _Resolver
    ) -> _Range | _Inline:
        where = f"key {key!r}"
        if not isinstance(key, str):
            raise MetadataError(f"{self._manifest}: reference key {key!r} is not a string")
        if isinstance(value, str):
            if value.startswith("base64:"):
                return _Inline(value[len("base64:") :], base64=True)
            return _Inline(value, base64=False)
        if isinstance(value, list) and value and value[0] is None:
            raise MetadataError(
                f"{self._manifest}: {where}: reference {value!r} names no file (kerchunk "
                "writes null when it was given an open file without its URL)"
            )
        if not (
            isinstance(value, list)
            and len(value) in (1, 3)
            and isinstance(value[0], str)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value[1:])
        ):
            raise MetadataError(
                f"{self._manifest}: {where}: reference {value!r} is none of inline text, "
                "'base64:...', [url] or [url, offset, length]"
            )
        url = self._render(value[0], templates, where)
        target = resolver.resolve(url, where)
        if len(value) == 1:
            return _Range(target, 0, None, value[0])
        return _Range(target, value[1], value[2], value[0])

    def _decode_inline(self, key: str) -> None:
        """Inline data as bytes, or refused if its size (known before decoding) is over the cap."""
        entry = self._entries[key]
        if not isinstance(entry, _Inline):
            return
        cap = self._cap(key)
        text = entry.text
        # base64's decoded size follows from its length; plain text is at most 4 bytes a character.
        size = len(text) // 4 * 3 - text[-2:].count("=") if entry.base64 else len(text)
        if size > cap.size:
            what = "base64 data decoding to" if entry.base64 else "inline data of"
            self._entries[key] = _Refused(cap.refusal(what, size) + " before decoding")
            return
        try:
            data = base64.b64decode(text, validate=True) if entry.base64 else text.encode()
        except (binascii.Error, ValueError) as error:
            raise MetadataError(
                f"{self._manifest}: key {key!r}: malformed base64: {error}"
            ) from error
        if len(data) > cap.size:  # text of many-byte characters
            self._entries[key] = _Refused(cap.refusal("inline data of", len(data)))
            return
        self._entries[key] = data

    def _render(self, url: str, templates: dict[str, str], where: str) -> str:
        if "{{" not in url:
            return url

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in templates:
                raise MetadataError(
                    f"{self._manifest}: {where}: reference {url!r} uses the template "
                    f"{name!r}, which 'templates' does not define"
                )
            return templates[name]

        return _TEMPLATE.sub(substitute, url)

    def _vet_metadata(self, key: str) -> dict[str, Any]:
        """Read, parse and vet a metadata document; zarr-python then reads these very bytes.

        Read once (retried like a chunk when it fails transiently) and kept:
        the file cannot change between the vetting and zarr's parsing.
        """
        where = f"{self._manifest}: key {key!r}"
        try:
            raw = _METADATA_RETRY.call(lambda: self._fetch(key, None))
        except ChunkReadError as error:
            detail = str(error).removeprefix(f"{where}: ")  # named once is enough
            raise MetadataError(f"{where}: cannot read the metadata: {detail}") from error
        assert raw is not None
        document = load_json(raw, where=where)
        if not isinstance(document, dict):
            raise MetadataError(f"{where}: metadata is not a JSON object")
        _check_document(where, document)
        self._entries[key] = raw
        return document

    def _fetch(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        where = f"{self._manifest}: key {key!r}"
        if isinstance(entry, bytes):
            start, stop = _window(len(entry), byte_range)
            return entry[start:stop]
        if isinstance(entry, _Refused):
            raise ChunkReadError(f"{where}: {entry.reason}")
        assert not isinstance(entry, _Inline), "inline data is decoded when the store is made"
        cap = self._cap(key)
        if entry.length is not None and entry.length > cap.size:
            raise ChunkReadError(
                f"{where}: {cap.refusal(f'reference {entry.text()} asks', entry.length)} "
                "before reading"
            )
        try:
            if entry.target.remote:
                return _read_remote(
                    entry.target.path, entry.offset, entry.length, byte_range, cap, self._timeouts
                )
            return _read_local(
                entry.target.path,
                entry.offset,
                entry.length,
                byte_range,
                cap,
                self._opened.get(entry.target.path),
                self._timeouts.total,
            )
        except TimeoutError as error:
            raise LoadTimeoutError(f"{where}: reference {entry.text()}: {error}") from error
        except OSError as error:
            raise ChunkReadError(f"{where}: reference {entry.text()}: {error}") from error

    # -- the read surface zarr-python uses ------------------------------------

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        data = self._fetch(key, byte_range)
        if data is None:
            return None
        return (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    async def exists(self, key: str) -> bool:
        return key in self._entries

    async def list(self) -> AsyncIterator[str]:
        for key in list(self._entries):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in list(self._entries):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        if prefix:
            start = prefix + "/"
            names = {k[len(start) :].split("/")[0] for k in self._entries if k.startswith(start)}
        else:
            names = {k.split("/")[0] for k in self._entries}
        for name in sorted(names):
            yield name

    # -- writing: refused ---------------------------------------------------

    def _refuse_write(self, key: str) -> NoReturn:
        raise ReadOnlyError(
            f"{self._manifest}: cannot write {key!r}: kerchunk references are read-only"
        )

    def with_read_only(self, read_only: bool = False) -> ManifestStore:
        if not read_only:
            self._refuse_write("(any key)")
        return self

    async def set(self, key: str, value: Buffer) -> None:
        self._refuse_write(key)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._refuse_write(key)

    async def delete(self, key: str) -> None:
        self._refuse_write(key)

    def delete_sync(self, key: str) -> None:
        self._refuse_write(key)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ManifestStore)
            and other._manifest == self._manifest
            and other._options == self._options
            and other._version == self._version
        )

    def __hash__(self) -> int:
        return hash((ManifestStore, self._manifest, self._options, self._version))

    def __str__(self) -> str:
        return self._manifest

    def __repr__(self) -> str:
        return f"ManifestStore({self._manifest!r})"


def _references(location: str, document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The references and templates of a kerchunk document (version 0: the document itself)."""
    version = document.get("version")
    if version is None and "refs" not in document:
        return document, {}
    if version != 1:
        raise UnsupportedDataError(
            f"{location}: kerchunk reference version {version!r} is not supported (0 or 1)"
        )
    references = document.get("refs")
    if not isinstance(references, dict):
        raise MetadataError(f"{location}: 'refs' is not a JSON object")
    templates = document.get("templates") or {}
    if not isinstance(templates, dict) or not all(isinstance(v, str) for v in templates.values()):
        raise MetadataError(f"{location}: 'templates' is not an object of strings")
    if document.get("gen"):
        raise UnsupportedDataError(
            f"{location}: generated references ('gen') are not supported; "
            "expand them into 'refs' (kerchunk's own tools can)"
        )
    return references, templates


@dataclass(frozen=True, slots=True)
class ManifestIdentity:
    """The identity of a `ManifestSource`: its zarr array's, and the manifest's version.

    Shown as the array's location.

    Attributes
    ----------
    array
        The identity of the array the references describe, as a
        `ZarrChunkSource` over them has it.
    version
        The manifest's version when the source was opened
        (`ManifestStore.version`).

    Examples
    --------
    >>> str(ManifestIdentity("refs.json/data", "6b1f"))
    'refs.json/data'
    """

    array: Hashable
    version: str

    def __str__(self) -> str:
        return str(self.array)


class ManifestSource(ZarrChunkSource):
    """The array described by a kerchunk reference file, as a `ZarrChunkSource`.

    The array's metadata comes from the references; its chunks are read from
    the files they point into and decoded by zarr-python's codec pipeline.
    See `ManifestStore` for the checks made on opening.

    Parameters
    ----------
    manifest
        The reference JSON file.
    path
        The array's path among the references, when they describe a group.
    policy, allow_outside, allow_protocols, timeouts
        Where references may point and the time caps of remote reads, as for
        `ManifestStore`.

    Its `identity` (a `ManifestIdentity`) includes the manifest's version: an
    edited manifest, or one whose referenced local files were rewritten,
    opened again is a new source, so a shared cache never shows its old chunks.

    Examples
    --------
    >>> import json, os, tempfile, numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> np.arange(16, dtype="<u2").tofile(os.path.join(folder, "pixels.raw"))
    >>> zarray = {"zarr_format": 2, "shape": [4, 4], "chunks": [2, 4], "dtype": "<u2",
    ...           "compressor": None, "filters": None, "fill_value": 0, "order": "C"}
    >>> refs = {".zarray": json.dumps(zarray),
    ...         "0.0": ["pixels.raw", 0, 16], "1.0": ["pixels.raw", 16, 16]}
    >>> with open(os.path.join(folder, "pixels.json"), "w") as handle:
    ...     json.dump({"version": 1, "refs": refs}, handle)
    >>> source = ManifestSource(os.path.join(folder, "pixels.json"))
    >>> source.read_chunk((1, 0))
    array([[ 8,  9, 10, 11],
           [12, 13, 14, 15]], dtype=uint16)
    """

    def __init__(
        self,
        manifest: str | os.PathLike[str],
        *,
        path: str = "",
        policy: ReferencePolicy | None = None,
        allow_outside: bool = False,
        allow_protocols: Iterable[str] = (),
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        location = os.fspath(manifest)
        store = ManifestStore(
            location,
            policy=policy,
            allow_outside=allow_outside,
            allow_protocols=allow_protocols,
            timeouts=timeouts,
        )
        full = f"{location}/{path}" if path else location
        node = open_node(store, path, full)
        if isinstance(node, zarr.Group):
            arrays = _group_arrays(node)
            hint = f"; name one of its arrays with path=: {', '.join(map(repr, arrays[:8]))}"
            raise NotAZarrStoreError(
                f"{full}: the references describe a zarr group, not an array"
                + (hint if arrays else " with no arrays")
            )
        super().__init__(node, location=full, timeouts=timeouts, retry=retry)
        self._store = store
        # The store's version covers every file the references read (their stat), so
        # unlike a zarr store's, reopening unchanged references may share cached chunks.
        inner = self._identity
        if isinstance(inner, ZarrIdentity):
            inner = replace(inner, opened=0)
        self._identity = ManifestIdentity(inner, store.version)

    @property
    def store(self) -> ManifestStore:
        """The reference store the array is read from."""
        return self._store

    def __repr__(self) -> str:
        return f"ManifestSource({str(self.identity)!r}, shape={self.shape}, dtype={self.dtype})"


# -- stack files --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StackMember:
    """One array a stack file lists: a zarr store (or kerchunk references) and a path in it."""

    store: str
    path: str = ""


@dataclass(frozen=True, slots=True)
class StackFile:
    """A parsed stack file (``*.zstack.json``): arrays to concatenate or stack into one.

    The format (all paths relative to the file)::

        {
          "zstack": 1,
          "mode": "stack",              # or "concat"
          "axis": 0,                    # optional, default 0; negative counts from the end
          "arrays": ["t0.zarr", {"store": "t1.zarr", "path": "raw"}, "t2.json"],
          "name": "time-lapse",         # optional layer name
          "axis_names": ["t", "y", "x"] # optional, one per axis of the result
        }

    A member naming a ``.json`` file is read as kerchunk references.

    Attributes
    ----------
    location
        The stack file's path.
    mode, axis, members, name, axis_names
        As in the file.
    """

    location: str
    mode: Literal["concat", "stack"]
    axis: int
    members: tuple[StackMember, ...]
    name: str | None = None
    axis_names: tuple[str, ...] | None = None

    def open(
        self,
        *,
        policy: ReferencePolicy | None = None,
        allow_outside: bool = False,
        allow_protocols: Iterable[str] = (),
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> ConcatSource:
        """The composite source: a `StackSource` or a `ConcatSource` of the members.

        Members are resolved and refused as kerchunk references are (see the
        module docstring and `ManifestStore` for the arguments); each is opened
        from its metadata only. The composite's identity is made of its mode,
        axis and members' identities (each with its store's version): a stack
        file edited, or with a member rewritten, opened again is a new source.
        """
        protocols = tuple(allow_protocols)
        resolver = _Resolver(self.location, _policy_source(policy, allow_outside, protocols))
        sources: list[ZarrChunkSource] = []
        for index, member in enumerate(self.members):
            target = resolver.resolve(member.store, f"member {index}")
            named = (member.store.lower(), target.path.lower())
            try:
                if not target.remote and any(n.endswith(".json") for n in named):
                    source: ZarrChunkSource = ManifestSource(
                        target.path,
                        path=member.path,
                        policy=policy,
                        allow_outside=allow_outside,
                        allow_protocols=protocols,
                        timeouts=timeouts,
                    )
                else:
                    source = open_zarr_source(target.path, path=member.path, timeouts=timeouts)
            except (StoreNotFoundError, NotAZarrStoreError, MetadataError) as error:
                # Name the stack file and the member as written: the target may be a link's.
                raise type(error)(
                    f"{self.location}: member {index} ({member.store!r}): {error}"
                ) from error
            sources.append(source)
        if self.mode == "stack":
            return StackSource(sources, self.axis)
        return ConcatSource(sources, self.axis)


def read_stack_file(path: str | os.PathLike[str]) -> StackFile:
    """Parse and check a stack file (see `StackFile`); opens nothing it lists.

    Raises
    ------
    StoreNotFoundError, MetadataError
        The file is missing, not a regular file, larger than
        ``MAX_METADATA_BYTES``, not JSON (or nested too deeply), or not a stack
        file (the message names the field).
    """
    location = os.fspath(path)
    document, _ = _read_json(location, "stack file", MAX_METADATA_BYTES)

    def bad(field: str, problem: str) -> NoReturn:
        raise MetadataError(f"{location}: {field!r} {problem}")

    unknown = sorted(set(document) - {"zstack", "mode", "axis", "arrays", "name", "axis_names"})
    if unknown:
        bad(unknown[0], "is not a stack file field (zstack, mode, axis, arrays, name, axis_names)")
    if document.get("zstack") != 1:
        bad("zstack", f"must be 1 (the format's version), got {document.get('zstack')!r}")
    mode = document.get("mode")
    if mode not in ("concat", "stack"):
        bad("mode", f"must be 'concat' or 'stack', got {mode!r}")
    axis = document.get("axis", 0)
    if not isinstance(axis, int) or isinstance(axis, bool):
        bad("axis", f"must be an integer, got {axis!r}")
    arrays = document.get("arrays")
    if not isinstance(arrays, list) or not arrays:
        bad("arrays", "must be a non-empty list of stores")
    members: list[StackMember] = []
    for entry in arrays:
        if isinstance(entry, str) and entry:
            members.append(StackMember(entry))
        elif (
            isinstance(entry, dict)
            and set(entry) <= {"store", "path"}
            and isinstance(entry.get("store"), str)
            and isinstance(entry.get("path", ""), str)
        ):
            members.append(StackMember(entry["store"], entry.get("path", "")))
        else:
            bad("arrays", f"entry {entry!r} is neither a path nor {{'store': ..., 'path': ...}}")
        if members[-1].store.lower().endswith(STACK_SUFFIX):
            bad("arrays", f"entry {entry!r} is a stack file; stack files cannot be nested")
    name = document.get("name")
    if name is not None and not isinstance(name, str):
        bad("name", f"must be a string, got {name!r}")
    axis_names = document.get("axis_names")
    if axis_names is not None and not (
        isinstance(axis_names, list) and all(isinstance(a, str) for a in axis_names)
    ):
        bad("axis_names", f"must be a list of strings, got {axis_names!r}")
    return StackFile(
        location=location,
        mode=mode,
        axis=axis,
        members=tuple(members),
        name=name,
        axis_names=None if axis_names is None else tuple(axis_names),
    )


def open_stack(
    path: str | os.PathLike[str],
    *,
    policy: ReferencePolicy | None = None,
    allow_outside: bool = False,
    allow_protocols: Iterable[str] = (),
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> ConcatSource:
    """The composite source a stack file describes (`read_stack_file`, then `StackFile.open`).

    Examples
    --------
    >>> import json, os, tempfile, numpy as np, zarr
    >>> folder = tempfile.mkdtemp()
    >>> for t in range(3):
    ...     zarr.create_array(os.path.join(folder, f"t{t}.zarr"), shape=(4, 4), dtype="u1")[:] = t
    >>> with open(os.path.join(folder, "movie.zstack.json"), "w") as handle:
    ...     json.dump({"zstack": 1, "mode": "stack", "arrays": ["t0.zarr", "t1.zarr", "t2.zarr"]},
    ...               handle)
    >>> movie = open_stack(os.path.join(folder, "movie.zstack.json"))
    >>> movie.shape, int(movie.read_chunk((2, 0, 0)).max())
    ((3, 4, 4), 2)
    """
    return read_stack_file(path).open(
        policy=policy,
        allow_outside=allow_outside,
        allow_protocols=allow_protocols,
        timeouts=timeouts,
    )
