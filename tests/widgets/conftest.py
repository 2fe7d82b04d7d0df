"""Widget tests reuse the napari tests' fixtures (display check, fresh plugin cache, stores)."""

from tests.napari.conftest import (
    fresh_shared_cache,
    ome_store,
    pytest_collection_modifyitems,
    recorded_reads,
)

__all__ = ["fresh_shared_cache", "ome_store", "pytest_collection_modifyitems", "recorded_reads"]
