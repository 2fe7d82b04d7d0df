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
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import json
import os
import posixpath
import re
import socket
import sys
import threading
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn
from urllib.parse import unquote, urlsplit

import zarr
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import default_buffer_prototype

from napari_lazy_zarr.core.composite import ConcatSource, StackSource
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    MetadataError,
    NotAZarrStoreError,
    ReadOnlyError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.zarr_source import (
    ZarrChunkSource,
    _check_document,
    _group_arrays,
    _is_url,
    open_node,
    open_zarr_source,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Mapping

    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = [
    "ALLOWED_REMOTES_VARIABLE",
    "ALLOWED_ROOTS_VARIABLE",
    "SETTINGS_VARIABLE",
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


def reference_file_kind(path: str | os.PathLike[str]) -> ReferenceFileKind | None:
    """``"stack"`` for a ``*.zstack.json`` file, ``"kerchunk"`` for kerchunk references, else None.

    Cheap (a ``stat`` and at most 64 KiB read) and never raises: a JSON file
    is taken for kerchunk references when it starts like a JSON object naming
    ``refs`` or zarr metadata keys. Nothing is validated here.

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
        with open(location, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
        if head.lstrip().startswith(b"{") and any(m in head for m in _KERCHUNK_MARKERS):
            return "kerchunk"
        return None
    except Exception:  # the napari reader hook must get an answer, whatever it is handed
        return None


def _read_json(location: str, what: str) -> dict[str, Any]:
    try:
        with open(location, "rb") as handle:
            document = json.loads(handle.read())
    except FileNotFoundError as error:
        raise StoreNotFoundError(f"{location}: no such file") from error
    except OSError as error:
        raise MetadataError(f"{location}: cannot read the {what}: {error}") from error
    except ValueError as error:
        raise MetadataError(f"{location}: malformed JSON in the {what}: {error}") from error
    if not isinstance(document, dict):
        raise MetadataError(f"{location}: the {what} is not a JSON object")
    return document


# -- where references may point -----------------------------------------------

ALLOWED_ROOTS_VARIABLE: Final = "NAPARI_LAZY_ZARR_ALLOWED_ROOTS"
"""Environment variable: local folders references may point into (separated like ``PATH``)."""
ALLOWED_REMOTES_VARIABLE: Final = "NAPARI_LAZY_ZARR_ALLOWED_REMOTES"
"""Environment variable: protocols and locations references may reach (comma-separated)."""
SETTINGS_VARIABLE: Final = "NAPARI_LAZY_ZARR_SETTINGS"
"""Environment variable: the settings file to use instead of the default one."""
# Protocols whose URL "host" is a bucket or container, not a network address.
_BUCKET_PROTOCOLS: Final = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "memory"}
)
_PROTOCOL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_SETTINGS_KEYS: Final = ("allowed_roots", "allowed_remotes")
_RESOLVE_TIMEOUT: Final = 2.0  # seconds a host name may take to resolve before it is refused


def settings_path(environ: Mapping[str, str] | None = None) -> str:
    """The plugin's settings file (it need not exist).

    ``$NAPARI_LAZY_ZARR_SETTINGS`` when set, else ``napari-lazy-zarr/settings.toml``
    in the user's configuration folder, beside napari's own: ``$XDG_CONFIG_HOME``
    or ``~/.config`` on Linux, ``~/Library/Application Support`` on macOS,
    ``%APPDATA%`` on Windows.

    Examples
    --------
    >>> settings_path({"NAPARI_LAZY_ZARR_SETTINGS": "/etc/lazy-zarr.toml"})
    '/etc/lazy-zarr.toml'
    """
    env = os.environ if environ is None else environ
    chosen = env.get(SETTINGS_VARIABLE)
    if chosen:
        return os.path.expanduser(chosen)
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        base = env.get("APPDATA") or os.path.join(home, "AppData", "Roaming")
    elif sys.platform == "darwin":
        base = os.path.join(home, "Library", "Application Support")
    else:
        base = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(base, "napari-lazy-zarr", "settings.toml")


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
            _parse_remote(entry)

    @classmethod
    def from_settings(cls, environ: Mapping[str, str] | None = None) -> ReferencePolicy:
        """The user's policy: the environment variables and the settings file, together.

        ``NAPARI_LAZY_ZARR_ALLOWED_ROOTS`` lists folders separated by
        ``os.pathsep`` (``:``; ``;`` on Windows); ``NAPARI_LAZY_ZARR_ALLOWED_REMOTES``
        lists protocols and locations separated by commas or spaces. The
        settings file (`settings_path`) may hold the same under ``[references]``::

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
        env = os.environ if environ is None else environ
        roots = [
            os.path.abspath(os.path.expanduser(root.strip()))
            for root in env.get(ALLOWED_ROOTS_VARIABLE, "").split(os.pathsep)
            if root.strip()
        ]
        remotes = [r for r in re.split(r"[,\s]+", env.get(ALLOWED_REMOTES_VARIABLE, "")) if r]
        for entry in remotes:
            _check_remote(entry, ALLOWED_REMOTES_VARIABLE)
        path = settings_path(env)
        table = _settings_table(path)
        folder = os.path.dirname(os.path.abspath(path))
        roots += [
            os.path.join(folder, os.path.expanduser(root)) for root in table["allowed_roots"]
        ]
        for entry in table["allowed_remotes"]:
            _check_remote(entry, f"{path}: allowed_remotes")
        remotes += table["allowed_remotes"]
        return cls(roots=tuple(roots), remotes=tuple(remotes))

    def union(self, other: ReferencePolicy) -> ReferencePolicy:
        """What either policy allows."""
        return ReferencePolicy(
            roots=tuple(dict.fromkeys((*self.roots, *other.roots))),
            remotes=tuple(dict.fromkeys((*self.remotes, *other.remotes))),
            any_local=self.any_local or other.any_local,
        )


def _settings_table(path: str) -> dict[str, list[str]]:
    """The settings file's ``[references]`` lists (empty when there is no file)."""
    empty: dict[str, list[str]] = {key: [] for key in _SETTINGS_KEYS}
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        return empty
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise MetadataError(
            f"{path}: cannot read the napari-lazy-zarr settings: {error}"
        ) from error
    table = document.get("references", {})
    if not isinstance(table, dict):
        raise MetadataError(f"{path}: 'references' must be a table ([references])")
    unknown = sorted(set(table) - set(_SETTINGS_KEYS))
    if unknown:
        raise MetadataError(
            f"{path}: [references] {unknown[0]!r} is not a setting ({', '.join(_SETTINGS_KEYS)})"
        )
    for key in _SETTINGS_KEYS:
        value = table.get(key, [])
        if not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
            raise MetadataError(f"{path}: [references] {key} must be a list of strings")
        empty[key] = value
    return empty


@dataclass(frozen=True, slots=True)
class _Location:
    """A remote location a policy names: URLs of `scheme` on `host` (and `port`) under `path`."""

    scheme: str
    host: str
    port: int | None
    path: str

    def covers(self, scheme: str, host: str, port: int | None, path: str) -> bool:
        if (scheme, host) != (self.scheme, self.host):
            return False
        if self.port is not None and port != self.port:
            return False
        return not self.path or path == self.path or path.startswith(self.path + "/")


def _parse_remote(entry: str) -> str | _Location:
    """A remote entry as a protocol name (lower case) or a `_Location`; ValueError if neither."""
    text = entry.strip() if isinstance(entry, str) else ""
    protocol = text.removesuffix("://")
    if _PROTOCOL.fullmatch(protocol):
        if protocol.lower() == "file":
            raise ValueError(
                f"{entry!r}: local files are allowed by folder (roots), not by protocol"
            )
        return protocol.lower()
    try:
        parts = urlsplit(text)
        scheme, host, port = parts.scheme, (parts.hostname or "").lower(), parts.port
    except ValueError:  # e.g. a port that is not a number
        scheme, host, port = "", "", None
    if not (scheme and host and _PROTOCOL.fullmatch(scheme)):
        raise ValueError(
            f"{entry!r} is neither a protocol ('s3', 'https') nor a location "
            "('s3://bucket', 'https://host', 'http://host:port/path')"
        )
    return _Location(scheme.lower(), host, port, _url_path(parts.path))


def _check_remote(entry: str, source: str) -> None:
    try:
        _parse_remote(entry)
    except ValueError as error:
        raise MetadataError(f"{source}: {error}") from error


def _url_path(path: str) -> str:
    """A URL path normalised for comparison (``..`` and ``%2e`` cannot climb out of a prefix)."""
    if not path or path == "/":
        return ""
    return posixpath.normpath("/" + unquote(path)).rstrip("/")


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
    locations: tuple[_Location, ...]
    any_local: bool

    @classmethod
    def of(cls, policy: ReferencePolicy) -> _Rules:
        parsed = [_parse_remote(entry) for entry in policy.remotes]
        return cls(
            roots=tuple(os.path.realpath(os.path.expanduser(root)) for root in policy.roots),
            protocols=frozenset(p for p in parsed if isinstance(p, str)),
            locations=tuple(p for p in parsed if isinstance(p, _Location)),
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
            f"add that folder to the environment variable {ALLOWED_ROOTS_VARIABLE} or to "
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
        path = _url_path(parts.path)
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


def _read_bytes(target: _Target, start: int, count: int) -> bytes:
    if target.remote:
        filesystem, path = _remote(target.path)
        data: bytes = filesystem.cat_file(path, start=start, end=start + count)
        return data
    with open(target.path, "rb") as handle:
        handle.seek(start)
        return handle.read(count)


def _size(target: _Target) -> int:
    if target.remote:
        filesystem, path = _remote(target.path)
        return int(filesystem.size(path))
    return os.path.getsize(target.path)


def _remote(url: str) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError as error:  # pragma: no cover - fsspec comes with napari
        raise OSError(f"reading {url!r} needs fsspec, which is not installed") from error
    filesystem, path = fsspec.core.url_to_fs(url)
    return filesystem, path


class ManifestStore(Store):
    """A read-only zarr store over a kerchunk reference file (version 0 or 1).

    Every reference is checked when the store is made: its form, its
    ``{{template}}`` names, and where it points (see the module docstring);
    the zarr metadata among them is parsed and vetted (pickle codecs and
    object dtypes refused by name, before zarr-python reads it). A key that
    is not in the references reads as absent (the array's fill value), as in
    kerchunk. Reads are synchronous file reads, so zarr's fused codec
    pipeline decodes in the calling worker thread; thread-safe.

    Parameters
    ----------
    manifest
        The reference JSON file.
    policy
        Where references may point beyond the manifest's folder (default: the
        user's settings, `ReferencePolicy.from_settings`, read only if a
        reference leaves the folder).
    allow_outside
        Also allow local references anywhere.
    allow_protocols
        Also allow these protocols (``"s3"``, ``"https"``) or locations
        (``"https://example.org"``), read with fsspec.

    Raises
    ------
    StoreNotFoundError, MetadataError
        The file is missing, not JSON, or malformed as references (or the
        settings file is malformed, when it is needed).
    UnsafeDataError
        A reference is not allowed (the message names the manifest, the key,
        the reference, and how to allow it), or the metadata names a pickle
        codec or an object dtype.
    UnsupportedDataError
        Generated references (``gen``) or an unknown version.
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
    ) -> None:
        super().__init__(read_only=True)
        self._manifest = os.fspath(manifest)
        protocols = tuple(allow_protocols)
        self._options = (policy, bool(allow_outside), tuple(sorted(protocols)))
        references, templates = _references(self._manifest, _read_json(self._manifest, "manifest"))
        resolver = _Resolver(self._manifest, _policy_source(policy, allow_outside, protocols))
        self._entries: dict[str, bytes | _Range] = {
            key: self._entry(key, value, templates, resolver) for key, value in references.items()
        }
        for key in self._entries:
            if key.rsplit("/", 1)[-1] in _METADATA_KEYS:
                self._vet_metadata(key)

    @property
    def manifest(self) -> str:
        """The reference file's path."""
        return self._manifest

    def _entry(
        self, key: str, value: Any, templates: dict[str, str], resolver: _Resolver
    ) -> bytes | _Range:
        where = f"key {key!r}"
        if not isinstance(key, str):
            raise MetadataError(f"{self._manifest}: reference key {key!r} is not a string")
        if isinstance(value, str):
            if not value.startswith("base64:"):
                return value.encode()
            try:
                return base64.b64decode(value[len("base64:") :], validate=True)
            except (binascii.Error, ValueError) as error:
                raise MetadataError(
                    f"{self._manifest}: {where}: malformed base64: {error}"
                ) from error
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

    def _vet_metadata(self, key: str) -> None:
        raw = self._fetch(key, None)
        assert raw is not None
        where = f"{self._manifest}: key {key!r}"
        try:
            document = json.loads(raw)
        except ValueError as error:
            raise MetadataError(f"{where}: malformed JSON: {error}") from error
        if not isinstance(document, dict):
            raise MetadataError(f"{where}: metadata is not a JSON object")
        _check_document(where, document)

    def _fetch(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if isinstance(entry, bytes):
            start, stop = _window(len(entry), byte_range)
            return entry[start:stop]
        try:
            length = entry.length
            if length is None:
                length = _size(entry.target) - entry.offset
            start, stop = _window(length, byte_range)
            data = _read_bytes(entry.target, entry.offset + start, stop - start)
            if len(data) != stop - start:
                raise OSError(
                    f"{entry.target.path} holds {len(data)} of the {stop - start} bytes "
                    f"at offset {entry.offset + start} (the file is shorter than the reference)"
                )
        except OSError as error:
            raise ChunkReadError(
                f"{self._manifest}: key {key!r}: reference {entry.text()}: {error}"
            ) from error
        return data

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

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        return await asyncio.to_thread(
            self.get_sync, key, prototype=prototype, byte_range=byte_range
        )

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

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
        )

    def __hash__(self) -> int:
        return hash((ManifestStore, self._manifest, self._options))

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
    policy, allow_outside, allow_protocols
        Where references may point, as for `ManifestStore`.

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
    ) -> None:
        location = os.fspath(manifest)
        store = ManifestStore(
            location, policy=policy, allow_outside=allow_outside, allow_protocols=allow_protocols
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
        super().__init__(node, location=full)
        self._store = store

    @property
    def store(self) -> ManifestStore:
        """The reference store the array is read from."""
        return self._store

    def __repr__(self) -> str:
        return f"ManifestSource({self.identity!r}, shape={self.shape}, dtype={self.dtype})"


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
    ) -> ConcatSource:
        """The composite source: a `StackSource` or a `ConcatSource` of the members.

        Members are resolved and refused as kerchunk references are (see the
        module docstring and `ManifestStore` for the arguments); each is opened
        from its metadata only.
        """
        protocols = tuple(allow_protocols)
        resolver = _Resolver(self.location, _policy_source(policy, allow_outside, protocols))
        sources: list[ZarrChunkSource] = []
        for index, member in enumerate(self.members):
            target = resolver.resolve(member.store, f"member {index}")
            if not target.remote and target.path.lower().endswith(".json"):
                sources.append(
                    ManifestSource(
                        target.path,
                        path=member.path,
                        policy=policy,
                        allow_outside=allow_outside,
                        allow_protocols=protocols,
                    )
                )
            else:
                sources.append(open_zarr_source(target.path, path=member.path))
        if self.mode == "stack":
            return StackSource(sources, self.axis)
        return ConcatSource(sources, self.axis)


def read_stack_file(path: str | os.PathLike[str]) -> StackFile:
    """Parse and check a stack file (see `StackFile`); opens nothing it lists.

    Raises
    ------
    StoreNotFoundError, MetadataError
        The file is missing, not JSON, or not a stack file (the message names
        the field).
    """
    location = os.fspath(path)
    document = _read_json(location, "stack file")

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
        policy=policy, allow_outside=allow_outside, allow_protocols=allow_protocols
    )
