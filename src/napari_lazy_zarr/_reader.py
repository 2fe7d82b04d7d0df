"""The napari reader: Zarr stores (plain arrays, groups, OME-Zarr) as non-blocking layers.

Also kerchunk reference files (an array whose chunks live in other files) and
stack files (``*.zstack.json``: zarr arrays concatenated or stacked into one
layer); see `core.manifest`.

`napari_get_reader` decides from metadata alone (a few `stat` calls for a
local path; for an http(s) URL not named ``*.zarr``, its metadata document,
fetched with a short timeout), never raises, and returns `None` for anything
but Zarr, OME-Zarr, kerchunk reference files and stack files, so napari
offers the path to other readers. The reader function describes the store
from metadata only, opens each level as a chunk source over the plugin's
shared chunk cache, and returns one layer per image (per channel for OME-Zarr
images with a channel axis; a labels layer per OME-Zarr label image, coloured
as its ``image-label`` metadata says). No chunk is read during the open: when
the metadata gives no contrast limits, a bounded sample of the coarsest stored
level is read in the background and the layer takes its limits when it lands.
"""

from __future__ import annotations

import os
import posixpath
import sys
import threading
import warnings
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_lazy_zarr._layer_data import LayerLoader, loader_of
from napari_lazy_zarr._preferences import watch_preferences
from napari_lazy_zarr.core import ChunkCache
from napari_lazy_zarr.core.cache import default_concurrency
from napari_lazy_zarr.core.errors import (
    LazyZarrError,
    UnsupportedDataError,
    UnsupportedDtypeError,
)
from napari_lazy_zarr.core.formats.levels import clip_padded_levels
from napari_lazy_zarr.core.formats.ome import (
    ImageSpec,
    PlateStoreError,
    describe_store,
    looks_like_zarr,
    open_level_sources,
)
from napari_lazy_zarr.core.formats.plate import describe_plate, field_opener, plate_level_sources
from napari_lazy_zarr.core.formats.stack import reference_file_kind
from napari_lazy_zarr.core.settings import Settings, current_settings, settings_path
from napari_lazy_zarr.core.sources.decimated import DecimatedSource, virtual_levels
from napari_lazy_zarr.core.storage.vetting import dtype_refusal, is_remote
from napari_lazy_zarr.core.viewport import AxisMap, ContrastSample, ViewController

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from napari_lazy_zarr.core.sources.protocol import ChunkSource
    from napari_lazy_zarr.core.viewport import ViewFrame

__all__ = [
    "apply_settings",
    "configure",
    "layer_data",
    "napari_get_reader",
    "read_zarr",
    "shared_cache",
]

LayerDataTuple = tuple[Any, dict[str, Any], str]
type PathOrPaths = str | os.PathLike[str] | list[str] | tuple[str, ...]

_cache_lock = threading.Lock()
_shared_cache: ChunkCache | None = None
# Per shared cache: what `configure` set this session (it beats the settings), and
# whether a URL was opened through it (its loaders are then raised for remote reads).
_configured: weakref.WeakKeyDictionary[ChunkCache, dict[str, int]] = weakref.WeakKeyDictionary()
_remote_caches: weakref.WeakSet[ChunkCache] = weakref.WeakSet()
# The 3D voxel budget the open layers were given (a change of the setting re-applies it).
_applied_voxels: int | None = None
# The settings applied live to the open layers and their cache.
_LIVE = ("total_bytes_limit_mib", "concurrency", "remote_concurrency", "volume_mivoxels")
# The contrast sample (in the background, when the metadata gives no limits): at most this
# many stored chunks, of at most this many decoded bytes in all, waited for at most this long.
_CONTRAST_CHUNKS = 64
_CONTRAST_BYTES = 16 << 20
_CONTRAST_TIMEOUT = 60.0
_CONTRAST_INDICES = 1 << 16  # indices along one axis (a 1-D sample's index array is its size)


def shared_cache(*, remote: bool = False) -> ChunkCache:
    """The chunk cache every layer opened by the plugin reads through (created on first use).

    Its capacity and loaders are the user's settings (`current_settings`:
    napari's Preferences, the environment, the settings file), followed live
    when the Preferences page changes; `configure` overrides them for the
    session. With `remote` (the reader is opening a URL) the loaders are raised
    to at least `Settings.remote_concurrency` (32 by default, as `open_array`
    keeps for URLs: remote chunks are latency-bound), unless the user chose a
    count (`Settings.concurrency`, or `configure`).

    Raises
    ------
    MetadataError
        The settings it reads (`Settings` capacity, loaders, voxel budget) are
        malformed (the message names where).
    """
    global _shared_cache, _applied_voxels
    with _cache_lock:
        if _shared_cache is None:
            if not watch_preferences(apply_settings):
                _tell_where_the_settings_are()
            settings = current_settings(names=_LIVE)
            _applied_voxels = settings.volume_voxels
            _shared_cache = ChunkCache(
                settings.total_bytes_limit, concurrency=settings.concurrency or None
            )
        cache = _shared_cache
        raise_loaders = remote and cache not in _remote_caches
        if raise_loaders:
            _remote_caches.add(cache)
    if raise_loaders:
        _apply(cache, current_settings(names=_LIVE))
    return cache


def _tell_where_the_settings_are() -> None:
    """In a napari without plugin preferences (before 0.9), say once where the settings are.

    napari 0.5 and 0.6 show no *Plugin Preferences* page: nothing would tell a
    user that the plugin has settings at all. napari shows the warning as a
    notification. Outside napari (a script) nothing is said.
    """
    napari_settings = sys.modules.get("napari.settings")
    if napari_settings is None or hasattr(napari_settings, "get_plugin_settings"):
        return  # not inside napari, or a napari with the page (the plugin is then disabled)
    napari = sys.modules.get("napari")
    version = getattr(napari, "__version__", "")
    warnings.warn(
        f"napari {version} has no Plugin Preferences page (napari 0.9 and later have one): "
        "napari-lazy-zarr's settings (cache capacity, loaders, timeouts, decode backend, 3D "
        f"voxel budget) are read from the file {settings_path()} and from "
        "NAPARI_LAZY_ZARR_* environment variables (the user guide's 'Settings' lists them).",
        UserWarning,
        stacklevel=3,
    )


def _apply(cache: ChunkCache, settings: Settings) -> None:
    chosen = _configured.get(cache, {})
    limit = chosen.get("total_bytes_limit", settings.total_bytes_limit)
    workers = chosen.get("concurrency", settings.concurrency)
    if not workers:
        workers = default_concurrency()
        if cache in _remote_caches:
            workers = max(workers, settings.remote_concurrency)
    if cache.total_bytes_limit != limit:
        cache.total_bytes_limit = limit
    if cache.concurrency != workers:
        cache.concurrency = workers


def apply_settings() -> None:
    """Give the shared cache the capacity and loaders of `current_settings` now, and
    the open layers the 3D voxel budget when that setting changed.

    Called when napari's Preferences page changes (main thread). Only those
    settings are read here: another one napari cannot check (an *Allowed
    remotes* entry, invalid while it is being typed) is reported, naming the
    preference, when it is used. A malformed settings file changes nothing.
    """
    global _applied_voxels
    cache = _shared_cache
    if cache is None:
        return
    try:
        settings = current_settings(names=_LIVE)
    except LazyZarrError:
        return
    _apply(cache, settings)
    if settings.volume_voxels != _applied_voxels:
        _applied_voxels = settings.volume_voxels
        for viewer in list(_watched_viewers):
            for layer in viewer.layers:
                loader = loader_of(layer)
                if loader is not None:
                    loader.volume_voxels = settings.volume_voxels


def configure(
    *, total_bytes_limit: int | None = None, concurrency: int | None = None
) -> ChunkCache:
    """Set the shared cache's capacity (bytes) and loaders for this session (applied live).

    What is set here beats the settings (napari's Preferences, the
    environment, the settings file) until the process ends, and a loader count
    set here is kept when a URL is opened. The command line's
    ``--total-bytes-limit`` and ``--concurrency`` call it. To change the
    settings themselves, use napari's Preferences or the settings file.

    Raises
    ------
    ValueError
        A capacity < 0 or a loader count < 1 (`ChunkCache`).
    """
    cache = shared_cache()
    if total_bytes_limit is not None:
        cache.total_bytes_limit = total_bytes_limit
    if concurrency is not None:
        cache.concurrency = concurrency
    with _cache_lock:
        chosen = _configured.setdefault(cache, {})
        if total_bytes_limit is not None:
            chosen["total_bytes_limit"] = total_bytes_limit
        if concurrency is not None:
            chosen["concurrency"] = concurrency
    return cache


def napari_get_reader(path: PathOrPaths) -> Callable[[Any], list[LayerDataTuple]] | None:
    """The npe2 reader hook: `read_zarr` for a Zarr store or reference file, else None.

    Claims only what `read_zarr` reads: a folder with zarr metadata (whatever
    its name), a ``*.zarr.zip`` file, a kerchunk reference file or a stack file,
    an ``s3://`` or http(s) URL named ``*.zarr``, and any http(s) URL whose
    metadata document is zarr (`core.layout.looks_like_zarr`: no chunk is
    read). Anything else, e.g. a folder of TIFFs, gets None, so napari tries
    its other readers. Never raises.
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


def read_zarr(
    path: PathOrPaths, *, coordinate_system: str | tuple[str, str] | None = None
) -> list[LayerDataTuple]:
    """Read a Zarr store as napari layer data tuples backed by non-blocking lazy levels.

    `coordinate_system`: for OME-Zarr 0.6, the coordinate system to show the
    images in (a name, ``"<image path>: <name>"`` or ``(image path, name)``);
    by default a scene's first, an image's own (`describe_store`).

    Raises a `LazyZarrError` subclass naming the path and the problem for a
    store that looks like Zarr but cannot be read.
    """
    location = _single(path)
    cache = shared_cache(remote=is_remote(location))
    try:
        specs = describe_store(location, coordinate_system=coordinate_system)
    except PlateStoreError as plate_store:
        plate = _plate_layers(location, cache, plate_store)
        watch_current_viewer()
        return plate
    # napari shows images of two dimensions or more: a 1-D array beside them (the coordinate
    # array kerchunk's MultiZarrToZarr writes, a table) is not a layer.
    images = [spec for spec in specs if len(spec.levels[0].shape) >= 2]
    if not images:
        raise UnsupportedDataError(
            f"{location}: nothing napari can show: "
            + ", ".join(f"{spec.name!r} has shape {spec.levels[0].shape}" for spec in specs)
            + " (images need at least two dimensions)"
        )
    made: list[tuple[ImageSpec, LayerDataTuple]] = []
    refused: list[UnsupportedDtypeError] = []
    for spec in images:
        try:
            made.extend((spec, layer) for layer in layer_data(location, spec, cache))
        except UnsupportedDtypeError as error:  # a complex array beside the images
            refused.append(error)
    if refused and not made:
        raise refused[0]
    for skipped in refused:  # napari shows a warning as a notification
        warnings.warn(f"not shown: {skipped}", UserWarning, stacklevel=2)
    _name_apart(made)
    watch_current_viewer()
    return [layer for _, layer in made]


def _name_apart(made: list[tuple[ImageSpec, LayerDataTuple]]) -> None:
    """Give the layers of one store names that never clash (napari would add " [1]").

    A label image named as an image (both "coins") becomes "coins (labels)"; layers
    still sharing a name (two groups' images both named "image", as ome-zarr-py names
    them by default) get their group's path: "image (a)", "image (b)".
    """

    def clashing() -> set[str]:
        names = Counter(kwargs["name"] for _, (_, kwargs, _) in made)
        return {name for name, count in names.items() if count > 1}

    for _, (_, kwargs, kind) in made:
        if kind == "labels" and kwargs["name"] in clashing():
            kwargs["name"] = f"{kwargs['name']} (labels)"
    twice = clashing()
    for spec, (_, kwargs, _) in made:
        group = posixpath.dirname(spec.levels[0].path)
        if kwargs["name"] in twice and group:
            kwargs["name"] = f"{kwargs['name']} ({group})"


def _plate_layers(
    location: str, cache: ChunkCache, found: PlateStoreError
) -> list[LayerDataTuple]:
    """An HCS plate as one mosaic image (per channel): `core.plate`.

    Reads the plate's, its first well's and first field's metadata; every other
    field's array is opened by the worker that reads its first chunk.
    """
    layout = describe_plate(location, attributes=found.attributes, zarr_format=found.zarr_format)
    template = open_level_sources(f"{layout.location}/{layout.template_path}", layout.template)
    sources = plate_level_sources(layout, template, field_opener(layout))
    return layer_data(location, layout.image, cache, sources=sources)


_COARSEST_EXTENT = 4096
"""A stored pyramid's coarsest level longer than this on a spatial axis gets virtual levels."""


def layer_data(
    location: str,
    spec: ImageSpec,
    cache: ChunkCache,
    *,
    prefetch: bool = True,
    sources: list[ChunkSource] | None = None,
) -> list[LayerDataTuple]:
    """The layer data tuples of one image (one per channel if it has a channel axis).

    `sources` are the levels' chunk sources when the caller opened them (a
    plate's mosaic); by default `open_level_sources` opens `spec`'s, and a level
    padded past the finest level's box is cut to it (`clip_padded_levels`).
    """
    if sources is None:
        # Levels stored padded past the data (webknossos' shards) cut to it: napari would
        # take the padding for data, and read gigabytes of it in 3D.
        sources = _warped(clip_padded_levels(spec, open_level_sources(location, spec)), spec)
    if sources[0].dtype.kind == "c":  # open_array reads it; napari cannot display it
        path = spec.levels[0].path
        raise dtype_refusal(
            f"{location.rstrip('/')}/{path}" if path else location, sources[0].dtype
        )
    scale = spec.levels[0].scale
    translate = spec.levels[0].translate
    layer_type = "labels" if spec.kind == "labels" else "image"
    rgb = layer_type == "image" and _looks_rgb(spec)
    spatial = _spatial_axes(spec, rgb=rgb)
    if len(sources) == 1:
        # No stored pyramid: napari would read whole planes of a single-level layer.
        sources = virtual_levels(sources[0], axes=spatial)
    elif any(sources[-1].shape[a] > _COARSEST_EXTENT for a in spatial):
        # A stored pyramid whose coarsest level is still huge: napari reads that level
        # whole (the thumbnail, a zoomed-out view); virtual levels below it keep the
        # views bounded (`viewport._coarser`).
        sources = [*sources, *virtual_levels(sources[-1], axes=spatial)[1:]]
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
        if rgb:  # napari's RGB(A) layer: its scale, units ... leave out the colour axis
            keep = keep[:-1]
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
            "metadata": {"napari_lazy_zarr": {"location": location, **_system_metadata(spec)}},
        }
        kwargs.update(_placement_kwargs(spec, keep))
        units = [spec.axis_units[a] for a in keep]
        if any(units):  # an axis without a unit (time in frames) stays in pixels, as napari's
            kwargs["units"] = tuple(unit or "pixel" for unit in units)
        if layer_type == "image":
            kwargs["rgb"] = rgb  # never left to napari's guess (its axes would disagree)
            kwargs.update(_image_kwargs(spec, channel, loader))
        else:
            kwargs.update(_labels_kwargs(spec))
        data: Any = views if len(views) > 1 else views[0]
        results.append((data, kwargs, layer_type))
    return results


def _warped(sources: list[ChunkSource], spec: ImageSpec) -> list[ChunkSource]:
    """`sources`, warped lazily level by level when a field is on the way to the shown
    coordinate system (`ImageSpec.warps`): linear for images, nearest for labels."""
    if spec.warps is None:
        return sources
    from napari_lazy_zarr.core.sources.warp import WarpSource

    order = 0 if spec.kind == "labels" else 1
    return [
        WarpSource(source, warp, order=order, name=f"{spec.name} in {spec.coordinate_system}")
        for source, warp in zip(sources, spec.warps, strict=True)
    ]


def _placement_kwargs(spec: ImageSpec, keep: list[int]) -> dict[str, Any]:
    """napari's ``affine`` for an OME-Zarr 0.6 layer whose shown system is not a scale and a
    translation of its own (the rows and columns of the layer's axes)."""
    if spec.affine is None:
        return {}
    import numpy as np

    matrix = np.asarray(spec.affine)
    index = [*keep, matrix.shape[0] - 1]
    return {"affine": matrix[np.ix_(index, index)]}


def _system_metadata(spec: ImageSpec) -> dict[str, Any]:
    """The coordinate systems of an OME-Zarr 0.6 layer (for the coordinate system widget)."""
    if spec.coordinate_system is None:
        return {}
    return {
        "coordinate_system": spec.coordinate_system,
        "coordinate_systems": spec.coordinate_systems,
        "warped": spec.warps is not None,
    }


def channel_axis(spec: ImageSpec) -> int:
    """The channel axis of an image known to have one."""
    assert spec.channel_axis is not None
    return spec.channel_axis


def _spatial_axes(spec: ImageSpec, *, rgb: bool = False) -> tuple[int, ...]:
    """The axes a virtual pyramid decimates: the last two non-channel axes (before the
    colour axis of an RGB(A) image)."""
    axes = [a for a in range(len(spec.axis_names)) if a != spec.channel_axis]
    if rgb:
        axes = axes[:-1]
    return tuple(axes[-2:])


def _looks_rgb(spec: ImageSpec) -> bool:
    """Whether a plain array (no OME metadata) is RGB(A), by napari's own rule for arrays:
    more than two axes, the last of 3 or 4, the two before it longer than 30 (an RGB TIFF
    through tifffile's references: Y, X, S)."""
    shape = spec.levels[0].shape
    return (
        spec.version is None
        and spec.channel_axis is None
        and len(shape) > 2
        and shape[-1] in (3, 4)
        and all(n > 30 for n in shape[-3:-1])
    )


def _channel_name(spec: ImageSpec, channel: int | None) -> str:
    if channel is None or (
        spec.kind == "labels" and spec.levels[0].shape[channel_axis(spec)] == 1
    ):
        return spec.name
    if spec.channel_names and channel < len(spec.channel_names):
        return spec.channel_names[channel]
    return f"{spec.name} [{channel}]"


def _labels_kwargs(spec: ImageSpec) -> dict[str, Any]:
    """A label image's layer settings, as napari-ome-zarr gives them: hidden at open (the
    image is what a user looks at first; a label layer over it hides it), its
    ``image-label`` colours, and its ``properties`` as the layer's features."""
    kwargs: dict[str, Any] = {"visible": False}
    if spec.label_colors:
        kwargs["colormap"] = _label_colormap(spec.label_colors)
    if spec.label_properties:
        kwargs["features"] = label_features(spec.label_properties)
    return kwargs


def label_features(properties: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """A labels layer's features from OME ``image-label`` properties (one per label value).

    The columns napari-ome-zarr gives (``label_value`` and each property, absent
    values None), and ``index``, the label value, by which napari finds the row
    of the label under the cursor (without it napari takes row *n* for label *n*).

    Examples
    --------
    >>> label_features([{"label-value": 3, "area": 9}, {"label-value": 7, "class": "dust"}])
    {'index': [3, 7], 'label_value': [3, 7], 'area': [9, None], 'class': [None, 'dust']}
    """
    columns = dict.fromkeys(key for entry in properties for key in entry if key != "label-value")
    features: dict[str, list[Any]] = {
        "index": [entry["label-value"] for entry in properties],
        "label_value": [entry["label-value"] for entry in properties],
    }
    features.update({key: [entry.get(key) for entry in properties] for key in columns})
    return features


def _image_kwargs(spec: ImageSpec, channel: int | None, loader: LayerLoader) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    index = 0 if channel is None else channel
    if spec.contrast_limits and index < len(spec.contrast_limits):
        kwargs["contrast_limits"] = spec.contrast_limits[index]
    else:
        kwargs["contrast_limits"] = _start_contrast_sample(loader)
    if spec.channel_colors and index < len(spec.channel_colors):
        kwargs["colormap"] = _colormap(spec.channel_colors[index])
    if spec.channel_visible and index < len(spec.channel_visible):
        kwargs["visible"] = spec.channel_visible[index]
    if channel is not None:
        kwargs["blending"] = "additive"
    return kwargs


def _start_contrast_sample(loader: LayerLoader) -> tuple[float, float]:
    """Start sampling the layer's contrast limits in the background; the provisional ones.

    napari would otherwise compute them from the coarsest level through the
    non-blocking path, i.e. from placeholders. The sample is spread over the
    whole coarsest *stored* level, every axis included (a central region of
    the middle plane saturates stacks whose other planes are brighter): whole
    stored chunks, evenly spaced along each axis (`core.viewport.contrast_selection`),
    at most `_CONTRAST_CHUNKS` of them and `_CONTRAST_BYTES` decoded — the
    whole level when it fits, so a pyramid's small top level gives what napari
    computes from it. Virtual levels are skipped: each of their chunks is
    built from many stored chunks. The open waits for none of it: the layer
    opens with the dtype's range (`dtype_limits`) and takes the sampled limits
    on the main thread when the sample's chunks have landed, unless the user
    set limits meanwhile (`_apply_contrast`). Storage that does not answer
    within `_CONTRAST_TIMEOUT`, or data with no finite value, keeps the
    provisional limits.
    """
    stored = [lvl for lvl in loader.levels if not isinstance(lvl.array.source, DecimatedSource)]
    sample = ContrastSample(
        stored[-1].array,
        loader.controller.axis_map,
        max_chunks=_CONTRAST_CHUNKS,
        max_bytes=_CONTRAST_BYTES,
        max_indices=_CONTRAST_INDICES,
        timeout=_CONTRAST_TIMEOUT,
    )
    _contrast_samples[loader] = sample
    return sample.provisional


_contrast_samples: weakref.WeakKeyDictionary[LayerLoader, ContrastSample] = (
    weakref.WeakKeyDictionary()
)
"""The contrast samples of the layers opened without limits, until their layer takes them."""


def contrast_sample(loader: LayerLoader) -> ContrastSample | None:
    """The background contrast sample of a layer opened without limits (None once applied
    or when the metadata gave limits). A test and script hook: ``.future.result(timeout)``
    gives the limits the layer will take."""
    return _contrast_samples.get(loader)


def _watch_contrast(loader: LayerLoader, layer: Any) -> None:
    """Give `layer` its sampled limits when they are known (main thread; at once if known).

    Until then, the first view napari reads with chunks resident gives interim limits
    (the range of what it shows): a float layer opened with (0, 1) showed solid white
    for the ~10 s a dask graph's sample took, from its first chunks on.
    """
    sample = _contrast_samples.get(loader)
    if sample is None:
        return
    from superqt.utils import ensure_main_thread

    ref = weakref.ref(layer)
    ours = [sample.provisional]  # the limits this plugin set last (the user's beat them)
    signal = loader.controller.view_read

    @ensure_main_thread
    def first_view(frame: ViewFrame) -> None:
        alive = ref()
        if alive is None or _contrast_samples.get(loader) is not sample or sample.future.done():
            signal.disconnect(first_view)
            return
        if len(frame.missing) == len(frame.keys):
            return  # nothing resident yet: the next read may have some
        signal.disconnect(first_view)
        limits = _finite_range(frame.data)
        if limits is not None and _apply_contrast(alive, ours[-1], limits):
            ours.append(limits)

    @ensure_main_thread
    def landed(future: Any) -> None:
        signal.disconnect(first_view)  # (missing_ok: already gone)
        alive = ref()
        if alive is not None and _contrast_samples.get(loader) is sample:
            _apply_contrast(alive, ours[-1], future.result())
        _contrast_samples.pop(loader, None)

    signal.connect(first_view)
    sample.future.add_done_callback(landed)


def _finite_range(data: Any) -> tuple[float, float] | None:
    """The (min, max) of `data`'s finite values, None if it has none or one value only."""
    values = np.asarray(data)
    if values.dtype.kind == "f":
        values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    low, high = float(values.min()), float(values.max())
    return (low, high) if low < high else None


def _apply_contrast(
    layer: Any, provisional: tuple[float, float], limits: tuple[float, float]
) -> bool:
    """Set `limits` on `layer`, unless its limits are no longer `provisional` (the user,
    or a script, chose theirs: they are kept); whether they were set."""
    if tuple(float(v) for v in layer.contrast_limits) != tuple(float(v) for v in provisional):
        return False
    low, high = layer.contrast_limits_range
    if limits[0] < low or limits[1] > high:  # float data beyond the provisional (0, 1)
        layer.contrast_limits_range = (min(low, limits[0]), max(high, limits[1]))
    layer.contrast_limits = limits
    return True


def _colormap(color: str) -> Any:
    """napari's colormap for an OME channel colour (`#RRGGBB`): black to that colour.

    A colour napari has a colormap for ("#FF00FF": "magenta", "#00FF00": "green",
    "#FFFFFF": "gray") gets its name; another gets a colormap named after it,
    made and registered by napari (`ensure_colormap`, as for a colour typed in
    napari's layer controls). Black gets black to black, not napari's reversed
    gray.
    """
    from napari.utils.colormaps import Colormap, ensure_colormap

    if color.upper() == "#000000":
        return Colormap(colors=[[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]], name="#000000")
    return ensure_colormap(color).name


def _label_colormap(colors: tuple[tuple[int, tuple[int, int, int, int]], ...]) -> Any:
    """A napari labels colormap for OME ``image-label`` colours, as napari-ome-zarr makes it.

    Each listed label value gets its RGBA colour; the background (0, unless
    listed) and the values not listed are transparent.
    """
    from napari.utils.colormaps import DirectLabelColormap

    transparent = [0.0, 0.0, 0.0, 0.0]
    color_dict: dict[int | None, list[float]] = {None: transparent, 0: transparent}
    color_dict.update({value: [c / 255 for c in rgba] for value, rgba in colors})
    return DirectLabelColormap(color_dict=color_dict)


_watched_viewers: weakref.WeakSet[Any] = weakref.WeakSet()


def watch_current_viewer() -> None:
    """Attach loaders to the layers napari creates from our data in the current viewer
    (main thread; nothing without napari or a viewer)."""
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
        _watch_contrast(loader, layer)


def _on_inserted(event: Any) -> None:
    _attach(event.value)


def _on_removed(event: Any) -> None:
    loader = loader_of(event.value)
    if loader is not None and loader.layer is event.value:
        loader.detach()
