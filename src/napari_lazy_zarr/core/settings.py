"""The plugin's time caps from the environment and the settings file.

The settings file is the one `ReferencePolicy.from_settings` reads
(`settings_path`); this module reads its ``[timeouts]`` table::

    [timeouts]
    connect = 5      # seconds to establish a connection
    read = 20        # seconds a response may stay silent
    total = 60       # seconds one request may take in all

and its ``[reading]`` table, which decode backend reads zarr arrays in napari
(`napari_lazy_zarr.core.backends`)::

    [reading]
    backend = "auto"   # or "zarr", "tensorstore", "zarrs"

Environment variables override the file: ``NAPARI_LAZY_ZARR_TIMEOUT_CONNECT``,
``NAPARI_LAZY_ZARR_TIMEOUT_READ``, ``NAPARI_LAZY_ZARR_TIMEOUT_TOTAL`` and
``NAPARI_LAZY_ZARR_BACKEND``.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.manifest import settings_path
from napari_lazy_zarr.core.retry import DEFAULT_TIMEOUTS, Timeouts

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "BACKEND_VARIABLE",
    "TIMEOUT_VARIABLES",
    "backend_from_settings",
    "timeouts_from_settings",
]

_SETTINGS_BYTES: Final = 1 << 20  # a settings file is a few lines
TIMEOUT_VARIABLES: Final = {
    "connect": "NAPARI_LAZY_ZARR_TIMEOUT_CONNECT",
    "read": "NAPARI_LAZY_ZARR_TIMEOUT_READ",
    "total": "NAPARI_LAZY_ZARR_TIMEOUT_TOTAL",
}
BACKEND_VARIABLE: Final = "NAPARI_LAZY_ZARR_BACKEND"
_TABLES: Final = {"timeouts": tuple(TIMEOUT_VARIABLES), "reading": ("backend",)}


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise MetadataError(f"{where}: a number of seconds is needed, got {value!r}")
    try:
        seconds = float(value)
    except ValueError as error:
        raise MetadataError(f"{where}: a number of seconds is needed, got {value!r}") from error
    if not math.isfinite(seconds) or seconds <= 0:
        raise MetadataError(f"{where}: a finite number of seconds > 0 is needed, got {value!r}")
    return seconds


def _table(path: str, name: str) -> dict[str, Any]:
    try:
        # Non-blocking open, then fstat: a FIFO or device named as the file cannot block.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise MetadataError(f"{path}: the settings file is not a regular file")
            document = tomllib.loads(handle.read(_SETTINGS_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise MetadataError(
            f"{path}: cannot read the napari-lazy-zarr settings: {error}"
        ) from error
    table = document.get(name, {})
    if not isinstance(table, dict):
        raise MetadataError(f"{path}: {name!r} must be a table ([{name}])")
    unknown = sorted(set(table) - set(_TABLES[name]))
    if unknown:
        raise MetadataError(
            f"{path}: [{name}] {unknown[0]!r} is not a setting ({', '.join(_TABLES[name])})"
        )
    return table


def timeouts_from_settings(environ: Mapping[str, str] | None = None) -> Timeouts:
    """The user's `Timeouts`: defaults, then the settings file, then the environment.

    Raises
    ------
    MetadataError
        The settings file cannot be read, or a value is not a positive finite
        number of seconds (the message names the file or the variable).

    Examples
    --------
    >>> env = {"NAPARI_LAZY_ZARR_TIMEOUT_READ": "2.5",
    ...        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"}
    >>> timeouts_from_settings(env)
    Timeouts(connect=10.0, read=2.5, total=60.0)
    """
    env = os.environ if environ is None else environ
    path = settings_path(env)
    values = {
        name: _seconds(value, f"{path}: [timeouts] {name}")
        for name, value in _table(path, "timeouts").items()
    }
    for name, variable in TIMEOUT_VARIABLES.items():
        if env.get(variable):
            values[name] = _seconds(env[variable], variable)
    if not values:
        return DEFAULT_TIMEOUTS
    return Timeouts(
        connect=values.get("connect", DEFAULT_TIMEOUTS.connect),
        read=values.get("read", DEFAULT_TIMEOUTS.read),
        total=values.get("total", DEFAULT_TIMEOUTS.total),
    )


def backend_from_settings(environ: Mapping[str, str] | None = None) -> str:
    """The decode backend the user asked for: ``"auto"``, then the settings file's
    ``[reading] backend``, then ``NAPARI_LAZY_ZARR_BACKEND``.

    Raises
    ------
    MetadataError
        The settings file cannot be read, or the name is not ``"auto"`` or one of
        `BACKENDS` (the message names the file or the variable).

    Examples
    --------
    >>> backend_from_settings({"NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"})
    'auto'
    >>> backend_from_settings({"NAPARI_LAZY_ZARR_BACKEND": "tensorstore",
    ...                        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"})
    'tensorstore'
    """
    from napari_lazy_zarr.core.backends import BACKENDS

    env = os.environ if environ is None else environ
    path = settings_path(env)
    name: Any = _table(path, "reading").get("backend", "auto")
    where = f"{path}: [reading] backend"
    if env.get(BACKEND_VARIABLE):
        name, where = env[BACKEND_VARIABLE], BACKEND_VARIABLE
    if name != "auto" and name not in BACKENDS:
        allowed = ", ".join(repr(b) for b in ("auto", *BACKENDS))
        raise MetadataError(f"{where}: unknown backend {name!r}; choose one of {allowed}")
    return str(name)
