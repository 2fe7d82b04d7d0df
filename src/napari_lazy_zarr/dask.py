"""View dask arrays without blocking napari: chunks computed locally or on a dask cluster.

Each block of a dask array becomes a chunk of the plugin's byte-bounded cache,
computed when a view needs it (visible first, then prefetch), on dask's local
threaded scheduler or on a ``distributed.Client``; chunks a view no longer
needs are cancelled. See docs/dask.md.

::

    import dask.array as da, napari
    from napari_lazy_zarr.dask import add_image, from_dask

    smooth = da.from_zarr("scan.zarr").map_overlap(blur, depth=4, dtype="f4")
    tile = from_dask(smooth)[0:1024, 0:1024].result()      # blocks; computes 4 chunks
    viewer = napari.Viewer()
    add_image(viewer, smooth, client=client, name="smoothed")  # never blocks
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from napari_lazy_zarr.core.cache import DEFAULT_TOTAL_BYTES_LIMIT, ChunkCache
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.sources.dask import (
    DEFAULT_COMPUTE_TIMEOUT,
    DaskRunner,
    DaskSource,
    coarsened_levels,
)
from napari_lazy_zarr.core.sources.decimated import virtual_levels

if TYPE_CHECKING:
    from collections.abc import Sequence

    import dask.array as da
    from distributed import Client

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = ["add_image", "dask_levels", "from_dask", "layer_data"]

type Levels = Literal["mean", "stride", "decimate"]
type ClientArg = Client | Literal["active"] | DaskRunner | None


def _runner(client: ClientArg, timeout: float) -> DaskRunner:
    return client if isinstance(client, DaskRunner) else DaskRunner(client, timeout=timeout)


def from_dask(
    array: da.Array,
    *,
    client: ClientArg = None,
    cache: ChunkCache | None = None,
    total_bytes_limit: int = DEFAULT_TOTAL_BYTES_LIMIT,
    concurrency: int | None = None,
    timeout: float = DEFAULT_COMPUTE_TIMEOUT,
    name: str | None = None,
) -> ChunkedArray:
    """A lazy `ChunkedArray` whose chunks are `array`'s blocks, computed when read.

    Parameters
    ----------
    array
        The dask array (any graph; its chunking is the read grid).
    client
        None (default): dask's local threaded scheduler. A ``distributed.Client``,
        or ``"active"`` for the client already running in this process (an error
        if there is none), or a `DaskRunner` to share with other arrays.
    cache
        The chunk cache to fill (a new one of `total_bytes_limit` bytes by default).
    concurrency
        Chunks computed at once (a new cache's worker count). By default one per
        core locally, and twice the cluster's threads with a client, so its
        workers never wait for the viewer to ask for the next chunk.
    timeout
        Seconds one chunk's computation may take before it fails (retryable).
    name
        Names the data in chunk keys and messages (default: the array's dask name).

    Examples
    --------
    >>> import dask.array as da, numpy as np
    >>> image = from_dask(da.arange(64, chunks=16).reshape(8, 8) ** 2)
    >>> image.shape, image.chunks
    ((8, 8), (2, 8))
    >>> image[1:3, :3].result()
    array([[ 64,  81, 100],
           [256, 289, 324]])
    >>> image.cache.close(); image.source.close()
    """
    runner = _runner(client, timeout)
    if cache is None:
        cache = ChunkCache(total_bytes_limit, concurrency=concurrency or _concurrency(runner))
    return ChunkedArray(DaskSource(array, runner=runner, name=name), cache)


def dask_levels(
    array: da.Array | Sequence[da.Array],
    *,
    client: ClientArg = None,
    levels: Levels = "mean",
    smallest: int = 512,
    timeout: float = DEFAULT_COMPUTE_TIMEOUT,
    prefetch_ring: int = 0,
) -> list[ChunkSource]:
    """The pyramid a layer shows for `array`: chunk sources, finest first.

    A sequence of dask arrays is a pyramid already (the cheapest overview is one
    computed from coarser inputs, e.g. the filter applied to each level of a
    stored pyramid). For a single array, `levels` says how coarse levels are made:

    ``"mean"`` / ``"stride"``
        Coarsened graphs (`coarsened_levels`): each coarse chunk is one dask
        computation of the fine blocks under it, reduced where the graph runs;
        on a cluster only the small result comes back.
    ``"decimate"``
        The cache's virtual levels (`virtual_levels`): coarse chunks sampled from
        the fine chunks, which are computed once and cached for the full-resolution
        view too (best on the local scheduler, when memory allows).

    Every level shares one `DaskRunner` (one local pool, or the client).
    `prefetch_ring` is how many blocks beyond the view a viewer computes ahead
    (`DaskSource`): none by default, since each is a whole computation.
    """
    runner = _runner(client, timeout)
    if not _is_dask_array(array):
        return [DaskSource(level, runner=runner, prefetch_ring=prefetch_ring) for level in array]
    single: da.Array = array  # type: ignore[assignment]
    if levels == "decimate":
        base = DaskSource(single, runner=runner, prefetch_ring=prefetch_ring)
        return virtual_levels(base, smallest=smallest)
    return [
        DaskSource(level, runner=runner, prefetch_ring=prefetch_ring)
        for level in coarsened_levels(single, method=levels, smallest=smallest)
    ]


def layer_data(
    array: da.Array | Sequence[da.Array],
    *,
    client: ClientArg = None,
    cache: ChunkCache | None = None,
    name: str | None = None,
    levels: Levels = "mean",
    contrast_limits: tuple[float, float] | None = None,
    axis_names: Sequence[str] | None = None,
    scale: Sequence[float] | None = None,
    translate: Sequence[float] | None = None,
    prefetch: bool = True,
    prefetch_ring: int = 0,
    timeout: float = DEFAULT_COMPUTE_TIMEOUT,
) -> list[tuple[Any, dict[str, Any], str]]:
    """napari layer data tuples for `array`, built by the plugin's own reader glue.

    The layer is multiscale (`dask_levels`), reads only the visible region, and
    never blocks: missing chunks show coarser data or the placeholder until they
    are computed. By default the plugin's shared chunk cache is used (its worker
    count raised to twice the cluster's threads with a client). Give
    `contrast_limits` to open without computing anything; without them a bounded
    sample of the coarsest level is computed in the background, as for a zarr
    store without contrast metadata (the first view shown with chunks computed
    gives the limits meanwhile). The layer is named `name`, else after its
    shape and dtype (``"dask 16384×16384 float32"``). `prefetch_ring` blocks beyond
    the view are computed ahead (none by default: each is a whole computation,
    and a local one cannot be stopped once running); `prefetch=False` also stops
    loading ahead of a walk through z or t. The layer's loader must be
    attached to the viewer (`add_image` does it; else call
    ``napari_lazy_zarr._reader.watch_viewer(viewer)`` before adding).
    """
    from napari_lazy_zarr._reader import layer_data as reader_layer_data
    from napari_lazy_zarr._reader import shared_cache
    from napari_lazy_zarr.core.formats.ome import ImageSpec, LevelSpec

    runner = _runner(client, timeout)
    sources = dask_levels(array, client=runner, levels=levels, prefetch_ring=prefetch_ring)
    if cache is None:
        cache = shared_cache()
        cache.concurrency = max(cache.concurrency, _concurrency(runner))
    base = sources[0]
    rank = len(base.shape)
    names = tuple(axis_names) if axis_names is not None else _default_axes(rank)
    level_specs = tuple(
        LevelSpec(
            path=str(index),
            shape=tuple(source.shape),
            scale=tuple(float(s) for s in (scale or (1.0,) * rank)),
            translate=tuple(float(t) for t in (translate or (0.0,) * rank)),
        )
        for index, source in enumerate(sources)
    )
    # "dask 16384×16384 float32": what a person reads in the layer list (the array's dask
    # name, "mul-b841084a…", is a token hash); `name=` gives one of the caller's.
    label = name or f"dask {'×'.join(str(n) for n in base.shape)} {base.dtype}"
    spec = ImageSpec(
        name=label,
        kind="image",
        levels=level_specs,
        axis_names=names,
        axis_units=(None,) * rank,
        contrast_limits=None if contrast_limits is None else (tuple(contrast_limits),),  # type: ignore[arg-type]
    )
    return reader_layer_data(
        f"dask://{label}", spec, cache, prefetch=prefetch, sources=list(sources)
    )


def add_image(
    viewer: Any,
    array: da.Array | Sequence[da.Array],
    *,
    client: ClientArg = None,
    timeout: float = DEFAULT_COMPUTE_TIMEOUT,
    **kwargs: Any,
) -> Any:
    """Add `array` to `viewer` as a non-blocking image layer (`layer_data`'s options).

    Returns the layer. Its chunks are computed as views ask for them; when the
    layer is removed, its computations in flight are cancelled and the runner it
    made is closed (a `DaskRunner` passed as `client` is the caller's to close).
    """
    from napari_lazy_zarr._reader import watch_viewer

    watch_viewer(viewer)
    runner = _runner(client, timeout)
    ((data, layer_kwargs, _),) = layer_data(array, client=runner, **kwargs)
    layer = viewer.add_image(data, **layer_kwargs)
    owned = None if isinstance(client, DaskRunner) else runner
    sources = [level.array.source for level in (data if isinstance(data, list) else [data])]

    def on_removed(event: Any) -> None:
        if event.value is not layer:
            return
        viewer.layers.events.removed.disconnect(on_removed)
        for source in sources:
            if isinstance(source, DaskSource):
                source.close()
        if owned is not None:
            owned.close(wait=False)  # never make napari's thread wait for a running task

    viewer.layers.events.removed.connect(on_removed)
    return layer


def _is_dask_array(value: Any) -> bool:
    return hasattr(value, "__dask_graph__") and hasattr(value, "chunks")


def _concurrency(runner: DaskRunner) -> int:
    """Chunks in flight: one per core locally; twice the cluster's threads with a client."""
    from napari_lazy_zarr.core.cache import default_concurrency

    if runner.client is None:
        return default_concurrency()
    threads = sum(runner.client.nthreads().values())  # type: ignore[no-untyped-call]
    return max(default_concurrency(), 2 * threads)


def _default_axes(rank: int) -> tuple[str, ...]:
    named = ("t", "z", "y", "x")
    return named[-rank:] if rank <= len(named) else tuple(f"dim_{i}" for i in range(rank))
