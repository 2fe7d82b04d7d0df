"""Kerchunk references and stack files against files written by other tools.

The oracles are the tools that wrote the bytes: tifffile (tiled and stripped
TIFFs, with the kerchunk references tifffile itself writes), zarr-python (a
store whose chunk files are packed into one file), NumPy (raw files), and
fsspec's own `ReferenceFileSystem` reading the same references.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tifffile
import zarr

from napari_lazy_zarr.core import ChunkCache, ChunkedArray, ChunkState
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    IncompatibleSourcesError,
    MetadataError,
    NotAZarrStoreError,
    ReadOnlyError,
    StoreNotFoundError,
    UnsafeDataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.formats.ome import describe_store, open_source
from napari_lazy_zarr.core.formats.stack import (
    StackMember,
    open_stack,
    read_stack_file,
    reference_file_kind,
)
from napari_lazy_zarr.core.settings import SETTINGS_VARIABLE, settings_path
from napari_lazy_zarr.core.sources.composite import ConcatSource, StackSource
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.storage.policy import (
    ALLOWED_REMOTES_VARIABLE,
    ALLOWED_ROOTS_VARIABLE,
    ReferencePolicy,
)
from napari_lazy_zarr.core.storage.references import ManifestStore
from tests.conftest import smooth_data

if TYPE_CHECKING:
    from pathlib import Path

_METADATA = frozenset({".zarray", ".zattrs", ".zgroup", "zarr.json"})


def pack_store(store: Path, manifest: Path, *, blob: str = "packed.bin") -> dict[str, Any]:
    """Pack a local zarr store's chunk files into one file (last chunk first, so offsets
    matter) beside `manifest`, and write kerchunk v1 references to them (metadata inline)."""
    files = sorted((p for p in store.rglob("*") if p.is_file()), reverse=True)
    refs: dict[str, Any] = {}
    with open(manifest.parent / blob, "wb") as out:
        for file in files:
            key = file.relative_to(store).as_posix()
            data = file.read_bytes()
            if key.rsplit("/", 1)[-1] in _METADATA:
                refs[key] = data.decode()
            else:
                refs[key] = [blob, out.tell(), len(data)]
                out.write(data)
    manifest.write_text(json.dumps({"version": 1, "refs": refs}))
    return refs


def _read(source: Any, cache: ChunkCache) -> np.ndarray[Any, Any]:
    return ChunkedArray(source, cache).result(timeout=30)


def _write_refs(path: Path, refs: dict[str, Any], **extra: Any) -> Path:
    path.write_text(json.dumps({"version": 1, "refs": refs, **extra}))
    return path


def _zarray(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str = "<u2") -> str:
    return json.dumps(
        {
            "zarr_format": 2,
            "shape": list(shape),
            "chunks": list(chunks),
            "dtype": dtype,
            "compressor": None,
            "filters": None,
            "fill_value": 0,
            "order": "C",
        }
    )


# -- files written by other tools --------------------------------------------


@pytest.mark.parametrize(
    "layout",
    [{"tile": (32, 48), "compression": "zlib"}, {"rowsperstrip": 20}],
    ids=["zlib-tiles", "raw-strips"],
)
def test_tifffile_references_read_equal_to_the_tiff(
    tmp_path: Path, threaded_cache: ChunkCache, layout: dict[str, Any]
) -> None:
    data = smooth_data((100, 130))
    tifffile.imwrite(tmp_path / "image.tif", data, **layout)
    with tifffile.TiffFile(tmp_path / "image.tif") as tif, tif.aszarr() as store:
        # tifffile's own kerchunk writer: version 1, a {{u}} template, strips/tiles by range.
        store.write_fsspec(str(tmp_path / "image.json"), url=".", version=1)
    manifest = json.loads((tmp_path / "image.json").read_text())
    assert manifest["templates"] == {"u": "./image.tif"}
    source = ManifestSource(tmp_path / "image.json")
    assert source._fetcher.synchronous  # type: ignore[attr-defined]  # the worker's thread
    np.testing.assert_array_equal(
        _read(source, threaded_cache), tifffile.imread(tmp_path / "image.tif")
    )
    np.testing.assert_array_equal(
        _read(source, threaded_cache)[37:91:3, ::-7], data[37:91:3, ::-7]
    )


def test_fsspec_reads_the_same_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline_cache: ChunkCache
) -> None:
    """fsspec's ReferenceFileSystem (kerchunk's reader) agrees with ours on the same file."""
    fsspec = pytest.importorskip("fsspec")
    from zarr.storage import FsspecStore

    data = smooth_data((45, 70), np.int32)
    path, _ = _zarr_v2(tmp_path, data, chunks=(16, 32), compressor={"id": "zlib"})
    pack_store(path, tmp_path / "packed.json")
    ours = _read(ManifestSource(tmp_path / "packed.json"), inline_cache)
    monkeypatch.chdir(
        tmp_path
    )  # fsspec resolves relative references against the working directory
    filesystem = fsspec.filesystem(
        "reference", fo="packed.json", remote_protocol="file", asynchronous=True
    )
    theirs = zarr.open_array(store=FsspecStore(filesystem, read_only=True), mode="r")[...]
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, data)


def _zarr_v2(
    tmp_path: Path, data: np.ndarray[Any, Any], *, chunks: tuple[int, ...], compressor: Any
) -> tuple[Path, zarr.Array[Any]]:
    path = tmp_path / "original.zarr"
    array = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=chunks,
        dtype=data.dtype,
        zarr_format=2,
        compressors=compressor,
    )
    array[...] = data
    return path, array


def test_chunks_of_a_zarr_store_packed_into_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threaded_cache: ChunkCache
) -> None:
    data = smooth_data((61, 47), np.uint16)
    data[:16, :16] = 0  # an all-fill chunk zarr does not write: absent, read as fill
    path, original = _zarr_v2(tmp_path, data, chunks=(16, 16), compressor={"id": "blosc"})
    refs = pack_store(path, tmp_path / "packed.json")
    assert "0.0" not in refs
    # Inline one chunk (base64) and point one at a whole file of its own.
    refs["3.2"] = "base64:" + base64.b64encode((path / "3.2").read_bytes()).decode()
    (tmp_path / "chunk-1.1").write_bytes((path / "1.1").read_bytes())
    refs["1.1"] = ["chunk-1.1"]
    _write_refs(tmp_path / "packed.json", refs)
    monkeypatch.chdir(tmp_path.parent)  # resolution is relative to the manifest, not the cwd
    source = ManifestSource(tmp_path / "packed.json")
    np.testing.assert_array_equal(_read(source, threaded_cache), original[...])
    np.testing.assert_array_equal(_read(source, threaded_cache), data)


def test_a_sharded_v3_store_packed_into_one_file(
    tmp_path: Path, inline_cache: ChunkCache, make_store: Any
) -> None:
    """Byte ranges inside a referenced range: each inner chunk is one ranged read."""
    path, data = make_store(shape=(70, 90), chunks=(16, 16), shards=(32, 48))
    pack_store(path, tmp_path / "sharded.json")
    source = ManifestSource(tmp_path / "sharded.json")
    assert source._shards is not None
    assert source.grid[0].chunk_size(0) == 16
    np.testing.assert_array_equal(_read(source, inline_cache), data)


def test_a_raw_file_by_row_blocks(tmp_path: Path, inline_cache: ChunkCache) -> None:
    data = smooth_data((40, 33), np.dtype("<i2"))
    data.tofile(tmp_path / "frame.raw")
    row = 33 * 2
    refs: dict[str, Any] = {".zarray": _zarray((40, 33), (8, 33), "<i2")}
    refs.update({f"{i}.0": ["frame.raw", i * 8 * row, 8 * row] for i in range(5)})
    source = ManifestSource(_write_refs(tmp_path / "frame.json", refs))
    np.testing.assert_array_equal(_read(source, inline_cache), data)


def test_version_0_and_groups(tmp_path: Path, inline_cache: ChunkCache) -> None:
    data = np.arange(24, dtype="<u2").reshape(4, 6)
    data.tofile(tmp_path / "a.raw")
    refs = {
        ".zgroup": json.dumps({"zarr_format": 2}),
        "img/.zarray": _zarray((4, 6), (2, 6)),
        "img/0.0": ["a.raw", 0, 24],
        "img/1.0": ["a.raw", 24, 24],
    }
    (tmp_path / "v0.json").write_text(json.dumps(refs))  # version 0: the references alone
    with pytest.raises(NotAZarrStoreError, match=r"v0\.json: .*group.*'img'"):
        ManifestSource(tmp_path / "v0.json")
    source = ManifestSource(tmp_path / "v0.json", path="img")
    assert str(source.identity) == f"{tmp_path / 'v0.json'}/img"
    assert source.identity.version == source.store.version  # type: ignore[attr-defined]
    np.testing.assert_array_equal(_read(source, inline_cache), data)
    (image,) = describe_store(tmp_path / "v0.json")
    assert (image.name, image.levels[0].path, image.levels[0].shape) == ("img", "img", (4, 6))
    np.testing.assert_array_equal(
        _read(open_source(tmp_path / "v0.json", path="img"), inline_cache), data
    )


# -- refusing what a manifest may not reach -------------------------------------


@pytest.fixture(autouse=True)
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hermetic trust settings: no variables, a settings file (absent until written)."""
    path = tmp_path / "settings" / "settings.toml"
    monkeypatch.setenv(SETTINGS_VARIABLE, str(path))
    monkeypatch.delenv(ALLOWED_ROOTS_VARIABLE, raising=False)
    monkeypatch.delenv(ALLOWED_REMOTES_VARIABLE, raising=False)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, np.ndarray[Any, Any]]:
    """A manifest directory, and a raw file beside it (outside it)."""
    (tmp_path / "refs").mkdir()
    data = np.arange(8, dtype="<u2").reshape(2, 4)
    data.tofile(tmp_path / "secret.raw")
    return tmp_path / "refs", data


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("../secret.raw", r"escapes the reference file's folder with '\.\.'"),
        ("{abs}", "is outside the reference file's folder"),
        ("file://{abs}", "is outside the reference file's folder"),
        ("link.raw", "leads through a symbolic link to .*secret.raw"),
    ],
)
def test_local_references_outside_the_folder_are_refused_until_allowed(
    outside: tuple[Path, np.ndarray[Any, Any]],
    inline_cache: ChunkCache,
    settings: Path,
    monkeypatch: pytest.MonkeyPatch,
    reference: str,
    why: str,
) -> None:
    folder, data = outside
    secret = folder.parent / "secret.raw"
    (folder / "link.raw").symlink_to(secret)
    url = reference.format(abs=secret)
    manifest = _write_refs(
        folder / "refs.json",
        {".zarray": _zarray((2, 4), (2, 4)), "0.0": [url, 0, 16]},
    )
    pattern = rf"refs\.json: key '0\.0': reference '{re.escape(url)}' {why}"
    for call in (ManifestSource, describe_store):
        with pytest.raises(UnsafeDataError, match=pattern) as refused:
            call(manifest)
    # The message says exactly how to allow it: which folder, where to name it.
    message = str(refused.value)
    parent = str(folder.parent)
    assert f"To allow the files under {parent}, add that folder to" in message
    assert ALLOWED_ROOTS_VARIABLE in message
    assert f"allowed_roots in {settings}" in message
    assert f"policy=ReferencePolicy(roots=[{parent!r}])" in message
    with pytest.raises(UnsafeDataError):
        ManifestSource(manifest, allow_protocols=("https",))  # a protocol allows no path
    allowed = [
        ManifestSource(manifest, allow_outside=True),
        ManifestSource(manifest, policy=ReferencePolicy(roots=[parent])),
    ]
    monkeypatch.setenv(ALLOWED_ROOTS_VARIABLE, os.pathsep.join(["/nonexistent", parent]))
    allowed.append(ManifestSource(manifest))
    monkeypatch.delenv(ALLOWED_ROOTS_VARIABLE)
    settings.parent.mkdir()
    settings.write_text(f"[references]\nallowed_roots = [{json.dumps(parent)}]\n")
    allowed.append(ManifestSource(manifest))
    for source in allowed:
        np.testing.assert_array_equal(_read(source, inline_cache), data)
    # An explicit policy replaces the user's settings.
    with pytest.raises(UnsafeDataError):
        ManifestSource(manifest, policy=ReferencePolicy())


def test_references_that_resolve_inside_the_folder_are_accepted(
    tmp_path: Path, inline_cache: ChunkCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Absolute, file://, ~, '..' that comes back, and links that stay inside: all accepted."""
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    data = np.arange(40, dtype="<u2").reshape(5, 8)
    data.tofile(folder / "sub" / "pixels.raw")
    (folder / "alias.raw").symlink_to(folder / "sub" / "pixels.raw")
    monkeypatch.setenv("HOME", str(tmp_path))
    row = 16
    forms = [
        str(folder / "sub" / "pixels.raw"),
        f"file://{folder / 'sub' / 'pixels.raw'}",
        "file://localhost" + str(folder / "sub" / "pixels.raw"),
        "~/data/sub/pixels.raw",
        "sub/../sub/./pixels.raw",
        "alias.raw",
    ]
    refs: dict[str, Any] = {".zarray": _zarray((5, 8), (1, 8))}
    refs.update({f"{i}.0": [form, i * row, row] for i, form in enumerate(forms[:5])})
    manifest = _write_refs(folder / "refs.json", refs)
    refs["4.0"] = [forms[5], 4 * row, row]
    linked = _write_refs(folder / "linked.json", refs)
    for path in (manifest, linked):
        source = ManifestSource(path, policy=ReferencePolicy())  # nothing beyond the folder
        np.testing.assert_array_equal(_read(source, inline_cache), data)


@pytest.mark.parametrize(
    ("url", "allowed", "why"),
    [
        ("https://example.org/secret.raw", (), "uses the protocol 'https', which is not allowed"),
        ("s3://bucket/secret.raw", (), "uses the protocol 's3', which is not allowed"),
        ("s3://bucket/secret.raw", ("s3://other",), "uses the protocol 's3'"),
        ("https://127.0.0.1/x", ("https",), "points to the loopback address 127.0.0.1"),
        ("http://[::1]:8080/x", ("http",), "points to the loopback address ::1"),
        ("http://localhost:8080/x", ("http",), "points to the loopback host 'localhost'"),
        (
            "http://169.254.169.254/latest/meta-data",
            ("http", "https://169.254.169.254"),
            "points to the link-local address 169.254.169.254",
        ),
        ("https://10.1.2.3/x", ("https",), "points to the private address 10.1.2.3"),
        ("https://192.168.0.7/x", ("https",), "points to the private address 192.168.0.7"),
        ("http://0.0.0.0:9000/x", ("http",), "points to the private address 0.0.0.0"),
        (
            "http://[::ffff:127.0.0.1]/x",
            ("http",),
            r"points to the loopback address ::ffff:127\.0\.0\.1",
        ),
        (
            "http://2130706433/x",
            ("http",),
            r"points to the loopback address 127\.0\.0\.1 \('2130706433' resolves to it\)",
        ),
    ],
)
def test_remote_references_are_refused_until_allowed(
    tmp_path: Path, url: str, allowed: tuple[str, ...], why: str
) -> None:
    manifest = _write_refs(
        tmp_path / "refs.json", {".zarray": _zarray((2, 4), (2, 4)), "0.0": [url, 0, 16]}
    )
    pattern = rf"refs\.json: key '0\.0': reference '{re.escape(url)}' {why}"
    with pytest.raises(UnsafeDataError, match=pattern) as refused:
        ManifestSource(manifest, allow_protocols=allowed)
    message = str(refused.value)
    assert ALLOWED_REMOTES_VARIABLE in message
    assert "allowed_remotes in" in message
    with pytest.raises(UnsafeDataError):
        ManifestSource(manifest, allow_outside=True)  # allowing paths allows no protocol
    # The location the message names, and only it, allows the reference (nothing is read).
    location = re.search(r"add '([^']+)'", message)
    assert location is not None
    ManifestSource(manifest, policy=ReferencePolicy(remotes=[location.group(1)]))


def test_a_public_address_is_allowed_by_its_protocol(tmp_path: Path) -> None:
    refs = {".zarray": _zarray((2, 4), (2, 4)), "0.0": ["https://8.8.8.8/data.raw", 0, 16]}
    manifest = _write_refs(tmp_path / "refs.json", refs)
    ManifestSource(manifest, allow_protocols=("https",))  # opens; nothing is read yet
    refs["0.0"] = ["s3://bucket/data.raw", 0, 16]  # a bucket is not an address
    ManifestSource(_write_refs(manifest, refs), policy=ReferencePolicy(remotes=["s3"]))


def test_settings_file_and_variables(
    tmp_path: Path, settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.parent.mkdir()
    settings.write_text(
        '[references]\nallowed_roots = ["scans", "/srv/data"]\n'
        'allowed_remotes = ["s3://open-data"]\n'
    )
    monkeypatch.setenv(ALLOWED_ROOTS_VARIABLE, f"~/h5{os.pathsep}")
    monkeypatch.setenv(ALLOWED_REMOTES_VARIABLE, "gs, https://example.org")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert settings_path() == str(settings)
    policy = ReferencePolicy.from_settings()
    assert policy.roots == (
        str(tmp_path / "h5"),
        str(settings.parent / "scans"),
        "/srv/data",
    )
    assert policy.remotes == ("gs", "https://example.org", "s3://open-data")
    monkeypatch.setenv(ALLOWED_REMOTES_VARIABLE, "htps//example.org")
    with pytest.raises(MetadataError, match=rf"{ALLOWED_REMOTES_VARIABLE}: 'htps//example\.org'"):
        ReferencePolicy.from_settings()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[references\n", "cannot read the napari-lazy-zarr settings"),
        ("references = 3\n", "'references' must be a table"),
        ("[references]\nallowed_root = []\n", "'allowed_root' is not a setting"),
        ("[references]\nallowed_roots = '/data'\n", "allowed_roots must be a list of strings"),
        ("[references]\nallowed_remotes = ['file']\n", "allowed_remotes: 'file': local"),
    ],
)
def test_a_malformed_settings_file_is_named_when_it_is_needed(
    outside: tuple[Path, np.ndarray[Any, Any]], settings: Path, text: str, message: str
) -> None:
    folder, _ = outside
    settings.parent.mkdir()
    settings.write_text(text)
    np.zeros(8, "<u2").tofile(folder / "inside.raw")
    zarray = _zarray((2, 4), (2, 4))
    inside = _write_refs(folder / "inside.json", {".zarray": zarray, "0.0": ["inside.raw"]})
    ManifestSource(inside)  # needs no settings: they are not read
    escaping = _write_refs(folder / "refs.json", {".zarray": zarray, "0.0": ["../secret.raw"]})
    with pytest.raises(MetadataError, match=rf"{re.escape(str(settings))}: .*{message}"):
        ManifestSource(escaping)


def test_remote_entries_are_checked() -> None:
    for bad in ["htps//x", "https:///no-host", "file", "https://host:port/", ""]:
        with pytest.raises(ValueError, match=r"neither a protocol|local files"):
            ReferencePolicy(remotes=[bad])


# -- kerchunk's own output: HDF5 files written by h5py -----------------------------


@pytest.fixture
def hdf5_files(tmp_path: Path) -> list[tuple[Path, np.ndarray[Any, Any]]]:
    """Two HDF5 files (h5py, gzip-compressed chunks) in tmp_path/h5, and their 'data'."""
    h5py = pytest.importorskip("h5py")
    (tmp_path / "h5").mkdir()
    files = []
    for t in range(2):
        data = smooth_data((70, 90)) + 1000 * t
        path = tmp_path / "h5" / f"t{t}.h5"
        with h5py.File(path, "w") as handle:
            handle.create_dataset("data", data=data, chunks=(32, 40), compression="gzip")
            handle.create_dataset("time", data=np.array([t], "f8"))
        files.append((path, data))
    return files


def _kerchunk(h5: Path, url: str | None = None) -> dict[str, Any]:
    """kerchunk's references for `h5`, with the file's URL as kerchunk writes it."""
    from kerchunk.hdf import SingleHdf5ToZarr

    if url is None:  # given a path, kerchunk writes it: an absolute path here
        refs: dict[str, Any] = SingleHdf5ToZarr(str(h5)).translate()
        return refs
    with open(h5, "rb") as handle:
        refs = SingleHdf5ToZarr(handle, url).translate()
    return refs


@pytest.mark.parametrize("form", ["absolute", "file-url"])
def test_kerchunk_hdf5_references_beside_the_file(
    hdf5_files: list[tuple[Path, np.ndarray[Any, Any]]], inline_cache: ChunkCache, form: str
) -> None:
    (h5, data), _ = hdf5_files
    refs = _kerchunk(h5, None if form == "absolute" else f"file://{h5}")
    chunk = refs["refs"]["data/0.0"]
    assert chunk[0] == (str(h5) if form == "absolute" else f"file://{h5}")
    manifest = h5.parent / "t0.json"
    manifest.write_text(json.dumps(refs))
    source = ManifestSource(manifest, path="data", policy=ReferencePolicy())
    np.testing.assert_array_equal(_read(source, inline_cache), data)
    images = describe_store(manifest)
    assert [image.name for image in images] == ["data", "time"]
    np.testing.assert_array_equal(
        _read(open_source(manifest, path=images[0].levels[0].path), inline_cache), data
    )


def test_kerchunk_multizarr_of_two_hdf5_files(
    hdf5_files: list[tuple[Path, np.ndarray[Any, Any]]], inline_cache: ChunkCache
) -> None:
    from kerchunk.combine import MultiZarrToZarr

    singles = [
        _kerchunk(h5, f"file://{h5}" if t else None) for t, (h5, _) in enumerate(hdf5_files)
    ]
    combined = MultiZarrToZarr(singles, concat_dims=["t"], coo_map={"t": "INDEX"}).translate()
    manifest = hdf5_files[0][0].parent / "combined.json"
    manifest.write_text(json.dumps(combined))
    source = ManifestSource(manifest, path="data")
    np.testing.assert_array_equal(
        _read(source, inline_cache), np.stack([data for _, data in hdf5_files])
    )
    images = {image.name: image for image in describe_store(manifest)}
    assert images["data"].levels[0].shape == (2, 70, 90)


def test_kerchunk_output_elsewhere_is_refused_with_how_to_allow_it(
    hdf5_files: list[tuple[Path, np.ndarray[Any, Any]]],
    inline_cache: ChunkCache,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (h5, data), _ = hdf5_files
    (tmp_path / "refs").mkdir()
    manifest = tmp_path / "refs" / "t0.json"
    manifest.write_text(json.dumps(_kerchunk(h5)))
    reference = re.escape(repr(str(h5)))
    with pytest.raises(
        UnsafeDataError,
        match=rf"t0\.json: key 'data/\d\.\d': reference {reference} is outside the reference "
        rf"file's folder\. .*To allow the files under {re.escape(str(h5.parent))}, add that "
        rf"folder to Allowed folders in napari's Preferences \(Plugin Preferences > "
        rf"napari-lazy-zarr\), to the environment variable {ALLOWED_ROOTS_VARIABLE}",
    ):
        describe_store(manifest)
    monkeypatch.setenv(ALLOWED_ROOTS_VARIABLE, str(h5.parent))
    (image, _) = describe_store(manifest)
    source = open_source(manifest, path=image.levels[0].path)
    np.testing.assert_array_equal(_read(source, inline_cache), data)


def test_kerchunk_references_to_a_server(
    hdf5_files: list[tuple[Path, np.ndarray[Any, Any]]],
    inline_cache: ChunkCache,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Served on 127.0.0.1: refused by protocol, allowed by naming the location."""
    pytest.importorskip("aiohttp")
    from tests.remote.server import FaultyServer

    (h5, data), _ = hdf5_files
    with FaultyServer(h5.parent) as server:
        manifest = h5.parent / "remote.json"
        manifest.write_text(json.dumps(_kerchunk(h5, f"{server.url}/t0.h5")))
        with pytest.raises(UnsafeDataError, match="uses the protocol 'http', which is not"):
            ManifestSource(manifest, path="data")
        monkeypatch.setenv(ALLOWED_REMOTES_VARIABLE, "http")
        with pytest.raises(
            UnsafeDataError,
            match=rf"points to the loopback address 127\.0\.0\.1, .* add '{server.url}'",
        ):
            ManifestSource(manifest, path="data")
        assert server.faults.total() == 0  # refused before any request
        monkeypatch.setenv(ALLOWED_REMOTES_VARIABLE, f"https, {server.url}")
        source = ManifestSource(manifest, path="data")
        np.testing.assert_array_equal(_read(source, inline_cache), data)
        assert server.faults.total("t0.h5") > 0


def test_a_reference_kerchunk_wrote_without_a_url(tmp_path: Path) -> None:
    manifest = _write_refs(
        tmp_path / "refs.json", {".zarray": _zarray((2, 4), (2, 4)), "0.0": [None, 0, 16]}
    )
    with pytest.raises(MetadataError, match=r"refs\.json: key '0\.0': .* names no file"):
        ManifestSource(manifest)


def test_an_allowed_protocol_is_read_with_fsspec(tmp_path: Path, inline_cache: ChunkCache) -> None:
    fsspec = pytest.importorskip("fsspec")
    data = np.arange(8, dtype="<u2").reshape(2, 4)
    memory = fsspec.filesystem("memory")
    memory.pipe("/lazy-zarr-test/blob.bin", b"xxxx" + data.tobytes())
    try:
        manifest = _write_refs(
            tmp_path / "remote.json",
            {
                ".zarray": _zarray((2, 4), (2, 4)),
                "0.0": ["memory://lazy-zarr-test/blob.bin", 4, 16],
            },
        )
        source = ManifestSource(manifest, allow_protocols=("memory",))
        np.testing.assert_array_equal(_read(source, inline_cache), data)
    finally:
        memory.rm("/lazy-zarr-test", recursive=True)


def test_pickle_codecs_are_refused_by_key(tmp_path: Path) -> None:
    zarray = json.loads(_zarray((2, 4), (2, 4)))
    zarray["filters"] = [{"id": "pickle"}]
    manifest = _write_refs(tmp_path / "p.json", {".zarray": json.dumps(zarray)})
    with pytest.raises(UnsafeDataError, match=r"p\.json: key '\.zarray': .*codec 'pickle'"):
        ManifestSource(manifest)


@pytest.mark.parametrize(
    ("document", "error", "message"),
    [
        ("{not json", MetadataError, "the manifest: malformed JSON"),
        ('["a list"]', MetadataError, "not a JSON object"),
        ({"version": 2, "refs": {}}, UnsupportedDataError, "version 2 is not supported"),
        ({"version": 1, "refs": []}, MetadataError, "'refs' is not a JSON object"),
        (
            {"version": 1, "refs": {}, "gen": [{"key": "x"}]},
            UnsupportedDataError,
            r"generated references \('gen'\)",
        ),
        ({"version": 1, "refs": {"0.0": ["a", -1, 5]}}, MetadataError, "key '0.0': reference"),
        ({"version": 1, "refs": {"0.0": ["a", 1]}}, MetadataError, r"\[url, offset, length\]"),
        ({"version": 1, "refs": {"0.0": "base64:@@"}}, MetadataError, "malformed base64"),
        (
            {"version": 1, "refs": {"0.0": ["{{nope}}/a", 0, 1]}},
            MetadataError,
            "template 'nope', which 'templates' does not define",
        ),
        ({"version": 1, "refs": {".zarray": "{broken"}}, MetadataError, r"'\.zarray': malformed"),
    ],
)
def test_malformed_manifests(
    tmp_path: Path, document: Any, error: type[Exception], message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(error, match=rf"bad\.json: .*{message}"):
        ManifestStore(path)
    with pytest.raises(StoreNotFoundError, match="no such file"):
        ManifestStore(tmp_path / "missing.json")


def test_a_short_file_fails_its_chunk_naming_manifest_key_and_reference(
    tmp_path: Path, inline_cache: ChunkCache
) -> None:
    np.arange(12, dtype="<u2").tofile(tmp_path / "short.raw")  # 24 bytes; 32 referenced
    manifest = _write_refs(
        tmp_path / "short.json",
        {
            ".zarray": _zarray((4, 4), (2, 4)),
            "0.0": ["short.raw", 0, 16],
            "1.0": ["short.raw", 16, 16],
        },
    )
    array = ChunkedArray(ManifestSource(manifest), inline_cache)
    partial = array.read_nonblocking()
    partial.request.release()
    (good, bad) = (ref.key for ref in array.chunk_refs())
    assert inline_cache.state(good) is ChunkState.READY
    assert inline_cache.state(bad) is ChunkState.FAILED
    message = str(inline_cache.error(bad))
    assert re.search(
        r"short\.json: key '1\.0': reference \['short\.raw', 16, 16\]: .*8 of the 16 bytes",
        message,
    ), message
    with pytest.raises(ChunkReadError):
        array.result(timeout=5)


def test_manifests_are_read_only(tmp_path: Path) -> None:
    np.zeros(8, "<u2").tofile(tmp_path / "z.raw")
    manifest = _write_refs(
        tmp_path / "z.json", {".zarray": _zarray((2, 4), (2, 4)), "0.0": ["z.raw", 0, 16]}
    )
    source = ManifestSource(manifest)
    with pytest.raises(ReadOnlyError, match=r"z\.json: cannot write '0\.0'"):
        source.array[0, 0] = 1
    with pytest.raises(ReadOnlyError):
        source.store.set_sync("0.0", source.store.get_sync("0.0"))  # type: ignore[arg-type]


def test_reference_file_kind_is_cheap_and_never_raises(tmp_path: Path) -> None:
    (tmp_path / "refs.json").write_text(json.dumps({".zarray": "{}"}))
    (tmp_path / "movie.zstack.json").write_text("{}")
    (tmp_path / "settings.json").write_text(json.dumps({"theme": "dark"}))
    assert reference_file_kind(tmp_path / "refs.json") == "kerchunk"
    assert reference_file_kind(tmp_path / "movie.zstack.json") == "stack"
    assert reference_file_kind(tmp_path / "settings.json") is None
    assert reference_file_kind(tmp_path / "missing.json") is None
    assert reference_file_kind(tmp_path) is None
    assert reference_file_kind("https://example.org/refs.json") is None
    assert reference_file_kind("\x00.json") is None
    assert reference_file_kind(None) is None  # type: ignore[arg-type]


# -- stack files --------------------------------------------------------------


@pytest.fixture
def planes(tmp_path: Path, make_store: Any) -> list[np.ndarray[Any, Any]]:
    """Three zarr arrays t0..t2 (37 x 53) with different chunking, beside the stack files."""
    values = []
    for t, chunks in enumerate([(8, 16), (16, 8), (37, 53)]):
        data = smooth_data((37, 53)) + t
        path, _ = make_store(data=data, chunks=chunks)
        path.rename(tmp_path / f"t{t}.zarr")
        values.append(data)
    return values


def _stack_file(tmp_path: Path, file: str = "movie.zstack.json", **document: Any) -> Path:
    path = tmp_path / file
    path.write_text(json.dumps({"zstack": 1, **document}))
    return path


def test_stack_files_stack_and_concatenate(
    tmp_path: Path, planes: list[np.ndarray[Any, Any]], inline_cache: ChunkCache
) -> None:
    arrays = ["t0.zarr", {"store": "t1.zarr"}, {"store": "t2.zarr", "path": ""}]
    stacked = open_stack(_stack_file(tmp_path, mode="stack", arrays=arrays))
    assert isinstance(stacked, StackSource)
    np.testing.assert_array_equal(_read(stacked, inline_cache), np.stack(planes))
    path = _stack_file(tmp_path, "wide.zstack.json", mode="concat", axis=-1, arrays=arrays)
    joined = open_stack(path)
    assert type(joined) is ConcatSource
    np.testing.assert_array_equal(_read(joined, inline_cache), np.concatenate(planes, axis=-1))
    assert read_stack_file(path).members[1] == StackMember("t1.zarr", "")


def test_stack_file_members_may_be_kerchunk_references(
    tmp_path: Path, planes: list[np.ndarray[Any, Any]], inline_cache: ChunkCache
) -> None:
    (tmp_path / "refs").mkdir()
    pack_store(tmp_path / "t1.zarr", tmp_path / "refs" / "t1.json")
    path = _stack_file(tmp_path, mode="stack", axis=2, arrays=["t0.zarr", "refs/t1.json"])
    np.testing.assert_array_equal(
        _read(open_stack(path), inline_cache), np.stack(planes[:2], axis=2)
    )


def test_stack_files_refuse_members_outside_their_directory(
    tmp_path: Path, planes: list[np.ndarray[Any, Any]]
) -> None:
    (tmp_path / "inner").mkdir()
    path = _stack_file(tmp_path / "inner", mode="stack", arrays=["../t0.zarr"])
    with pytest.raises(
        UnsafeDataError, match=r"movie\.zstack\.json: member 0: reference '\.\./t0"
    ):
        open_stack(path)
    assert open_stack(path, allow_outside=True).shape == (1, 37, 53)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"mode": "stack"}, "'arrays' must be a non-empty list"),
        ({"mode": "merge", "arrays": ["a.zarr"]}, "'mode' must be 'concat' or 'stack'"),
        ({"mode": "stack", "arrays": ["a.zarr"], "axes": [0]}, "'axes' is not a stack file field"),
        ({"mode": "stack", "arrays": [5]}, "'arrays' entry 5 is neither a path"),
        ({"mode": "stack", "arrays": ["x.zstack.json"]}, "'arrays' .* cannot be nested"),
        ({"mode": "stack", "arrays": ["a.zarr"], "axis": "0"}, "'axis' must be an integer"),
    ],
)
def test_malformed_stack_files(tmp_path: Path, document: dict[str, Any], message: str) -> None:
    with pytest.raises(MetadataError, match=rf"movie\.zstack\.json: {message}"):
        read_stack_file(_stack_file(tmp_path, **document))
    path = tmp_path / "v2.zstack.json"
    path.write_text(json.dumps({"zstack": 2, "mode": "stack", "arrays": ["a.zarr"]}))
    with pytest.raises(MetadataError, match="'zstack' must be 1"):
        read_stack_file(path)


def test_stack_files_with_mismatched_members(
    tmp_path: Path, planes: list[np.ndarray[Any, Any]], make_store: Any
) -> None:
    path, _ = make_store(shape=(37, 50))
    path.rename(tmp_path / "narrow.zarr")
    stack = _stack_file(tmp_path, mode="stack", arrays=["t0.zarr", "narrow.zarr"])
    with pytest.raises(IncompatibleSourcesError, match=r"stack: source 1 .* along axis 1"):
        open_stack(stack)
    with pytest.raises(IncompatibleSourcesError, match="stack: source 1"):
        describe_store(stack)


def test_describe_store_names_stack_and_reference_layers(
    tmp_path: Path, planes: list[np.ndarray[Any, Any]]
) -> None:
    path = _stack_file(
        tmp_path, mode="stack", arrays=["t0.zarr", "t1.zarr"], axis_names=["t", "y", "x"]
    )
    (image,) = describe_store(path)
    assert (image.name, image.axis_names, image.levels[0].shape) == (
        "movie",
        ("t", "y", "x"),
        (2, 37, 53),
    )
    named = _stack_file(tmp_path, "b.zstack.json", mode="concat", arrays=["t0.zarr"], name="one")
    assert describe_store(named)[0].name == "one"
    bad = _stack_file(
        tmp_path, "c.zstack.json", mode="stack", arrays=["t0.zarr"], axis_names=["y"]
    )
    with pytest.raises(MetadataError, match="'axis_names' has 1 names for the stack's 3 axes"):
        describe_store(bad)
    pack_store(tmp_path / "t2.zarr", tmp_path / "t2.json")
    (referenced,) = describe_store(tmp_path / "t2.json")
    assert (referenced.name, referenced.levels[0].shape) == ("t2", (37, 53))
