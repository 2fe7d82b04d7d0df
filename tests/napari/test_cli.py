"""The `napari-lazy-zarr PATH --screenshot FILE` command, run as a user would, under Xvfb."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.napari.conftest import write_ome_pyramid

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

QUADRANTS = {(0, 0): 1000, (0, 1): 5000, (1, 0): 9000, (1, 1): 13000}


def _quadrant_store(tmp_path: Path) -> Path:
    data = np.zeros((1024, 1024), dtype=np.uint16)
    for (qy, qx), value in QUADRANTS.items():
        data[qy * 512 : (qy + 1) * 512, qx * 512 : (qx + 1) * 512] = value
    store = tmp_path / "quadrants.ome.zarr"
    write_ome_pyramid(
        store,
        data,
        levels=2,
        chunks=(128, 128),
        axes=[{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        zarr_format=3,
        omero={
            "channels": [
                {"color": "FFFFFF", "window": {"min": 0, "max": 65535, "start": 0, "end": 14000}}
            ]
        },
    )
    return store


def _run(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **(os.environ if env is None else env),
        "NAPARI_CONFIG": str(tmp_path / "settings.yaml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "napari_lazy_zarr.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


needs_display = pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="needs a display (Xvfb)")


@needs_display
def test_screenshot_of_the_canvas_at_a_given_size(tmp_path: Path) -> None:
    import imageio.v3 as iio

    store = _quadrant_store(tmp_path)
    shot = tmp_path / "shot.png"
    result = _run(tmp_path, str(store), "--screenshot", str(shot), "--size", "800x600")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "saved" in result.stdout
    assert "800x600" in result.stdout
    image = iio.imread(shot)[..., :3].astype(int)
    assert image.shape[:2] == (600, 800)  # the canvas alone, at the size asked for
    # The image is drawn fitted in the canvas: find it, then read each quadrant's centre.
    rows, cols = np.nonzero(image.max(axis=-1) > 5)
    top, bottom, left, right = rows.min(), rows.max(), cols.min(), cols.max()
    assert bottom - top > 500  # fitted to the canvas's height, not a strip
    assert right - left > 500
    for (qy, qx), value in QUADRANTS.items():
        y = int(top + (bottom - top) * (0.25 + 0.5 * qy))
        x = int(left + (right - left) * (0.25 + 0.5 * qx))
        expected = round(value / 14000 * 255)
        assert np.abs(image[y, x] - expected).max() <= 2, ((qy, qx), image[y, x], expected)


@needs_display
def test_screenshot_of_the_whole_window_shows_the_inspector(tmp_path: Path) -> None:
    import imageio.v3 as iio

    from napari_lazy_zarr.core import ChunkState
    from napari_lazy_zarr.widgets._grid_state import STATE_COLORS

    store = _quadrant_store(tmp_path)
    shot = tmp_path / "window.png"
    result = _run(
        tmp_path, str(store), "--screenshot", str(shot), "--window", "--size", "1400x900"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    image = iio.imread(shot)[..., :3].astype(int)
    assert image.shape[:2] == (900, 1400)
    # The inspector's chunk map is docked on the right: its READY chunks are green there.
    ready = np.all(image == STATE_COLORS[ChunkState.READY], axis=-1)
    _rows, cols = np.nonzero(ready)
    assert ready.sum() > 2000
    assert cols.min() > 1400 * 0.6
    # The canvas is not squeezed: the grey image spans a wide region left of the dock.
    grey = (np.ptp(image, axis=-1) == 0) & (image[..., 0] > 40)
    grey_cols = np.nonzero(grey.any(axis=0))[0]
    assert grey_cols.max() - grey_cols.min() > 500


def test_screenshot_options_are_checked() -> None:
    from napari_lazy_zarr.cli import main, parse_size

    assert parse_size("1024x768") == (1024, 768)
    for bad in ("1024", "big", "0x10", "10x100000"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(bad)
    with pytest.raises(SystemExit) as exit_info:
        main(["store.zarr", "--window"])  # --window without --screenshot
    assert exit_info.value.code == 2


# -- bad input: one line, exit code 2, before any window ------------------------------


@pytest.fixture(scope="module")
def http_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving an empty folder (every path answers 404)."""
    import functools
    import http.server
    import threading

    folder = tmp_path_factory.mktemp("served")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: a port the OS just gave and took back."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/image.zarr"


def _bad_input(kind: str, tmp_path: Path, http_root: str) -> tuple[str, str]:
    """A location the command cannot open, and what its one line must say."""
    import tifffile

    if kind == "missing path":
        return str(tmp_path / "nowhere.zarr"), "no such file or directory"
    if kind == "folder of TIFFs":
        (tmp_path / "tiffs").mkdir()
        tifffile.imwrite(tmp_path / "tiffs" / "a.tif", np.zeros((8, 8), np.uint8))
        return str(tmp_path / "tiffs"), "no zarr metadata (zarr.json, .zarray, .zgroup)"
    if kind == "a .tif":
        tifffile.imwrite(tmp_path / "image.tif", np.zeros((8, 8), np.uint8))
        return str(tmp_path / "image.tif"), "not a zarr store"
    if kind == "URL answering 404":
        return f"{http_root}/image.zarr", "404 Not Found"
    assert kind == "refused connection"
    return _refused_url(), "Connection refused"


BAD_INPUTS = [
    "missing path",
    "folder of TIFFs",
    "a .tif",
    "URL answering 404",
    "refused connection",
]


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_code_2_before_any_window(
    tmp_path: Path, http_root: str, kind: str
) -> None:
    location, says = _bad_input(kind, tmp_path, http_root)
    # No display at all: a window napari tried to open would abort the process instead.
    environment = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = _run(tmp_path, location, env=environment | {"QT_QPA_PLATFORM": "xcb"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"napari-lazy-zarr: {location}: "), lines[0]
    assert says in lines[0]
    assert "Traceback" not in result.stderr
    # --debug shows where it came from.
    debug = _run(tmp_path, location, "--debug", env=environment)
    assert "Traceback" in debug.stderr
    assert debug.returncode != 0


def test_help_says_what_it_opens(capsys: pytest.CaptureFixture[str]) -> None:
    from napari_lazy_zarr.cli import main
    from napari_lazy_zarr.core.sample import SAMPLE_SIZE

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for opens in ("http(s)://", "s3://", ".ozx", ".zarr.zip", "kerchunk .json", ".zstack.json"):
        assert opens in text
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default: {SAMPLE_SIZE})" in text  # the image's side
    assert "nothing is written" in text  # computed as the view needs it...
    assert "sample --write PATH" in text  # ...and written by the command it names
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default: {SAMPLE_SIZE})" in text
    assert "about 360 MB" in text  # what the write takes


# -- every subcommand's parser ---------------------------------------------------------

SUBCOMMANDS = {
    "main": [],
    "demo": ["demo"],
    "sample": ["sample"],
    "engine-demo": ["engine-demo"],
}


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_subcommand_parses_its_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse builds each parser only when its command runs: --help builds it."""
    from napari_lazy_zarr.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([*SUBCOMMANDS[command], "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out
    if command == "main":
        assert "--size WxH" in out
    elif command == "demo":  # the image side and the screenshot size are distinct options
        assert "--image-size" in out
        assert "--size WxH" in out
        assert "--window" in out
    elif command == "sample":
        assert "--write PATH" in out
        assert "--image-size" in out
    else:
        assert "--image-size" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--size", "2048"],  # the image side is --image-size now; --size is WxH
        ["demo", "--image-size", "big"],
        ["demo", "--image-size", "0"],
        ["demo", "--window"],  # --window without --screenshot
        ["sample"],  # nothing to do without --write
        ["sample", "--write", "x.zarr", "--image-size", "0"],
        ["engine-demo", "--size", "2048"],
        ["engine-demo", "--image-size", "-5"],
        ["store.zarr", "--size", "huge"],
    ],
)
def test_invalid_options_are_argparse_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from napari_lazy_zarr.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


@needs_display
def test_the_demo_shows_the_sample_in_a_real_viewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's main job, as `./dev demo` runs it, on a small image: the cells show."""
    import imageio.v3 as iio

    from napari_lazy_zarr.cli import main
    from napari_lazy_zarr.core.sample import synthetic_cells

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    shot = tmp_path / "demo.png"
    code = main(["demo", "--image-size", "2048", "--screenshot", str(shot)])
    assert code == 0
    assert not (tmp_path / "xdg" / "napari-lazy-zarr").exists()  # nothing written
    image = iio.imread(shot)[..., :3].astype(int)
    assert image.shape[:2] == (768, 1024)
    # The colormap is black to #00FF88: green carries the intensity, red stays 0.
    green = image[..., 1]
    assert image[..., 0].max() <= 2
    cells = synthetic_cells(0, 0, (2048, 2048))
    background = int(cells.min())  # 100: 0 on screen (the contrast starts at 100)
    blob_share = float((cells > background).mean())
    bright = green > 40
    # The image fills the canvas's height: about its share of blobs is bright, and
    # the brightest blobs saturate.
    assert 0.3 * blob_share < bright.mean() < 1.5 * blob_share, (bright.mean(), blob_share)
    assert green.max() >= 200
    assert np.count_nonzero(green == 0) > 0.3 * green.size  # dark background around


def test_sample_write_writes_the_demos_pyramid_with_a_progress_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zarr

    from napari_lazy_zarr.cli import main
    from napari_lazy_zarr.core.formats.ome import describe_store
    from napari_lazy_zarr.core.sample import sample_image_spec, synthetic_cells

    path = tmp_path / "cells.ome.zarr"
    assert main(["sample", "--write", str(path), "--image-size", "1024"]) == 0
    out = capsys.readouterr().out
    assert f"writing {path}: 5 of 5 chunks (100%)" in out  # 2x2 + 1 chunks of 512
    assert f"wrote {path}" in out
    (spec,) = describe_store(str(path))
    assert spec == sample_image_spec(1024)
    stored = zarr.open_array(str(path / "0"), mode="r")
    np.testing.assert_array_equal(stored[:], synthetic_cells(0, 0, (1024, 1024)))
    # A folder of the user's is never overwritten.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.txt").write_text("keep")
    assert main(["sample", "--write", str(mine), "--image-size", "1024"]) == 1
    assert "not a napari-lazy-zarr sample store" in capsys.readouterr().err
    assert (mine / "data.txt").read_text() == "keep"
