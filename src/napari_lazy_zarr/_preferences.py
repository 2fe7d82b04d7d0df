"""The plugin's page in napari's *Preferences*: reading it, following it, writing to it.

napari builds the page (*Plugin Preferences ▸ napari-lazy-zarr*) from the manifest's
``contributions.configurations`` (`core.settings.configuration_schema`, the
`Settings` model's JSON schema) and
saves it beside its own settings (``napari-lazy-zarr.yaml`` in napari's
configuration folder, or ``NAPARI_CONFIG``'s). This module reaches it through
napari's public `napari.settings.get_plugin_settings` only:

- `watch_preferences` registers the page with `core.settings.use_preferences`
  (so `current_settings` reads it) and calls back on every change, which is
  how the shared cache's capacity and loaders follow the page live;
- `write_preference` sets a value on the page (napari saves it at once): the
  chunk inspector's cache controls write through it, so they persist.

Outside napari (napari's settings not loaded), or with a napari that has no
plugin preferences, both do nothing and the settings file stays the source.
`watch_preferences` and `write_preference` are for the main thread (napari's
settings are a main-thread model); `current_settings` may run on any thread:
off the main thread it reads a snapshot of the page taken on the main thread.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core.settings import Settings, use_preferences

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PLUGIN_NAME", "plugin_preferences", "watch_preferences", "write_preference"]

PLUGIN_NAME: Final = "napari-lazy-zarr"
"""The plugin's npe2 name: the key of its page in napari's plugin settings."""

# The page we listen to (napari rebuilds its plugin settings when plugins are enabled or
# disabled, so the page can be replaced) and who wants to hear of changes.
_watched: weakref.ref[Any] | None = None
_listeners: list[Callable[[], None]] = []
# The page's non-default values, for any thread: replaced whole, never changed in place,
# so readers need no lock.
_snapshot: dict[str, dict[str, Any]] = {}


def plugin_preferences() -> Any | None:
    """napari's settings model of the plugin's page, or None without one.

    None when napari's settings are not loaded (the plugin is not running
    inside napari: a script reading with the plugin gets the settings file, and
    does not pay seconds for napari's plugin discovery), when napari has no
    plugin preferences, or does not list the plugin (disabled).
    """
    napari_settings = sys.modules.get("napari.settings")
    get_plugin_settings = getattr(napari_settings, "get_plugin_settings", None)
    if get_plugin_settings is None:
        return None
    try:
        return get_plugin_settings(PLUGIN_NAME)
    except KeyError:
        return None


def _changed_values() -> dict[str, dict[str, Any]]:
    """The page's values that differ from their defaults (what napari saves).

    Stores are opened on worker threads too (a plate's fields): they read the
    snapshot the main thread keeps, never napari's model itself.
    """
    if threading.current_thread() is threading.main_thread():
        _follow()
    return {section: dict(values) for section, values in _snapshot.items()}


def _follow() -> Any | None:
    """The current page, connected to `_on_changed` (once per page), its snapshot taken.

    A page found for the first time (napari's settings were loaded after the
    plugin's cache was made, as the command line does) counts as a change.
    """
    global _watched
    page = plugin_preferences()
    if page is not None and (_watched is None or _watched() is not page):
        page.events.changed.connect(_on_changed)
        _watched = weakref.ref(page)
        _on_changed()
    _take_snapshot(page)
    return page


def _take_snapshot(page: Any | None) -> None:
    global _snapshot
    _snapshot = {} if page is None else page.model_dump(exclude_defaults=True)


def _on_changed(_event: Any = None) -> None:
    _take_snapshot(None if _watched is None else _watched())
    for listener in list(_listeners):
        listener()


def watch_preferences(on_change: Callable[[], None] | None = None) -> bool:
    """Read the Preferences page into the settings; call `on_change` when it changes.

    Idempotent (a listener is registered once). Returns whether napari has a
    page for the plugin.
    """
    use_preferences(_changed_values)
    if on_change is not None and on_change not in _listeners:
        _listeners.append(on_change)
    return _follow() is not None


def write_preference(name: str, value: Any) -> bool:
    """Set the `Settings` field `name` on the Preferences page (napari saves it).

    Returns False, and changes nothing, without a page.

    Raises
    ------
    MetadataError
        `value` is not a valid value of the field.
    """
    page = _follow()
    if page is None:
        return False
    setting = Settings.setting(name)
    Settings(**{name: value})  # our own validation, with our own message
    section = getattr(page, setting.section)
    if getattr(section, name) != value:
        setattr(section, name, value)
    return True
