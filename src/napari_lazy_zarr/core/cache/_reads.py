"""What a worker of a `ChunkCache` does outside the lock: read (or combine) chunks.

Thread contract
---------------
These functions run on a worker thread *without* the cache's lock. They read
only what a LOADING entry's worker owns until it finishes (its `source`,
`coords`, `key`, and a derived chunk's gathered `inputs`) and change no state:
the façade records their outcomes under the lock (`ChunkCache._finish_loads`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from napari_lazy_zarr.core.errors import ChunkReadError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.cache._residency import Entry
    from napari_lazy_zarr.core.sources.protocol import BatchSource, DerivedSource

__all__ = ["Outcome", "checked", "read_batch", "read_one"]

type Outcome = tuple[Entry, np.ndarray[Any, Any] | None, BaseException | None]


def read_one(entry: Entry) -> Outcome:
    """Read one chunk, or combine a derived chunk's gathered inputs: its outcome."""
    try:
        inputs = entry.inputs
        if inputs is None:
            raw = entry.source.read_chunk(entry.coords)
        else:
            raw = cast("DerivedSource", entry.source).combine(entry.coords, inputs)
        return entry, checked(entry, raw), None
    except (Exception, asyncio.CancelledError) as error:  # the latter is no Exception
        return entry, None, error


def read_batch(entries: Sequence[Entry]) -> list[Outcome]:
    """Read a batch with one `read_chunks` call (no lock held); each chunk's outcome."""
    source = cast("BatchSource", entries[0].source)
    try:
        results = source.read_chunks([entry.coords for entry in entries])
        if len(results) != len(entries):
            raise ChunkReadError(
                f"{source!r}: read_chunks returned {len(results)} results "
                f"for {len(entries)} chunks"
            )
    except (Exception, asyncio.CancelledError) as error:  # the latter is no Exception
        return [(entry, None, error) for entry in entries]
    outcomes: list[Outcome] = []
    for entry, result in zip(entries, results, strict=True):
        if isinstance(result, BaseException):
            outcomes.append((entry, None, result))
            continue
        try:
            outcomes.append((entry, checked(entry, result), None))
        except ChunkReadError as error:
            outcomes.append((entry, None, error))
    return outcomes


def checked(entry: Entry, data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Refuse a chunk whose shape or dtype would put wrong pixels on screen."""
    array = np.asarray(data)
    dtype = entry.source.dtype
    if array.shape != entry.key.shape:
        raise ChunkReadError(
            f"chunk {entry.key}: source returned shape {array.shape}, expected {entry.key.shape}"
        )
    if array.dtype != dtype:
        raise ChunkReadError(
            f"chunk {entry.key}: source returned dtype {array.dtype}, expected {dtype}"
        )
    return array
