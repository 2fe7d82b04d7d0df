"""Proxies: a real forward proxy on 127.0.0.1 that counts what it relays (issue 23).

``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY`` (as `urllib.request.getproxies`
reads them) and the ``[remote]`` settings route every request: ``http://`` in
absolute form, ``https://`` through a ``CONNECT`` tunnel. Stores are written by
zarr-python; pixels are compared with what it was given.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core.errors import LazyZarrError
from napari_lazy_zarr.core.settings import current_settings
from napari_lazy_zarr.core.storage.remote_config import remote_config
from tests.remote.proxy import CountingProxy
from tests.remote.server import FaultyServer
from tests.remote.test_tls import raw_references, read_all, write_store
from tests.remote.tls import private_ca

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")
SECRET = "pr0xy-s3cret"


@pytest.fixture(autouse=True)
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "absent.toml"))
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name in ("PROXY", "NO_PROXY", "CA_BUNDLE"):
        monkeypatch.delenv(f"NAPARI_LAZY_ZARR_{name}", raising=False)


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[FaultyServer, np.ndarray[Any, Any]]]:
    (tmp_path / "served").mkdir()
    data = write_store(tmp_path / "served")
    with FaultyServer(tmp_path / "served") as server:
        yield server, data


def test_http_proxy_relays_every_request_and_the_pixels_are_the_writers(
    origin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, data = origin
    with CountingProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)
        relayed = proxy.relayed[:]
    assert relayed, "nothing went through the proxy"
    assert all(method in ("GET", "HEAD") for method, _ in relayed)
    assert all(target.startswith(f"{server.url}/") for _, target in relayed)  # absolute form
    assert len(relayed) == server.faults.total()  # every request the server saw


def test_no_proxy_for_the_host_goes_direct(origin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, data = origin
    with CountingProxy() as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)  # lowercase, as urllib reads it first
        monkeypatch.setenv("no_proxy", "example.org,127.0.0.1")
        np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)
        assert proxy.count() == 0
    assert server.faults.total() > 0


def test_the_proxy_setting_overrides_the_environment(
    origin: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server, data = origin
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens: unused
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the setting's no_proxy replaces it
    with CountingProxy() as proxy:
        settings = tmp_path / "settings.toml"
        settings.write_text(f'[remote]\nproxy = "{proxy.url}"\nno_proxy = "example.org"\n')
        monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(settings))
        np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)
        assert proxy.count() > 0


def test_https_is_tunnelled_with_connect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tls").mkdir()
    data = write_store(tmp_path / "tls")
    authority = private_ca(tmp_path)
    monkeypatch.setenv("NAPARI_LAZY_ZARR_CA_BUNDLE", str(authority.pem))
    with (
        FaultyServer(tmp_path / "tls", tls=authority.server) as server,
        CountingProxy() as proxy,
    ):
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)
        port = server.url.rsplit(":", 1)[1]
        tunnels = proxy.relayed[:]
    assert tunnels
    assert all(entry == ("CONNECT", f"127.0.0.1:{port}") for entry in tunnels)
    assert len(tunnels) < server.faults.total()  # tunnels are kept alive: many requests each


def test_proxy_credentials_are_sent_and_never_shown(
    origin: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server, data = origin
    caplog.set_level(logging.DEBUG)
    with CountingProxy(credentials=("lab", SECRET)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url_with_credentials)
        np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)
        expected = "Basic " + base64.b64encode(f"lab:{SECRET}".encode()).decode()
        assert proxy.authorizations
        assert set(proxy.authorizations) == {expected}
        # Refused credentials: the error names the proxy, never its password.
        monkeypatch.setenv("HTTP_PROXY", proxy.url_with_credentials.replace(SECRET, "wrong"))
        with pytest.raises(LazyZarrError) as caught:
            open_array(f"{server.url}/a.zarr")
        assert "407" in str(caught.value)
    shown = [str(caught.value), repr(caught.value), repr(remote_config())]
    monkeypatch.setenv("NAPARI_LAZY_ZARR_PROXY", proxy.url_with_credentials)
    shown += [repr(current_settings()), repr(remote_config())]
    shown += [record.getMessage() for record in caplog.records]
    for text in shown:
        assert SECRET not in text, text
        assert "wrong" not in text, text
    assert all("Proxy-Authorization" not in h for _, h in server.faults.seen)  # not forwarded


def test_no_proxy_follows_urllibs_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.org:3128")
    monkeypatch.setenv("HTTP_PROXY", "proxy.example.org:8080")  # no scheme: http
    monkeypatch.setenv("NO_PROXY", ".internal.org, 10.1.2.3, data.example.org:8443")
    config = remote_config()
    labels = {
        url: None if (proxy := config.proxy_for(url)) is None else proxy.label
        for url in (
            "https://public.example.net/a.zarr",
            "http://public.example.net/a.zarr",
            "https://images.internal.org/a.zarr",
            "http://10.1.2.3:9000/a.zarr",
            "https://data.example.org:8443/a.zarr",
            "https://data.example.org/a.zarr",
        )
    }
    assert list(labels.values()) == [
        "http://proxy.example.org:3128",
        "http://proxy.example.org:8080",
        None,
        None,
        None,
        "http://proxy.example.org:3128",
    ]
    monkeypatch.setenv("NO_PROXY", "*")
    assert remote_config().proxy_for("https://public.example.net/a.zarr") is None


def test_an_https_proxy_url_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from napari_lazy_zarr.core.errors import MetadataError

    monkeypatch.setenv("HTTPS_PROXY", f"https://lab:{SECRET}@proxy.example.org:443")
    with pytest.raises(
        MetadataError, match=r"HTTPS_PROXY: https://proxy\.example\.org\.\.\."
    ) as e:
        remote_config()
    assert SECRET not in str(e.value)


def test_kerchunk_references_go_through_the_same_proxy(
    origin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from napari_lazy_zarr.core.sources.manifest import ManifestSource

    server, _ = origin
    manifest = tmp_path / "refs.json"
    pixels = raw_references(tmp_path / "served", server.url, manifest)
    with CountingProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        source = ManifestSource(manifest, allow_protocols=[server.url])
        np.testing.assert_array_equal(source.read_chunk((1, 0)), pixels[2:])
        assert proxy.relayed == [("GET", f"{server.url}/pixels.raw")]


def test_refused_proxy_credentials_on_a_tunnel_are_denied_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from napari_lazy_zarr.core.storage.remote import RemoteStore
    from napari_lazy_zarr.core.storage.remote_errors import HttpAccessDeniedError
    from napari_lazy_zarr.core.storage.retry import classify

    (tmp_path / "tls").mkdir()
    write_store(tmp_path / "tls")
    authority = private_ca(tmp_path)
    monkeypatch.setenv("NAPARI_LAZY_ZARR_CA_BUNDLE", str(authority.pem))
    with (
        FaultyServer(tmp_path / "tls", tls=authority.server) as server,
        CountingProxy(credentials=("lab", SECRET)) as proxy,
    ):
        monkeypatch.setenv("HTTPS_PROXY", proxy.url_with_credentials.replace(SECRET, "nope"))
        store = RemoteStore(f"{server.url}/a.zarr")
        with pytest.raises(HttpAccessDeniedError, match=r"407.*proxy's credentials") as caught:
            store.read_sync("zarr.json")
        store.close()
        assert proxy.count("CONNECT") == 1
    assert classify(caught.value) == "denied"
    assert "nope" not in str(caught.value)


@pytest.mark.parametrize(
    "variable",
    [
        "NAPARI_LAZY_ZARR_PROXY",
        "HTTPS_PROXY",
    ],
)
def test_a_proxy_password_with_a_hash_sign_is_in_no_error_of_the_chain(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """``#`` in a password ends the URL's authority (the rest is a fragment), so the password
    reads as the port: the error parsing it names it, and must not ride along as context."""
    from napari_lazy_zarr.core.errors import MetadataError
    from tests.remote.test_headers import _chain_texts

    monkeypatch.setenv(variable, f"http://lab:{SECRET}#1@proxy.example.org:3128")
    with pytest.raises(MetadataError) as caught:
        remote_config()
    for text in _chain_texts(caught.value):
        assert SECRET not in text, text
