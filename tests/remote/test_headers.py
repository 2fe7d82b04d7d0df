"""Request headers and bearer tokens per host: sent to their host only, never shown (issue 23).

Two loopback servers (another port, or ``localhost`` instead of 127.0.0.1: another
origin) record every request's headers; the first redirects a store to the
second. Stores are written by zarr-python; pixels are compared with what it
was given.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

from napari_lazy_zarr import open_array
from napari_lazy_zarr.core.cache import ChunkCache
from napari_lazy_zarr.core.errors import LazyZarrError, MetadataError
from napari_lazy_zarr.core.settings import configuration_schema, current_settings
from napari_lazy_zarr.core.storage.remote import RemoteStore
from napari_lazy_zarr.core.storage.remote_config import remote_config
from tests.remote.server import FaultyServer
from tests.remote.test_tls import read_all, write_store

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SECRET = "t0ken-never-shown"
HEADERS = "NAPARI_LAZY_ZARR_HEADERS"


@pytest.fixture(autouse=True)
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "absent.toml"))
    monkeypatch.delenv(HEADERS, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[FaultyServer, FaultyServer, np.ndarray[Any, Any]]]:
    """The first serves the store too; the second (on ``localhost``) the same files."""
    (tmp_path / "served").mkdir()
    data = write_store(tmp_path / "served")
    with (
        FaultyServer(tmp_path / "served") as first,
        FaultyServer(tmp_path / "served", host="localhost") as second,
    ):
        yield first, second, data


def _authorizations(server: FaultyServer) -> list[str | None]:
    with server.faults.lock:
        return [headers.get("Authorization") for _, headers in server.faults.seen]


def test_a_bearer_token_goes_to_its_host_and_not_through_a_redirect_to_another(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, data = servers
    first.faults.redirects["moved.zarr/"] = f"{second.url}/a.zarr/"
    monkeypatch.setenv(HEADERS, json.dumps({"127.0.0.1": {"Authorization": f"Bearer {SECRET}"}}))
    np.testing.assert_array_equal(read_all(f"{first.url}/moved.zarr"), data)
    assert _authorizations(first)
    assert set(_authorizations(first)) == {f"Bearer {SECRET}"}
    assert _authorizations(second)
    assert set(_authorizations(second)) == {None}


def test_a_url_prefix_rule_keeps_its_headers_from_another_port_of_the_same_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "served").mkdir()
    data = write_store(tmp_path / "served")
    with (
        FaultyServer(tmp_path / "served") as first,
        FaultyServer(tmp_path / "served") as second,  # 127.0.0.1 too: another port
    ):
        first.faults.redirects["moved.zarr/"] = f"{second.url}/a.zarr/"
        rule = {f"{first.url}/moved.zarr": {"Authorization": f"Bearer {SECRET}"}}
        monkeypatch.setenv(HEADERS, json.dumps(rule))
        np.testing.assert_array_equal(read_all(f"{first.url}/moved.zarr"), data)
        assert _authorizations(first)
        assert set(_authorizations(first)) == {f"Bearer {SECRET}"}
        assert _authorizations(second)
        assert set(_authorizations(second)) == {None}


def test_headers_from_the_settings_file_apply_under_their_prefix_only(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _, data = servers
    host = first.url.removeprefix("http://")
    settings = tmp_path / "settings.toml"
    settings.write_text(
        f'[remote.headers."{host}"]\nCookie = "session={SECRET}"\n\n'
        f'[remote.headers."{first.url}/other.zarr"]\nAuthorization = "Bearer other"\n'
    )
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(settings))
    np.testing.assert_array_equal(read_all(f"{first.url}/a.zarr"), data)
    with first.faults.lock:
        seen = first.faults.seen[:]
    assert seen
    assert all(headers.get("Cookie") == f"session={SECRET}" for _, headers in seen)
    assert all("Authorization" not in headers for _, headers in seen)  # not under its prefix


def test_a_header_the_client_would_send_after_a_redirect_is_refused_by_name(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore's HTTP client drops only Authorization and Cookie when a redirect leaves the
    origin: any other header of a rule would reach the other server, so it is refused
    before a request is made, naming the header, never its value."""
    first, _, _ = servers
    monkeypatch.setenv(HEADERS, json.dumps({"127.0.0.1": {"X-Api-Key": SECRET}}))
    with pytest.raises(LazyZarrError, match=r"'X-Api-Key'.*only Authorization and Cookie") as e:
        open_array(f"{first.url}/a.zarr")
    assert SECRET not in str(e.value)
    assert first.faults.total() == 0


def test_header_values_are_never_shown(
    servers: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first, _, _ = servers
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(HEADERS, json.dumps({"127.0.0.1": {"Authorization": f"Bearer {SECRET}"}}))
    first.faults.errors["a.zarr/c/1/1"] = 403
    cache = ChunkCache(1 << 24)
    array = open_array(f"{first.url}/a.zarr", cache=cache)
    with pytest.raises(LazyZarrError) as caught:
        np.asarray(array[32:64, 32:64])
    store = RemoteStore(f"{first.url}/a.zarr")
    shown = [str(caught.value), repr(caught.value), repr(store), str(store)]
    shown += [repr(current_settings()), repr(remote_config()), repr(remote_config().headers)]
    shown += [event.detail for event in cache.events()]
    shown += [record.getMessage() for record in caplog.records]
    assert any("403" in text for text in shown)  # the failure itself is reported
    for text in shown:
        assert SECRET not in text, text
    store.close()
    cache.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f'{{"h": {{"Authorization": "Bearer {SECRET}\\r\\nX: y"}}}}', "on one line"),
        (f'{{"h": {{"Authorization": "Bearer {SECRET}\u2019"}}}}', "printable ASCII"),
        (f'{{"h": {{"Authorization": "Bearer {SECRET}"', "not a JSON object"),
        (f'{{"h": {{"Range": "{SECRET}"}}}}', "'Range' is set by the client"),
        (f'{{"h": {{"Bad Name": "{SECRET}"}}}}', "is not a header name"),
    ],
)
def test_a_bad_headers_setting_is_refused_without_showing_a_value(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv(HEADERS, value)
    with pytest.raises(MetadataError, match=message) as caught:
        current_settings()
    assert HEADERS in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)


def test_headers_are_not_on_the_preferences_page() -> None:
    assert "headers" not in configuration_schema()["remote"]["properties"]
    assert {"ca_bundle", "proxy", "no_proxy"} <= set(
        configuration_schema()["remote"]["properties"]
    )


def test_which_rules_cover_a_url() -> None:
    from napari_lazy_zarr.core.storage.remote_config import RemoteConfig, header_rules

    config = RemoteConfig(
        headers=header_rules(
            {
                "data.example.org": {"A": "host"},
                "data.example.org:8443": {"A": "host:port", "B": "b"},
                "https://data.example.org/lab": {"A": "prefix"},
            }
        )
    )
    assert config.headers_for("http://data.example.org:9000/x") == {"A": "host"}
    assert config.headers_for("https://data.example.org:8443/x") == {"A": "host:port", "B": "b"}
    assert config.headers_for("https://DATA.example.org/lab/a.zarr") == {"A": "prefix"}
    assert config.headers_for("https://data.example.org:443/lab") == {"A": "prefix"}
    assert config.headers_for("https://data.example.org/laboratory") == {"A": "host"}
    assert config.headers_for("https://data.example.org/lab/../other") == {"A": "host"}
    assert config.headers_for("https://data.example.org:444/lab/a") == {"A": "host"}
    assert config.headers_for("http://data.example.org/lab/a") == {"A": "host"}  # scheme
    assert config.headers_for("https://other.example.org/lab") == {}
    assert config.headers_for("https://data.example.org.evil.net/lab") == {}


def test_a_reference_redirected_to_another_origin_goes_without_its_token(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore follows redirects (the store's own client did not, for references): the
    token of the first origin's rule is dropped on the way to the second."""
    from napari_lazy_zarr.core.storage.references import ManifestStore

    first, second, _ = servers
    first.faults.redirects["moved/"] = f"{second.url}/"
    monkeypatch.setenv(HEADERS, json.dumps({"127.0.0.1": {"Authorization": f"Bearer {SECRET}"}}))
    zarray = {"zarr_format": 2, "shape": [2, 8], "chunks": [2, 8], "dtype": "<u2",
              "compressor": None, "filters": None, "fill_value": 0, "order": "C"}  # fmt: skip
    refs = {".zarray": json.dumps(zarray), "0.0": [f"{first.url}/moved/a.zarr/zarr.json", 0, 32]}
    manifest = tmp_path / "refs.json"
    manifest.write_text(json.dumps({"version": 1, "refs": refs}))
    store = ManifestStore(manifest, allow_protocols=[first.url, second.url])
    expected = (tmp_path / "served" / "a.zarr" / "zarr.json").read_bytes()[:32]
    got = store.get_sync("0.0")
    assert got is not None
    assert got.to_bytes() == expected
    assert _authorizations(first) == [f"Bearer {SECRET}"]
    assert _authorizations(second) == [None]
    store.close()


def test_a_server_denying_access_is_claimed_and_its_error_names_the_headers_setting(
    servers: Any, tmp_path: Path
) -> None:
    """A token endpoint asked without its token (401) is claimed by the reader, so napari
    shows the error saying where a token goes, not "no compatible reader"."""
    from napari_lazy_zarr._reader import napari_get_reader, read_zarr

    first, _, _ = servers
    zarr.create_array(str(tmp_path / "served" / "scan"), shape=(8, 8), chunks=(4, 4), dtype="u1")
    for name in ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"):
        first.faults.errors[f"scan/{name}"] = 401
    url = f"{first.url}/scan/"  # not named *.zarr: claimed by its metadata alone
    assert napari_get_reader(url) is read_zarr
    with pytest.raises(LazyZarrError) as caught:
        read_zarr(url)
    message = str(caught.value)
    assert "401" in message
    assert '[remote.headers."host"]' in message
    assert HEADERS in message


def test_a_bearer_token_is_never_sent_over_a_redirect_from_https_to_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host rule covers every port and scheme of its host, as documented; a redirect from
    ``https://`` to ``http://`` on another port of that host must still not carry the token
    in clear text (requests and curl strip ``Authorization`` on a scheme downgrade)."""
    from tests.remote.tls import private_ca

    (tmp_path / "served").mkdir()
    data = write_store(tmp_path / "served")
    authority = private_ca(tmp_path)
    monkeypatch.setenv("NAPARI_LAZY_ZARR_CA_BUNDLE", str(authority.pem))
    monkeypatch.setenv(HEADERS, json.dumps({"127.0.0.1": {"Authorization": f"Bearer {SECRET}"}}))
    with (
        FaultyServer(tmp_path / "served", tls=authority.server) as secure,
        FaultyServer(tmp_path / "served") as clear,
    ):
        secure.faults.redirects["moved.zarr/"] = f"{clear.url}/a.zarr/"
        refused: LazyZarrError | None = None
        try:
            pixels = read_all(f"{secure.url}/moved.zarr")
        except LazyZarrError as error:  # refusing the downgrade is fine too
            refused = error
        else:
            np.testing.assert_array_equal(pixels, data)
        assert refused is None or SECRET not in str(refused)
        assert _authorizations(secure)
        assert set(_authorizations(secure)) == {f"Bearer {SECRET}"}
        assert set(_authorizations(clear)) <= {None}


def _chain_texts(error: BaseException) -> list[str]:
    """The message and repr of `error` and of every error in its chain (cause, context)."""
    texts: list[str] = []
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is other for other in seen):
            continue
        seen.append(current)
        texts += [str(current), repr(current)]
        pending += [current.__cause__, current.__context__]
    return texts


def test_a_token_written_as_a_header_name_is_never_quoted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A common slip: the whole header line as the name (``"Authorization: Bearer X": ""``)."""
    monkeypatch.setenv(HEADERS, json.dumps({"h": {f"Authorization: Bearer {SECRET}": ""}}))
    with pytest.raises(MetadataError, match="is not a header name") as caught:
        current_settings()
    for text in _chain_texts(caught.value):
        assert SECRET not in text, text
