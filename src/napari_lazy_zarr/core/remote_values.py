"""The syntax of the settings naming remote places: endpoints, allowed remotes, headers, proxies.

`core.settings` checks its values with these parsers; `core.storage` (the
reference policy, the HTTP client's remote configuration) reads them back into
the structures here. A parser's message names the setting (`where`) and never
quotes a secret: header values and proxy credentials are not shown.

This module imports neither napari nor Qt.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from napari_lazy_zarr.core.errors import MetadataError

__all__ = [
    "ProxyAddress",
    "RemoteLocation",
    "check_endpoint",
    "check_remotes",
    "parse_headers",
    "parse_proxy",
    "parse_remote",
    "url_path",
]

_PROTOCOL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def check_endpoint(text: str, where: str) -> None:
    """Refuse (MetadataError naming `where`) an ``s3_endpoint_url`` that is not an http(s) URL."""
    if not text:
        return
    try:
        parts = urlsplit(text.strip())
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # a port that is not a number raises
    except ValueError:
        ok = False
    if not ok:
        raise MetadataError(
            f"{where}: an endpoint is an http(s) URL such as "
            f"'https://minio.example.org:9000', got {text!r}"
        )


@dataclass(frozen=True, slots=True)
class RemoteLocation:
    """A remote location an ``allowed_remotes`` entry names.

    The URLs of `scheme` on `host` (and `port`, when given) under `path`;
    `parse_remote` makes one, `ReferencePolicy` checks URLs against it.
    """

    scheme: str
    host: str
    port: int | None
    path: str

    def covers(self, scheme: str, host: str, port: int | None, path: str) -> bool:
        """Whether the URL of these parts lies under this location."""
        if (scheme, host) != (self.scheme, self.host):
            return False
        if self.port is not None and port != self.port:
            return False
        return not self.path or path == self.path or path.startswith(self.path + "/")


def parse_remote(entry: str) -> str | RemoteLocation:
    """An ``allowed_remotes`` entry as a protocol name (lower case) or a `RemoteLocation`.

    Raises
    ------
    ValueError
        The entry is neither a protocol nor a location.

    Examples
    --------
    >>> parse_remote("S3://")
    's3'
    >>> parse_remote("https://Example.org:8000")
    RemoteLocation(scheme='https', host='example.org', port=8000, path='')
    """
    text = entry.strip() if isinstance(entry, str) else ""
    protocol = text.removesuffix("://")
    if _PROTOCOL.fullmatch(protocol):
        if protocol.lower() == "file":
            raise ValueError(
                f"{entry!r}: local files are allowed by folder (roots), not by protocol"
            )
        return protocol.lower()
    try:
        parts = urlsplit(text)
        scheme, host, port = parts.scheme, (parts.hostname or "").lower(), parts.port
    except ValueError:  # e.g. a port that is not a number
        scheme, host, port = "", "", None
    if not (scheme and host and _PROTOCOL.fullmatch(scheme)):
        raise ValueError(
            f"{entry!r} is neither a protocol ('s3', 'https') nor a location "
            "('s3://bucket', 'https://host', 'http://host:port/path')"
        )
    return RemoteLocation(scheme.lower(), host, port, url_path(parts.path))


def url_path(path: str) -> str:
    """A URL path normalised for comparison (``..`` and ``%2e`` cannot climb out of a prefix)."""
    if not path or path == "/":
        return ""
    return posixpath.normpath("/" + unquote(path)).rstrip("/")


def check_remotes(text: str, where: str) -> None:
    """Refuse (MetadataError naming `where`) ``allowed_remotes`` entries `parse_remote` refuses."""
    try:
        for entry in (r for r in re.split(r"[,\s]+", text) if r):
            parse_remote(entry)
    except ValueError as error:
        raise MetadataError(f"{where}: {error}") from error


_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110)
_OWN_HEADERS: Final = frozenset(
    {"host", "range", "accept-encoding", "content-length", "transfer-encoding", "connection"}
)  # the client sets these itself: a setting may not


def parse_headers(text: str, where: str = "headers") -> dict[str, dict[str, str]]:
    """The ``headers`` setting as ``{host or URL prefix: {name: value}}``; "" is none.

    Each key is a host (``data.example.org``, ``host:8443``) or a URL prefix
    (``https://data.example.org/private``). A message never quotes a value.

    Raises
    ------
    MetadataError
        Not a JSON object of objects of strings, a header name that is not a
        token or one the client sets itself, a value that is not printable ASCII
        on one line.

    Examples
    --------
    >>> parse_headers('{"data.example.org": {"Authorization": "Bearer abc"}}')
    {'data.example.org': {'Authorization': 'Bearer abc'}}
    >>> parse_headers('{"h": {"Range": "x"}}')
    Traceback (most recent call last):
    ...
    napari_lazy_zarr.core.errors.MetadataError: headers: host 'h': 'Range' is set by the client
    """
    if not text.strip():
        return {}
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        # The text holds secrets: neither it nor the parser's error (which keeps the text)
        # is shown, nor chained to what is raised.
        document = None
    if not isinstance(document, dict):
        raise MetadataError(f"{where}: not a JSON object {{host: {{header: value}}}}")
    rules: dict[str, dict[str, str]] = {}
    for host, table in document.items():
        if not host or any(c.isspace() for c in host):
            raise MetadataError(f"{where}: {host!r} is not a host or a URL prefix")
        if not isinstance(table, dict):
            raise MetadataError(f"{where}: host {host!r}: not an object {{header: value}}")
        for name, value in table.items():
            if not _TOKEN.fullmatch(name):
                # Not quoted: a whole header line pasted as the name carries its token.
                raise MetadataError(
                    f"{where}: host {host!r}: a name of {len(name)} characters is not a header "
                    "name (a token: no spaces, no ':'); the value goes on the right"
                )
            if name.lower() in _OWN_HEADERS:
                raise MetadataError(f"{where}: host {host!r}: {name!r} is set by the client")
            # Printable ASCII only: http.client would quote a bad value in its error.
            if not (isinstance(value, str) and value.isascii() and value.isprintable()):
                raise MetadataError(
                    f"{where}: host {host!r}: header {name!r} must be a string of printable "
                    "ASCII on one line"
                )
        rules[host] = dict(table)
    return rules


@dataclass(frozen=True, slots=True)
class ProxyAddress:
    """An HTTP proxy: where it listens, and the credentials its URL held (never in a repr).

    Examples
    --------
    >>> parse_proxy("http://user:pw@proxy.example.org:3128")
    ProxyAddress(host='proxy.example.org', port=3128)
    """

    host: str
    port: int
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    @property
    def label(self) -> str:
        """``http://host:port``: the proxy named without its credentials."""
        return f"http://{self.host}:{self.port}"


def parse_proxy(text: str, where: str = "proxy") -> ProxyAddress | None:
    """A proxy URL (``http://[user:password@]host[:port]``, scheme optional) or None for "".

    Raises
    ------
    MetadataError
        Not such a URL (the message never shows its credentials).

    Examples
    --------
    >>> parse_proxy("proxy.example.org:3128").label
    'http://proxy.example.org:3128'
    >>> parse_proxy("") is None
    True
    """
    text = text.strip()
    if not text:
        return None
    if "://" not in text:
        text = f"http://{text}"
    scheme = text.split("://", 1)[0]
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:  # e.g. a port that is not a number (the error quotes the URL's parts)
        parts = None
    if parts is None:  # raised outside the handler: no chain keeps the credentials
        raise MetadataError(f"{where}: {scheme}://... is not an http://host:port proxy")
    shown = f"{scheme}://{host or '?'}"
    if scheme.lower() != "http" or not host or parts.path not in ("", "/"):
        raise MetadataError(
            f"{where}: {shown}... is not an http://host:port proxy (an https:// proxy is "
            "not supported; the proxy tunnels https itself)"
        )
    return ProxyAddress(
        host, port or 80, unquote(parts.username or ""), unquote(parts.password or "")
    )
