"""`QChunkMap`: every chunk of a level as a cell coloured by state, the view outlined."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from qtpy.QtCore import QPoint, QRectF, QSize, Qt
from qtpy.QtGui import QColor, QImage, QMouseEvent, QPainter, QPen
from qtpy.QtWidgets import QMenu, QToolTip, QWidget

from napari_lazy_zarr.core import ChunkState
from napari_lazy_zarr.widgets._grid_state import ChunkGridState, keys_coords, rgb_blocks

if TYPE_CHECKING:
    from collections.abc import Sequence

    from qtpy.QtGui import QPaintEvent

    from napari_lazy_zarr.core import ChunkKey

__all__ = ["QChunkMap"]


class QChunkMap(QWidget):
    """Paints a `ChunkGridState` plane; hover shows a chunk, clicking a FAILED one offers retry.

    The plane is the 2D grid of the displayed axes at the current position of
    the others (`set_plane`). Grids larger than the widget are aggregated into
    blocks coloured by the mix of their chunks' states.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setMinimumSize(QSize(160, 160))
        self._grid: ChunkGridState | None = None
        self._index: tuple[int | None, ...] = ()
        self._touched: set[tuple[int, int]] = set()
        self._viewport: tuple[tuple[float, float], tuple[float, float]] | None = None
        self._image: QImage | None = None
        self._block = (1, 1)
        self.paints = 0

    # -- model ---------------------------------------------------------------

    @property
    def grid(self) -> ChunkGridState | None:
        return self._grid

    def set_grid(self, grid: ChunkGridState | None) -> None:
        self._grid = grid
        rank = 0 if grid is None else len(grid.shape)
        self._index = tuple([0] * max(0, rank - 2) + [None] * min(2, rank))
        self._touched = set()
        self._viewport = None
        self.refresh()

    def set_plane(self, index: Sequence[int | None]) -> None:
        """Which plane of an nD grid to show: chunk indices, None for the two displayed axes."""
        self._index = tuple(index)
        self.refresh()

    def set_view(
        self,
        keys: frozenset[ChunkKey],
        viewport: tuple[tuple[float, float], tuple[float, float]] | None,
    ) -> None:
        """Outline the chunks `keys` touch; `viewport` is ((y0, x0), (y1, x1)) in chunk units."""
        grid = self._grid
        touched = set() if grid is None else keys_coords(grid, keys)
        self._touched = {self._plane_coords(c) for c in touched if self._in_plane(c)}
        self._viewport = viewport
        self.update()

    @property
    def touched(self) -> set[tuple[int, int]]:
        """The outlined cells (row, column) of the shown plane."""
        return set(self._touched)

    def cell_color(self, row: int, column: int) -> tuple[int, int, int]:
        """The colour drawn for a cell (or its block when aggregated)."""
        if self._image is None:
            raise ValueError("no grid shown")
        pixel = self._image.pixelColor(column // self._block[1], row // self._block[0])
        return (pixel.red(), pixel.green(), pixel.blue())

    def refresh(self) -> None:
        """Rebuild the image from the grid's codes and repaint."""
        grid = self._grid
        if grid is None or not grid.shape or len(grid.shape) < 2:
            self._image = None
        else:
            plane = grid.plane(self._index)
            rgb, self._block = rgb_blocks(plane, (max(1, self.height()), max(1, self.width())))
            pixels = np.ascontiguousarray(rgb).tobytes()
            image = QImage(
                pixels, rgb.shape[1], rgb.shape[0], 3 * rgb.shape[1], QImage.Format.Format_RGB888
            )
            self._image = image.copy()  # own the pixels: `pixels` is freed after this call
        self.update()

    # -- geometry ------------------------------------------------------------

    def _plane_axes(self) -> list[int]:
        return [axis for axis, i in enumerate(self._index) if i is None]

    def _in_plane(self, coords: tuple[int, ...]) -> bool:
        return all(i is None or coords[axis] == i for axis, i in enumerate(self._index))

    def _plane_coords(self, coords: tuple[int, ...]) -> tuple[int, int]:
        rows, cols = self._plane_axes()
        return coords[rows], coords[cols]

    def _plane_shape(self) -> tuple[int, int]:
        assert self._grid is not None
        rows, cols = self._plane_axes()
        return self._grid.shape[rows], self._grid.shape[cols]

    def _cell_rect(self) -> tuple[float, float]:
        """Cell height and width: square cells, the grid as large as the widget allows."""
        rows, cols = self._plane_shape()
        side = min(self.height() / max(rows, 1), self.width() / max(cols, 1))
        return side, side

    def _origin(self) -> tuple[float, float]:
        """The top-left corner of the grid (centred in the widget)."""
        rows, cols = self._plane_shape()
        cell_h, cell_w = self._cell_rect()
        return (self.height() - rows * cell_h) / 2, (self.width() - cols * cell_w) / 2

    def cell_at(self, point: QPoint) -> tuple[int, ...] | None:
        """The grid coordinates under a widget position, or None."""
        if self._grid is None or self._image is None:
            return None
        cell_h, cell_w = self._cell_rect()
        top, left = self._origin()
        row, col = int((point.y() - top) // cell_h), int((point.x() - left) // cell_w)
        rows, cols = self._plane_shape()
        if not (0 <= row < rows and 0 <= col < cols):
            return None
        coords = [i if i is not None else 0 for i in self._index]
        row_axis, col_axis = self._plane_axes()
        coords[row_axis], coords[col_axis] = row, col
        return tuple(coords)

    # -- painting and interaction ---------------------------------------------

    def paintEvent(self, event: QPaintEvent | None) -> None:
        self.paints += 1
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(30, 32, 38))
        if self._image is None or self._grid is None:
            painter.setPen(QColor(200, 200, 200))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "no chunk grid")
            painter.end()
            return
        cell_h, cell_w = self._cell_rect()
        top, left = self._origin()
        rows, cols = self._plane_shape()
        painter.drawImage(QRectF(left, top, cols * cell_w, rows * cell_h), self._image)
        painter.setPen(QPen(QColor(255, 255, 255), 1))
        if len(self._touched) <= 4096:
            for row, col in self._touched:
                painter.drawRect(QRectF(left + col * cell_w, top + row * cell_h, cell_w, cell_h))
        if self._viewport is not None:
            (y0, x0), (y1, x1) = self._viewport
            painter.setPen(QPen(QColor(255, 140, 0), 2))
            painter.drawRect(
                QRectF(
                    left + x0 * cell_w, top + y0 * cell_h, (x1 - x0) * cell_w, (y1 - y0) * cell_h
                )
            )
        painter.end()

    def describe(self, coords: tuple[int, ...]) -> str:
        """The hover text of a chunk: key, state, size and its latest events."""
        grid = self._grid
        assert grid is not None
        key = grid.key_at(coords)
        state = grid.state_at(coords)
        data = grid.cache.lookup(key) if state is ChunkState.READY else None
        size = f"{data.nbytes / 1024:.0f} KiB" if data is not None else "not resident"
        events = [e for e in grid.cache.events() if e.key == key][-4:]
        lines = [f"chunk {coords}: {key}", f"state {state.name}, {size}"]
        lines += [f"  {e.previous.name} -> {e.current.name} ({e.reason})" for e in events]
        error = grid.cache.error(key)
        if error is not None:
            lines.append(f"error: {error}")
        if state is ChunkState.FAILED:
            lines.append("click to retry")
        return "\n".join(lines)

    def mouseMoveEvent(self, event: QMouseEvent | None) -> None:
        if event is None:
            return
        coords = self.cell_at(event.position().toPoint())
        if coords is not None:
            QToolTip.showText(event.globalPosition().toPoint(), self.describe(coords), self)

    def mousePressEvent(self, event: QMouseEvent | None) -> None:
        if event is None or self._grid is None:
            return
        coords = self.cell_at(event.position().toPoint())
        if coords is None or self._grid.state_at(coords) is not ChunkState.FAILED:
            return
        menu = QMenu(self)
        action = menu.addAction(f"Retry chunk {coords}")
        chosen = menu.exec(event.globalPosition().toPoint())
        if chosen is action:
            self.retry(coords)

    def retry(self, coords: tuple[int, ...]) -> bool:
        """Re-queue the FAILED chunk at `coords`; False if it is not FAILED."""
        grid = self._grid
        return grid is not None and grid.cache.retry(grid.key_at(coords))
