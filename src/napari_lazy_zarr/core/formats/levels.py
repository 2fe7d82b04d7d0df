"""An image's levels in world space: transforms napari can draw.

From the levels' metadata alone; no chunk is read. `drawable_levels`: composed
OME transforms napari cannot draw (non-positive, absurd or wildly unequal
scales) are replaced by the identity, with a `TransformWarning` naming the path
and the value.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.formats.ome import LevelSpec

__all__ = ["TransformWarning", "drawable_levels", "transform_problem"]

# Composed OME transforms beyond these are not a place in the world napari can draw (vispy
# draws in float32: 7 digits, and 3.4e38 at most, which a 2**63-pixel axis at a scale of
# 1e15 still fits). Neither napari-ome-zarr nor ome-zarr-models bounds a finite non-zero
# scale: such an image opens, with a warning, at the identity transform (pixel units).
_SCALE_BOUNDS: Final = (1e-15, 1e15)  # a positive world size of one pixel, in any unit
_MAX_TRANSLATION: Final = 1e15
_MAX_SCALE_RATIO: Final = 1e9  # between two axes of a level, or one axis of two levels


class TransformWarning(UserWarning):
    """An OME image's transforms are not drawable (non-positive, absurd, or wildly unequal
    scales); it opens at the identity transform, and the message names the path and values."""


def transform_problem(levels: Sequence[LevelSpec]) -> str | None:
    """What makes `levels`' composed transforms undrawable, or None.

    Examples
    --------
    >>> from napari_lazy_zarr.core.formats.ome import LevelSpec
    >>> level = LevelSpec("0", (64, 64), (0.5, 0.5), (0.0, 0.0))
    >>> transform_problem([level]) is None
    True
    >>> transform_problem([LevelSpec("0", (64, 64), (1e308, 1e308), (0.0, 0.0))])
    "level '0': scale 1e+308 outside [1e-15, 1e+15]"
    """
    low, high = _SCALE_BOUNDS
    for level in levels:
        where = f"level {level.path!r}"
        for value in level.scale:
            if not low <= value <= high:  # NaN too
                return f"{where}: scale {value:g} outside [{low:g}, {high:g}]"
        for value in level.translate:
            if not abs(value) <= _MAX_TRANSLATION:
                return f"{where}: translation {value:g} beyond +-{_MAX_TRANSLATION:g}"
        if max(level.scale, default=1.0) > _MAX_SCALE_RATIO * min(level.scale, default=1.0):
            return (
                f"{where}: scales {list(level.scale)} differ more than "
                f"{_MAX_SCALE_RATIO:g}-fold between axes"
            )
    finest = levels[0].scale if levels else ()
    for level in levels[1:]:
        for fine, coarse in zip(finest, level.scale, strict=True):
            if coarse > _MAX_SCALE_RATIO * fine:
                return (
                    f"level {level.path!r}: scale {coarse:g} is more than "
                    f"{_MAX_SCALE_RATIO:g} times the finest level's {fine:g}"
                )
    return None


def drawable_levels(levels: tuple[LevelSpec, ...], full: str) -> tuple[LevelSpec, ...]:
    """`levels`, or, when their transforms are undrawable, the identity transform (warned).

    The identity: the finest level at unit scale and no offset, every other
    level at the ratio of the finest level's shape to its own.
    """
    problem = transform_problem(levels)
    if problem is None:
        return levels
    warnings.warn(
        TransformWarning(
            f"{full}: the OME coordinate transforms cannot be drawn ({problem}); "
            "opened in pixel units (scale 1, no translation) instead"
        ),
        stacklevel=4,
    )
    finest = levels[0].shape
    return tuple(
        replace(
            level,
            scale=tuple(f / n if n else 1.0 for f, n in zip(finest, level.shape, strict=True)),
            translate=(0.0,) * len(level.shape),
        )
        for level in levels
    )
