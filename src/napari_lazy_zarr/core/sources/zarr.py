"""`ZarrChunkSource`: chunks of a zarr-python array, decoded by zarr's own codec pipeline.

The source locates a chunk (its stored key, and its place in a shard), fetches
the bytes through the fetcher chosen for its store when the array was opened
(`fetchers`: local, zip, remote, any other store), and decodes them. Also where
a zarr node is opened (`open_node`, `open_zarr_source`) and what a zarr array's
identity is (`ZarrIdentity`). The bounded codec chain lives in `_decode`
(`BoundedDecode`), the shard reads in `_sharding` (`ShardReader`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from operator import add, floordiv, mod, mul, sub
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import zarr
from zarr.buffer import default_buffer_prototype
from zarr_indexing import (
    DimensionGridLike,
    FixedDimension,
)

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    DisabledFeatureError,
    LoadCancelledError,
    MetadataError,
    NotAZarrStoreError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.executors import DaemonExecutor
from napari_lazy_zarr.core.keys import chunk_bounds
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.sources import _zarr_compat as compat
from napari_lazy_zarr.core.sources._decode import BoundedDecode, unbounded_codecs
from napari_lazy_zarr.core.sources._grid import grid_from_sizes
from napari_lazy_zarr.core.sources._sharding import ShardReader
from napari_lazy_zarr.core.sources._zarr_compat import (  # per chunk read: bound once here
    chunk_spec,
)
from napari_lazy_zarr.core.sources.codecs import with_installed_codecs
from napari_lazy_zarr.core.sources.fetchers import fetcher_for
from napari_lazy_zarr.core.sources.protocol import SourceFields, fill_value_of
from napari_lazy_zarr.core.storage.files import (
    SETTLE_SECONDS,
    FileChangedError,
)
from napari_lazy_zarr.core.storage.local import (
    bounded_store,
    range_size,
    store_for,
    zarr_errors,
)
from napari_lazy_zarr.core.storage.memo import forget_metadata
from napari_lazy_zarr.core.storage.retry import RetryPolicy, attempts_note
from napari_lazy_zarr.core.storage.vetting import check_local, check_safe, group_arrays

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator, Sequence

    from zarr.abc.store import ByteRequest

    from napari_lazy_zarr.core.sources.fetchers import Fetched, Fetcher

__all__ = [
    "DEFAULT_RETRY",
    "ZarrChunkSource",
    "ZarrIdentity",
    "open_node",
    "open_zarr_source",
]


# The threads that fetch and decode the second and later runs of a batched shard read
# while the cache's worker does the first (daemons: a stuck read never holds up exit).
# Idle ones leave after a second: a view's reads come in bursts, and no thread lingers.
_RUN_THREADS: Final = DaemonExecutor(name="lazy-zarr-range", idle_seconds=1.0)
DEFAULT_RETRY: Final = RetryPolicy()

_REWRITE_ATTEMPTS: Final = 3  # versions of a local chunk file tried while a writer rewrites it
LOCAL_BATCH: Final = 4
"""Chunks adjacent along the last axis a worker may read in one task from an unsharded
array in a local directory (`ZarrChunkSource.batch_key`): the cache's per-chunk
bookkeeping of a load is done once per batch. Measured (`./dev bench ab`, two runs, 512²
uint16 chunks, one worker), beyond reading and decoding a chunk: v2 blosc-lz4 168 -> 134 and
151 -> 120 µs; v3 zstd 121 -> 68 and 29 -> 21 µs (the second within noise). A local shard's
inner chunks, batched the same way, measured no gain (240 -> 254 µs): they are read alone."""


MAX_RANK: Final = 32  # NumPy's limit on an array's dimensions is 64; real images have < 8


def _chunk_shape(array: zarr.Array[Any]) -> tuple[int, ...]:
    """The stored chunk shape; for a rectilinear grid (chunks of varying sizes, where zarr's
    ``Array.chunks`` is undefined) the largest chunk along each axis."""
    if array.metadata.zarr_format == 2 or compat.has_regular_grid(array):
        return tuple(int(c) for c in array.chunks)
    return tuple(max((int(n) for n in sizes), default=1) for sizes in array.read_chunk_sizes)


def _read_grid(array: zarr.Array[Any], shape: tuple[int, ...]) -> tuple[DimensionGridLike, ...]:
    """The read grid, without listing every chunk of a regular grid (shapes may be huge)."""
    if array.metadata.zarr_format == 2 or compat.has_regular_grid(array):
        chunks = tuple(int(c) for c in array.chunks)
        if any(c <= 0 for c in chunks):
            raise MetadataError(f"{array.store_path}: chunk shape {chunks} has empty chunks")
        return tuple(
            FixedDimension(size=min(c, max(extent, 1)), extent=extent)
            for c, extent in zip(chunks, shape, strict=True)
        )
    return tuple(
        grid_from_sizes(sizes, extent)
        for sizes, extent in zip(array.read_chunk_sizes, shape, strict=True)
    )


@dataclass(frozen=True, slots=True)
class ZarrIdentity:
    """A zarr array's identity: where it is and which version of it was opened.

    `version` hashes the array's metadata document and, for local stores, the
    metadata file's inode, size and mtime. `opened` numbers the opens in this
    process: chunks may be rewritten in place without any metadata changing
    (``array[...] = new`` in zarr-python), so every open is a new source, its
    chunks get new cache keys and pixels cached for an earlier open are never
    shown for it (TensorStore's ``recheck_cached_data="open"``, taken
    conservatively: what was cached before the open is read again). Prints as
    the location.

    Examples
    --------
    >>> str(ZarrIdentity("/data/a.zarr", "3f2a", 0))
    '/data/a.zarr'
    """

    location: str
    """The store path or URL (and the array's path inside it)."""
    version: str
    """Digest of the metadata (and of its file's stat, for local stores) when opened."""
    opened: int = 0
    """Which open of the array this is (a process-wide count)."""
    # Hashed inside every chunk key's hash (~25 per chunk loaded): once, not 0.5 µs each time.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.location, self.version, self.opened)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt, not restored: string hashes differ between processes.
        return ZarrIdentity, (self.location, self.version, self.opened)

    def __str__(self) -> str:
        return self.location


_OPENS: Final = itertools.count()  # numbers ZarrIdentity.opened (next() is atomic in CPython)


def _metadata_version(array: zarr.Array[Any], fetcher: Fetcher) -> str:
    """A digest of the array's metadata and, where it is a local file, of its stat."""
    digest = hashlib.blake2b(digest_size=12)
    document = array.metadata.to_dict()
    digest.update(json.dumps(document, sort_keys=True, default=str).encode())
    local = fetcher.file_of("zarr.json" if array.metadata.zarr_format == 3 else ".zarray")
    if local is not None:
        with suppress(OSError):
            status = os.stat(local)
            digest.update(
                f"{status.st_ino}:{status.st_size}:{status.st_mtime_ns}:{status.st_ctime_ns}".encode()
            )
    return digest.hexdigest()


class ZarrChunkSource(SourceFields):
    """A `ChunkSource` over a zarr-python array (Zarr v2 or v3).

    Chunks are read on the *read* grid: the inner chunks of a sharded array
    (zarr's `read_chunk_sizes`), so a shard is never decoded whole. Decoding
    uses zarr-python's codec pipeline, synchronously on the worker thread,
    with its compressors bounded (`BoundedDecode`): no chunk decodes to more
    than its size, whatever its bytes declare. A chunk absent from the store is
    filled with the array's fill value (for a Zarr v2 ``"fill_value": null``,
    the dtype's zero, as zarr-python reads it).

    Local chunk and shard files are read with `read_regular_file`: regular
    files only, at most the largest plausible encoding of the chunk, never
    torn (a file rewritten while read is read again). A chunk file rewritten
    while the array stays open is read anew the next time the chunk is loaded
    (chunks already cached keep their pixels until evicted); `version()` tells
    whether the array's metadata changed since it was opened (open it again
    for a new identity).

    `identity` is a `ZarrIdentity`: the location and the version opened.
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
    >>> str(source.identity) == path, source.version() == source.identity.version
    (True, True)
    """

    def __init__(
        self,
        array: zarr.Array[Any],
        *,
        location: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        coalesce: bool | None = None,
        coalesce_gap: int = 0,
    ) -> None:
        self._location = location if location is not None else str(array.store_path)
        self._retry = retry
        self._timeouts = timeouts
        if isinstance(coalesce_gap, bool) or not isinstance(coalesce_gap, int) or coalesce_gap < 0:
            raise ValueError(f"coalesce_gap must be an int >= 0 (bytes), got {coalesce_gap!r}")
        self._coalesce_gap = coalesce_gap
        check_safe(self._location, array)
        self._array = array
        async_array = array.async_array
        self._metadata = async_array.metadata
        self._pipeline = async_array.codec_pipeline
        self._store_path = async_array.store_path
        self._zarr_grid = compat.chunk_grid(array)
        config = async_array.config
        if self._metadata.zarr_format == 2:
            config = compat.config_with_order(config, self._metadata.order)
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
        self._fixed_sizes = (
            tuple(int(g.size) for g in self._grid if isinstance(g, FixedDimension))
            if all(isinstance(g, FixedDimension) for g in self._grid)
            else None
        )
        # Per axis, the chunks the array's edge does not cut (`_locate`'s fast case).
        self._full_counts = (
            ()
            if self._fixed_sizes is None
            else tuple(e // n for e, n in zip(self._shape, self._fixed_sizes, strict=True))
        )
        chunks = _chunk_shape(array)
        stored = array.shards if array.shards is not None else chunks
        self._max_stored_bytes = _max_encoded_bytes(stored, self._dtype)
        # How this store's keys are read, chosen once (no body may be longer than any
        # encoding of the chunk).
        self._fetcher = fetcher_for(
            self._store_path, self._location, timeout=timeouts.total, cap=self._max_stored_bytes
        )
        # Remote reads in flight per chunk, by reading thread, and the threads whose read was
        # cancelled (`cancel_load`): obstore's blocking request cannot be stopped, but what
        # follows it (decoding, retries, the batch's other runs) is not done.
        self._remote = self._fetcher.kind == "remote"
        self._readers: dict[tuple[int, ...], set[int]] = {}
        self._cancelled: set[int] = set()
        self._readers_lock = threading.Lock()
        self._identity = ZarrIdentity(
            self._location, _metadata_version(array, self._fetcher), next(_OPENS)
        )
        # Inner chunks per outer (stored) chunk along each axis; 1 when unsharded.
        outer = array.shards if array.shards is not None else chunks
        self._per_outer = tuple(o // i for o, i in zip(outer, chunks, strict=True))
        # The synchronous decode path: zarr's FusedCodecPipeline transform, bounded.
        # Codecs without a synchronous form leave None: zarr's async pipeline reads them.
        transform = compat.sync_transform(self._pipeline)
        self._decoder = (
            BoundedDecode(transform)
            if transform is not None
            else _bounded_without_sync(self._pipeline)
        )
        self._shards = ShardReader.for_pipeline(
            self._pipeline, _max_encoded_bytes(chunks, self._dtype)
        )
        # Inner chunks of one shard are read together (one request per run of adjacent
        # byte ranges) where a request costs a round trip: by default, remote stores.
        if coalesce is None:
            coalesce = self._fetcher.kind not in ("local", "zip")
        self._coalesce = bool(coalesce) and self._shards is not None
        # Whole chunks of a local directory are read in small batches (`LOCAL_BATCH`): a
        # local read is short, so a batch saves the cache's per-chunk work only.
        self._local_batches = self._shards is None and self._fetcher.kind == "local"
        # A regular grid describes every stored chunk alike (edge chunks too: codecs see
        # the full chunk shape), so its spec is made once, on the first read, not per read
        # (~6 µs each).
        self._regular = compat.has_regular_grid(array)
        self._regular_spec: Any = None
        if self._shards is not None:
            unbounded = self._shards.unbounded(self._chunk_spec((0,) * len(self._shape)))
        elif self._decoder is not None:
            unbounded = self._decoder.unbounded
        else:
            unbounded = unbounded_codecs(_codec_names(self._metadata.to_dict()))
        _refuse_unbounded(self._location, unbounded)

    # -- ChunkSource -------------------------------------------------------

    @property
    def array(self) -> zarr.Array[Any]:
        """The wrapped zarr array."""
        return self._array

    @property
    def timeouts(self) -> Timeouts:
        """The time caps of this source's reads (`total` caps each local file read)."""
        return self._timeouts

    @property
    def kept_bytes(self) -> int:
        """Bytes of the shard indexes kept (at most `SHARD_INDEX_BYTES`; 0 unsharded):
        counted in the byte budget of every cache reading this source (`KeepingSource`)."""
        return 0 if self._shards is None else self._shards.kept_bytes

    def version(self) -> str:
        """The array's version now: differs from ``identity.version`` once the store's
        metadata was rewritten (a recheck hook; reopen the array to see the new data).

        Reads the metadata file's stat for local stores (cheap); for other stores
        the metadata as opened (a rewrite is seen on reopening).
        """
        return _metadata_version(self._array, self._fetcher)

    def stored_key(self, coords: Sequence[int]) -> str:
        """The store key holding chunk `coords` (its shard's key for sharded arrays)."""
        outer = tuple(int(c) // p for c, p in zip(coords, self._per_outer, strict=True))
        return str(self._metadata.encode_chunk_key(outer))

    def _locate(self, coords: Sequence[int]) -> tuple[tuple[int, ...], str, tuple[slice, ...]]:
        """Chunk `coords`' stored chunk (outer coordinates), its key, and its selection
        within the stored chunk (clipped at the array's edge)."""
        sizes = self._fixed_sizes
        if sizes is not None and len(coords) == len(sizes):
            # A regular grid: arithmetic, no grid calls (~10 µs a read), in C for an inner
            # chunk the array's edge does not cut (1 to 2 µs less than the generators).
            coords = tuple(map(int, coords))
            per_outer = self._per_outer
            outer = tuple(map(floordiv, coords, per_outer))
            key = self._metadata.encode_chunk_key(outer)
            if self._full_counts and max(map(sub, coords, self._full_counts)) < 0:
                starts = tuple(map(mul, map(mod, coords, per_outer), sizes))
                return outer, key, tuple(map(slice, starts, map(add, starts, sizes)))
            return (
                outer,
                key,
                tuple(
                    slice((c - o * p) * n, min((c - o * p + 1) * n, extent - o * p * n))
                    for c, o, p, n, extent in zip(
                        coords, outer, per_outer, sizes, self._shape, strict=True
                    )
                ),
            )
        outer = tuple(int(c) // p for c, p in zip(coords, self._per_outer, strict=True))
        key = self._metadata.encode_chunk_key(outer)
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        outer_lo = tuple(
            int(g.chunk_offset(o * p))
            for g, o, p in zip(self._grid, outer, self._per_outer, strict=True)
        )
        selection = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, outer_lo, strict=True))
        return outer, key, selection

    def _chunk_spec(self, outer: tuple[int, ...]) -> Any:
        """The `ArraySpec` zarr decodes stored chunk `outer` with."""
        if self._regular_spec is not None:
            return self._regular_spec
        spec = chunk_spec(self._metadata, self._zarr_grid, outer, self._config, self._prototype)
        if self._regular:
            self._regular_spec = spec  # a race only makes the same spec twice
        return spec

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        outer, key, selection = self._locate(coords)

        def read() -> np.ndarray[Any, Any]:
            spec = self._chunk_spec(outer)
            if self._shards is not None:
                return self._shards.read_inner(key, spec, selection, self._fetch)
            if self._decoder is not None:
                return self._read_whole(key, spec, selection)
            return self._read_async(key, spec, selection)

        data = self._guarded(read, (tuple(coords),), key)
        return data if data.dtype == self._dtype else data.astype(self._dtype)

    def batch_key(self, coords: tuple[int, ...]) -> Hashable | None:
        """The batch chunk `coords` is read with (`BatchSource`): its shard when its reads
        are coalesced; unsharded in a local directory, its run of `LOCAL_BATCH` chunks
        along the last axis; else None (read alone)."""
        if self._coalesce:
            return tuple(int(c) // p for c, p in zip(coords, self._per_outer, strict=True))
        if self._local_batches and coords:
            return (*(int(c) for c in coords[:-1]), int(coords[-1]) // LOCAL_BATCH)
        return None

    @property
    def batch_share(self) -> bool:
        """Whether a batch should take no more than a worker's share of the queued chunks
        (`Scheduler.take_riders`): true for local batches, which save per-chunk work only,
        not for a coalesced shard, whose batch saves requests."""
        return self._local_batches

    def read_chunks(
        self, coords: Sequence[tuple[int, ...]]
    ) -> list[np.ndarray[Any, Any] | BaseException]:
        """Read chunks together (`BatchSource`): the inner chunks of each shard with one
        ranged read per run of adjacent byte ranges (runs at most `coalesce_gap` bytes
        apart are joined), or one read of their whole span when they fill most of it;
        unsharded chunks one after another (`read_chunk`).

        A read that fails fails the chunks of its shard (`ChunkReadError`, after
        retries); a chunk that does not decode fails alone.
        """
        results: list[np.ndarray[Any, Any] | BaseException] = [None] * len(coords)  # type: ignore[list-item]
        if self._shards is None:
            for i, one in enumerate(coords):
                try:
                    results[i] = self.read_chunk(one)
                except LoadCancelledError:
                    raise
                except Exception as error:
                    results[i] = error
            return results
        shards: dict[tuple[int, ...], list[int]] = {}
        located = [self._locate(one) for one in coords]
        for i, (outer, _, _) in enumerate(located):
            shards.setdefault(outer, []).append(i)
        for outer, members in shards.items():
            key = located[members[0]][1]
            batch = tuple(tuple(coords[i]) for i in members)
            read = functools.partial(
                self._shards.read_many,
                key,
                self._chunk_spec(outer),
                [located[i][2] for i in members],
                self._fetch,
                gap=self._coalesce_gap,
                spread=functools.partial(self._spread, readers=batch),
            )
            try:
                found = self._guarded(read, batch, key)
            except ChunkReadError as error:
                for i in members:
                    results[i] = error
                continue
            for i, data in zip(members, found, strict=True):
                if isinstance(data, BaseException):
                    failure = ChunkReadError(
                        f"{self._location}: chunk {key!r} (grid position {tuple(coords[i])}): "
                        f"{type(data).__name__}: {data} (a permanent error, not retried)"
                    )
                    failure.__cause__ = data
                    results[i] = failure
                else:
                    results[i] = data if data.dtype == self._dtype else data.astype(self._dtype)
        return results

    def _spread(
        self,
        job: Callable[[Any], Any],
        items: Sequence[Any],
        *,
        readers: Sequence[tuple[int, ...]],
    ) -> list[Any]:
        """`job` on each item: the first on this thread, the others at once on run threads
        (each tracked as a reader of chunks `readers`, so that `cancel_load` reaches it)."""
        pending: list[Future[Any]] = []
        for item in items[1:]:
            future: Future[Any] = Future()

            def task(item: Any = item, future: Future[Any] = future) -> None:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    with self._reading(readers):
                        future.set_result(job(item))
                except BaseException as error:  # handed to the waiting worker
                    future.set_exception(error)

            _RUN_THREADS.submit(task)
            pending.append(future)
        first = job(items[0]) if items else None
        # Each run's requests are capped by the timeouts; this only backs them up.
        wait = self._timeouts.connect + self._timeouts.total + 5
        return [first, *(future.result(timeout=wait) for future in pending)][: len(items)]

    @contextmanager
    def _reading(self, coords: Sequence[tuple[int, ...]]) -> Iterator[None]:
        """This thread tracked as a reader of chunks `coords` while the block runs."""
        if not self._remote:
            yield
            return
        reader = threading.get_ident()
        with self._readers_lock:
            for one in coords:
                self._readers.setdefault(one, set()).add(reader)
        try:
            yield
        finally:
            with self._readers_lock:
                self._cancelled.discard(reader)
                for one in coords:
                    readers = self._readers.get(one)
                    if readers is not None:
                        readers.discard(reader)
                        if not readers:
                            del self._readers[one]

    def _guarded[T](self, read: Callable[[], T], coords: Sequence[tuple[int, ...]], key: str) -> T:
        """`read()` retried by the policy, its failure a `ChunkReadError` naming `key`."""
        attempts = 1

        def count(attempt: int, error: BaseException) -> None:
            nonlocal attempts
            attempts = attempt + 1

        try:
            if not self._remote:  # nothing to track: no context manager per chunk read
                return self._retry.call(read, on_retry=count)
            with self._reading(coords):
                return self._retry.call(read, on_retry=count)
        except LoadCancelledError:
            raise  # not a failure of the data: the cache queues the chunk again
        except Exception as error:
            how = attempts_note(error, attempts)
            where = (
                f"grid position {coords[0]}"
                if len(coords) == 1
                else f"grid positions {', '.join(str(c) for c in coords)}"
            )
            raise ChunkReadError(
                f"{self._location}: chunk {key!r} ({where}): "
                f"{type(error).__name__}: {error} ({how})"
            ) from error

    cancel_superseded = False
    """A superseded download is left to finish (the cache parks its chunk): cut off, it would
    be fetched again whenever a later view wants it. `cancel_load` serves `close()`."""

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        """Stop the remote reads of chunk `coords` in flight (`CancellableSource`).

        Their request runs to its end (obstore's blocking call cannot be stopped), but then
        `read_chunk` raises `LoadCancelledError` instead of decoding, retrying or reading
        the batch's other runs; local reads are short and left to finish.
        """
        with self._readers_lock:
            self._cancelled.update(self._readers.get(tuple(coords), ()))

    def _fetch(
        self, key: str, byte_range: ByteRequest | None = None, *, settle: bool = True
    ) -> Fetched:
        """The bytes of `key` (or of a range of it), bounded, and the file version read.

        Whole values are capped at the largest plausible encoding of a stored
        chunk, ranges at their length; the fetcher reads them (`fetchers`).
        """
        limit = range_size(byte_range)
        self._stop_if_cancelled(key)
        found = self._fetcher.fetch(
            key, byte_range, self._max_stored_bytes if limit is None else limit, settle=settle
        )
        self._stop_if_cancelled(key)
        return found

    def _stop_if_cancelled(self, key: str) -> None:
        if self._cancelled and threading.get_ident() in self._cancelled:
            raise LoadCancelledError(f"{self._location}: read of {key!r} cancelled")

    def _read_whole(
        self, key: str, spec: Any, selection: tuple[slice, ...]
    ) -> np.ndarray[Any, Any]:
        """Fetch one stored chunk and decode it, bounded, on this thread.

        The decoded array is returned as is (no scatter copy) unless the chunk is
        clipped at the array's edge.
        """
        assert self._decoder is not None
        shape = tuple(sel.stop - sel.start for sel in selection)
        for _ in range(_REWRITE_ATTEMPTS):
            found = self._fetch(key)
            if found is None:
                return np.full(shape, self._fill_value, dtype=self._dtype)
            try:
                decoded = self._decode(found[0], spec)
                break
            except Exception:
                # A writer mid-rewrite (truncated, then written whole): its next version
                # decodes, or fails for good once the file stays as it is.
                if not _changed_after_settling(
                    self._fetch, key, found, local=self._fetcher.kind == "local"
                ):
                    raise
        else:
            raise FileChangedError(
                f"{self._fetcher.file_of(key)}: the file kept changing while it was read "
                f"({_REWRITE_ATTEMPTS} versions that do not decode); retry later"
            )
        if decoded.shape == shape:
            return decoded
        return np.array(decoded[selection], copy=True)

    def _decode(self, raw: Any, spec: Any) -> np.ndarray[Any, Any]:
        assert self._decoder is not None
        decoded = self._decoder.decode_pooled(raw, spec)
        if decoded is None:
            decoded = np.asarray(self._decoder.decode_chunk(raw, spec).as_ndarray_like())
        return decoded

    def _read_async(
        self, key: str, spec: Any, selection: tuple[slice, ...]
    ) -> np.ndarray[Any, Any]:
        """Codecs without a synchronous form: zarr's async pipeline (not size-bounded)."""
        shape = tuple(sel.stop - sel.start for sel in selection)
        out = self._prototype.nd_buffer.empty(shape=shape, dtype=self._dtype, order="C")
        batch = [(self._store_path / key, spec, selection, (slice(None),) * len(shape), False)]
        compat.run_sync(self._pipeline.read(batch, out))
        return np.asarray(out.as_ndarray_like())

    def __repr__(self) -> str:
        return f"ZarrChunkSource({self._location!r}, shape={self._shape}, dtype={self._dtype})"


def _max_encoded_bytes(shape: Sequence[int], dtype: np.dtype[Any]) -> int:
    """The most bytes any encoding of a chunk of `shape` can plausibly take.

    Compression of incompressible data adds a little; twice the data and a MiB
    is generous for every real codec, and still refuses a 1 GiB file (or shard
    range) for a 16 KiB chunk.
    """
    return 2 * math.prod(int(s) for s in shape) * dtype.itemsize + (1 << 20)


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
    which only listing the group's members over HTTP needs. A local directory
    given as a path is read through a `BoundedLocalStore`.

    Raises
    ------
    MissingCodecError
        The metadata names a codec no installed package provides (after
        `register_installed_codecs`).
    """
    if isinstance(store, str):  # a local directory: read through a BoundedLocalStore
        store = bounded_store(store)
    # A codec zarr does not know: the installed packages' codecs are registered, once,
    # and the node opened again (`codecs`); a store of zarr's own codecs pays nothing.
    return with_installed_codecs(
        lambda: _open_node(store, path, full, zarr_format, consolidated=consolidated), full
    )


def _open_node(
    store: Any,
    path: str,
    full: str,
    zarr_format: Literal[2, 3] | None,
    *,
    consolidated: bool,
) -> zarr.Array[Any] | zarr.Group:
    try:
        with zarr_errors(full), zarr.config.set(compat.FUSED_PIPELINE_CONFIG):
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
    except MetadataError as error:
        if isinstance(error.__cause__, compat.RectilinearChunksDisabledError):
            flag = compat.RECTILINEAR_CHUNKS_FLAG
            variable = "ZARR_" + flag.upper().replace(".", "__")
            raise DisabledFeatureError(
                f"{full}: the array has a rectilinear chunk grid (chunks of varying sizes), "
                "which zarr-python reads only when enabled (experimental, off by default); "
                f"set {variable}=True in the environment before starting napari, or "
                f"zarr.config.set({{{flag!r}: True}}) in Python, to read it"
            ) from error.__cause__
        raise


def open_zarr_source(
    path_or_url: str | os.PathLike[str],
    *,
    path: str = "",
    retry: RetryPolicy = DEFAULT_RETRY,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    coalesce: bool | None = None,
    coalesce_gap: int = 0,
) -> ZarrChunkSource:
    """Open the zarr array at `path_or_url` (optionally `path` inside it) as a chunk source.

    `retry` says how transient read failures (connection resets, timeouts,
    HTTP 429/5xx, truncated bodies) are retried before a chunk fails;
    `timeouts` caps each request (for local files, `total` caps each read).
    `coalesce` reads the inner chunks of a shard that are loaded together with
    one request per run of adjacent byte ranges (runs at most `coalesce_gap`
    bytes apart are joined; default 0, since a gap over-reads); None (default)
    coalesces on remote stores only, where a request costs a round trip.
    Local directories and zip files are read through `BoundedLocalStore` and
    `BoundedZipStore`: regular files only, every read bounded.

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
    store, local_dir = store_for(location, timeouts=timeouts)
    if local_dir is not None and path:
        check_local(os.path.join(local_dir, path))
    full = f"{location.rstrip('/')}/{path}" if path else location
    try:
        store = bounded_store(store, timeouts=timeouts)
        node = open_node(store, path, full)
    finally:
        forget_metadata(store)
    if isinstance(node, zarr.Group):
        arrays = group_arrays(node)
        hint = (
            f"; open one of its arrays: {', '.join(repr(a) for a in arrays[:8])}"
            if arrays
            else " with no arrays"
        )
        raise NotAZarrStoreError(f"{full}: is a zarr group, not an array{hint}")
    return ZarrChunkSource(
        node,
        location=full,
        retry=retry,
        timeouts=timeouts,
        coalesce=coalesce,
        coalesce_gap=coalesce_gap,
    )


def _codec_names(metadata: dict[str, Any]) -> list[str]:
    """The codecs of an array's metadata document, nested (sharding) ones included: a Zarr
    v2 ``compressor`` and ``filters``, Zarr v3 ``codecs`` (their ``name``)."""
    found: list[str] = []
    pending: list[Any] = [
        metadata.get("compressor"),
        metadata.get("filters"),
        metadata.get("codecs"),
    ]
    while pending:
        node = pending.pop()
        if isinstance(node, list | tuple):
            pending.extend(node)
        elif isinstance(node, dict):
            name = node.get("id", node.get("name"))
            if isinstance(name, str):
                found.append(name)
            configuration = node.get("configuration")
            if isinstance(configuration, dict):
                pending.extend((configuration.get("codecs"), configuration.get("index_codecs")))
    return found


def _bounded_without_sync(pipeline: Any) -> BoundedDecode | None:
    """A bounded decode for a chain zarr cannot run synchronously, when only the
    compressors it decodes itself lacked a synchronous form (``numcodecs.zlib`` and the
    other numcodecs and imagecodecs Zarr v3 wrappers); else None (zarr's async pipeline)."""
    codecs = compat.pipeline_codecs(pipeline)
    if codecs is None:
        return None
    try:
        return BoundedDecode(None, codecs)
    except TypeError:
        return None


def _refuse_unbounded(location: str, unbounded: Sequence[str]) -> None:
    """Refuse, at open, an array a codec could decompress without bound (a bomb).

    `unbounded` names the codecs nothing caps: bounded are the stream codecs
    `BoundedDecode` decodes itself (the chain of a whole chunk, or of a shard's
    inner chunks) and codecs whose output size the chunk fixes; a chain zarr
    decodes alone (a codec without a synchronous form) bounds nothing, so its
    stream codecs are named too.
    """
    if unbounded:
        raise UnsupportedDataError(
            f"{location}: the codec {unbounded[0]!r} could decompress a chunk "
            "without bound where it stands in this array's codecs (nothing here "
            "caps its output at the chunk's size); such arrays are not read"
        )


def _changed_after_settling(
    fetch: Callable[[str], Fetched], key: str, found: Fetched, *, local: bool
) -> bool:
    """After a local chunk file failed to decode: whether it is another version once
    the settle window has passed (`fetch` reads it again).

    A writer that truncates a file and writes it whole moments later leaves, for
    those moments, an empty file whose stamp may still be the old version's: the
    kernel does not always mark a truncating open's times (seen here: an empty
    file stamped 106 ms old, 20 ms after the truncation). No encoding of a chunk
    is empty, so an empty file is read again after `SETTLE_SECONDS`, and a changed
    version is decoded instead (the torn-read promise of `core.storage.files`).
    A written file that fails (with a fresh stamp the settle window covers
    already) fails at once.
    """
    if not local or found is None or found[1] is None or len(found[0]):
        return False
    time.sleep(SETTLE_SECONDS)
    again = fetch(key)
    return again is None or again[1] != found[1] or again[0].to_bytes() != found[0].to_bytes()
