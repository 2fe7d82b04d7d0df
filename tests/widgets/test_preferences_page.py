"""The plugin's page in napari's Preferences dialog, as a user sees it under each Qt binding."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qtpy.QtWidgets import QAbstractSpinBox, QApplication

from napari_lazy_zarr._preferences import PLUGIN_NAME

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytestqt.qtbot import QtBot


def test_every_number_on_the_page_is_shown_whole(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot
) -> None:
    from napari._qt.dialogs.preferences_dialog import PreferencesDialog

    viewer = make_napari_viewer(show=True)
    dialog = PreferencesDialog(viewer.window._qt_window)
    dialog.show()
    pages = [dialog._list.item(row).text() for row in range(dialog._list.count())]
    dialog._list.setCurrentRow(pages.index(PLUGIN_NAME))
    QApplication.processEvents()
    boxes = dialog._stack.currentWidget().findChildren(QAbstractSpinBox)
    assert len(boxes) == 7  # capacity, loaders, remote loaders, three timeouts, 3D budget
    for box in boxes:
        # Each field's value (the defaults) fits its editor: under PyQt5 napari's style gave
        # the 3D voxel budget, then counted in voxels, a field showing "13421772" of 134217728.
        edit = box.lineEdit()
        width = edit.fontMetrics().horizontalAdvance(box.text())
        assert width < edit.width(), (box.text(), width, edit.width())
    dialog.close()
    dialog.deleteLater()
