"""What crosses threads in a read: the request a viewer makes and the frame it gets back.

`ViewRequest` is an immutable value. `ViewFrame` is the answer `read` returns
at once: its bookkeeping fields are a snapshot taken at the read, its `data`
the live buffer that worker and compose threads keep filling afterwards (its
docstring says who writes it, when, and what a reader may rely on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.viewport.axes import Box

__all__ = ["ViewFrame", "ViewKind", "ViewRequest", "is_plane_step"]

type ViewKind = Literal["view", "thumbnail"]
"""napari reads two views of a multiscale layer: the displayed region and, for its
thumbnail, the whole plane of the coarsest level. Neither supersedes the other."""


@dataclass(frozen=True, slots=True)
class ViewRequest:
    """One read of one view: what the viewer asked for, over the store's axes.

    Attributes
    ----------
    level
        The pyramid level, 0 the finest.
    box
        ``[lo, hi)`` per store axis at that level.
    displayed
        The store axes the result keeps (sliced, not held at one index), in order.
    generation
        Increases with every read of the controller; a result of an older
        generation of the same view is stale.
    kind
        ``"view"`` (the displayed region) or ``"thumbnail"``.
    """

    level: int
    box: Box
    displayed: tuple[int, ...]
    generation: int
    kind: ViewKind = "view"

    @property
    def shape(self) -> tuple[int, ...]:
        """The result's shape (the box's extent on the displayed axes)."""
        return tuple(self.box[a][1] - self.box[a][0] for a in self.displayed)

    @property
    def planes(self) -> tuple[int, ...]:
        """The store axes the view shows one index of: held at an index, or sliced to one.

        napari slices the axes it does not display (z, t) to one cell rather than
        indexing them, so an axis of extent 1 counts as a plane.
        """
        return tuple(
            a for a, (lo, hi) in enumerate(self.box) if a not in self.displayed or hi - lo == 1
        )

    @property
    def spatial(self) -> tuple[int, ...]:
        """The displayed store axes that are not planes: the view's image or volume axes.

        Examples
        --------
        >>> request = ViewRequest(0, ((3, 4), (0, 64), (0, 64)), (0, 1, 2), 1)
        >>> request.planes, request.spatial
        ((0,), (1, 2))
        """
        planes = self.planes
        return tuple(a for a in self.displayed if a not in planes)

    def same_view(self, other: ViewRequest | None) -> bool:
        """Whether `other` asks for exactly the same cells (any generation)."""
        return (
            other is not None
            and other.level == self.level
            and other.box == self.box
            and other.displayed == self.displayed
        )


@dataclass(frozen=True, slots=True)
class ViewFrame:
    """What a read returned, at once: a snapshot of the bookkeeping over a live buffer.

    **`data` is live.** It is the buffer the controller keeps filling for the
    view after `read` has returned, and the same array is returned again by
    the next read of the same view (a landed chunk is copied once, into what
    the viewer already holds). Who writes into it, always holding the view's
    own lock:

    - worker threads, as chunks land (the cache's events): each chunk's cells
      are copied once when it is READY, or given the placeholder when it FAILED;
    - the controller's compose thread: stand-ins (coarser levels' values,
      upsampled) into the cells of chunks still loading, when the view is first
      read and again when a coarser chunk lands; never over a landed chunk;
    - the reading thread, on a later read of the same view: chunks that are
      READY and not yet copied (the placeholders are written at the first read).

    What a reader may rely on: a cell holds the placeholder, a stand-in or its
    stored value, and once it holds its stored value it keeps it (a FAILED
    chunk's cells move from the placeholder to their values only after a
    retry). Writes are announced: `ViewController.view_changed` follows them,
    so a read of `data` made after that signal sees them whole; a read racing
    a write may see part of a chunk copied. Writing stops when the controller
    shows another view of the same kind (or closes), once a copy already under
    way has finished; copy `data` to keep a frame that no longer changes. A
    `held` frame's `data` is the buffer of the previous plane's frame, no
    longer written by the time it is held.

    Every other field is a snapshot taken at the read and goes stale as
    chunks land: `ViewController.complete`, or the next read, says what is
    true now.

    Attributes
    ----------
    request
        The read it answers.
    data
        The view's values in the layer's axes (live, see above): final where
        chunks were resident, a coarser level's values (upsampled) or the
        placeholder elsewhere.
    keys
        Every chunk the view touches.
    missing
        Chunks that were not resident at the read (queued, loading, or FAILED).
    provisional
        Missing chunks whose cells showed a coarser level's values at the read.
    failed
        Missing chunks that had FAILED (they show the placeholder until retried).
    held
        `data` is the last presentable frame of another plane, held while this
        plane lacks a complete backdrop (a z/t step during playback).
    """

    request: ViewRequest
    data: np.ndarray[Any, Any] = field(repr=False)
    keys: tuple[ChunkKey, ...]
    missing: frozenset[ChunkKey]
    provisional: frozenset[ChunkKey]
    failed: frozenset[ChunkKey]
    held: bool = False

    @property
    def complete(self) -> bool:
        """True when nothing was missing: `data` is exactly the stored values."""
        return not self.missing


def is_plane_step(before: ViewRequest, after: ViewRequest) -> bool:
    """Whether `after` shows the same region as `before` on another z/t plane."""
    return (
        before.level == after.level
        and before.displayed == after.displayed
        and before.spatial == after.spatial
        and all(before.box[a] == after.box[a] for a in after.spatial)
        and before.box != after.box
    )
