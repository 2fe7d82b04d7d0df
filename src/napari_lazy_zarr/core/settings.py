"""The plugin's settings: one pydantic model, read from four places.

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
`Settings` repr. Each source's values are validated by the model on their own,
so a refusal names where the value came from (the file and key, the preference,
the variable) and never quotes a secret. The napari manifest's
``contributions.configurations`` is `configuration_schema`, the model's JSON
schema grouped by section (a test keeps the two equal).

Why not pydantic-settings' own layering: it merges the sources' raw values and
validates once, so it can neither add the allow-lists up nor say which source a
bad value came from, and its sources read ``os.environ`` and open files with a
blocking ``open`` (a FIFO named as the settings file would hang napari).

This module imports neither napari nor Qt.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, get_args

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

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

    Made from the field's pydantic `Field` and its `_Where` (`Settings.setting`).

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


@dataclass(frozen=True, slots=True)
class _Where:
    """A field's section and variable (pydantic keeps it in the field's metadata)."""

    section: Section
    variable: str
    preferences: bool = True


_INTEGER_TEXT: Final = re.compile(r"[+-]?\d{1,30}")
_SWITCH_TEXT: Final = {"1": True, "true": True, "yes": True, "on": True, "": False}
_SWITCH_TEXT.update({"0": False, "false": False, "no": False, "off": False})


def _from_text(value: Any, kind: Any) -> Any:
    """An environment variable's text as a value of `kind` (int, float, bool) if it reads as
    one; anything else as it is, for the model to check (strictly: no bool for a number, no
    1.5 for an integer, no 1 for a switch)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if kind is int and _INTEGER_TEXT.fullmatch(text):
        return int(text)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            return value
    return _SWITCH_TEXT.get(text.lower(), value) if kind is bool else value


_Backend = Literal["auto", "zarr", "tensorstore", "zarrs"]


class _Fields(BaseModel):
    """`Settings`' fields and checks.

    Apart from `Settings` because pydantic validates through a model's own ``__init__``
    when it has one, `model_validate` included: `_checked` validates each source's values
    here, with the places they came from as context, and `Settings.__init__` turns the
    refusals of a direct construction into `MetadataError`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    total_bytes_limit_mib: Annotated[
        int,
        Field(
            ge=1,
            le=1 << 20,
            title="Capacity (MiB)",
            description="Decoded chunks the cache shared by all layers keeps; "
            "changing it applies at once.",
        ),
        _Where("cache", "NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT"),
    ] = 1024
    concurrency: Annotated[
        int,
        Field(
            ge=0,
            le=256,
            title="Loaders",
            description="Chunk loads in flight (0: one per core); applies at once.",
        ),
        _Where("cache", "NAPARI_LAZY_ZARR_CONCURRENCY"),
    ] = 0
    remote_concurrency: Annotated[
        int,
        Field(
            ge=1,
            le=256,
            title="Remote loaders",
            description="Opening a URL raises the loads in flight to at least this many "
            "(unless Loaders is set).",
        ),
        _Where("cache", "NAPARI_LAZY_ZARR_REMOTE_CONCURRENCY"),
    ] = 32
    connect_timeout: Annotated[
        float,
        Field(
            ge=0.01,
            le=3600,
            title="Connect (s)",
            description="Seconds a remote request may take to connect.",
        ),
        _Where("timeouts", "NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"),
    ] = 10.0
    read_timeout: Annotated[
        float,
        Field(
            ge=0.01, le=3600, title="Read (s)", description="Seconds a response may stay silent."
        ),
        _Where("timeouts", "NAPARI_LAZY_ZARR_TIMEOUT_READ"),
    ] = 10.0
    total_timeout: Annotated[
        float,
        Field(
            ge=0.01,
            le=3600,
            title="Total (s)",
            description="Seconds one request may take in all.",
        ),
        _Where("timeouts", "NAPARI_LAZY_ZARR_TIMEOUT_TOTAL"),
    ] = 60.0
    backend: Annotated[
        _Backend,
        Field(
            title="Decode backend",
            description="What reads zarr arrays opened next: auto (zarr-python), zarr, "
            "tensorstore or zarrs (installed separately).",
        ),
        _Where("reading", "NAPARI_LAZY_ZARR_BACKEND"),
    ] = "auto"
    volume_mivoxels: Annotated[
        int,
        Field(
            ge=1,
            le=8192,  # 2048³: the largest 3D texture of most desktop GPUs
            title="3D voxel budget (Mi voxels)",
            description="A 3D view shows the finest level with at most this many Mi voxels "
            "(1 Mi = 1024² voxels; 128 by default: 512³).",
        ),
        _Where("reading", "NAPARI_LAZY_ZARR_VOLUME_VOXELS"),
    ] = 128
    allowed_roots: Annotated[
        str,
        Field(
            title="Allowed folders",
            description="Folders reference files may also point into, separated by ':' "
            "(';' on Windows).",
        ),
        _Where("references", "NAPARI_LAZY_ZARR_ALLOWED_ROOTS"),
    ] = ""
    allowed_remotes: Annotated[
        str,
        Field(
            title="Allowed remotes",
            description="Protocols (s3, https) and locations (https://data.example.org) "
            "reference files may reach, separated by commas.",
        ),
        _Where("references", "NAPARI_LAZY_ZARR_ALLOWED_REMOTES"),
    ] = ""
    # -- [remote]: how http(s) requests travel (storage/remote_config.py) --
    ca_bundle: Annotated[
        str,
        Field(
            title="CA bundle",
            description="A PEM file (or folder) of certificate authorities trusted for https "
            "besides the system's, e.g. your institution's own CA.",
        ),
        _Where("remote", "NAPARI_LAZY_ZARR_CA_BUNDLE"),
    ] = ""
    proxy: Annotated[
        str,
        Field(
            repr=False,
            title="Proxy",
            description="http://host:port of the proxy for http(s) URLs; empty: HTTPS_PROXY / "
            "HTTP_PROXY. Put a proxy password in the settings file or the environment instead.",
        ),
        _Where("remote", "NAPARI_LAZY_ZARR_PROXY"),
    ] = ""
    no_proxy: Annotated[
        str,
        Field(
            title="No proxy for",
            description="Hosts reached without the proxy, separated by commas "
            "(localhost,.example.org); empty: NO_PROXY.",
        ),
        _Where("remote", "NAPARI_LAZY_ZARR_NO_PROXY"),
    ] = ""
    headers: Annotated[
        str,
        Field(
            repr=False,
            title="Request headers",
            description="Request headers per host or URL prefix (JSON); settings file and "
            "environment only.",
        ),
        _Where("remote", "NAPARI_LAZY_ZARR_HEADERS", preferences=False),
    ] = ""
    # -- [s3]: applied to every s3:// store and reference (core.storage.s3) --
    s3_endpoint_url: Annotated[
        str,
        Field(
            title="Endpoint URL",
            description="The S3 endpoint (MinIO, Ceph, another cloud), e.g. "
            "https://minio.example.org:9000; empty: AWS_ENDPOINT_URL, else AWS.",
        ),
        _Where("s3", "NAPARI_LAZY_ZARR_S3_ENDPOINT_URL"),
    ] = ""
    s3_region: Annotated[
        str,
        Field(
            title="Region",
            description="The S3 region, e.g. eu-west-1; empty: AWS_DEFAULT_REGION or the "
            "profile's.",
        ),
        _Where("s3", "NAPARI_LAZY_ZARR_S3_REGION"),
    ] = ""
    s3_anon: Annotated[
        bool,
        Field(
            title="Anonymous access",
            description="Read s3:// URLs unsigned, without credentials (public buckets).",
        ),
        _Where("s3", "NAPARI_LAZY_ZARR_S3_ANON"),
    ] = False
    s3_profile: Annotated[
        str,
        Field(
            title="AWS profile",
            description="The profile of ~/.aws/credentials that signs requests; empty: "
            "AWS_PROFILE, AWS_ACCESS_KEY_ID..., else the default profile.",
        ),
        _Where("s3", "NAPARI_LAZY_ZARR_S3_PROFILE"),
    ] = ""

    @model_validator(mode="before")
    @classmethod
    def _read_text(cls, values: Any) -> Any:
        """Each value read as its field's type if it is text (`_from_text`)."""
        if not isinstance(values, dict):
            return values
        fields = cls.model_fields
        return {
            name: _from_text(value, fields[name].annotation if name in fields else None)
            for name, value in values.items()
        }

    @field_validator("allowed_remotes", "s3_endpoint_url", "headers", "proxy")
    @classmethod
    def _parsable(cls, value: str, info: ValidationInfo) -> str:
        """The syntax `core.remote_values` reads back (its messages never quote a secret)."""
        name = info.field_name or ""
        where: Mapping[str, str] = info.context or {}
        _PARSERS[name](value, where.get(name, f"Settings.{name}"))
        return value


class Settings(_Fields):
    """Every setting of the plugin, validated (see the module's docstring for the sources).

    A frozen pydantic model; each field's `Setting` (`Settings.setting`) says
    where it is set.

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
        other than AWS); empty: obstore's own (``AWS_ENDPOINT_URL_S3``,
        ``AWS_ENDPOINT_URL``, else AWS).
    s3_region
        The S3 region; empty: the environment's (``AWS_REGION``,
        ``AWS_DEFAULT_REGION``), as obstore reads it.
    s3_anon
        Read ``s3://`` URLs unsigned, as anyone may (public buckets); False
        signs requests with the credentials found (`core.storage.s3`).
    s3_profile
        The AWS profile whose credentials sign requests (a name in
        ``~/.aws/credentials``); empty: the environment's credentials, else
        ``AWS_PROFILE``'s, else the default profile (`core.storage.s3`).
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

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            refusal = _refusal(error, values, {})
        else:
            return
        raise refusal  # outside the handler: no chain holding the refused values

    @classmethod
    def setting(cls, name: str) -> Setting:
        """The `Setting` describing the field `name`."""
        field = cls.model_fields[name]
        (where,) = (item for item in field.metadata if isinstance(item, _Where))
        choices = get_args(_Backend) if name == "backend" else None
        return Setting(
            section=where.section,
            title=field.title or name,
            description=field.description or "",
            variable=where.variable,
            minimum=next((item.ge for item in field.metadata if hasattr(item, "ge")), None),
            maximum=next((item.le for item in field.metadata if hasattr(item, "le")), None),
            choices=choices,
            preferences=where.preferences,
        )

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


_PARSERS: Final[dict[str, Callable[[str, str], object]]] = {
    "allowed_remotes": check_remotes,
    "s3_endpoint_url": check_endpoint,
    "headers": parse_headers,
    "proxy": parse_proxy,
}
_SETTINGS: Final = {name: Settings.setting(name) for name in Settings.model_fields}
_BY_KEY: Final[dict[tuple[str, str], str]] = {
    (setting.section, name): name for name, setting in _SETTINGS.items()
}
_LISTS: Final = {"allowed_roots": os.pathsep, "allowed_remotes": ", "}  # and their separators
_SECRETS: Final = frozenset({"proxy", "headers"})  # never in a message, a repr, a log
TIMEOUT_VARIABLES: Final = {
    name: _SETTINGS[f"{name}_timeout"].variable for name in ("connect", "read", "total")
}
BACKEND_VARIABLE: Final = _SETTINGS["backend"].variable


def _shown(value: Any) -> str:
    """`value` quoted for a message, briefly (a huge number's repr would raise)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return "a number too large"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _refusal(
    error: ValidationError, values: Mapping[str, Any], where: Mapping[str, str]
) -> MetadataError:
    """The first of pydantic's refusals as a `MetadataError` naming where the value came from."""
    problem = error.errors()[0]
    name = str(problem["loc"][0]) if problem["loc"] else ""
    place = where.get(name, f"Settings.{name}")
    if name not in _SETTINGS:
        shown = place if _name_like(name) else "a name (not shown: a secret?)"
        return MetadataError(f"{shown} is not a setting ({', '.join(_SETTINGS)})")
    cause = problem.get("ctx", {}).get("error")
    if isinstance(cause, MetadataError):  # a syntax check: its message says it all
        return MetadataError(str(cause))
    setting, value = _SETTINGS[name], values.get(name)
    shown = "a secret, not shown" if name in _SECRETS else _shown(value)
    if setting.choices is not None:
        allowed = ", ".join(repr(choice) for choice in setting.choices)
        return MetadataError(f"{place}: unknown {name} {shown}; choose one of {allowed}")
    low, high = setting.minimum, setting.maximum
    bounds = f" >= {low:,}" if low is not None else ""
    bounds += f" and <= {high:,}" if high is not None else ""
    wanted: dict[Any, str] = {  # by the field's type
        bool: "true or false",
        str: "a string",
        int: f"an integer{bounds}",
        float: f"a number of seconds{bounds}",
    }
    kind = wanted[Settings.model_fields[name].annotation]
    return MetadataError(f"{place}: {kind} is needed, got {shown}")


def _checked(values: Mapping[str, tuple[Any, str]]) -> _Fields:
    """The fields of one source's ``{field: (value, where)}`` (the others at their defaults).

    Raises
    ------
    MetadataError
        A value the model refuses, named by its `where`.
    """
    raw = {name: value for name, (value, _) in values.items()}
    where = {name: place for name, (_, place) in values.items()}
    try:
        return _Fields.model_validate(raw, context=where)
    except ValidationError as error:
        refusal = _refusal(error, raw, where)
    raise refusal  # outside the handler: no chain holding the refused values


def configuration_schema() -> dict[str, Any]:
    """The napari manifest's ``contributions.configurations``: `Settings`' JSON schema.

    The model's properties grouped by section; the secrets (``headers``) are left out.

    Examples
    --------
    >>> configuration_schema()["cache"]["properties"]["concurrency"]["default"]
    0
    """
    properties = Settings.model_json_schema()["properties"]
    schema: dict[str, Any] = {
        section: {"title": title, "properties": {}} for section, title in SETTINGS_SECTIONS.items()
    }
    for name, setting in _SETTINGS.items():
        if setting.preferences:
            schema[setting.section]["properties"][name] = properties[name]
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

# One reference, swapped whole (atomic): any thread may read it without a lock.
_preferences: Callable[[], Preferences] | None = None


def use_preferences(source: Callable[[], Preferences] | None) -> None:
    """Read napari's plugin preferences from `source` (None: stop reading them).

    `source` returns ``{section: {key: value}}`` of the values that differ from
    their defaults; `current_settings` calls it each time. The napari glue
    registers it; nothing in the core imports napari.
    """
    global _preferences
    _preferences = source


# -- resolving --------------------------------------------------------------------

# A name a user may mistype for a setting's is quoted in a refusal; any other key (a header
# or a token pasted into the wrong table) may be a secret and is not.
_NAME_LIKE: Final = re.compile(r"[a-z][a-z0-9_]{0,31}")


def _name_like(key: str) -> bool:
    return bool(_NAME_LIKE.fullmatch(key)) and sum(c.isdigit() for c in key) <= 2


def _file_values(path: str) -> dict[str, tuple[Any, str]]:
    """The settings file's values as ``{field: (value, where)}`` (none if there is no file).

    Raises
    ------
    MetadataError
        The file is not a regular file, cannot be read or parsed (malformed,
        nested too deeply, a number too long), or holds a table or key that is
        not a setting.
    """
    document: dict[str, Any] = {}
    problem = ""
    try:
        # Non-blocking open, then fstat: a FIFO or device named as the file cannot block.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                problem = "the settings file is not a regular file"
            else:
                document = tomllib.loads(handle.read(_SETTINGS_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError, MemoryError) as error:
        # ValueError: malformed TOML, not UTF-8, an integer of thousands of digits.
        problem = f"cannot read the napari-lazy-zarr settings: {error or type(error).__name__}"
    if problem:  # outside the handler: no chain holding the file's text
        raise MetadataError(f"{path}: {problem}")
    values: dict[str, tuple[Any, str]] = {}
    for section, table in document.items():
        if section not in SETTINGS_SECTIONS:
            shown = f"[{section}]" if _name_like(section) else "a table (not shown: a secret?)"
            raise MetadataError(
                f"{path}: {shown} is not a settings table ({', '.join(SETTINGS_SECTIONS)})"
            )
        if not isinstance(table, dict):
            raise MetadataError(f"{path}: {section!r} must be a table ([{section}])")
        keys = [key for (s, key) in _BY_KEY if s == section]
        for key, value in table.items():
            if (section, key) not in _BY_KEY:
                shown = repr(key) if _name_like(key) else "a key (not shown: a secret?)"
                raise MetadataError(
                    f"{path}: [{section}] {shown} is not a setting ({', '.join(keys)})"
                )
            name, where = _BY_KEY[section, key], f"{path}: [{section}] {key}"
            if name == "headers":
                value = _headers_text(value, where)
            if name in _LISTS:
                value = _file_list(name, value, path, where)
            values[name] = (value, where)
    return values


def _headers_text(value: Any, where: str) -> str:
    """``[remote.headers."host"]`` tables as the setting's JSON text."""
    if not isinstance(value, dict):
        raise MetadataError(f'{where}: must be tables [remote.headers."host"]')
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):  # a date, or tables nested too deeply
        problem = f'{where}: [remote.headers."host"] tables hold strings only'
    raise MetadataError(problem)


def _file_list(name: str, value: Any, path: str, where: str) -> str:
    if not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
        raise MetadataError(f"{where} must be a list of strings")
    if name == "allowed_remotes":
        return ", ".join(value)
    # Relative folders in the file are relative to the file.
    folder = os.path.dirname(os.path.abspath(path))
    return os.pathsep.join(os.path.join(folder, os.path.expanduser(v)) for v in value)


def _preference_values() -> dict[str, tuple[Any, str]]:
    source = _preferences
    if source is None:
        return {}
    values: dict[str, tuple[Any, str]] = {}
    for section, table in source().items():
        for key, value in table.items():
            name = _BY_KEY.get((section, key))
            if name is not None and _SETTINGS[name].preferences:
                values[name] = (value, f"napari Preferences: napari-lazy-zarr {section}.{key}")
    return values


# The fields whose environment variable counts units, not Mi units: what it counts.
_MEBI_VARIABLES: Final = {"total_bytes_limit_mib": "bytes", "volume_mivoxels": "voxels"}


def _environment_values(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    values: dict[str, tuple[Any, str]] = {}
    for name, setting in _SETTINGS.items():
        text = env.get(setting.variable)
        if not text:
            continue
        value: Any = text
        if name in _MEBI_VARIABLES:  # bytes (as it always was), voxels: rounded up to Mi
            if not re.fullmatch(r"\s*\d{1,40}\s*", text):
                raise MetadataError(
                    f"{setting.variable}: a number of {_MEBI_VARIABLES[name]} is needed, "
                    f"got {_shown(text)}"
                )
            value = max(1, -(-int(text) // _MIB))
        values[name] = (value, setting.variable)
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
    wanted = _SETTINGS.keys() if names is None else names
    sources = (_environment_values(env), _preference_values(), _file_values(settings_path(env)))
    chosen: dict[str, Any] = {}
    for source in sources:  # the first that sets a field wins; the allow-lists add up
        given = {name: source[name] for name in wanted if name in source}
        checked = _checked(given)
        for name in given:
            value = getattr(checked, name)
            if name not in chosen:
                chosen[name] = value
            elif name in _LISTS:
                chosen[name] = _LISTS[name].join(v for v in (chosen[name], value) if v)
    return Settings(**chosen)


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
