"""How a remote request travels: the CA bundle, the proxy, the headers of its host.

`RemoteConfig` is what the settings' ``[remote]`` section (`core.settings`) and the
environment say, resolved once per store; `RemoteConfig.client_options` is that as
obstore's client options.

- **CA bundle**: verified against the system's authorities (``SSL_CERT_FILE`` /
  ``SSL_CERT_DIR`` keep working) *and* the ``ca_bundle`` setting's. The bundle (a PEM
  file or a folder of them) is read here, as regular files within a time cap, and handed
  over as bytes: a FIFO named there never blocks, as it would a TLS library opening it.
- **Proxy**: the ``proxy`` setting, else ``HTTPS_PROXY`` / ``HTTP_PROXY`` (as
  `urllib.request.getproxies` reads them); the hosts of ``no_proxy``, else ``NO_PROXY``,
  are reached directly (`urllib.request.proxy_bypass_environment`'s rules). Credentials in
  the proxy's URL are sent as ``Proxy-Authorization`` and appear in no message or repr.
- **Headers**: the ``headers`` setting maps a host (any port and scheme; ``host:8443``)
  or a URL prefix (that origin, under that path) to request headers; a store sends those
  of the rules covering its URL. obstore follows redirects and drops ``Authorization``
  and ``Cookie`` on any change of origin (an ``https://`` store follows none to
  ``http://``): those are the headers a rule may set (`SENT_HEADERS`); any other would
  ride along to another server, and is refused. Values appear in no message, repr or log.

Examples
--------
>>> config = RemoteConfig(headers=header_rules({"127.0.0.1:8000": {"Authorization": "t"}}))
>>> config.headers_for("http://127.0.0.1:8000/a.zarr/zarr.json")
{'Authorization': 't'}
>>> config.headers_for("http://127.0.0.1:9000/a.zarr/zarr.json")
{}
>>> config
RemoteConfig(ca_bundle='', proxies=(), no_proxy='')
"""

from __future__ import annotations

import os
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import quote, urlsplit

from napari_lazy_zarr.core.errors import LazyZarrError, MetadataError
from napari_lazy_zarr.core.remote_values import (
    ProxyAddress,
    parse_headers,
    parse_proxy,
    url_path,
)
from napari_lazy_zarr.core.settings import Settings, Timeouts, current_settings
from napari_lazy_zarr.core.storage.files import read_regular_file
from napari_lazy_zarr.core.storage.remote_errors import RemoteSetupError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from obstore.store import ClientConfig

__all__ = [
    "MAX_CA_BYTES",
    "POOL_IDLE_SECONDS",
    "REMOTE_SETTINGS",
    "SENT_HEADERS",
    "HeaderRule",
    "RemoteConfig",
    "header_rules",
    "remote_config",
]

REMOTE_SETTINGS: Final = ("ca_bundle", "proxy", "no_proxy", "headers")
"""The `Settings` fields `RemoteConfig` is made of."""
SENT_HEADERS: Final = frozenset({"authorization", "cookie"})
"""Header names a ``headers`` rule may set: those the HTTP client (reqwest, under obstore)
drops when a redirect changes the origin."""
MAX_CA_BYTES: Final = 16 << 20
"""The most bytes of certificates a CA bundle (file or folder) may hold (a system bundle
of some 150 authorities takes 220 KB)."""
POOL_IDLE_SECONDS: Final = 10.0
"""How long an idle keep-alive connection is kept. A store lives as long as a cache holds
its chunks (a shared cache outlives the layers it served), so an idle connection must not
live as long as its store: 50 layers opened and removed kept 32 sockets each."""
_MAX_CA_FILES: Final = 4096  # entries of a CA folder read at most
_CA_SECONDS: Final = 5.0  # a CA bundle is read within this (each file within what is left)
_PEM: Final = b"-----BEGIN CERTIFICATE-----"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class HeaderRule:
    """Headers sent to the URLs of `host` (and `scheme`, `port`, under `path`, when given)."""

    host: str
    scheme: str | None = None
    port: int | None = None
    path: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def covers(self, scheme: str, host: str, port: int, path: str) -> bool:
        """Whether a request to this URL (its parts, `path` normalised) gets the headers."""
        if host != self.host or (self.scheme is not None and scheme != self.scheme):
            return False
        if self.port is not None and port != self.port:
            return False
        return not self.path or path == self.path or path.startswith(self.path + "/")

    @property
    def specificity(self) -> tuple[int, int, int]:
        """Rules covering one URL apply in this order (the most specific last, winning)."""
        return (self.scheme is not None, self.port is not None, len(self.path))


def header_rules(table: Mapping[str, Mapping[str, str]]) -> tuple[HeaderRule, ...]:
    """The rules of a ``{host or URL prefix: {name: value}}`` table (`parse_headers`)."""
    rules = []
    for key, headers in table.items():
        text = key.strip()
        parts = urlsplit(text if "://" in text else f"//{text}")
        try:
            host, port = (parts.hostname or "").lower(), parts.port
        except ValueError:  # a port that is not a number
            host, port = "", None
        if not host:
            raise MetadataError(f"headers: {key!r} is not a host or a URL prefix")
        scheme = parts.scheme.lower() or None
        path = url_path(parts.path) if scheme is not None else ""
        if scheme is not None and port is None:  # a URL prefix is of one origin
            port = _DEFAULT_PORTS.get(scheme)
        rules.append(HeaderRule(host, scheme, port, path, tuple(headers.items())))
    return tuple(sorted(rules, key=lambda rule: rule.specificity))


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    """The CA bundle, proxies and request headers of remote requests (see the module's docstring).

    Attributes
    ----------
    ca_bundle
        A PEM file or folder of CAs trusted besides the system's ("" none).
    proxies
        ``(scheme, proxy)`` pairs: the proxy of ``http`` and of ``https`` URLs.
    no_proxy
        Hosts reached directly (``NO_PROXY`` syntax; "" none).
    headers
        The header rules, least specific first (never in the repr).
    system_bypass
        Whether the operating system's proxy exceptions apply too (proxies that
        came from the environment, not from the ``proxy`` setting).
    """

    ca_bundle: str = ""
    proxies: tuple[tuple[str, ProxyAddress], ...] = ()
    no_proxy: str = ""
    headers: tuple[HeaderRule, ...] = field(default=(), repr=False)
    system_bypass: bool = field(default=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteConfig:
        """The configuration `settings` and the environment's proxy variables give."""
        proxy = parse_proxy(settings.proxy, "[remote] proxy")
        found: dict[str, str] = {}
        if proxy is None:
            found = urllib.request.getproxies()
        proxies: list[tuple[str, ProxyAddress]] = []
        for scheme in ("http", "https"):
            chosen = proxy or _environment_proxy(found.get(scheme, ""), f"{scheme.upper()}_PROXY")
            if chosen is not None:
                proxies.append((scheme, chosen))
        return cls(
            ca_bundle=settings.ca_bundle.strip(),
            proxies=tuple(proxies),
            no_proxy=settings.no_proxy.strip() or found.get("no", ""),
            headers=header_rules(parse_headers(settings.headers, "[remote] headers")),
            system_bypass=proxy is None,
        )

    def proxy_for(self, url: str) -> ProxyAddress | None:
        """The proxy a request for `url` goes through, or None (directly)."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        proxy = dict(self.proxies).get(scheme)
        if proxy is None or not parts.hostname:
            return None
        netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        if self.no_proxy:
            # Public in urllib.request (NO_PROXY's rules), missing from typeshed's stubs.
            bypass = urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
                netloc, {"no": self.no_proxy}
            )
        else:
            bypass = self.system_bypass and bool(urllib.request.proxy_bypass(parts.hostname))
        return None if bypass else proxy

    def headers_for(self, url: str) -> dict[str, str]:
        """The configured headers of a request for `url` (those of the rules covering it)."""
        if not self.headers:
            return {}
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
        path = url_path(parts.path)
        chosen: dict[str, str] = {}
        for rule in self.headers:
            if rule.covers(scheme, host, port, path):
                chosen.update(rule.headers)
        return chosen

    def secrets(self) -> tuple[str, ...]:
        """Every header value and proxy credential: what no message may quote."""
        values = {value for rule in self.headers for _, value in rule.headers}
        for _, proxy in self.proxies:
            values |= {proxy.username, proxy.password, quote(proxy.password, safe="")}
        return tuple(sorted((v for v in values if len(v) >= 3), key=len, reverse=True))

    def certificates(self) -> bytes:
        """The PEM certificates of `ca_bundle` (b"" when unset), read as regular files.

        A folder gives the certificates of its regular files (entries that are
        not, such as a FIFO, are skipped without being opened), within
        `MAX_CA_BYTES` and a time cap.

        Raises
        ------
        RemoteSetupError
            Naming the setting and the path: missing, not a regular file, too
            large, or holding no certificate.
        """
        if not self.ca_bundle:
            return b""
        path = os.path.expanduser(self.ca_bundle)
        deadline = time.monotonic() + _CA_SECONDS
        pieces: list[bytes] = []
        refusal = "no PEM certificate in it"
        try:
            if os.path.isdir(path):
                with os.scandir(path) as entries:
                    files = sorted(e.path for e in entries if e.is_file())[:_MAX_CA_FILES]
            else:
                files = [path]
            for name in files:
                left = deadline - time.monotonic()
                if left <= 0:
                    refusal = f"not read within {_CA_SECONDS:g} s"
                    pieces.clear()
                    break
                data = read_regular_file(
                    name,
                    limit=MAX_CA_BYTES - sum(map(len, pieces)),
                    timeout=left,
                    error=MetadataError,
                )
                if _PEM in data:
                    pieces.append(data.strip() + b"\n")
        except (LazyZarrError, OSError) as error:
            refusal, pieces = str(error), []
        if not pieces:  # raised here, not in the handler: no context to carry along
            raise RemoteSetupError(
                f"[remote] ca_bundle {path}: cannot load certificate authorities: {refusal}"
            )
        return b"".join(pieces)

    def client_options(
        self, url: str, timeouts: Timeouts, certificates: bytes = b"", *, headers: bool = True
    ) -> ClientConfig:
        """obstore's client options of a store at `url` (an endpoint, for S3).

        The time caps; ``Accept-Encoding: identity`` and, with `headers`, those of
        the rules covering `url` (`SENT_HEADERS` only: not for a store that signs
        its requests, S3); the proxy of its scheme (its hosts
        excluded as ``no_proxy`` says); `certificates` trusted besides the
        system's; plain ``http://`` only for an ``http://`` URL.

        Raises
        ------
        RemoteSetupError
            A header rule covering `url` sets a header the client would send
            after a redirect to another origin.
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        sent = {"Accept-Encoding": "identity", "User-Agent": "napari-lazy-zarr"}
        for name, value in (self.headers_for(url) if headers else {}).items():
            if name.lower() not in SENT_HEADERS:
                raise RemoteSetupError(
                    f"[remote] headers: the rule for {parts.hostname} sets {name!r}, which "
                    "the HTTP client would also send after a redirect to another server; "
                    "only Authorization and Cookie are sent (put the token in Authorization)"
                )
            sent[name] = value
        options: dict[str, Any] = {
            "allow_http": scheme == "http",
            "connect_timeout": timedelta(seconds=timeouts.connect),
            "read_timeout": timedelta(seconds=timeouts.read),
            "timeout": timedelta(seconds=timeouts.total),
            "pool_idle_timeout": timedelta(seconds=POOL_IDLE_SECONDS),
            "default_headers": sent,
        }
        if certificates:
            options["root_certificate"] = certificates
        proxy = dict(self.proxies).get(scheme)
        if proxy is not None:
            # Our choice always, so that obstore never falls back to the environment's
            # proxy: a host this configuration reaches directly is the proxy's exception.
            options["proxy_url"] = _proxy_url(proxy)
            if self.proxy_for(url) is None and parts.hostname:
                options["proxy_excludes"] = parts.hostname
        return cast("ClientConfig", options)


def _proxy_url(proxy: ProxyAddress) -> str:
    """``http://user:password@host:port`` (credentials percent-encoded)."""
    credentials = ""
    if proxy.username or proxy.password:
        user, password = quote(proxy.username, safe=""), quote(proxy.password, safe="")
        credentials = f"{user}:{password}@"
    return f"http://{credentials}{proxy.host}:{proxy.port}"


def _environment_proxy(text: str, where: str) -> ProxyAddress | None:
    """`parse_proxy` of a proxy variable, its refusal raised without the parser's context
    (which may quote the password: ``#`` in it cuts the URL short)."""
    refusal = None
    try:
        return parse_proxy(text, where)
    except MetadataError as error:
        refusal = str(error)
    raise MetadataError(refusal)


def remote_config(environ: Mapping[str, str] | None = None) -> RemoteConfig:
    """The user's `RemoteConfig`: the ``[remote]`` settings (`current_settings`) and proxies.

    Raises
    ------
    MetadataError
        As `current_settings`, or a proxy variable that is not a proxy URL.

    Examples
    --------
    >>> env = {"NAPARI_LAZY_ZARR_CA_BUNDLE": "/etc/lab-ca.pem",
    ...        "NAPARI_LAZY_ZARR_SETTINGS": "/nonexistent/settings.toml"}
    >>> remote_config(env).ca_bundle
    '/etc/lab-ca.pem'
    """
    return RemoteConfig.from_settings(current_settings(environ, names=REMOTE_SETTINGS))
