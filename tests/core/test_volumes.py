"""The 3D level choice: what a volume costs on every axis, the level within budget, the steps."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from napari_lazy_zarr.core.viewport import volume_cost, volume_level, volume_steps

SPATIAL = (0, 1, 2)
MiB = 1 << 20


def isotropic(size: int = 1024, levels: int = 4) -> list[tuple[int, ...]]:
    return [(size >> k,) * 3 for k in range(levels)]


def yx_only(size: int = 1024, levels: int = 4) -> list[tuple[int, ...]]:
    """What ome-zarr-py writes for zyx by default: z kept at every level."""
    return [(size, size >> k, size >> k) for k in range(levels)]


def anisotropic(levels: int = 4) -> list[tuple[int, ...]]:
    """Light-sheet-like: 200 thick z planes, z decimated from level 2 on only."""
    return [(200 if k < 2 else 200 >> (k - 1), 2048 >> k, 2048 >> k) for k in range(levels)]


def test_the_default_budget_picks_512_cubed_on_isotropic_and_a_quarter_of_yx_only() -> None:
    assert volume_level(isotropic(), SPATIAL, voxel_budget=512**3) == 1
    # The same budget on y/x only: 1024×512² is twice the budget, 1024×256² fits.
    assert volume_level(yx_only(), SPATIAL, voxel_budget=512**3) == 2
    # Anisotropic: 200×1024² (210 M voxels) is over, 200×512² fits.
    assert volume_level(anisotropic(), SPATIAL, voxel_budget=512**3) == 2


def test_the_byte_budget_counts_whole_chunks_on_every_axis() -> None:
    # 520³ fits 160 MiB in voxels (134 MiB) but costs 576³ in 64³ chunks (182 MiB).
    shapes = [(1040, 1040, 1040), (520, 520, 520), (260, 260, 260)]
    chunks = [(64, 64, 64)] * 3
    assert volume_level(shapes, SPATIAL, voxel_budget=2**31, byte_budget=160 * MiB) == 1
    chosen = volume_level(
        shapes, SPATIAL, voxel_budget=2**31, byte_budget=160 * MiB, chunks=chunks
    )
    assert chosen == 2
    # A plane of a (t, z, y, x) store chunked 16 deep in t costs 16 volumes.
    assert volume_cost((100, 64, 64, 64), (1, 2, 3), (16, 64, 64, 64)) == 16 * 64**3
    assert volume_cost((100, 64, 64, 64), (1, 2, 3)) == 64**3


def test_the_steps_skip_levels_that_cost_almost_as_much_as_the_next() -> None:
    assert volume_steps(isotropic(), SPATIAL, 1) == (2, 1)
    assert volume_steps(isotropic(), SPATIAL, 0) == (2, 1, 0)
    assert volume_steps(yx_only(), SPATIAL, 2) == (2,)
    assert volume_steps(yx_only(), SPATIAL, 0) == (2, 1, 0)
    # 50² in 48² chunks costs 96², 128² costs 144²: not a quarter of it, so not a step.
    close = [(64, 256, 256), (64, 128, 128), (64, 50, 50), (64, 16, 16)]
    assert volume_steps(close, SPATIAL, 0, chunks=[(64, 48, 48)] * 4) == (1, 0)
    assert volume_steps(close, SPATIAL, 0) == (2, 1, 0)  # by voxels alone, 50² is a step
    assert volume_steps(isotropic(), SPATIAL, 3) == ()


@st.composite
def pyramids(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Shapes (each axis decimated by 1 or 2 per level, independently) and chunk shapes."""
    levels = draw(st.integers(1, 5))
    shape = [draw(st.integers(1, 600)) for _ in range(3)]
    factors = [draw(st.sampled_from([1, 2])) for _ in range(3)]
    shapes = []
    for _ in range(levels):
        shapes.append(tuple(shape))
        shape = [max(1, -(-n // f)) for n, f in zip(shape, factors, strict=True)]
    chunk = tuple(draw(st.integers(1, 128)) for _ in range(3))
    return shapes, [chunk] * levels


@given(pyramid=pyramids(), voxels=st.integers(1, 2**28), budget=st.integers(1, 2**30))
def test_the_level_is_the_finest_that_fits_both_budgets(
    pyramid: tuple[list[tuple[int, ...]], list[tuple[int, ...]]], voxels: int, budget: int
) -> None:
    shapes, chunks = pyramid

    def fits(level: int) -> bool:
        return (
            math.prod(shapes[level]) <= voxels
            and volume_cost(shapes[level], SPATIAL, chunks[level]) <= budget
        )

    level = volume_level(shapes, SPATIAL, voxel_budget=voxels, byte_budget=budget, chunks=chunks)
    assert not any(fits(finer) for finer in range(level))
    assert fits(level) or level == len(shapes) - 1
    # Whole chunks never cost less than the cells.
    assert all(
        volume_cost(s, SPATIAL, c) >= math.prod(s) for s, c in zip(shapes, chunks, strict=True)
    )


@given(pyramid=pyramids(), data=st.data())
def test_the_steps_run_coarse_to_fine_to_the_target_each_a_quarter_of_the_next(
    pyramid: tuple[list[tuple[int, ...]], list[tuple[int, ...]]], data: st.DataObject
) -> None:
    shapes, chunks = pyramid
    coarsest = len(shapes) - 1
    target = data.draw(st.integers(0, coarsest))
    steps = volume_steps(shapes, SPATIAL, target, chunks=chunks)
    if target == coarsest:
        assert steps == ()
        return
    assert steps[-1] == target
    assert list(steps) == sorted(steps, reverse=True)  # coarse to fine
    assert len(set(steps)) == len(steps)
    assert all(step < coarsest for step in steps)
    costs = [volume_cost(shapes[step], SPATIAL, chunks[step]) for step in steps]
    assert all(4 * cheap <= dear for cheap, dear in itertools.pairwise(costs))
