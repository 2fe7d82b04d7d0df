"""Vetting before zarr-python reads: locations, metadata files, pickle codecs, image dtypes.

`check_local` checks a local store with specific messages before zarr-python
sees it (no such path, not a store, oversized or malformed metadata);
`check_document` and `check_safe` refuse metadata whose decoding would unpickle
data from the file (and, for `check_safe`, dtypes napari cannot show). The
format readers (`layout`, `plate`, `manifest`) use the same checks as the zarr
source.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core.errors import (
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDtypeError,
)
from napari_lazy_zarr.core.storage.files import (
    load_json,
    read_regular_file,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    import zarr


__all__ = [
    "ATTRIBUTE_FILES",
    "MAX_METADATA_BYTES",
    "METADATA_FILES",
    "ZIP_SUFFIXES",
    "check_document",
    "check_local",
    "check_safe",
    "dtype_refusal",
    "group_arrays",
    "is_remote",
    "is_url",
    "metadata_files",
]


METADATA_FILES: Final = ("zarr.json", ".zarray", ".zgroup")


# Codecs whose decoding runs code stored in the file.
_CODE_EXECUTING_CODECS: Final = frozenset({"pickle", "numcodecs.pickle"})

# Codecs that decode an object (or string) dtype without unpickling: strings, bytes, JSON,
# msgpack. Such an array is not pixels (`dtype_refusal`), but reading it runs no stored code.
_OBJECT_CODECS: Final = frozenset(
    {"vlen-utf8", "vlen-bytes", "vlen-array", "json2", "msgpack2", "categorize"}
)
_STRING_CODECS: Final = frozenset({"vlen-utf8", "vlen-bytes"})


# Image-like dtypes napari can show; everything else is refused with a clear error.
_IMAGE_KINDS: Final = frozenset("biufc")


def is_url(path: str) -> bool:
    """Whether `path` names a URL (it has a ``://``)."""
    return "://" in path


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether `location` is a URL (http, https, s3, ...) rather than a local path."""
    return is_url(os.fspath(location))


def _codec_names(metadata: Any) -> Iterator[str]:
    """Every codec/filter/compressor name in a metadata document, nested ones included.

    Iterative: a hostile document nested thousands deep must not exhaust the stack.
    """
    pending = [metadata]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for field in ("id", "name"):
                value = node.get(field)
                if isinstance(value, str):
                    yield value
            pending.extend(node.values())
        elif isinstance(node, list | tuple):
            pending.extend(node)


def check_document(location: str, document: Any, *, object_dtype: bool = False) -> None:
    """Refuse pickle codecs, and object dtypes no safe object codec decodes, named in a
    metadata document.

    An object dtype decoded by a string, bytes, JSON or msgpack codec (`_OBJECT_CODECS`:
    ``vlen-utf8`` ...) unpickles nothing: it passes here, and `check_safe` refuses it as
    not pixels (`UnsupportedDtypeError`), so a table of names beside the images does not
    make a group unsafe.
    """
    names = {n.lower() for n in _codec_names(document)}
    unsafe = sorted(names & _CODE_EXECUTING_CODECS)
    if isinstance(document, dict) and document.get("dtype") in ("|O", "O", "object"):
        object_dtype = True
    if unsafe or (object_dtype and not names & _OBJECT_CODECS):
        cause = f"codec {unsafe[0]!r}" if unsafe else "object dtype"
        raise UnsafeDataError(
            f"{location}: refusing to read an array with {cause}: decoding it would "
            "unpickle data from the file, which can run arbitrary code"
        )


def check_safe(location: str, array: zarr.Array[Any]) -> None:
    """Refuse pickle codecs and unsafe object dtypes before any chunk is decoded, and
    dtypes napari cannot show (strings, records ...: `UnsupportedDtypeError`)."""
    dtype = np.dtype(array.dtype)
    document = array.metadata.to_dict()
    check_document(location, document, object_dtype=dtype.kind == "O")
    if dtype.kind not in _IMAGE_KINDS:
        strings = dtype.kind == "O" and {n.lower() for n in _codec_names(document)} & (
            _STRING_CODECS
        )
        raise dtype_refusal(location, dtype, kind="U" if strings else None)


_DTYPE_WAY_OUT: Final = {
    "c": "napari cannot display complex values; open the array in Python "
    "(napari_lazy_zarr.open_array or zarr.open_array) and add np.abs(...), .real or "
    "np.angle(...) of it to the viewer",
    "V": "a structured (record) dtype holds several values per pixel; open the array in "
    "Python and add one field, e.g. zarr.open_array(path)[...]['{field}'], to the viewer",
    "U": "strings are not pixels (a table or names beside the images?); only numeric "
    "arrays are shown",
    "T": "strings are not pixels (a table or names beside the images?); only numeric "
    "arrays are shown",
    "S": "byte strings are not pixels (a table or names beside the images?); only numeric "
    "arrays are shown",
    "M": "dates are not pixels; convert them to numbers in Python (e.g. "
    "array.astype('int64')) and add that to the viewer",
    "m": "durations are not pixels; convert them to numbers in Python (e.g. "
    "array / np.timedelta64(1, 's')) and add that to the viewer",
    "O": "Python objects are not pixels",
}


def dtype_refusal(
    location: str, dtype: np.dtype[Any], *, kind: str | None = None
) -> UnsupportedDtypeError:
    """The error for an array of `dtype` napari cannot show: names `location`, the dtype and
    what to do instead (bool, integer and float dtypes are images; complex ones napari
    cannot display, though `open_array` reads them). `kind` overrides the dtype's kind
    for the advice (``"U"``: an object dtype holding strings).

    Examples
    --------
    >>> import numpy as np
    >>> print(dtype_refusal("a.zarr/phase", np.dtype("complex64")))  # doctest: +ELLIPSIS
    a.zarr/phase: dtype complex64 cannot be shown as an image: napari cannot display ...
    """
    kind = kind or dtype.kind
    way_out = _DTYPE_WAY_OUT.get(kind, "only bool, integer and float arrays are shown")
    if kind == "V" and dtype.names:
        way_out = way_out.format(field=dtype.names[0])
    elif kind == "V":
        way_out = "raw bytes (an opaque dtype) are not pixels"
    return UnsupportedDtypeError(
        f"{location}: dtype {dtype} cannot be shown as an image: {way_out} "
        "(napari shows bool, integer and float arrays)"
    )


def metadata_files(path: str) -> list[str]:
    """The zarr metadata files (`METADATA_FILES`) present in the directory `path`."""
    return [name for name in METADATA_FILES if os.path.isfile(os.path.join(path, name))]


ATTRIBUTE_FILES: Final = (".zattrs", ".zmetadata")


ZIP_SUFFIXES: Final = (".zip", ".ozx")
"""A file of these suffixes is read as a zipped store (``.ozx``: zipped OME-Zarr, RFC-9)."""


MAX_METADATA_BYTES: Final = 16 << 20
"""Metadata files larger than this are refused (a real one is kilobytes; OME plates megabytes)."""


def _attribute_files(path: str) -> list[str]:
    return [name for name in ATTRIBUTE_FILES if os.path.lexists(os.path.join(path, name))]


def _read_metadata(metadata_path: str) -> Any:
    """A metadata file's JSON, refusing devices, FIFOs, huge files and absurd nesting."""
    data = read_regular_file(
        metadata_path, limit=MAX_METADATA_BYTES, error=MetadataError, settle=False
    )
    return load_json(data, where=metadata_path)


def check_local(path: str) -> None:
    """Cheap checks with specific messages before zarr-python sees the path."""
    if not os.path.exists(path):
        raise StoreNotFoundError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        if path.lower().endswith(ZIP_SUFFIXES):
            return
        raise NotAZarrStoreError(f"{path}: is a file, not a zarr store (a directory)")
    found = metadata_files(path)
    if not found:
        raise NotAZarrStoreError(
            f"{path}: not a zarr store: no zarr metadata ({', '.join(METADATA_FILES)})"
        )
    for name in (*found, *_attribute_files(path)):
        metadata_path = os.path.join(path, name)
        document = _read_metadata(metadata_path)
        if name in ATTRIBUTE_FILES:
            continue  # attributes are zarr's to parse; they were only vetted as a file
        if not isinstance(document, dict):
            raise MetadataError(f"{metadata_path}: metadata is not a JSON object")
        # Before zarr-python parses it: a pickle codec is refused by name, whatever else.
        check_document(path, document)


def group_arrays(group: zarr.Group) -> list[str]:
    """The names of the arrays directly in `group`, sorted."""
    return sorted(name for name, _ in group.arrays())
