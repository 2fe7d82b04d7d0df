"""`QStateDiagram`: the six chunk states with live counts and a counter on every legal move."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from qtpy.QtCore import QPointF, QRectF, QSize, Qt
from qtpy.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen, QPolygonF
from qtpy.QtWidgets import QWidget

from napari_lazy_zarr.core import LEGAL_MOVES, ChunkState
from napari_lazy_zarr.widgets._grid_state import STATE_COLORS
from napari_lazy_zarr.widgets._guarded import logged_once, painting

if TYPE_CHECKING:
    from qtpy.QtGui import QPaintEvent

__all__ = ["MOVES", "QStateDiagram", "compact"]

# Node centres in fractions of the widget: the happy path across the middle, the two
# detours (failure above, eviction below) as triangles back to QUEUED, so no arrows cross.
_POSITIONS: Final = {
    ChunkState.NEW: (0.11, 0.5),
    ChunkState.QUEUED: (0.37, 0.5),
    ChunkState.LOADING: (0.63, 0.5),
    ChunkState.READY: (0.89, 0.5),
    ChunkState.FAILED: (0.50, 0.15),
    ChunkState.EVICTED: (0.63, 0.85),
}
MOVES: Final = sorted(
    ((a, b) for a, targets in LEGAL_MOVES.items() for b in targets),
    key=lambda move: (list(ChunkState).index(move[0]), list(ChunkState).index(move[1])),
)
_MOVE_SET: Final = frozenset(MOVES)
_PAIR_GAP: Final = 4.0  # pixels between the two arrows of a move and its reverse
# Where along an arrow (from its start) a counter may sit, most wanted first.
_ALONG: Final = (0.5, 0.35, 0.65, 0.25, 0.75, 0.15, 0.85)


def compact(count: int) -> str:
    """A count in at most five characters.

    Examples
    --------
    >>> [compact(n) for n in (7, 9999, 12345, 999_000, 999_999, 1_234_567)]
    ['7', '9,999', '12.3k', '999k', '1.0M', '1.2M']
    """
    if count < 10_000:
        return f"{count:,}"
    if count < 100_000:
        return f"{count / 1000:.1f}k"
    if count < 999_500:
        return f"{count / 1000:.0f}k"
    return f"{count / 1e6:.1f}M"


class QStateDiagram(QWidget):
    """Counts per state and per transition (`set_counts`), painted.

    Counters never overlap a state's box or each other (`layout` places each at
    the first free spot along its arrow), and counts are shortened to fit
    (``12.3k``).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(QSize(340, 180))
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)  # it paints every pixel
        font = QFont(self.font())
        font.setPixelSize(11)
        self.setFont(font)
        self.counts: dict[ChunkState, int] = dict.fromkeys(ChunkState, 0)
        self.transitions: dict[tuple[ChunkState, ChunkState], int] = dict.fromkeys(MOVES, 0)
        self._static: QImage | None = None
        self.paints = 0

    def set_counts(
        self,
        counts: dict[ChunkState, int],
        transitions: dict[tuple[ChunkState, ChunkState], int],
    ) -> None:
        """New counts; repaints only if they differ from the shown ones."""
        counts = {state: counts.get(state, 0) for state in ChunkState}
        transitions = {move: transitions.get(move, 0) for move in MOVES}
        if counts == self.counts and transitions == self.transitions:
            return
        self.counts, self.transitions = counts, transitions
        self.update()

    def _centre(self, state: ChunkState) -> QPointF:
        fx, fy = _POSITIONS[state]
        return QPointF(fx * self.width(), fy * self.height())

    def node_rects(self) -> dict[ChunkState, QRectF]:
        """Each state's box, in widget coordinates."""
        node_w, node_h = min(96.0, self.width() * 0.21), 32.0
        rects = {}
        for state in ChunkState:
            centre = self._centre(state)
            rects[state] = QRectF(centre.x() - node_w / 2, centre.y() - node_h / 2, node_w, node_h)
        return rects

    def _ends(
        self, move: tuple[ChunkState, ChunkState], nodes: dict[ChunkState, QRectF]
    ) -> tuple[QPointF, QPointF]:
        """An arrow's ends, on the edges of its two boxes."""
        start, end = self._centre(move[0]), self._centre(move[1])
        dx, dy = end.x() - start.x(), end.y() - start.y()
        length = max((dx * dx + dy * dy) ** 0.5, 1e-6)
        ux, uy = dx / length, dy / length
        half_w, half_h = nodes[move[0]].width() / 2, nodes[move[0]].height() / 2
        trim = min(abs(half_w / ux) if ux else 1e9, abs(half_h / uy) if uy else 1e9)
        # A move whose reverse is legal too (QUEUED <-> LOADING: a cancelled load) is drawn
        # beside it: each arrow shifted to its own left, so the two never share a line.
        shift = _PAIR_GAP if (move[1], move[0]) in _MOVE_SET else 0.0
        sx, sy = uy * shift, -ux * shift
        return (
            QPointF(start.x() + ux * trim + sx, start.y() + uy * trim + sy),
            QPointF(end.x() - ux * trim + sx, end.y() - uy * trim + sy),
        )

    def label_rects(self) -> dict[tuple[ChunkState, ChunkState], QRectF]:
        """Where each move's counter is drawn: beside its arrow, clear of boxes and counters."""
        metrics = QFontMetricsF(self.font())
        nodes = self.node_rects()
        bounds = QRectF(0, 0, self.width(), self.height())
        taken = list(nodes.values())
        placed: dict[tuple[ChunkState, ChunkState], QRectF] = {}
        for move in MOVES:
            text = compact(self.transitions[move])
            w, h = metrics.horizontalAdvance(text) + 6, metrics.height() + 2
            a, b = self._ends(move, nodes)
            dx, dy = b.x() - a.x(), b.y() - a.y()
            length = max((dx * dx + dy * dy) ** 0.5, 1e-6)
            nx, ny = -dy / length, dx / length  # the arrow's normal
            chosen = None
            candidates = []
            if abs(dy) < 1e-6:  # a horizontal arrow: above the row of boxes, else below it
                top, bottom = nodes[move[0]].top(), nodes[move[0]].bottom()
                candidates.append(QRectF((a.x() + b.x()) / 2 - w / 2, top - h - 2, w, h))
                candidates.append(QRectF((a.x() + b.x()) / 2 - w / 2, bottom + 2, w, h))
            for t in _ALONG:
                px, py = a.x() + dx * t, a.y() + dy * t
                for side in (1.0, -1.0):
                    # Offset along the normal until the box clears the line.
                    reach = (abs(nx) * w + abs(ny) * h) / 2 + 3
                    cx, cy = px + side * nx * reach, py + side * ny * reach
                    candidates.append(QRectF(cx - w / 2, cy - h / 2, w, h))
            for rect in candidates:
                if bounds.contains(rect) and not any(rect.intersects(o) for o in taken):
                    chosen = rect
                    break
            if chosen is None:  # too small a widget: the least bad spot
                chosen = candidates[0]
            placed[move] = chosen
            taken.append(chosen)
        return placed

    def _background(self) -> QImage:
        """Arrows and boxes, antialiased, drawn once per size (the costly part of a paint)."""
        image = self._static
        if image is None or image.size() != self.size():
            image = QImage(self.size(), QImage.Format.Format_ARGB32_Premultiplied)
            image.fill(QColor(30, 32, 38))
            with painting(image) as painter:
                painter.setRenderHint(QPainter.RenderHint.Antialiasing)
                nodes = self.node_rects()
                for move in MOVES:
                    self._arrow(painter, *self._ends(move, nodes))
                for state, rect in nodes.items():
                    painter.setPen(QPen(QColor(20, 20, 20), 1))
                    painter.setBrush(QColor(*STATE_COLORS[state]))
                    painter.drawRoundedRect(rect, 6, 6)
            self._static = image
        return image

    @logged_once
    def paintEvent(self, event: QPaintEvent | None) -> None:
        self.paints += 1
        background = self._background()
        with painting(self) as painter:
            painter.drawImage(0, 0, background)
            painter.setPen(QColor(10, 10, 10))
            for state, rect in self.node_rects().items():
                painter.drawText(
                    rect,
                    Qt.AlignmentFlag.AlignCenter,
                    f"{state.name}\n{compact(self.counts[state])}",
                )
            painter.setPen(QColor(235, 235, 235))
            for move, rect in self.label_rects().items():
                painter.drawText(
                    rect, Qt.AlignmentFlag.AlignCenter, compact(self.transitions[move])
                )

    def _arrow(self, painter: QPainter, a: QPointF, b: QPointF) -> None:
        dx, dy = b.x() - a.x(), b.y() - a.y()
        length = max((dx * dx + dy * dy) ** 0.5, 1e-6)
        ux, uy = dx / length, dy / length
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
