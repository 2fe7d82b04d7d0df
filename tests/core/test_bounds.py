"""Bounded reads (issue 11): decode caps, regular files only, no torn reads, no stale pixels.

Decompression bombs are real files: zarr-python writes a valid array, then one chunk
file (or shard) is replaced by a bomb that expands to 512 MiB. They are read in a
subprocess whose address space is capped (``RLIMIT_AS``) a little above what it uses,
so an unbounded decode fails with ``MemoryError`` instead of loading the machine, and
whose resident peak growth (``VmHWM``, reset before each read) is reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import warnings
import zipfile
import zlib
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest
import zarr

from napari_lazy_zarr.core import (
    ChunkCache,
    ChunkReadError,
    InlineExecutor,
    LazyZarrError,
    MetadataError,
    open_array,
    open_zarr_source,
)
from napari_lazy_zarr.core.sources._decode import ExpansionError, bounded_decode
from napari_lazy_zarr.core.sources.zarr import ZarrChunkSource
from napari_lazy_zarr.core.storage.files import (
    SETTLE_SECONDS,
    FileChangedError,
    load_json,
    read_regular_file,
)
from napari_lazy_zarr.core.storage.local import BoundedZipStore
from napari_lazy_zarr.core.storage.retry import NO_RETRY

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="needs RLIMIT_AS, /proc, FIFOs and /dev/zero (POSIX)"
)

BOMB = 512 << 20  # bytes a bomb expands to
HEADROOM = 384 << 20  # fresh address space the reading subprocess may map
PEAK_LIMIT = 64 << 20  # resident growth a refused bomb may cause
WAIT = 20.0  # seconds any single read may take here
_ZEROS = bytes(16 << 20)


# -- bombs ----------------------------------------------------------------------


def _zlib_bomb(size: int, wbits: int = 15) -> bytes:
    """One deflate stream of `size` zero bytes, built from a repeated fully flushed block."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    head = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH) == block
    tail = compressor.flush()
    return head + block * (size // len(_ZEROS) - 1) + tail  # checksum: of 48 MiB, ignored


def _streams_bomb(compress: Callable[[bytes], bytes], size: int) -> bytes:
    """Concatenated streams (as gzip, bz2 and xz readers accept) of `size` zero bytes."""
    member = compress(bytes(32 << 20))
    return member * (size // (32 << 20))


def _zstd_bomb(size: int, *, declared: bool) -> bytes:
    import zstandard

    compressor = zstandard.ZstdCompressor(level=1, write_content_size=declared)
    stream = compressor.compressobj(size=size if declared else -1)
    parts = [stream.compress(_ZEROS) for _ in range(size // len(_ZEROS))]
    return b"".join([*parts, stream.flush()])


def _blosc_bomb() -> bytes:
    """A blosc frame whose header declares 512 MiB (its payload need not be real)."""
    frame = bytearray(numcodecs.Blosc(cname="zstd").encode(bytes(8192)))
    frame[4:8] = BOMB.to_bytes(4, "little")
    return bytes(frame)


def _lz4_bomb() -> bytes:
    frame = bytearray(numcodecs.LZ4().encode(bytes(8192)))
    frame[0:4] = BOMB.to_bytes(4, "little")
    return bytes(frame)


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    import bz2
    import gzip
    import lzma

    return {
        "zstd": _zstd_bomb(BOMB, declared=True),
        "zstd-undeclared": _zstd_bomb(BOMB, declared=False),
        "zlib": _zlib_bomb(BOMB),
        "gzip": _streams_bomb(lambda b: gzip.compress(b, 9), BOMB),
        "bz2": _streams_bomb(lambda b: bz2.compress(b, 1), BOMB),
        "lzma": _streams_bomb(lambda b: lzma.compress(b, preset=0), BOMB),
        "blosc": _blosc_bomb(),
        "lz4": _lz4_bomb(),
    }


def _v3_codec(name: str) -> Any:
    from zarr.codecs import numcodecs as wrapped

    return {
        "zstd": zarr.codecs.ZstdCodec(),
        "zstd-undeclared": zarr.codecs.ZstdCodec(),
        "gzip": zarr.codecs.GzipCodec(),
        "blosc": zarr.codecs.BloscCodec(),
        "zlib": wrapped.Zlib(),
        "bz2": wrapped.BZ2(),
        "lzma": wrapped.LZMA(),
        "lz4": wrapped.LZ4(),
    }[name]


def _v2_codec(name: str) -> Any:
    return {
        "zstd": numcodecs.Zstd(),
        "zstd-undeclared": numcodecs.Zstd(),
        "gzip": numcodecs.GZip(),
        "blosc": numcodecs.Blosc(),
        "zlib": numcodecs.Zlib(),
        "bz2": numcodecs.BZ2(),
        "lzma": numcodecs.LZMA(),
        "lz4": numcodecs.LZ4(),
    }[name]


def _write(path: Path, *, zarr_format: int = 3, **options: Any) -> zarr.Array[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs codecs in v3 are "unstable"
        array = zarr.create_array(
            str(path),
            shape=(128, 128),
            chunks=(64, 64),
            dtype="u2",
            zarr_format=zarr_format,  # type: ignore[arg-type]
            **options,
        )
        array[:] = np.arange(128 * 128, dtype="u2").reshape(128, 128)
    return array


def _chunk_file(path: Path, zarr_format: int) -> Path:
    return path / ("c/0/0" if zarr_format == 3 else "0.0")


def _shard_bytes(inner: bytes, chunks_per_shard: int, *, length: int | None = None) -> bytes:
    """A shard holding `inner` as its first inner chunk (index at the end, crc32c'd)."""
    index = np.full((chunks_per_shard, 2), 2**64 - 1, dtype="<u8")
    index[0] = (0, len(inner) if length is None else length)
    return inner + bytes(numcodecs.CRC32C().encode(index.tobytes()))


_CHILD = r"""
import json, os, resource, sys, warnings
warnings.simplefilter("ignore")
from napari_lazy_zarr.core import open_zarr_source

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0

results = {}
for case, path in json.loads(sys.argv[1]).items():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = status("VmRSS")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (status("VmSize") + int(sys.argv[2]), hard))
    try:
        source = open_zarr_source(path)
        source.read_chunk((0, 0))
        outcome = {"status": "read"}
    except BaseException as error:
        chain, current = [], error
        while current is not None and len(chain) < 10:
            chain.append(type(current).__name__)
            current = current.__cause__ or current.__context__
        outcome = {"status": "error", "type": type(error).__name__, "message": str(error),
                   "chain": chain}
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    outcome["peak"] = max(0, status("VmHWM") - before)
    results[case] = outcome
print(json.dumps(results))
"""


def _read_in_child(cases: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Read chunk (0, 0) of each store in one address-space-capped subprocess."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            json.dumps({k: str(v) for k, v in cases.items()}),
            str(HEADROOM),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    results: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return results


_CODECS = ["zstd", "zstd-undeclared", "zlib", "gzip", "bz2", "lzma", "blosc", "lz4"]


@pytest.fixture(scope="module")
def bomb_reads(
    bombs: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Every bomb case, written and read once (one subprocess for all)."""
    root = tmp_path_factory.mktemp("bombs")
    cases: dict[str, Path] = {}
    for name in _CODECS:
        for zarr_format in (2, 3):
            path = root / f"{name}-v{zarr_format}.zarr"
            codec = _v3_codec(name) if zarr_format == 3 else _v2_codec(name)
            _write(path, zarr_format=zarr_format, compressors=codec)
            _chunk_file(path, zarr_format).write_bytes(bombs[name])
            cases[f"{name}-v{zarr_format}"] = path
    # crc32c after zstd: the checksum stage is bounded too, then zstd's frame is checked
    path = root / "zstd-crc32c.zarr"
    _write(path, compressors=(zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()))
    (path / "c/0/0").write_bytes(bytes(numcodecs.CRC32C().encode(bombs["zstd"])))
    cases["zstd-crc32c-v3"] = path
    # two compressors: zstd of a bz2 bomb; the outer stage is small, the inner one expands
    path = root / "bz2-zstd-chain.zarr"
    from zarr.codecs import numcodecs as wrapped

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _write(path, compressors=(wrapped.BZ2(), zarr.codecs.ZstdCodec()))
    inner = bombs["bz2"]
    assert len(inner) < 8192  # small enough to pass the outer stage's bound
    (path / "c/0/0").write_bytes(bytes(numcodecs.Zstd().encode(inner)))
    cases["bz2-in-zstd-v3"] = path
    # a sharded array: an inner chunk that is a bomb, and an index pointing at 1 GiB
    path = root / "sharded-bomb.zarr"
    _write(path, shards=(128, 128), compressors=zarr.codecs.ZstdCodec())
    (path / "c/0/0").write_bytes(_shard_bytes(bombs["zstd"], 4))
    cases["sharded-inner-bomb-v3"] = path
    path = root / "sharded-range.zarr"
    _write(path, shards=(128, 128), compressors=zarr.codecs.ZstdCodec())
    with open(path / "c/0/0", "wb") as shard:  # sparse: 1 GiB of holes, then the index
        shard.truncate(1 << 30)
        shard.seek(1 << 30)
        shard.write(_shard_bytes(b"", 4, length=1 << 30))
    cases["shard-index-1GiB-range-v3"] = path
    return _read_in_child(cases)


_BOMB_CASES = [f"{name}-v{v}" for name in _CODECS for v in (2, 3)] + [
    "zstd-crc32c-v3",
    "bz2-in-zstd-v3",
    "sharded-inner-bomb-v3",
]


@pytest.mark.parametrize("case", _BOMB_CASES)
def test_a_decompression_bomb_is_refused_without_expanding(
    bomb_reads: dict[str, dict[str, Any]], case: str
) -> None:
    outcome = bomb_reads[case]
    assert outcome["status"] == "error", outcome
    assert "MemoryError" not in outcome["chain"], outcome
    assert outcome["type"] == "ChunkReadError", outcome
    assert "expands beyond its expected" in outcome["message"], outcome
    assert "(a permanent error, not retried)" in outcome["message"], outcome
    assert "c/0/0" in outcome["message"] or "'0.0'" in outcome["message"], outcome
    assert outcome["peak"] < PEAK_LIMIT, outcome


def test_a_shard_index_pointing_at_a_gibibyte_is_refused_before_reading(
    bomb_reads: dict[str, dict[str, Any]],
) -> None:
    outcome = bomb_reads["shard-index-1GiB-range-v3"]
    assert outcome["status"] == "error", outcome
    assert outcome["type"] == "ChunkReadError", outcome
    assert "1,073,741,824 bytes, more than any encoding" in outcome["message"], outcome
    assert outcome["peak"] < PEAK_LIMIT, outcome


@pytest.mark.parametrize("name", ["zlib", "gzip", "bz2", "lzma", "zstd", "blosc", "lz4"])
def test_bounded_decode_equals_numcodecs(name: str) -> None:
    data = np.arange(50_000, dtype="u2").tobytes()
    codec = _v2_codec(name)
    decoded = bounded_decode(name, codec.encode(data), len(data), codec.get_config())
    assert bytes(decoded) == data
    with pytest.raises(ExpansionError, match="expands beyond its expected 1,000 bytes"):
        bounded_decode(name, codec.encode(data), 1000, codec.get_config())


# -- valid data still reads, bounded ---------------------------------------------------


@pytest.mark.parametrize(
    ("zarr_format", "compressors"),
    [
        (3, (zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec())),
        (3, zarr.codecs.GzipCodec()),
        (2, numcodecs.BZ2()),
        (2, numcodecs.LZMA()),
        (2, numcodecs.Zstd()),
    ],
)
def test_valid_chunks_read_identically(tmp_path: Path, zarr_format: int, compressors: Any) -> None:
    array = _write(tmp_path / "a.zarr", zarr_format=zarr_format, compressors=compressors)
    source = open_zarr_source(tmp_path / "a.zarr")
    for coords in np.ndindex(2, 2):
        box = tuple(slice(64 * c, 64 * c + 64) for c in coords)
        np.testing.assert_array_equal(source.read_chunk(coords), array[box])


# -- special files: refused at once, never blocking -------------------------------------


def _bounded_call(call: Callable[[], Any]) -> BaseException | None:
    """`call()` on a daemon thread, given `WAIT` seconds: its error (None if it returned)."""
    box: dict[str, BaseException] = {}
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as error:
            box["error"] = error
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(WAIT), "the call blocked"
    return box.get("error")


def _unblock(fifo: Path) -> None:
    """Open the write end of `fifo` (non-blocking), so a reader stuck on it wakes up."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("sharded", [False, True], ids=["chunk", "shard"])
def test_a_chunk_or_shard_that_is_not_a_regular_file_fails_fast(
    tmp_path: Path, kind: str, sharded: bool
) -> None:
    path = tmp_path / "a.zarr"
    _write(path, shards=(128, 128) if sharded else None)
    target = path / "c/0/0"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    try:
        error = _bounded_call(lambda: open_zarr_source(path).read_chunk((0, 0)))
    finally:
        if kind == "fifo":
            _unblock(target)
    assert isinstance(error, ChunkReadError), error
    assert "c/0/0" in str(error)
    assert "not a regular file" in str(error)


@pytest.mark.parametrize("name", ["zarr.json", ".zarray", ".zattrs"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_metadata_that_is_not_a_regular_file_fails_fast(
    tmp_path: Path, name: str, kind: str
) -> None:
    path = tmp_path / "a.zarr"
    _write(path, zarr_format=3 if name == "zarr.json" else 2)
    target = path / name
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    try:
        error = _bounded_call(lambda: open_zarr_source(path))
    finally:
        if kind == "fifo":
            _unblock(target)
    assert isinstance(error, LazyZarrError), error
    assert "a.zarr" in str(error)


def test_deeply_nested_metadata_is_a_metadata_error(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _write(path, zarr_format=2)
    (path / ".zattrs").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(MetadataError, match=r"\.zattrs: JSON nested 100001 deep"):
        open_zarr_source(path)
    with pytest.raises(MetadataError, match="nested 100001 deep"):
        load_json(b"[" * 100_001, where="x.json")


# -- zip archives ----------------------------------------------------------------------------


def _zipped(tmp_path: Path, zarr_format: int = 2) -> Path:
    folder = tmp_path / "a.zarr"
    _write(folder, zarr_format=zarr_format, compressors=None)
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                out.write(file, file.relative_to(folder).as_posix())
    return archive


def _patch_member(
    archive: Path, member: str, *, flags: int = 0, method: int | None = None
) -> None:
    """Set general-purpose flag bits (or the compression method) of `member` in place."""
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as reader:
        info = reader.getinfo(member)
    local = info.header_offset
    central = data.index(b"PK\x01\x02")  # the central directory's first record
    while data[central + 46 : central + 46 + len(member)] != member.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    for flag_at, method_at in ((local + 6, local + 8), (central + 8, central + 10)):
        value = int.from_bytes(data[flag_at : flag_at + 2], "little") | flags
        data[flag_at : flag_at + 2] = value.to_bytes(2, "little")
        if method is not None:
            data[method_at : method_at + 2] = method.to_bytes(2, "little")
    archive.write_bytes(bytes(data))


def test_a_zip_store_reads_and_refuses_bad_members(tmp_path: Path) -> None:
    archive = _zipped(tmp_path)
    source = open_zarr_source(archive)
    assert isinstance(source.array.store, BoundedZipStore)
    expected = np.arange(128 * 128, dtype="u2").reshape(128, 128)[:64, :64]
    np.testing.assert_array_equal(source.read_chunk((0, 0)), expected)
    _patch_member(archive, "0.0", flags=0x1)  # encrypted
    _patch_member(archive, "0.1", method=97)  # an unsupported compression method
    source = open_zarr_source(archive)
    with pytest.raises(ChunkReadError, match=r"a\.zip: member '0\.0': the member is encrypted"):
        source.read_chunk((0, 0))
    with pytest.raises(ChunkReadError, match=r"a\.zip: member '0\.1': cannot read.*not supported"):
        source.read_chunk((0, 1))


def test_a_zip_deflate_bomb_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    archive = _zipped(tmp_path)
    rebuilt = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive) as old, zipfile.ZipFile(rebuilt, "w") as new:
        for info in old.infolist():
            if info.filename == "0.0":
                with new.open("0.0", "w", force_zip64=True) as member:
                    for _ in range(BOMB // len(_ZEROS)):
                        member.write(_ZEROS)
            else:
                new.writestr(info, old.read(info))
    with pytest.raises(ChunkReadError, match=r"member '0\.0': 536,870,912 bytes asked, more"):
        open_zarr_source(rebuilt).read_chunk((0, 0))


def test_a_zip_that_is_a_fifo_fails_fast(tmp_path: Path) -> None:
    fifo = tmp_path / "a.zip"
    os.mkfifo(fifo)
    try:
        error = _bounded_call(lambda: BoundedZipStore(fifo))
    finally:
        _unblock(fifo)
    assert isinstance(error, LazyZarrError), error
    assert "a.zip" in str(error)


# -- torn reads ------------------------------------------------------------------------------


def _read_while_written(
    tmp_path: Path,
    write: Callable[[int, list[bytes], threading.Event], None],
    reads: int,
    done: threading.Event | None = None,
) -> tuple[dict[str, int], list[ChunkReadError]]:
    """Read chunk (0, 0) `reads` times (or until `done` is set, at most `reads`) while
    `write(fd, versions, stop)` rewrites it in place.

    The two versions are all-1 and all-2 (uncompressed); a read is one of them or a
    retryable failure, never torn.
    """
    path = tmp_path / "a.zarr"
    _write(path, compressors=None)
    chunk = path / "c/0/0"
    size = chunk.stat().st_size
    versions = [np.full(size // 2, value, dtype="<u2").tobytes() for value in (1, 2)]
    stop = threading.Event()
    fd = os.open(chunk, os.O_WRONLY)
    os.pwrite(fd, versions[0], 0)  # from here on every read must be all-1 or all-2
    source = open_zarr_source(path, retry=NO_RETRY)  # each read once: tearing, not retries
    writer = threading.Thread(target=write, args=(fd, versions, stop), daemon=True)
    writer.start()
    outcomes = {"1": 0, "2": 0, "changed": 0}
    failures: list[ChunkReadError] = []
    try:
        for _ in range(reads):
            if done is not None and done.is_set():
                break
            try:
                values = np.unique(source.read_chunk((0, 0)))
            except ChunkReadError as error:
                failures.append(error)
                outcomes["changed"] += 1
                continue
            assert values.tolist() in ([1], [2]), f"torn read: {values}"
            outcomes[str(values[0])] += 1
    finally:
        stop.set()
        writer.join(WAIT)
        os.close(fd)
    # A file that kept changing is a retryable failure naming the chunk, never pixels.
    assert all(isinstance(e.__cause__, FileChangedError) for e in failures), failures
    assert all("c/0/0" in str(e) for e in failures)
    assert sum(outcomes.values()) == reads or done is not None
    return outcomes, failures


def test_a_chunk_rewritten_nonstop_is_never_served_torn(tmp_path: Path) -> None:
    """A writer thread rewrites an uncompressed chunk in place, all-1 or all-2, nonstop."""

    def write(fd: int, versions: list[bytes], stop: threading.Event) -> None:
        while not stop.is_set():
            for version in versions:  # in place, one write each
                os.pwrite(fd, version, 0)

    # Never quiet for SETTLE_SECONDS: every read is whole or, mostly, "kept changing".
    _read_while_written(tmp_path, write, reads=12)


def test_a_rewrite_in_two_writes_is_never_served_torn(tmp_path: Path) -> None:
    """The writer is "descheduled" between its two halves (less than SETTLE_SECONDS apart):
    the file at rest is half old, half new, and two back-to-back reads of it agree."""
    pause = SETTLE_SECONDS / 5
    done = threading.Event()

    def write(fd: int, versions: list[bytes], stop: threading.Event) -> None:
        for version in versions * 3:
            half = len(version) // 2
            os.pwrite(fd, version[:half], 0)
            stop.wait(pause)
            os.pwrite(fd, version[half:], half)
            stop.wait(2 * SETTLE_SECONDS)  # then whole for a while: readable
        done.set()

    outcomes, _ = _read_while_written(tmp_path, write, reads=100_000, done=done)
    assert outcomes["1"] + outcomes["2"] > 0  # quiet spells are read, not refused


def test_read_regular_file_refuses_oversized_files_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big"
    with open(big, "wb") as out:
        out.truncate(1 << 30)  # sparse
    with pytest.raises(ChunkReadError, match="file of 1,073,741,824 bytes is larger"):
        read_regular_file(big, limit=1 << 20)
    assert read_regular_file(big, limit=16, suffix=16) == bytes(16)


# -- no stale pixels --------------------------------------------------------------------------


def test_a_store_rewritten_on_disk_shows_its_new_pixels_through_a_shared_cache(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.zarr"
    _write(path)
    with ChunkCache(64 << 20, executor=InlineExecutor()) as cache:
        before = open_array(path, cache=cache)
        old = before[:64, :64].result(timeout=WAIT)
        assert old[0, 1] == 1
        rewritten = zarr.create_array(
            str(path), shape=(128, 128), chunks=(64, 64), dtype="f4", overwrite=True
        )
        rewritten[:] = 0.5
        after = open_array(path, cache=cache)
        assert after.source.identity != before.source.identity
        assert str(after.source.identity) == str(path)
        new = after[:64, :64].result(timeout=WAIT)
        assert new.dtype == np.float32
        np.testing.assert_array_equal(new, np.full((64, 64), 0.5, dtype="f4"))


def test_version_tells_a_rewrite_and_each_open_is_a_new_identity(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _write(path)
    source = open_zarr_source(path)
    assert isinstance(source, ZarrChunkSource)
    again = open_zarr_source(path)
    # Chunks may change in place with the metadata untouched: each open is a new source.
    assert source.identity != again.identity
    assert (str(source.identity), source.identity.version) == (
        str(again.identity),
        again.identity.version,
    )
    assert source.version() == source.identity.version
    _write(path, overwrite=True)  # same metadata, rewritten
    assert source.version() != source.identity.version
    assert open_zarr_source(path).identity != source.identity
