"""The napari reader: Zarr stores (plain arrays, groups, OME-Zarr) as non-blocking layers.

Also kerchunk reference files (an array whose chunks live in other files) and
stack files (``*.zstack.json``: zarr arrays concatenated or stacked into one
layer); see `core.manifest`.

`napari_get_reader` is cheap (a few `stat` calls), never raises, and returns
`None` for what it cannot read. The reader function describes the store from
metadata only, opens each level as a chunk source over the plugin's shared
chunk cache, and returns one layer per image (per channel for OME-Zarr
images with a channel axis; a labels layer per OME-Zarr label image). No
chunk is read except a small central region used for contrast limits when
the metadata gives none — part of what the first view shows anyway.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr._layer_data import LayerLoader, loader_of
from napari_lazy_zarr.core import ChunkCache
from napari_lazy_zarr.core.array import REMOTE_CONCURRENCY
from napari_lazy_zarr.core.cache import DEFAULT_TOTAL_BYTES_LIMIT
from napari_lazy_zarr.core.errors import LazyZarrError
from napari_lazy_zarr.core.layout import (
    ImageSpec,
    describe_store,
    looks_like_zarr,
    open_level_sources,
)
from napari_lazy_zarr.core.manifest import reference_file_kind
from napari_lazy_zarr.core.pyramid import DecimatedSource, virtual_levels
from napari_lazy_zarr.core.view import AxisMap, ViewController
from napari_lazy_zarr.core.zarr_source import is_remote

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_lazy_zarr.core.source import ChunkSource

__all__ = ["configure", "layer_data", "napari_get_reader", "read_zarr", "shared_cache"]

LayerDataTuple = tuple[Any, dict[str, Any], str]
type PathOrPaths = str | os.PathLike[str] | list[str] | tuple[str, ...]

_cache_lock = threading.Lock()
_shared_cache: ChunkCache | None = None
# The shared cache whose worker count the user chose (NAPARI_LAZY_ZARR_CONCURRENCY or
# `configure`): opening a remote store leaves that count as it is.
_chosen_concurrency: ChunkCache | None = None
_CONTRAST_SAMPLE = 1024  # pixels per displayed axis read (blocking) for contrast limits
_CONTRAST_TIMEOUT = 10.0  # seconds the contrast sample may wait for storage


def shared_cache(*, remote: bool = False) -> ChunkCache:
    """The chunk cache every layer opened by the plugin reads through (created on first use).

    Its capacity comes from `NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT` (bytes) and its
    worker count from `NAPARI_LAZY_ZARR_CONCURRENCY` when set (else one per
    core); `configure` changes both live. With `remote` (the reader is opening
    a URL) the worker count is raised to at least
    `NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY` (default `REMOTE_CONCURRENCY`, 32, as
    `open_array` keeps for URLs: remote chunks are latency-bound), unless the
    user chose a count by `NAPARI_LAZY_ZARR_CONCURRENCY` or `configure`.
    """
    global _shared_cache, _chosen_concurrency
    with _cache_lock:
        if _shared_cache is None:
            limit = int(
                os.environ.get("NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT", DEFAULT_TOTAL_BYTES_LIMIT)
            )
            workers = os.environ.get("NAPARI_LAZY_ZARR_CONCURRENCY")
            _shared_cache = ChunkCache(limit, concurrency=int(workers) if workers else None)
            if workers:
                _chosen_concurrency = _shared_cache
        cache = _shared_cache
        if remote and _chosen_concurrency is not cache:
            wanted = os.environ.get("NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY")
            cache.concurrency = max(
                cache.concurrency, int(wanted) if wanted else REMOTE_CONCURRENCY
            )
        return cache


def configure(
    *, total_bytes_limit: int | None = None, concurrency: int | None = None
) -> ChunkCache:
    """Set the shared cache's capacity and worker count (applied live).

    A worker count set here is kept when a remote store is opened later.
    """
    global _chosen_concurrency
    cache = shared_cache()
    if total_bytes_limit is not None:
        cache.total_bytes_limit = total_bytes_limit
    if concurrency is not None:
        cache.concurrency = concurrency
        with _cache_lock:
            _chosen_concurrency = cache
    return cache


def napari_get_reader(path: PathOrPaths) -> Callable[[Any], list[LayerDataTuple]] | None:
    """The npe2 reader hook: `read_zarr` for a Zarr store or reference file, else None.

    Cheap; never raises.
    """
    try:
        if isinstance(path, list | tuple) and len(path) != 1:
            return None
        location = _single(path)
        readable = looks_like_zarr(location) or reference_file_kind(location) is not None
        return read_zarr if readable else None
    except Exception:  # the hook must never raise, whatever it is handed
        return None


def _single(path: PathOrPaths) -> str:
    one = path[0] if isinstance(path, list | tuple) else path
    return os.fspath(one)


def read_zarr(path: PathOrPaths) -> list[LayerDataTuple]:
    """Read a Zarr store as napari layer data tuples backed by non-blocking lazy levels.

    Raises a `LazyZarrError` subclass naming the path and the problem for a
    store that looks like Zarr but cannot be read.
    """
    location = _single(path)
    cache = shared_cache(remote=is_remote(location))
    layers: list[LayerDataTuple] = []
    for spec in describe_store(location):
        layers.extend(layer_data(location, spec, cache))
    _watch_current_viewer()
    return layers


def layer_data(
    location: str, spec: ImageSpec, cache: ChunkCache, *, prefetch: bool = True
) -> list[LayerDataTuple]:
    """The layer data tuples of one image (one per channel if it has a channel axis)."""
    sources: list[ChunkSource] = open_level_sources(location, spec)
    scale = spec.levels[0].scale
    translate = spec.levels[0].translate
    if len(sources) == 1:
        # No stored pyramid: napari would read whole planes of a single-level layer.
        sources = virtual_levels(sources[0], axes=_spatial_axes(spec))
    layer_type = "labels" if spec.kind == "labels" else "image"
    axis = spec.channel_axis
    channels: list[int | None] = (
        [None] if axis is None else list(range(spec.levels[0].shape[axis]))
    )
    rank = len(spec.axis_names)
    results: list[LayerDataTuple] = []
    for channel in channels:
        # One layer per channel: the layer holds the store's channel axis at one index.
        axis_map = AxisMap(
            rank, fixed=() if channel is None or axis is None else ((axis, channel),)
        )
        keep = list(axis_map.layer_axes)
        name = _channel_name(spec, channel)
        controller = ViewController(
            sources, cache, axis_map=axis_map, name=name, prefetch=prefetch
        )
        loader = LayerLoader(controller)
        views = loader.levels
        kwargs: dict[str, Any] = {
            "name": name,
            "multiscale": len(views) > 1,
            "scale": tuple(scale[a] for a in keep),
            "translate": tuple(translate[a] for a in keep),
            "axis_labels": tuple(spec.axis_names[a] for a in keep),
            "metadata": {"napari_lazy_zarr": {"location": location}},
        }
        units = [spec.axis_units[a] for a in keep]
        if all(units):
            kwargs["units"] = tuple(units)
        if layer_type == "image":
            kwargs.update(_image_kwargs(spec, channel, loader))
        data: Any = views if len(views) > 1 else views[0]
        results.append((data, kwargs, layer_type))
    return results


def channel_axis(spec: ImageSpec) -> int:
    """The channel axis of an image known to have one."""
    assert spec.channel_axis is not None
    return spec.channel_axis


def _spatial_axes(spec: ImageSpec) -> tuple[int, ...]:
    """The axes a virtual pyramid decimates: the last two non-channel axes."""
    axes = [a for a in range(len(spec.axis_names)) if a != spec.channel_axis]
    return tuple(axes[-2:])


def _channel_name(spec: ImageSpec, channel: int | None) -> str:
    if channel is None or (
        spec.kind == "labels" and spec.levels[0].shape[channel_axis(spec)] == 1
    ):
        return spec.name
    if spec.channel_names and channel < len(spec.channel_names):
        return spec.channel_names[channel]
    return f"{spec.name} [{channel}]"


def _image_kwargs(spec: ImageSpec, channel: int | None, loader: LayerLoader) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    index = 0 if channel is None else channel
    if spec.contrast_limits and index < len(spec.contrast_limits):
        kwargs["contrast_limits"] = spec.contrast_limits[index]
    else:
        kwargs["contrast_limits"] = _sample_contrast_limits(loader)
    if spec.channel_colors and index < len(spec.channel_colors):
        kwargs["colormap"] = _colormap(spec.channel_colors[index])
    if spec.channel_visible and index < len(spec.channel_visible):
        kwargs["visible"] = spec.channel_visible[index]
    if channel is not None:
        kwargs["blending"] = "additive"
    return kwargs


def _sample_contrast_limits(loader: LayerLoader) -> tuple[float, float]:
    """Min and max of a central region of the coarsest *stored* level (blocking, bounded).

    napari would otherwise compute them from the coarsest level through the
    non-blocking path, i.e. from placeholders. Virtual levels are skipped: their
    chunks are built from many stored chunks, which a quick sample must not read.
    Storage that does not answer in time, or data with no finite value, gives the
    dtype's range instead.
    """
    stored = [lvl for lvl in loader.levels if not isinstance(lvl.array.source, DecimatedSource)]
    level = stored[-1].array
    index: list[int | slice] = []
    spatial = set(range(level.ndim)[-2:])
    grid = level.source.grid
    for axis, extent in enumerate(level.shape):
        if axis in spatial:
            # At most 4 x 4 chunks: tiny chunks must not make the sample a huge request.
            store_axis = loader.controller.axis_map.store_axis(axis)
            chunk = int(grid[store_axis].chunk_size(0)) if extent else 1
            half = min(extent, _CONTRAST_SAMPLE, 4 * chunk) // 2
            centre = extent // 2
            index.append(slice(centre - half, centre - half + max(1, 2 * half)))
        else:
            index.append(extent // 2)
    try:
        sample = level[tuple(index)].result(timeout=_CONTRAST_TIMEOUT)
    except (TimeoutError, LazyZarrError):
        sample = np.zeros(0, dtype=level.dtype)
    if sample.dtype.kind == "f":
        sample = sample[np.isfinite(sample)]
    if sample.size == 0 or sample.dtype == bool:
        return _dtype_range(level.dtype)
    low, high = float(sample.min()), float(sample.max())
    if not low < high:
        return _dtype_range(level.dtype) if sample.dtype.kind in "iu" else (low, low + 1.0)
    return (low, high)


def _dtype_range(dtype: np.dtype[Any]) -> tuple[float, float]:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return (float(info.min), float(info.max))
    return (0.0, 1.0)


def _colormap(color: str) -> Any:
    """A black-to-`color` napari colormap for an OME channel color (`#RRGGBB`)."""
    from napari.utils.colormaps import Colormap

    rgb = [int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    return Colormap(
        colors=[[0.0, 0.0, 0.0, 1.0], [*rgb, 1.0]], name=f"lazy-zarr-{color.lstrip('#')}"
    )


_watched_viewers: weakref.WeakSet[Any] = weakref.WeakSet()


def _watch_current_viewer() -> None:
    """Attach loaders to the layers napari creates from our data in the current viewer."""
    try:
        import napari
    except ImportError:  # pragma: no cover - the reader runs inside napari
        return
    viewer = napari.current_viewer()
    if viewer is None:
        return
    watch_viewer(viewer)


def watch_viewer(viewer: Any) -> None:
    """Attach a loader to each plugin layer inserted in `viewer` (and detach on removal)."""
    if viewer in _watched_viewers:
        return
    _watched_viewers.add(viewer)
    viewer.layers.events.inserted.connect(_on_inserted)
    viewer.layers.events.removed.connect(_on_removed)
    for layer in viewer.layers:
        _attach(layer)


def _attach(layer: Any) -> None:
    loader = loader_of(layer)
    if loader is not None and loader.layer is None:
        loader.attach(layer)


def _on_inserted(event: Any) -> None:
    _attach(event.value)


def _on_removed(event: Any) -> None:
    loader = loader_of(event.value)
    if loader is not None and loader.layer is event.value:
        loader.detach()
