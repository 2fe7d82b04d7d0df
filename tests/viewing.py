"""Reading a `ViewController` as napari does, for tests: again after each `view_changed`."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from napari_lazy_zarr.core.viewport import ViewController


def read_settled(
    controller: ViewController, level: int, view: Any, *, kind: Any = "view", timeout: float = 30
) -> np.ndarray[Any, Any]:
    """Read `view` as napari would until the screen is final (`ViewController.settled`):
    read, apply, and read again each time `view_changed` asks, waiting on that signal."""
    changed = threading.Event()
    controller.view_changed.connect(changed.set)
    deadline = time.monotonic() + timeout
    try:
        while True:
            changed.clear()
            data = controller.read(level, view, kind=kind)
            controller.slice_applied()
            if controller.wait_until_settled(timeout=0):
                return data
            if not changed.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"the view did not settle within {timeout} s")
    finally:
        controller.view_changed.disconnect(changed.set)
