"""An image's levels in world space: transforms napari can draw, and levels padded past the data.

Both come from the levels' metadata and shapes alone; no chunk is read.

- `drawable_levels`: composed OME transforms napari cannot draw (non-positive,
  absurd or wildly unequal scales) are replaced by the identity, with a
  `TransformWarning` naming the path and the value.
- `clip_padded_levels`: a coarser level stored larger than the data (webknossos
  pads its levels to whole shards, e.g. 4096 x 4096 x 32, so a coarse level can
  be larger than level 0) is cut to the finest level's box, or left out when none
  of it lies inside. Uncut, napari reads such a level as if its padding were
  data: its shape misleads napari's choice of level, and napari's first 3D read
  of the coarsest level asks for gigabytes (`PlanTooLargeError`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.sources.composite import CropSource

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.formats.specs import ImageSpec, LevelSpec
    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["TransformWarning", "clip_padded_levels", "drawable_levels", "transform_problem"]

# Composed OME transforms beyond these are not a place in the world napari can draw (vispy
# draws in float32: 7 digits, and 3.4e38 at most, which a 2**63-pixel axis at a scale of
# 1e15 still fits). Neither napari-ome-zarr nor ome-zarr-models bounds a finite non-zero
# scale: such an image opens, with a warning, at the identity transform (pixel units).
_SCALE_BOUNDS: Final = (1e-15, 1e15)  # a positive world size of one pixel, in any unit
_MAX_TRANSLATION: Final = 1e15
_MAX_SCALE_RATIO: Final = 1e9  # between two axes of a level, or one axis of two levels


class TransformWarning(UserWarning):
    """An OME image's transforms cannot be drawn as written (non-positive, absurd or wildly
    unequal scales; an RFC-5 route napari cannot show); the message names the path, the
    transformation or values, and what is shown instead."""


def transform_problem(levels: Sequence[LevelSpec]) -> str | None:
    """What makes `levels`' composed transforms undrawable, or None.

    Examples
    --------
    >>> from napari_lazy_zarr.core.formats.specs import LevelSpec
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


# A level's end may pass the finest level's by rounding (a coarse level of ceil(n / 2)
# pixels covers one pixel more than n when n is odd): up to one of its own pixels is not
# padding.
_PADDING_TOLERANCE: Final = 1
_FLOAT_SLACK: Final = 1e-9  # of a pixel, so that 100 / 0.1 is 1000, not 1001


def clip_padded_levels(spec: ImageSpec, sources: Sequence[ChunkSource]) -> list[ChunkSource]:
    """`sources` (`spec`'s levels, finest first), each level padded past the data cut to it.

    The data's box is the finest level's, in world coordinates: along each axis
    from its translation ``t0`` over ``n0`` pixels of scale ``s0``. A level of
    ``nk`` pixels of scale ``sk`` from ``tk`` needs ``ceil((t0 + n0*s0 - tk) / sk)``
    pixels to cover it; a level more than one pixel longer is cut to that many
    (`CropSource`: its first cells, same grid), and a level with no pixel inside
    the box is left out of the pyramid. Levels within the box are returned as
    they are.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_lazy_zarr.core.formats.specs import ImageSpec, LevelSpec
    >>> from napari_lazy_zarr.core.sources.protocol import ArraySource
    >>> levels = (
    ...     LevelSpec("1", (300, 200), (1.0, 1.0), (0.0, 0.0)),
    ...     LevelSpec("2", (4096, 4096), (2.0, 2.0), (0.0, 0.0)),  # padded to a shard
    ... )
    >>> spec = ImageSpec(
    ...     name="wk", kind="image", levels=levels, axis_names=("y", "x"), axis_units=(None, None)
    ... )
    >>> sources = [
    ...     ArraySource(np.zeros(level.shape, "u1"), chunks=(64, 64), name=level.path)
    ...     for level in levels
    ... ]
    >>> [source.shape for source in clip_padded_levels(spec, sources)]
    [(300, 200), (150, 100)]
    """
    if len(sources) != len(spec.levels) or len(sources) < 2:
        return list(sources)
    finest = spec.levels[0]
    ends = [
        t + n * s for t, n, s in zip(finest.translate, sources[0].shape, finest.scale, strict=True)
    ]
    kept: list[ChunkSource] = [sources[0]]
    for level, source in zip(spec.levels[1:], sources[1:], strict=True):
        needed = [
            math.ceil((end - t) / s - _FLOAT_SLACK)
            for end, t, s in zip(ends, level.translate, level.scale, strict=True)
        ]
        shape = tuple(int(n) for n in source.shape)
        if any(n <= 0 for n in needed):
            continue  # none of it lies over the data
        if all(n - want <= _PADDING_TOLERANCE for n, want in zip(shape, needed, strict=True)):
            kept.append(source)
            continue
        kept.append(
            CropSource(
                source,
                tuple(
                    min(n, want) if n - want > _PADDING_TOLERANCE else n
                    for n, want in zip(shape, needed, strict=True)
                ),
            )
        )
    return kept
