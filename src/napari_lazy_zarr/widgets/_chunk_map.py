"""`QChunkMap`: every chunk of a level as a cell coloured by state, the view's chunks marked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np
from qtpy.QtCore import QLineF, QPoint, QRectF, QSize, Qt
from qtpy.QtGui import QColor, QImage, QMouseEvent, QPainter, QPen
from qtpy.QtWidgets import QGridLayout, QLabel, QMenu, QToolTip, QWidget

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.widgets._grid_state import (
    MARKER_COLORS,
    STATE_COLORS,
    ChunkGridState,
    Shown,
    cell_image,
)
from napari_lazy_zarr.widgets._guarded import logged_once, painting
from napari_lazy_zarr.widgets._lifecycle import weakly

if TYPE_CHECKING:
    from collections.abc import Callable

    from qtpy.QtGui import QPaintEvent, QResizeEvent

    from napari_lazy_zarr.core import ChunkCache
    from napari_lazy_zarr.widgets._view_cells import ViewCells

__all__ = ["BACKGROUND", "QChunkMap", "marks_legend", "state_legend"]

BACKGROUND: Final = QColor(16, 17, 20)
_GRID_LINE: Final = QColor(16, 17, 20)
_FRAME: Final = QColor(200, 204, 214)
_TOUCHED: Final = QColor(255, 255, 255)
_REQUESTED: Final = QColor(255, 140, 0)
_MARK_MIN_PX: Final = 9  # a chunk is drawn with its mark when at least this many pixels wide
_LINES_MIN_PX: Final = 8  # grid lines between chunks from this size up


class QChunkMap(QWidget):
    """Paints one plane of a `ChunkGridState`; hover explains a chunk, click retries a FAILED one.

    The plane is the 2D grid of the view's displayed axes at the view's
    position on the others. Chunks of the view carry a mark in their centre
    unless final: white for a provisional stand-in (a coarser level), black for
    the fill value. The white rectangle bounds the chunks the view touches,
    the orange one the region napari asked for. Grids larger than the widget
    are aggregated into blocks coloured by the mix of their chunks' states.

    The image is rebuilt only by `refresh()` and repainted only when it or the
    view changed: an unchanged grid costs nothing.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setMinimumSize(QSize(160, 140))
        # It paints every pixel: Qt need not repaint the (style-sheeted) dock behind it.
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self._grid: ChunkGridState | None = None
        self._cache: ChunkCache | None = None
        self._cells: ViewCells | None = None
        self._index: tuple[int | None, ...] = ()
        self._image: QImage | None = None
        self._pixels: np.ndarray[Any, Any] | None = None
        self._bytes = b""
        self._size = (140, 160)  # (height, width), as of the latest resize
        self._per_chunk = 1
        self._block = (1, 1)
        self._message = "no chunk grid"
        self._hovered: tuple[int, ...] | None = None
        self._explain: Callable[[], Callable[[tuple[int, ...]], str] | None] | None = None
        self.paints = 0
        self.builds = 0

    # -- model ---------------------------------------------------------------

    @property
    def grid(self) -> ChunkGridState | None:
        return self._grid

    def set_grid(
        self,
        grid: ChunkGridState | None,
        cache: ChunkCache | None = None,
        message: str = "no chunk grid",
    ) -> None:
        """Show `grid` (chunks of `cache`, for retries), or `message` when None."""
        if grid is self._grid and cache is self._cache:
            return
        self._grid, self._cache, self._message = grid, cache, message
        rank = 0 if grid is None else len(grid.shape)
        self._index = tuple([0] * max(0, rank - 2) + [None] * min(2, rank))
        self._cells = None
        self.refresh()

    def set_view(self, cells: ViewCells | None) -> None:
        """The view's chunks at this grid's level (None: no view here); shows its plane."""
        self._cells = cells
        grid = self._grid
        if cells is not None and grid is not None and len(grid.shape) >= 2:
            displayed = cells.request.displayed
            kept = (
                list(displayed[-2:]) if len(displayed) >= 2 else list(range(len(grid.shape)))[-2:]
            )
            # The plane through the view: the middle of the view's chunks on other axes.
            self._index = tuple(
                None if axis in kept else (a + b - 1) // 2
                for axis, (a, b) in enumerate(zip(cells.start, cells.stop, strict=True))
            )
        self.refresh()

    def _plane_shown(self) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
        """The view's `Shown` codes over the plane (OUTSIDE elsewhere), or None."""
        grid, cells = self._grid, self._cells
        if grid is None or cells is None:
            return None
        shown_now = cells.shown_now(grid)
        selection: list[slice | int] = []
        target: list[slice] = []
        for axis, i in enumerate(self._index):
            a, b = cells.start[axis], cells.stop[axis]
            if i is None:
                selection.append(slice(None))
                target.append(slice(a, b))
            elif a <= i < b:
                selection.append(i - a)
            else:
                return None  # the view is on another plane
        plane = np.zeros(grid.plane(self._index).shape, dtype=np.uint8)
        plane[tuple(target)] = shown_now[tuple(selection)]
        return plane

    @property
    def touched(self) -> set[tuple[int, int]]:
        """The cells (row, column) of the shown plane that the view touches."""
        shown = self._plane_shown()
        if shown is None:
            return set()
        rows, cols = np.nonzero(shown)
        return {(int(r), int(c)) for r, c in zip(rows, cols, strict=True)}

    def cell_color(self, row: int, column: int) -> tuple[int, int, int]:
        """The colour drawn for a cell (or its block when aggregated), outside its mark."""
        if self._pixels is None:
            raise ValueError("no grid shown")
        pixel = self._pixels[
            row // self._block[0] * self._per_chunk, column // self._block[1] * self._per_chunk
        ]
        return (int(pixel[2]), int(pixel[1]), int(pixel[0]))  # stored blue, green, red

    def mark_color(self, row: int, column: int) -> tuple[int, int, int] | None:
        """The colour of a cell's mark, or None when it has none (final, outside, or small)."""
        if self._pixels is None or self._per_chunk == 1:
            return None
        centre = self._per_chunk // 2
        mark = self._pixels[row * self._per_chunk + centre, column * self._per_chunk + centre]
        color = (int(mark[2]), int(mark[1]), int(mark[0]))
        return None if color == self.cell_color(row, column) else color

    def refresh(self) -> None:
        """Rebuild the image from the grid's codes and the view, and repaint."""
        grid = self._grid
        if grid is None or not grid.shape or min(grid.shape) == 0:
            self._image = self._pixels = None
            self.update()
            return
        self.builds += 1
        codes = grid.plane(self._index) if len(grid.shape) >= 2 else grid.codes[None, :]
        marks = len(grid.shape) >= 2 and self._side(codes.shape) >= _MARK_MIN_PX
        pixels, self._per_chunk, self._block = cell_image(
            codes, self._plane_shown() if marks else None, self._size, bgra=True
        )
        # 32-bit pixels: Qt scales them several times faster than 24-bit ones.
        self._pixels = np.ascontiguousarray(pixels)
        height, width = self._pixels.shape[:2]
        self._bytes = self._pixels.tobytes()  # the QImage reads these bytes: keep them
        self._image = QImage(self._bytes, width, height, 4 * width, QImage.Format.Format_RGB32)
        self.update()

    @logged_once
    def resizeEvent(self, event: QResizeEvent | None) -> None:
        super().resizeEvent(event)
        # Kept in Python: each call into Qt may wait for the GIL behind loading workers.
        self._size = (max(1, self.height()), max(1, self.width()))
        self.refresh()  # marks and aggregation depend on the size

    # -- geometry ------------------------------------------------------------

    def _plane_axes(self) -> list[int]:
        return [axis for axis, i in enumerate(self._index) if i is None]

    def _plane_shape(self) -> tuple[int, int]:
        assert self._grid is not None
        if len(self._grid.shape) == 1:
            return 1, self._grid.shape[0]
        rows, cols = self._plane_axes()
        return self._grid.shape[rows], self._grid.shape[cols]

    def _side(self, shape: tuple[int, ...] | None = None) -> float:
        """The side of a chunk on screen: square cells, the grid as large as the widget allows."""
        rows, cols = shape if shape is not None else self._plane_shape()
        height, width = self._size
        return min((height - 2) / max(rows, 1), (width - 2) / max(cols, 1))

    def _origin(self) -> tuple[float, float]:
        """The top-left corner of the grid (centred in the widget)."""
        rows, cols = self._plane_shape()
        side = self._side()
        height, width = self._size
        return (height - rows * side) / 2, (width - cols * side) / 2

    def cell_at(self, point: QPoint) -> tuple[int, ...] | None:
        """The grid coordinates under a widget position, or None."""
        if self._grid is None or self._image is None:
            return None
        side = self._side()
        top, left = self._origin()
        row, col = int((point.y() - top) // side), int((point.x() - left) // side)
        rows, cols = self._plane_shape()
        if not (0 <= row < rows and 0 <= col < cols):
            return None
        if len(self._grid.shape) == 1:
            return (col,)
        coords = [i if i is not None else 0 for i in self._index]
        row_axis, col_axis = self._plane_axes()
        coords[row_axis], coords[col_axis] = row, col
        return tuple(coords)

    # -- painting and interaction ---------------------------------------------

    @logged_once
    def paintEvent(self, event: QPaintEvent | None) -> None:
        self.paints += 1
        with painting(self) as painter:
            self._paint(painter)

    def _paint(self, painter: QPainter) -> None:
        painter.fillRect(self.rect(), BACKGROUND)
        if self._image is None or self._grid is None:
            painter.setPen(QColor(200, 200, 200))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self._message)
            return
        side = self._side()
        top, left = self._origin()
        rows, cols = self._plane_shape()
        extent = QRectF(left, top, cols * side, rows * side)
        painter.drawImage(extent, self._image)
        if side >= _LINES_MIN_PX:
            painter.setPen(QPen(_GRID_LINE, 1))
            lines = [
                QLineF(left + c * side, top, left + c * side, top + rows * side)
                for c in range(1, cols)
            ]
            lines += [
                QLineF(left, top + r * side, left + cols * side, top + r * side)
                for r in range(1, rows)
            ]
            if lines:
                # A list, which every binding takes (PySide6 takes no varargs; PyQt6's
                # stubs say sip.array, its runtime takes a list too).
                painter.drawLines(lines)  # type: ignore[call-overload]
        painter.setPen(QPen(_FRAME, 1))
        painter.drawRect(extent.adjusted(-1, -1, 0, 0))
        self._paint_view(painter, top, left, side)

    def _paint_view(self, painter: QPainter, top: float, left: float, side: float) -> None:
        cells, grid = self._cells, self._grid
        if cells is None or grid is None or len(grid.shape) < 2:
            return
        axes = self._plane_axes()
        if any(
            i is not None and not cells.start[axis] <= i < cells.stop[axis]
            for axis, i in enumerate(self._index)
        ):
            return
        (r0, r1), (c0, c1) = ((cells.start[a], cells.stop[a]) for a in axes)
        painter.setPen(QPen(_TOUCHED, 1))
        painter.drawRect(
            QRectF(left + c0 * side, top + r0 * side, (c1 - c0) * side, (r1 - r0) * side)
        )
        # The region napari asked for, in chunk units (fractions within edge chunks).
        units = []
        for axis in axes:
            lo, hi = cells.request.box[axis]
            units.append((self._units(axis, lo), self._units(axis, hi)))
        (y0, y1), (x0, x1) = units
        painter.setPen(QPen(_REQUESTED, 2))
        painter.drawRect(
            QRectF(left + x0 * side, top + y0 * side, (x1 - x0) * side, (y1 - y0) * side)
        )

    def _units(self, axis: int, value: int) -> float:
        assert self._grid is not None
        starts = self._grid.starts[axis]
        extent = self._grid.source.shape[axis]
        chunk = max(0, int(np.searchsorted(starts, value, side="right")) - 1)
        begin = int(starts[chunk])
        end = int(starts[chunk + 1]) if chunk + 1 < len(starts) else extent
        return chunk + (value - begin) / max(end - begin, 1)

    def set_explainer(self, explain: Callable[[tuple[int, ...]], str]) -> None:
        """Where hover texts come from (by default a chunk's state).

        A bound method is held weakly: the map never keeps its owner alive.
        """
        self._explain = weakly(explain)

    def describe(self, coords: tuple[int, ...]) -> str:
        """The hover text of a chunk."""
        explain = None if self._explain is None else self._explain()
        if explain is not None:
            return explain(coords)
        assert self._grid is not None
        return f"chunk {coords}: {self._grid.state_at(coords).name}"

    def mouseMoveEvent(self, event: QMouseEvent | None) -> None:
        if event is None:
            return
        coords = self.cell_at(event.position().toPoint())
        if coords is None:
            self._hovered = None
            QToolTip.hideText()
            return
        if coords != self._hovered:
            self._hovered = coords
            QToolTip.showText(event.globalPosition().toPoint(), self.describe(coords), self)

    def leaveEvent(self, event: Any) -> None:
        self._hovered = None
        super().leaveEvent(event)

    def mousePressEvent(self, event: QMouseEvent | None) -> None:
        if event is None or self._grid is None:
            return
        coords = self.cell_at(event.position().toPoint())
        if coords is None or self._grid.state_at(coords) is not ChunkState.FAILED:
            return
        menu = QMenu(self)
        action = menu.addAction(f"Retry chunk {coords}")
        chosen = menu.exec(event.globalPosition().toPoint())
        menu.deleteLater()
        if chosen is action:
            self.retry(coords)

    def retry(self, coords: tuple[int, ...]) -> bool:
        """Re-queue the FAILED chunk at `coords`; False if it is not FAILED."""
        grid, cache = self._grid, self._cache
        return grid is not None and cache is not None and cache.retry(grid.key_at(coords))


def state_legend() -> QGridLayout:
    """The map's legend: a swatch of each state's colour, three to a row."""
    legend = QGridLayout()
    legend.setSpacing(3)
    for i, state in enumerate(ChunkState):
        swatch = QLabel(state.name)
        r, g, b = STATE_COLORS[state]
        swatch.setStyleSheet(
            f"background: rgb({r},{g},{b}); color: black; padding: 1px 4px; border-radius: 3px"
        )
        legend.addWidget(swatch, i // 3, i % 3)
    return legend


def marks_legend() -> QLabel:
    """The legend of the marks on the view's chunks and of the two rectangles."""
    marks = QLabel(
        "In the view: "
        + " · ".join(
            f"<span style='background:#5a6478;color:{_hex(MARKER_COLORS[shown])}'>&nbsp;■"
            f"&nbsp;</span> {text}"
            for shown, text in (
                (Shown.PROVISIONAL, "provisional (a coarser level)"),
                (Shown.FILL, "fill value"),
            )
        )
        + " · no mark: final. <span style='color:#ffffff'>White</span>: the view's "
        "chunks; <span style='color:#ff8c00'>orange</span>: the region napari asked for."
    )
    marks.setWordWrap(True)
    return marks


def _hex(color: tuple[int, int, int] | None) -> str:
    r, g, b = color or (0, 0, 0)
    return f"#{r:02x}{g:02x}{b:02x}"
