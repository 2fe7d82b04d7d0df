"""Rewrite docs/compatibility.md: the conformance corpus opened by three napari readers.

    ./dev run python docs/compatibility.py     (starts Xvfb itself when there is no display)

Every case of `tests/conformance/cases.py` (the same writers the tests use) is
written by its third-party writer into a temporary folder, then opened in one
real napari viewer with this plugin, napari-ome-zarr and napari's built-in
reader (`tests/conformance/check.py`, as in tests/napari/test_conformance.py).
The remote cases of `tests/conformance/cases_remote.py` (S3 on moto, HTTPS with a
private CA, every reader configured through the environment) follow in their own
table. ``--remote-only`` opens only those and prints them (docs/compatibility.md is
left alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "compatibility.md"
LABELS = {
    "napari-lazy-zarr": "this plugin",
    "napari-ome-zarr": "napari-ome-zarr",
    "napari": "napari built-in",
}


def _cell(outcome: Any) -> str:
    if not outcome.opened:
        error = outcome.error
        if "refused the file" in error or "not a compatible reader" in error:
            return "declined"
        if "returned no data" in error:
            return "no layers"
        return f"✗ error: `{error.split(':')[0]}`"
    layers = f"{outcome.layers}/{outcome.expected_layers} layers"
    if outcome.ok:
        return f"✓ {layers}"
    if outcome.layers != outcome.expected_layers:
        return f"✗ {layers}"
    return f"✗ {layers}, pixels differ"


def _row(case: Any, outcomes: dict[str, Any]) -> str:
    from tests.conformance.check import READERS, structure_differences

    ours, reference = outcomes["napari-lazy-zarr"], outcomes["napari-ome-zarr"]
    same = "—"
    if ours.opened and reference.opened:
        differences = structure_differences(ours, reference)
        same = "same" if not differences else "; ".join(differences)
    cells = " | ".join(_cell(outcomes[reader]) for reader in READERS)
    print(case.id, cells, flush=True)
    return f"| {case.group} | {case.name} | {cells} | {same} |"


def main() -> int:
    if not os.environ.get("DISPLAY") and shutil.which("xvfb-run"):
        command = ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", sys.executable, *sys.argv]
        return subprocess.call(command)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("NAPARI_CONFIG", os.path.join(tempfile.mkdtemp(), "settings.yaml"))
    from tests.conformance.cases_remote import REMOTE_CASES, RemoteServers

    # The servers (and the environment every reader is configured with) before napari
    # and aiohttp are imported: aiohttp reads SSL_CERT_FILE once.
    with tempfile.TemporaryDirectory() as remote, RemoteServers(Path(remote)) as servers:
        return _compare(servers, REMOTE_CASES, remote_only="--remote-only" in sys.argv)


def _compare(servers: Any, remote_cases: Any, *, remote_only: bool) -> int:
    import napari
    from qtpy.QtWidgets import QApplication
    from tests.conformance.cases import CASES
    from tests.conformance.cases_ome_versions import LegacyWriterUnavailable
    from tests.conformance.check import READERS, open_case

    def wait(predicate: Any, timeout: int = 30_000) -> None:
        deadline = time.monotonic() + timeout / 1000
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("layers did not settle")
            QApplication.processEvents()
            time.sleep(0.005)

    viewer = napari.Viewer(show=True)
    rows, details = [], []
    totals = {reader: [0, 0] for reader in READERS}  # opens, correct
    remote_rows: list[str] = []
    remote_totals = {reader: [0, 0] for reader in READERS}
    with tempfile.TemporaryDirectory() as folder:
        local_cases = () if remote_only else CASES
        for number, case in enumerate((*local_cases, *remote_cases)):
            remote = number >= len(local_cases)
            if remote:
                written = case.write(servers)
            else:
                (Path(folder) / str(number)).mkdir()
                try:
                    written = case.write(Path(folder) / str(number))
                except LegacyWriterUnavailable as unavailable:
                    print(f"{case.id}: skipped: {unavailable}")
                    continue
            outcomes = {reader: open_case(viewer, written, reader, wait) for reader in READERS}
            for reader, outcome in outcomes.items():
                counts = remote_totals if remote else totals
                counts[reader][0] += outcome.opened
                counts[reader][1] += outcome.ok
                if outcome.opened and not outcome.ok and reader == "napari-lazy-zarr":
                    details.append(f"- {case.id}: {'; '.join(outcome.problems)}")
                if not outcome.opened and reader == "napari-lazy-zarr":
                    details.append(f"- {case.id}: {outcome.error}")
                if remote and not outcome.ok:
                    print(f"  {reader}: {outcome.error or '; '.join(outcome.problems)}")
            (remote_rows if remote else rows).append(_row(case, outcomes))
    viewer.close()
    remote_count = len(remote_cases)
    remote_total = " · ".join(
        f"{LABELS[r]}: opens {remote_totals[r][0]}/{remote_count}, "
        f"correct {remote_totals[r][1]}/{remote_count}"
        for r in READERS
    )
    print(remote_total)
    if remote_only:
        return 0
    count = len(CASES)
    header = " | ".join(LABELS[reader] for reader in READERS)
    total = " · ".join(
        f"{LABELS[r]}: opens {totals[r][0]}/{count}, correct {totals[r][1]}/{count}"
        for r in READERS
    )
    text = f"""# Compatibility

Generated by `./dev run python docs/compatibility.py` (do not edit by hand): every store below is
written at run time by a third-party writer (ome-zarr-py 0.21, zarr-python 3.4, TensorStore,
kerchunk + h5py, ngff-zarr 0.50, iohub 0.3, bioio-ome-zarr 3.8, spatialdata 0.8, tifffile's
references, xarray, dask; the bioformats2raw layout with ome-zarr-py's images; issue 50's odd
stores of `tests/conformance/cases_odd.py`; OME-Zarr 0.1 to 0.3
by ome-zarr-py 0.10.3 in a venv of its own with zarr 2, and 0.6 by ngff-zarr 0.50 and
ome-zarr-py 0.21: `tests/conformance/cases_ome_versions.py`) through
`tests/conformance/cases.py`, then opened in one real napari viewer with each reader. The same
cases run in `tests/napari/test_conformance.py`.

A cell says whether the reader opens the store, how many layers it makes against the expected
count (one per OME channel, one per label image; one per array otherwise), and whether every
layer's full resolution equals the writer's array (✓). For this plugin the pixels are also
compared as napari displays them after loading. "declined": the reader does not claim the
path. The last column compares this plugin's layers with napari-ome-zarr's (names, colormaps,
contrast limits, visibility, scale, translate, affine, units, label colours), where both open
the store.

OME-Zarr 0.6 scenes: this plugin places every image by its transformation into the scene's
first coordinate system (`tests/napari/test_ome_v06.py` checks `layer.data_to_world` of
landmark pixels against the writer's transformation, for every RFC-5 type). napari-ome-zarr
0.11 refuses a scene holding a `bijection` or a `byDimension` (the "every transformation"
row), shows a scene in the alphabetically first coordinate system rather than the scene's
first, and drops the datasets' translation: where it opens a scene its layers differ from
this plugin's by that translation alone (checked in the same test file), which the
scale/translate/affine differences of the row below show.

**Totals ({count} cases):** {total}.

| writer | case | {header} | layers vs napari-ome-zarr |
|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    text += f"""
## Remote

Stores served by servers the run starts on 127.0.0.1 (`tests/conformance/cases_remote.py`):
moto's S3 server, the stores written into it by ome-zarr-py and zarr-python; an HTTPS server
whose certificate a CA made for the run signs (trustme). Every reader is configured the
standard way, through the environment: `AWS_ENDPOINT_URL` and dummy AWS credentials,
`SSL_CERT_FILE` naming the CA.

**Totals ({remote_count} cases):** {remote_total}.

| server | case | {header} | layers vs napari-ome-zarr |
|---|---|---|---|---|---|
{chr(10).join(remote_rows)}
"""
    if details:
        text += "\n## Where this plugin fails\n\n" + "\n".join(details) + "\n"
    OUTPUT.write_text(text)
    print(total)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
