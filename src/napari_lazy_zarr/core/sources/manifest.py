"""`ManifestSource`: the array a kerchunk reference file describes, as a zarr chunk source.

kerchunk references (version 0, and version 1 with ``templates``) map zarr
keys to inline data, ``[url]`` (a whole file) or ``[url, offset, length]`` (a
byte range of a file); the array's zarr metadata (``.zarray`` /
``zarr.json``) is itself one of the references. `ManifestStore`
(`core.storage.references`) serves them as a read-only zarr store, so
zarr-python's own codec pipeline decodes the chunks, and `ManifestSource` is
the `ZarrChunkSource` over it.

Relative paths resolve against the file's own folder. A reference that
resolves (``file://`` and ``~`` expanded, normalised, symbolic links followed)
inside that folder is accepted, absolute or relative: kerchunk writes absolute
paths and ``file://`` URLs. Anything else (a file elsewhere, ``..`` or a
symbolic link leading out, another protocol such as ``https`` or ``s3``) is
refused with `UnsafeDataError` unless a `ReferencePolicy` allows it: the
user's (`ReferencePolicy.from_settings`: environment variables and the
settings file), or one given in Python. A protocol allowed in general still
does not reach loopback, link-local or private addresses: those must be named.
A reference file from elsewhere must not make the viewer read, and show,
arbitrary files of the person opening it, nor probe the network it sits on.

Every read is bounded, whatever the files say (see `ManifestStore`): only
regular files are read (`core.storage.files`: a FIFO or a device named anywhere is
refused at once), reference files up to a size cap and a JSON depth limit,
each reference up to its key's byte cap (checked before reading or decoding)
and, when remote, within `Timeouts`. A referenced file changed since the
references were opened is refused, never served torn or under the old
version's identity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import zarr

from napari_lazy_zarr.core.errors import NotAZarrStoreError
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.sources.zarr import (
    DEFAULT_RETRY,
    ZarrChunkSource,
    ZarrIdentity,
    open_node,
)
from napari_lazy_zarr.core.storage.references import ManifestStore
from napari_lazy_zarr.core.storage.vetting import group_arrays

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable

    from napari_lazy_zarr.core.storage.policy import ReferencePolicy
    from napari_lazy_zarr.core.storage.retry import RetryPolicy


__all__ = ["ManifestIdentity", "ManifestSource"]


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
            arrays = group_arrays(node)
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
