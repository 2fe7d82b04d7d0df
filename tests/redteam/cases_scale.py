"""Metadata that declares unbounded work: huge grids of 1-pixel chunks, huge pyramids.

A 200-byte ``.zarray`` (chunk shape 1) must not decide the work of a read: the
Python API refuses a read over its bounds with `PlanTooLargeError` at once, and
napari's path (a `ViewController` over the reader's levels) serves a view over
its bounds from a coarser level. Only metadata (and a chunk or two) is written.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.redteam.harness import Case, Context, Finding
from tests.redteam.stores import metadata_only

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KIND = "scale"
CALL_BOUND = 2.0  # a refused or coarsened read returns within this (microseconds here)


def _timed(what: str, call: Any) -> Any:
    started = time.perf_counter()
    try:
        return call()
    finally:
        took = time.perf_counter() - started
        if took > CALL_BOUND:
            raise Finding("hang", f"{what} took {took:.1f} s (bound {CALL_BOUND} s)")


def _slice_of_a_trillion(context: Context) -> str:
    store = metadata_only(context.root / "a.zarr", [10**12], [1])
    array = context.open(store)
    context.begin()
    partial = _timed("read_nonblocking", lambda: array[0 : 10**7].read_nonblocking())
    raise Finding("wrong-pixels", f"planned {len(partial.missing)} chunks of a 10**7 slice")


def _whole_2_62(context: Context) -> str:
    store = metadata_only(context.root / "a.zarr", [2**62, 2**62], [1, 1])
    array = context.open(store)
    context.begin()
    data = _timed("result", lambda: array.result(timeout=context.wait))
    raise Finding("wrong-pixels", f"read a [2**62, 2**62] array whole: {data.shape}")


def _full_extent(context: Context) -> str:
    store = metadata_only(context.root / "a.zarr", [10**6, 10**6], [1, 1])
    array = context.open(store)
    context.begin()
    _timed("read_nonblocking", lambda: array[:, :].read_nonblocking())
    raise Finding("wrong-pixels", "planned every chunk of a 10**6 x 10**6 1-px grid")


def _window(context: Context) -> str:
    store = metadata_only(context.root / "a.zarr", [10**6, 10**6], [1, 1])
    (store / "3.4").write_bytes(bytes([200]))
    array = context.open(store)
    context.begin()
    data = array[0:64, 0:64].result(timeout=context.wait)
    expected = np.zeros((64, 64), np.uint8)
    expected[3, 4] = 200
    if not np.array_equal(data, expected):
        raise Finding("wrong-pixels", "a 64x64 window of the 1-px grid differs")
    return "a 64x64 window (4,096 chunks) of the 10**6 x 10**6 1-px grid read exactly"


def _ome(path: Path, levels: list[tuple[int, int]]) -> Path:
    """An OME-Zarr 0.4 image: levels of (side, chunk), only metadata and chunk 0.0 of each."""
    path.mkdir(parents=True)
    (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    datasets = []
    for level, (side, chunk) in enumerate(levels):
        metadata_only(path / str(level), [side, side], [chunk, chunk])
        (path / str(level) / "0.0").write_bytes(bytes([200]) * chunk * chunk)
        factor = float(2**level)
        datasets.append(
            {
                "path": str(level),
                "coordinateTransformations": [{"type": "scale", "scale": [factor, factor]}],
            }
        )
    attrs = {
        "multiscales": [
            {
                "version": "0.4",
                "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                "datasets": datasets,
            }
        ]
    }
    (path / ".zattrs").write_text(json.dumps(attrs))
    return path


def _napari_views(levels: list[tuple[int, int]]) -> Any:
    def run(context: Context) -> str:
        from napari_lazy_zarr._reader import read_zarr  # imports napari: before the clock
        from napari_lazy_zarr.core.viewport._coarser import VIEW_CHUNKS, VIEW_STORED_CHUNKS

        store = _ome(context.root / "image.ome.zarr", levels)
        # napari's settings and plugin discovery (seconds, once a process): before the clock.
        read_zarr(str(_ome(context.root / "warm.ome.zarr", [(64, 8), (32, 8)])))
        context.begin()
        ((data, _kwargs, _kind),) = _timed("read_zarr", lambda: read_zarr(str(store)))
        loader = data[0].loader
        loader.prefetch = False
        controller = loader.controller
        sources = controller.sources
        worst = 0
        try:
            for level in (0, len(sources) - 1):  # a canvas at full resolution, the thumbnail
                shape = sources[level].shape
                view = controller.arrays[level][0 : min(shape[0], 1080), 0 : min(shape[1], 1920)]
                if level:
                    view = controller.arrays[level][:, :]
                _timed(
                    f"read of level {level}",
                    lambda v=view, k=level: controller.read(k, v, kind="view"),
                )
                frame = controller.latest
                if frame is None:
                    raise Finding("raw-exception", "no frame after a read")
                (identity,) = {key.source for key in frame.keys}
                (served,) = [s for s in sources if s.identity == identity]
                cost = len(frame.keys) * (
                    served.chunk_cost((0, 0)) if hasattr(served, "chunk_cost") else 1
                )
                if len(frame.keys) > VIEW_CHUNKS or cost > VIEW_STORED_CHUNKS:
                    raise Finding(
                        "hang", f"a view planned {len(frame.keys):,} chunks costing {cost:,}"
                    )
                worst = max(worst, cost)
        finally:
            controller.close()
        return (
            f"{len(sources)} levels; level 0 and the thumbnail served within bounds "
            f"(at most {worst:,} stored chunks a view)"
        )

    return run


def cases() -> Iterator[Case]:
    yield Case(
        "[10**12] of 1-chunks sliced [0:10**7], read_nonblocking", KIND, _slice_of_a_trillion
    )
    yield Case("[2**62, 2**62] of 1x1 chunks read whole", KIND, _whole_2_62)
    yield Case("10**6 x 10**6 of 1x1 chunks, a view of its full extent", KIND, _full_extent)
    yield Case(
        "10**6 x 10**6 of 1x1 chunks, a 64x64 window",
        KIND,
        _window,
        accept=frozenset({"ok"}),
        bound=30.0,
    )
    yield Case(
        "napari: pyramid whose stored level 0 has 1-px chunks",
        KIND,
        _napari_views([(10**6, 1), (5 * 10**5, 1), (2**18, 256), (2**17, 256)]),
        accept=frozenset({"ok", "clear-error"}),
        bound=30.0,
    )
    yield Case(
        "napari: OME-Zarr multiscale with huge levels (10**9 px, 512² chunks)",
        KIND,
        _napari_views([(10**9, 512), (5 * 10**8, 512), (25 * 10**7, 512)]),
        accept=frozenset({"ok", "clear-error"}),
        bound=30.0,
    )
