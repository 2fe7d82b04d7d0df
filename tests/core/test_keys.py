"""Chunk keys, zarr identities and chunk events keep their value semantics with their
hot-path shortcuts (a hash computed once; an event's slots filled directly)."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import pytest

from napari_lazy_zarr.core.keys import ChunkKey, CompositeIdentity
from napari_lazy_zarr.core.sources.zarr import ZarrIdentity
from napari_lazy_zarr.core.states import ChunkEvent, ChunkState, EventReason


def _key() -> ChunkKey:
    return ChunkKey(ZarrIdentity("/data/a.zarr", "3f2a", 7), (0, 512), (512, 1024))


def _stack_key() -> ChunkKey:
    members = (ZarrIdentity("/data/a.zarr", "3f2a", 7), ZarrIdentity("/data/b.zarr", "9c1d", 7))
    return ChunkKey(CompositeIdentity("stack", (("axis", 0),), members), (0, 0), (1, 512))


def test_equal_keys_hash_alike_and_find_each_other() -> None:
    key = _key()
    other = _key()
    assert key == other
    assert key is not other
    assert hash(key) == hash(other)
    assert {key: "chunk"}[other] == "chunk"
    assert key != ChunkKey(key.source, (0, 512), (512, 1000))
    assert key != ChunkKey(ZarrIdentity("/data/a.zarr", "3f2a", 8), (0, 512), (512, 1024))


def test_a_key_pickled_in_another_process_finds_its_chunk_here() -> None:
    """String hashes differ between processes: a key (and its zarr or composite identity)
    from a worker process must be hashed anew here, not carry the worker's hash."""
    code = (
        "import pickle, sys\n"
        "from napari_lazy_zarr.core.keys import ChunkKey\n"
        "from napari_lazy_zarr.core.sources.zarr import ZarrIdentity\n"
        "from napari_lazy_zarr.core.keys import CompositeIdentity\n"
        "key = ChunkKey(ZarrIdentity('/data/a.zarr', '3f2a', 7), (0, 512), (512, 1024))\n"
        "members = (ZarrIdentity('/data/a.zarr', '3f2a', 7),\n"
        "           ZarrIdentity('/data/b.zarr', '9c1d', 7))\n"
        "stack = ChunkKey(CompositeIdentity('stack', (('axis', 0),), members), (0, 0), (1, 512))\n"
        "sys.stdout.buffer.write(pickle.dumps((key, stack)))\n"
    )
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    pickled = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    loaded, stack = pickle.loads(pickled)
    assert loaded == _key()
    assert {_key(): "chunk"}[loaded] == "chunk"
    assert {_key().source: "array"}[loaded.source] == "array"
    assert stack == _stack_key()
    assert {_stack_key(): "chunk"}[stack] == "chunk"
    assert {_stack_key().source: "stack"}[stack.source] == "stack"


def test_chunk_events_are_frozen_values_made_positionally_or_by_name() -> None:
    key = _key()
    by_position = ChunkEvent(key, ChunkState.LOADING, ChunkState.READY, EventReason.LOADED, 1.5)
    by_name = ChunkEvent(
        key=key,
        previous=ChunkState.LOADING,
        current=ChunkState.READY,
        reason=EventReason.LOADED,
        time=1.5,
    )
    assert by_position == by_name
    assert hash(by_position) == hash(by_name)
    assert by_position.error is None
    assert (by_position.key, by_position.current, by_position.time) == (key, "ready", 1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_position.time = 2.0  # type: ignore[misc]
    error = OSError("disk")
    failed = ChunkEvent(key, ChunkState.LOADING, ChunkState.FAILED, EventReason.FAILED, 2.0, error)
    assert failed.error is error
    assert failed.detail == "failed: disk"
    assert dataclasses.replace(failed, time=3.0).time == 3.0
    assert pickle.loads(pickle.dumps(by_position)) == by_position
    with pytest.raises(TypeError):
        ChunkEvent(key, ChunkState.LOADING, ChunkState.READY)  # type: ignore[call-arg]
