"""Stack files (``*.zstack.json``): a list of zarr arrays (or kerchunk references) to
concatenate or stack into one array, and the sniffing that tells a stack file from
kerchunk references (`reference_file_kind`).

A stack file is a format, not a source: `read_stack_file` parses and checks it
(opening nothing it lists), and `StackFile.open` opens each member from its
metadata (a `ZarrChunkSource`, or a `ManifestSource` for a ``.json`` member)
and composes them (`StackSource`, `ConcatSource`). Members resolve against the
stack file's folder, and are refused outside it, as kerchunk references are
(see `napari_lazy_zarr.core.sources.manifest` and `ReferencePolicy`); the file
itself is read bounded (a regular file, at most ``MAX_METADATA_BYTES``, JSON
depth capped).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, NoReturn

from napari_lazy_zarr.core.errors import (
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
)
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.sources.composite import ConcatSource, StackSource
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource, open_zarr_source
from napari_lazy_zarr.core.storage.files import read_regular_file
from napari_lazy_zarr.core.storage.references import Resolver, policy_source, read_json
from napari_lazy_zarr.core.storage.vetting import MAX_METADATA_BYTES, is_url

if TYPE_CHECKING:
    from collections.abc import Iterable

    from napari_lazy_zarr.core.storage.policy import ReferencePolicy


__all__ = [
    "STACK_SUFFIX",
    "ReferenceFileKind",
    "StackFile",
    "StackMember",
    "open_stack",
    "read_stack_file",
    "reference_file_kind",
]

type ReferenceFileKind = Literal["kerchunk", "stack"]

STACK_SUFFIX: Final = ".zstack.json"
_SNIFF_BYTES: Final = 1 << 16
_KERCHUNK_MARKERS: Final = (b'"refs"', b'.zarray"', b'.zgroup"', b'zarr.json"')


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
        if not lower.endswith(".json") or is_url(location) or not os.path.isfile(location):
            return None
        if lower.endswith(STACK_SUFFIX):
            return "stack"
        head = read_regular_file(location, limit=_SNIFF_BYTES, length=_SNIFF_BYTES, settle=False)
        if head.lstrip().startswith(b"{") and any(m in head for m in _KERCHUNK_MARKERS):
            return "kerchunk"
        return None
    except Exception:  # the napari reader hook must get an answer, whatever it is handed
        return None


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
        resolver = Resolver(self.location, policy_source(policy, allow_outside, protocols))
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
    document, _ = read_json(location, "stack file", MAX_METADATA_BYTES)

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
