"""What crosses threads in a read: the request a viewer makes and the frame it gets back.

Both are immutable values, as ndv's request and response objects: `ViewRequest`
is what a viewer asked for, `ViewFrame` the answer, whose pixels are never
written once it exists (a newer frame replaces it).
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


@dataclass(frozen=True, slots=True, eq=False)  # a frame is itself: compared by identity
class ViewFrame:
    """What a read returned: an immutable frame of one view and its bookkeeping.

    **Never written after it is made.** Its `data` (and the `buffer` it was
    finished from) are read-only arrays that one owner built before handing
    them out — the thread answering the read, or the controller's dispatch
    thread — from the chunks resident at that moment (`core.viewport.assembly`).
    Chunks that land later go into the *next* frame of the view (built from
    this one, a copy), never into this one, so a viewer, a script or a thread
    holding `data` sees the same values for as long as it holds it. The
    memory of a frame nobody references any more serves a later frame.

    Every field is what was true when the frame was built: `ViewController`
    says what is true now (`complete`, the next read).

    Attributes
    ----------
    request
        The read it answers.
    data
        The view's values in the layer's axes (read-only): final where chunks
        were resident, a coarser level's values (upsampled) or the
        placeholder elsewhere.
    keys
        Every chunk the view touches.
    missing
        Chunks that were not resident when it was built (queued, loading, or FAILED).
    provisional
        Missing chunks whose cells show a coarser level's values.
    failed
        Missing chunks that had FAILED (they show the placeholder until retried).
    held
        `data` is the last presentable frame of another plane, held while this
        plane lacks a complete backdrop (a z/t step during playback).
    backdrop
        Every cell of a missing chunk that is not FAILED shows a coarser
        level's value (a stand-in the viewer may show instead of a held frame).
    buffer
        The array the frame's cells were assembled in (read-only), in the plan's
        layout; `data` is it, or its upsampling for a view served coarser. The
        next frame of the view starts from a copy of it.
    """

    request: ViewRequest
    data: np.ndarray[Any, Any] = field(repr=False)
    keys: tuple[ChunkKey, ...]
    missing: frozenset[ChunkKey]
    provisional: frozenset[ChunkKey]
    failed: frozenset[ChunkKey]
    held: bool = False
    backdrop: bool = False
    buffer: np.ndarray[Any, Any] | None = field(default=None, repr=False)

    @property
    def complete(self) -> bool:
        """True when nothing was missing: `data` is exactly the stored values."""
        return not self.missing

    @property
    def waiting(self) -> frozenset[ChunkKey]:
        """The missing chunks that had not FAILED: those still to land in a later frame."""
        return self.missing - self.failed

    @property
    def presentable(self) -> bool:
        """Whether a viewer may show it rather than hold another plane's frame: nothing
        it lacks is still loading, or a coarser level stands in for all of it."""
        return self.backdrop or not self.waiting


def is_plane_step(before: ViewRequest, after: ViewRequest) -> bool:
    """Whether `after` shows the same region as `before` on another z/t plane."""
    return (
        before.level == after.level
        and before.displayed == after.displayed
        and before.spatial == after.spatial
        and all(before.box[a] == after.box[a] for a in after.spatial)
        and before.box != after.box
    )
