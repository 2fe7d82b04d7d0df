"""HTTPS with a lab's own certificate authority: a real TLS server on 127.0.0.1 (issue 23).

The CA is made at test time (`trustme`); the store is written by zarr-python and
served by the loopback test server over TLS. Without the CA the open fails with
an error naming the URL, the verification failure and the setting to use; with
it (the setting, the settings file, or ``SSL_CERT_FILE``), the pixels are the
writer's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core.errors import ChunkReadError, LazyZarrError, MetadataError
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.storage.references import ManifestStore
from napari_lazy_zarr.core.storage.remote import RemoteStore
from napari_lazy_zarr.core.storage.remote_config import remote_config
from tests.remote.server import FaultyServer
from tests.remote.tls import PrivateCA, private_ca

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

CA_VARIABLE = "NAPARI_LAZY_ZARR_CA_BUNDLE"
BOUND = 10.0  # seconds a case that must fail may take (its requests' caps are far shorter)


def write_store(folder: Path) -> np.ndarray[Any, Any]:
    """A zarr v3 array written by zarr-python itself (the oracle is what it was given)."""
    data = (np.arange(96 * 80, dtype=np.uint32) * 13 % 4093).astype(np.uint16).reshape(96, 80)
    array = zarr.create_array(
        str(folder / "a.zarr"), shape=data.shape, chunks=(32, 32), dtype="u2"
    )
    array[...] = data
    return data


def read_all(url: str) -> np.ndarray[Any, Any]:
    """The whole array at `url`, its cache closed after: no worker outlives the test."""
    array = open_array(url)
    try:
        return np.asarray(array[...])
    finally:
        array.cache.close()


def raw_references(served: Path, base_url: str, manifest: Path) -> np.ndarray[Any, Any]:
    """A reference file to two chunks of an uncompressed file served at `base_url`: the
    transport is what is tested, so the bytes are plain. Returns the array they hold."""
    pixels = (np.arange(32, dtype="<u2") * 5).reshape(4, 8)
    (served / "pixels.raw").write_bytes(pixels.tobytes())
    zarray = {"zarr_format": 2, "shape": [4, 8], "chunks": [2, 8], "dtype": "<u2",
              "compressor": None, "filters": None, "fill_value": 0, "order": "C"}  # fmt: skip
    url = f"{base_url}/pixels.raw"
    refs = {".zarray": json.dumps(zarray), "0.0": [url, 0, 32], "1.0": [url, 32, 32]}
    manifest.write_text(json.dumps({"version": 1, "refs": refs}))
    return pixels


@pytest.fixture
def https(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FaultyServer, PrivateCA, np.ndarray[Any, Any]]]:
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "absent.toml"))
    monkeypatch.delenv(CA_VARIABLE, raising=False)
    (tmp_path / "served").mkdir()
    data = write_store(tmp_path / "served")
    authority = private_ca(tmp_path)
    with FaultyServer(tmp_path / "served", tls=authority.server) as server:
        yield server, authority, data


def test_an_untrusted_certificate_is_a_clear_error_naming_the_setting(https: Any) -> None:
    server, _, _ = https
    url = f"{server.url}/a.zarr"
    with pytest.raises(LazyZarrError) as caught:
        open_array(url)
    message = str(caught.value)
    assert url in message
    assert "certificate is not trusted" in message
    assert "issuer" in message.lower()  # the TLS library's reason (rustls: UnknownIssuer)
    assert "[remote] ca_bundle" in message
    assert CA_VARIABLE in message
    assert "SSL_CERT_FILE" in message
    assert server.faults.total("a.zarr/") == 0  # no request got through


def test_the_ca_bundle_setting_opens_the_store_with_the_writers_pixels(
    https: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, authority, data = https
    monkeypatch.setenv(CA_VARIABLE, str(authority.pem))
    np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)


def test_the_ca_bundle_in_the_settings_file(
    https: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, authority, data = https
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[remote]\nca_bundle = "{authority.pem}"\n')
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(settings))
    array = open_array(f"{server.url}/a.zarr")
    try:
        np.testing.assert_array_equal(np.asarray(array[20:70, 10:75]), data[20:70, 10:75])
    finally:
        array.cache.close()


def test_ssl_cert_file_keeps_working(https: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, authority, data = https
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.pem))
    np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)


def test_the_bundle_is_trusted_besides_the_systems_cas(
    https: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The system's CAs (here ``SSL_CERT_FILE``, which the TLS library reads for them) and
    the bundle's are trusted together: a server of each opens."""
    server, authority, data = https
    other = private_ca(tmp_path / "other-ca")
    monkeypatch.setenv("SSL_CERT_FILE", str(other.pem))  # the "system" roots
    monkeypatch.setenv(CA_VARIABLE, str(authority.pem))  # the lab's, besides them
    (tmp_path / "other").mkdir()
    other_data = write_store(tmp_path / "other")
    with FaultyServer(tmp_path / "other", tls=other.server) as public:
        np.testing.assert_array_equal(read_all(f"{public.url}/a.zarr"), other_data)
    np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)


def test_a_ca_bundle_that_cannot_be_read_names_the_setting(
    https: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _, _ = https
    (tmp_path / "not-a-ca.pem").write_text("not a certificate\n")
    for bundle in (tmp_path / "absent.pem", tmp_path / "not-a-ca.pem"):
        monkeypatch.setenv(CA_VARIABLE, str(bundle))
        store = RemoteStore(f"{server.url}/a.zarr", config=remote_config())
        with pytest.raises(MetadataError, match=rf"\[remote\] ca_bundle {bundle}: cannot load"):
            store.get_sync("zarr.json")
        store.close()


def test_kerchunk_references_over_https_use_the_same_client_and_setting(
    https: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, authority, _ = https
    manifest = tmp_path / "refs.json"
    pixels = raw_references(tmp_path / "served", server.url, manifest)
    untrusting = ManifestStore(manifest, allow_protocols=[server.url])
    with pytest.raises(ChunkReadError, match=r"certificate is not trusted.*\[remote\] ca_bundle"):
        untrusting.get_sync("1.0")
    monkeypatch.setenv(CA_VARIABLE, str(authority.pem))
    source = ManifestSource(manifest, allow_protocols=[server.url])
    np.testing.assert_array_equal(source.read_chunk((1, 0)), pixels[2:])


def test_the_ca_bundle_from_napari_preferences(https: Any) -> None:
    """The Preferences route (as `_preferences.watch_preferences` registers the page)."""
    from napari_lazy_zarr.core.settings import use_preferences

    server, authority, data = https
    use_preferences(lambda: {"remote": {"ca_bundle": str(authority.pem), "headers": "{}"}})
    try:
        config = remote_config()
        np.testing.assert_array_equal(read_all(f"{server.url}/a.zarr"), data)
    finally:
        use_preferences(None)
    assert config.ca_bundle == str(authority.pem)


def test_an_untrusted_server_is_claimed_whatever_its_url_so_its_error_shows(
    https: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """napari offers the plugin any URL ending in "/": declining an untrusted server (its
    metadata unreadable) would leave "no compatible reader" instead of what to set."""
    from napari_lazy_zarr._reader import napari_get_reader, read_zarr

    server, authority, _ = https
    data = np.arange(64, dtype=np.uint8).reshape(8, 8)
    zarr.create_array(str(tmp_path / "served" / "scan"), data=data, chunks=(4, 4))
    url = f"{server.url}/scan/"  # not named *.zarr: claimed by its metadata alone
    assert napari_get_reader(url) is read_zarr
    with pytest.raises(LazyZarrError, match="certificate is not trusted") as caught:
        read_zarr(url)
    assert "[remote] ca_bundle" in str(caught.value)
    monkeypatch.setenv(CA_VARIABLE, str(authority.pem))
    assert napari_get_reader(url) is read_zarr
    ((layer, _, layer_type),) = read_zarr(url)
    assert (layer_type, layer.shape) == ("image", data.shape)
    np.testing.assert_array_equal(read_all(url), data)


def _unblock_fifo(fifo: Path) -> None:
    """Open `fifo` for writing and close it: a reader blocked opening it reads end of file."""
    with contextlib.suppress(OSError):  # ENXIO: nobody is reading it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _in_daemon_thread(call: Callable[[], Any]) -> Future[Any]:
    """`call()` on a daemon thread (one blocked forever must not hold up the test run)."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:  # handed to the test
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


@pytest.mark.skipif(shutil.which("openssl") is None, reason="names the by-hash entry with openssl")
def test_a_ca_folder_whose_by_hash_entry_is_a_fifo_fails_in_bounded_time(
    https: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CA folder (OpenSSL's ``capath``) is looked up by the issuer's subject hash during the
    handshake: an entry of that name that is a FIFO would block the read there, forever."""
    server, authority, _ = https
    digest = subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", str(authority.pem)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folder = tmp_path / "lab-cas"
    folder.mkdir()
    fifo = folder / f"{digest}.0"
    os.mkfifo(fifo)
    monkeypatch.setenv(CA_VARIABLE, str(folder))
    url = f"{server.url}/a.zarr"
    outcome = _in_daemon_thread(lambda: read_all(url))
    try:
        error = outcome.exception(timeout=BOUND)
    finally:
        _unblock_fifo(fifo)
    assert isinstance(error, LazyZarrError), error
    assert str(folder) in str(error) or url in str(error)
