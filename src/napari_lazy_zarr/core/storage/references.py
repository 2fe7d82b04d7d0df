"""kerchunk references served as a read-only zarr store (`ManifestStore`).

A kerchunk reference file (version 0, and version 1 with ``templates``) maps
zarr keys to inline data, ``[url]`` (a whole file) or ``[url, offset, length]``
(a byte range of a file); the array's zarr metadata is itself one of the
references. `ManifestStore` serves them so that zarr-python's own codec
pipeline decodes the chunks (`napari_lazy_zarr.core.sources.manifest.ManifestSource` is
the chunk source over it).

Relative paths resolve against the reference file's folder; a reference that
resolves inside that folder is accepted, anything else is refused with
`UnsafeDataError` unless a `ReferencePolicy` allows it (`Resolver`).

Every read is bounded, whatever the files say: only regular files are read
(`napari_lazy_zarr.core.storage.files`), the reference file up to
`MAX_MANIFEST_BYTES`, `MAX_MANIFEST_REFERENCES` and a JSON depth limit (both
counted before it is parsed), offsets and lengths below 2**63, each reference up to its key's
byte cap (checked before reading or decoding) and, when remote, within
`Timeouts`. A referenced file changed since the references were opened is
refused, never served torn or under the old version's identity.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, NoReturn
from urllib.parse import urlsplit

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    Store,
)
from zarr.buffer import default_buffer_prototype

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LoadTimeoutError,
    MetadataError,
    ReadOnlyError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.remote_values import RemoteLocation, parse_remote, url_path
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts, settings_path
from napari_lazy_zarr.core.storage._fetch import Cap, read_local, read_remote, window
from napari_lazy_zarr.core.storage._sync import SyncReads
from napari_lazy_zarr.core.storage.files import (
    FileStamp,
    load_json,
    read_regular_file,
)
from napari_lazy_zarr.core.storage.policy import (
    ALLOWED_REMOTES_VARIABLE,
    ALLOWED_ROOTS_VARIABLE,
    BUCKET_PROTOCOLS,
    ReferencePolicy,
    address_problem,
)
from napari_lazy_zarr.core.storage.remote import RemoteFiles
from napari_lazy_zarr.core.storage.retry import RetryPolicy
from napari_lazy_zarr.core.storage.vetting import (
    MAX_METADATA_BYTES,
    check_document,
    is_url,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable

    from zarr.abc.buffer import Buffer, BufferPrototype

__all__ = [
    "MAX_MANIFEST_BYTES",
    "MAX_MANIFEST_REFERENCES",
    "ManifestStore",
    "Resolver",
    "policy_source",
    "read_json",
]


# Keys whose values zarr-python parses as array or group metadata: vetted before it does.
_METADATA_KEYS: Final = frozenset({".zarray", ".zgroup", "zarr.json", ".zmetadata"})
_METADATA_TAILS: Final = tuple(_METADATA_KEYS)  # for str.endswith, before the exact test


_TEMPLATE: Final = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


_METADATA_RETRY: Final = RetryPolicy()  # metadata read at open, retried as chunks are
_DOCUMENT_MEMBERS: Final = 1024  # members of a manifest besides its references (templates...)


MAX_MANIFEST_REFERENCES: Final = 200_000
"""Reference files with more references than this are refused, counted before parsing.

Measured (2-core machine, busy; ``[url, offset, length]`` references into one
file): opening 200,000 takes 1.8 s and +85 MiB at its peak (4.5 s before the
per-reference fast path); each reference keeps some 380 B of Python objects
(its key, its entry, its offset). 1,000,000 took 13-22 s and +400 MiB before
this cap; now they are refused in 0.3 s (+72 MiB: the file read, to count).
A store of more chunks is better served as a zarr store (or kerchunk's Parquet
references, which this reader does not take).
"""
MAX_MANIFEST_BYTES: Final = 64 << 20
"""Reference files larger than this are refused before reading (`MAX_MANIFEST_REFERENCES`
references take 10-30 MB; JSON parsed takes several times its size in memory)."""

_OFFSET_LIMIT: Final = 1 << 63  # offsets and lengths are below it: a file offset is an off_t
_MEMBER_SKELETON: Final = bytes(range(256)).translate(None, b'":')  # deleted: all but '"' and ':'


def json_members(data: bytes) -> int:
    r"""How many members all the objects of JSON text `data` have, counted without parsing it.

    The colons outside strings: escaped backslashes and quotes removed, then
    all but quotes and colons (`bytes.replace`, `bytes.translate`), then a
    quote parity in NumPy; no Python loop per character and no object per
    token, so a 35 MB manifest of 1,000,000 references costs 0.1 s and a
    few times its references in bytes.

    Examples
    --------
    >>> json_members(rb'{"a": 1, "b": {"c:d": "x:y"}, "e\\": ["f\":"]}')
    4
    """
    skeleton = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _MEMBER_SKELETON)
    codes = np.frombuffer(skeleton, dtype=np.uint8)
    quotes = (codes == ord('"')).view(np.uint8)
    inside = np.bitwise_xor.accumulate(quotes)  # 1 from an opening quote to its closing one
    return int(np.count_nonzero((codes == ord(":")) & (inside == 0)))


def read_json(location: str, what: str, limit: int) -> tuple[dict[str, Any], bytes]:
    """A JSON object from a small local file (a manifest, a stack file), with its bytes.

    Read as every local file is (`read_regular_file`: a regular file
    only, at most `limit` bytes, never torn) and parsed with a depth limit
    (`load_json`).

    Raises
    ------
    StoreNotFoundError
        No such file.
    MetadataError
        Not a regular file (a FIFO, a device, a directory), larger than
        `limit`, malformed or too deeply nested JSON, or not an object; the
        message names the file.
    """
    raw = read_regular_file(location, limit=limit, error=MetadataError, settle=False)
    return _json_object(raw, location, what), raw


def _json_object(raw: bytes, location: str, what: str) -> dict[str, Any]:
    document = load_json(raw, where=f"{location}: the {what}")
    if not isinstance(document, dict):
        raise MetadataError(f"{location}: the {what} is not a JSON object")
    return document


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


def policy_source(
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


class Resolver:
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
            f"napari-lazy-zarr), to the environment variable {ALLOWED_ROOTS_VARIABLE} or to "
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
        if scheme not in BUCKET_PROTOCOLS:
            if host not in self._hosts:
                self._hosts[host] = address_problem(host) if host else "no host"
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
            "Allowed remotes in napari's Preferences (Plugin Preferences > napari-lazy-zarr), to "
            f"the environment variable {ALLOWED_REMOTES_VARIABLE} or to [references] "
            f"allowed_remotes in {settings_path()} "
            f"(in Python: policy=ReferencePolicy(remotes=[{location!r}]))"
        )


def _inside(path: str, directory: str) -> bool:
    try:
        return os.path.commonpath([path, directory]) == directory
    except ValueError:  # different drives (Windows)
        return False


class _Range(NamedTuple):
    """A reference into a file: `length` bytes from `offset` (None: to the end of the file).

    A named tuple, not a frozen dataclass: one is made per reference, and a frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field) took 40% of opening.
    """

    target: _Target
    offset: int
    length: int | None
    url: str  # as written in the manifest, for messages (one string per distinct URL)

    def text(self) -> str:
        if self.length is None:
            return f"[{self.url!r}]"
        return f"[{self.url!r}, {self.offset}, {self.length}]"


@dataclass(frozen=True, slots=True)
class _Inline:
    """Inline data as the manifest writes it; decoded once its key's cap is known."""

    text: str
    base64: bool


@dataclass(frozen=True, slots=True)
class _Refused:
    """A key whose value is refused without reading (too large): reading it fails with `reason`."""

    reason: str


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
        raw = read_regular_file(
            self._manifest, limit=MAX_MANIFEST_BYTES, error=MetadataError, settle=False
        )
        members = json_members(raw)  # the references, and a few more (templates, version)
        if members > MAX_MANIFEST_REFERENCES + _DOCUMENT_MEMBERS:
            raise MetadataError(
                f"{self._manifest}: about {members:,} references (JSON members), more than the "
                f"{MAX_MANIFEST_REFERENCES:,} this reader opens; refused before parsing"
            )
        document = _json_object(raw, self._manifest, "manifest")
        references, templates = _references(self._manifest, document)
        if len(references) > MAX_MANIFEST_REFERENCES:
            raise MetadataError(
                f"{self._manifest}: {len(references):,} references, more than the "
                f"{MAX_MANIFEST_REFERENCES:,} this reader opens"
            )
        resolver = Resolver(self._manifest, policy_source(policy, allow_outside, protocols))
        self._targets: dict[str, tuple[str, _Target]] = {}  # URL as written -> it, resolved
        self._entries: dict[str, bytes | _Range | _Inline | _Refused] = {
            key: self._entry(key, value, templates, resolver) for key, value in references.items()
        }
        del document, references  # the parsed manifest: can be large, and is no longer needed
        # The referenced files' versions now: reads check them, and they are the identity.
        self._opened = {
            path: _version_of(path)
            for path in sorted({target.path for _, target in self._targets.values()})
            if not is_url(path)
        }
        del self._targets
        self._caps: dict[str, int] = {}  # array path -> cap of one stored chunk (bytes)
        # The bounded remote stores of the referenced files, one per origin or bucket (they
        # remember each file's size as an answer gave it: later answers must agree).
        self._files = RemoteFiles(timeouts)
        metadata = [k for k in self._entries if k.endswith(_METADATA_TAILS) and _is_metadata(k)]
        for key in metadata:
            self._decode_inline(key)
            cap = _chunk_cap(self._vet_metadata(key))
            if cap is not None:
                self._caps[key.rpartition("/")[0]] = cap
        for key in [k for k, e in self._entries.items() if type(e) is _Inline]:
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

    def _cap(self, key: str) -> Cap:
        """The most bytes `key`'s value may hold: its array's chunk cap, or the metadata cap."""
        if not _is_metadata(key) and key.rsplit("/", 1)[-1] != ".zattrs":
            parts = key.split("/")
            for end in range(len(parts) - 1, -1, -1):
                cap = self._caps.get("/".join(parts[:end]))
                if cap is not None:
                    return Cap(cap, "any encoding of the chunk could take")
        return Cap(MAX_METADATA_BYTES, "a metadata document may take")

    def _entry(
        self, key: str, value: Any, templates: dict[str, str], resolver: Resolver
    ) -> _Range | _Inline:
        if (
            type(value) is list
            and len(value) == 3
            and type(value[0]) is str
            and type(value[1]) is int
            and type(value[2]) is int
            and 0 <= value[1] < _OFFSET_LIMIT
            and 0 <= value[2] < _OFFSET_LIMIT
            and (known := self._targets.get(value[0])) is not None
        ):  # the usual reference to a file seen before: no message built, no generator run
            return _Range(known[1], value[1], value[2], known[0])
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
        if any(n >= _OFFSET_LIMIT for n in value[1:]):
            raise MetadataError(
                f"{self._manifest}: {where}: reference {value!r}: offsets and lengths must "
                "be below 2**63 (no file holds more)"
            )
        target = resolver.resolve(self._render(value[0], templates, where), where)
        # One string per distinct URL (the parsed manifest's copies go with it), and its target.
        url, _ = self._targets.setdefault(value[0], (value[0], target))
        if len(value) == 1:
            return _Range(target, 0, None, url)
        return _Range(target, value[1], value[2], url)

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
        check_document(where, document)
        self._entries[key] = raw
        return document

    def _fetch(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        where = f"{self._manifest}: key {key!r}"
        if isinstance(entry, bytes):
            start, stop = window(len(entry), byte_range)
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
                return read_remote(
                    entry.target.path,
                    entry.offset,
                    entry.length,
                    byte_range,
                    cap,
                    self._timeouts,
                    self._files,
                )
            return read_local(
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

    def close(self) -> None:
        """Close the connections to the referenced remote files (a later read opens anew)."""
        super().close()
        self._files.close()

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
