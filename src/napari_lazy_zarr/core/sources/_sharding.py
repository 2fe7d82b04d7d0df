"""Reading inner chunks of a shard: one ranged read per chunk (or per run of them), and
the shard's index read once and kept.

zarr-python's sharding codec re-reads a shard's index for every partial read;
`ShardReader` keeps the decoded indexes (bounded, `SHARD_INDEX_BYTES` per array)
and reads each inner chunk with one ranged read through the source's bounded
fetch, decoded by the inner codec chain (`BoundedDecode`). A store-level
adapter in TensorStore's terms (``kvstore/zarr3_sharding_indexed``), kept
apart from the chunk source that drives it (`ZarrChunkSource`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from operator import attrgetter, floordiv, mul, sub
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from zarr.abc.store import RangeByteRequest

from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.sources import _zarr_compat as compat
from napari_lazy_zarr.core.sources._decode import BoundedDecode, ExpansionError
from napari_lazy_zarr.core.sources._zarr_compat import (  # per chunk read: bound once here
    inner_chunk_spec,
    inner_chunks_per_shard,
    shard_chunk_range,
)
from napari_lazy_zarr.core.sources.protocol import fill_value_of
from napari_lazy_zarr.core.storage.files import (
    TORN_READ_ATTEMPTS,
    FileChangedError,
    FileStamp,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest
    from zarr.codecs import ShardingCodec

    from napari_lazy_zarr.core.sources.fetchers import Fetched

__all__ = ["SHARD_INDEX_BYTES", "ShardReader", "Spread"]

# Decoded shard indexes kept per array, in bytes (16 per inner chunk): 16 MiB holds the
# indexes of 16,384 shards of 8 x 8 inner chunks, or 1,024 of 32 x 32.
SHARD_INDEX_BYTES: Final = 16 << 20
_INDEX_ENTRY_BYTES: Final = 16  # an inner chunk's (offset, length) as two uint64
# A batch of inner chunks is read as one span of its shard when the chunks fill at least
# this much of the span: one request instead of several, at most a third more bytes.
_SPAN_FILL: Final = 0.75

type Spread = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]
"""Runs a job on each item (maybe on several threads at once); the results, in order."""

# A batched shard read decodes its chunks in at most this many groups at once.
_DECODE_GROUPS: Final = 4


def _one_by_one(job: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """`Spread` on the calling thread."""
    return [job(item) for item in items]


_START, _STOP = attrgetter("start"), attrgetter("stop")


class _IndexGetter:
    """What zarr's sharding codec reads a shard index through: our bounded `fetch`.

    The index is read without the settle wait (`SETTLE_SECONDS`): every inner
    chunk read after it settles and must carry the index's stamp, so a rewrite
    in place within the window is seen there (and zarr's default index codec
    checks a crc32c). Waiting here as well would leave 50 ms between the index and
    the chunk reads, in which a writer replacing the shard atomically and often
    would make every read see two versions.
    """

    def __init__(self, fetch: Callable[..., Fetched], key: str) -> None:
        self._fetch = fetch
        self._key = key
        self.stamp: FileStamp | None = None

    def get_sync(
        self, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        found = self._fetch(self._key, byte_range, settle=False)
        if found is None:
            return None
        self.stamp = found[1]
        return found[0]


class ShardReader:
    """Reads one inner chunk of a shard: a byte-range read and the inner codecs, nothing more.

    zarr-python's pipeline re-reads and re-decodes a shard's index for every
    partial read (two requests and ~0.6 ms extra per 512² inner chunk here);
    this keeps decoded indexes (a few KiB each, bounded LRU), so each inner
    chunk costs one ranged read and one decode, by zarr's own sharding codec
    and inner codec chain, bounded (`BoundedDecode`). An index range longer
    than any encoding of an inner chunk is refused before it is read. A local
    shard rewritten since its index was read (another file version) has its
    index read again, so a stale index never serves another file's bytes.
    Thread-safe.
    """

    def __init__(self, codec: ShardingCodec, max_inner_bytes: int) -> None:
        self._codec = codec
        self._inner_shape = tuple(int(c) for c in codec.chunk_shape)
        self._max_inner_bytes = max_inner_bytes
        self._indexes: OrderedDict[str, tuple[Any, FileStamp | None]] = OrderedDict()
        self._index_bytes = 0  # of the kept indexes: at most SHARD_INDEX_BYTES
        self._index_size = 0  # bytes of one (every shard of an array has as many chunks)
        self._chunks_per_shard: tuple[int, ...] | None = None
        self._inner_specs: dict[Any, Any] = {}  # shard spec -> inner chunk spec
        self._decoders: dict[Any, BoundedDecode] = {}
        self._last: tuple[Any, BoundedDecode, Any] | None = None  # spec, decoder, inner spec
        self._loading: dict[str, threading.Lock] = {}  # indexes being read, held by the reader
        self._lock = threading.Lock()

    @classmethod
    def for_pipeline(cls, pipeline: Any, max_inner_bytes: int) -> ShardReader | None:
        """A reader when the pipeline is exactly one sharding codec, else None."""
        codec = compat.sole_sharding_codec(pipeline)
        return None if codec is None else cls(codec, max_inner_bytes)

    def _index(
        self,
        key: str,
        chunks_per_shard: tuple[int, ...],
        fetch: Callable[..., Fetched],
        *,
        fresh: bool = False,
    ) -> tuple[Any, FileStamp | None]:
        # One read per index: workers wanting the same shard's index meanwhile wait for
        # it (one request instead of one each), then read it themselves if it failed.
        # `fresh` (a retry after the shard changed) never takes a kept index: one read
        # by another worker moments ago may already be of an older version.
        while True:
            with self._lock:
                entry = None if fresh else self._indexes.get(key)
                if entry is not None:
                    self._indexes.move_to_end(key)
                    return entry
                loading = self._loading.get(key)
                if loading is None:
                    loading = self._loading[key] = threading.Lock()
                    loading.acquire()
                    break
            with loading:  # the reader releases it when done, whatever happened
                pass
        try:
            getter = _IndexGetter(fetch, key)
            index = compat.load_shard_index(self._codec, getter, chunks_per_shard)
            entry = (index, getter.stamp)
            if index is not None:
                with self._lock:
                    self._index_size = _INDEX_ENTRY_BYTES * math.prod(chunks_per_shard)
                    if key not in self._indexes:
                        self._index_bytes += self._index_size
                    self._indexes[key] = entry
                    while self._index_bytes > SHARD_INDEX_BYTES and len(self._indexes) > 1:
                        self._indexes.popitem(last=False)
                        self._index_bytes -= self._index_size
            return entry
        finally:
            with self._lock:
                del self._loading[key]
            loading.release()

    @property
    def kept_bytes(self) -> int:
        return self._index_bytes

    def _forget(self, key: str) -> None:
        with self._lock:
            if self._indexes.pop(key, None) is not None:
                self._index_bytes -= self._index_size

    def _per_shard(self, shard_spec: Any) -> tuple[int, ...]:
        """Inner chunks per shard along each axis (one shard shape per array: kept)."""
        found = self._chunks_per_shard
        if found is None:
            found = self._chunks_per_shard = inner_chunks_per_shard(self._codec, shard_spec)
        return found

    def unbounded(self, shard_spec: Any) -> tuple[str, ...]:
        """The inner chain's codecs nothing bounds (`BoundedDecode.unbounded`)."""
        return self._decoder(shard_spec).unbounded

    def _decoder(self, shard_spec: Any) -> BoundedDecode:
        decoder = self._decoders.get(shard_spec)
        if decoder is None:
            decoder = BoundedDecode(compat.inner_chunk_transform(self._codec, shard_spec))
            with self._lock:
                self._decoders[shard_spec] = decoder
        return decoder

    def _inner(
        self, selection: tuple[slice, ...]
    ) -> tuple[tuple[int, ...], tuple[slice, ...], tuple[int, ...]]:
        """The inner chunk a shard-local `selection` lies in: its coordinates, the
        selection within it, and the selection's shape."""
        inner = self._inner_shape
        if len(selection) != len(inner):
            raise ValueError(f"a selection of {len(selection)} axes in a shard of {len(inner)}")
        # In C (once per inner chunk read: generators cost 109 bytecodes).
        starts = tuple(map(_START, selection))
        stops = tuple(map(_STOP, selection))
        coords = tuple(map(floordiv, starts, inner))
        offsets = tuple(map(mul, coords, inner))
        local = tuple(map(slice, map(sub, starts, offsets), map(sub, stops, offsets)))
        return coords, local, tuple(map(sub, stops, starts))

    def _decode(
        self, raw: Buffer, shard_spec: Any, local: tuple[slice, ...], shape: tuple[int, ...]
    ) -> np.ndarray[Any, Any]:
        # A regular grid hands every read the same spec object: matched by identity, it
        # spares hashing the spec twice per chunk (~2 µs each; a dataclass of five fields).
        last = self._last
        if last is not None and last[0] is shard_spec:
            decoder, spec = last[1], last[2]
        else:
            decoder = self._decoder(shard_spec)
            spec = self._inner_specs.get(shard_spec)
            if spec is None:
                spec = self._inner_specs[shard_spec] = inner_chunk_spec(self._codec, shard_spec)
            self._last = (shard_spec, decoder, spec)  # one assignment: safe to race
        decoded = decoder.decode_pooled(raw, spec)
        if decoded is None:
            decoded = np.asarray(decoder.decode_chunk(raw, spec).as_ndarray_like())
        if decoded.shape == shape:
            return decoded
        return np.array(decoded[local], copy=True)

    def read_many(
        self,
        key: str,
        shard_spec: Any,
        selections: Sequence[tuple[slice, ...]],
        fetch: Callable[[str, ByteRequest | None], Fetched],
        *,
        gap: int = 0,
        spread: Spread | None = None,
    ) -> list[np.ndarray[Any, Any] | BaseException]:
        """Inner chunks of shard `key` (shard-local `selections`), read with one request
        per run of byte ranges at most `gap` bytes apart, or one request for their whole
        span when they fill `_SPAN_FILL` of it. The index is read once (and kept).

        Each run is fetched and its chunks decoded as one job; `spread` runs the
        jobs (e.g. at once, on several threads; default: one after another). A chunk
        that does not decode is returned as its error; a failed read raises.
        """
        dtype = shard_spec.dtype.to_native_dtype()
        fill_value = fill_value_of(shard_spec.fill_value, dtype)
        located = [self._inner(selection) for selection in selections]
        chunks_per_shard = self._per_shard(shard_spec)
        for attempt in range(TORN_READ_ATTEMPTS):
            index, stamp = self._index(key, chunks_per_shard, fetch, fresh=attempt > 0)
            ranges: list[tuple[int, int, int]] = []  # (start, stop, member)
            results: dict[int, np.ndarray[Any, Any] | BaseException] = {}
            for member, (coords, _, _) in enumerate(located):
                found = None if index is None else shard_chunk_range(index, coords)
                if found is None:
                    continue
                start, stop = found
                if stop - start > self._max_inner_bytes:
                    results[member] = ExpansionError(
                        f"shard index gives inner chunk {coords} {stop - start:,} bytes, more "
                        f"than any encoding of it takes ({self._max_inner_bytes:,})"
                    )
                    continue
                ranges.append((start, stop, member))
            ranges.sort()
            runs = _runs(ranges, gap)
            if len(runs) > 1:
                span = (runs[0][0], max(stop for _, stop, _ in runs))
                if sum(b - a for a, b, _ in ranges) >= _SPAN_FILL * (span[1] - span[0]):
                    runs = [(*span, ranges)]

            def fetch_run(
                run: tuple[int, int, list[tuple[int, int, int]]], stamp: FileStamp | None = stamp
            ) -> dict[int, Buffer] | None:
                return self._fetch_run(key, run, stamp, fetch)

            def decode(members: list[tuple[int, Buffer]]) -> list[Any]:
                return [self._decode_member(part, shard_spec, located[m]) for m, part in members]

            run_all = spread if spread is not None else _one_by_one
            fetched = run_all(fetch_run, runs)
            if any(parts is None for parts in fetched):
                self._forget(key)  # rewritten since its index was read: read it again
                continue
            parts = [item for found in fetched for item in found.items()]
            # Decoded in up to `_DECODE_GROUPS` groups at once: one run may hold them all.
            size = max(1, math.ceil(len(parts) / _DECODE_GROUPS))
            groups = [parts[i : i + size] for i in range(0, len(parts), size)]
            for group, decoded in zip(groups, run_all(decode, groups), strict=True):
                results.update(zip((m for m, _ in group), decoded, strict=True))
            # An absent chunk reads as the fill value (made only for those: `get`'s default
            # would fill a whole chunk for every chunk read).
            return [
                results[member] if member in results else np.full(shape, fill_value, dtype=dtype)
                for member, (_, _, shape) in enumerate(located)
            ]
        raise FileChangedError(f"{key}: the shard kept changing while it was read; retry later")

    def _fetch_run(
        self,
        key: str,
        run: tuple[int, int, list[tuple[int, int, int]]],
        stamp: FileStamp | None,
        fetch: Callable[[str, ByteRequest | None], Fetched],
    ) -> dict[int, Buffer] | None:
        """One run's bytes, split per member chunk; ``{}`` when the shard is gone (its
        chunks read as fill), None when it was rewritten since the index (of version
        `stamp`) was read."""
        start, stop, members = run
        found = fetch(key, RangeByteRequest(start, stop))
        if found is None:  # the shard vanished since its index was read
            self._forget(key)
            return {}
        raw, raw_stamp = found
        if raw_stamp != stamp:
            return None
        if len(raw) != stop - start:
            raise ChunkReadError(
                f"{key}: bytes {start}-{stop} of the shard came back {len(raw):,} bytes long"
            )
        return {
            member: raw[chunk_start - start : chunk_stop - start]
            for chunk_start, chunk_stop, member in members
        }

    def _decode_member(
        self,
        part: Buffer,
        shard_spec: Any,
        located: tuple[tuple[int, ...], tuple[slice, ...], tuple[int, ...]],
    ) -> np.ndarray[Any, Any] | BaseException:
        """One inner chunk decoded, or the error that fails it alone."""
        _, local, shape = located
        try:
            return self._decode(part, shard_spec, local, shape)
        except Exception as error:
            return error

    def read_inner(
        self,
        key: str,
        shard_spec: Any,
        selection: tuple[slice, ...],
        fetch: Callable[[str, ByteRequest | None], Fetched],
    ) -> np.ndarray[Any, Any]:
        """Exactly one inner chunk of shard `key`, `selection` (shard-local), clipped."""
        coords, local, shape = self._inner(selection)
        chunks_per_shard = self._per_shard(shard_spec)
        for attempt in range(TORN_READ_ATTEMPTS):
            index, stamp = self._index(key, chunks_per_shard, fetch, fresh=attempt > 0)
            chunk_range = None if index is None else shard_chunk_range(index, coords)
            if chunk_range is None:  # absent shard or absent inner chunk
                return _fill(shard_spec, shape)
            start, stop = chunk_range
            if stop - start > self._max_inner_bytes:
                raise ExpansionError(
                    f"shard index gives inner chunk {coords} {stop - start:,} bytes, more "
                    f"than any encoding of it takes ({self._max_inner_bytes:,})"
                )
            found = fetch(key, RangeByteRequest(start, stop))
            if found is None:  # the shard vanished since its index was read
                self._forget(key)
                return _fill(shard_spec, shape)
            raw, raw_stamp = found
            if raw_stamp != stamp:  # the shard was rewritten since: read its index again
                self._forget(key)
                continue
            return self._decode(raw, shard_spec, local, shape)
        raise FileChangedError(f"{key}: the shard kept changing while it was read; retry later")


def _fill(shard_spec: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """An absent inner chunk: the array's fill value."""
    dtype = shard_spec.dtype.to_native_dtype()
    return np.full(shape, fill_value_of(shard_spec.fill_value, dtype), dtype=dtype)


def _runs(
    ranges: Sequence[tuple[int, int, int]], gap: int
) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
    """Sorted byte ranges ``(start, stop, member)`` joined into runs ``(start, stop,
    members)``: a range starting at most `gap` bytes after the run's end joins it.

    >>> [(a, b, len(m)) for a, b, m in _runs([(0, 10, 0), (10, 20, 1), (25, 30, 2)], 0)]
    [(0, 20, 2), (25, 30, 1)]
    >>> [(a, b, len(m)) for a, b, m in _runs([(0, 10, 0), (10, 20, 1), (25, 30, 2)], 5)]
    [(0, 30, 3)]
    """
    runs: list[tuple[int, int, list[tuple[int, int, int]]]] = []
    for start, stop, member in ranges:
        if runs and start - runs[-1][1] <= gap:
            run_start, run_stop, members = runs[-1]
            members.append((start, stop, member))
            runs[-1] = (run_start, max(run_stop, stop), members)
        else:
            runs.append((start, stop, [(start, stop, member)]))
    return runs
