"""`QResidencyBar`: a row of segments, each filled by the share of its chunks that are resident.

Used for the levels resident for the view (one segment per pyramid level) and
for the axes the view does not display (one segment per chunk along z, t or
channel). A segment is grey when nothing is resident and green when all is;
the current one is outlined.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import numpy as np
from qtpy.QtCore import QPoint, QRectF, QSize, Qt
from qtpy.QtGui import QColor, QFontMetricsF, QHelpEvent, QImage, QPen
from qtpy.QtWidgets import QSizePolicy, QToolTip, QVBoxLayout, QWidget

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.widgets._grid_state import STATE_COLORS
from napari_lazy_zarr.widgets._guarded import logged_once, painting
from napari_lazy_zarr.widgets._summary import plane_tooltips

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from qtpy.QtCore import QEvent
    from qtpy.QtGui import QPainter, QPaintEvent

    from napari_lazy_zarr.widgets._grid_state import ChunkGridState
    from napari_lazy_zarr.widgets._view_cells import PlaneResidency

__all__ = ["PlaneBars", "QResidencyBar", "residency_color"]

_EMPTY: Final = np.array(STATE_COLORS[ChunkState.NEW], dtype=np.float64)
_FULL: Final = np.array(STATE_COLORS[ChunkState.READY], dtype=np.float64)
_UNKNOWN: Final = (60, 60, 66)
_TITLE_WIDTH: Final = 46


def residency_color(fraction: float | None) -> tuple[int, int, int]:
    """The colour of a segment `fraction` resident (None: unknown).

    Examples
    --------
    >>> residency_color(0.0), residency_color(1.0)
    ((112, 118, 132), (70, 190, 110))
    """
    if fraction is None or math.isnan(fraction):
        return _UNKNOWN
    mixed = _EMPTY + (_FULL - _EMPTY) * min(max(fraction, 0.0), 1.0)
    return (int(mixed[0]), int(mixed[1]), int(mixed[2]))


class QResidencyBar(QWidget):
    """A titled bar of segments; `set_fractions` repaints only when something changed."""

    def __init__(self, title: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.title = title
        self.fractions: tuple[float | None, ...] = ()
        self.current: int | None = None
        self.labels: tuple[str, ...] = ()
        self.tooltips: tuple[str, ...] = ()
        self._image: QImage | None = None
        self._bytes = b""
        # It fills its background itself: Qt need not repaint the (style-sheeted) dock
        # behind it at every refresh.
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.paints = 0

    def sizeHint(self) -> QSize:
        return QSize(200, 22)

    def minimumSizeHint(self) -> QSize:
        return QSize(100, 22)

    def set_fractions(
        self,
        title: str,
        fractions: Sequence[float | None],
        current: int | None,
        labels: Sequence[str] = (),
        tooltips: Sequence[str] = (),
    ) -> None:
        """Segments' resident shares (0-1, None unknown), the current one, their labels."""
        # Coloured in 5% steps: finer changes would only cost repaints (the tooltips,
        # which cost nothing until shown, keep the exact shares).
        values = tuple(None if f is None else round(float(f) * 20) / 20 for f in fractions)
        self.tooltips = tuple(tooltips)
        new = (title, values, current, tuple(labels))
        if new == (self.title, self.fractions, self.current, self.labels):
            return
        self.title, self.fractions, self.current, self.labels = new
        colors = np.array([residency_color(f) for f in values] or [_UNKNOWN], dtype=np.uint8)
        self._bytes = np.ascontiguousarray(colors).tobytes()
        self._image = QImage(
            self._bytes, len(colors), 1, 3 * len(colors), QImage.Format.Format_RGB888
        )
        self.update()

    def _bar(self) -> QRectF:
        return QRectF(_TITLE_WIDTH, 2, max(1, self.width() - _TITLE_WIDTH - 2), self.height() - 4)

    def segment_at(self, point: QPoint) -> int | None:
        bar = self._bar()
        if not self.fractions or not bar.contains(float(point.x()), float(point.y())):
            return None
        index = int((point.x() - bar.left()) / bar.width() * len(self.fractions))
        return min(max(index, 0), len(self.fractions) - 1)

    @logged_once
    def paintEvent(self, event: QPaintEvent | None) -> None:
        self.paints += 1
        with painting(self) as painter:
            self._paint(painter)

    def _paint(self, painter: QPainter) -> None:
        painter.fillRect(self.rect(), self.palette().window())
        painter.setPen(QColor(210, 210, 210))
        painter.drawText(
            QRectF(0, 0, _TITLE_WIDTH - 4, self.height()),
            Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
            self.title,
        )
        bar = self._bar()
        if self._image is None or not self.fractions:
            return
        painter.drawImage(bar, self._image)
        n = len(self.fractions)
        step = bar.width() / n
        metrics = QFontMetricsF(self.font())
        if self.labels and all(metrics.horizontalAdvance(t) + 4 <= step for t in self.labels):
            painter.setPen(QColor(15, 15, 15))
            for i, text in enumerate(self.labels):
                painter.drawText(
                    QRectF(bar.left() + i * step, bar.top(), step, bar.height()),
                    Qt.AlignmentFlag.AlignCenter,
                    text,
                )
        if step >= 4:  # separators between segments
            painter.setPen(QPen(QColor(16, 17, 20), 1))
            for i in range(1, n):
                x = bar.left() + i * step
                painter.drawLine(int(x), int(bar.top()), int(x), int(bar.bottom()))
        if self.current is not None and 0 <= self.current < n:
            painter.setPen(QPen(QColor(255, 140, 0), 2))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(
                QRectF(bar.left() + self.current * step, bar.top(), max(step, 2), bar.height())
            )

    def event(self, event: QEvent | None) -> bool:
        if isinstance(event, QHelpEvent):
            index = self.segment_at(event.pos())
            if index is not None and index < len(self.tooltips):
                QToolTip.showText(event.globalPos(), self.tooltips[index], self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


class PlaneBars:
    """A column (`box`, a layout) of `QResidencyBar`s, one per store axis the view does not show.

    Bars are made as axes appear and hidden, not deleted, when fewer are shown.
    """

    def __init__(self) -> None:
        self.box = QVBoxLayout()
        self.box.setSpacing(1)
        self.bars: list[QResidencyBar] = []

    def show(
        self,
        planes: Sequence[PlaneResidency],
        grid: ChunkGridState | None,
        axis_name: Callable[[int], str],
    ) -> None:
        """Show the residency of `planes` (of the level `grid`), each bar titled `axis_name`."""
        added = len(self.bars) < len(planes)
        while len(self.bars) < len(planes):
            bar = QResidencyBar()
            self.bars.append(bar)
            self.box.addWidget(bar)
        for bar, plane in zip(self.bars, planes, strict=False):
            assert grid is not None
            name = axis_name(plane.axis)
            extent = grid.source.shape[plane.axis]
            bar.set_fractions(
                name,
                plane.fractions.tolist(),
                plane.current,
                tooltips=plane_tooltips(name, plane, extent),
            )
            bar.setVisible(True)
        for bar in self.bars[len(planes) :]:
            bar.setVisible(False)
        owner = self.box.parentWidget()
        layout = None if owner is None else owner.layout()
        if added and layout is not None:
            # Placed now, once shown: a new bar keeps a new widget's 640x480 geometry until
            # the layout runs on a later turn of the event loop, and was painted so over the
            # whole inspector when it docked (one giant striped bar for ~0.3 s).
            layout.activate()
