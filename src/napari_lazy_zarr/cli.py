"""The `napari-lazy-zarr` command.

- `napari-lazy-zarr PATH_OR_URL` opens a store in napari with the plugin's reader and
  docks the chunk inspector. `--screenshot FILE` waits for the view to complete, saves
  the canvas at `--size WxH` (default 1024x768; no inspector beside it) — or with
  `--window` the whole window, inspector included (default 1600x1000) — and exits.
- `napari-lazy-zarr demo` opens the synthetic OME-Zarr pyramid (`--image-size N`
  a side, default 32768) at once, computed chunk by chunk as the view needs it
  (nothing is written). It takes the main command's viewer options
  (`--screenshot`, `--size`, `--window`).
- `napari-lazy-zarr sample --write PATH` writes that pyramid as an OME-Zarr store
  at PATH (`--image-size N`), in the foreground, with a progress line.
- `napari-lazy-zarr engine-demo` reads a generated store (`--image-size N`)
  through the chunk engine alone (no napari) and prints what it read and the
  cache statistics.

A store that cannot be opened (a missing path, a folder or file that is not zarr, a URL
answering 404, a server refusing the connection...) ends the command before any window
opens: one line naming the path and the cause, exit code 2 (`EXIT_BAD_INPUT`);
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from napari_lazy_zarr.core import ChunkedArray, LazyZarrError, NotAZarrStoreError, open_array
from napari_lazy_zarr.core.sample import (
    SAMPLE_SIZE,
    default_cache_dir,
    synthetic_region,
    write_sample_store,
)
from napari_lazy_zarr.core.sources._zarr_compat import settle_reads

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from napari_lazy_zarr.core import CacheStatistics

EXIT_BAD_INPUT: Final = 2
"""The exit code of a command given input it cannot open (argparse's for a bad option)."""
_SETTLE_SECONDS: Final = 5.0  # the most a failed open's sibling reads are waited for

WHAT_IT_OPENS: Final = (
    "a Zarr store (Zarr v2 or v3, OME-Zarr 0.1 to 0.6, an HCS plate, SpatialData): a local "
    "folder, an http(s)://, s3://, gs:// or az:// URL, a zipped store (.ozx, .zarr.zip), or a "
    "reference file (kerchunk .json, .zstack.json)"
)


def _sample_store(directory: Path, size: int) -> Path:
    path = directory / f"demo-{size}x{size}-v3-zstd.zarr"
    marker = path / ".complete"
    if not marker.exists():
        print(f"generating {path} (once; later runs reuse it) ...", flush=True)
        start = time.perf_counter()
        write_sample_store(path, shape=(size, size), chunks=(512, 512))
        marker.touch()
        print(f"  done in {time.perf_counter() - start:.1f} s", flush=True)
    return path


def _format_statistics(stats: CacheStatistics) -> str:
    mib = 1 << 20
    return "\n".join(
        [
            f"  hits {stats.hits}, misses {stats.misses} (hit rate {stats.hit_rate:.0%})",
            f"  loads {stats.loads}, failures {stats.failures}, evictions {stats.evictions}",
            f"  resident {stats.resident_bytes / mib:.1f} MiB of "
            f"{stats.total_bytes_limit / mib:.0f} MiB, pinned {stats.pinned_bytes / mib:.1f} MiB, "
            f"shard indexes {stats.kept_bytes / mib:.1f} MiB",
            f"  load latency mean {stats.load_latency_mean * 1e3:.2f} ms, "
            f"p95 {stats.load_latency_p95 * 1e3:.2f} ms",
            "  chunk states: "
            + ", ".join(f"{state.name} {count}" for state, count in stats.states.items()),
        ]
    )


def demo(directory: Path, size: int, total_bytes_limit: int, concurrency: int | None) -> int:
    """Read a few views of the sample store; returns 1 if any pixel differs from the generator."""
    path = _sample_store(directory, size)
    image = open_array(path, total_bytes_limit=total_bytes_limit, concurrency=concurrency)
    print(f"opened {path}")
    print(f"  shape {image.shape}, dtype {image.dtype}, chunks {image.chunks}")
    window = min(2048, size // 2)
    wrong = 0

    def check(view: ChunkedArray, data: np.ndarray, y: int, x: int) -> str:
        nonlocal wrong
        if np.array_equal(data, synthetic_region(y, x, data.shape)):
            return "pixels match the generator"
        wrong += 1
        return "WRONG PIXELS"

    try:
        # Two overlapping views (the second reuses cached chunks), then a distant one.
        for y, x in [(size // 8, size // 4), (size // 8 + 256, size // 4), (size // 2, 100)]:
            start = time.perf_counter()
            view = image[y : y + window, x : x + window]
            data = view.result(timeout=60)
            elapsed = (time.perf_counter() - start) * 1e3
            print(
                f"read [{y}:{y + window}, {x}:{x + window}] blocking in {elapsed:.1f} ms: "
                f"{len(view.chunk_refs())} chunks, mean {data.mean():.0f}, "
                f"{check(view, data, y, x)}"
            )
        y = x = size - window - 100
        view = image[y : y + window // 2, x : x + window // 2]
        start = time.perf_counter()
        partial = view.read_nonblocking()
        elapsed = (time.perf_counter() - start) * 1e3
        print(
            f"read [{y}:{y + window // 2}, {x}:{x + window // 2}] non-blocking: returned in "
            f"{elapsed:.2f} ms with {len(partial.missing)} of {len(view.chunk_refs())} "
            "chunks missing (shown as the fill value)"
        )
        partial.request.done.result(timeout=60)
        again = view.read_nonblocking()
        print(
            f"  view complete after {(time.perf_counter() - start) * 1e3:.1f} ms: "
            f"{check(view, again.data, y, x)}"
        )
        again.request.release()
        print("cache statistics:")
        print(_format_statistics(image.cache.statistics))
    finally:
        image.cache.close()
    return 1 if wrong else 0


def write_sample_command(path: Path, size: int) -> int:
    """`napari-lazy-zarr sample --write PATH`: the sample pyramid written at `path`, with a
    progress line; 1 (and why, on stderr) when `path` is taken."""
    from napari_lazy_zarr._sample_data import write_sample

    start = time.perf_counter()
    shown = [-1]

    def progress(written: int, total: int) -> None:
        percent = 100 * written // total
        if percent != shown[0]:  # a hundred updates at most
            shown[0] = percent
            print(
                f"\rwriting {path}: {written:,} of {total:,} chunks ({percent}%)",
                end="",
                flush=True,
            )

    try:
        write_sample(path, size, progress=progress)
    except FileExistsError as error:
        print(f"napari-lazy-zarr: {error}", file=sys.stderr)
        return 1
    print(f"\nwrote {path} in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


DEFAULT_CANVAS: Final = (1024, 768)
"""The size (width, height) of a canvas screenshot."""
DEFAULT_WINDOW: Final = (1600, 1000)
"""The size (width, height) of the window, for `--window` screenshots and by default."""


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` as (width, height).

    Examples
    --------
    >>> parse_size("640x480")
    (640, 480)
    """
    width, sep, height = text.lower().partition("x")
    try:
        size = (int(width), int(height))
    except ValueError:
        size = (0, 0)
    if not sep or not (16 <= size[0] <= 16384 and 16 <= size[1] <= 16384):
        raise argparse.ArgumentTypeError(f"{text!r}: expected WIDTHxHEIGHT, e.g. 1024x768")
    return size


def _fit_canvas(viewer: Any, width: int, height: int) -> bool:
    """Resize the window until napari's canvas is `width` x `height` (False if it cannot be).

    The window, not the canvas, is resized, so napari slices (and the plugin loads)
    exactly the region the screenshot shows.
    """
    from napari.qt import get_qapp

    app = get_qapp()
    for _ in range(6):
        app.processEvents()
        canvas_h, canvas_w = viewer.canvas.size
        if (canvas_w, canvas_h) == (width, height):
            return True
        _, _, window_w, window_h = viewer.window.geometry()
        viewer.window.resize(window_w + width - canvas_w, window_h + height - canvas_h)
    canvas_h, canvas_w = viewer.canvas.size
    return (canvas_w, canvas_h) == (width, height)


def view(
    location: str,
    *,
    layers: Callable[[], list[tuple[Any, dict[str, Any], str]]] | None = None,
    screenshot: Path | None,
    size: tuple[int, int] | None = None,
    window: bool = False,
    total_bytes_limit: int | None,
    concurrency: int | None,
    prefetch: bool,
    timeout: float,
) -> int:
    """Open `location` in napari with the plugin's reader; optionally screenshot and exit.

    `layers`, when given, makes the layer data instead of the reader (the demo:
    `_sample_data.sample_layers`); `location` then only titles the window.
    A screenshot is of the canvas at `size` (the inspector is not docked, so it
    does not squeeze the canvas), or with `window` of the whole window at `size`,
    the chunk inspector docked beside the canvas.

    The store is described (its metadata read, no chunk) before the window
    opens: what cannot be opened raises its `LazyZarrError` before napari starts.
    """
    from napari_lazy_zarr._reader import configure, read_zarr

    configure(total_bytes_limit=total_bytes_limit, concurrency=concurrency)
    data = read_zarr(location) if layers is None else None

    import napari

    from napari_lazy_zarr._layer_data import loader_of, wait_until_complete
    from napari_lazy_zarr._reader import watch_viewer

    viewer = napari.Viewer(show=True, title=f"napari-lazy-zarr: {location}")
    watch_viewer(viewer)
    canvas_only = screenshot is not None and not window
    width, height = size or (DEFAULT_CANVAS if canvas_only else DEFAULT_WINDOW)
    if not canvas_only:
        viewer.window.resize(width, height)
        viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    if data is None:  # the demo's layers, made once the window is up
        assert layers is not None
        data = layers()
    added = [getattr(viewer, f"add_{kind}")(levels, **kwargs) for levels, kwargs, kind in data]
    for layer in added:
        loader = loader_of(layer)
        if loader is not None:
            loader.prefetch = prefetch
    if screenshot is None:
        napari.run()
        return 0
    fitted = True
    for _ in range(3):  # the layer controls take their width once a layer is shown
        if canvas_only:
            fitted = _fit_canvas(viewer, width, height)
        viewer.reset_view()
        complete = wait_until_complete(viewer, timeout)
        if not canvas_only or tuple(viewer.canvas.size) == (height, width):
            break
    if window:
        _let_widgets_refresh()
    image = viewer.screenshot(str(screenshot), canvas_only=canvas_only, flash=False)
    viewer.close()
    if not complete:
        print(f"napari-lazy-zarr: the view was not complete after {timeout} s", file=sys.stderr)
        return 1
    if canvas_only and not fitted:
        print(
            f"napari-lazy-zarr: the canvas could not be made {width}x{height} (the screen is "
            f"too small?); saved {image.shape[1]}x{image.shape[0]}",
            file=sys.stderr,
        )
    print(f"napari-lazy-zarr: saved {screenshot} ({image.shape[1]}x{image.shape[0]})")
    return 0


def _let_widgets_refresh() -> None:
    """Run the event loop for two refreshes of the inspector (it refreshes at 10 Hz)."""
    from napari.qt import get_qapp

    from napari_lazy_zarr.widgets._inspector import REFRESH_MS

    app = get_qapp()
    deadline = time.monotonic() + 2.5 * REFRESH_MS / 1000
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--total-bytes-limit", type=int, default=None, help="chunk cache capacity in bytes"
    )
    parser.add_argument("--concurrency", type=int, default=None, help="chunk loader threads")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, show the traceback instead of one line",
    )


def _viewer_options(parser: argparse.ArgumentParser) -> None:
    _common_options(parser)
    parser.add_argument(
        "--screenshot",
        type=Path,
        default=None,
        help="wait until the view is complete, save a screenshot of the canvas, and exit",
    )
    parser.add_argument(
        "--size",
        type=parse_size,
        default=None,
        metavar="WxH",
        help="the screenshot's size in pixels: the canvas's (default 1024x768), or with "
        "--window the whole window's (default 1600x1000); without --screenshot, the window's",
    )
    parser.add_argument(
        "--window",
        action="store_true",
        help="screenshot the whole window, chunk inspector included, not just the canvas",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="for --screenshot (s)")
    parser.add_argument(
        "--no-prefetch", dest="prefetch", action="store_false", help="do not prefetch neighbours"
    )


def _check_viewer_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.window and args.screenshot is None:
        parser.error("--window needs --screenshot")
    if getattr(args, "image_size", 1) < 1:
        parser.error(f"--image-size must be at least 1, got {args.image_size}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit code (`EXIT_BAD_INPUT` for input it cannot open)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(args_list)
    except (LazyZarrError, OSError) as error:
        if "--debug" in args_list:
            raise
        # The failed open's sibling reads (zarr reads metadata documents at once) end
        # first: exiting under them, asyncio would print their failures after our line.
        settle_reads(_SETTLE_SECONDS)
        print(f"napari-lazy-zarr: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _one_line(error: BaseException) -> str:
    """`error` as one line a person reads, with what to do where it helps."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, NotAZarrStoreError) and "://" not in text.split(" ", 1)[0]:
        text += (
            " (napari-lazy-zarr opens Zarr stores, zipped stores and reference files: see "
            "napari-lazy-zarr --help; other images open in napari itself: napari PATH)"
        )
    elif not isinstance(error, LazyZarrError):  # the OS's (a screenshot that cannot be saved)
        text = f"{type(error).__name__}: {text}"
    return text


def _run(args_list: list[str]) -> int:
    command = args_list[0] if args_list else ""
    description = "View Zarr arrays far larger than memory in napari, lazily, without blocking."
    if command == "demo":
        parser = argparse.ArgumentParser(
            prog="napari-lazy-zarr demo",
            description="Open the synthetic OME-Zarr pyramid in napari, at once: its chunks "
            "are computed as the view needs them (nothing is written; 'napari-lazy-zarr "
            "sample --write PATH' writes it).",
        )
        parser.add_argument(
            "--image-size",
            type=int,
            default=SAMPLE_SIZE,
            help="side of the image in pixels (default: %(default)s)",
        )
        _viewer_options(parser)
        args = parser.parse_args(args_list[1:])
        _check_viewer_options(parser, args)
        from napari_lazy_zarr._sample_data import sample_layers, sample_title

        return view(
            sample_title(args.image_size),
            layers=lambda: sample_layers(args.image_size),
            screenshot=args.screenshot,
            size=args.size,
            window=args.window,
            total_bytes_limit=args.total_bytes_limit,
            concurrency=args.concurrency,
            prefetch=args.prefetch,
            timeout=args.timeout,
        )
    if command == "sample":
        parser = argparse.ArgumentParser(
            prog="napari-lazy-zarr sample",
            description="Write the demo's synthetic pyramid as an OME-Zarr 0.5 store "
            "(32768²: about 360 MB and a minute on 2 cores).",
        )
        parser.add_argument(
            "--write",
            type=Path,
            required=True,
            metavar="PATH",
            help="the store to write: a new folder (e.g. cells.ome.zarr)",
        )
        parser.add_argument(
            "--image-size",
            type=int,
            default=SAMPLE_SIZE,
            help="side of the image in pixels (default: %(default)s)",
        )
        args = parser.parse_args(args_list[1:])
        if args.image_size < 1:
            parser.error(f"--image-size must be at least 1, got {args.image_size}")
        return write_sample_command(args.write, args.image_size)
    if command == "engine-demo":
        parser = argparse.ArgumentParser(
            prog="napari-lazy-zarr engine-demo",
            description="Read a generated store through the chunk engine, without napari.",
        )
        parser.add_argument(
            "--directory", type=Path, default=default_cache_dir(), help="where it is kept"
        )
        parser.add_argument(
            "--image-size",
            type=int,
            default=8192,
            help="side of the image in pixels (default: %(default)s)",
        )
        _common_options(parser)
        args = parser.parse_args(args_list[1:])
        if args.image_size < 1:
            parser.error(f"--image-size must be at least 1, got {args.image_size}")
        return demo(
            args.directory, args.image_size, args.total_bytes_limit or 256 << 20, args.concurrency
        )
    parser = argparse.ArgumentParser(
        prog="napari-lazy-zarr",
        description=description,
        epilog="Also: 'napari-lazy-zarr demo' (the sample pyramid in napari), "
        "'napari-lazy-zarr sample --write PATH' (the same pyramid written to disk) and "
        "'napari-lazy-zarr engine-demo' (the chunk engine alone, no napari).",
    )
    parser.add_argument("location", help=f"what to open: {WHAT_IT_OPENS}")
    _viewer_options(parser)
    args = parser.parse_args(args_list)
    _check_viewer_options(parser, args)
    return view(
        args.location,
        screenshot=args.screenshot,
        size=args.size,
        window=args.window,
        total_bytes_limit=args.total_bytes_limit,
        concurrency=args.concurrency,
        prefetch=args.prefetch,
        timeout=args.timeout,
    )


if __name__ == "__main__":
    sys.exit(main())
