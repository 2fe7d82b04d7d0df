"""Kerchunk references and stack files stay bounded in time and memory whatever they name.

Real files written at test time: FIFOs (`os.mkfifo`), symbolic links to
/dev/zero, directories, sparse 1 GiB files (`os.truncate`), 100k-deep JSON,
and a real loopback HTTP server that stalls, trickles, lies about lengths or
compresses its answers. Every call that could block runs in a daemon thread
waited on with a time bound; memory is checked with the process's peak RSS.
Valid references still read equal to NumPy.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr.core import ChunkCache, ChunkedArray
from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LazyZarrError,
    LoadTimeoutError,
    MetadataError,
    UnsafeDataError,
)
from napari_lazy_zarr.core.formats.stack import open_stack, read_stack_file, reference_file_kind
from napari_lazy_zarr.core.settings import Timeouts
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.storage.references import MAX_MANIFEST_BYTES, ManifestStore
from napari_lazy_zarr.core.storage.retry import NO_RETRY
from napari_lazy_zarr.core.storage.vetting import MAX_METADATA_BYTES
from tests.core.test_manifest import _write_refs, _zarray

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="FIFOs, /dev/zero and sparse files (POSIX)"
)

BOUND = 10.0  # seconds any one call may take before it counts as blocked
GIB = 1 << 30
# A (2, 4) uint16 chunk: 16 bytes; any encoding of it may take 2 x 16 + 1 MiB.
CHUNK_CAP = 2 * 16 + (1 << 20)


def within[T](seconds: float, call: Callable[[], T]) -> T:
    """`call()` in a daemon thread, its result or its error; fails if it blocks `seconds`."""
    done = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name="bounded-call", daemon=True).start()
    assert done.wait(seconds), f"still blocked after {seconds} s"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def peak_rss() -> int:
    """This process's peak resident set so far, in bytes (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _pixels(folder: Path) -> np.ndarray[Any, Any]:
    """Two (2, 4) uint16 chunks in pixels.raw."""
    data = np.arange(16, dtype="<u2").reshape(4, 4)
    data.tofile(folder / "pixels.raw")
    return data


def _special(folder: Path, kind: str, name: str) -> Path:
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    return path


SPECIAL = ["fifo", "dev-zero", "directory"]
REFUSED = r"(not a regular file|is a directory)"


# -- only regular files -------------------------------------------------------


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_special_file_as_manifest_or_stack_file_is_refused_at_once(
    tmp_path: Path, kind: str
) -> None:
    manifest = _special(tmp_path, kind, "refs.json")
    stack = _special(tmp_path, kind, "movie.zstack.json")
    assert within(BOUND, lambda: reference_file_kind(manifest)) is None
    assert within(BOUND, lambda: reference_file_kind(stack)) is None
    with pytest.raises(MetadataError, match=rf"refs\.json: .*{REFUSED}"):
        within(BOUND, lambda: ManifestStore(manifest))
    with pytest.raises(MetadataError, match=rf"refs\.json: .*{REFUSED}"):
        within(BOUND, lambda: ManifestSource(manifest))
    with pytest.raises(MetadataError, match=rf"movie\.zstack\.json: .*{REFUSED}"):
        within(BOUND, lambda: read_stack_file(stack))


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("form", ["range", "whole-file"])
def test_a_reference_to_a_special_file_fails_its_chunk_at_once(
    tmp_path: Path, inline_cache: ChunkCache, kind: str, form: str
) -> None:
    data = _pixels(tmp_path)
    _special(tmp_path, kind, "special.raw")
    reference = ["special.raw", 0, 16] if form == "range" else ["special.raw"]
    manifest = _write_refs(
        tmp_path / "refs.json",
        {".zarray": _zarray((4, 4), (2, 4)), "0.0": ["pixels.raw", 0, 16], "1.0": reference},
    )
    if kind == "dev-zero":  # a link out of the folder: refused by the policy first
        with pytest.raises(UnsafeDataError, match="leads through a symbolic link to /dev/zero"):
            ManifestSource(manifest)
    source = ManifestSource(manifest, allow_outside=kind == "dev-zero")
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data[:2])
    with pytest.raises(ChunkReadError, match=rf"refs\.json: key '1\.0': .*{REFUSED}"):
        within(BOUND, lambda: source.store.get_sync("1.0"))
    with pytest.raises(ChunkReadError, match=rf"key '1\.0'.*{REFUSED}"):
        within(BOUND, lambda: source.read_chunk((1, 0)))
    array = ChunkedArray(source, inline_cache)
    with pytest.raises(ChunkReadError, match=REFUSED):
        within(BOUND, lambda: array.result(timeout=BOUND))


@pytest.mark.parametrize("kind", SPECIAL)
def test_metadata_referencing_a_special_file_is_refused_at_open(tmp_path: Path, kind: str) -> None:
    _special(tmp_path, kind, "zarray.json")
    manifest = _write_refs(tmp_path / "refs.json", {".zarray": ["zarray.json"]})
    with pytest.raises(MetadataError, match=rf"refs\.json: key '\.zarray': .*{REFUSED}"):
        within(BOUND, lambda: ManifestStore(manifest, allow_outside=True))


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_special_file_as_stack_member_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    _special(tmp_path, kind, "member.json")
    stack = tmp_path / "movie.zstack.json"
    stack.write_text(json.dumps({"zstack": 1, "mode": "stack", "arrays": ["member.json"]}))
    with pytest.raises(LazyZarrError, match=rf"member\.json.*{REFUSED}"):
        within(BOUND, lambda: open_stack(stack, allow_outside=True))


# -- byte caps ------------------------------------------------------------------


def test_references_larger_than_any_encoding_of_the_chunk_are_refused_before_reading(
    tmp_path: Path,
) -> None:
    data = _pixels(tmp_path)
    with open(tmp_path / "huge.raw", "wb") as handle:  # sparse: 1 GiB of zeros on no disk
        handle.truncate(GIB)
    manifest = _write_refs(
        tmp_path / "refs.json",
        {
            ".zarray": _zarray((8, 4), (2, 4)),
            "0.0": ["pixels.raw", 0, 16],
            "1.0": ["huge.raw", 0, GIB],  # a 1 GiB byte range
            "2.0": ["huge.raw"],  # a whole 1 GiB file
            "3.0": ["huge.raw", 0, CHUNK_CAP + 1],  # one byte over the cap
        },
    )
    source = ManifestSource(manifest)
    before = peak_rss()
    with pytest.raises(
        ChunkReadError,
        match=r"key '1\.0': reference \['huge\.raw', 0, 1073741824\] asks 1,073,741,824 bytes, "
        r"more than any encoding of the chunk could take \(1,048,608\); refused before reading",
    ):
        within(BOUND, lambda: source.store.get_sync("1.0"))
    with pytest.raises(ChunkReadError, match=r"key '2\.0': .*1,073,741,824 bytes is larger"):
        within(BOUND, lambda: source.store.get_sync("2.0"))
    with pytest.raises(ChunkReadError, match=r"key '3\.0': .* asks 1,048,609 bytes"):
        within(BOUND, lambda: source.store.get_sync("3.0"))
    for row in (1, 2, 3):
        with pytest.raises(ChunkReadError, match=rf"key '{row}\.0'"):
            within(BOUND, lambda row=row: source.read_chunk((row, 0)))  # type: ignore[misc]
    assert peak_rss() - before < 64 << 20
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data[:2])


def test_metadata_references_are_capped_at_the_metadata_cap(tmp_path: Path) -> None:
    with open(tmp_path / "huge.json", "wb") as handle:
        handle.truncate(GIB)
    for key, reference in [(".zarray", ["huge.json", 0, GIB]), ("zarr.json", ["huge.json"])]:
        manifest = _write_refs(tmp_path / "refs.json", {key: reference})
        before = peak_rss()
        with pytest.raises(MetadataError, match=rf"refs\.json: key '{key}': "):
            within(BOUND, lambda manifest=manifest: ManifestStore(manifest))  # type: ignore[misc]
        assert peak_rss() - before < 64 << 20
    manifest = _write_refs(tmp_path / "refs.json", {".zarray": ["huge.json", 0, GIB]})
    with pytest.raises(
        MetadataError, match=f"a metadata document may take \\({MAX_METADATA_BYTES:,}"
    ):
        ManifestStore(manifest)


def test_inline_data_over_the_cap_is_refused_before_decoding(tmp_path: Path) -> None:
    data = np.arange(8, dtype="<u2").reshape(2, 4)
    big = base64.b64encode(bytes(2 << 20)).decode()  # decodes to 2 MiB for a 16-byte chunk
    manifest = _write_refs(
        tmp_path / "refs.json",
        {
            ".zarray": _zarray((6, 4), (2, 4)),
            "0.0": "base64:" + base64.b64encode(data.tobytes()).decode(),
            "1.0": "base64:" + big,
            "2.0": "x" * (CHUNK_CAP + 1),
        },
    )
    source = ManifestSource(manifest)  # the manifest opens: only those chunks fail
    np.testing.assert_array_equal(source.read_chunk((0, 0)), data)
    with pytest.raises(
        ChunkReadError,
        match=r"key '1\.0': base64 data decoding to 2,097,152 bytes, more than any encoding "
        r"of the chunk could take \(1,048,608\); refused before decoding",
    ):
        source.store.get_sync("1.0")
    with pytest.raises(ChunkReadError, match=r"key '2\.0': inline data of 1,048,609 bytes"):
        source.store.get_sync("2.0")
    with pytest.raises(ChunkReadError, match=r"key '1\.0'"):
        source.read_chunk((1, 0))


def test_a_chunk_cap_follows_each_array_of_a_group(tmp_path: Path) -> None:
    """Caps are per array: a reference fine for a big chunk is refused for a small one."""
    np.zeros(512 * 512, "<u2").tofile(tmp_path / "big.raw")
    manifest = _write_refs(
        tmp_path / "refs.json",
        {
            ".zgroup": json.dumps({"zarr_format": 2}),
            "big/.zarray": _zarray((512, 512), (512, 512)),
            "big/0.0": ["big.raw", 0, 512 * 512 * 2],
            "small/.zarray": _zarray((2, 4), (2, 4)),
            "small/0.0": ["big.raw", 0, 2 << 20],
        },
    )
    assert ManifestSource(manifest, path="big").read_chunk((0, 0)).shape == (512, 512)
    with pytest.raises(ChunkReadError, match=r"key 'small/0\.0': .* asks 2,097,152 bytes"):
        ManifestSource(manifest, path="small").read_chunk((0, 0))


def test_manifests_and_stack_files_over_their_cap_are_refused_unread(tmp_path: Path) -> None:
    manifest, stack = tmp_path / "refs.json", tmp_path / "movie.zstack.json"
    with open(manifest, "wb") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + 1)
    with open(stack, "wb") as handle:
        handle.truncate(MAX_METADATA_BYTES + 1)
    before = peak_rss()
    with pytest.raises(MetadataError, match=rf"refs\.json: .*{MAX_MANIFEST_BYTES + 1:,} bytes"):
        within(BOUND, lambda: ManifestStore(manifest))
    with pytest.raises(MetadataError, match=r"movie\.zstack\.json: .*bytes"):
        within(BOUND, lambda: read_stack_file(stack))
    assert peak_rss() - before < 64 << 20


def test_deeply_nested_json_is_a_metadata_error(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    manifest = tmp_path / "refs.json"
    manifest.write_text('{"version": 1, "refs": {"a": ' + deep + "}}")
    with pytest.raises(MetadataError, match=r"refs\.json: the manifest: JSON nested 100002 deep"):
        ManifestStore(manifest)
    stack = tmp_path / "movie.zstack.json"
    stack.write_text('{"zstack": 1, "arrays": ' + deep + "}")
    with pytest.raises(MetadataError, match=r"movie\.zstack\.json: the stack file: JSON nested"):
        read_stack_file(stack)
    inline = _write_refs(tmp_path / "inline.json", {".zarray": deep})
    with pytest.raises(MetadataError, match=r"inline\.json: key '\.zarray': JSON nested"):
        ManifestStore(inline)


# -- versions: no stale pixels, no torn reads ------------------------------------


def _two_rows(raw: str) -> dict[str, Any]:
    """References of a (4, 4) uint16 array in two (2, 4) chunks of `raw`."""
    return {".zarray": _zarray((4, 4), (2, 4)), "0.0": [raw, 0, 16], "1.0": [raw, 16, 16]}


def _bump_mtime(path: Path) -> None:
    """A later modification time, as a write a moment later leaves (clock ticks are coarse)."""
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))


def test_a_rewritten_reference_target_is_refused_until_reopened_then_new(
    tmp_path: Path, inline_cache: ChunkCache
) -> None:
    """A shared cache never serves the old pixels, nor the new under the old identity."""
    old = np.arange(16, dtype="<u2").reshape(4, 4)
    old.tofile(tmp_path / "pixels.raw")
    manifest = _write_refs(
        tmp_path / "refs.json",
        {
            ".zarray": _zarray((4, 4), (2, 4)),
            "0.0": ["pixels.raw", 0, 16],
            "1.0": ["pixels.raw", 16, 16],
        },
    )
    first = ManifestSource(manifest)
    np.testing.assert_array_equal(first.read_chunk((0, 0)), old[:2])  # not through the cache
    new = old + 1000
    new.tofile(tmp_path / "pixels.raw")  # same size, in place
    _bump_mtime(tmp_path / "pixels.raw")
    with pytest.raises(
        ChunkReadError, match=r"pixels\.raw changed since the references were opened"
    ):
        first.read_chunk((1, 0))
    second = ManifestSource(manifest)
    assert second.identity != first.identity
    assert str(second.identity) == str(first.identity) == str(manifest)
    np.testing.assert_array_equal(ChunkedArray(second, inline_cache).result(timeout=BOUND), new)
    third = ManifestSource(manifest)  # nothing changed: the same source, its chunks shared
    assert third.identity == second.identity
    assert hash(third.identity) == hash(second.identity)


def test_an_edited_manifest_is_a_new_source(tmp_path: Path, inline_cache: ChunkCache) -> None:
    data = _pixels(tmp_path)
    refs = {
        ".zarray": _zarray((4, 4), (2, 4)),
        "0.0": ["pixels.raw", 0, 16],
        "1.0": ["pixels.raw", 16, 16],
    }
    manifest = _write_refs(tmp_path / "refs.json", refs)
    first = ManifestSource(manifest)
    np.testing.assert_array_equal(ChunkedArray(first, inline_cache).result(timeout=BOUND), data)
    _write_refs(manifest, {**refs, "0.0": refs["1.0"], "1.0": refs["0.0"]})  # rows swapped
    second = ManifestSource(manifest)
    assert second.identity != first.identity
    swapped = ChunkedArray(second, inline_cache).result(timeout=BOUND)
    np.testing.assert_array_equal(swapped, np.concatenate([data[2:], data[:2]]))


def test_a_stack_file_is_a_new_source_when_it_or_a_member_changes(tmp_path: Path) -> None:
    for name in ("a", "b"):
        np.arange(16, dtype="<u2").tofile(tmp_path / f"{name}.raw")
        _write_refs(
            tmp_path / f"{name}.json",
            {
                ".zarray": _zarray((4, 4), (2, 4)),
                "0.0": [f"{name}.raw", 0, 16],
                "1.0": [f"{name}.raw", 16, 16],
            },
        )
    stack = tmp_path / "movie.zstack.json"
    stack.write_text(json.dumps({"zstack": 1, "mode": "stack", "arrays": ["a.json", "b.json"]}))
    first = open_stack(stack)
    assert open_stack(stack).identity == first.identity
    stack.write_text(json.dumps({"zstack": 1, "mode": "stack", "arrays": ["b.json", "a.json"]}))
    assert open_stack(stack).identity != first.identity
    stack.write_text(json.dumps({"zstack": 1, "mode": "stack", "arrays": ["a.json", "b.json"]}))
    assert open_stack(stack).identity == first.identity
    _bump_mtime(tmp_path / "b.raw")  # a member's data rewritten
    assert open_stack(stack).identity != first.identity


def test_a_file_rewritten_while_read_is_never_served_torn(tmp_path: Path) -> None:
    """A writer rewrites the referenced file in place, over and over, while it is opened and
    read: every chunk served is one whole version; the others fail, naming the change."""
    shape = (256, 512)  # one 256 KiB chunk: a read takes many page copies
    versions = [np.full(shape, value, dtype="<u2") for value in (1111, 2222)]
    versions[0].tofile(tmp_path / "pixels.raw")
    manifest = _write_refs(
        tmp_path / "refs.json",
        {".zarray": _zarray(shape, shape), "0.0": ["pixels.raw", 0, versions[0].nbytes]},
    )
    counts = {"served": 0, "torn": 0}
    reasons: set[str] = set()
    for _ in range(20):
        stop = threading.Event()
        descriptor = os.open(tmp_path / "pixels.raw", os.O_WRONLY)

        def write(descriptor: int = descriptor, stop: threading.Event = stop) -> None:
            turn = 0
            while not stop.is_set():
                os.pwrite(descriptor, versions[turn % 2].tobytes(), 0)
                turn += 1

        writer = threading.Thread(target=write, name="test-writer")
        writer.start()
        try:
            # Opened while the file is being written; each read once (tearing, not retries).
            source = ManifestSource(manifest, retry=NO_RETRY)
            for _ in range(10):
                try:
                    chunk = source.read_chunk((0, 0))
                except ChunkReadError as error:
                    reasons.add("changed" if "changed" in str(error) else str(error))
                    continue
                counts["served"] += 1
                if not any(np.array_equal(chunk, v) for v in versions):
                    counts["torn"] += 1
        finally:
            stop.set()
            writer.join(timeout=BOUND)
            os.close(descriptor)
    assert counts["torn"] == 0, counts
    assert reasons == {"changed"}, reasons  # refusals name the change, and happen


# -- remote references: byte and time caps ---------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Any:
    from tests.remote.server import FaultyServer

    (tmp_path / "served").mkdir()
    np.arange(16, dtype="<u2").tofile(tmp_path / "served" / "pixels.raw")
    (tmp_path / "served" / "big.raw").write_bytes(bytes(3 << 20))
    with FaultyServer(tmp_path / "served") as running:
        yield running


SHORT = Timeouts(connect=1.0, read=0.3, total=1.0)


def _remote_manifest(folder: Path, url: str, key: str, reference: list[Any]) -> Path:
    return _write_refs(
        folder / "remote.json",
        {".zarray": _zarray((4, 4), (2, 4)), "0.0": [f"{url}/pixels.raw", 0, 16], key: reference},
    )


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("silent", LoadTimeoutError, r"server silent for 0\.3 s \(Timeouts\.read\)"),
        ("trickle", LoadTimeoutError, r"no complete answer within 1 s"),
        # This server streams its bomb without a length: refused unread (the red team's
        # bomb declares its length, and is refused by its Content-Encoding).
        ("gzip_bomb", ChunkReadError, r"declares no Content-Length"),
        ("huge_length", ChunkReadError, r"declares 1,000,000,000,000 bytes"),
        ("endless", ChunkReadError, r"declares no Content-Length"),
    ],
)
def test_a_hostile_server_fails_a_whole_file_reference_in_bounded_time_and_memory(
    tmp_path: Path, server: Any, mode: str, error: type[Exception], message: str
) -> None:
    getattr(server.faults, mode).add("hostile.raw")
    manifest = _remote_manifest(tmp_path, server.url, "1.0", [f"{server.url}/hostile.raw"])
    store = ManifestStore(manifest, allow_protocols=[server.url], timeouts=SHORT)
    before = peak_rss()
    with pytest.raises(error, match=rf"remote\.json: key '1\.0': .*{message}"):
        within(BOUND, lambda: store.get_sync("1.0"))
    assert peak_rss() - before < 64 << 20
    assert store.get_sync("0.0") is not None  # the server itself still answers


def test_remote_references_are_read_within_their_caps(tmp_path: Path, server: Any) -> None:
    data = np.arange(16, dtype="<u2").reshape(4, 4)
    manifest = _remote_manifest(tmp_path, server.url, "1.0", [f"{server.url}/pixels.raw", 16, 16])
    source = ManifestSource(manifest, allow_protocols=[server.url], timeouts=SHORT)
    assert source.store.timeouts == SHORT
    np.testing.assert_array_equal(source.read_chunk((1, 0)), data[2:])
    big = _remote_manifest(tmp_path, server.url, "1.0", [f"{server.url}/big.raw"])
    with pytest.raises(ChunkReadError, match=r"big\.raw declares 3,145,728 bytes, more than any"):
        ManifestStore(big, allow_protocols=[server.url]).get_sync("1.0")


def test_remote_metadata_is_retried_and_read_once(tmp_path: Path, server: Any) -> None:
    """Two 503s, then the document: the manifest opens, and zarr reads the bytes vetted."""
    (tmp_path / "served" / "meta.zarray").write_text(_zarray((4, 4), (2, 4)))
    server.faults.errors["meta.zarray"] = 503
    server.faults.error_times["meta.zarray"] = 2
    refs = {**_two_rows(f"{server.url}/pixels.raw"), ".zarray": [f"{server.url}/meta.zarray"]}
    manifest = _write_refs(tmp_path / "remote.json", refs)
    source = ManifestSource(manifest, allow_protocols=[server.url], timeouts=SHORT)
    assert server.faults.requests["meta.zarray"] == 3
    np.testing.assert_array_equal(source.read_chunk((1, 0)), np.arange(8, 16).reshape(2, 4))
    assert server.faults.requests["meta.zarray"] == 3


def test_a_silent_server_at_open_is_a_metadata_error_in_bounded_time(
    tmp_path: Path, server: Any
) -> None:
    server.faults.silent.add(".zarray")
    url = server.url
    manifest = _write_refs(tmp_path / "remote.json", {".zarray": [f"{url}/.zarray"]})
    with pytest.raises(MetadataError, match=r"key '\.zarray': cannot read the metadata: .*0\.3 s"):
        within(BOUND, lambda: ManifestStore(manifest, allow_protocols=[url], timeouts=SHORT))


def test_a_refused_connection_fails_the_chunk_at_once(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    manifest = _remote_manifest(tmp_path, url, "1.0", [f"{url}/pixels.raw", 16, 16])
    store = ManifestStore(manifest, allow_protocols=[url], timeouts=SHORT)
    with pytest.raises(ChunkReadError, match=r"key '1\.0': .*Connection refused") as caught:
        within(BOUND, lambda: store.get_sync("1.0"))
    cause = caught.value.__cause__  # the remote store's connect error: retryable, chained
    assert isinstance(cause, ConnectionError)


def test_timeouts_must_be_timeouts(tmp_path: Path) -> None:
    manifest = _write_refs(tmp_path / "refs.json", {".zarray": _zarray((4, 4), (2, 4))})
    with pytest.raises(TypeError, match="timeouts must be a Timeouts"):
        ManifestStore(manifest, timeouts=5)  # type: ignore[arg-type]
