"""napari tests: a real viewer under Xvfb (`./dev test` starts one when there is no display)."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import pytest
import zarr

# Hermetic napari settings, set before napari is imported anywhere.
os.environ.setdefault("NAPARI_CONFIG", os.path.join(tempfile.mkdtemp(), "settings.yaml"))

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    import numpy as np


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("DISPLAY"):
        return
    skip = pytest.mark.skip(reason="needs a display: run under Xvfb (./dev test starts one)")
    for item in items:
        if "make_napari_viewer" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


def write_ome_pyramid(
    path: Path,
    data: np.ndarray[Any, Any],
    *,
    levels: int,
    chunks: tuple[int, ...],
    axes: list[dict[str, Any]],
    zarr_format: int,
    omero: dict[str, Any] | None = None,
    scale: list[float] | None = None,
    translate: list[float] | None = None,
    labels: dict[str, np.ndarray[Any, Any]] | None = None,
) -> list[np.ndarray[Any, Any]]:
    """An OME-Zarr image (NGFF 0.4 on Zarr v2, 0.5 on Zarr v3) decimating the last two axes."""
    version = "0.4" if zarr_format == 2 else "0.5"
    root = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)  # type: ignore[arg-type]
    base_scale = scale or [1.0] * data.ndim
    pyramid = []
    datasets = []
    for level in range(levels):
        factor = 2**level
        level_data = data[(..., slice(None, None, factor), slice(None, None, factor))]
        pyramid.append(level_data)
        array = root.create_array(
            str(level), shape=level_data.shape, chunks=chunks, dtype=level_data.dtype
        )
        array[...] = level_data
        level_scale = [
            s * (factor if axis >= data.ndim - 2 else 1) for axis, s in enumerate(base_scale)
        ]
        transforms: list[dict[str, Any]] = [{"type": "scale", "scale": level_scale}]
        if translate:
            transforms.append({"type": "translation", "translation": translate})
        datasets.append({"path": str(level), "coordinateTransformations": transforms})
    multiscale: dict[str, Any] = {"name": path.stem, "axes": axes, "datasets": datasets}
    if version == "0.4":
        multiscale["version"] = "0.4"
    attrs: dict[str, Any] = {"multiscales": [multiscale]}
    if omero:
        attrs["omero"] = omero
    if labels:
        label_group = root.create_group("labels")
        for name, label in labels.items():
            write_ome_pyramid(
                path / "labels" / name,
                label,
                levels=levels,
                chunks=chunks,
                axes=axes,
                zarr_format=zarr_format,
                scale=scale,
            )
            zarr.open_group(str(path / "labels" / name), mode="a").attrs["image-label"] = (
                {"version": version} if version == "0.4" else {}
            )
        if version == "0.4":
            label_group.attrs["labels"] = list(labels)
        else:
            label_group.attrs["ome"] = {"version": version, "labels": list(labels)}
    if version == "0.4":
        root.attrs.update(attrs)
    else:
        root.attrs["ome"] = {"version": version, **attrs}
    return pyramid


@pytest.fixture
def notices() -> Iterator[list[str]]:
    """The messages of napari's notifications, as napari dispatches them to its toasts."""
    from napari.utils.notifications import notification_manager

    shown: list[str] = []

    def record(notification: Any) -> None:
        shown.append(str(notification.message))

    notification_manager.notification_ready.connect(record)
    yield shown
    notification_manager.notification_ready.disconnect(record)


@pytest.fixture
def ome_store(tmp_path: Path) -> Callable[..., tuple[Path, list[np.ndarray[Any, Any]]]]:
    def make(**kwargs: Any) -> tuple[Path, list[np.ndarray[Any, Any]]]:
        path = tmp_path / kwargs.pop("name", "image.ome.zarr")
        data = kwargs.pop("data")
        return path, write_ome_pyramid(path, data, **kwargs)

    return make


@pytest.fixture
def recorded_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, tuple[int, ...]]]]:
    """Every `ZarrChunkSource.read_chunk` call, as (source identity, coords), in order."""
    from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource

    reads: list[tuple[Any, tuple[int, ...]]] = []
    original = ZarrChunkSource.read_chunk

    def recording(self: ZarrChunkSource, coords: tuple[int, ...]) -> Any:
        reads.append((self.identity, tuple(coords)))
        return original(self, coords)

    monkeypatch.setattr(ZarrChunkSource, "read_chunk", recording)
    return reads


@pytest.fixture(autouse=True)
def fresh_shared_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own plugin cache (closed afterwards), so tests do not share chunks,
    and the plugin's Preferences at their defaults afterwards."""
    from napari_lazy_zarr import _reader
    from napari_lazy_zarr._preferences import plugin_preferences

    monkeypatch.setattr(_reader, "_shared_cache", None)
    yield
    cache = _reader._shared_cache
    if cache is not None:
        cache.close()
    # What a test changed on the plugin's Preferences page (the inspector's controls write
    # there) must not reach the next test: back to the defaults.
    page = plugin_preferences()
    if page is not None and page.model_dump(exclude_defaults=True):
        page.reset()


def omero(colors: list[str], windows: list[tuple[float, float]]) -> dict[str, Any]:
    return {
        "channels": [
            {
                "label": f"ch{i}",
                "color": color,
                "active": True,
                "window": {"min": 0, "max": 65535, "start": lo, "end": hi},
            }
            for i, (color, (lo, hi)) in enumerate(zip(colors, windows, strict=True))
        ]
    }
