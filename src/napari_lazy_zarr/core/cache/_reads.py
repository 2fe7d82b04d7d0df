"""What a worker of a `ChunkCache` does outside the lock: read (or combine) chunks.

Thread contract
---------------
These functions run on a worker thread *without* the cache's lock. They read
only what a LOADING entry's worker owns until it finishes (its `source`,
`coords`, `key`, and a derived chunk's gathered `inputs`) and change no state:
the façade records their outcomes under the lock (`Workers.finish`).

Interrupts
----------
Whatever a source raises ends as its chunk's outcome, `BaseException`
included: a `KeyboardInterrupt` or `SystemExit` out of a read (a dask task's,
or Ctrl-C while an `InlineExecutor` reads on the main thread) becomes an
`InterruptedReadError` (a retryable `ChunkReadError` naming it), so the chunk
FAILS instead of staying LOADING for good; the worker re-raises the interrupt
once the outcome is recorded (`interruption`).
"""

from __future__ import annotations

import asyncio
import traceback
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from napari_lazy_zarr.core.errors import ChunkReadError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.cache._residency import Entry
    from napari_lazy_zarr.core.sources.protocol import BatchSource, DerivedSource

__all__ = [
    "InterruptedReadError",
    "Outcome",
    "checked",
    "interruption",
    "kept_lightly",
    "read_batch",
    "read_one",
]

type Outcome = tuple[Entry, np.ndarray[Any, Any] | None, BaseException | None]


class InterruptedReadError(ChunkReadError):
    """A read ended by a `KeyboardInterrupt` or `SystemExit` (its `interrupt`); retryable."""

    def __init__(self, message: str, interrupt: BaseException) -> None:
        super().__init__(message)
        self.interrupt = interrupt


def kept_lightly(error: BaseException) -> BaseException:
    """`error`, its chain's tracebacks stripped of their frames' variables.

    A failed chunk keeps its error (its entry, the event log, a request's
    failures) for as long as the user may ask why it failed; its traceback's
    frames would keep every variable of the read alive with it -- the chunk's
    bytes and decode buffers (256 failed 512 KiB chunks under a 16 MiB limit
    held +130 MiB; one 2 MiB chunk failing 600 times, +1.2 GiB). The messages
    and the traceback's lines stay.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__
    return error


def _failure(what: object, error: BaseException) -> BaseException:
    """What a load that raised `error` fails with: `error`, or an interrupt wrapped (their
    frames' variables cleared: `kept_lightly`)."""
    kept_lightly(error)
    if isinstance(error, Exception | asyncio.CancelledError):
        return error
    wrapped = InterruptedReadError(
        f"{what}: the read was interrupted ({type(error).__name__}: {error}); "
        "retry to read it again",
        error,
    )
    wrapped.__cause__ = error
    return wrapped


def interruption(outcomes: Sequence[Outcome]) -> BaseException | None:
    """The interrupt (`KeyboardInterrupt`, `SystemExit`) that ended one of these loads."""
    for _, _, error in outcomes:
        if isinstance(error, InterruptedReadError):
            return error.interrupt
    return None


def read_one(entry: Entry) -> Outcome:
    """Read one chunk, or combine a derived chunk's gathered inputs: its outcome."""
    try:
        inputs = entry.inputs
        if inputs is None:
            raw = entry.source.read_chunk(entry.coords)
        else:
            raw = cast("DerivedSource", entry.source).combine(entry.coords, inputs)
        return entry, checked(entry, raw), None
    except BaseException as error:  # an interrupt too: the chunk must not stay LOADING
        return entry, None, _failure(f"chunk {entry.key}", error)


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
    except BaseException as error:  # an interrupt too: no chunk may stay LOADING
        failure = _failure(f"{source!r}: a batch of {len(entries)} chunks", error)
        return [(entry, None, failure) for entry in entries]
    outcomes: list[Outcome] = []
    for entry, result in zip(entries, results, strict=True):
        if isinstance(result, BaseException):
            outcomes.append((entry, None, kept_lightly(result)))
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
