"""`CoordinateSystemChoice`: show an OME-Zarr 0.6 store's layers in another coordinate system.

A small dock widget: a list of the stores open in the viewer whose layers
came from OME-Zarr 0.6 metadata, and a list of the coordinate systems each
declares (a scene's own and its images'). Choosing a system re-places that
store's layers: their ``scale``, ``translate`` and ``affine`` are set from
`read_zarr(location, coordinate_system=...)`, labels with their images; a
layer that is warped by a field in the old or the new system is replaced by
the new one at the same place in the layer list (its data differ). The
models are the layers' own metadata (``metadata["napari_lazy_zarr"]``),
written by the reader; nothing is polled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qtpy.QtWidgets import QComboBox, QFormLayout, QLabel, QWidget

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CoordinateSystemChoice", "replace_layers"]


def _info(layer: Any) -> dict[str, Any]:
    metadata = getattr(layer, "metadata", None)
    info = metadata.get("napari_lazy_zarr") if isinstance(metadata, dict) else None
    return info if isinstance(info, dict) else {}


def _placed_layers(viewer: Any, location: str) -> Iterator[Any]:
    for layer in list(viewer.layers):
        info = _info(layer)
        if info.get("location") == location and "coordinate_system" in info:
            yield layer


def replace_layers(viewer: Any, location: str, system: str) -> int:
    """Show the layers of `location` in `system`; the number of layers re-placed.

    Raises
    ------
    LazyZarrError
        As `read_zarr`: `system` is not one the store declares, or the store
        cannot be read any more.
    """
    import numpy as np

    from napari_lazy_zarr._reader import read_zarr

    old = list(_placed_layers(viewer, location))
    if not old:
        return 0
    new = {
        kwargs["name"]: (data, kwargs, kind)
        for data, kwargs, kind in read_zarr(location, coordinate_system=system)
    }
    count = 0
    for layer in old:
        found = new.get(layer.name)
        if found is None:
            continue
        data, kwargs, kind = found
        was_warped = bool(_info(layer).get("warped"))
        warped = bool(_info_of(kwargs).get("warped"))
        if not was_warped and not warped:
            ndim = layer.ndim
            layer.scale = kwargs["scale"]
            layer.translate = kwargs["translate"]
            layer.affine = kwargs.get("affine", np.eye(ndim + 1))
            layer.metadata = {**layer.metadata, "napari_lazy_zarr": _info_of(kwargs)}
        else:
            index = viewer.layers.index(layer)
            viewer.layers.remove(layer)
            added = viewer.add_layer(_layer(data, kwargs, kind))
            viewer.layers.move(viewer.layers.index(added), index)
        count += 1
    return count


def _info_of(kwargs: dict[str, Any]) -> dict[str, Any]:
    metadata = kwargs.get("metadata") or {}
    info = metadata.get("napari_lazy_zarr")
    return dict(info) if isinstance(info, dict) else {}


def _layer(data: Any, kwargs: dict[str, Any], kind: str) -> Any:
    from napari.layers import Layer

    return Layer.create(data, kwargs, kind)


class CoordinateSystemChoice(QWidget):
    """The dock widget: a store, and the coordinate system its layers are shown in.

    Parameters
    ----------
    napari_viewer
        The viewer (npe2 hands it in).
    """

    def __init__(self, napari_viewer: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = getattr(napari_viewer, "__wrapped__", napari_viewer)
        self.stores = QComboBox(self)
        self.systems = QComboBox(self)
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        layout = QFormLayout(self)
        layout.addRow("Store", self.stores)
        layout.addRow("Coordinate system", self.systems)
        layout.addRow(self.status)
        self._updating = False
        self.stores.currentIndexChanged.connect(self._show_systems)
        self.systems.currentIndexChanged.connect(self._chosen)
        events = self.viewer.layers.events
        events.inserted.connect(self.refresh)
        events.removed.connect(self.refresh)
        self.destroyed.connect(lambda *_: self._disconnect(events))
        self.refresh()

    def _disconnect(self, events: Any) -> None:
        for emitter in (events.inserted, events.removed):
            emitter.disconnect(self.refresh)

    def refresh(self, *_: Any) -> None:
        """List the stores with OME-Zarr 0.6 layers (the viewer's layers changed)."""
        locations = list(
            dict.fromkeys(
                _info(layer)["location"]
                for layer in self.viewer.layers
                if "coordinate_system" in _info(layer)
            )
        )
        current = self.stores.currentText()
        self._updating = True
        try:
            self.stores.clear()
            self.stores.addItems(locations)
            if current in locations:
                self.stores.setCurrentText(current)
        finally:
            self._updating = False
        self._show_systems()

    def _show_systems(self, *_: Any) -> None:
        location = self.stores.currentText()
        layers = list(_placed_layers(self.viewer, location)) if location else []
        self._updating = True
        try:
            self.systems.clear()
            if layers:
                info = _info(layers[0])
                self.systems.addItems(list(info.get("coordinate_systems", ())))
                self.systems.setCurrentText(info["coordinate_system"])
                self.status.setText(f"{len(layers)} layers shown in {info['coordinate_system']!r}")
            else:
                self.status.setText("No OME-Zarr 0.6 layers open")
        finally:
            self._updating = False

    def _chosen(self, *_: Any) -> None:
        if self._updating:
            return
        self.choose(self.systems.currentText())

    def choose(self, system: str) -> None:
        """Show the current store's layers in `system` (a name as listed)."""
        location = self.stores.currentText()
        if not location or not system:
            return
        from napari_lazy_zarr.core.errors import LazyZarrError

        try:
            count = replace_layers(self.viewer, location, system)
        except LazyZarrError as error:
            self.status.setText(f"Not re-placed: {error}")
            return
        self.status.setText(f"{count} layers shown in {system!r}")
