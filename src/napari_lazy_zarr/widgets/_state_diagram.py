"""`QStateDiagram`: the six chunk states with live counts and a counter on every legal move."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from qtpy.QtCore import QPointF, QRectF, QSize, Qt
from qtpy.QtGui import QColor, QPainter, QPen, QPolygonF
from qtpy.QtWidgets import QWidget

from napari_lazy_zarr.core import LEGAL_MOVES, ChunkState
from napari_lazy_zarr.widgets._grid_state import STATE_COLORS

if TYPE_CHECKING:
    from qtpy.QtGui import QPaintEvent

__all__ = ["QStateDiagram"]

# Node centres on a 4 x 2 layout, in fractions of the widget: the happy path on top.
_POSITIONS: Final = {
    ChunkState.NEW: (0.11, 0.25),
    ChunkState.QUEUED: (0.37, 0.25),
    ChunkState.LOADING: (0.63, 0.25),
    ChunkState.READY: (0.89, 0.25),
    ChunkState.FAILED: (0.63, 0.80),
    ChunkState.EVICTED: (0.89, 0.80),
}
MOVES: Final = sorted(
    ((a, b) for a, targets in LEGAL_MOVES.items() for b in targets),
    key=lambda move: (list(ChunkState).index(move[0]), list(ChunkState).index(move[1])),
)


class QStateDiagram(QWidget):
    """Counts per state (`set_counts`) and per transition (`set_transitions`), painted."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(QSize(320, 150))
        self.counts: dict[ChunkState, int] = dict.fromkeys(ChunkState, 0)
        self.transitions: dict[tuple[ChunkState, ChunkState], int] = dict.fromkeys(MOVES, 0)
        self.paints = 0

    def set_counts(
        self,
        counts: dict[ChunkState, int],
        transitions: dict[tuple[ChunkState, ChunkState], int],
    ) -> None:
        self.counts = {state: counts.get(state, 0) for state in ChunkState}
        self.transitions = {move: transitions.get(move, 0) for move in MOVES}
        self.update()

    def _centre(self, state: ChunkState) -> QPointF:
        fx, fy = _POSITIONS[state]
        return QPointF(fx * self.width(), fy * self.height())

    def paintEvent(self, event: QPaintEvent | None) -> None:
        self.paints += 1
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(30, 32, 38))
        node_w, node_h = min(96.0, self.width() * 0.19), 36.0
        for previous, current in MOVES:
            self._arrow(painter, previous, current, node_w, node_h)
        for state in ChunkState:
            centre = self._centre(state)
            rect = QRectF(centre.x() - node_w / 2, centre.y() - node_h / 2, node_w, node_h)
            painter.setPen(QPen(QColor(20, 20, 20), 1))
            painter.setBrush(QColor(*STATE_COLORS[state]))
            painter.drawRoundedRect(rect, 6, 6)
            painter.setPen(QColor(10, 10, 10))
            painter.drawText(
                rect, Qt.AlignmentFlag.AlignCenter, f"{state.name}\n{self.counts[state]:,}"
            )
        painter.end()

    def _arrow(
        self,
        painter: QPainter,
        previous: ChunkState,
        current: ChunkState,
        node_w: float,
        node_h: float,
    ) -> None:
        start, end = self._centre(previous), self._centre(current)
        # Two-way pairs (e.g. FAILED <-> QUEUED) are offset so both arrows show.
        offset = 6.0 if (current, previous) in self.transitions else 0.0
        dx, dy = end.x() - start.x(), end.y() - start.y()
        length = max((dx * dx + dy * dy) ** 0.5, 1e-6)
        ux, uy = dx / length, dy / length
        nx, ny = -uy * offset, ux * offset
        # Leave the node boxes: shorten by half a box along the direction.
        trim = min(abs(node_w / 2 / ux) if ux else 1e9, abs(node_h / 2 / uy) if uy else 1e9)
        a = QPointF(start.x() + ux * trim + nx, start.y() + uy * trim + ny)
        b = QPointF(end.x() - ux * trim + nx, end.y() - uy * trim + ny)
        painter.setPen(QPen(QColor(190, 190, 190), 1.5))
        painter.drawLine(a, b)
        head = QPolygonF(
            [
                b,
                QPointF(b.x() - ux * 8 - uy * 4, b.y() - uy * 8 + ux * 4),
                QPointF(b.x() - ux * 8 + uy * 4, b.y() - uy * 8 - ux * 4),
            ]
        )
        painter.setBrush(QColor(190, 190, 190))
        painter.drawPolygon(head)
        # The counter sits beside the arrow's middle, on the side away from its twin.
        side_x, side_y = (nx, ny) if offset else (-uy * 6, ux * 6)
        middle = QPointF((a.x() + b.x()) / 2 + side_x * 1.5, (a.y() + b.y()) / 2 + side_y * 1.5)
        box = QRectF(middle.x() - 30, middle.y() - 8, 60, 16)
        painter.setPen(QColor(235, 235, 235))
        painter.drawText(
            box, Qt.AlignmentFlag.AlignCenter, f"{self.transitions[previous, current]:,}"
        )
