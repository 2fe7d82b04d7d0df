"""`Dependencies`: the derived chunks a `ChunkCache` holds back until their inputs load.

A chunk of a `DerivedSource` is computed from input chunks of other sources.
When a worker takes one whose inputs are not all READY, the missing inputs are
queued with the chunk's own queue item and the chunk is *deferred* (QUEUED,
out of the queue) until its last input lands (see the façade's module
docstring, "Derived chunks"). This helper owns the deferred chunks (with the
input arrays gathered so far) and, per input, the chunks waiting for it.

**Failed inputs.** A FAILED input fails the chunks waiting for it, unless their
source leaves failed inputs out (``leaves_out_failed_inputs``: a virtual pyramid
level, where one unreadable stored chunk would otherwise black out a 2048² overview
chunk): such a chunk is combined from the inputs that loaded and becomes READY
with its `Entry.left_out` inputs named; only when none loaded does it fail. Views
show it (the left-out region at the fill value, the stored chunk's failure
reported as such); blocking reads refuse it (`Residency.errors`). Retrying a
left-out input makes the chunks left partial by it stale: evicted at once if no
request pins them, else when the last pin goes, so the next view combines them
again (`partial`, `stale`).

Thread contract
---------------
Every field is read and written only under the owning cache's lock.
`Dependencies` never takes a lock itself; where it moves a chunk's state it
goes through the façade (`fail`, which makes the one `_transition`) or the
scheduler, with the `Outbox` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from napari_lazy_zarr.core.errors import ChunkReadError
from napari_lazy_zarr.core.states import ChunkState

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from napari_lazy_zarr.core.cache._outbox import Outbox
    from napari_lazy_zarr.core.cache._residency import Entry, Residency
    from napari_lazy_zarr.core.cache._scheduler import Scheduler
    from napari_lazy_zarr.core.cache.schedule import QueueItem
    from napari_lazy_zarr.core.keys import ChunkKey, ChunkRef
    from napari_lazy_zarr.core.sources.protocol import DerivedSource

__all__ = ["Deferred", "Dependencies", "Fail"]

type Fail = Callable[[Entry, BaseException, Outbox], None]
"""`Demand.fail_unstarted`: QUEUED -> LOADING -> FAILED, without reading the chunk."""


class Deferred:
    """A derived chunk waiting for inputs (QUEUED, out of the queue); guarded by the lock."""

    __slots__ = ("failed", "gathered", "inherited", "item", "missing")

    def __init__(self, inputs: Sequence[ChunkRef], item: QueueItem) -> None:
        self.item = item  # the queue item it was last taken with; its inputs inherit it
        self.missing: dict[ChunkKey, ChunkRef] = {ref.key: ref for ref in inputs}
        self.gathered: dict[ChunkKey, np.ndarray[Any, Any]] = {}
        # The FAILED inputs left out (a source that `leaves_out_failed_inputs`), with errors,
        # and what the READY inputs gathered had left out themselves (a coarser level of a
        # chain is as partial as the finer chunk it samples).
        self.failed: dict[ChunkKey, BaseException | None] = {}
        self.inherited: dict[ChunkKey, BaseException | None] = {}


class Dependencies:
    """The deferred derived chunks and who waits for which input (lock held).

    `scheduler` is set by the `Scheduler` made with this helper, and `fail` by
    the `Demand`: they call each other (a deferred chunk queues its inputs;
    parking an input parks the chunks waiting for it; a failed input fails
    them).
    """

    __slots__ = ("_residency", "deferred", "dependents", "fail", "partial", "scheduler", "stale")

    def __init__(self, residency: Residency) -> None:
        self._residency = residency
        self.scheduler: Scheduler  # set by `Scheduler.__init__`
        self.fail: Fail  # set by `Demand.__init__`
        self.deferred: dict[ChunkKey, Deferred] = {}  # derived chunks awaiting inputs
        # input key -> the deferred chunks waiting for it (dicts: deterministic order)
        self.dependents: dict[ChunkKey, dict[ChunkKey, None]] = {}
        # FAILED input key -> the READY chunks combined without it (`Entry.left_out`)
        self.partial: dict[ChunkKey, dict[ChunkKey, None]] = {}
        # READY chunks left partial by an input read again, evicted when no longer pinned
        self.stale: set[ChunkKey] = set()

    def gather(self, entry: Entry, item: QueueItem, outbox: Outbox) -> bool:
        """Collect a derived chunk's READY inputs; True when all are there.

        Missing inputs are queued with `item` and the chunk is deferred until
        the last one lands; a FAILED input fails it. Input arrays are read-only,
        so holding them needs no pin.
        """
        record = self.deferred.get(entry.key)
        if record is None:
            try:
                inputs = tuple(cast("DerivedSource", entry.source).chunk_inputs(entry.coords))
                for ref in inputs:
                    if ref.key.source == entry.key.source:
                        raise ChunkReadError(
                            f"chunk {entry.key}: a derived chunk cannot be its own source's "
                            f"input ({ref.key})"
                        )
            except Exception as error:
                self.fail(entry, error, outbox)
                return False
            record = self.deferred[entry.key] = Deferred(inputs, item)
        else:
            record.item = item  # asked for again: its inputs now inherit this item
        residency = self._residency
        for key, ref in list(record.missing.items()):
            found = residency.entry(ref)
            if found.state is ChunkState.READY:
                assert found.data is not None
                record.gathered[key] = found.data
                if found.left_out:
                    record.inherited.update(found.left_out)
                residency.touch(key)
                del record.missing[key]
                self.forget_dependent(key, entry.key)
            elif found.state is ChunkState.FAILED:
                if not _leaves_out(entry):
                    self.fail(entry, input_error(entry.key, key, found.error), outbox)
                    return False
                record.failed[key] = found.error
                del record.missing[key]
            else:
                self.dependents.setdefault(key, {})[entry.key] = None
                self.scheduler.enqueue_input(found, item, outbox)
        if record.missing:
            return False
        return self._gathered(entry, record, outbox)

    def _gathered(self, entry: Entry, record: Deferred, outbox: Outbox) -> bool:
        """Every input of `entry` landed: hand it its inputs (True), or fail it when all of
        them failed (False)."""
        del self.deferred[entry.key]
        if record.failed and not record.gathered:  # nothing to combine: a failure, shown so
            failed, cause = next(iter(record.failed.items()))
            self.fail(entry, input_error(entry.key, failed, cause), outbox)
            return False
        entry.inputs = record.gathered
        entry.left_out = {**record.failed, **record.inherited} or None
        return True

    def partial_landed(self, entry: Entry, outbox: Outbox) -> None:
        """`entry` became READY combined without its `left_out` inputs (stored chunks that
        FAILED, under it or under the finer chunks it samples): remember it under each; one
        already read again meanwhile makes it stale at once."""
        assert entry.left_out is not None
        entries = self._residency.entries
        for key in entry.left_out:
            found = entries.get(key)
            if found is not None and found.state is ChunkState.FAILED:
                self.partial.setdefault(key, {})[entry.key] = None
            else:
                self._make_stale(entry, outbox)

    def input_retried(self, key: ChunkKey, outbox: Outbox) -> None:
        """FAILED input `key` is read again: the chunks combined without it are stale."""
        entries = self._residency.entries
        for dependent in self.partial.pop(key, {}):
            entry = entries.get(dependent)
            if entry is not None and entry.left_out and key in entry.left_out:
                self._make_stale(entry, outbox)

    def _make_stale(self, entry: Entry, outbox: Outbox) -> None:
        if entry.state is not ChunkState.READY:
            return
        if entry.pins:
            self.stale.add(entry.key)  # evicted when its last pin goes (`unpinned`)
        else:
            self._residency.evict(entry, outbox)

    def unpinned(self, entry: Entry, outbox: Outbox) -> None:
        """`entry` lost its last pin: evict it if it is stale."""
        if entry.key in self.stale:
            self.stale.discard(entry.key)
            if entry.state is ChunkState.READY:
                self._residency.evict(entry, outbox)

    def awaits_inputs(self, entry: Entry) -> bool:
        """Whether `entry` is deferred for a view that still wants it."""
        record = self.deferred.get(entry.key)
        return record is not None and not self.scheduler.is_stale(record.item)

    def wanted_by_dependents(self, entry: Entry) -> bool:
        """Whether a derived chunk someone wants waits for `entry` (an input)."""
        entries = self._residency.entries
        for key in self.dependents.get(entry.key, {}):
            dependent = entries[key]
            if dependent.pins or dependent.queue_items or self.awaits_inputs(dependent):
                return True
        return False

    def missing(self, key: ChunkKey) -> int:
        """How many inputs a deferred chunk still waits for (0 if it is not deferred)."""
        record = self.deferred.get(key)
        return 0 if record is None else len(record.missing)

    def forget_dependent(self, input_key: ChunkKey, dependent: ChunkKey) -> None:
        waiting = self.dependents.get(input_key)
        if waiting is not None:
            waiting.pop(dependent, None)
            if not waiting:
                del self.dependents[input_key]

    def drop_deferred(self, entry: Entry) -> None:
        """Forget `entry`'s deferral and gathered inputs, if any."""
        entry.inputs = None
        entry.left_out = None
        record = self.deferred.pop(entry.key, None)
        if record is not None:
            for key in record.missing:
                self.forget_dependent(key, entry.key)

    def park_dependents(self, entry: Entry) -> None:
        """`entry` (an input) was parked: park the derived chunks waiting for it (their
        gathered inputs are dropped), unless queued again meanwhile; then they
        re-gather when taken. One still wanted is queued again."""
        scheduler = self.scheduler
        for key in self.dependents.pop(entry.key, {}):
            dependent = self._residency.entries[key]
            record = self.deferred[key]
            self.drop_deferred(dependent)
            if dependent.queue_items:
                continue
            if scheduler.is_stale(record.item):
                scheduler.park(dependent)
            else:  # still wanted: queue it again, it re-queues its inputs
                scheduler.push(dependent, record.item)
                scheduler.queue.push_item(record.item)

    def landed(
        self,
        entry: Entry,
        data: np.ndarray[Any, Any] | None,
        error: BaseException | None,
        outbox: Outbox,
    ) -> None:
        """Tell the chunks waiting for `entry`, an input just READY (`data`) or FAILED
        (`error`): its last input READY queues a chunk again, a FAILED one fails it."""
        waiting = self.dependents.pop(entry.key, None)
        if waiting is None:
            return
        for key in waiting:
            dependent = self._residency.entries[key]
            if data is None and not _leaves_out(dependent):
                self.fail(dependent, input_error(key, entry.key, error), outbox)
                continue
            record = self.deferred[key]
            del record.missing[entry.key]
            if data is None:
                record.failed[entry.key] = error
            else:  # held by reference: evicting the input later does not lose it
                record.gathered[entry.key] = data
                if entry.left_out:
                    record.inherited.update(entry.left_out)
            if not record.missing and self._gathered(dependent, record, outbox):
                self.scheduler.push(dependent, record.item)
                self.scheduler.queue.push_item(record.item)

    def clear(self) -> None:
        self.deferred.clear()
        self.dependents.clear()
        self.partial.clear()
        self.stale.clear()


def _leaves_out(entry: Entry) -> bool:
    """Whether `entry`'s source combines a chunk without its FAILED inputs."""
    return bool(getattr(entry.source, "leaves_out_failed_inputs", False))


def input_error(
    dependent: ChunkKey, failed: ChunkKey, cause: BaseException | None
) -> ChunkReadError:
    """The error of a derived chunk whose input `failed` with `cause`."""
    error = ChunkReadError(f"chunk {dependent}: input chunk {failed} failed: {cause}")
    error.__cause__ = cause
    return error
