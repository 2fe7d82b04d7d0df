"""The paint and timer guard: a failing paint or timer slot is logged once and crashes nothing.

Under PyQt5 and PyQt6 an exception escaping a paint event or a slot aborts a
process that installed no `sys.excepthook` (a script); under PySide6 a
painter left active on a widget being destroyed segfaults. The widgets are
real (`QSparklines` handed a row whose colour Qt rejects); the process-level
checks run a script under the binding of this test run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import qtpy
from qtpy.QtCore import QTimer

from napari_lazy_zarr.widgets._guarded import logged_once
from napari_lazy_zarr.widgets._sparkline import QSparklines

if TYPE_CHECKING:
    import logging

    from pytestqt.qtbot import QtBot

_BAD_ROW = ("loaded MiB/s", (1.0, 2.0, 3.0), "3.0", (70, 190))  # QColor(70, 190): a TypeError
_GOOD_ROW = ("loaded MiB/s", (1.0, 2.0, 3.0), "3.0", (70, 190, 110))


def test_a_failing_paint_is_logged_once_and_the_painter_ended(
    qtbot: QtBot, guarded_errors: list[logging.LogRecord]
) -> None:
    chart = QSparklines(capacity=10)
    qtbot.addWidget(chart)
    chart.resize(300, 40)
    chart.show()
    qtbot.waitExposed(chart)
    before = chart.paints
    chart.set_series([_BAD_ROW])  # type: ignore[list-item]
    for frame in range(1, 6):
        chart.update()  # a repaint request, as at every refresh
        qtbot.waitUntil(lambda frame=frame: chart.paints - before >= frame, timeout=5_000)
    assert len(guarded_errors) == 1  # once, not per frame
    record = guarded_errors[0]
    assert "QSparklines.paintEvent" in record.getMessage()
    assert record.exc_info is not None
    assert record.exc_info[0] is TypeError
    # The painter was ended: the widget paints again once its data is good.
    chart.set_series([_GOOD_ROW])
    image = chart.grab().toImage()
    line = {image.pixelColor(x, y).getRgb()[:3] for x in range(image.width()) for y in range(40)}
    assert (70, 190, 110) in line
    assert len(guarded_errors) == 1


def test_a_failing_timer_slot_is_logged_once(
    qtbot: QtBot, guarded_errors: list[logging.LogRecord]
) -> None:
    calls: list[int] = []

    @logged_once
    def tick() -> None:
        calls.append(1)
        raise RuntimeError("the cache went away")

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    timer.start()
    try:
        qtbot.waitUntil(lambda: len(calls) >= 4, timeout=5_000)
    finally:
        timer.stop()
    assert len(guarded_errors) == 1
    assert "the cache went away" in str(guarded_errors[0].exc_info[1])  # type: ignore[index]


_SCRIPT = """
import logging, sys
from qtpy.QtCore import QTimer
from qtpy.QtWidgets import QApplication
from napari_lazy_zarr.widgets._guarded import logged_once
from napari_lazy_zarr.widgets._sparkline import QSparklines

logging.basicConfig(level=logging.ERROR, format="LOGGED %(message)s")
app = QApplication([])
chart = QSparklines(capacity=10)
chart.resize(300, 40)
chart.show()
chart.set_series([BAD_ROW])
ticks = []

@logged_once
def tick():
    ticks.append(1)
    chart.repaint()
    if len(ticks) == 5:
        app.quit()
    raise ValueError("a bad tick")

timer = QTimer()
timer.timeout.connect(tick)
timer.start(5)
app.exec()
chart.close()
print("exited normally after", len(ticks), "ticks")
"""


def test_a_script_survives_failing_paints_and_timer_slots() -> None:
    script = textwrap.dedent(_SCRIPT).replace("BAD_ROW", repr(_BAD_ROW))
    env = {**os.environ, "QT_API": qtpy.API_NAME.lower(), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "exited normally after 5 ticks" in done.stdout
    logged = [line for line in done.stderr.splitlines() if line.startswith("LOGGED")]
    assert len(logged) == 2, done.stderr  # the paint's error and the tick's, once each
