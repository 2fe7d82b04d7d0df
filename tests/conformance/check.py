"""Open a conformance case with one reader in a real napari viewer and record what it shows.

Shared by `tests/napari/test_conformance.py` and `docs/compatibility.py`, so the
table and the tests judge the same thing. Qt waits go through the `wait`
callable the caller passes (pytest-qt's ``qtbot.waitUntil`` in tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.conformance.cases import Written

__all__ = ["READERS", "Outcome", "open_case", "structure_differences"]

# The readers compared: this plugin, the reference OME-Zarr plugin, napari's built-in reader.
READERS = ("napari-lazy-zarr", "napari-ome-zarr", "napari")

type Wait = Callable[..., Any]  # wait(predicate, timeout=ms): raises on timeout


@dataclass
class Outcome:
    """What one reader made of one case."""

    reader: str
    opened: bool = False
    error: str = ""  # the exception napari raised, type and first line
    layers: int = 0
    expected_layers: int = 0
    pixels: bool | None = None  # every layer's full resolution equals the writer's array
    problems: list[str] = field(default_factory=list)  # which layer differs, and how
    structure: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.opened and self.layers == self.expected_layers and bool(self.pixels)


def _level0(layer: Any) -> Any:
    """The layer's full resolution: for this plugin through the blocking lazy array (the
    layer's own arrays answer napari without waiting: a hidden layer's are placeholders)."""
    from napari_lazy_zarr._layer_data import loader_of

    loader = loader_of(layer)
    if loader is not None:
        return loader.levels[0].array
    return layer.data[0] if layer.multiscale else layer.data


def _equal(shown: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> str:
    """'' when equal (NaN equal to NaN), else what differs."""
    if shown.shape != expected.shape:
        return f"shape {shown.shape} != {expected.shape}"
    try:
        np.testing.assert_array_equal(shown, expected)
    except AssertionError:
        return f"values differ ({np.count_nonzero(shown != expected)} pixels)"
    return ""


def _structure(layer: Any) -> dict[str, Any]:
    """The layer's properties the readers are compared on."""
    kind = type(layer).__name__.lower()
    info: dict[str, Any] = {
        "name": layer.name,
        "type": kind,
        "visible": bool(layer.visible),
        "scale": tuple(round(float(s), 6) for s in layer.scale),
        "translate": tuple(round(float(t), 6) for t in layer.translate),
        "units": tuple(str(u) for u in layer.units),
        # Placement beyond scale and translate (OME-Zarr 0.6 scenes): napari's affine.
        "affine": tuple(
            tuple(round(float(v), 6) for v in row)
            for row in np.asarray(layer.affine.affine_matrix)
        ),
    }
    if kind == "image":
        info["colormap"] = _color_at_top(layer.colormap)
        info["contrast_limits"] = tuple(round(float(c), 3) for c in layer.contrast_limits)
    elif kind == "labels":
        info["label_colors"] = tuple(
            tuple(round(float(c), 3) for c in layer.colormap.map(np.array([value]))[0])
            for value in range(5)
        )
    return info


def _color_at_top(colormap: Any) -> tuple[float, ...]:
    """A colormap compared by what it shows: its colour at the top of the range."""
    return tuple(round(float(c), 3) for c in colormap.map(np.array([1.0]))[0])


def structure_differences(ours: Outcome, reference: Outcome) -> list[str]:
    """Where our layers differ from the reference reader's (layer by layer, in order)."""
    if len(ours.structure) != len(reference.structure):
        return [f"layer count {len(ours.structure)} != {len(reference.structure)}"]
    differences = []
    for index, (mine, theirs) in enumerate(zip(ours.structure, reference.structure, strict=True)):
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                differences.append(f"layer {index} {key}: {mine.get(key)} != {theirs.get(key)}")
    return differences


def open_case(viewer: Any, written: Written, reader: str, wait: Wait) -> Outcome:
    """Open `written` with `reader` in `viewer`, compare the pixels, then remove its layers.

    For this plugin the comparison also covers what napari displays: after the
    loads settle, the displayed slice equals the layer's level at napari's data
    level read blockingly, and level 0 equals the writer's array.
    """
    from napari_lazy_zarr._layer_data import loader_of

    outcome = Outcome(reader, expected_layers=len(written.layers))
    try:
        layers = viewer.open(str(written.path), plugin=reader)
    except Exception as error:  # what napari reports to the user: recorded, judged by the caller
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        outcome.error = f"{type(error).__name__}: {first}"[:160]
        return outcome
    try:
        outcome.opened = True
        outcome.layers = len(layers)
        outcome.structure = [_structure(layer) for layer in layers]
        if reader == "napari-lazy-zarr":
            # Label layers open hidden (as napari-ome-zarr's): shown, so that what napari
            # displays of them is compared too.
            for layer in layers:
                layer.visible = True
            viewer.window._qt_viewer.canvas.on_draw(None)  # napari re-slices on draw
            loaders = [loader_of(layer) for layer in layers]
            wait(lambda: all(lo is not None and lo.settled for lo in loaders), timeout=30_000)
        for index, (layer, expected) in enumerate(zip(layers, written.layers, strict=False)):
            problem = _equal(np.asarray(_level0(layer)), expected)
            # napari slices hidden layers only when shown: nothing displayed to compare.
            if not problem and reader == "napari-lazy-zarr" and layer.visible:
                problem = _shown_problem(layer, viewer)
            if problem:
                outcome.problems.append(f"layer {index} ({layer.name}): {problem}")
        outcome.pixels = not outcome.problems and outcome.layers == outcome.expected_layers
        if outcome.layers != outcome.expected_layers:
            outcome.problems.append(f"{outcome.layers} layers, expected {len(written.layers)}")
    finally:
        # One by one: `LayerList.clear` runs a full garbage collection (~0.25 s) each time.
        for layer in reversed(layers):
            viewer.layers.remove(layer)
    return outcome


def _shown_problem(layer: Any, viewer: Any) -> str:
    """'' when napari's displayed slice equals the layer's data level read blockingly."""
    from napari_lazy_zarr._layer_data import loader_of

    loader = loader_of(layer)
    assert loader is not None
    level = np.asarray(loader.levels[layer.data_level].array)
    raw = np.asarray(layer._slice.image.raw)
    displayed = list(viewer.dims.displayed)
    corners = np.asarray(layer.corner_pixels)
    point = layer.world_to_data(viewer.dims.point)
    index: list[Any] = []
    rgb = bool(getattr(layer, "rgb", False))  # the colour axis is napari's, not a layer axis
    for axis in range(level.ndim - rgb):
        if axis in displayed and not layer.multiscale:
            index.append(slice(None))  # a single-level layer is sliced whole
        elif axis in displayed:
            index.append(slice(int(corners[0, axis]), int(corners[1, axis]) + 1))
        else:
            scale = layer.downsample_factors[layer.data_level][axis] if layer.multiscale else 1
            index.append(int(np.clip(round(point[axis] / scale), 0, level.shape[axis] - 1)))
    if rgb:
        index.append(slice(None))
    problem = _equal(raw, level[tuple(index)])
    return f"displayed slice: {problem}" if problem else ""
