"""HTTP connections belong to their store: arrays opened and dropped (or closed) leave none.

Issue 50: arrays opened over HTTP through one shared cache and dropped kept their
keep-alive sockets (about 32 per open; 50 layers added and removed left 1,602 sockets,
past a macOS shell's limit of 256 descriptors). Here 50 arrays are opened on the loopback
`FaultyServer`, read whole against zarr-python's writer, and dropped or closed; the
process's open file descriptors (``/proc/self/fd``: the client's sockets and the
in-process server's) must come back to what they were: at once when the store goes
(its cache closed), within the idle timeout of a connection when a shared cache keeps
the store for its chunks.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core.cache import ChunkCache
from napari_lazy_zarr.core.storage.remote_config import POOL_IDLE_SECONDS

if TYPE_CHECKING:
    from tests.remote.server import FaultyServer

    Served = tuple[FaultyServer, np.ndarray[Any, Any]]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

OPENS = 50
SLACK = 8  # descriptors the run may keep (a pool thread's, the server's listening socket)
BOUND = 3 * POOL_IDLE_SECONDS  # seconds idle sockets may take to close


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def settled(limit: int, timeout: float) -> int:
    """The open descriptors once at most `limit` (sockets close on other threads), or after
    `timeout` seconds."""
    wake = threading.Event()
    deadline = time.monotonic() + timeout
    count = open_descriptors()
    while count > limit and time.monotonic() < deadline:
        gc.collect()
        wake.wait(0.05)
        count = open_descriptors()
    return count


@pytest.mark.parametrize("how", ["dropped from a shared cache", "closed with its own cache"])
def test_arrays_opened_over_http_leave_no_sockets(served: Served, how: str) -> None:
    server, data = served
    url = f"{server.url}/a.zarr"
    shared = ChunkCache(1 << 26)
    np.testing.assert_array_equal(open_array(url, cache=shared)[...].result(timeout=BOUND), data)
    gc.collect()
    before = open_descriptors()
    for _ in range(OPENS):
        if how.startswith("dropped"):
            array = open_array(url, cache=shared)
            np.testing.assert_array_equal(array[...].result(timeout=BOUND), data)
        else:
            array = open_array(url)
            np.testing.assert_array_equal(array[...].result(timeout=BOUND), data)
            array.cache.close()
        del array
    after = settled(before + SLACK, BOUND)
    shared.close()
    # The stores of one server and configuration share a pool: the opens do not each connect.
    assert 0 < server.faults.connections < OPENS
    assert after <= before + SLACK, f"{after - before} descriptors more after {OPENS} opens"
