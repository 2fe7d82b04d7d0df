"""`QEventLog`: the latest chunk events in a table over a bounded model, filterable.

Chunks are named relative to the store (``L1 (3, 5)``, see `ChunkNamer`); the
full key and reason are in each row's tooltip. Columns are sized once from the
font, never measured over the rows, and the reason takes what is left.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from qtpy.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from qtpy.QtGui import QFontMetrics
from qtpy.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from napari_lazy_zarr.core import ChunkState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from napari_lazy_zarr.core import ChunkEvent, ChunkKey

__all__ = ["COLUMNS", "EventLogModel", "QEventLog"]

COLUMNS: Final = ("time", "chunk", "move", "reason")
_ANY_STATE: Final = "any state"


class EventLogModel(QAbstractTableModel):
    """The newest `capacity` events, newest first; memory is bounded whatever arrives.

    `add` only collects; `flush` shows what was collected (one model reset), so
    a hidden log costs nothing per event.
    """

    def __init__(self, capacity: int = 2000, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: deque[ChunkEvent] = deque(maxlen=capacity)
        self._incoming: deque[ChunkEvent] = deque(maxlen=capacity)
        self._origin = time.monotonic()
        self.namer: Callable[[ChunkKey], str] = str

    def add(self, events: Iterable[ChunkEvent]) -> None:
        """Collect events (oldest first); shown at the next `flush`."""
        self._incoming.extend(events)

    def flush(self) -> bool:
        """Show the collected events in one model reset; False if there were none."""
        if not self._incoming:
            return False
        self.beginResetModel()
        self._rows.extendleft(self._incoming)
        self._incoming.clear()
        self.endResetModel()
        return True

    def set_namer(self, namer: Callable[[ChunkKey], str]) -> None:
        self.beginResetModel()
        self.namer = namer
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | None = None) -> int:
        return len(COLUMNS)

    def event_at(self, row: int) -> ChunkEvent:
        return self._rows[row]

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        event = self._rows[index.row()]
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{event.key}\n{event.previous.name} → {event.current.name}: {event.detail}"
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        column = COLUMNS[index.column()]
        if column == "time":
            return f"{event.time - self._origin:.3f}"
        if column == "chunk":
            return self.namer(event.key)
        if column == "move":
            return f"{event.previous.name} → {event.current.name}"
        return event.detail

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
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
        return not self.text or self.text in model.namer(event.key) or self.text in str(event.key)


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
        self.table.setModel(self.model)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        vertical, horizontal = self.table.verticalHeader(), self.table.horizontalHeader()
        if vertical is not None and horizontal is not None:
            vertical.setVisible(False)
            vertical.setDefaultSectionSize(QFontMetrics(self.font()).height() + 4)
            metrics = QFontMetrics(self.font())
            widths = {
                "time": metrics.horizontalAdvance("00000.000") + 12,
                "chunk": metrics.horizontalAdvance("L0 (000, 000)") + 12,
                "move": metrics.horizontalAdvance("LOADING → EVICTED") + 12,
            }
            for column, name in enumerate(COLUMNS[:-1]):
                horizontal.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
                horizontal.resizeSection(column, widths[name])
            horizontal.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
            horizontal.setMinimumSectionSize(40)
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
        self._filter_changed()

    def _set_text(self, text: str) -> None:
        self.proxy.text = text.strip()
        self._filter_changed()

    def _filter_changed(self) -> None:
        # Without a filter the table shows the model itself: the proxy would call
        # `filterAcceptsRow` (Python) for every row at every refresh.
        filtering = self.proxy.state != _ANY_STATE or bool(self.proxy.text)
        shown = self.proxy if filtering else self.model
        if self.table.model() is not shown:
            self.table.setModel(shown)
        if filtering:
            # invalidate(), not invalidateFilter(): Qt 6.10 deprecates the latter (PySide6
            # warns) for begin/endFilterChange(), which Qt 5 lacks. Nothing is sorted, so
            # it costs the same.
            self.proxy.invalidate()

    def visible_rows(self) -> list[tuple[str, ...]]:
        """The rows shown (after filtering), as the table displays them."""
        self.model.flush()
        shown = self.table.model()
        assert shown is not None
        return [
            tuple(str(shown.data(shown.index(row, column))) for column in range(len(COLUMNS)))
            for row in range(shown.rowCount())
        ]

    def column_spans(self) -> list[tuple[int, int]]:
        """Each column's (left, right) edge in the table's viewport, in pixels."""
        header = self.table.horizontalHeader()
        assert header is not None
        return [
            (
                header.sectionViewportPosition(c),
                header.sectionViewportPosition(c) + header.sectionSize(c),
            )
            for c in range(len(COLUMNS))
        ]
