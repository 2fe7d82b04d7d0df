"""The plugin's settings: one validated model, read from four places.

`Settings` is every setting the plugin has, each documented, with its default
and its bounds. `current_settings` resolves them, each later source
overriding the earlier ones:

1. the defaults (`Settings()`);
2. the settings file (`settings_path`), a TOML file whose tables and keys are
   those of napari's *Preferences* page (`SETTINGS_SECTIONS` and the
   `Settings` fields)::

       [cache]
       total_bytes_limit_mib = 2048   # the shared chunk cache's capacity
       concurrency = 8                # chunk loads in flight (0: one per core)
       remote_concurrency = 32        # ... raised to this for URLs

       [timeouts]
       connect_timeout = 5    # seconds to establish a connection
       read_timeout = 20      # seconds a response may stay silent
       total_timeout = 60     # seconds one request may take in all

       [reading]
       backend = "auto"               # or "zarr", "tensorstore", "zarrs"
       volume_mivoxels = 128          # a 3D view's voxel budget in Mi voxels (512³)

       [references]
       allowed_roots = ["/data/hdf5", "~/scans"]   # relative to the file
       allowed_remotes = ["s3://open-data", "https://data.example.org"]

       [remote]
       ca_bundle = "~/certs/lab-ca.pem"            # trusted besides the system's CAs
       proxy = "http://proxy.example.org:3128"     # else HTTPS_PROXY / HTTP_PROXY
       no_proxy = "localhost,.example.org"         # else NO_PROXY

       [remote.headers."data.example.org"]         # sent to that host only
       Authorization = "Bearer ..."
       [s3]
       s3_endpoint_url = "https://minio.example.org:9000"   # S3-compatible stores
       s3_region = "eu-west-1"
       s3_anon = true              # public buckets: unsigned requests
       s3_profile = "lab"          # a profile of ~/.aws/credentials (never a secret here)

   It is the fallback for a napari without plugin preferences, and for Python
   scripts;
3. napari's *Preferences* (*napari-lazy-zarr* under *Plugin Preferences*), when the
   plugin runs inside napari: the napari glue registers them with
   `use_preferences`. Only values that differ from the default count, as
   napari saves only those;
4. the environment variables (`Setting.variable`; the capacity
   ``NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT`` is in bytes, rounded up to MiB, and
   the voxel budget ``NAPARI_LAZY_ZARR_VOLUME_VOXELS`` in voxels, rounded up to Mi).

The two allow-lists (``allowed_roots``, ``allowed_remotes``) add up instead:
what any source allows is allowed. Request headers (``[remote.headers]``,
``NAPARI_LAZY_ZARR_HEADERS``) hold secrets: they are read from the settings
file and the environment only, never shown on the Preferences page nor in a
`Settings` repr. The napari manifest's
``contributions.configurations`` is `configuration_schema` (a test keeps the
two equal).

This module imports neither napari nor Qt.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import platformdirs

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.remote_values import (
    check_endpoint,
    check_remotes,
    parse_headers,
    parse_proxy,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

__all__ = [
    "BACKEND_VARIABLE",
    "DEFAULT_TIMEOUTS",
    "SETTINGS_SECTIONS",
    "SETTINGS_VARIABLE",
    "TIMEOUT_VARIABLES",
    "Setting",
    "Settings",
    "Timeouts",
    "backend_from_settings",
    "configuration_schema",
    "current_settings",
    "settings_path",
    "timeouts_from_settings",
    "use_preferences",
]

type Section = Literal["cache", "timeouts", "reading", "references", "remote", "s3"]
type Preferences = Mapping[str, Mapping[str, Any]]

SETTINGS_VARIABLE: Final = "NAPARI_LAZY_ZARR_SETTINGS"
"""Environment variable: the settings file to use instead of the default one."""
SETTINGS_SECTIONS: Final[dict[Section, str]] = {
    "cache": "Chunk cache",
    "timeouts": "Timeouts",
    "reading": "Reading",
    "references": "Reference files",
    "remote": "Remote access",
    "s3": "S3",
}
"""The settings' sections (TOML tables, napari configuration keys) and their titles."""
_MIB: Final = 1 << 20
_SETTINGS_BYTES: Final = 1 << 20  # a settings file is a few lines
_BACKEND_NAMES: Final = ("auto", "zarr", "tensorstore", "zarrs")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Time caps of one storage request, in seconds (each finite and > 0).

    connect
        Establishing a connection (remote stores).
    read
        Idle time between two received pieces of a response (or of a local read).
    total
        One whole request, from the first byte asked to the last received.

    A request over any cap fails with `LoadTimeoutError`, which is retried like
    other transient failures.

    Examples
    --------
    >>> Timeouts(connect=2.0).total
    60.0
    >>> Timeouts(read=float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: Timeouts.read must be a finite number of seconds > 0, got nan
    """

    connect: float = 10.0
    read: float = 10.0
    total: float = 60.0

    def __post_init__(self) -> None:
        for name in ("connect", "read", "total"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(
                    f"Timeouts.{name} must be a finite number of seconds > 0, got {value!r}"
                )


DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True, slots=True)
class Setting:
    """What one `Settings` field is: where it is set, what it may be, what it means.

    Attributes
    ----------
    section
        Its TOML table and napari configuration key (`SETTINGS_SECTIONS`).
    title
        Its label on napari's Preferences page.
    description
        What it does (shown under the label).
    variable
        The environment variable overriding it.
    minimum
        The smallest value allowed (numbers).
    maximum
        The largest value allowed (numbers).
    choices
        The values allowed (strings with a closed vocabulary).
    preferences
        Whether napari's Preferences page shows it (False: a secret, set in the
        settings file or the environment only).

    Examples
    --------
    >>> Settings.setting("concurrency").variable
    'NAPARI_LAZY_ZARR_CONCURRENCY'
    """

    section: Section
    title: str
    description: str
    variable: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    preferences: bool = True


def _field(default: Any, *, repr: bool = True, **setting: Any) -> Any:
    return field(default=default, repr=repr, metadata={"setting": Setting(**setting)})


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting of the plugin, validated (see the module's docstring for the sources).

    Attributes
    ----------
    total_bytes_limit_mib
        Capacity of the chunk cache all layers share, in MiB of decoded chunks.
    concurrency
        Chunk loads in flight in that cache; 0 is one per core.
    remote_concurrency
        Opening a URL raises the loads in flight to at least this many (remote
        chunks are latency-bound), unless `concurrency` is set.
    connect_timeout
        Seconds a remote request may take to connect.
    read_timeout
        Seconds a response may stay silent between two pieces.
    total_timeout
        Seconds one request may take in all.
    backend
        What reads and decodes zarr arrays: ``"auto"`` (zarr-python),
        ``"zarr"``, ``"tensorstore"`` or ``"zarrs"`` (`core.backends`).
    volume_mivoxels
        A 3D view shows the finest level with at most this many Mi voxels (1024²
        voxels each: 128 is 512³). In Mi, not voxels: napari's Preferences field
        showed "13421772" of 134217728 under PyQt5, too narrow for nine digits.
    allowed_roots
        Folders reference files may also point into, separated by
        ``os.pathsep`` (``:``; ``;`` on Windows).
    allowed_remotes
        Protocols and locations reference files may reach, separated by
        commas or spaces (`ReferencePolicy`).
    ca_bundle
        A PEM file (or a folder of them) of certificate authorities trusted for
        ``https://`` besides the system's (`core.storage.remote_config`).
    proxy
        The proxy for ``http(s)://`` URLs (``http://[user:password@]host:port``);
        empty: ``HTTPS_PROXY`` / ``HTTP_PROXY``. Never in a repr.
    no_proxy
        Hosts reached without the proxy (``NO_PROXY`` syntax); empty: ``NO_PROXY``.
    headers
        Request headers per host or URL prefix, as a JSON object
        ``{"host or URL prefix": {"Header": "value"}}``. Never in a repr, never on
        the Preferences page.
    s3_endpoint_url
        The S3 endpoint ``s3://`` URLs are read from (MinIO, Ceph, a cloud
        other than AWS); empty: s3fs and botocore's own (``AWS_ENDPOINT_URL``,
        ``FSSPEC_S3_ENDPOINT_URL``, else AWS).
    s3_region
        The S3 region; empty: botocore's own (``AWS_DEFAULT_REGION``, the
        profile's ``region``).
    s3_anon
        Read ``s3://`` URLs unsigned, as anyone may (public buckets); False
        leaves it to s3fs (``FSSPEC_S3_ANON``, else signed requests).
    s3_profile
        The AWS profile whose credentials sign requests (a name in
        ``~/.aws/credentials`` or ``~/.aws/config``); empty: botocore's own
        (``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``..., the default profile).
        Credentials themselves are never settings.

    Raises
    ------
    MetadataError
        A value of the wrong type or out of bounds (the message names the field).

    Examples
    --------
    >>> Settings().total_bytes_limit
    1073741824
    >>> Settings(concurrency=-1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.MetadataError: Settings.concurrency: an integer >= 0 ...
    """

    total_bytes_limit_mib: int = _field(
        1024,
        section="cache",
        title="Capacity (MiB)",
        description="Decoded chunks the cache shared by all layers keeps; "
        "changing it applies at once.",
        variable="NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT",
        minimum=1,
        maximum=1 << 20,
    )
    concurrency: int = _field(
        0,
        section="cache",
        title="Loaders",
        description="Chunk loads in flight (0: one per core); applies at once.",
        variable="NAPARI_LAZY_ZARR_CONCURRENCY",
        minimum=0,
        maximum=256,
    )
    remote_concurrency: int = _field(
        32,
        section="cache",
        title="Remote loaders",
        description="Opening a URL raises the loads in flight to at least this many "
        "(unless Loaders is set).",
        variable="NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY",
        minimum=1,
        maximum=256,
    )
    connect_timeout: float = _field(
        10.0,
        section="timeouts",
        title="Connect (s)",
        description="Seconds a remote request may take to connect.",
        variable="NAPARI_LAZY_ZARR_TIMEOUT_CONNECT",
        minimum=0.01,
        maximum=3600,
    )
    read_timeout: float = _field(
        10.0,
        section="timeouts",
        title="Read (s)",
        description="Seconds a response may stay silent.",
        variable="NAPARI_LAZY_ZARR_TIMEOUT_READ",
        minimum=0.01,
        maximum=3600,
    )
    total_timeout: float = _field(
        60.0,
        section="timeouts",
        title="Total (s)",
        description="Seconds one request may take in all.",
        variable="NAPARI_LAZY_ZARR_TIMEOUT_TOTAL",
        minimum=0.01,
        maximum=3600,
    )
    backend: str = _field(
        "auto",
        section="reading",
        title="Decode backend",
        description="What reads zarr arrays opened next: auto (zarr-python), zarr, "
        "tensorstore or zarrs (installed separately).",
        variable="NAPARI_LAZY_ZARR_BACKEND",
        choices=_BACKEND_NAMES,
    )
    volume_mivoxels: int = _field(
        128,
        section="reading",
        title="3D voxel budget (Mi voxels)",
        description="A 3D view shows the finest level with at most this many Mi voxels "
        "(1 Mi = 1024² voxels; 128 by default: 512³).",
        variable="NAPARI_LAZY_ZARR_VOLUME_VOXELS",
        minimum=1,
        maximum=8192,  # 2048³: the largest 3D texture of most desktop GPUs
    )
    allowed_roots: str = _field(
        "",
        section="references",
        title="Allowed folders",
        description="Folders reference files may also point into, separated by ':' "
        "(';' on Windows).",
        variable="NAPARI_LAZY_ZARR_ALLOWED_ROOTS",
    )
    allowed_remotes: str = _field(
        "",
        section="references",
        title="Allowed remotes",
        description="Protocols (s3, https) and locations (https://data.example.org) "
        "reference files may reach, separated by commas.",
        variable="NAPARI_LAZY_ZARR_ALLOWED_REMOTES",
    )
    # -- [remote]: how http(s) requests travel (storage/remote_config.py) --
    ca_bundle: str = _field(
        "",
        section="remote",
        title="CA bundle",
        description="A PEM file (or folder) of certificate authorities trusted for https "
        "besides the system's, e.g. your institution's own CA.",
        variable="NAPARI_LAZY_ZARR_CA_BUNDLE",
    )
    proxy: str = _field(
        "",
        repr=False,
        section="remote",
        title="Proxy",
        description="http://host:port of the proxy for http(s) URLs; empty: HTTPS_PROXY / "
        "HTTP_PROXY. Put a proxy password in the settings file or the environment instead.",
        variable="NAPARI_LAZY_ZARR_PROXY",
    )
    no_proxy: str = _field(
        "",
        section="remote",
        title="No proxy for",
        description="Hosts reached without the proxy, separated by commas "
        "(localhost,.example.org); empty: NO_PROXY.",
        variable="NAPARI_LAZY_ZARR_NO_PROXY",
    )
    headers: str = _field(
        "",
        repr=False,
        section="remote",
        title="Request headers",
        description="Request headers per host or URL prefix (JSON); settings file and "
        "environment only.",
        variable="NAPARI_LAZY_ZARR_HEADERS",
        preferences=False,
    )
    # -- [s3]: applied to every s3:// store and reference (core.storage.s3) --
    s3_endpoint_url: str = _field(
        "",
        section="s3",
        title="Endpoint URL",
        description="The S3 endpoint (MinIO, Ceph, another cloud), e.g. "
        "https://minio.example.org:9000; empty: AWS_ENDPOINT_URL, else AWS.",
        variable="NAPARI_LAZY_ZARR_S3_ENDPOINT_URL",
    )
    s3_region: str = _field(
        "",
        section="s3",
        title="Region",
        description="The S3 region, e.g. eu-west-1; empty: AWS_DEFAULT_REGION or the profile's.",
        variable="NAPARI_LAZY_ZARR_S3_REGION",
    )
    s3_anon: bool = _field(
        False,
        section="s3",
        title="Anonymous access",
        description="Read s3:// URLs unsigned, without credentials (public buckets).",
        variable="NAPARI_LAZY_ZARR_S3_ANON",
    )
    s3_profile: str = _field(
        "",
        section="s3",
        title="AWS profile",
        description="The profile of ~/.aws/credentials that signs requests; empty: "
        "AWS_PROFILE, AWS_ACCESS_KEY_ID..., else the default profile.",
        variable="NAPARI_LAZY_ZARR_S3_PROFILE",
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            value = _checked(item.name, getattr(self, item.name), f"Settings.{item.name}")
            object.__setattr__(self, item.name, value)

    @staticmethod
    def setting(name: str) -> Setting:
        """The `Setting` describing the field `name`."""
        setting: Setting = _FIELDS[name].metadata["setting"]
        return setting

    @property
    def total_bytes_limit(self) -> int:
        """The cache's capacity in bytes."""
        return self.total_bytes_limit_mib * _MIB

    @property
    def volume_voxels(self) -> int:
        """A 3D view's voxel budget in voxels."""
        return self.volume_mivoxels * _MIB

    @property
    def timeouts(self) -> Timeouts:
        """The three time caps as `Timeouts`."""
        return Timeouts(
            connect=self.connect_timeout, read=self.read_timeout, total=self.total_timeout
        )

    @property
    def roots(self) -> tuple[str, ...]:
        """`allowed_roots` as a tuple of folders (``~`` expanded, made absolute)."""
        return tuple(
            os.path.abspath(os.path.expanduser(root.strip()))
            for root in self.allowed_roots.split(os.pathsep)
            if root.strip()
        )

    @property
    def remotes(self) -> tuple[str, ...]:
        """`allowed_remotes` as a tuple of protocols and locations."""
        return tuple(r for r in re.split(r"[,\s]+", self.allowed_remotes) if r)


_FIELDS: Final = {item.name: item for item in fields(Settings)}
_BY_KEY: Final[dict[tuple[str, str], str]] = {
    (Settings.setting(name).section, name): name for name in _FIELDS
}
_LISTS: Final = frozenset({"allowed_roots", "allowed_remotes"})
_SECRETS: Final = frozenset({"proxy", "headers"})  # never in a message, a repr, a log
TIMEOUT_VARIABLES: Final = {
    name: Settings.setting(f"{name}_timeout").variable for name in ("connect", "read", "total")
}
BACKEND_VARIABLE: Final = Settings.setting("backend").variable


def _checked(name: str, value: Any, where: str) -> Any:
    """`value` as field `name` holds it, or MetadataError naming `where`."""
    kind, setting = _FIELDS[name].type, Settings.setting(name)
    if kind == "bool":
        return _checked_bool(value, where)
    if kind == "str":
        if setting.choices is not None and value not in setting.choices:
            allowed = ", ".join(repr(c) for c in setting.choices)
            raise MetadataError(f"{where}: unknown {name} {value!r}; choose one of {allowed}")
        if not isinstance(value, str):
            shown = "a secret, not shown" if name in _SECRETS else repr(value)
            raise MetadataError(f"{where}: a string is needed, got {shown}")
        if name == "allowed_remotes":
            check_remotes(value, where)
        elif name == "s3_endpoint_url":
            check_endpoint(value, where)
        elif name == "headers":
            parse_headers(value, where)
        elif name == "proxy":
            parse_proxy(value, where)
        return value
    low, high = setting.minimum, setting.maximum
    number: float
    if kind == "int":
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
        number, wanted = (value if ok else math.nan), "an integer"
    else:
        ok = isinstance(value, int | float | str) and not isinstance(value, bool)
        try:
            number = float(value) if ok else math.nan
        except ValueError:
            number = math.nan
        wanted = "a number of seconds"
    bounds = f" >= {low:,}" if low is not None else ""
    bounds += f" and <= {high:,}" if high is not None else ""
    if not (math.isfinite(number) and (low is None or number >= low)) or (
        high is not None and number > high
    ):
        raise MetadataError(f"{where}: {wanted}{bounds} is needed, got {value!r}")
    return int(number) if kind == "int" else number


_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


def _checked_bool(value: Any, where: str) -> bool:
    """A switch: True/False, or (an environment variable's) 1/0, true/false, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise MetadataError(f"{where}: true or false is needed, got {value!r}")


def configuration_schema() -> dict[str, Any]:
    """The napari manifest's ``contributions.configurations``, made from `Settings`.

    Examples
    --------
    >>> configuration_schema()["cache"]["properties"]["concurrency"]["default"]
    0
    """
    json_types = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}
    schema: dict[str, Any] = {
        section: {"title": title, "properties": {}} for section, title in SETTINGS_SECTIONS.items()
    }
    for item in fields(Settings):
        setting: Setting = item.metadata["setting"]
        if not setting.preferences:
            continue
        entry: dict[str, Any] = {
            "title": setting.title,
            "description": setting.description,
            "type": json_types[str(item.type)],
            "default": item.default,
        }
        if setting.minimum is not None:
            entry["minimum"] = setting.minimum
        if setting.maximum is not None:
            entry["maximum"] = setting.maximum
        if setting.choices is not None:
            entry["enum"] = list(setting.choices)
        schema[setting.section]["properties"][item.name] = entry
    return schema


def settings_path(environ: Mapping[str, str] | None = None) -> str:
    """The plugin's settings file (it need not exist).

    ``$NAPARI_LAZY_ZARR_SETTINGS`` when set, else ``napari-lazy-zarr/settings.toml``
    in the user's configuration folder (`platformdirs.user_config_dir`):
    ``$XDG_CONFIG_HOME`` or ``~/.config`` on Linux, ``~/Library/Application
    Support`` on macOS, ``%APPDATA%`` on Windows.

    Examples
    --------
    >>> settings_path({"NAPARI_LAZY_ZARR_SETTINGS": "/etc/lazy-zarr.toml"})
    '/etc/lazy-zarr.toml'
    """
    env = os.environ if environ is None else environ
    chosen = env.get(SETTINGS_VARIABLE)
    if chosen:
        return os.path.expanduser(chosen)
    folder = platformdirs.user_config_dir("napari-lazy-zarr", appauthor=False, roaming=True)
    return os.path.join(folder, "settings.toml")


# -- the napari preferences, when there are some ---------------------------------

_preferences_lock = threading.Lock()
_preferences: Callable[[], Preferences] | None = None


def use_preferences(source: Callable[[], Preferences] | None) -> None:
    """Read napari's plugin preferences from `source` (None: stop reading them).

    `source` returns ``{section: {key: value}}`` of the values that differ from
    their defaults; `current_settings` calls it each time. The napari glue
    registers it; nothing in the core imports napari.
    """
    global _preferences
    with _preferences_lock:
        _preferences = source


# -- resolving --------------------------------------------------------------------


def _file_values(path: str) -> dict[str, tuple[Any, str]]:
    """The settings file's values as ``{field: (value, where)}`` (none if there is no file)."""
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
    values: dict[str, tuple[Any, str]] = {}
    for section, table in document.items():
        if section not in SETTINGS_SECTIONS:
            raise MetadataError(
                f"{path}: [{section}] is not a settings table ({', '.join(SETTINGS_SECTIONS)})"
            )
        if not isinstance(table, dict):
            raise MetadataError(f"{path}: {section!r} must be a table ([{section}])")
        keys = [key for (s, key) in _BY_KEY if s == section]
        for key, value in table.items():
            if (section, key) not in _BY_KEY:
                raise MetadataError(
                    f"{path}: [{section}] {key!r} is not a setting ({', '.join(keys)})"
                )
            name, where = _BY_KEY[section, key], f"{path}: [{section}] {key}"
            if name == "headers":  # [remote.headers."host"] tables, as JSON text
                if not isinstance(value, dict):
                    raise MetadataError(f'{where}: must be tables [remote.headers."host"]')
                value = json.dumps(value)
            if name in _LISTS:
                value = _file_list(name, value, path, where)
            values[name] = (value, where)
    return values


def _file_list(name: str, value: Any, path: str, where: str) -> str:
    if not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
        raise MetadataError(f"{where} must be a list of strings")
    if name == "allowed_remotes":
        return ", ".join(value)
    # Relative folders in the file are relative to the file.
    folder = os.path.dirname(os.path.abspath(path))
    return os.pathsep.join(os.path.join(folder, os.path.expanduser(v)) for v in value)


def _preference_values() -> dict[str, tuple[Any, str]]:
    with _preferences_lock:
        source = _preferences
    if source is None:
        return {}
    values: dict[str, tuple[Any, str]] = {}
    for section, table in source().items():
        for key, value in table.items():
            name = _BY_KEY.get((section, key))
            if name is not None and Settings.setting(name).preferences:
                values[name] = (value, f"napari Preferences: napari-lazy-zarr {section}.{key}")
    return values


# The fields whose environment variable counts units, not Mi units: what it counts.
_MEBI_VARIABLES: Final = {"total_bytes_limit_mib": "bytes", "volume_mivoxels": "voxels"}


def _environment_values(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    values: dict[str, tuple[Any, str]] = {}
    for name in _FIELDS:
        variable = Settings.setting(name).variable
        text = env.get(variable)
        if not text:
            continue
        value: Any = text
        if name in _MEBI_VARIABLES:  # bytes (as it always was), voxels: rounded up to Mi
            if not re.fullmatch(r"\s*\d+\s*", text):
                raise MetadataError(
                    f"{variable}: a number of {_MEBI_VARIABLES[name]} is needed, got {text!r}"
                )
            value = max(1, -(-int(text) // _MIB))
        values[name] = (value, variable)
    return values


def current_settings(
    environ: Mapping[str, str] | None = None, *, names: Collection[str] | None = None
) -> Settings:
    """The user's `Settings`: defaults < settings file < napari Preferences < environment.

    Read afresh on each call (a few small reads), so an edit applies to what
    is opened next. The allow-lists add up over the sources. With `names`,
    only those fields are resolved (and checked); the others keep their
    defaults.

    Raises
    ------
    MetadataError
        The settings file cannot be read, or a value is of the wrong type or
        out of bounds (the message names the file and key, the preference or
        the variable).

    Examples
    --------
    >>> env = {"NAPARI_LAZY_ZARR_CONCURRENCY": "4",
    ...        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"}
    >>> current_settings(env).concurrency
    4
    """
    env = os.environ if environ is None else environ
    layers = (_environment_values(env), _preference_values(), _file_values(settings_path(env)))
    chosen: dict[str, Any] = {}
    for name in _FIELDS if names is None else names:
        found = [
            (_checked(name, layer[name][0], layer[name][1]), layer[name][1])
            for layer in layers
            if name in layer
        ]
        if name in _LISTS:
            separator = os.pathsep if name == "allowed_roots" else ", "
            if found:
                chosen[name] = separator.join(value for value, _ in found if value)
        elif found:
            chosen[name] = found[0][0]
    return replace(Settings(), **chosen)


def timeouts_from_settings(environ: Mapping[str, str] | None = None) -> Timeouts:
    """The user's `Timeouts` (`current_settings`).

    Raises
    ------
    MetadataError
        As `current_settings`.

    Examples
    --------
    >>> env = {"NAPARI_LAZY_ZARR_TIMEOUT_READ": "2.5",
    ...        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"}
    >>> timeouts_from_settings(env)
    Timeouts(connect=10.0, read=2.5, total=60.0)
    """
    return current_settings(environ).timeouts


def backend_from_settings(environ: Mapping[str, str] | None = None) -> str:
    """The decode backend the user asked for (`current_settings`).

    Raises
    ------
    MetadataError
        As `current_settings`.

    Examples
    --------
    >>> backend_from_settings({"NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"})
    'auto'
    >>> backend_from_settings({"NAPARI_LAZY_ZARR_BACKEND": "tensorstore",
    ...                        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"})
    'tensorstore'
    """
    return current_settings(environ).backend
