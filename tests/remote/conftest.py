"""Remote tests: a real HTTP server on 127.0.0.1 serving real zarr stores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from tests.napari.conftest import fresh_shared_cache, pytest_collection_modifyitems
from tests.remote.server import FaultyServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def make_store(root: Path, name: str, *, shards: Any = None) -> np.ndarray[Any, Any]:
    data = (np.arange(256 * 320, dtype=np.uint32) * 7 % 65_521).astype(np.uint16).reshape(256, 320)
    array = zarr.create_array(
        str(root / name), shape=data.shape, chunks=(32, 32), shards=shards, dtype=data.dtype
    )
    array[...] = data
    return data


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FaultyServer, np.ndarray[Any, Any]]]:
    data = make_store(tmp_path, "a.zarr")
    make_store(tmp_path, "s.zarr", shards=(128, 160))
    with FaultyServer(tmp_path) as server:
        yield server, data


__all__ = ["fresh_shared_cache", "make_store", "pytest_collection_modifyitems", "served"]
