"""Codecs of installed packages (`core/sources/codecs.py`) against tifffile's own references.

tifffile's ``ZarrTiffStore.write_fsspec`` writes kerchunk references to a
TIFF's tiles whose codecs are imagecodecs' (``imagecodecs_lzw``,
``imagecodecs_jpeg``, ``imagecodecs_delta`` ...), Zarr v2 or v3. The oracle
is tifffile's own decode of the same TIFF (`tifffile.imread`: JPEG is lossy,
so the writer's decode, not the array written, is what the references must
give). The registration is once per process: the claims about *when* it
happens (only for a store that needs it) and about a missing package run in
a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tifffile
import tifffile.zarr

from napari_lazy_zarr.core import ChunkCache, ChunkedArray
from napari_lazy_zarr.core.errors import MissingCodecError
from napari_lazy_zarr.core.formats.ome import describe_store, open_source

if TYPE_CHECKING:
    from pathlib import Path


def tiff_references(
    folder: Path, name: str, data: np.ndarray[Any, Any], zarr_format: int, **layout: Any
) -> Path:
    """A TIFF written by tifffile with `layout`, and tifffile's references to it."""
    tifffile.imwrite(folder / f"{name}.tif", data, **layout)
    with tifffile.TiffFile(folder / f"{name}.tif") as tif, tif.aszarr() as store:
        store.write_fsspec(
            str(folder / f"{name}.json"), url=".", version=1, zarr_format=zarr_format
        )
    return folder / f"{name}.json"


def _ramp(shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    """Smooth data (predictors and JPEG are made for it), not constant."""
    grid = np.indices(shape).sum(axis=0)
    return ((grid * 37 + (grid**2) // 11) % 251).astype(dtype)


LAYOUTS: dict[str, tuple[tuple[int, ...], Any, dict[str, Any]]] = {
    "lzw+predictor": ((96, 80), np.uint16, {"compression": "lzw", "predictor": True}),
    "jpeg rgb": ((96, 80, 3), np.uint8, {"compression": "jpeg", "photometric": "rgb"}),
    "deflate": ((96, 80), np.int16, {"compression": "zlib"}),
    "zstd": ((96, 80), np.float32, {"compression": "zstd"}),
    "lzw float+predictor": ((96, 80), np.float32, {"compression": "lzw", "predictor": 3}),
}


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_tifffile_references_with_imagecodecs_read_as_tifffile_decodes(
    tmp_path: Path, threaded_cache: ChunkCache, layout: str, zarr_format: int
) -> None:
    shape, dtype, options = LAYOUTS[layout]
    refs = tiff_references(
        tmp_path, "image", _ramp(shape, dtype), zarr_format, tile=(32, 32), **options
    )
    (spec,) = describe_store(refs)
    source = open_source(refs, path=spec.levels[0].path)
    decoded = ChunkedArray(source, threaded_cache).result(timeout=30)
    expected = tifffile.imread(tmp_path / "image.tif")
    assert decoded.dtype == expected.dtype
    np.testing.assert_array_equal(decoded, expected)


def test_the_references_name_imagecodecs_codecs(tmp_path: Path) -> None:
    """The cases above test what they claim: tifffile's references need imagecodecs."""
    refs = tiff_references(
        tmp_path, "image", _ramp((64, 64), np.uint16), 2, tile=(32, 32), compression="lzw"
    )
    zarray = json.loads(json.loads(refs.read_text())["refs"][".zarray"])
    assert zarray["compressor"]["id"] == "imagecodecs_lzw"


def _python(code: str, tmp_path: Path) -> str:
    """Run `code` in a fresh interpreter (nothing registered yet); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_codecs_are_registered_only_when_a_store_needs_them(tmp_path: Path) -> None:
    for name, zarr_format in (("lzw", 2), ("lzw3", 3)):
        data = _ramp((64, 64), np.uint16)
        tiff_references(tmp_path, name, data, zarr_format, tile=(32, 32), compression="lzw")
    out = _python(
        """
        import sys, numpy as np, tifffile, zarr
        from napari_lazy_zarr.core.formats.ome import describe_store, open_source
        z = zarr.create_array("plain.zarr", shape=(8, 8), dtype="u2")
        z[...] = 3
        describe_store("plain.zarr"), open_source("plain.zarr")
        print("plain", "imagecodecs.numcodecs" in sys.modules, "imagecodecs.zarr" in sys.modules)
        import numcodecs
        try:
            numcodecs.get_codec({"id": "imagecodecs_lzw"})
        except Exception as error:
            print("before", type(error).__name__)
        for name in ("lzw", "lzw3"):
            (spec,) = describe_store(f"{name}.json")
            open_source(f"{name}.json", path=spec.levels[0].path)
            print(name, "imagecodecs.numcodecs" in sys.modules, "imagecodecs.zarr" in sys.modules)
        """,
        tmp_path,
    )
    # Nothing for a plain store; a Zarr v2 store pays only for imagecodecs' numcodecs codecs.
    assert out.splitlines() == [
        "plain False False",
        "before UnknownCodecError",
        "lzw True False",
        "lzw3 True True",
    ]


def test_a_missing_codec_package_is_named_with_the_extra(tmp_path: Path) -> None:
    tiff_references(
        tmp_path, "lzw", _ramp((64, 64), np.uint16), 3, tile=(32, 32), compression="lzw"
    )
    out = _python(
        """
        import sys
        sys.modules["imagecodecs"] = None  # as if imagecodecs were not installed
        from napari_lazy_zarr.core.errors import MissingCodecError
        from napari_lazy_zarr.core.formats.ome import describe_store
        try:
            describe_store("lzw.json")
        except MissingCodecError as error:
            print(error)
        """,
        tmp_path,
    )
    assert "lzw.json: " in out
    assert "'imagecodecs_" in out
    assert "pip install imagecodecs" in out  # works however the plugin was installed


def test_an_unknown_codec_names_itself_and_the_node(tmp_path: Path) -> None:
    import zarr

    array = zarr.create_array(tmp_path / "a.zarr", shape=(4, 4), dtype="u1", zarr_format=2)
    array[...] = 1
    metadata = json.loads((tmp_path / "a.zarr" / ".zarray").read_text())
    metadata["compressor"] = {"id": "no_such_codec"}
    (tmp_path / "a.zarr" / ".zarray").write_text(json.dumps(metadata))
    with pytest.raises(MissingCodecError, match=r"a\.zarr: .*'no_such_codec'.*install"):
        describe_store(tmp_path / "a.zarr")


def test_a_plain_group_listing_an_imagecodecs_array_registers_them(tmp_path: Path) -> None:
    """Listing a Zarr v2 group (no consolidated metadata) parses its members' codecs."""
    import imagecodecs.numcodecs
    import zarr

    imagecodecs.numcodecs.register_codecs(verbose=False)  # the writer's process needs them
    group = zarr.open_group(str(tmp_path / "group.zarr"), mode="w", zarr_format=2)
    data = _ramp((64, 64), np.uint16)
    array = group.create_array(
        "raw",
        shape=data.shape,
        dtype=data.dtype,
        chunks=(32, 32),
        compressors=imagecodecs.numcodecs.Lzw(),
    )
    array[...] = data
    np.save(tmp_path / "expected.npy", data)
    out = _python(
        """
        import numpy as np
        from napari_lazy_zarr.core import ChunkCache, ChunkedArray
        from napari_lazy_zarr.core.formats.ome import describe_store, open_source
        (spec,) = describe_store("group.zarr")
        source = open_source("group.zarr", path=spec.levels[0].path)
        with ChunkCache(16 << 20, concurrency=1) as cache:
            read = ChunkedArray(source, cache).result(timeout=30)
        print(spec.name, np.array_equal(read, np.load("expected.npy")))
        """,
        tmp_path,
    )
    assert out.split() == ["raw", "True"]


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("codec", ["lzw", "zstd"])
def test_an_imagecodecs_stream_that_expands_too_far_is_refused_bounded(
    tmp_path: Path, threaded_cache: ChunkCache, codec: str, zarr_format: int
) -> None:
    """A reference chunk replaced by a stream of 64 MiB of zeros (LZW: 50 kB; zstd: 2 kB)
    for a 32x32 uint16 tile fails that chunk, decoding at most its size plus the slack."""
    import tracemalloc

    import imagecodecs

    from napari_lazy_zarr.core.errors import ChunkReadError

    refs_path = tiff_references(
        tmp_path,
        "image",
        _ramp((64, 64), np.uint16),
        zarr_format,
        tile=(32, 32),
        compression=codec,
    )
    bomb = getattr(imagecodecs, f"{codec}_encode")(bytes(64 << 20))
    (tmp_path / "bomb.bin").write_bytes(bomb)
    references = json.loads(refs_path.read_text())
    references["refs"]["0.0" if zarr_format == 2 else "c/0/0"] = ["bomb.bin", 0, len(bomb)]
    refs_path.write_text(json.dumps(references))
    (spec,) = describe_store(refs_path)
    source = open_source(refs_path, path=spec.levels[0].path)
    tracemalloc.start()
    try:
        # Refused by the check after the decode (LZW stops at the buffer's end), or by the
        # codec itself (zstd: "Destination buffer is too small").
        refused = r"expands beyond its expected 2,048 bytes|Destination buffer is too small"
        with pytest.raises(ChunkReadError, match=refused):
            ChunkedArray(source, threaded_cache)[0:32, 0:32].result(timeout=30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    # The other tiles still read as tifffile decodes them.
    expected = tifffile.imread(tmp_path / "image.tif")
    np.testing.assert_array_equal(
        ChunkedArray(source, threaded_cache)[32:64, 0:64].result(timeout=30), expected[32:64]
    )


# -- stream codecs outside zarr's own: bounded, or refused at open (issue 50) ------------


@pytest.mark.parametrize(
    ("zarr_format", "codec"),
    [
        (2, {"id": "imagecodecs_zlibng"}),
        (2, {"id": "imagecodecs_blosc2"}),
        (3, {"name": "imagecodecs_lzfse", "configuration": {}}),
        (3, {"name": "numcodecs.zlib", "configuration": {"level": 5}}),  # no synchronous form
    ],
)
def test_stream_codecs_without_zarrs_bounds_read_back_bounded(
    tmp_path: Path, zarr_format: int, codec: dict[str, Any]
) -> None:
    """Written by zarr-python with the codec's own encoder; read back exactly, and the
    same codec's 64 MiB stream in that 8 KiB chunk fails the chunk without expanding."""
    import numcodecs
    import zarr
    from imagecodecs.numcodecs import register_codecs
    from zarr.registry import get_codec_class

    from napari_lazy_zarr.core import open_array
    from napari_lazy_zarr.core.errors import ChunkReadError
    from napari_lazy_zarr.core.sources.codecs import register_installed_codecs

    register_installed_codecs()
    register_codecs(verbose=False)
    name = codec.get("id") or codec["name"]
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    path = tmp_path / "a.zarr"
    if zarr_format == 2:
        compressor: Any = numcodecs.get_codec(codec)
    else:
        compressor = get_codec_class(name)(**codec["configuration"])
    array = zarr.create_array(
        str(path), shape=(64, 64), chunks=(64, 64), dtype="u2", compressors=[compressor],
        zarr_format=zarr_format, fill_value=0,  # type: ignore[arg-type]
    )  # fmt: skip
    array[...] = data
    cache = ChunkCache(1 << 24)
    try:
        np.testing.assert_array_equal(open_array(str(path), cache=cache).result(timeout=30), data)
        stream_id = name.removeprefix("numcodecs.")
        bomb = bytes(numcodecs.get_codec({"id": stream_id}).encode(bytes(64 << 20)))
        key = "0.0" if zarr_format == 2 else "c/0/0"
        (path / key).write_bytes(bomb)
        with pytest.raises(ChunkReadError, match=r"expands beyond|does not decode within"):
            open_array(str(path), cache=cache).result(timeout=30)
    finally:
        cache.close()


def test_a_stream_codec_nothing_bounds_is_refused_at_open(tmp_path: Path) -> None:
    """zlib placed before a checksum the bounded decode does not know: zarr would decode it
    alone, unbounded; refused at open, naming the codec."""
    import zarr
    from zarr.registry import get_codec_class

    from napari_lazy_zarr.core import open_array
    from napari_lazy_zarr.core.errors import UnsupportedDataError

    path = tmp_path / "a.zarr"
    compressors = [
        get_codec_class("numcodecs.zlib")(level=5),
        get_codec_class("numcodecs.adler32")(),
    ]
    zarr.create_array(str(path), shape=(8, 8), dtype="u2", compressors=compressors)
    cache = ChunkCache(1 << 20)
    try:
        with pytest.raises(UnsupportedDataError, match=r"codec 'numcodecs.zlib' could decompress"):
            open_array(str(path), cache=cache)
    finally:
        cache.close()
