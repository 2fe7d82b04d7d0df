"""The plugin's page in napari's Preferences: napari sees it, saves it, the plugin follows it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr._preferences import PLUGIN_NAME, plugin_preferences, watch_preferences
from napari_lazy_zarr._reader import shared_cache
from napari_lazy_zarr.core.cache import default_concurrency
from napari_lazy_zarr.core.settings import Settings, current_settings

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pytestqt.qtbot import QtBot

_MIB = 1 << 20


@pytest.fixture(autouse=True)
def no_other_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No settings file and no variables: the Preferences page is the only source."""
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "absent.toml"))
    for name in Settings.model_fields:
        monkeypatch.delenv(Settings.setting(name).variable, raising=False)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "a.zarr"
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    zarr.create_array(str(path), shape=data.shape, chunks=(32, 32), dtype="u2")[...] = data
    return path


def test_napari_sees_every_field() -> None:
    from napari.settings import get_plugin_settings

    page = get_plugin_settings(PLUGIN_NAME)
    shown = {
        (section, key): value
        for section, values in page.model_dump().items()
        for key, value in values.items()
    }
    defaults = Settings()
    assert shown == {
        (Settings.setting(name).section, name): getattr(defaults, name)
        for name in Settings.model_fields
        if Settings.setting(name).preferences  # secrets (headers) are not on the page
    }
    assert page.display_name == "napari-lazy-zarr"


def test_a_changed_value_persists_into_a_new_napari(store: Path) -> None:
    """Saved by napari beside its own settings; a new process's viewer and cache use it."""
    page = plugin_preferences()
    page.cache.total_bytes_limit_mib = 96
    page.reading.backend = "zarr"
    assert os.path.exists(page.config_path)  # napari saved it at once
    # As the command line does it: the plugin's cache is made before napari's settings load.
    script = textwrap.dedent(
        f"""
        import sys
        import napari
        from napari_lazy_zarr import configure
        from napari_lazy_zarr._reader import shared_cache
        configure(concurrency=2)
        assert "napari.settings" not in sys.modules
        viewer = napari.Viewer(show=False)
        from napari.settings import get_plugin_settings
        viewer.open({str(store)!r}, plugin="napari-lazy-zarr")
        page = get_plugin_settings("napari-lazy-zarr")
        print(page.cache.total_bytes_limit_mib, page.reading.backend,
              shared_cache().total_bytes_limit, shared_cache().concurrency)
        viewer.close()
        """
    )
    env = {**os.environ, "NAPARI_CONFIG": os.environ["NAPARI_CONFIG"]}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split()[-4:] == ["96", "zarr", str(96 * _MIB), "2"]


def test_the_shared_cache_follows_the_page_live(
    make_napari_viewer: Callable[..., Any], store: Path
) -> None:
    from napari_lazy_zarr._layer_data import loader_of
    from napari_lazy_zarr._reader import watch_viewer

    viewer = make_napari_viewer()
    watch_viewer(viewer)
    (layer,) = viewer.open(str(store), plugin="napari-lazy-zarr")
    cache = shared_cache()
    assert cache.total_bytes_limit == Settings().total_bytes_limit
    page = plugin_preferences()
    page.cache.total_bytes_limit_mib = 7
    assert cache.total_bytes_limit == 7 * _MIB
    page.cache.concurrency = 3
    assert cache.concurrency == 3
    page.cache.concurrency = 0
    assert cache.concurrency == default_concurrency()
    loader = loader_of(layer)
    assert loader.volume_voxels == Settings().volume_voxels
    page.reading.volume_mivoxels = 3  # the open layers get a new 3D budget
    assert loader.volume_voxels == 3 * _MIB


def test_a_variable_beats_the_page(monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    page = plugin_preferences()
    page.cache.concurrency = 5
    page.cache.total_bytes_limit_mib = 50
    monkeypatch.setenv("NAPARI_LAZY_ZARR_CONCURRENCY", "2")
    watch_preferences()
    assert current_settings().concurrency == 2
    assert current_settings().total_bytes_limit_mib == 50  # the page's, no variable for it
    cache = shared_cache()
    assert (cache.concurrency, cache.total_bytes_limit) == (2, 50 * _MIB)
    page.cache.concurrency = 6  # still overridden
    assert cache.concurrency == 2


def test_the_settings_file_is_the_fallback_without_napari_preferences(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("[cache]\nconcurrency = 4\n")
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(settings))
    plugin_preferences().cache.concurrency = 9
    watch_preferences()
    assert current_settings().concurrency == 9  # inside napari the page beats the file
    # A napari without plugin preferences (or none at all): the import fails.
    monkeypatch.setitem(sys.modules, "napari.settings", None)
    assert plugin_preferences() is None
    assert current_settings().concurrency == 4


def test_an_older_napari_is_told_where_the_settings_are(
    monkeypatch: pytest.MonkeyPatch, store: Path
) -> None:
    import types

    from napari_lazy_zarr._reader import read_zarr
    from napari_lazy_zarr.core.settings import settings_path

    # napari before 0.9: its settings module has no plugin pages (no get_plugin_settings).
    monkeypatch.setitem(sys.modules, "napari.settings", types.ModuleType("napari.settings"))
    with pytest.warns(UserWarning, match="has no Plugin Preferences page") as told:
        read_zarr(str(store))
    assert settings_path() in str(told[0].message)
    assert "NAPARI_LAZY_ZARR_" in str(told[0].message)


def test_the_inspectors_controls_write_to_the_page(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, store: Path
) -> None:
    from qtpy.QtWidgets import QApplication

    from napari_lazy_zarr._reader import watch_viewer

    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    viewer.open(str(store), plugin="napari-lazy-zarr")
    dock, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    QApplication.processEvents()
    page = plugin_preferences()
    inspector.capacity.value = 300
    inspector.concurrency.value = 7
    assert (page.cache.total_bytes_limit_mib, page.cache.concurrency) == (300, 7)
    assert "total_bytes_limit_mib: 300" in page.config_path.read_text()  # saved
    assert (shared_cache().total_bytes_limit, shared_cache().concurrency) == (300 * _MIB, 7)
    viewer.window.remove_dock_widget(dock)


def test_the_inspectors_controls_follow_the_page(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, store: Path
) -> None:
    from qtpy.QtWidgets import QApplication

    from napari_lazy_zarr._reader import configure, watch_viewer

    viewer = make_napari_viewer(show=True)
    watch_viewer(viewer)
    viewer.open(str(store), plugin="napari-lazy-zarr")
    dock, inspector = viewer.window.add_plugin_dock_widget("napari-lazy-zarr", "Chunk inspector")
    QApplication.processEvents()
    inspector.tabs.setCurrentWidget(inspector.cache_controls)
    page = plugin_preferences()
    page.cache.total_bytes_limit_mib = 200  # typed on the Preferences page: applies live...
    page.cache.concurrency = 6
    assert (shared_cache().total_bytes_limit, shared_cache().concurrency) == (200 * _MIB, 6)
    # ... and the inspector's own controls show it at their next refresh.
    qtbot.waitUntil(lambda: (inspector.capacity.value, inspector.concurrency.value) == (200, 6))
    # A capacity of no whole MiB (the command line's --total-bytes-limit) is shown rounded
    # down, never written back to the cache or the page.
    configure(total_bytes_limit=1_000_000_000)
    qtbot.waitUntil(lambda: inspector.capacity.value == 1_000_000_000 // _MIB)
    assert shared_cache().total_bytes_limit == 1_000_000_000
    assert page.cache.total_bytes_limit_mib == 200
    viewer.window.remove_dock_widget(dock)


def test_a_worker_thread_reads_the_page() -> None:
    """Stores open on worker threads too (a plate's fields): they see the page's values."""
    from concurrent.futures import ThreadPoolExecutor

    watch_preferences()
    plugin_preferences().timeouts.read_timeout = 2.5
    with ThreadPoolExecutor(1) as pool:
        timeouts = pool.submit(lambda: current_settings().timeouts).result(timeout=10)
    assert timeouts.read == 2.5


def test_a_half_typed_remote_does_not_stop_the_live_settings(tmp_path: Path) -> None:
    """napari cannot check an Allowed remotes entry: it is named when a reference file needs it."""
    from napari_lazy_zarr.core.errors import MetadataError
    from napari_lazy_zarr.core.storage.policy import ReferencePolicy

    cache = shared_cache()
    page = plugin_preferences()
    page.references.allowed_remotes = "https:"  # on its way to "https://data.example.org"
    page.cache.total_bytes_limit_mib = 8
    assert cache.total_bytes_limit == 8 * _MIB
    with pytest.raises(MetadataError, match=r"napari Preferences: .*allowed_remotes: 'https:'"):
        ReferencePolicy.from_settings()
