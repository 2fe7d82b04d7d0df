"""How long opening an HCS plate from S3 holds napari's main thread: ours vs napari-ome-zarr.

    xvfb-run -a -s "-screen 0 1920x1080x24" ./dev run python -m bench s3-plate --quick

The plate is `tests.conformance.cases.write_plate` (ome-zarr-py, NGFF 0.4:
`Config.rows` x `Config.columns` wells, `Config.fields` fields of (2, 64, 64),
3 levels), written to a folder and uploaded to moto's S3 server on 127.0.0.1,
run in a process of its own (``python -m moto.server``: in this process its
request handling would compete for the interpreter with napari's main thread, as
no real S3 server does). Both readers find the server the standard way,
``AWS_ENDPOINT_URL`` (with dummy credentials), set before napari is imported.

Per round and reader, in one `napari.Viewer(show=True)`, alternating readers:
``viewer.open(url, plugin=reader)`` (napari calls the reader on the main thread),
then the event loop runs until the first layer's displayed slice holds pixels,
and until this plugin's loaders settle. A 10 ms `QTimer` on the main thread records
when the loop ran; reported are the time ``viewer.open`` took, the main thread's
longest stall from the open until its loads settled (the open call included), the
time until the first pixels showed, and until every load settled (napari-ome-zarr's
dask layers have no loads of their own: its pixels come within the open). The
layers are removed between rounds; s3fs's file systems (connections) are shared
by both readers and kept across rounds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import environment_line, markdown_table

if TYPE_CHECKING:
    from collections.abc import Iterator

READERS = ("napari-lazy-zarr", "napari-ome-zarr")


@dataclass(frozen=True)
class Config:
    rows: int = 3
    columns: int = 4
    fields: int = 2
    rounds: int = 3


def open_once(viewer: Any, app: Any, url: str, reader: str) -> dict[str, float]:
    import numpy as np
    from qtpy.QtCore import QTimer

    from napari_lazy_zarr._layer_data import loader_of

    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    app.processEvents()
    started = time.perf_counter()
    ticks.append(started)
    layers = viewer.open(url, plugin=reader)
    opened = time.perf_counter() - started
    viewer.window._qt_viewer.canvas.on_draw(None)
    loaders = [loader_of(layer) for layer in layers]

    def pixels() -> bool:
        return bool(np.asarray(layers[0]._slice.image.raw).any())

    def settled() -> bool:
        return pixels() and all(lo is None or lo.settled for lo in loaders)

    times = {}
    deadline = started + 120
    for name, done in (("pixels", pixels), ("settled", settled)):
        while not done():
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{reader}: the plate did not show within 120 s")
            app.processEvents()
            time.sleep(0.001)
        times[name] = time.perf_counter() - started
    ticks.append(time.perf_counter())
    timer.stop()
    stall = float(np.diff(ticks).max())
    for layer in reversed(layers):
        viewer.layers.remove(layer)
    app.processEvents()
    return {"open": opened, "stall": stall, **times}


@contextlib.contextmanager
def _moto_process() -> Iterator[str]:
    """moto's S3 server in a child process on 127.0.0.1; its endpoint URL."""
    with socket.socket() as probe:  # a free port (the server binds it right after)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def measure(config: Config) -> dict[str, list[dict[str, float]]]:
    """Serve the plate from moto and open it `config.rounds` times with each reader."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.conformance.cases import write_plate
    from tests.remote.s3server import AWS_DUMMY, aws_environment

    results: dict[str, list[dict[str, float]]] = {reader: [] for reader in READERS}
    with tempfile.TemporaryDirectory() as folder:
        aws_environment(Path(folder))
        os.environ.setdefault("NAPARI_CONFIG", os.path.join(folder, "napari.yaml"))
        with _moto_process() as endpoint:
            import s3fs

            os.environ["AWS_ENDPOINT_URL"] = endpoint
            s3 = s3fs.S3FileSystem(
                endpoint_url=endpoint,
                key=AWS_DUMMY["AWS_ACCESS_KEY_ID"],
                secret=AWS_DUMMY["AWS_SECRET_ACCESS_KEY"],
                skip_instance_cache=True,
            )
            s3.mkdir("screens")
            plate = write_plate(Path(folder), config.rows, config.columns, config.fields)
            s3.put(str(plate.path), "screens/plate.ome.zarr", recursive=True)
            url = "s3://screens/plate.ome.zarr"
            import napari
            from qtpy.QtWidgets import QApplication

            from napari_lazy_zarr._reader import watch_viewer

            viewer = napari.Viewer(show=True)
            viewer.window.resize(900, 700)
            watch_viewer(viewer)
            app = QApplication.instance()
            for round_ in range(config.rounds):
                order = READERS if round_ % 2 == 0 else READERS[::-1]
                for reader in order:
                    results[reader].append(open_once(viewer, app, url, reader))
                    print(reader, results[reader][-1], flush=True)
            viewer.close()
    return results


COLUMNS = {
    "open": "viewer.open",
    "stall": "longest main-thread stall",
    "pixels": "first pixels",
    "settled": "all loads settled",
}


def median_cell(runs: list[dict[str, float]], key: str) -> str:
    """The median of `key` over `runs` in ms, each run's value in brackets."""
    values = [r[key] * 1e3 for r in runs]
    every = ", ".join(f"{v:.0f}" for v in values)
    return f"{statistics.median(values):.0f} ms ({every})"


def report(config: Config, results: dict[str, list[dict[str, float]]]) -> str:
    def cell(reader: str, key: str) -> str:
        return median_cell(results[reader], key)

    rows = [[reader, *(cell(reader, key) for key in COLUMNS)] for reader in READERS]
    header = ["reader", *COLUMNS.values()]
    return (
        f"## HCS plate from S3 (moto)\n\n{environment_line(['napari', 'napari-ome-zarr'])}\n\n"
        f"A {config.rows}x{config.columns}-well plate, {config.fields} fields per well, "
        f"from moto (its own process) on 127.0.0.1; median of {config.rounds} (each "
        f"round's value in brackets); load average {os.getloadavg()[0]:.1f} at the end.\n\n"
        + markdown_table(header, rows)
    )


def run(quick: bool = False) -> str:
    config = Config(rounds=1) if quick else Config()
    return report(config, measure(config))


if __name__ == "__main__":
    print(run())
