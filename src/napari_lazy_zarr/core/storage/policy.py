"""Where references may point beyond their reference file's folder (`ReferencePolicy`).

A reference file from elsewhere must not make the viewer read, and show,
arbitrary files of the person opening it, nor probe the network it sits on: a
reference outside the file's folder is refused unless a policy allows it (the
user's, `ReferencePolicy.from_settings`, or one given in Python), and a protocol
allowed in general still does not reach loopback, link-local or private
addresses (`address_problem`) unless they are named.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.executors import worker_pool
from napari_lazy_zarr.core.remote_values import parse_remote
from napari_lazy_zarr.core.settings import Settings, current_settings

if TYPE_CHECKING:
    from collections.abc import Mapping


__all__ = [
    "ALLOWED_REMOTES_VARIABLE",
    "ALLOWED_ROOTS_VARIABLE",
    "BUCKET_PROTOCOLS",
    "IPAddress",
    "ReferencePolicy",
    "address_problem",
]


type IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


ALLOWED_ROOTS_VARIABLE: Final = Settings.setting("allowed_roots").variable
"""Environment variable: local folders references may point into (separated like ``PATH``)."""


ALLOWED_REMOTES_VARIABLE: Final = Settings.setting("allowed_remotes").variable
"""Environment variable: protocols and locations references may reach (comma-separated)."""


# Protocols whose URL "host" is a bucket or container, not a network address.
BUCKET_PROTOCOLS: Final = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "memory"}
)


_RESOLVE_TIMEOUT: Final = 2.0  # seconds a host name may take to resolve before it is refused


@dataclass(frozen=True, slots=True)
class ReferencePolicy:
    """Where references may point beyond their reference file's own folder.

    A reference that resolves (``file://`` and ``~`` expanded, normalised,
    symbolic links followed) inside the folder holding the reference file is
    always allowed, absolute or relative. A policy allows more; everything
    else is refused with `UnsafeDataError`.

    `ReferencePolicy.from_settings` is the user's policy, from the
    environment and the settings file; the readers use it unless given another.

    Attributes
    ----------
    roots
        Local folders references may also point into (``~`` expanded; compared
        after resolving symbolic links, so a link inside a root that leads out
        of it is refused).
    remotes
        What remote references may reach. A protocol (``"s3"``, ``"https"``)
        allows its URLs, except those whose host is, or resolves to, a
        loopback, link-local or private address. A location
        (``"s3://bucket"``, ``"https://data.example.org"``,
        ``"http://127.0.0.1:8000/data"``) allows the URLs under it, whatever
        its address: naming a host is how a private one is allowed.
    any_local
        Allow local files anywhere (what ``allow_outside=True`` asks).

    Raises
    ------
    ValueError
        A remote entry that is neither a protocol nor a location.

    Examples
    --------
    >>> policy = ReferencePolicy(roots=["/data"], remotes=["s3", "https://example.org"])
    >>> policy.union(ReferencePolicy(remotes=["gs"])).remotes
    ('s3', 'https://example.org', 'gs')
    """

    roots: tuple[str, ...] = ()
    remotes: tuple[str, ...] = ()
    any_local: bool = False

    def __post_init__(self) -> None:
        # Lists are welcome; the value stays hashable.
        object.__setattr__(self, "roots", tuple(os.fspath(root) for root in self.roots))
        object.__setattr__(self, "remotes", tuple(self.remotes))
        for entry in self.remotes:
            parse_remote(entry)

    @classmethod
    def from_settings(cls, environ: Mapping[str, str] | None = None) -> ReferencePolicy:
        """The user's policy: `Settings.allowed_roots` and `Settings.allowed_remotes`.

        What the environment, napari's Preferences and the settings file
        allow, together (`current_settings`). ``NAPARI_LAZY_ZARR_ALLOWED_ROOTS``
        lists folders separated by ``os.pathsep`` (``:``; ``;`` on Windows);
        ``NAPARI_LAZY_ZARR_ALLOWED_REMOTES`` lists protocols and locations
        separated by commas or spaces. The settings file (`settings_path`) may
        hold the same under ``[references]``::

            [references]
            allowed_roots = ["/data/hdf5", "~/scans"]
            allowed_remotes = ["s3://open-data", "https://data.example.org"]

        Relative folders in the file are relative to the file. A missing file is
        no settings. Read afresh on every call, so an edit applies to the next
        reference file opened.

        Raises
        ------
        MetadataError
            The settings file cannot be read or is malformed, or an entry is
            neither a protocol nor a location (the message names the file or
            the variable, and the entry).

        Examples
        --------
        >>> env = {"NAPARI_LAZY_ZARR_ALLOWED_REMOTES": "s3, https://example.org",
        ...        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"}
        >>> ReferencePolicy.from_settings(env).remotes
        ('s3', 'https://example.org')
        """
        settings = current_settings(environ)
        return cls(roots=settings.roots, remotes=settings.remotes)

    def union(self, other: ReferencePolicy) -> ReferencePolicy:
        """What either policy allows."""
        return ReferencePolicy(
            roots=tuple(dict.fromkeys((*self.roots, *other.roots))),
            remotes=tuple(dict.fromkeys((*self.remotes, *other.remotes))),
            any_local=self.any_local or other.any_local,
        )


def _address_kind(address: IPAddress) -> str | None:
    """``"loopback"``, ``"link-local"`` or ``"private"`` for a non-public address, else None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    # Private ranges, and everything else that is not public: 0.0.0.0 (which reaches
    # this machine), shared, reserved and multicast addresses.
    if address.is_private or not address.is_global or address.is_multicast:
        return "private"
    return None


def _resolve(host: str, timeout: float) -> list[IPAddress] | None:
    """The addresses `host` resolves to ([] if it does not), or None after `timeout` seconds.

    `socket.getaddrinfo` cannot be interrupted: it runs on a worker-pool thread
    that is left to finish on its own when it takes too long.
    """
    found: Future[list[str]] = Future()

    def run() -> None:
        try:
            found.set_result([str(info[4][0]) for info in socket.getaddrinfo(host, None)])
        except (OSError, UnicodeError):
            found.set_result([])  # does not resolve: nothing can be reached through it

    worker_pool().run(run, name="lazy-zarr-resolve")
    try:
        texts = found.result(timeout)
    except TimeoutError:
        return None
    addresses: list[IPAddress] = []
    for text in texts:
        try:
            addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
        except ValueError:
            continue
    return addresses


def address_problem(host: str, timeout: float = _RESOLVE_TIMEOUT) -> str | None:
    """Why `host` may not be reached by protocol alone (a non-public address), else None."""
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return f"the loopback host {host!r}"
    try:
        literal: IPAddress | None = ipaddress.ip_address(name)
    except ValueError:
        literal = None
    if literal is not None:
        kind = _address_kind(literal)
        return None if kind is None else f"the {kind} address {literal}"
    addresses = _resolve(name, timeout)
    if addresses is None:
        return f"the host {host!r}, whose address did not resolve within {timeout:g} s"
    for address in addresses:
        kind = _address_kind(address)
        if kind is not None:
            return f"the {kind} address {address} ({host!r} resolves to it)"
    return None
