"""`ZarrChunkSource`: chunks of a zarr-python array, decoded by zarr's own codec pipeline."""

from __future__ import annotations

import json
import os
import stat
import threading
import zipfile
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, Literal, Self

import numpy as np
import zarr
from zarr.abc.store import RangeByteRequest, Store, _store_supports_sync_io
from zarr.codecs.sharding import ShardingCodec
from zarr.core.array import _get_chunk_spec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.codec_pipeline import FusedCodecPipeline
from zarr.core.sync import sync
from zarr.storage import FsspecStore, WrapperStore
from zarr_indexing import (
    DimensionGridLike,
    FixedDimension,
    VaryingDimension,
)

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    MetadataError,
    NotAZarrStoreError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.retry import RetryPolicy, classify
from napari_lazy_zarr.core.source import SourceFields, chunk_bounds, fill_value_of

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from zarr.abc.store import ByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = ["MetadataMemoStore", "ZarrChunkSource", "open_zarr_source"]

_METADATA_FILES: Final = ("zarr.json", ".zarray", ".zgroup")
# Codecs whose decoding runs code stored in the file.
_CODE_EXECUTING_CODECS: Final = frozenset({"pickle", "numcodecs.pickle"})
# Image-like dtypes napari can show; everything else is refused with a clear error.
_IMAGE_KINDS: Final = frozenset("biufc")
_FUSED_PIPELINE: Final = {"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}
_SHARD_INDEXES_KEPT: Final = 4096  # ~1 KiB each for 8 x 8 inner chunks
DEFAULT_RETRY: Final = RetryPolicy()


def _is_url(path: str) -> bool:
    return "://" in path


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether `location` is a URL (http, https, s3, ...) rather than a local path."""
    return _is_url(os.fspath(location))


def _grid_from_sizes(sizes: Sequence[int], extent: int) -> DimensionGridLike:
    """A compact grid for one axis: `FixedDimension` when regular, else explicit edges."""
    if len(sizes) == 0:
        return FixedDimension(size=1, extent=0)
    first = int(sizes[0])
    if all(int(s) == first for s in sizes[:-1]) and int(sizes[-1]) <= first:
        return FixedDimension(size=first, extent=extent)
    return VaryingDimension(edges=tuple(int(s) for s in sizes), extent=extent)


MAX_RANK: Final = 32  # NumPy's limit on an array's dimensions is 64; real images have < 8


def _read_grid(array: zarr.Array[Any], shape: tuple[int, ...]) -> tuple[DimensionGridLike, ...]:
    """The read grid, without listing every chunk of a regular grid (shapes may be huge)."""
    chunks = tuple(int(c) for c in array.chunks)
    if array.metadata.zarr_format == 2 or _regular(array):
        if any(c <= 0 for c in chunks):
            raise MetadataError(f"{array.store_path}: chunk shape {chunks} has empty chunks")
        return tuple(
            FixedDimension(size=min(c, max(extent, 1)), extent=extent)
            for c, extent in zip(chunks, shape, strict=True)
        )
    return tuple(
        _grid_from_sizes(sizes, extent)
        for sizes, extent in zip(array.read_chunk_sizes, shape, strict=True)
    )


def _regular(array: zarr.Array[Any]) -> bool:
    grid = array._async_array._chunk_grid
    return bool(getattr(grid, "is_regular", False))


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


def _check_document(location: str, document: Any, *, object_dtype: bool = False) -> None:
    """Refuse pickle codecs and object dtypes named in a metadata document."""
    unsafe = sorted({n for n in _codec_names(document) if n.lower() in _CODE_EXECUTING_CODECS})
    if isinstance(document, dict) and document.get("dtype") in ("|O", "O", "object"):
        object_dtype = True
    if unsafe or object_dtype:
        cause = f"codec {unsafe[0]!r}" if unsafe else "object dtype"
        raise UnsafeDataError(
            f"{location}: refusing to read an array with {cause}: decoding it would "
            "unpickle data from the file, which can run arbitrary code"
        )


def _check_safe(location: str, array: zarr.Array[Any]) -> None:
    """Refuse object dtypes and pickle codecs before any chunk is decoded."""
    dtype = np.dtype(array.dtype)
    _check_document(location, array.metadata.to_dict(), object_dtype=dtype.kind == "O")
    if dtype.kind not in _IMAGE_KINDS:
        raise UnsupportedDataError(
            f"{location}: dtype {dtype} cannot be shown as an image "
            "(supported: bool, integer, float and complex dtypes)"
        )


class ZarrChunkSource(SourceFields):
    """A `ChunkSource` over a zarr-python array (Zarr v2 or v3).

    Chunks are read on the *read* grid: the inner chunks of a sharded array
    (zarr's `read_chunk_sizes`), so a shard is never decoded whole. Decoding
    uses zarr-python's codec pipeline (synchronously where the store allows,
    so worker threads do the work, not zarr's event loop). A chunk absent from
    the store is filled with the array's fill value (for a Zarr v2
    ``"fill_value": null``, the dtype's zero, as zarr-python reads it).

    `read_chunk` is thread-safe.

    Examples
    --------
    >>> import tempfile, numpy as np, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> z = zarr.create_array(path, shape=(5, 6), chunks=(4, 4), dtype="u2")
    >>> z[:] = np.arange(30).reshape(5, 6)
    >>> source = open_zarr_source(path)
    >>> source.read_chunk((1, 1))
    array([[28, 29]], dtype=uint16)
    """

    def __init__(
        self,
        array: zarr.Array[Any],
        *,
        location: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        self._location = location if location is not None else str(array.store_path)
        self._identity = self._location
        self._retry = retry
        _check_safe(self._location, array)
        self._array = array
        async_array = array._async_array
        self._metadata = async_array.metadata
        self._pipeline = async_array.codec_pipeline
        self._store_path = async_array.store_path
        self._zarr_grid = async_array._chunk_grid
        config = async_array.config
        if self._metadata.zarr_format == 2:
            config = replace(config, order=self._metadata.order)
        self._config = config
        self._prototype = default_buffer_prototype()
        self._shape = tuple(int(s) for s in array.shape)
        self._dtype = np.dtype(array.dtype)
        # A v2 "fill_value": null is None here; reads (and placeholders) need a value.
        self._fill_value = fill_value_of(array.fill_value, self._dtype)
        if len(self._shape) > MAX_RANK:
            raise UnsupportedDataError(
                f"{self._location}: {len(self._shape)} dimensions (at most {MAX_RANK})"
            )
        if any(extent >= 2**63 for extent in self._shape):
            raise UnsupportedDataError(
                f"{self._location}: shape {self._shape} has an extent of 2**63 or more"
            )
        self._grid = _read_grid(array, self._shape)
        stored = array.shards if array.shards is not None else array.chunks
        self._max_stored_bytes = 2 * int(np.prod(stored)) * self._dtype.itemsize + (1 << 20)
        # Inner chunks per outer (stored) chunk along each axis; 1 when unsharded.
        outer = array.shards if array.shards is not None else array.chunks
        self._per_outer = tuple(o // i for o, i in zip(outer, array.chunks, strict=True))
        self._sharded = array.shards is not None
        # The synchronous decode path: zarr's FusedCodecPipeline transform, on a store
        # with synchronous I/O (local files, memory). Otherwise the async pipeline.
        sync_io = _store_supports_sync_io(self._store_path.store)
        self._transform = (
            self._pipeline.sync_transform
            if sync_io and isinstance(self._pipeline, FusedCodecPipeline)
            else None
        )
        self._shards = _ShardReader.for_pipeline(self._pipeline, self._transform is not None)

    # -- ChunkSource -------------------------------------------------------

    @property
    def array(self) -> zarr.Array[Any]:
        """The wrapped zarr array."""
        return self._array

    def stored_key(self, coords: Sequence[int]) -> str:
        """The store key holding chunk `coords` (its shard's key for sharded arrays)."""
        outer = tuple(int(c) // p for c, p in zip(coords, self._per_outer, strict=True))
        return str(self._metadata.encode_chunk_key(outer))

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        outer = tuple(int(c) // p for c, p in zip(coords, self._per_outer, strict=True))
        key = self._metadata.encode_chunk_key(outer)
        outer_lo = tuple(
            int(g.chunk_offset(o * p))
            for g, o, p in zip(self._grid, outer, self._per_outer, strict=True)
        )
        selection = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, outer_lo, strict=True))
        attempts = 1

        def read() -> np.ndarray[Any, Any]:
            spec = _get_chunk_spec(
                self._metadata, self._zarr_grid, outer, self._config, self._prototype
            )
            if self._shards is not None:
                return self._shards.read_inner(self._store_path / key, spec, selection)
            if self._transform is not None:
                return self._read_whole(key, spec, selection)
            return self._read_async(key, spec, selection)

        def count(attempt: int, error: BaseException) -> None:
            nonlocal attempts
            attempts = attempt + 1

        try:
            data = self._retry.call(read, on_retry=count)
        except Exception as error:
            verdict = classify(error)
            how = (
                "access denied, not retried"
                if verdict == "denied"
                else f"after {attempts} attempts"
                if attempts > 1
                else "not retryable"
                if verdict == "permanent"
                else "1 attempt"
            )
            raise ChunkReadError(
                f"{self._location}: chunk {key!r} (grid position {tuple(coords)}): "
                f"{type(error).__name__}: {error} ({how})"
            ) from error
        return data if data.dtype == self._dtype else data.astype(self._dtype)

    def _read_whole(
        self, key: str, spec: Any, selection: tuple[slice, ...]
    ) -> np.ndarray[Any, Any]:
        """Fetch one stored chunk and decode it with the pipeline's synchronous transform.

        The decoded array is returned as is (no scatter copy) unless the chunk is
        clipped at the array's edge.
        """
        assert self._transform is not None
        self._vet_local_file(key)
        raw = (self._store_path / key).get_sync(prototype=self._prototype)
        shape = tuple(sel.stop - sel.start for sel in selection)
        if raw is None:
            return np.full(shape, self._fill_value, dtype=self._dtype)
        decoded = np.asarray(self._transform.decode_chunk(raw, spec).as_ndarray_like())
        if decoded.shape == shape:
            return decoded
        return np.array(decoded[selection], copy=True)

    def _vet_local_file(self, key: str) -> None:
        """Refuse a local chunk file that is not a regular file or is implausibly large.

        A chunk symlinked to /dev/zero or replaced by a FIFO would otherwise be read
        without end; a real compressed chunk is at most a little larger than its data.
        """
        store = self._store_path.store
        if not isinstance(store, zarr.storage.LocalStore):
            return
        path = os.path.join(str(store.root), self._store_path.path, key)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return  # absent: the fill value
        if not stat.S_ISREG(status.st_mode):
            raise ChunkReadError(f"{path}: chunk is not a regular file")
        if status.st_size > self._max_stored_bytes:
            raise ChunkReadError(
                f"{path}: chunk of {status.st_size:,} bytes is larger than any encoding of "
                f"its data could be ({self._max_stored_bytes:,})"
            )

    def _read_async(
        self, key: str, spec: Any, selection: tuple[slice, ...]
    ) -> np.ndarray[Any, Any]:
        """Stores without synchronous I/O: the pipeline's async read on zarr's event loop."""
        shape = tuple(sel.stop - sel.start for sel in selection)
        out = self._prototype.nd_buffer.empty(shape=shape, dtype=self._dtype, order="C")
        batch = [(self._store_path / key, spec, selection, (slice(None),) * len(shape), False)]
        sync(self._pipeline.read(batch, out))
        return np.asarray(out.as_ndarray_like())

    def __repr__(self) -> str:
        return f"ZarrChunkSource({self._location!r}, shape={self._shape}, dtype={self._dtype})"


class _ShardReader:
    """Reads one inner chunk of a shard: a byte-range read and the inner codecs, nothing more.

    zarr-python's pipeline re-reads and re-decodes a shard's index for every
    partial read (two requests and ~0.6 ms extra per 512² inner chunk here);
    this keeps decoded indexes (a few KiB each, bounded LRU), so each inner
    chunk costs one ranged read and one decode, both done by zarr's own
    sharding codec and inner codec chain. Thread-safe.
    """

    def __init__(self, codec: ShardingCodec) -> None:
        self._codec = codec
        self._indexes: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def for_pipeline(cls, pipeline: Any, sync_io: bool) -> _ShardReader | None:
        """A reader when the pipeline is exactly one sharding codec with sync I/O, else None."""
        if not (
            sync_io
            and isinstance(pipeline, FusedCodecPipeline)
            and isinstance(pipeline.array_bytes_codec, ShardingCodec)
            and not pipeline.array_array_codecs
            and not pipeline.bytes_bytes_codecs
        ):
            return None
        return cls(pipeline.array_bytes_codec)

    def _index(self, byte_getter: Any, chunks_per_shard: tuple[int, ...]) -> Any:
        key = str(byte_getter)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        index = self._codec._load_shard_index_maybe_sync(byte_getter, chunks_per_shard)
        if index is not None:
            with self._lock:
                self._indexes[key] = index
                if len(self._indexes) > _SHARD_INDEXES_KEPT:
                    self._indexes.popitem(last=False)
        return index

    def read_inner(
        self, byte_getter: Any, shard_spec: Any, selection: tuple[slice, ...]
    ) -> np.ndarray[Any, Any]:
        """Exactly one inner chunk of the shard, `selection` (shard-local), clipped."""
        codec = self._codec
        inner = tuple(int(c) for c in codec.chunk_shape)
        coords = tuple(sel.start // size for sel, size in zip(selection, inner, strict=True))
        local = tuple(
            slice(sel.start - c * size, sel.stop - c * size)
            for sel, c, size in zip(selection, coords, inner, strict=True)
        )
        shape = tuple(sel.stop - sel.start for sel in selection)
        dtype = shard_spec.dtype.to_native_dtype()
        chunks_per_shard = codec._get_chunks_per_shard(shard_spec)
        index = self._index(byte_getter, chunks_per_shard)
        chunk_slice = None if index is None else index.get_chunk_slice(coords)
        if chunk_slice is None:  # absent shard or absent inner chunk
            return np.full(shape, fill_value_of(shard_spec.fill_value, dtype), dtype=dtype)
        chunk_spec = codec._get_chunk_spec(shard_spec)
        raw = byte_getter.get_sync(
            prototype=chunk_spec.prototype,
            byte_range=RangeByteRequest(chunk_slice[0], chunk_slice[1]),
        )
        if raw is None:  # the shard vanished since its index was read
            with self._lock:
                self._indexes.pop(str(byte_getter), None)
            return np.full(shape, fill_value_of(shard_spec.fill_value, dtype), dtype=dtype)
        transform = codec._get_inner_chunk_transform(shard_spec)
        decoded = np.asarray(transform.decode_chunk(raw, chunk_spec).as_ndarray_like())
        if decoded.shape == shape:
            return decoded
        return np.array(decoded[local], copy=True)


def _metadata_files(path: str) -> list[str]:
    return [name for name in _METADATA_FILES if os.path.isfile(os.path.join(path, name))]


_ATTRIBUTE_FILES: Final = (".zattrs", ".zmetadata")
MAX_METADATA_BYTES: Final = 64 << 20
"""Metadata files larger than this are refused (a real one is kilobytes; OME plates megabytes)."""


def _attribute_files(path: str) -> list[str]:
    return [name for name in _ATTRIBUTE_FILES if os.path.lexists(os.path.join(path, name))]


def _read_metadata(metadata_path: str) -> Any:
    """A metadata file's JSON, refusing devices, FIFOs, huge files and absurd nesting."""
    try:
        status = os.stat(metadata_path)
        if not stat.S_ISREG(status.st_mode):
            raise MetadataError(f"{metadata_path}: metadata is not a regular file")
        if status.st_size > MAX_METADATA_BYTES:
            raise MetadataError(
                f"{metadata_path}: metadata of {status.st_size:,} bytes is implausibly large "
                f"(limit {MAX_METADATA_BYTES:,})"
            )
        with open(metadata_path, "rb") as handle:
            return json.loads(handle.read(MAX_METADATA_BYTES + 1))
    except OSError as error:
        raise MetadataError(f"{metadata_path}: cannot read metadata: {error}") from error
    except RecursionError as error:
        raise MetadataError(f"{metadata_path}: metadata nested too deeply") from error
    except ValueError as error:
        raise MetadataError(f"{metadata_path}: malformed JSON: {error}") from error


def _check_local(path: str) -> None:
    """Cheap checks with specific messages before zarr-python sees the path."""
    if not os.path.exists(path):
        raise StoreNotFoundError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        if path.endswith(".zip"):
            return
        raise NotAZarrStoreError(f"{path}: is a file, not a zarr store (a directory)")
    found = _metadata_files(path)
    if not found:
        raise NotAZarrStoreError(
            f"{path}: not a zarr store: no zarr metadata ({', '.join(_METADATA_FILES)})"
        )
    for name in (*found, *_attribute_files(path)):
        metadata_path = os.path.join(path, name)
        document = _read_metadata(metadata_path)
        if name in _ATTRIBUTE_FILES:
            continue  # attributes are zarr's to parse; they were only vetted as a file
        if not isinstance(document, dict):
            raise MetadataError(f"{metadata_path}: metadata is not a JSON object")
        # Before zarr-python parses it: a pickle codec is refused by name, whatever else.
        _check_document(path, document)


_METADATA_DOCUMENTS: Final = frozenset({*_METADATA_FILES, *_ATTRIBUTE_FILES})


class _Memo:
    """The documents a `MetadataMemoStore` and its copies keep (None once forgotten)."""

    __slots__ = ("documents", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.documents: dict[str, Buffer | None] | None = {}


class MetadataMemoStore(WrapperStore[Store]):
    """A store wrapper that fetches each metadata document once while nodes are opened.

    Opening a node tries it as an array, then as a group, and zarr-python
    reads the documents of each form (a group's ``zarr.json`` twice, an absent
    node's documents twice); over HTTP each read is a round trip. While
    memoizing, a metadata document
    (``zarr.json``, ``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata``),
    present or absent, is fetched from the wrapped store once and answered from
    memory afterwards. `forget` ends that: then every call goes straight to the
    wrapped store, so arrays opened through it read their chunks as if opened
    from it. Chunks and byte ranges are never memoized.

    Thread-safe. Two first requests of one document at the same moment may
    both fetch it; opening never asks for one document twice at once.

    Examples
    --------
    >>> import zarr
    >>> from zarr.storage import LoggingStore, MemoryStore
    >>> inner = MemoryStore()
    >>> _ = zarr.create_group(inner).create_array("a", shape=(4,), dtype="u1")
    >>> counted = LoggingStore(inner.with_read_only(True), log_level="CRITICAL")
    >>> store = MetadataMemoStore(counted)
    >>> for _ in range(3):
    ...     _ = open_node(store, "", "root"), open_node(store, "a", "a", zarr_format=3)
    >>> counted.counter["get"]  # zarr.json, .zarray, .zattrs; a/zarr.json: once each
    4
    >>> store.forget()
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._memo = _Memo()

    def _with_store(self, store: Store) -> Self:
        # zarr makes copies (e.g. read-only ones): they share the memo.
        copy = super()._with_store(store)
        copy._memo = self._memo
        return copy

    def forget(self) -> None:
        """Stop memoizing and drop the documents kept (in this store and its copies)."""
        with self._memo.lock:
            self._memo.documents = None

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if byte_range is not None or key.rsplit("/", 1)[-1] not in _METADATA_DOCUMENTS:
            return await self._store.get(key, prototype, byte_range)
        memo = self._memo
        with memo.lock:
            if memo.documents is not None and key in memo.documents:
                return memo.documents[key]
        value = await self._store.get(key, prototype)
        with memo.lock:
            if memo.documents is not None:  # else forgotten meanwhile: keep nothing
                memo.documents.setdefault(key, value)
        return value

    def __str__(self) -> str:
        return str(self._store)

    def __repr__(self) -> str:
        return f"MetadataMemoStore({self._store!r})"


def store_for(location: str) -> tuple[Any, str | None]:
    """What zarr-python opens `location` with, and its local directory (None for URLs, zips).

    Local paths are checked first (`StoreNotFoundError`, `NotAZarrStoreError`,
    `MetadataError`, pickle codecs refused by name). A `.zip` file needs its own
    store: zarr.open takes a string path as a directory. A remote URL gets a
    read-only fsspec store behind a `MetadataMemoStore` (the caller calls
    `forget` when it has opened what it needed); ``file://`` URLs are left to
    zarr-python.
    """
    if _is_url(location):
        if location.split("://", 1)[0].lower() == "file":
            return location, None
        with _zarr_errors(location):
            return MetadataMemoStore(FsspecStore.from_url(location, read_only=True)), None
    _check_local(location)
    if os.path.isfile(location):  # _check_local lets only .zip files through
        return zarr.storage.ZipStore(location, mode="r"), None
    return location, location


def forget_metadata(store: Any) -> None:
    """End a `MetadataMemoStore`'s memo (nothing for any other store)."""
    if isinstance(store, MetadataMemoStore):
        store.forget()


@contextmanager
def _zarr_errors(full: str) -> Iterator[None]:
    """zarr-python's (and fsspec's) failures to open `full`, mapped to ours naming it."""
    try:
        yield
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as error:
        raise NotAZarrStoreError(f"{full}: no zarr array or group found: {error}") from error
    except ImportError as error:
        raise NotAZarrStoreError(
            f"{full}: opening this URL needs a package that is not installed ({error}); "
            "install napari-lazy-zarr[remote]"
        ) from error
    except zipfile.BadZipFile as error:
        raise NotAZarrStoreError(f"{full}: not a zip archive: {error}") from error
    except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as error:
        raise MetadataError(
            f"{full}: malformed zarr metadata: {type(error).__name__}: {error}"
        ) from error
    except OSError as error:  # e.g. a server that refuses the connection
        raise MetadataError(
            f"{full}: cannot read zarr metadata: {type(error).__name__}: {error}"
        ) from error


def open_node(
    store: Any,
    path: str,
    full: str,
    *,
    zarr_format: Literal[2, 3] | None = None,
    consolidated: bool = True,
) -> zarr.Array[Any] | zarr.Group:
    """The array or group at `path` in `store`, zarr-python's failures mapped to ours.

    Arrays are opened with zarr's synchronous `FusedCodecPipeline`, which
    `ZarrChunkSource` drives from worker threads. `zarr_format`, when known (a
    node has its hierarchy's format), spares probing the other format's
    documents; ``consolidated=False`` spares a Zarr v2 group's ``.zmetadata``,
    which only listing the group's members over HTTP needs.
    """
    with _zarr_errors(full), zarr.config.set(_FUSED_PIPELINE):
        # zarr.open's array-else-group dispatch, but passing on the format the array
        # probe found: zarr.open probes both formats again for a group.
        try:
            return zarr.open_array(store=store, path=path, mode="r", zarr_format=zarr_format)
        except zarr.errors.NodeTypeValidationError:
            zarr_format = 3  # a zarr.json that is not an array's
        except zarr.errors.ArrayNotFoundError:
            if zarr_format is None:
                zarr_format = 2  # neither zarr.json nor .zarray: a v2 group, or nothing
        return zarr.open_group(
            store=store,
            path=path,
            mode="r",
            zarr_format=zarr_format,
            use_consolidated=None if consolidated else False,
        )


def _group_arrays(group: zarr.Group) -> list[str]:
    return sorted(name for name, _ in group.arrays())


def open_zarr_source(
    path_or_url: str | os.PathLike[str], *, path: str = "", retry: RetryPolicy = DEFAULT_RETRY
) -> ZarrChunkSource:
    """Open the zarr array at `path_or_url` (optionally `path` inside it) as a chunk source.

    `retry` says how transient read failures (connection resets, timeouts,
    HTTP 429/5xx, truncated bodies) are retried before a chunk fails.

    Raises
    ------
    StoreNotFoundError
        The path does not exist.
    NotAZarrStoreError
        The path holds no zarr metadata, or is a group rather than an array.
    MetadataError
        The metadata is unreadable or malformed.
    UnsafeDataError
        The array uses an object dtype or a pickle codec.
    UnsupportedDataError
        The dtype is not an image dtype.
    """
    location = os.fspath(path_or_url)
    store, local_dir = store_for(location)
    if local_dir is not None and path:
        _check_local(os.path.join(local_dir, path))
    full = f"{location.rstrip('/')}/{path}" if path else location
    try:
        node = open_node(store, path, full)
    finally:
        forget_metadata(store)
    if isinstance(node, zarr.Group):
        arrays = _group_arrays(node)
        hint = (
            f"; open one of its arrays: {', '.join(repr(a) for a in arrays[:8])}"
            if arrays
            else " with no arrays"
        )
        raise NotAZarrStoreError(f"{full}: is a zarr group, not an array{hint}")
    return ZarrChunkSource(node, location=full, retry=retry)
