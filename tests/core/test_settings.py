"""The plugin's settings: the model, the settings file, the environment, the manifest."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts, timeouts_from_settings

if TYPE_CHECKING:
    from pathlib import Path


def _env(path: Path, **more: str) -> dict[str, str]:
    return {"NAPARI_LAZY_ZARR_SETTINGS": str(path), **more}


def test_no_settings_are_the_defaults(tmp_path: Path) -> None:
    assert timeouts_from_settings(_env(tmp_path / "absent.toml")) == DEFAULT_TIMEOUTS


def test_the_file_then_the_environment(tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("[timeouts]\nconnect_timeout = 2\nread_timeout = 3.5\n")
    assert timeouts_from_settings(_env(settings)) == Timeouts(connect=2, read=3.5)
    env = _env(settings, NAPARI_LAZY_ZARR_TIMEOUT_READ="7", NAPARI_LAZY_ZARR_TIMEOUT_TOTAL="9")
    assert timeouts_from_settings(env) == Timeouts(connect=2, read=7, total=9)


@pytest.mark.parametrize(
    ("text", "variable", "message"),
    [
        ("[timeouts]\nread_timeout = -1\n", None, "read_timeout"),
        ("[timeouts]\nread_timeout = nan\n", None, "read_timeout"),
        ("[timeouts]\nread_timeout = true\n", None, "read_timeout"),
        ("[cache]\nconcurrency = 1.5\n", None, r"\[cache\] concurrency: an integer"),
        ("[cache]\nconcurrency = 999\n", None, "<= 256"),
        ("[caches]\nconcurrency = 1\n", None, r"\[caches\] is not a settings table"),
        ("[timeouts]\nidle = 1\n", None, "'idle' is not a setting"),
        # The voxel budget's key before it counted Mi voxels: refused by name, the new key named.
        (
            "[reading]\nvolume_voxels = 134217728\n",
            None,
            r"\[reading\] 'volume_voxels' is not a setting \(backend, volume_mivoxels\)",
        ),
        ("timeouts = 3\n", None, "must be a table"),
        ("[timeouts\n", None, "cannot read"),
        ("", "inf", "NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"),
        ("", "soon", "NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"),
    ],
)
def test_bad_values_are_refused_by_name(
    tmp_path: Path, text: str, variable: str | None, message: str
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    env = _env(settings)
    if variable is not None:
        env["NAPARI_LAZY_ZARR_TIMEOUT_CONNECT"] = variable
    with pytest.raises(MetadataError, match=message):
        timeouts_from_settings(env)


def test_a_fifo_settings_file_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    with pytest.raises(MetadataError, match="not a regular file"):
        timeouts_from_settings(_env(fifo))


def test_the_reader_opens_urls_within_the_users_timeouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that never answers: the open fails clearly after the user's read cap."""
    import time

    import zarr

    from napari_lazy_zarr.core.formats.ome import describe_store
    from tests.remote.server import FaultyServer

    zarr.create_array(str(tmp_path / "a.zarr"), shape=(4, 4), chunks=(2, 2), dtype="u1")
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("NAPARI_LAZY_ZARR_TIMEOUT_READ", "0.3")
    with FaultyServer(tmp_path) as server:
        server.faults.silent.add("*")
        started = time.monotonic()
        with pytest.raises(MetadataError, match=r"a\.zarr"):
            describe_store(f"{server.url}/a.zarr")
        # The default read cap is 10 s; the user's 0.3 s applied (each document once,
        # a timed-out metadata read is not retried).
        assert time.monotonic() - started < 5


def test_the_backend_comes_from_the_settings_file_then_the_environment(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.settings import backend_from_settings

    settings = tmp_path / "settings.toml"
    env = {"NAPARI_LAZY_ZARR_SETTINGS": str(settings)}
    assert backend_from_settings(env) == "auto"
    settings.write_text('[reading]\nbackend = "tensorstore"\n')
    assert backend_from_settings(env) == "tensorstore"
    assert backend_from_settings({**env, "NAPARI_LAZY_ZARR_BACKEND": "zarr"}) == "zarr"
    with pytest.raises(MetadataError, match="NAPARI_LAZY_ZARR_BACKEND: unknown backend 'fast'"):
        backend_from_settings({**env, "NAPARI_LAZY_ZARR_BACKEND": "fast"})
    settings.write_text("[reading]\nbackend = 3\n")
    with pytest.raises(MetadataError, match=r"\[reading\] backend: unknown backend 3"):
        backend_from_settings(env)
    settings.write_text('[reading]\nbackends = "zarr"\n')
    with pytest.raises(MetadataError, match=r"\[reading\] 'backends' is not a setting"):
        backend_from_settings(env)


def test_the_readers_levels_open_with_the_chosen_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np
    import zarr

    from napari_lazy_zarr.core.formats.ome import describe_store, open_level_sources
    from napari_lazy_zarr.core.sources.backends import TensorStoreChunkSource
    from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource

    path = tmp_path / "a.zarr"
    data = np.arange(64 * 48, dtype="u2").reshape(64, 48)
    zarr.create_array(str(path), shape=data.shape, chunks=(32, 32), dtype="u2")[...] = data
    monkeypatch.setenv("NAPARI_LAZY_ZARR_SETTINGS", str(tmp_path / "none.toml"))
    (image,) = describe_store(path)
    (source,) = open_level_sources(path, image)
    assert type(source) is ZarrChunkSource  # "auto"
    monkeypatch.setenv("NAPARI_LAZY_ZARR_BACKEND", "tensorstore")
    (source,) = open_level_sources(path, image)
    assert isinstance(source, TensorStoreChunkSource)
    np.testing.assert_array_equal(source.read_chunk((1, 1)), data[32:, 32:])


# -- the one settings model ----------------------------------------------------------


def test_the_manifest_page_is_the_model() -> None:
    """napari.yaml's ``configurations`` is the model, field for field, default for default."""
    import pathlib

    import yaml

    from napari_lazy_zarr.core.settings import Settings, configuration_schema

    manifest = pathlib.Path(__file__).parents[2] / "napari.yaml"
    contributed = yaml.safe_load(manifest.read_text())["contributions"]["configurations"]
    assert contributed == configuration_schema(), (
        "napari.yaml's configurations differ from core/settings.py's Settings: paste "
        "yaml.safe_dump({'configurations': configuration_schema()}, sort_keys=False)"
    )
    json_types = {"integer": int, "number": float, "string": str, "boolean": bool}
    properties = {
        key: (section, entry)
        for section, table in contributed.items()
        for key, entry in table["properties"].items()
    }
    model = {  # all but the secrets, which napari's plain YAML preferences must not hold
        name for name in Settings.model_fields if Settings.setting(name).preferences
    }
    assert set(properties) == set(model)
    for name, (section, entry) in properties.items():
        assert Settings.setting(name).section == section
        assert entry["default"] == getattr(Settings(), name)
        assert type(getattr(Settings(), name)) is json_types[entry["type"]]
        assert entry["description"]
        assert entry["title"]


def test_every_field_is_documented() -> None:
    import inspect

    from napari_lazy_zarr.core.settings import Settings

    doc = inspect.cleandoc(Settings.__doc__ or "")
    for name in Settings.model_fields:
        assert f"\n{name}\n    " in doc, name


def test_the_backend_choices_are_the_backends() -> None:
    from napari_lazy_zarr.core.settings import Settings
    from napari_lazy_zarr.core.sources.backends import BACKENDS

    assert Settings.setting("backend").choices == ("auto", *BACKENDS)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("total_bytes_limit_mib", 0, "Settings.total_bytes_limit_mib: an integer >= 1"),
        ("concurrency", 1.0, "Settings.concurrency: an integer"),
        ("concurrency", True, "Settings.concurrency: an integer"),
        ("volume_mivoxels", 8193, "Settings.volume_mivoxels: an integer"),
        ("read_timeout", 0, "Settings.read_timeout: a number of seconds >= 0.01"),
        ("backend", "fast", "Settings.backend: unknown backend 'fast'"),
        ("allowed_remotes", "file", "Settings.allowed_remotes: 'file': local"),
        ("allowed_roots", 3, "Settings.allowed_roots: a string is needed"),
    ],
)
def test_the_model_refuses_bad_values_by_field(field: str, value: object, message: str) -> None:
    import re

    from napari_lazy_zarr.core.settings import Settings

    with pytest.raises(MetadataError, match=re.escape(message)):
        Settings(**{field: value})  # type: ignore[arg-type]


def test_the_model_accepts_every_value_in_bounds() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from napari_lazy_zarr.core.settings import Settings

    @given(
        mib=st.integers(1, 1 << 20),
        workers=st.integers(0, 256),
        seconds=st.floats(0.01, 3600),
        mivoxels=st.integers(1, 8192),
    )
    def check(mib: int, workers: int, seconds: float, mivoxels: int) -> None:
        settings = Settings(
            total_bytes_limit_mib=mib,
            concurrency=workers,
            read_timeout=seconds,
            volume_mivoxels=mivoxels,
        )
        assert settings.total_bytes_limit == mib << 20
        assert settings.timeouts.read == seconds
        assert (settings.concurrency, settings.volume_voxels) == (workers, mivoxels << 20)

    check()


def test_sources_in_order_defaults_file_preferences_environment(tmp_path: Path) -> None:
    from napari_lazy_zarr.core.settings import current_settings, use_preferences

    settings = tmp_path / "settings.toml"
    settings.write_text(
        "[cache]\ntotal_bytes_limit_mib = 64\nconcurrency = 3\nremote_concurrency = 7\n"
        '[reading]\nvolume_mivoxels = 3\n[references]\nallowed_remotes = ["s3"]\n'
    )
    env = _env(settings)
    assert current_settings(env).total_bytes_limit_mib == 64
    preferences = {
        "cache": {"total_bytes_limit_mib": 128, "concurrency": 5},
        "references": {"allowed_remotes": "gs"},
    }
    use_preferences(lambda: preferences)
    try:
        chosen = current_settings(env)
        assert (chosen.total_bytes_limit_mib, chosen.concurrency) == (128, 5)
        assert (chosen.remote_concurrency, chosen.volume_mivoxels) == (7, 3)  # the file's
        assert chosen.remotes == ("gs", "s3")  # allow-lists add up
        env |= {
            "NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT": str(3 << 20),
            "NAPARI_LAZY_ZARR_ALLOWED_REMOTES": "https://example.org",
        }
        chosen = current_settings(env)
        assert (chosen.total_bytes_limit, chosen.concurrency) == (3 << 20, 5)
        assert chosen.remotes == ("https://example.org", "gs", "s3")
        preferences["cache"]["concurrency"] = -2
        with pytest.raises(MetadataError, match=r"napari Preferences: .*cache\.concurrency"):
            current_settings(env)
    finally:
        use_preferences(None)
    # The variable is in bytes; a part of a MiB counts as one.
    assert (
        current_settings(
            _env(tmp_path / "none.toml", NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT="1")
        ).total_bytes_limit_mib
        == 1
    )
    with pytest.raises(MetadataError, match="NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT: a number"):
        current_settings(_env(tmp_path / "none.toml", NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT="1G"))
    # The voxel budget's variable is in voxels (the field in Mi voxels), rounded up the same.
    budget = current_settings(
        _env(tmp_path / "none.toml", NAPARI_LAZY_ZARR_VOLUME_VOXELS=str(512**3 + 1))
    )
    assert (budget.volume_mivoxels, budget.volume_voxels) == (129, 129 << 20)
    with pytest.raises(MetadataError, match="NAPARI_LAZY_ZARR_VOLUME_VOXELS: a number of voxels"):
        current_settings(_env(tmp_path / "none.toml", NAPARI_LAZY_ZARR_VOLUME_VOXELS="512^3"))


def test_the_folders_come_from_platformdirs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from napari_lazy_zarr.core.sample import default_cache_dir
    from napari_lazy_zarr.core.settings import settings_path

    monkeypatch.delenv("NAPARI_LAZY_ZARR_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert default_cache_dir() == tmp_path / "cache" / "napari-lazy-zarr"
    assert settings_path() == str(tmp_path / "config" / "napari-lazy-zarr" / "settings.toml")


# -- settings files that are not what they seem (issue 50) -----------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[cache]\nconcurrency = " + "[" * 50_000 + "]" * 50_000 + "\n", "cannot read"),
        ("[cache]\nconcurrency = " + "9" * 5_000 + "\n", "cannot read"),  # int() refuses it
        ("[timeouts]\nread_timeout = " + "9" * 400 + "\n", "got a number too large"),
        ("[timeouts]\nread_timeout = 1e999\n", r"<= 3,600 is needed, got inf"),
        ('[remote.headers."h"]\nX-Date = 1979-05-27\n', "tables hold strings only"),
    ],
)
def test_deep_nesting_and_huge_numbers_are_refused_naming_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    with pytest.raises(MetadataError, match=message) as caught:
        timeouts_from_settings(_env(settings))
    assert str(settings) in str(caught.value)


@pytest.mark.parametrize(
    "variable", ["NAPARI_LAZY_ZARR_CONCURRENCY", "NAPARI_LAZY_ZARR_TOTAL_BYTES_LIMIT"]
)
def test_a_variable_of_thousands_of_digits_is_refused_by_name(
    tmp_path: Path, variable: str
) -> None:
    from napari_lazy_zarr.core.settings import current_settings

    with pytest.raises(MetadataError, match=variable):
        current_settings(_env(tmp_path / "none.toml", **{variable: "9" * 5_000}))


SECRET = "s3cr3t-t0ken-0123456789abcdef0123456789"


@pytest.mark.parametrize(
    "text",
    [
        f'[remote]\n"Authorization: Bearer {SECRET}" = ""\n',  # a header pasted as a key
        f'[remote]\nAuthorization = "Bearer {SECRET}"\n',  # a header outside its table
        f'["Bearer {SECRET}"]\nx = 1\n',
        f'[remote]\nproxy = "https://lab:{SECRET}@proxy.example.org"\n',
        f'[remote]\nproxy = "http://lab:{SECRET}#@proxy.example.org:31x"\n',
        f'[remote]\nheaders = "{SECRET}"\n',
        f'[remote.headers."h"]\nAuthorization = "Bearer {SECRET}\\n"\n',
    ],
)
def test_a_refused_settings_file_never_shows_nor_keeps_a_secret(tmp_path: Path, text: str) -> None:
    """Neither in the message nor anywhere in the exception's chain."""
    import traceback

    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    with pytest.raises(MetadataError) as caught:
        timeouts_from_settings(_env(settings))
    assert str(settings) in str(caught.value)
    chain: list[BaseException] = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    for error in chain:
        shown = "".join(traceback.format_exception_only(error))
        assert SECRET not in shown, shown
        assert "lab:" not in shown, shown


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        ("parse_proxy", f"http://lab:{SECRET}#@proxy.example.org:3128"),  # '#' ends the URL
        ("parse_proxy", f"http://lab:{SECRET}@proxy.example.org:31x"),
        ("parse_headers", f'{{"h": {{"Authorization": "Bearer {SECRET}"'),
        ("parse_headers", "[" * 100_000 + SECRET),
    ],
)
def test_the_remote_parsers_keep_no_secret_in_the_exception_chain(parse: str, text: str) -> None:
    """`core.storage` calls them on HTTPS_PROXY and the headers variable directly."""
    import traceback

    from napari_lazy_zarr.core import remote_values

    with pytest.raises(MetadataError) as caught:
        getattr(remote_values, parse)(text, "HTTPS_PROXY")
    error: BaseException | None = caught.value
    while error is not None:
        assert SECRET not in "".join(traceback.format_exception_only(error))
        assert SECRET not in repr(getattr(error, "doc", ""))  # a JSONDecodeError's text
        error = error.__cause__ or error.__context__
