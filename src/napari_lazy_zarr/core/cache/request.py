"""`Request`: one view's live need of chunks, pinned in a `ChunkCache` until released.

Thread contract
---------------
A request is made by `ChunkCache.request` under the cache's lock; its private
counters (`_remaining`, `_released`) are only touched under that lock. `done`
(a `concurrent.futures.Future`) and `landed` (a thread-safe queue) may be
waited on from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.errors import CacheClosedError

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator

    import numpy as np

    from napari_lazy_zarr.core.cache.cache import ChunkCache
    from napari_lazy_zarr.core.keys import ChunkKey

__all__ = ["Request"]


class Request:
    """One view's need: the chunks it touches (pinned while the request is live).

    `done` resolves when every needed chunk is READY or FAILED; it is cancelled
    if the request is superseded or released first, and fails with
    `CacheClosedError` if the cache closes first. Release the request (or use
    it as a context manager) when the view no longer needs its chunks; a newer
    request for the same `view` releases it automatically.

    Attributes
    ----------
    keys
        The needed chunks' keys, each once, in the order asked.
    view
        Who asked (a layer, a controller); None for a request no newer one supersedes.
    generation
        The view's request count when this one was made (0 without a view): queue
        items of an older generation are stale.
    done
        Resolves (None) when every needed chunk is READY or FAILED.
    on_ready
        Called as ``on_ready(key, data)`` on the thread that loaded a needed chunk,
        without the cache's lock, once it is READY and before `landed` yields its
        key (`ChunkCache.request`); None: not called.
    """

    __slots__ = (
        "_all_landed",
        "_cache",
        "_count_lock",
        "_landed",
        "_released",
        "_remaining",
        "_unlanded",
        "done",
        "generation",
        "keys",
        "on_ready",
        "view",
    )

    def __init__(
        self,
        cache: ChunkCache,
        keys: tuple[ChunkKey, ...],
        view: Hashable,
        generation: int,
        on_ready: Callable[[ChunkKey, np.ndarray[Any, Any]], None] | None = None,
    ) -> None:
        self._cache = cache
        self.keys = keys
        self.view = view
        self.generation = generation
        self.on_ready = on_ready
        self.done: Future[None] = Future()
        self._remaining = 0
        self._released = False
        # Each needed key, once, as it is (or already was) READY or FAILED; None
        # when the cache closes first.
        self._landed: queue.SimpleQueue[ChunkKey | None] = queue.SimpleQueue()
        # Set once every key landed, a FAILED one landed, or the cache closed: a reader
        # waiting for the whole request (`landed(at_once=True)`) is woken once, not per chunk.
        self._unlanded = len(keys)
        self._count_lock = threading.Lock()  # keys land from several workers at once
        self._all_landed = threading.Event()
        if not keys:
            self._all_landed.set()

    def landed(self, timeout: float | None = None, *, at_once: bool = False) -> Iterator[ChunkKey]:
        """Yield each needed chunk's key once, as soon as it is READY or FAILED.

        Chunks already finished when the request was made come first. Lets a
        reader copy chunks while the others still load. Raises `TimeoutError`
        if the whole iteration takes longer than `timeout` seconds, and
        `CacheClosedError` as soon as the cache closes with chunks still missing.

        With `at_once`, the first key is yielded only once every needed chunk has
        landed, or one FAILED, or the cache closed: the waiting thread is woken
        once per request rather than once per chunk (for a reader whose `on_ready`
        does the work, which only needs to know when it is all done); the keys
        then come in the same order, a FAILED one as early among them.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if at_once and not self._all_landed.wait(timeout):
            raise TimeoutError(f"{self!r}: chunks still loading after {timeout} s")
        for _ in range(len(self.keys)):
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                key = self._landed.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError(f"{self!r}: chunks still loading after {timeout} s") from None
            if key is None:
                raise CacheClosedError(f"{self!r}: the chunk cache closed while chunks loaded")
            yield key

    @property
    def complete(self) -> bool:
        """Whether every needed chunk has finished loading (READY or FAILED)."""
        done = self.done
        return done.done() and not done.cancelled() and done.exception() is None

    def failed(self) -> dict[ChunkKey, BaseException]:
        """The needed chunks that FAILED, with their errors."""
        return self._cache._errors(self.keys)

    def release(self) -> None:
        """Unpin the chunks; idempotent."""
        self._cache._release(self)

    def _deliver(self, key: ChunkKey, data: np.ndarray[Any, Any]) -> None:
        """Hand a landed chunk to `on_ready`, then to `landed` (a worker, no lock held).

        A failing `on_ready` is logged: the key still lands, and whoever reads
        `landed` finds the chunk READY in the cache as without `on_ready`.
        """
        assert self.on_ready is not None
        try:
            self.on_ready(key, data)
        except Exception:
            logging.getLogger(__name__).exception("on_ready(%s) failed", key)
        self._land(key)

    def _land(self, key: ChunkKey, *, failed: bool = False) -> None:
        """`key` is READY (delivered) or FAILED (`failed`): hand it to `landed` (any thread)."""
        self._landed.put(key)
        with self._count_lock:
            self._unlanded -= 1
            last = self._unlanded == 0
        if last or failed:
            self._all_landed.set()

    def _wake_closed(self) -> None:
        """The cache closed with chunks of this request missing: wake its waiters with
        `CacheClosedError` (called by `ChunkCache.close`, without its lock)."""
        self._landed.put(None)
        self._all_landed.set()
        error = CacheClosedError(f"{self!r}: the chunk cache closed before it completed")
        # A release may resolve it meanwhile (then set_exception raises InvalidStateError).
        with contextlib.suppress(InvalidStateError):
            self.done.set_exception(error)

    def __enter__(self) -> Request:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"Request(view={self.view!r}, generation={self.generation}, "
            f"chunks={len(self.keys)}, complete={self.complete})"
        )
