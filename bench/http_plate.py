"""How long opening a 96-well HCS plate over slow HTTP holds napari's main thread.

    xvfb-run -a -s "-screen 0 1920x1080x24" ./dev run python -m bench http-plate [--quick]

The plate is `tests.conformance.cases.write_plate` (ome-zarr-py, NGFF 0.4: 8 x 12
wells, one field of (2, 64, 64) per well, 3 levels), served by the test server
(`tests.remote.server.FaultyServer`) with `Config.latency` added to every request,
run in a process of its own (in this process its request handling would compete
for the interpreter with napari's main thread, as no real server does). Both
readers get the same ``http://127.0.0.1:PORT/plate.ome.zarr`` URL.

Per round and reader, in one `napari.Viewer(show=True)`, alternating readers (as
`bench.s3_plate` does, whose `open_once` measures): ``viewer.open(url,
plugin=reader)``, then the event loop runs until the first layer's displayed slice
holds pixels, and until this plugin's loaders settle. Reported: the time
``viewer.open`` took, the main thread's longest stall from the open until its loads
settled (the open call included), the time until the first pixels showed, and
until every load settled, and the requests the server answered per open. Then
the same for the view benchmark's 16384² OME-Zarr pyramid served with
`Config.pyramid_latency` (200 ms) per request. A full run (3 rounds) takes
about 4 minutes; ``--quick`` one round.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import environment_line, markdown_table

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

READERS = ("napari-lazy-zarr", "napari-ome-zarr")
_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Config:
    rows: int = 8
    columns: int = 12
    fields: int = 1
    latency: float = 0.100
    rounds: int = 3
    pyramid_latency: float = 0.200
    """The OME-Zarr pyramid's opens (issue 24: "open over 200 ms HTTP <= 1.5 s")."""


def _serve_forever(root: str, latency: float) -> None:
    """The child process: serve `root` with `latency`; print the URL; count on request."""
    sys.path.insert(0, str(_ROOT))
    from tests.remote.server import Faults, FaultyServer

    from bench.remote import BACKLOG

    server = FaultyServer(Path(root), Faults(latency=latency))
    server._server.socket.listen(BACKLOG)
    with server:
        print(server.url, flush=True)
        for line in sys.stdin:  # one line per question: the requests answered so far
            if not line.strip():
                break
            with server.faults.lock:
                total = sum(server.faults.requests.values())
            print(total, flush=True)


@contextlib.contextmanager
def _server_process(root: Path, latency: float) -> Iterator[tuple[str, Any]]:
    """The server in a child process; its URL and a function returning its request count."""
    command = [sys.executable, "-m", "bench.http_plate", "--serve", str(root), str(latency)]
    server = subprocess.Popen(
        command,
        cwd=_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    stdin, stdout = server.stdin, server.stdout

    def requests() -> int:
        stdin.write("count\n")
        stdin.flush()
        return int(stdout.readline())

    try:
        url = stdout.readline().strip()
        if not url:
            raise RuntimeError("the plate server did not start")
        yield url, requests
    finally:
        with contextlib.suppress(BrokenPipeError):
            stdin.close()
        server.wait(timeout=30)


def measure(config: Config) -> dict[str, list[dict[str, float]]]:
    """Serve the plate and open it `config.rounds` times with each reader."""
    sys.path.insert(0, str(_ROOT))
    from tests.conformance.cases import write_plate

    results: dict[str, list[dict[str, float]]] = {reader: [] for reader in READERS}
    with tempfile.TemporaryDirectory() as folder:
        os.environ.setdefault("NAPARI_CONFIG", os.path.join(folder, "napari.yaml"))
        plate = write_plate(Path(folder), config.rows, config.columns, config.fields)
        with _server_process(plate.path.parent, config.latency) as (base, requests):
            url = f"{base}/{plate.path.name}"
            import napari
            from qtpy.QtWidgets import QApplication

            from napari_lazy_zarr._reader import watch_viewer

            viewer = napari.Viewer(show=True)
            viewer.window.resize(900, 700)
            watch_viewer(viewer)
            app = QApplication.instance()
            _open_rounds(viewer, app, url, requests, config.rounds, results, "")
            with _server_process(_pyramid_root(), config.pyramid_latency) as (base, requests):
                url = f"{base}/{_PYRAMID}"
                _open_rounds(viewer, app, url, requests, config.rounds, results, "pyramid: ")
            viewer.close()
    return results


def _open_rounds(
    viewer: Any,
    app: Any,
    url: str,
    requests: Callable[[], int],
    rounds: int,
    results: dict[str, list[dict[str, float]]],
    prefix: str,
) -> None:
    """Open `url` `rounds` times with each reader, alternating their order; into `results`
    under ``prefix + reader``, with the requests the server answered per open."""
    from bench.s3_plate import open_once

    for round_ in range(rounds):
        for reader in READERS if round_ % 2 == 0 else READERS[::-1]:
            before = requests()
            result = open_once(viewer, app, url, reader)
            result["requests"] = requests() - before
            results.setdefault(prefix + reader, []).append(result)
            print(prefix + reader, result, flush=True)


_PYRAMID = "cells.ome.zarr"


def _pyramid_root() -> Path:
    """The view benchmark's 16384² uint16 OME-Zarr 0.5 pyramid (written once, reused)."""
    from bench import view_cycle

    view_cycle.ensure_pyramid(view_cycle.FULL)
    return view_cycle.data_root(view_cycle.FULL)


def report(config: Config, results: dict[str, list[dict[str, float]]]) -> str:
    from bench.s3_plate import COLUMNS, median_cell

    def cell(reader: str, key: str) -> str:
        return median_cell(results[reader], key)

    def requests(reader: str) -> str:
        return f"{statistics.median(r['requests'] for r in results[reader]):.0f}"

    rows = [
        [reader, *(cell(reader, key) for key in COLUMNS), requests(reader)] for reader in READERS
    ]
    header = ["reader", *COLUMNS.values(), "requests"]
    pyramid = [
        [
            reader,
            *(cell(f"pyramid: {reader}", key) for key in COLUMNS),
            requests(f"pyramid: {reader}"),
        ]
        for reader in READERS
    ]
    wells = config.rows * config.columns
    return (
        f"## HCS plate over HTTP ({config.latency * 1e3:.0f} ms per request)\n\n"
        f"{environment_line(['napari', 'napari-ome-zarr'])}\n\n"
        f"A {wells}-well plate ({config.rows}x{config.columns}), {config.fields} field(s) "
        f"of (2, 64, 64) per well, from the test server (its own process) on 127.0.0.1 "
        f"adding {config.latency * 1e3:.0f} ms to every request; median of {config.rounds} "
        f"(each round's value in brackets); load average {os.getloadavg()[0]:.1f} at the "
        "end.\n\n"
        + markdown_table(header, rows)
        + f"\n\nThe same readers opening the view benchmark's 16384² uint16 OME-Zarr 0.5 "
        f"pyramid (`bench.view_cycle`, 512² chunks) from the same server adding "
        f"{config.pyramid_latency * 1e3:.0f} ms to every request, in the same viewer after "
        "the plate:\n\n" + markdown_table(header, pyramid)
    )


def run(quick: bool = False) -> str:
    config = Config(rounds=1) if quick else Config()
    return report(config, measure(config))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve_forever(sys.argv[2], float(sys.argv[3]))
    else:
        print(run())
