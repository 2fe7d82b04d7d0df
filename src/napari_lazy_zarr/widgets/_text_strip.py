"""`QTextStrip`: a few lines of text that change often, painted without relayout.

A word-wrapped `QLabel` asks its layout to recompute the whole dock each time its
text changes; a fixed-height strip that paints its own text only repaints itself.
"""

from __future__ import annotations

from qtpy.QtCore import QRectF, QSize, Qt
from qtpy.QtGui import QColor, QFontMetricsF
from qtpy.QtWidgets import QSizePolicy, QWidget

from napari_lazy_zarr.widgets._guarded import logged_once, painting

__all__ = ["QTextStrip"]


class QTextStrip(QWidget):
    """Up to `lines` lines of word-wrapped text; `set_text` repaints only on a change."""

    def __init__(self, lines: int = 3, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(int(QFontMetricsF(self.font()).lineSpacing() * lines) + 4)
        self._text = ""
        # It fills its background itself: Qt need not repaint the (style-sheeted) dock
        # behind it at every refresh.
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.paints = 0

    def text(self) -> str:
        return self._text

    def set_text(self, text: str) -> None:
        if text != self._text:
            self._text = text
            self.update()

    def sizeHint(self) -> QSize:
        return QSize(240, self.height())

    @logged_once
    def paintEvent(self, event: object) -> None:
        self.paints += 1
        with painting(self) as painter:
            painter.fillRect(self.rect(), self.palette().window())
            painter.setPen(QColor(220, 220, 220))
            painter.drawText(
                QRectF(2, 2, self.width() - 4, self.height() - 4),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
                | int(Qt.TextFlag.TextWordWrap),
                self._text,
            )
