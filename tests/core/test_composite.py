"""Composite sources against NumPy, and against TensorStore where it has the same operation.

Every composite runs through the engine's own property machines (basic,
orthogonal and vectorized selections chained, read blocking and non-blocking
through a real cache) with the materialized NumPy array as the model. The
semantics of concat/stack, cast and function-backed sources are pinned against
``ts.concat``, ``ts.stack``, ``ts.cast`` and ``ts.virtual_chunked``.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pytest
import zarr
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize
from zarr_indexing import FixedDimension, IndexDomain, VaryingDimension
from zarr_indexing.testing import (
    DEFAULT_DATA,
    DEFAULT_SETTINGS,
    ChainedIndexingStateMachine,
    state_machine_test,
)

from napari_lazy_zarr.core import (
    ArraySource,
    CacheReader,
    ChunkCache,
    ChunkedArray,
    ChunkState,
)
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    IncompatibleSourcesError,
    ReadOnlyError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.keys import CompositeIdentity, chunk_key
from napari_lazy_zarr.core.sources.composite import (
    CastSource,
    ConcatSource,
    ConstantSource,
    CropSource,
    FunctionSource,
    StackSource,
)
from napari_lazy_zarr.core.sources.decimated import virtual_levels
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.testing import FaultySource
from tests.core.test_array_properties import _CACHE, ChunkedArrayIndexing
from tests.core.test_manifest import pack_store

if TYPE_CHECKING:
    from napari_lazy_zarr.core import ChunkSource

ts = pytest.importorskip("tensorstore")

_PAD = -7  # never a value of DEFAULT_DATA (0..139) nor the machines' placeholder (-1)


def _box(domain: IndexDomain) -> tuple[slice, ...]:
    return tuple(
        slice(a, b) for a, b in zip(domain.inclusive_min, domain.exclusive_max, strict=True)
    )


def _from_data(domain: IndexDomain) -> np.ndarray[Any, Any]:
    return DEFAULT_DATA[..., :3][_box(domain)] * 1  # a fresh array, as a computation returns


def _packed_manifest(data: np.ndarray[Any, Any], chunks: tuple[int, ...]) -> ManifestSource:
    folder = Path(tempfile.mkdtemp(prefix="lazy-zarr-composite-"))
    array = zarr.create_array(
        str(folder / "a.zarr"), shape=data.shape, chunks=chunks, dtype=data.dtype
    )
    array[...] = data
    pack_store(folder / "a.zarr", folder / "a.json")
    return ManifestSource(folder / "a.json")


def _composites() -> dict[str, tuple[ChunkSource, np.ndarray[Any, Any]]]:
    """Each composite under test, with the NumPy array it must equal."""
    data = DEFAULT_DATA  # (7, 5, 4) int64, distinct values
    concat = ConcatSource(
        [
            ArraySource(data[:3], chunks=(2, 2, 3), name="c0"),
            ArraySource(data[3:4], chunks=(1, 5, 4), name="c1"),
            ArraySource(data[4:], chunks=((3,), (1, 4), (3, 1)), name="c2"),
        ],
        axis=0,
    )
    padded = ConcatSource(
        [
            FunctionSource(_from_data, shape=(7, 5, 3), dtype="i8", chunks=(3, 2, 2)),
            ConstantSource((7, 5, 2), _PAD, "i8", chunks=(4, 5, 1)),
        ],
        axis=-1,
    )
    stack = StackSource(
        [ArraySource(data[:, i], chunks=(3, 2 + i % 2), name=("s", i)) for i in range(5)], axis=1
    )
    cast = CastSource(ArraySource(data.astype("u2"), chunks=(4, 2, 3), name="u2"), "float32")
    manifest = _packed_manifest(data, (3, 2, 3))
    # A level stored padded past its data (webknossos' whole shards): the padding never shows.
    crop = CropSource(
        ArraySource(
            np.pad(data, ((0, 5), (0, 1), (0, 6)), constant_values=_PAD), chunks=(3, 2, 4)
        ),
        data.shape,
    )
    nested = ConcatSource(
        [
            StackSource(
                [
                    ArraySource(data[:, 0], chunks=(2, 3), name="n0"),
                    CastSource(_packed_manifest(data[:, 1].astype("i4"), (4, 4)), "i8"),
                ],
                axis=1,
            ),
            FunctionSource(
                lambda box: data[:, 2:][_box(box)].copy(),
                shape=(7, 3, 4),
                dtype="i8",
                chunks=(3, 3, 2),
                name="tail",
            ),
        ],
        axis=1,
    )
    model_padded = np.concatenate([data[..., :3], np.full((7, 5, 2), _PAD)], axis=-1)
    return {
        "concat": (concat, data),
        "padded": (padded, model_padded),
        "stack": (stack, data),
        "cast": (cast, data.astype("float32")),
        "crop": (crop, data),
        "manifest": (manifest, data),
        "nested": (nested, data),
    }


_COMPOSITES = _composites()


class CompositeIndexing(ChunkedArrayIndexing):
    """The engine's `ChunkedArray` machine, drawing a composite instead of a grid."""

    @initialize(name=st.sampled_from(sorted(_COMPOSITES)))
    def choose_grid(self, name: str) -> None:
        self.source, self.model = _COMPOSITES[name]
        self.view = ChunkedArray(self.source, _CACHE)
        self.chain.append(("composite", name))


class CacheReaderOverConcat(ChainedIndexingStateMachine):
    """zarr-indexing's own machine, parts served by `CacheReader` from a composite."""

    source = _COMPOSITES["nested"][0]
    readers: ClassVar[Any] = [CacheReader(_CACHE, source, blocking=True)]

    def make_source(self, data: Any) -> Any:
        return ChunkedArray(self.source, _CACHE)


TestCompositeIndexing = state_machine_test(
    CompositeIndexing, config=settings(DEFAULT_SETTINGS, max_examples=60)
)
TestCacheReaderOverConcat = state_machine_test(
    CacheReaderOverConcat, config=settings(DEFAULT_SETTINGS, max_examples=30)
)


# -- concat and stack -----------------------------------------------------------


def test_concat_grid_keeps_each_members_cells(inline_cache: ChunkCache) -> None:
    a = ArraySource(np.zeros((10, 12), "u2"), chunks=(4, 6), name="a")
    b = ArraySource(np.ones((5, 12), "u2"), chunks=(5, 4), name="b")
    both = ConcatSource([a, b])
    rows, cols = both.grid
    # Along the axis: a's cells (4, 4, 2) then b's (5); across: the union of 6- and 4-cuts.
    assert isinstance(rows, VaryingDimension)
    assert rows.edges == (4, 4, 2, 5)
    assert isinstance(cols, VaryingDimension)
    assert cols.edges == (4, 2, 2, 4)
    twelve = ArraySource(np.zeros((12, 12), "u2"), chunks=(4, 6), name="12")
    same = ConcatSource([twelve, ArraySource(np.ones((8, 12), "u2"), chunks=(4, 6), name="c")])
    assert same.grid == (FixedDimension(4, 20), FixedDimension(6, 12))  # regular stays regular
    assert ChunkedArray(same, inline_cache).chunks == (4, 6)
    keys = {chunk_key(both, (r, c)) for r in range(4) for c in range(4)}
    assert len(keys) == 16  # distinct per member cell ...
    assert not keys & {chunk_key(a, (r, c)) for r in range(3) for c in range(2)}  # ... and own


def test_routing_reads_members_only_through_read_chunk(inline_cache: ChunkCache) -> None:
    a = FaultySource(ArraySource(smooth(10, 12), chunks=(4, 6), name="a"))
    b = FaultySource(ArraySource(smooth(5, 12) + 1000, chunks=(5, 4), name="b"))
    both = ConcatSource([a, b])
    view = ChunkedArray(both, inline_cache)[3:12, 5:9]
    np.testing.assert_array_equal(
        view.result(), np.concatenate([smooth(10, 12), smooth(5, 12) + 1000])[3:12, 5:9]
    )
    # The view's composite cells: rows [0:4, 4:8, 8:10 | 10:15] x cols [4:6, 6:8, 8:12]; a
    # member cell split by the other member's cuts is read once per piece (a's [6:12], b's [4:8]).
    assert sorted(a.reads) == [(r, c) for r in range(3) for c in (0, 1, 1)]
    assert sorted(b.reads) == [(0, 1), (0, 1), (0, 2)]


def smooth(*shape: int) -> np.ndarray[Any, Any]:
    return np.arange(np.prod(shape), dtype=np.int32).reshape(shape)


@pytest.mark.parametrize(
    ("shapes", "axis"),
    [
        ([(3, 4), (2, 4), (5, 4)], 0),
        ([(3, 4), (3, 1), (3, 7)], 1),
        ([(2, 3, 4), (2, 3, 1)], -1),
        ([(6, 5)], -2),
        ([(2, 3), (0, 3), (1, 3)], 0),
    ],
)
def test_concat_equals_tensorstore(
    shapes: list[tuple[int, ...]], axis: int, inline_cache: ChunkCache
) -> None:
    arrays = [smooth(*s) + 100 * i for i, s in enumerate(shapes)]
    sources = [ArraySource(x, chunks=(2,) * x.ndim, name=("m", i)) for i, x in enumerate(arrays)]
    ours = ConcatSource(sources, axis=axis)
    theirs = ts.concat([ts.array(x) for x in arrays], axis=axis)
    assert ours.shape == tuple(theirs.shape)
    assert ours.axis == axis % len(shapes[0])
    np.testing.assert_array_equal(
        ChunkedArray(ours, inline_cache).result(), theirs.read().result()
    )


@pytest.mark.parametrize(("rank", "axis"), [(1, 0), (1, -1), (2, 1), (2, 2), (2, -3), (3, 0)])
def test_stack_equals_tensorstore(rank: int, axis: int, inline_cache: ChunkCache) -> None:
    shape = (3, 4, 2)[:rank]
    arrays = [smooth(*shape) * (i + 1) for i in range(3)]
    chunks = [(2,) * rank, (3,) * rank, shape]
    sources = [
        ArraySource(x, chunks=c, name=("p", i))
        for i, (x, c) in enumerate(zip(arrays, chunks, strict=True))
    ]
    ours = StackSource(sources, axis=axis)
    theirs = ts.stack([ts.array(x) for x in arrays], axis=axis)
    assert ours.shape == tuple(theirs.shape)
    new_axis = ours.grid[ours.axis]
    assert [new_axis.chunk_size(i) for i in range(3)] == [1, 1, 1]
    np.testing.assert_array_equal(
        ChunkedArray(ours, inline_cache).result(), theirs.read().result()
    )
    np.testing.assert_array_equal(
        ChunkedArray(ours, inline_cache).result(), np.stack(arrays, axis)
    )


def test_incompatible_members_are_refused_clearly() -> None:
    a = ArraySource(np.zeros((3, 4), "u2"), chunks=(2, 2), name="a")
    with pytest.raises(
        IncompatibleSourcesError, match=r"concat: source 1 .* dtype float32, source 0 has uint16"
    ):
        ConcatSource([a, ArraySource(np.zeros((3, 4), "f4"), chunks=(2, 2))])
    with pytest.raises(
        IncompatibleSourcesError,
        match=r"shape \(3, 5\), source 0 has \(3, 4\): they differ along axis 1",
    ):
        ConcatSource([a, ArraySource(np.zeros((3, 5), "u2"), chunks=(2, 2))], axis=0)
    with pytest.raises(IncompatibleSourcesError, match="has rank 1"):
        ConcatSource([a, ArraySource(np.zeros(4, "u2"), chunks=(2,))])
    with pytest.raises(
        IncompatibleSourcesError, match=r"axis 2 is outside the valid range \[-2, 2\)"
    ):
        ConcatSource([a, a], axis=2)
    with pytest.raises(IncompatibleSourcesError, match="needs at least one source"):
        StackSource([])
    with pytest.raises(IncompatibleSourcesError, match=r"stack: source 1 .* along axis 0"):
        StackSource([a, ArraySource(np.zeros((5, 4), "u2"), chunks=(2, 2))])
    with pytest.raises(
        IncompatibleSourcesError, match=r"axis 3 is outside the valid range \[-3, 3\)"
    ):
        StackSource([a, a], axis=3)
    # TensorStore accepts mismatched extents (a domain with holes) but cannot read the holes;
    # refusing them when the composite is built is the same answer, given earlier.
    mismatched = ts.concat(
        [ts.array(np.zeros((3, 4), "u2")), ts.array(np.zeros((2, 5), "u2"))], axis=0
    )
    with pytest.raises(ValueError, match="missing layer mapping"):
        mismatched.read().result()
    with pytest.raises(ValueError, match="does not match existing dtype"):
        ts.concat([ts.array(np.zeros((3, 4), "u2")), ts.array(np.zeros((3, 4), "f4"))], axis=0)


def test_equal_composites_share_cached_chunks(inline_cache: ChunkCache) -> None:
    def build() -> ConcatSource:
        a = ArraySource(smooth(4, 4), chunks=(2, 2), name="a")
        b = CastSource(ArraySource(smooth(4, 4).astype("u1"), chunks=(4, 1), name="b"), "i4")
        return StackSource([a, b], axis=0)

    first, second = build(), build()
    assert first.identity == second.identity
    assert hash(first.identity) == hash(second.identity)
    assert str(first.identity) == "stack(a, cast(b; dtype=int32); axis=0)"
    ChunkedArray(first, inline_cache).result()
    loads = inline_cache.statistics.loads
    np.testing.assert_array_equal(
        ChunkedArray(second, inline_cache).result(), np.stack([smooth(4, 4)] * 2)
    )
    assert inline_cache.statistics.loads == loads  # every chunk was a hit
    other = ConcatSource(build().members, axis=1)
    assert other.identity != first.identity
    assert str(CompositeIdentity("concat", (), tuple("abcde"))) == "concat(a, b, c, +2 more)"


def test_a_failing_member_chunk_fails_only_its_composite_cells(inline_cache: ChunkCache) -> None:
    a = ArraySource(smooth(4, 6), chunks=(2, 3), name="a")
    b = FaultySource(ArraySource(smooth(4, 6), chunks=(2, 3), name="b"), failing={(1, 0)})
    array = ChunkedArray(ConcatSource([a, b], axis=1), inline_cache)
    partial = array.read_nonblocking()
    partial.request.release()
    states = {ref.key: inline_cache.state(ref.key) for ref in array.chunk_refs()}
    failed = [key for key, state in states.items() if state is ChunkState.FAILED]
    assert [(k.inclusive_min, k.exclusive_max) for k in failed] == [((2, 6), (4, 9))]
    assert "injected fault reading chunk (1, 0)" in str(inline_cache.error(failed[0]))
    assert sum(s is ChunkState.READY for s in states.values()) == 7
    with pytest.raises(ChunkReadError):
        array.result(timeout=5)


def test_virtual_levels_over_a_concat(inline_cache: ChunkCache) -> None:
    a, b = smooth(600, 700), smooth(600, 500) + 7
    source = ConcatSource(
        [ArraySource(a, chunks=(256, 256), name="a"), ArraySource(b, chunks=(200, 300), name="b")],
        axis=1,
    )
    levels = virtual_levels(source)
    assert [level.shape for level in levels] == [(600, 1200), (300, 600), (150, 300)]
    whole = np.concatenate([a, b], axis=1)
    for factor, level in zip((1, 2, 4), levels, strict=True):
        np.testing.assert_array_equal(
            ChunkedArray(level, inline_cache)[10:, 5::3].result(),
            whole[::factor, ::factor][10:, 5::3],
        )


def test_composites_are_read_only() -> None:
    a = ArraySource(smooth(2, 2), chunks=(2, 2), name="a")
    for source in (
        ConcatSource([a]),
        StackSource([a]),
        ConstantSource((2, 2)),
        CastSource(a, "f4"),
        FunctionSource(np.zeros, shape=(2,), dtype="f8", chunks=(2,)),
    ):
        with pytest.raises(
            ReadOnlyError, match="is read-only: composite sources cannot be written"
        ):
            source.write_chunk((0, 0), np.zeros((2, 2)))


# -- constant -----------------------------------------------------------------------


def test_constant_source(inline_cache: ChunkCache) -> None:
    pad = ConstantSource((3, 1000, 1500), 2.5, "f4")
    assert [g.chunk_size(0) for g in pad.grid] == [1, 512, 512]
    assert pad.fill_value == np.float32(2.5)
    np.testing.assert_array_equal(
        ChunkedArray(pad, inline_cache)[1, 500:530:2, ::300].result(), np.full((15, 5), 2.5, "f4")
    )
    assert (
        ConstantSource((2,), np.nan, "f8").identity == ConstantSource((2,), np.nan, "f8").identity
    )
    assert ConstantSource((2,), 0.0, "f8").identity != ConstantSource((2,), -0.0, "f8").identity
    assert ConstantSource((4,), 3).dtype == np.dtype(int)
    with pytest.raises(UnsupportedDataError, match="value 300 does not fit dtype uint8"):
        ConstantSource((2,), 300, "u1")
    with pytest.raises(UnsupportedDataError, match="dtype <U1 cannot be shown as an image"):
        ConstantSource((2,), "x")


# -- function-backed ------------------------------------------------------------


def test_function_source_equals_tensorstore_virtual_chunked(inline_cache: ChunkCache) -> None:
    shape, chunks = (11, 7, 5), (4, 3, 5)
    ours_boxes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    theirs_boxes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    lock = threading.Lock()

    def values(lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray[Any, Any]:
        grids = np.meshgrid(*(np.arange(a, b) for a, b in zip(lo, hi, strict=True)), indexing="ij")
        return (grids[0] * 100 + grids[1] * 10 + grids[2]).astype("f4") / 3

    def ours_function(box: IndexDomain) -> np.ndarray[Any, Any]:
        with lock:
            ours_boxes.append((box.inclusive_min, box.exclusive_max))
        return values(box.inclusive_min, box.exclusive_max)

    def theirs_function(domain: Any, array: np.ndarray[Any, Any], params: Any) -> None:
        lo, hi = tuple(domain.inclusive_min), tuple(domain.exclusive_max)
        with lock:
            theirs_boxes.append((lo, hi))
        array[...] = values(lo, hi)

    ours = FunctionSource(ours_function, shape=shape, dtype="f4", chunks=chunks)
    theirs = ts.virtual_chunked(
        theirs_function,
        dtype=ts.float32,
        domain=ts.IndexDomain(shape=shape),
        chunk_layout=ts.ChunkLayout(read_chunk_shape=chunks),
    )
    np.testing.assert_array_equal(
        ChunkedArray(ours, inline_cache).result(), theirs.read().result()
    )
    assert sorted(ours_boxes) == sorted(theirs_boxes)  # one call per chunk, clipped boxes
    assert len(ours_boxes) == 3 * 3 * 1
    ChunkedArray(ours, inline_cache)[2:9].result()
    assert len(ours_boxes) == 9  # cached like any other chunk
    np.testing.assert_array_equal(
        ChunkedArray(ours, inline_cache).vindex[[0, 10], [6, 0], [4, 2]].result(),
        theirs.vindex[[0, 10], [6, 0], [4, 2]].read().result(),
    )


def test_function_source_results_are_checked(inline_cache: ChunkCache) -> None:
    big = np.arange(36, dtype="f8").reshape(6, 6)

    def view_of_big(box: IndexDomain) -> np.ndarray[Any, Any]:
        return big[_box(box)]  # a float64 view: converted (same kind) and so never aliased

    source = FunctionSource(view_of_big, shape=(6, 6), dtype="f4", chunks=(4, 4), name="big")
    chunk = source.read_chunk((0, 0))
    assert chunk.dtype == np.float32
    assert not np.shares_memory(chunk, big)
    same_dtype = FunctionSource(
        lambda box: big[_box(box)], shape=(6, 6), dtype="f8", chunks=(4, 4)
    )
    assert not np.shares_memory(same_dtype.read_chunk((1, 1)), big)

    def broken(box: IndexDomain) -> np.ndarray[Any, Any]:
        if box.inclusive_min == (4, 4):
            raise ZeroDivisionError("no data here")
        return np.zeros(box.shape, "u1")

    failing = ChunkedArray(
        FunctionSource(broken, shape=(6, 6), dtype="u1", chunks=(4, 4)), inline_cache
    )
    with pytest.raises(
        ChunkReadError, match=r"box \[4:6, 4:6\]: the function raised ZeroDivisionError"
    ):
        failing.result(timeout=5)
    np.testing.assert_array_equal(failing[:4].result(timeout=5), np.zeros((4, 6), "u1"))
    wrong_shape = FunctionSource(lambda box: np.zeros(3), shape=(6,), dtype="f8", chunks=(4,))
    with pytest.raises(ChunkReadError, match=r"returned shape \(3,\), the box has \(4,\)"):
        wrong_shape.read_chunk((0,))
    wrong_kind = FunctionSource(
        lambda box: np.zeros(box.shape), shape=(6,), dtype="i2", chunks=(4,)
    )
    with pytest.raises(ChunkReadError, match="returned dtype float64, which does not convert"):
        wrong_kind.read_chunk((0,))


# -- cast --------------------------------------------------------------------------

_VALUES = {
    "f8": np.array([-1.7, -0.5, 2.5, 300.9, -300.2, np.nan, np.inf, -np.inf, 1e10, 65535.0]),
    "i8": np.array([-1, 127, 128, 255, 256, -129, 2**40, -(2**40), 0, 7]),
    "u2": np.array([0, 1, 255, 256, 65535, 32768, 127, 128, 3, 9], "u2"),
    "c16": np.array([1 + 2j, -3.5 - 1j, 0j, 1j, 1e10 + 0j, 2, 3, 4, 5, 6]),
    "b1": np.array([True, False] * 5),
}
_TARGETS = ("u1", "i1", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "b1", "c8")


@pytest.mark.parametrize("source_dtype", sorted(_VALUES))
def test_cast_equals_tensorstore_and_numpy(source_dtype: str, inline_cache: ChunkCache) -> None:
    """Lossy casts included (wrapping, truncation, NaN and infinities to integers)."""
    values = _VALUES[source_dtype]
    base = ArraySource(values, chunks=(3,), name=("values", source_dtype))
    for target in _TARGETS:
        cast = CastSource(base, target)
        ours = ChunkedArray(cast, inline_cache).result()
        # NumPy's astype, minus its warnings: complex to real keeps the real part.
        kept = values.real if source_dtype == "c16" and target not in ("b1", "c8") else values
        with np.errstate(invalid="ignore", over="ignore"):
            expected = kept.astype(target)
        # Float to integer is undefined (C) for NaN, infinities and values out of range: NumPy
        # itself answers differently for a 3-value chunk and a 10-value array. Compare the rest.
        defined = _defined(kept, np.dtype(target))
        message = f"{source_dtype} -> {target}"
        np.testing.assert_array_equal(ours[defined], expected[defined], err_msg=message)
        assert cast.lossless == np.can_cast(values.dtype, target, "safe")
        if source_dtype == "c16" and target == "b1":
            continue  # TensorStore has no complex -> bool conversion; NumPy's is "nonzero"
        theirs = ts.cast(ts.array(values), ts.dtype(np.dtype(target).name)).read().result()
        np.testing.assert_array_equal(ours[defined], theirs[defined], err_msg=message)


def _defined(values: np.ndarray[Any, Any], target: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Where `values.astype(target)` has a defined result."""
    if values.dtype.kind not in "fc" or target.kind not in "iu":
        return np.ones(values.shape, dtype=bool)
    info = np.iinfo(target)
    with np.errstate(invalid="ignore"):
        truncated = np.trunc(values.real)
        return np.isfinite(truncated) & (truncated >= info.min) & (truncated <= info.max)


def test_cast_source_parameters() -> None:
    base = ArraySource(np.array([1, 2, 3], "u2"), chunks=(2,), name="b", fill_value=65535)
    assert CastSource(base, "i1").fill_value == np.int8(-1)  # the fill value is cast as well
    assert CastSource(base, "f4").lossless
    assert not CastSource(base, "u1").lossless
    assert CastSource(base, "u2").read_chunk((0,)).dtype == np.dtype("u2")
    with pytest.raises(UnsupportedDataError, match="uint16 to uint8 is not a 'safe' cast"):
        CastSource(base, "u1", casting="safe")
    with pytest.raises(UnsupportedDataError, match="dtype object cannot be shown"):
        CastSource(base, object)
