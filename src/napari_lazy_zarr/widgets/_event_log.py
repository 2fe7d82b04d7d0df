"""`QEventLog`: the latest chunk events in a table over a bounded model, filterable."""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from qtpy.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from qtpy.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QTableView, QVBoxLayout, QWidget

from napari_lazy_zarr.core import ChunkState

if TYPE_CHECKING:
    from collections.abc import Iterable

    from napari_lazy_zarr.core import ChunkEvent

__all__ = ["EventLogModel", "QEventLog"]

_COLUMNS: Final = ("time", "chunk", "previous", "current", "reason")
_ANY_STATE: Final = "any state"


class EventLogModel(QAbstractTableModel):
    """The newest `capacity` events, newest first; memory is bounded whatever arrives."""

    def __init__(self, capacity: int = 2000, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: deque[ChunkEvent] = deque(maxlen=capacity)
        self._origin = time.monotonic()

    def add(self, events: Iterable[ChunkEvent]) -> None:
        """Append events (oldest first) in one model reset: cheap for large batches."""
        self.beginResetModel()
        self._rows.extendleft(events)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | None = None) -> int:
        return len(_COLUMNS)

    def event_at(self, row: int) -> ChunkEvent:
        return self._rows[row]

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or role != Qt.ItemDataRole.DisplayRole:
            return None
        event = self._rows[index.row()]
        column = _COLUMNS[index.column()]
        if column == "time":
            return f"{event.time - self._origin:9.3f}"
        if column == "chunk":
            return str(event.key)
        if column == "previous":
            return event.previous.name
        if column == "current":
            return event.current.name
        return event.reason

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return _COLUMNS[section]
        return None


class _EventFilter(QSortFilterProxyModel):
    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.state: str = _ANY_STATE
        self.text = ""

    def filterAcceptsRow(self, row: int, parent: QModelIndex) -> bool:
        model = self.sourceModel()
        assert isinstance(model, EventLogModel)
        event = model.event_at(row)
        if self.state != _ANY_STATE and self.state not in (
            event.current.name,
            event.previous.name,
        ):
            return False
        return not self.text or self.text in str(event.key)


class QEventLog(QWidget):
    """A filterable table of the latest events: by state (either side of the move) and chunk."""

    def __init__(self, capacity: int = 2000, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = EventLogModel(capacity, self)
        self.proxy = _EventFilter(self)
        self.proxy.setSourceModel(self.model)
        self.state_filter = QComboBox()
        self.state_filter.addItems([_ANY_STATE, *(s.name for s in ChunkState)])
        self.chunk_filter = QLineEdit()
        self.chunk_filter.setPlaceholderText("chunk contains…")
        self.table = QTableView()
        self.table.setModel(self.proxy)
        vertical, horizontal = self.table.verticalHeader(), self.table.horizontalHeader()
        if vertical is not None and horizontal is not None:
            vertical.setVisible(False)
            horizontal.setStretchLastSection(True)
        filters = QHBoxLayout()
        filters.addWidget(self.state_filter)
        filters.addWidget(self.chunk_filter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(filters)
        layout.addWidget(self.table)
        self.state_filter.currentTextChanged.connect(self._set_state)
        self.chunk_filter.textChanged.connect(self._set_text)

    def _set_state(self, state: str) -> None:
        self.proxy.state = state
        self.proxy.invalidateFilter()

    def _set_text(self, text: str) -> None:
        self.proxy.text = text.strip()
        self.proxy.invalidateFilter()

    def visible_rows(self) -> list[tuple[str, ...]]:
        """The rows shown (after filtering), as the table displays them."""
        rows = []
        for row in range(self.proxy.rowCount()):
            rows.append(
                tuple(
                    str(self.proxy.data(self.proxy.index(row, column)))
                    for column in range(len(_COLUMNS))
                )
            )
        return rows
