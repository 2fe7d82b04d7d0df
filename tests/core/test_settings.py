"""The plugin's time caps from the settings file and the environment."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.retry import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.settings import timeouts_from_settings

if TYPE_CHECKING:
    from pathlib import Path


def _env(path: Path, **more: str) -> dict[str, str]:
    return {"NAPARI_LAZY_ZARR_SETTINGS": str(path), **more}


def test_no_settings_are_the_defaults(tmp_path: Path) -> None:
    assert timeouts_from_settings(_env(tmp_path / "absent.toml")) == DEFAULT_TIMEOUTS


def test_the_file_then_the_environment(tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("[timeouts]\nconnect = 2\nread = 3.5\n")
    assert timeouts_from_settings(_env(settings)) == Timeouts(connect=2, read=3.5)
    env = _env(settings, NAPARI_LAZY_ZARR_TIMEOUT_READ="7", NAPARI_LAZY_ZARR_TIMEOUT_TOTAL="9")
    assert timeouts_from_settings(env) == Timeouts(connect=2, read=7, total=9)


@pytest.mark.parametrize(
    ("text", "variable", "message"),
    [
        ("[timeouts]\nread = -1\n", None, "read"),
        ("[timeouts]\nread = nan\n", None, "read"),
        ("[timeouts]\nread = true\n", None, "read"),
        ("[timeouts]\nidle = 1\n", None, "'idle' is not a setting"),
        ("timeouts = 3\n", None, "must be a table"),
        ("[timeouts\n", None, "cannot read"),
        ("", "inf", "NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"),
        ("", "soon", "NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"),
    ],
)
def test_bad_values_are_refused_by_name(
    tmp_path: Path, text: str, variable: str | None, message: str
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    env = _env(settings)
    if variable is not None:
        env["NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"] = variable
    with pytest.raises(MetadataError, match=message):
        timeouts_from_settings(env)


def test_a_fifo_settings_file_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    with pytest.raises(MetadataError, match="not a regular file"):
        timeouts_from_settings(_env(fifo))


def test_the_reader_opens_urls_within_the_users_timeouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that never answers: the open fails clearly after the user's read cap."""
    import time

    import zarr

    from napari_lazy_zarr.core.layout import describe_store
    from tests.remote.server import FaultyServer

    zarr.create_array(str(tmp_path / "a.zarr"), shape=(4, 4), chunks=(2, 2), dtype="u1")
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("NAPARI_LAZY_ZARR_TIMEOUT_READ", "0.3")
    with FaultyServer(tmp_path) as server:
        server.faults.silent.add("*")
        started = time.monotonic()
        with pytest.raises(MetadataError, match=r"a\.zarr"):
            describe_store(f"{server.url}/a.zarr")
        # The default read cap is 10 s; the user's 0.3 s applied (each document once,
        # a timed-out metadata read is not retried).
        assert time.monotonic() - started < 5


def test_the_backend_comes_from_the_settings_file_then_the_environment(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.settings import backend_from_settings

    settings = tmp_path / "settings.toml"
    env = {"NAPARI_LAZY_ZARR_SETTINGS": str(settings)}
    assert backend_from_settings(env) == "auto"
    settings.write_text('[reading]\nbackend = "tensorstore"\n')
    assert backend_from_settings(env) == "tensorstore"
    assert backend_from_settings({**env, "NAPARI_LAZY_ZARR_BACKEND": "zarr"}) == "zarr"
    with pytest.raises(MetadataError, match="NAPARI_LAZY_ZARR_BACKEND: unknown backend 'fast'"):
        backend_from_settings({**env, "NAPARI_LAZY_ZARR_BACKEND": "fast"})
    settings.write_text("[reading]\nbackend = 3\n")
    with pytest.raises(MetadataError, match=r"\[reading\] backend: unknown backend 3"):
        backend_from_settings(env)
    settings.write_text('[reading]\nbackends = "zarr"\n')
    with pytest.raises(MetadataError, match=r"\[reading\] 'backends' is not a setting"):
        backend_from_settings(env)


def test_the_readers_levels_open_with_the_chosen_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np
    import zarr

    from napari_lazy_zarr.core.backends import TensorStoreChunkSource
    from napari_lazy_zarr.core.layout import describe_store, open_level_sources
    from napari_lazy_zarr.core.zarr_source import ZarrChunkSource

    path = tmp_path / "a.zarr"
    data = np.arange(64 * 48, dtype="u2").reshape(64, 48)
    zarr.create_array(str(path), shape=data.shape, chunks=(32, 32), dtype="u2")[...] = data
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "none.toml"))
    (image,) = describe_store(path)
    (source,) = open_level_sources(path, image)
    assert type(source) is ZarrChunkSource  # "auto"
    monkeypatch.setenv("NAPARI_LAZY_ZARR_BACKEND", "tensorstore")
    (source,) = open_level_sources(path, image)
    assert isinstance(source, TensorStoreChunkSource)
    np.testing.assert_array_equal(source.read_chunk((1, 1)), data[32:, 32:])
