"""`QTargetChoice`: the inspector's header — which layer it inspects and at which level.

The layer box offers "active layer" (follow napari's selection) and every
layer of the viewer; the level box "displayed level" (follow the level napari
shows) and the chosen layer's levels. Rebuilding a box keeps its choice and
emits nothing: only a user's (or `ChunkInspector.pin`'s) choice does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from qtpy.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DISPLAYED", "FOLLOW", "QTargetChoice"]

FOLLOW: Final = "active layer"
DISPLAYED: Final = "displayed level"


class QTargetChoice(QWidget):
    """Two boxes: the layer (`FOLLOW`: the active one) and the level (`DISPLAYED`: napari's)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.layer_choice = QComboBox()
        self.level_choice = QComboBox()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("layer"))
        layout.addWidget(self.layer_choice, 1)
        layout.addWidget(QLabel("level"))
        layout.addWidget(self.level_choice)

    @property
    def following_active(self) -> bool:
        return self.layer_choice.currentText() == FOLLOW

    @property
    def following_displayed(self) -> bool:
        return self.level_choice.currentText() in ("", DISPLAYED)

    @property
    def chosen_level(self) -> int:
        """The level chosen (when not following the displayed one)."""
        return int(self.level_choice.currentText())

    def set_layers(self, names: Sequence[str]) -> None:
        """Offer these layers (the current choice kept if still offered)."""
        current = self.layer_choice.currentText()
        self.layer_choice.blockSignals(True)
        self.layer_choice.clear()
        self.layer_choice.addItems([FOLLOW, *names])
        self.layer_choice.setCurrentIndex(max(self.layer_choice.findText(current), 0))
        self.layer_choice.blockSignals(False)

    def set_levels(self, count: int) -> None:
        """Offer `count` levels (the current choice kept if still offered)."""
        wanted = [DISPLAYED] + [str(i) for i in range(count)]
        if [self.level_choice.itemText(i) for i in range(self.level_choice.count())] != wanted:
            current = self.level_choice.currentText()
            self.level_choice.blockSignals(True)
            self.level_choice.clear()
            self.level_choice.addItems(wanted)
            self.level_choice.setCurrentIndex(max(self.level_choice.findText(current), 0))
            self.level_choice.blockSignals(False)

    def selected_layer(self, viewer: Any) -> Any:
        """The layer chosen among `viewer`'s (the active one when following), or None."""
        name = self.layer_choice.currentText()
        if name in ("", FOLLOW):
            return viewer.layers.selection.active
        return next((layer for layer in viewer.layers if layer.name == name), None)
