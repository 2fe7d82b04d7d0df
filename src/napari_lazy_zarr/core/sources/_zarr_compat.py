"""The zarr-python internals the engine relies on, in one place (zarr 3.4; contract-tested).

`ZarrChunkSource` drives zarr-python's codecs from worker threads, one chunk
at a time, and bounds every read; zarr has no public API for that yet
(``Array.get_block_selection`` reads through its own store calls, unbounded,
and re-reads a shard's index for every inner chunk). What it needs beyond
zarr's public surface is here, one function per use, each naming the internal
and why. `tests/core/test_zarr_compat.py` checks each against the installed
zarr, so an upgrade that moves one fails there, by name, instead of deep in a
read. The dependency is ``zarr>=3.4,<4``: those tests, not an upper pin, guard
these.

Public zarr API the engine uses directly (not here): `zarr.buffer`
(``default_buffer_prototype``), `zarr.abc.buffer` (``Buffer``,
``BufferPrototype``), `zarr.abc.store` (``Store``, the byte requests),
`zarr.abc.codec`, `zarr.codecs.ShardingCodec` and its ``chunk_shape``,
`zarr.storage`, ``Array.async_array``/``.config``/``.metadata``/``.store_path``/
``.read_chunk_sizes``/``.shards``, ``AsyncArray.codec_pipeline`` and
``CodecPipeline.read``.

Thread contract: every function is safe to call from any thread (none keeps
state).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any, Final

from zarr.abc.store import _store_supports_sync_io
from zarr.codecs import ShardingCodec
from zarr.core.array import _get_chunk_spec
from zarr.core.codec_pipeline import FusedCodecPipeline
from zarr.core.metadata.v3 import RectilinearChunksDisabledError
from zarr.core.sync import sync

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    import zarr
    from zarr.abc.buffer import BufferPrototype

__all__ = [
    "FUSED_PIPELINE_CONFIG",
    "RECTILINEAR_CHUNKS_FLAG",
    "RectilinearChunksDisabledError",
    "chunk_grid",
    "chunk_spec",
    "config_with_order",
    "has_regular_grid",
    "inner_chunk_spec",
    "inner_chunk_transform",
    "inner_chunks_per_shard",
    "load_shard_index",
    "run_sync",
    "settle_reads",
    "shard_chunk_range",
    "sole_sharding_codec",
    "store_supports_sync_io",
    "sync_transform",
    "transform_codecs",
    "transform_with_codecs",
    "v2_codec_with",
]

FUSED_PIPELINE_CONFIG: Final = {
    "codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"
}
"""zarr config selecting its synchronous `FusedCodecPipeline` (a documented config key;
the class lives in the private `zarr.core.codec_pipeline`)."""

RECTILINEAR_CHUNKS_FLAG: Final = "array.rectilinear_chunks"
"""The zarr config key (``ZARR_ARRAY__RECTILINEAR_CHUNKS`` in the environment) that lets
zarr 3.4 read rectilinear chunk grids, experimental and off by default; without it, opening
such an array raises `RectilinearChunksDisabledError` (private ``zarr.core.metadata.v3``,
re-exported here: zarr.errors has no name for it)."""


# -- arrays -------------------------------------------------------------------


def chunk_grid(array: zarr.Array[Any]) -> Any:
    """The `ChunkGrid` zarr indexes `array` with: ``AsyncArray._chunk_grid``.

    `chunk_spec` needs it to describe one chunk (its codec shape) exactly as zarr does.
    """
    return array.async_array._chunk_grid


def has_regular_grid(array: zarr.Array[Any]) -> bool:
    """Whether `array`'s chunk grid is regular: ``ChunkGrid.is_regular``.

    A regular grid is read as one `FixedDimension` per axis without listing its
    chunks (a huge array has millions); the public ``read_chunk_sizes`` lists them.
    """
    return bool(getattr(chunk_grid(array), "is_regular", False))


def chunk_spec(
    metadata: Any,
    grid: Any,
    coords: tuple[int, ...],
    config: Any,
    prototype: BufferPrototype,
) -> Any:
    """The `ArraySpec` of the stored chunk at `coords`: ``zarr.core.array._get_chunk_spec``.

    What zarr hands its codecs to decode that chunk (shape, dtype, fill value,
    config); called once per chunk read, so no lookups beyond the call.
    """
    return _get_chunk_spec(metadata, grid, coords, config, prototype)


def config_with_order(config: Any, order: Any) -> Any:
    """`config` (an `ArrayConfig`, a frozen dataclass) with its memory ``order`` replaced.

    A Zarr v2 array decodes in its metadata's order; zarr's `AsyncArray` does
    the same replacement internally.
    """
    return dataclasses.replace(config, order=order)


# -- codec pipeline ---------------------------------------------------------


def sync_transform(pipeline: Any) -> Any | None:
    """The synchronous codec chain of a `FusedCodecPipeline` (``.sync_transform``), else None.

    A `ChunkTransform` (private `zarr.core.chunk_utils`) with ``codecs`` and
    ``decode_chunk(raw, spec)``: decoding on the worker thread, with no event
    loop hop per chunk. None also when a codec has no synchronous form.
    """
    return pipeline.sync_transform if isinstance(pipeline, FusedCodecPipeline) else None


def pipeline_codecs(pipeline: Any) -> tuple[Any, ...] | None:
    """A codec pipeline's codecs in encode order (array-array, array-bytes, bytes-bytes:
    the fields of `BatchedCodecPipeline` and `FusedCodecPipeline`), else None."""
    try:
        return (
            *pipeline.array_array_codecs,
            pipeline.array_bytes_codec,
            *pipeline.bytes_bytes_codecs,
        )
    except AttributeError:
        return None


def chunk_transform(codecs: Sequence[Any]) -> Any:
    """A synchronous `ChunkTransform` (private `zarr.core.chunk_utils`) over `codecs`.

    Raises
    ------
    TypeError
        A codec has no synchronous form.
    """
    from zarr.core.chunk_utils import ChunkTransform

    return ChunkTransform(codecs=tuple(codecs))


def sole_sharding_codec(pipeline: Any) -> ShardingCodec | None:
    """The `ShardingCodec` when a `FusedCodecPipeline` is exactly that one codec, else None.

    Reads `FusedCodecPipeline`'s ``array_bytes_codec``, ``array_array_codecs``
    and ``bytes_bytes_codecs``: only then may inner chunks be read on their own.
    """
    if not isinstance(pipeline, FusedCodecPipeline):
        return None
    codec = pipeline.array_bytes_codec
    if not isinstance(codec, ShardingCodec):
        return None
    if pipeline.array_array_codecs or pipeline.bytes_bytes_codecs:
        return None
    return codec


def transform_codecs(transform: Any) -> tuple[Any, ...]:
    """The codecs of a `ChunkTransform`, in encode order (its ``codecs`` field)."""
    return tuple(transform.codecs)


def transform_with_codecs(transform: Any, codecs: Sequence[Any]) -> Any:
    """A `ChunkTransform` like `transform` over `codecs` (``dataclasses.replace``).

    The bounded decode runs the compressors itself and hands zarr the rest of
    the chain; building a `ChunkTransform` by name would import it from
    `zarr.core.chunk_utils`.
    """
    return dataclasses.replace(transform, codecs=tuple(codecs))


def v2_codec_with(codec: Any, *, compressor: Any, filters: tuple[Any, ...] | None) -> Any:
    """A Zarr v2 array-bytes codec (`V2Codec`) with other ``compressor``/``filters`` fields.

    The bounded decode takes over the compressor (and trailing filters) it
    knows; the remaining v2 codec decodes only what is left.
    """
    return dataclasses.replace(codec, compressor=compressor, filters=filters)


# -- sharding -------------------------------------------------------------


def inner_chunks_per_shard(codec: ShardingCodec, shard_spec: Any) -> tuple[int, ...]:
    """Inner chunks per shard along each axis: ``ShardingCodec._get_chunks_per_shard``."""
    return codec._get_chunks_per_shard(shard_spec)


def load_shard_index(codec: ShardingCodec, getter: Any, chunks_per_shard: tuple[int, ...]) -> Any:
    """A shard's decoded index, or None when absent: ``_load_shard_index_maybe_sync``.

    `getter` has ``get_sync(prototype, byte_range)``; the codec asks it for the
    index bytes (its byte range, its checksum) and decodes them. The result is
    zarr's `_ShardIndex`; ask it with `shard_chunk_range`.
    """
    return codec._load_shard_index_maybe_sync(getter, chunks_per_shard)


def shard_chunk_range(index: Any, coords: tuple[int, ...]) -> tuple[int, int] | None:
    """Inner chunk `coords`' byte range ``(start, stop)`` in its shard, None when absent.

    ``_ShardIndex.get_chunk_slice``.
    """
    found = index.get_chunk_slice(coords)
    return None if found is None else (int(found[0]), int(found[1]))


def inner_chunk_transform(codec: ShardingCodec, shard_spec: Any) -> Any:
    """The inner chunks' synchronous codec chain: ``ShardingCodec._get_inner_chunk_transform``."""
    return codec._get_inner_chunk_transform(shard_spec)


def inner_chunk_spec(codec: ShardingCodec, shard_spec: Any) -> Any:
    """The `ArraySpec` of one inner chunk of a shard: ``ShardingCodec._get_chunk_spec``."""
    return codec._get_chunk_spec(shard_spec)


# -- stores -------------------------------------------------------------------


def store_supports_sync_io(store: object) -> bool:
    """Whether `store` serves ``get_sync`` now: ``zarr.abc.store._store_supports_sync_io``.

    The public `SupportsSyncStore` protocol is not enough: a `WrapperStore`
    has the methods whether or not the store it wraps can run them.

    Examples
    --------
    >>> from zarr.storage import MemoryStore
    >>> store_supports_sync_io(MemoryStore()), store_supports_sync_io(object())
    (True, False)
    """
    return _store_supports_sync_io(store)


def run_sync[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on zarr's event loop thread and wait: ``zarr.core.sync.sync``.

    For stores without synchronous reads and codecs without a synchronous
    form: the coroutine must run on the loop zarr's stores were opened on.
    """
    return sync(coroutine)


def settle_reads(timeout: float) -> None:
    """Wait, at most `timeout` seconds, for the reads still running on zarr's event loop,
    and take their outcomes; for a process about to exit after a failed open.

    zarr reads a node's metadata documents at once (``asyncio.gather``) and raises the
    first failure; the others' outcomes are taken by callbacks the loop runs later. A
    process that exits at once (the CLI's one-line error) may stop the loop first, and
    asyncio then logs each untaken failure ("Task exception was never retrieved", a
    traceback of 20 lines). Reads that outlast `timeout` are left running.
    """

    async def settled() -> None:
        running = asyncio.all_tasks() - {asyncio.current_task()}
        if not running:
            return
        done, _ = await asyncio.wait(running, timeout=timeout)
        for task in done:
            if not task.cancelled():
                task.exception()  # taken: asyncio logs nothing for it

    sync(settled())
