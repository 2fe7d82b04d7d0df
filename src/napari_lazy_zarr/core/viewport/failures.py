"""A layer's failed chunks, as the user is told about them: once per failure, Qt-free.

The cache moves a chunk that cannot be read to FAILED and keeps the exception.
`FailureLog` follows the cache's events for the chunks of one layer's levels —
on screen, prefetched, read ahead, for the thumbnail or a 3D volume alike —
and turns them into `ChunkFailure` reports, kept until someone takes them
(`take`). A report made before anything listens (napari reads a layer while
adding it, before the plugin can connect to it) is therefore not lost.

**One report per cause.** A derived chunk (a virtual pyramid level, built from
finer chunks) whose input failed fails with an error caused by the input's
(``__cause__``), and a plate field that cannot be opened fails every chunk with
the same exception: chunks whose errors lead to the same root exception are one
failure, reported once, named by the chunk whose own read failed.

**Retries.** An explicit retry (FAILED -> QUEUED) forgets the chunk's failure;
if it fails again it is reported again, marked `ChunkFailure.again`.

Thread contract: `observe` runs in whichever thread the cache emits its events
from, `adopt` and `take` in any thread; one lock guards the log, taken before
the cache's (`ChunkCache.error`) and never while emitting anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.keys import box_text, chunk_coords
from napari_lazy_zarr.core.states import ChunkState

if TYPE_CHECKING:
    from collections.abc import Collection, Hashable, Iterable, Sequence
    from contextlib import AbstractContextManager

    from napari_lazy_zarr.core.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.states import ChunkEvent

__all__ = ["ChunkFailure", "FailureLog", "root_cause"]

_MAX_CHAIN = 32  # a cycle of causes is a bug elsewhere; never loop on it


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception of `error`'s explicit ``__cause__`` chain (itself if none).

    Examples
    --------
    >>> try:
    ...     try:
    ...         raise ValueError("bad bytes")
    ...     except ValueError as inner:
    ...         raise OSError("chunk c/0/0 failed") from inner
    ... except OSError as outer:
    ...     str(root_cause(outer))
    'bad bytes'
    """
    for _ in range(_MAX_CHAIN):
        cause = error.__cause__
        if cause is None:
            break
        error = cause
    return error


def _depth(error: BaseException) -> int:
    depth, cause = 0, error.__cause__
    while cause is not None and depth < _MAX_CHAIN:
        depth, cause = depth + 1, cause.__cause__
    return depth


@dataclass(frozen=True, slots=True)
class ChunkFailure:
    """One failure to report: a chunk of the layer that could not be read, and why.

    Examples
    --------
    >>> from napari_lazy_zarr.core import ChunkKey
    >>> failure = ChunkFailure(
    ...     ChunkKey("a.zarr/0", (256, 0), (512, 256)), 0, (1, 0), OSError("bad bytes")
    ... )
    >>> failure.chunk
    'L0 (1, 0) [256:512, 0:256]'
    >>> failure.cause_text
    'OSError: bad bytes'
    """

    key: ChunkKey
    """The chunk whose own read failed first with this cause."""
    level: int | None
    """The layer's level holding `key` (None: a chunk of no level of the layer)."""
    coords: tuple[int, ...] | None
    """`key`'s position in its level's chunk grid (None with `level`)."""
    error: BaseException
    """What `key` failed with (`ChunkCache.error`); it names the chunk and the cause."""
    again: bool = False
    """The chunk failed again after an explicit retry."""

    @property
    def chunk(self) -> str:
        """The chunk in a human form: level, grid position and box (store axes)."""
        box = box_text(self.key.inclusive_min, self.key.exclusive_max)
        if self.level is None or self.coords is None:
            return f"{self.key.source} {box}"
        position = ", ".join(str(c) for c in self.coords)
        return f"L{self.level} ({position}) {box}"

    @property
    def cause(self) -> BaseException:
        """The innermost cause of `error` (`root_cause`): what chunks failing alike share."""
        return root_cause(self.error)

    @property
    def cause_text(self) -> str:
        """``Type: message`` of `cause`."""
        cause = self.cause
        return f"{type(cause).__name__}: {cause}"


class _Cause:
    """The layer's FAILED chunks sharing one root exception (held: its id stays unique)."""

    __slots__ = ("keys", "reported", "root")

    def __init__(self, root: BaseException) -> None:
        self.root = root
        self.keys: set[ChunkKey] = set()
        self.reported = 0  # the observation that last reported it


class FailureLog:
    """The failed chunks of one layer's levels, each failure reported once (thread-safe).

    Parameters
    ----------
    levels
        The layer's levels (their chunks are the ones followed).
    cache
        The cache they are read through (asked for each failed chunk's error).

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core import ArraySource, ChunkCache, ChunkRef, InlineExecutor
    >>> class Broken(ArraySource):
    ...     def read_chunk(self, coords):
    ...         raise OSError(f"disk error at {coords}")
    >>> source = Broken(np.zeros((8, 8)), chunks=(4, 4), name="b")
    >>> cache = ChunkCache(1 << 20, executor=InlineExecutor())
    >>> log = FailureLog([source], cache)
    >>> _ = cache.state_changed.connect(log.observe)
    >>> cache.request([ChunkRef.of(source, (1, 0))]).release()
    >>> [(f.chunk, str(f.error)) for f in log.take()]
    [('L0 (1, 0) [4:8, 0:4]', 'disk error at (1, 0)')]
    >>> log.take()  # taken: not reported twice
    ()
    >>> cache.retry_failed()
    1
    >>> [f.again for f in log.take()]
    [True]
    >>> cache.close()
    """

    def __init__(
        self,
        levels: Sequence[ChunkSource],
        cache: ChunkCache,
        *,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self._cache = cache
        self._levels: dict[Hashable, tuple[int, ChunkSource]] = {}
        for level, source in enumerate(levels):
            self._levels.setdefault(source.identity, (level, source))
        # The owner's lock when given (a controller's: one lock for its whole state).
        self._lock = lock if lock is not None else threading.Lock()
        self._causes: dict[int, _Cause] = {}  # by id() of the root exception
        self._cause_of: dict[ChunkKey, _Cause] = {}
        self._retried: dict[ChunkKey, int] = {}  # chunk -> the observation that saw its retry
        self._pending: list[ChunkFailure] = []
        self._seen = 0  # observations so far

    def observe(self, events: Iterable[ChunkEvent]) -> tuple[ChunkFailure, ...]:
        """Follow a batch of the cache's events; returns the new failures (also kept for `take`).

        Connect it to `ChunkCache.state_changed`, or call it from a listener.
        """
        failed: dict[ChunkKey, None] = {}
        with self._lock:
            self._seen += 1
            for event in events:
                # States first: most moves concern no failure, and comparing them is cheaper
                # than hashing a source identity (every layer sees every batch).
                key = event.key
                if event.previous is ChunkState.FAILED:  # an explicit retry
                    if key.source in self._levels:
                        self._forget(key)
                        failed.pop(key, None)
                        self._retried[key] = self._seen
                elif event.current is ChunkState.FAILED:
                    if key.source in self._levels:
                        failed[key] = None
                elif event.current is ChunkState.READY and self._retried:
                    self._retried.pop(key, None)
            return self._record(failed) if failed else ()

    def adopt(self, keys: Collection[ChunkKey]) -> tuple[ChunkFailure, ...]:
        """Report chunks found FAILED that no event told of (failed before the log existed).

        Returns the new failures (also kept for `take`); chunks already known are skipped.
        """
        with self._lock:
            unknown = {
                key: None
                for key in keys
                if key not in self._cause_of and key.source in self._levels
            }
            if not unknown:
                return ()
            self._seen += 1
            return self._record(unknown)

    def take(self) -> tuple[ChunkFailure, ...]:
        """The failures not taken yet, oldest first (each failure is taken once)."""
        with self._lock:
            pending, self._pending = tuple(self._pending), []
        return pending

    def _record(self, keys: Iterable[ChunkKey]) -> tuple[ChunkFailure, ...]:
        """Group newly FAILED chunks by root cause; report each new cause (lock held)."""
        found: list[tuple[int, ChunkKey, BaseException]] = []
        for key in keys:
            error = self._cache.error(key)  # None: retried meanwhile (its event follows)
            if error is not None and key not in self._cause_of:
                found.append((_depth(error), key, error))
        # The chunk whose own read failed before the derived ones its failure failed.
        found.sort(key=lambda item: item[0])
        new: list[ChunkFailure] = []
        for _, key, error in found:
            root = root_cause(error)
            cause = self._causes.get(id(root))
            retried = self._retried.pop(key, None)
            if cause is None:
                cause = self._causes[id(root)] = _Cause(root)
                report = True
            else:
                # A chunk retried alone (its cause still failing others) that fails again.
                report = retried is not None and retried > cause.reported
            cause.keys.add(key)
            self._cause_of[key] = cause
            if report:
                cause.reported = self._seen
                level, coords = self._position(key)
                new.append(ChunkFailure(key, level, coords, error, again=retried is not None))
        self._pending.extend(new)
        return tuple(new)

    def _forget(self, key: ChunkKey) -> None:
        cause = self._cause_of.pop(key, None)
        if cause is not None:
            cause.keys.discard(key)
            if not cause.keys:
                del self._causes[id(cause.root)]

    def _position(self, key: ChunkKey) -> tuple[int | None, tuple[int, ...] | None]:
        level, source = self._levels[key.source]
        return level, chunk_coords(source, key)
