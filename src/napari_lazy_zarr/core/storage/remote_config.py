"""How an ``http(s)://`` request travels: the CA bundle, the proxy, the headers of its host.

`RemoteConfig` is what the settings' ``[remote]`` section (`core.settings`) and
the environment say, resolved once per HTTP client (`core.storage.transport`):

- **CA bundle**: ``https`` is verified against the system's certificate
  authorities (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` keep working: they are
  Python's defaults) *and* the ``ca_bundle`` setting's, added rather than
  instead, so that a lab's private CA does not cost the public hosts.
- **Proxy**: the ``proxy`` setting, else ``HTTPS_PROXY`` / ``HTTP_PROXY``
  (either case, lowercase first, as `urllib.request.getproxies` reads them);
  the hosts of the ``no_proxy`` setting, else of ``NO_PROXY``, are reached
  directly (`urllib.request.proxy_bypass_environment`'s rules: ``*``, a host,
  ``.domain``, ``host:port``). Credentials in the proxy's URL are sent as
  ``Proxy-Authorization`` (Basic) and appear in no message or repr.
- **Headers**: the ``headers`` setting maps a host (``data.example.org``, any
  port and scheme; ``host:8443``) or a URL prefix
  (``https://data.example.org/private``: that origin, its default port when none
  is written, under that path) to request headers, e.g. a bearer token. A
  request gets the headers of the rules covering *its own* URL, so a redirect
  to another host never carries them. Their values appear in no message, repr
  or log.

Examples
--------
>>> config = RemoteConfig(headers=header_rules({"127.0.0.1:8000": {"X-Token": "t"}}))
>>> config.headers_for("http://127.0.0.1:8000/a.zarr/zarr.json")
{'X-Token': 't'}
>>> config.headers_for("http://127.0.0.1:9000/a.zarr/zarr.json")
{}
>>> config
RemoteConfig(ca_bundle='', proxies=(), no_proxy='')
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.remote_values import (
    ProxyAddress,
    parse_headers,
    parse_proxy,
    url_path,
)
from napari_lazy_zarr.core.settings import Settings, current_settings

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["REMOTE_SETTINGS", "HeaderRule", "RemoteConfig", "header_rules", "remote_config"]

REMOTE_SETTINGS: Final = ("ca_bundle", "proxy", "no_proxy", "headers")
"""The `Settings` fields `RemoteConfig` is made of."""
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
    """The CA bundle, proxies and request headers of HTTP requests (see the module's docstring).

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
            chosen = proxy or parse_proxy(found.get(scheme, ""), f"{scheme.upper()}_PROXY")
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

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying TLS context: the system's CAs (``SSL_CERT_FILE``) plus `ca_bundle`.

        Raises
        ------
        MetadataError
            The bundle cannot be read or holds no certificate.
        """
        context = ssl.create_default_context()
        if self.ca_bundle:
            path = os.path.expanduser(self.ca_bundle)
            try:
                if os.path.isdir(path):
                    context.load_verify_locations(capath=path)
                else:
                    context.load_verify_locations(cafile=path)
            except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
                raise MetadataError(
                    f"[remote] ca_bundle {path}: cannot load certificate authorities: {error}"
                ) from error
        return context


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
