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

Paths in both resolve relative to the file's own directory. A reference that
is absolute, escapes that directory (``..``, or a symbolic link pointing out of
it) or names another protocol (``http``, ``s3``, ...) is refused with
`UnsafeDataError` unless explicitly allowed (``allow_outside=True``,
``allow_protocols=("s3",)``): a reference file from elsewhere must not make the
viewer read, and show, arbitrary files of the person opening it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

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
    from collections.abc import AsyncIterator, Iterable

    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = [
    "ManifestSource",
    "ManifestStore",
    "StackFile",
    "StackMember",
    "open_stack",
    "read_stack_file",
    "reference_file_kind",
]

type ReferenceFileKind = Literal["kerchunk", "stack"]

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


# -- where references point --------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    """A resolved reference: a local file's real path, or a URL of an allowed protocol."""

    path: str
    remote: bool = False


class _Resolver:
    """Resolves the paths a reference file names, refusing what it may not reach.

    Resolutions are remembered: a manifest's many references usually name a
    few files.
    """

    def __init__(
        self, document: str, *, allow_outside: bool, allow_protocols: Iterable[str]
    ) -> None:
        self._document = document
        self._base = os.path.dirname(os.path.abspath(document))
        self._real_base = os.path.realpath(self._base)
        self._allow_outside = allow_outside
        self._protocols = frozenset(p.lower().removesuffix("://") for p in allow_protocols)
        self._resolved: dict[str, _Target] = {}

    def resolve(self, reference: str, where: str) -> _Target:
        """Where `reference` (named in the file at `where`) points, or `UnsafeDataError`."""
        target = self._resolved.get(reference)
        if target is None:
            target = self._resolve(reference, where)
            self._resolved[reference] = target
        return target

    def _refuse(self, reference: str, where: str, why: str, allow: str) -> NoReturn:
        raise UnsafeDataError(
            f"{self._document}: {where}: reference {reference!r} {why}; references must stay "
            f"inside {self._real_base} unless allowed explicitly ({allow})"
        )

    def _resolve(self, reference: str, where: str) -> _Target:
        path = reference
        if "://" in reference:
            scheme = reference.split("://", 1)[0].lower()
            if scheme != "file":
                if scheme not in self._protocols:
                    self._refuse(
                        reference,
                        where,
                        f"uses the protocol {scheme!r}",
                        f"allow_protocols=({scheme!r},)",
                    )
                return _Target(reference, remote=True)
            path = reference[len("file://") :]
        if not path:
            raise MetadataError(f"{self._document}: {where}: empty reference")
        if os.path.isabs(path) or path.startswith("~"):
            if not self._allow_outside:
                self._refuse(reference, where, "is an absolute path", "allow_outside=True")
            return _Target(os.path.realpath(os.path.expanduser(path)))
        lexical = os.path.normpath(os.path.join(self._base, path))
        real = os.path.realpath(lexical)
        if not self._allow_outside and not _inside(real, self._real_base):
            why = (
                "escapes the directory with '..'"
                if not _inside(lexical, self._base)
                else f"leads through a symbolic link to {real}"
            )
            self._refuse(reference, where, why, "allow_outside=True")
        return _Target(real)


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


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
    allow_outside
        Allow local references outside the manifest's directory (absolute
        paths, ``..``, symbolic links leading out).
    allow_protocols
        Protocols other than local files to allow (``"s3"``, ``"https"``, ...),
        read with fsspec.

    Raises
    ------
    StoreNotFoundError, MetadataError
        The file is missing, not JSON, or malformed as references.
    UnsafeDataError
        A reference is not allowed, or the metadata names a pickle codec or an
        object dtype; the message names the manifest, the key and the reference.
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
        allow_outside: bool = False,
        allow_protocols: Iterable[str] = (),
    ) -> None:
        super().__init__(read_only=True)
        self._manifest = os.fspath(manifest)
        self._options = (bool(allow_outside), tuple(sorted(allow_protocols)))
        references, templates = _references(self._manifest, _read_json(self._manifest, "manifest"))
        resolver = _Resolver(
            self._manifest, allow_outside=allow_outside, allow_protocols=allow_protocols
        )
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
    allow_outside, allow_protocols
        As for `ManifestStore`.

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
        allow_outside: bool = False,
        allow_protocols: Iterable[str] = (),
    ) -> None:
        location = os.fspath(manifest)
        store = ManifestStore(
            location, allow_outside=allow_outside, allow_protocols=allow_protocols
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
        self, *, allow_outside: bool = False, allow_protocols: Iterable[str] = ()
    ) -> ConcatSource:
        """The composite source: a `StackSource` or a `ConcatSource` of the members.

        Members are resolved and refused as kerchunk references are (see the
        module docstring); each is opened from its metadata only.
        """
        resolver = _Resolver(
            self.location, allow_outside=allow_outside, allow_protocols=allow_protocols
        )
        sources: list[ZarrChunkSource] = []
        for index, member in enumerate(self.members):
            target = resolver.resolve(member.store, f"member {index}")
            if not target.remote and target.path.lower().endswith(".json"):
                sources.append(
                    ManifestSource(
                        target.path,
                        path=member.path,
                        allow_outside=allow_outside,
                        allow_protocols=allow_protocols,
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
    return read_stack_file(path).open(allow_outside=allow_outside, allow_protocols=allow_protocols)
