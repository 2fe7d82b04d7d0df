"""S3 stores in a real napari viewer: an OME-Zarr image and an HCS plate on moto.

The image is written into the server by ome-zarr-py; the plate by ome-zarr-py
into a folder, then uploaded (s3fs ``put``). The viewer is told the endpoint
only through the plugin's setting; `open_case` compares every layer's full
resolution with the writer's array and the displayed slice with the level
napari shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from napari_lazy_zarr._reader import watch_viewer
from tests.conformance.cases import Written, write_plate
from tests.conformance.check import open_case
from tests.remote.s3server import S3Server, s3

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest
    from pytestqt.qtbot import QtBot

__all__ = ["s3"]


def test_an_s3_image_and_plate_in_a_real_viewer(
    make_napari_viewer: Callable[..., Any],
    qtbot: QtBot,
    s3: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    bucket = s3.bucket("screens")
    data = np.random.default_rng(3).integers(0, 60_000, (96, 128), dtype=np.uint16)
    image = f"{bucket}/cells.ome.zarr"
    root = zarr.open_group(image, mode="w", zarr_format=2, storage_options=s3.options())
    write_image(
        data, root, axes="yx", fmt=FormatV04(), scale_factors=(2,),
        storage_options={"chunks": (32, 32)},
    )  # fmt: skip
    plate = write_plate(tmp_path, 2, 3, 2)
    s3.upload(plate.path, f"{bucket}/plate.ome.zarr")
    monkeypatch.setenv("NAPARI_LAZY_ZARR_S3_ENDPOINT_URL", s3.endpoint)

    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    for written in (Written(image, (data,)), Written(f"{bucket}/plate.ome.zarr", plate.layers)):
        outcome = open_case(viewer, written, "napari-lazy-zarr", qtbot.waitUntil)
        assert outcome.opened, outcome.error
        assert outcome.ok, outcome.problems
