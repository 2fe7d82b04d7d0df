"""`QSparklines`: small line charts, one row per series, with each series' latest value.

One widget paints every row, so a refresh of the rates costs one repaint request,
and only when a series changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np
from qtpy.QtCore import QByteArray, QDataStream, QRectF, QSize, Qt
from qtpy.QtGui import QColor, QFontMetricsF, QPen, QPolygonF
from qtpy.QtWidgets import QSizePolicy, QWidget

from napari_lazy_zarr.widgets._guarded import logged_once, painting

if TYPE_CHECKING:
    from collections.abc import Sequence

    from qtpy.QtGui import QPainter, QPaintEvent

__all__ = ["QSparklines", "Series", "polygon_of"]

_ROW: Final = 28
_TEXT_WIDTH: Final = 120

type Series = tuple[str, tuple[float, ...], str, tuple[int, int, int]]
"""(name, values oldest first, the text shown beside the name, RGB colour)."""


def polygon_of(xs: np.ndarray[Any, Any], ys: np.ndarray[Any, Any]) -> QPolygonF:
    """A polygon of the points (xs, ys), read from its serialised form in one call.

    Building it point by point costs a call into Qt per point; `QDataStream`
    reads a `QPolygonF` from bytes NumPy writes (Qt's documented format: a
    32-bit count, then each point's x and y as 64-bit floats, big-endian),
    the same public route in every Qt binding (pyqtgraph builds paths so).
    About 25 µs for 150 points here, against 3 µs for writing into the
    polygon's memory through sip, which only PyQt6 allowed.
    """
    points = np.empty((len(xs), 2), dtype=">f8")
    points[:, 0] = xs
    points[:, 1] = ys
    stream = QDataStream(QByteArray(np.array([len(xs)], dtype=">u4").tobytes() + points.tobytes()))
    polygon = QPolygonF()
    # QPolygonF's operator>> lives in QtGui: PyQt6's QtCore stubs do not list it.
    stream >> polygon  # type: ignore[operator]
    return polygon


class QSparklines(QWidget):
    """Rows of sparklines; `set_series` repaints only when a row changed."""

    def __init__(self, capacity: int = 150, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.capacity = capacity
        self.rows: tuple[Series, ...] = ()
        # It fills its background itself: Qt need not repaint the (style-sheeted) dock
        # behind it at every refresh.
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.paints = 0

    def sizeHint(self) -> QSize:
        return QSize(320, max(1, len(self.rows)) * _ROW)

    def minimumSizeHint(self) -> QSize:
        return QSize(220, max(1, len(self.rows)) * _ROW)

    def series(self, name: str) -> tuple[float, ...]:
        """The values of the series `name` (empty if there is none)."""
        return next((values for n, values, _, _ in self.rows if n == name), ())

    def set_series(self, rows: Sequence[Series]) -> None:
        new = tuple(rows)
        if new == self.rows:
            return
        resized = len(new) != len(self.rows)
        self.rows = new
        if resized:
            self.setFixedHeight(max(1, len(new)) * _ROW)
        self.update()

    @logged_once
    def paintEvent(self, event: QPaintEvent | None) -> None:
        self.paints += 1
        with painting(self) as painter:  # no antialiasing: a fraction of the cost, for 1-px lines
            self._paint(painter)

    def _paint(self, painter: QPainter) -> None:
        painter.fillRect(self.rect(), self.palette().window())
        width = self.width()
        metrics = QFontMetricsF(self.font())
        labels = [f"{name}: {text}" for name, _, text, _ in self.rows]
        # The text column fits the longest label, leaving the chart at least 40% of the row.
        text_width = min(
            max((metrics.horizontalAdvance(label) for label in labels), default=0) + 10,
            max(_TEXT_WIDTH, width * 0.6),
        )
        for index, ((_, values, _, color), label) in enumerate(
            zip(self.rows, labels, strict=True)
        ):
            top = index * _ROW
            painter.setPen(QColor(210, 210, 210))
            painter.drawText(
                QRectF(0, top, text_width - 6, _ROW),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                metrics.elidedText(label, Qt.TextElideMode.ElideMiddle, text_width - 6),
            )
            chart = QRectF(text_width, top + 4, max(10, width - text_width - 2), _ROW - 8)
            painter.fillRect(chart, QColor(22, 23, 27))
            series = np.asarray(values, dtype=np.float64)
            finite = np.isfinite(series)
            if not finite.any():
                continue
            left, bottom = chart.left(), chart.bottom()
            scale = chart.height() / max(float(series[finite].max()), 1e-9)
            step = chart.width() / max(self.capacity - 1, 1)
            xs = left + chart.width() - step * (len(series) - 1) + step * np.arange(len(series))
            ys = bottom - np.where(finite, series, 0.0) * scale
            points = polygon_of(xs, ys)
            painter.setPen(QPen(QColor(*color), 1))
            painter.drawPolyline(points)
