"""Chunks computed by dask: a dask array's blocks, on dask's local scheduler or on a cluster.

A `DaskSource` is a `ChunkSource` whose read grid is a dask array's own
chunking (irregular chunks included): chunk ``coords`` is the array's block
``coords``, computed from the array's graph when the cache asks for it. The
computation runs where a `DaskRunner` says:

- **locally** (the default): dask's threaded scheduler, on a pool of daemon
  threads the runner owns (`DaskRunner.close` shuts it down), each compute
  driven from a daemon thread of its own: the interpreter exits with tasks in
  flight, and the wait for a chunk is bounded by `timeout` as on a cluster;
- **on a cluster**: a ``distributed.Client`` given explicitly, or the client
  already active in the process when asked for by ``client="active"`` (never
  picked up silently). Each chunk is one ``client.get`` of the block's culled
  graph: a future the scheduler can run across workers and cancel.

Cancellation (`CancellableSource`): the cache calls `cancel_load(coords)` when
nobody wants a chunk being computed any more. On a cluster the chunk's future
is cancelled: the scheduler releases every task of it that no other future
needs, queued or running. Locally, dask cannot interrupt a running task: the
block's remaining tasks are not started (the scheduler's per-task callback
stops the compute after the task that is running), and `read_chunk` returns
once that task ends. Either way the waiting `read_chunk` raises
`LoadCancelledError` and the cache re-queues (or parks) the chunk.

Priority rule (cluster): dask runs higher ``priority`` first and, at equal
priority, earlier submissions first. The cache hands chunks to its workers
most urgent first (displayed before prefetch, coarse before fine, nearest the
centre first), so submitting every chunk at one priority keeps the cache's
order on the cluster (each submission is its own FIFO generation:
``fifo_timeout=0``). A newer view must outrank an older one's leftovers, so
the priority is an *epoch*: a process-wide count of superseded views — it
grows by one each time a `cancel_load` finds a computation in flight (the
cache cancels because the views moved on). Chunks asked for after that run
before anything still queued on the cluster from before. The scheduler applies
priorities to the tasks it still holds: with its default ``worker-saturation``
(1.1) it sends a worker slightly more tasks than it has threads, and those run
in the worker's own priority order; set it to 1.0 for the strictest ordering.

Every wait is bounded: a chunk not computed within `timeout` seconds fails
with `LoadTimeoutError` (retryable) and its future is cancelled.
"""

from __future__ import annotations

import itertools
import math
import threading
import uuid
from concurrent import futures
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import numpy as np

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LoadCancelledError,
    LoadTimeoutError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.executors import PoolExecutor, ThreadStartError, worker_pool
from napari_lazy_zarr.core.keys import CompositeIdentity, box_text, chunk_bounds
from napari_lazy_zarr.core.sources._grid import grid_from_boundaries
from napari_lazy_zarr.core.sources.protocol import SourceFields, fill_value_of

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Mapping, Sequence

    import dask.array as da
    from dask.typing import Key
    from distributed import Client

__all__ = [
    "DEFAULT_COMPUTE_TIMEOUT",
    "DaskRunner",
    "DaskSource",
    "Tickets",
    "coarsened_levels",
    "resolve_client",
]

DEFAULT_COMPUTE_TIMEOUT: Final = 300.0
"""Seconds one chunk's computation may take before it fails (`LoadTimeoutError`)."""

_POLL: Final = 0.05  # seconds between checks of a cancelled or closed wait
_IMAGE_KINDS: Final = frozenset("biufc")

type ClientLike = Client | Literal["active"] | None


def resolve_client(client: ClientLike) -> Client | None:
    """The distributed client chunks are computed on: `client`, the active one, or None (local).

    ``"active"`` takes the client already running in this process
    (``distributed.default_client()``) and raises `ValueError` if there is none:
    a cluster is used only when asked for.

    Examples
    --------
    >>> resolve_client(None) is None
    True
    """
    if client is None:
        return None
    if isinstance(client, str):
        if client != "active":
            raise ValueError(
                f"client: expected a distributed.Client, 'active' or None, got {client!r}"
            )
        from distributed import default_client

        try:
            active: Client = default_client()  # type: ignore[no-untyped-call]
        except ValueError as error:
            raise ValueError(
                "client='active': no distributed.Client is running in this process; "
                "create one (distributed.Client(...)) or pass it explicitly"
            ) from error
        return active
    return client


class _Epoch:
    """The process-wide priority of new cluster submissions (see the module's priority rule)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    @property
    def value(self) -> int:
        with self._lock:
            return self._value

    def advance(self) -> None:
        with self._lock:
            self._value += 1


_EPOCH: Final = _Epoch()


class _Ticket:
    """One chunk's computation in flight: how to cancel it (guarded by its `Tickets`' lock)."""

    __slots__ = ("cancelled", "future")

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.future: Any = None  # a distributed.Future (typed loosely by distributed)


class Tickets:
    """The computations a source has in flight, by chunk coords; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[int, ...], _Ticket] = {}

    def open(self, coords: tuple[int, ...]) -> _Ticket:
        """A new ticket for the computation of `coords` (it replaces any earlier one)."""
        ticket = _Ticket()
        with self._lock:
            self._open[coords] = ticket
        return ticket

    def close(self, coords: tuple[int, ...], ticket: _Ticket) -> None:
        """Forget `ticket`, the computation of `coords`, once it is done."""
        with self._lock:
            if self._open.get(coords) is ticket:
                del self._open[coords]

    def cancel(self, coords: tuple[int, ...]) -> bool:
        """Cancel the computation of `coords`; whether one was in flight."""
        with self._lock:
            ticket = self._open.pop(coords, None)
        if ticket is None:
            return False
        _cancel(ticket)
        return True

    def cancel_all(self) -> None:
        """Cancel every computation in flight."""
        with self._lock:
            tickets = list(self._open.values())
            self._open.clear()
        for ticket in tickets:
            _cancel(ticket)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)


def _cancel(ticket: _Ticket) -> None:
    ticket.cancelled.set()
    future = ticket.future
    if future is not None:
        future.cancel()


class DaskRunner:
    """Where chunk computations run: dask's local threaded scheduler, or a distributed client.

    One runner can serve many sources (the levels of a pyramid share one), so
    they share its local thread pool or its client.

    Parameters
    ----------
    client
        A ``distributed.Client``; ``"active"`` for the client already running
        in this process (`resolve_client`); None (default) for dask's local
        threaded scheduler on a pool of `num_workers` threads owned by the runner.
    num_workers
        Local pool size (default: one per core, at least 2).
    timeout
        Seconds one chunk's computation may take (`DEFAULT_COMPUTE_TIMEOUT`).

    Thread contract: `compute_block` and `call` run on the cache's worker
    threads and block them (boundedly) until the result is in; `cancel` and
    `close` may be called from any thread.

    Examples
    --------
    >>> with DaskRunner() as runner:
    ...     runner.local, runner.timeout
    (True, 300.0)
    """

    def __init__(
        self,
        client: ClientLike = None,
        *,
        num_workers: int | None = None,
        timeout: float = DEFAULT_COMPUTE_TIMEOUT,
    ) -> None:
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        self.client: Client | None = resolve_client(client)
        self.timeout = float(timeout)
        self._workers = num_workers
        self._pool: PoolExecutor | None = None
        self._drivers: set[futures.Future[Any]] = set()  # local computes being driven
        self._lock = threading.Lock()
        self._closed = False
        self.submitted = 0
        """Chunk computations started (local runs or cluster futures)."""
        self.cancelled = 0
        """Of those, cancelled before they finished."""

    @property
    def local(self) -> bool:
        """Whether chunks are computed by dask's local threaded scheduler (no client)."""
        return self.client is None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, wait: bool = True) -> None:
        """Shut the local pool down; idempotent. Computations waiting end with
        `LoadCancelledError`; running tasks finish first (`wait`: wait for them, at most
        `timeout` seconds). Its threads are daemons: a running task never holds up the
        interpreter's exit.

        A client given to the runner is the caller's: it stays open.
        """
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            drivers = list(self._drivers)
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True, timeout=self.timeout)
        if wait:
            futures.wait(drivers, timeout=self.timeout)

    def __enter__(self) -> DaskRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "local threads" if self.client is None else f"client {self.client.id}"
        return f"DaskRunner({where}, timeout={self.timeout})"

    # -- running -----------------------------------------------------------

    def compute_block(
        self, graph: Mapping[Hashable, Any], key: Hashable, ticket: _Ticket, what: str
    ) -> Any:
        """The value of `key` in `graph` (already culled to what `key` needs)."""
        if self.client is None:
            return self._local_get(graph, key, ticket, what)
        client = self.client
        # Each attempt asks for a key of its own (an alias of the block): the client
        # counts references per key, so a late release of a failed or cancelled
        # attempt's future would otherwise cancel the next attempt at the same block.
        attempt = f"lazy-zarr-{uuid.uuid4().hex}"
        submitted = {**graph, attempt: key}
        return self._await(
            lambda: client.get(  # type: ignore[no-untyped-call]
                submitted, [attempt], sync=False, priority=_EPOCH.value, fifo_timeout=0
            )[0],
            ticket,
            what,
            key,
        )

    def call(self, function: Callable[..., Any], arg: Any, ticket: _Ticket, what: str) -> Any:
        """``function(arg)``: in this thread when local, else as a task on the cluster."""
        if self.client is None:
            self._check_open(ticket, what)
            return function(arg)
        client = self.client
        return self._await(
            lambda: client.submit(
                function, arg, pure=False, priority=_EPOCH.value, fifo_timeout=0
            ),
            ticket,
            what,
            None,
        )

    def cancel(self, tickets: Tickets, coords: tuple[int, ...]) -> None:
        """Cancel a source's computation of `coords`; a cancel in flight starts a new epoch."""
        if tickets.cancel(coords):
            with self._lock:
                self.cancelled += 1
            _EPOCH.advance()

    def _check_open(self, ticket: _Ticket, what: str) -> None:
        if self._closed:
            raise LoadCancelledError(f"{what}: not computed: its source was closed")
        if ticket.cancelled.is_set():
            raise LoadCancelledError(f"{what}: computation cancelled (its views moved on)")

    def _local_pool(self) -> PoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("closed")
            if self._pool is None:
                import os

                workers = self._workers or max(2, os.cpu_count() or 1)
                self._pool = PoolExecutor(workers, name="lazy-zarr-dask")
            self.submitted += 1
            return self._pool

    def _local_get(
        self, graph: Mapping[Hashable, Any], key: Hashable, ticket: _Ticket, what: str
    ) -> Any:
        """Compute `key` on dask's local threaded scheduler, driven from a worker-pool thread.

        The wait is bounded by `timeout` and ends at once when the runner closes;
        a cancel stops the compute after its running task (dask's per-task
        callback). A task raising anything, `KeyboardInterrupt` and
        `SystemExit` included (a task's, on a pool thread: not meant for any
        thread of ours), fails the chunk with a `ChunkReadError` naming it.
        """
        from dask.threaded import get

        self._check_open(ticket, what)
        try:
            pool = self._local_pool()
        except RuntimeError:
            raise LoadCancelledError(f"{what}: not computed: its source was closed") from None
        abandoned = threading.Event()  # timed out: the driver starts no further task

        def stop_if_cancelled(*_: Any) -> None:
            # Called by dask before and after each task: a cancelled block starts no more.
            if ticket.cancelled.is_set() or self._closed or abandoned.is_set():
                raise _Stop

        callbacks = [(None, None, stop_if_cancelled, stop_if_cancelled, None)]
        outcome: futures.Future[Any] = futures.Future()

        def drive() -> None:
            try:
                outcome.set_result(
                    get(dict(graph), cast("Key", key), pool=pool, callbacks=callbacks)
                )
            except BaseException as error:  # every end is the chunk's outcome
                outcome.set_exception(error)
            finally:
                # Known to `close` until it ends, an abandoned (timed-out) driver too:
                # closing waits for it rather than leaving it to finish on its own.
                with self._lock:
                    self._drivers.discard(outcome)

        with self._lock:
            self._drivers.add(outcome)  # before it starts: it removes itself as it ends
        try:
            worker_pool().run(drive, name="lazy-zarr-dask-driver")
        except ThreadStartError as error:  # a thread or memory limit
            with self._lock:
                self._drivers.discard(outcome)
            raise ChunkReadError(
                f"{what}: not computed: no thread could start ({error}); retry to compute it"
            ) from error
        try:
            deadline = _now() + self.timeout
            while not futures.wait([outcome], timeout=_POLL).done:
                if self._closed:
                    raise LoadCancelledError(f"{what}: not computed: its source was closed")
                if _now() > deadline:
                    raise LoadTimeoutError(
                        f"{what}: dask task {key!r} not computed within {self.timeout} s "
                        "(local scheduler: the running task is left to end, no further task "
                        "of it starts); retry to compute it again"
                    )
        except BaseException:
            abandoned.set()
            raise
        failure = outcome.exception()
        if failure is None:
            return outcome.result()
        if isinstance(failure, _Stop):
            raise LoadCancelledError(
                f"{what}: computation cancelled (its views moved on); the running task finished, "
                "no further task started"
            ) from None
        if self._closed or isinstance(failure, futures.CancelledError):
            raise LoadCancelledError(f"{what}: not computed: its source was closed") from failure
        raise _task_error(what, key, failure) from failure

    def _await(
        self, submit: Callable[[], Any], ticket: _Ticket, what: str, task: Hashable | None
    ) -> Any:
        """Submit one future and wait for it, boundedly and cancellably.

        `task` is the key named in messages (by default the future's).
        """
        from distributed import CancelledError

        self._check_open(ticket, what)
        future = submit()
        task = future.key if task is None else task
        with self._lock:
            self.submitted += 1
        ticket.future = future
        # A cancel that raced the submission (it found no future to cancel yet):
        if ticket.cancelled.is_set():
            future.cancel()
        landed = threading.Event()
        future.add_done_callback(lambda _: landed.set())
        deadline = _now() + self.timeout
        while not landed.wait(_POLL):
            self._check_open_or_cancel(ticket, future, what)
            if _now() > deadline:
                future.cancel()
                raise LoadTimeoutError(
                    f"{what}: dask task {task!r} not computed within {self.timeout} s; "
                    "cancelled (retry to compute it again)"
                )
        self._check_open_or_cancel(ticket, future, what)
        try:
            return future.result(timeout=max(1.0, deadline - _now()))
        except CancelledError as error:
            if ticket.cancelled.is_set() or self._closed:
                raise LoadCancelledError(
                    f"{what}: computation cancelled (its views moved on)"
                ) from error
            raise ChunkReadError(
                f"{what}: the cluster dropped dask task {task!r} (a worker was lost or the "
                f"client restarted): {error or type(error).__name__}; retry to compute it again"
            ) from error
        except TimeoutError as error:
            future.cancel()
            raise LoadTimeoutError(
                f"{what}: dask task {task!r}: its result did not arrive within {self.timeout} s"
            ) from error
        except Exception as error:
            # Forget the erred task now (this call waits for the scheduler), or a retry
            # submitted before the release reaches the scheduler gets the same error back.
            future.cancel(force=True)
            raise _task_error(what, task, error) from error
        finally:
            future.release()

    def _check_open_or_cancel(self, ticket: _Ticket, future: Any, what: str) -> None:
        if ticket.cancelled.is_set() or self._closed:
            future.cancel()
            self._check_open(ticket, what)


class _Stop(Exception):
    """Raised from dask's task callbacks to stop a cancelled local compute."""


def _now() -> float:
    import time

    return time.monotonic()


def _task_error(what: str, key: Any, error: BaseException) -> ChunkReadError:
    return ChunkReadError(f"{what}: dask task {key!r} raised {type(error).__name__}: {error}")


class DaskSource(SourceFields):
    """A dask array's blocks as chunks: each computed from the array's graph when first read.

    A `CancellableSource`. The read grid is the array's chunking (irregular
    chunks included); chunk ``coords`` is block ``coords``. The graph is
    materialized once (on the first read, in a worker thread) and each read
    computes only the tasks its block needs.

    Parameters
    ----------
    array
        A ``dask.array.Array`` of an image dtype (bool, integer, float, complex).
    runner
        Where blocks are computed (a local `DaskRunner` of its own by default;
        the source then closes it in `close`).
    fill_value
        The placeholder shown for blocks not computed yet.
    name
        Names the data in chunk keys and messages; by default the array's
        dask name, which dask derives from the graph: equal graphs share
        cached chunks.
    prefetch_ring
        How many blocks beyond a view a viewer loads before they are asked for
        (`core.viewport.prefetch_ring`). 0 by default: a neighbouring block is a
        whole computation, and on the local scheduler a running one cannot be
        cancelled when the view moves the other way (measured in a fast pan
        over a 16384² filter graph: 13 of 17 blocks computed were wasted with a
        ring of 1, 0 of 4 without).

    Attributes
    ----------
    load_reason
        ``"computing"``: what the cache's LOADING reason says for its chunks.

    Examples
    --------
    >>> import dask.array as da, numpy as np
    >>> array = da.arange(20, chunks=(8,)) * 2
    >>> with DaskSource(array, name="twice") as source:
    ...     source.grid[0].size, source.read_chunk((2,))
    (8, array([32, 34, 36, 38]))
    >>> str(source.identity)
    'dask(twice)'
    """

    load_reason: Final = "computing"

    def __init__(
        self,
        array: da.Array,
        *,
        runner: DaskRunner | None = None,
        fill_value: Any = 0,
        name: Hashable | None = None,
        prefetch_ring: int = 0,
    ) -> None:
        self._array = array
        self.prefetch_ring = prefetch_ring
        if any(math.isnan(s) for axis in array.chunks for s in axis):
            raise UnsupportedDataError(
                f"dask array {array.name}: unknown chunk sizes (NaN); call compute_chunk_sizes() "
                "first"
            )
        self._shape = tuple(int(s) for s in array.shape)
        self._dtype = np.dtype(array.dtype)
        if self._dtype.kind not in _IMAGE_KINDS:
            raise UnsupportedDataError(
                f"dask array {array.name}: dtype {self._dtype} cannot be shown as an image "
                "(supported: bool, integer, float and complex dtypes)"
            )
        self._grid = grid_from_boundaries(
            [list(itertools.accumulate(axis, initial=0)) for axis in array.chunks]
        )
        self._fill_value = fill_value_of(fill_value, self._dtype)
        self._owns_runner = runner is None
        self._runner = DaskRunner() if runner is None else runner
        self._identity = CompositeIdentity("dask", (), (array.name if name is None else name,))
        self._tickets = Tickets()
        self._graph_lock = threading.Lock()
        self._graph: dict[Hashable, Any] | None = None

    @property
    def array(self) -> da.Array:
        """The dask array computed."""
        return self._array

    @property
    def runner(self) -> DaskRunner:
        return self._runner

    def block_key(self, coords: Sequence[int]) -> tuple[Any, ...]:
        """The dask key of block `coords` (the task whose value is chunk `coords`)."""
        return (self._array.name, *(int(c) for c in coords))

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """Compute block `coords` (blocking this worker thread, boundedly).

        Raises `LoadCancelledError` if `cancel_load(coords)` is called meanwhile,
        `LoadTimeoutError` past the runner's timeout, and `ChunkReadError`
        naming the chunk and the dask task when a task raises or the cluster
        loses it.
        """
        coords = tuple(int(c) for c in coords)
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        key = self.block_key(coords)
        what = f"{self._identity}: chunk {coords} {box_text(lo, hi)}"
        ticket = self._tickets.open(coords)
        try:
            graph = self._block_graph(key)
            value = self._runner.compute_block(graph, key, ticket, what)
        finally:
            self._tickets.close(coords, ticket)
        return _as_chunk(
            value, tuple(b - a for a, b in zip(lo, hi, strict=True)), self._dtype, what
        )

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        """Cancel the computation of chunk `coords`, if one is in flight (any thread)."""
        self._runner.cancel(self._tickets, tuple(int(c) for c in coords))

    @property
    def in_flight(self) -> int:
        """Chunks being computed now."""
        return len(self._tickets)

    def close(self) -> None:
        """Cancel every computation in flight; close the runner if the source made it."""
        self._tickets.cancel_all()
        if self._owns_runner:
            self._runner.close()

    def __enter__(self) -> DaskSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DaskSource({self._identity}, shape={self._shape}, dtype={self._dtype})"

    def _block_graph(self, key: tuple[Any, ...]) -> dict[Hashable, Any]:
        """The tasks `key` needs, culled from the graph (materialized once, under a lock).

        Materializing a 1,024-block filter graph takes ~0.2 s, once; culling one
        block from it ~0.1 ms (``array.blocks[i, j]`` costs ~0.2 s per block).
        """
        from dask.optimization import cull

        with self._graph_lock:
            if self._graph is None:
                self._graph = dict(self._array.__dask_graph__().items())
            graph = self._graph
        culled, _ = cull(graph, [key])  # type: ignore[no-untyped-call]
        return dict(culled)


def _as_chunk(
    value: Any, shape: tuple[int, ...], dtype: np.dtype[Any], what: str
) -> np.ndarray[Any, Any]:
    """A block's value as the chunk the cache expects, or a `ChunkReadError` saying why not."""
    data = np.asarray(value)
    if data.shape != shape:
        raise ChunkReadError(
            f"{what}: the block computed has shape {data.shape}, expected {shape}"
        )
    if data.dtype != dtype:
        if not np.can_cast(data.dtype, dtype, casting="same_kind"):
            raise ChunkReadError(
                f"{what}: the block computed has dtype {data.dtype}, which does not convert to "
                f"the array's {dtype} without changing kind"
            )
        return data.astype(dtype)
    # Never alias memory the graph may still hold (a from_array block is a view).
    return data if data.flags.owndata and data.flags.writeable else data.copy()


def coarsened_levels(
    array: da.Array,
    *,
    method: Literal["mean", "stride"] = "mean",
    axes: Sequence[int] | None = None,
    smallest: int = 512,
) -> list[da.Array]:
    """`array` followed by graphs of it coarsened 2x per level along `axes`, down to `smallest`.

    Level k+1 is level k reduced 2x along `axes` (the last two by default):
    ``"mean"`` averages 2x2 blocks (``dask.array.coarsen``, then rounded back to
    an integer dtype), ``"stride"`` keeps every second pixel. Each level is
    rechunked to its base's chunk size along `axes`, so one coarse chunk is one
    future whose tasks (the fine blocks under it) run where the graph runs —
    on a cluster only the reduced block travels to the viewer.

    Examples
    --------
    >>> import dask.array as da
    >>> levels = coarsened_levels(da.ones((2000, 1500), chunks=512, dtype="u1"))
    >>> [(level.shape, level.chunksize) for level in levels]
    [((2000, 1500), (512, 512)), ((1000, 750), (512, 512)), ((500, 375), (500, 375))]
    """
    import dask.array as da

    rank = array.ndim
    reduced = (
        tuple(range(max(0, rank - 2), rank)) if axes is None else tuple(a % rank for a in axes)
    )
    target = {axis: int(max(array.chunks[axis])) if array.shape[axis] else 1 for axis in reduced}
    levels = [array]
    level = array
    while any(level.shape[axis] > smallest for axis in reduced):
        if method == "mean":
            factors = {axis: 2 if level.shape[axis] >= 2 else 1 for axis in reduced}
            halved = da.coarsen(np.mean, level, factors, trim_excess=True)
            if level.dtype.kind in "biu":
                halved = da.around(halved)
            halved = halved.astype(level.dtype)
        elif method == "stride":
            halved = level[
                tuple(slice(None, None, 2) if a in reduced else slice(None) for a in range(rank))
            ]
        else:
            raise ValueError(f"method: expected 'mean' or 'stride', got {method!r}")
        level = halved.rechunk({axis: target[axis] for axis in reduced})
        levels.append(level)
    return levels
