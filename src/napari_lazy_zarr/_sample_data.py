"""napari sample data: the synthetic cells OME-Zarr pyramid, shown at once, stored once.

The first time (no complete store in the user cache directory) the sample is
served at once from its generator: each level is a `FunctionSource` over
`synthetic_cells`, read like any store through the plugin's chunk cache, so
its chunks are computed by the cache's workers, never on napari's main thread.
Meanwhile the same pyramid is written in a background thread (napari's
activity dock shows its progress) and renamed into place when complete; the
layer keeps reading the generator (the same pixels), and the next open reads
the store.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from napari_lazy_zarr.core.sample import (
    SAMPLE_SIZE,
    SampleWrite,
    default_cache_dir,
    is_complete,
    sample_image_spec,
    sample_level_sources,
    sample_write,
)

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["SAMPLE_SIZE", "sample_layers", "sample_location", "sample_path", "sample_pyramid"]

LayerDataTuple = tuple[Any, dict[str, Any], str]


def sample_location(size: int = SAMPLE_SIZE, directory: Path | None = None) -> Path:
    """Where the sample pyramid of `size`² is kept (it may not be written yet)."""
    directory = default_cache_dir() if directory is None else directory
    return directory / f"cells-{size}.ome.zarr"


def sample_path(size: int = SAMPLE_SIZE, directory: Path | None = None) -> Path:
    """The complete sample OME-Zarr pyramid of `size`², written first if need be (blocking).

    For scripts: about a minute and 360 MB for 32768² on 2 cores, into the
    user cache directory, reused afterwards. A write of it already running in
    this process (an open sample's) is waited for instead of started again.
    """
    path = sample_location(size, directory)
    while not is_complete(path):
        write, new = sample_write(path, size)
        if new:
            print(f"napari-lazy-zarr: generating {path} (once; later runs reuse it) ...")
            write.run()
        else:
            write.wait()
        if write.error is not None and not is_complete(path):
            raise write.error
    return path


def sample_layers(size: int = SAMPLE_SIZE, directory: Path | None = None) -> list[LayerDataTuple]:
    """The sample pyramid as lazy, non-blocking layer data; returns at once.

    The stored pyramid when it is complete; otherwise the same image computed
    on demand while a background thread writes the store (one per path and
    process: a second call while it runs shares it), with a napari progress
    bar when called on the main thread of a running Qt application.
    """
    from napari_lazy_zarr._reader import layer_data, read_zarr, shared_cache

    path = sample_location(size, directory)
    if is_complete(path):
        return read_zarr(str(path))
    cache = shared_cache()

    def viewer_loading() -> bool:  # the views' chunks (the generator's too) go first
        counters = cache.counters(wait=False)
        return counters is None or counters.queued + counters.in_flight > 0

    write, new = sample_write(path, size, yield_to=viewer_loading)
    if new:
        _show_progress(write)
        write.start()
    return layer_data(
        str(path), sample_image_spec(size), cache, sources=list(sample_level_sources(size))
    )


def sample_pyramid() -> list[LayerDataTuple]:
    """The npe2 sample-data command: the 32768² pyramid, shown at once (`sample_layers`)."""
    layers = sample_layers(SAMPLE_SIZE)
    _watch_current_viewer()
    return layers


def _watch_current_viewer() -> None:
    """Refresh the layers napari makes of the data as chunks land (as the reader does)."""
    import napari

    from napari_lazy_zarr._reader import watch_viewer

    viewer = napari.current_viewer()
    if viewer is not None:
        watch_viewer(viewer)


def _show_progress(write: SampleWrite) -> None:
    """A napari progress bar for `write`, updated on the main thread (napari's is not
    thread-safe: its bar is a Qt widget updated from the progress object's events)."""
    from qtpy.QtCore import QCoreApplication

    app = QCoreApplication.instance()
    if app is None or threading.current_thread() is not threading.main_thread():
        return
    from napari.utils import progress
    from psygnal.qt import start_emitting_from_queue

    start_emitting_from_queue(msec=10)
    bars: list[progress] = []

    def progressed(written: int, _total: int) -> None:
        if not bars:  # made at the first report, not in the open: napari's first bar
            # shows its activity dialog and repaints the window (100-500 ms measured)
            bars.append(progress(total=write.total, desc=f"napari-lazy-zarr: {write.path.name}"))
        bars[0].update(written - bars[0].n)

    def finished(error: BaseException | None) -> None:
        write.progressed.disconnect(progressed)
        write.finished.disconnect(finished)
        for bar in bars:
            bar.close()
        if error is not None and not isinstance(error, InterruptedError):
            from napari.utils.notifications import show_warning

            show_warning(
                f"napari-lazy-zarr: the sample could not be stored at {write.path}: {error!r}. "
                "It is still shown, computed as you view it; the next open tries again."
            )

    # Plain functions: psygnal holds them strongly (a queued emission finds them).
    write.progressed.connect(progressed, thread="main")
    write.finished.connect(finished, thread="main")
