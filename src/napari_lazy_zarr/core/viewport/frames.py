"""What crosses threads in a read: the request a viewer makes and the frame it gets back.

`ViewRequest` is an immutable value. `ViewResult` is the answer `read` returns
at once: its bookkeeping fields are a snapshot taken at the read, its `data`
is the live buffer the controller keeps filling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

    from napari_lazy_zarr.core.keys import ChunkKey
    from napari_lazy_zarr.core.viewport.axes import Box

__all__ = ["ViewKind", "ViewRequest", "ViewResult", "is_plane_step"]

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
class ViewResult:
    """What a read returned, at once.

    Attributes
    ----------
    request
        The read it answers.
    data
        The view's values in the layer's axes: final where chunks were
        resident, a coarser level's values (upsampled) or the placeholder elsewhere.
    keys
        Every chunk the view touches.
    missing
        Chunks that were not resident (queued, loading, or FAILED).
    provisional
        Missing chunks whose cells show a coarser level's values.
    failed
        Missing chunks that FAILED (they show the placeholder until retried).
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
