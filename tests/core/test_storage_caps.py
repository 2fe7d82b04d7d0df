"""Metadata bookkeeping is capped before it is built: zip directories, manifest references.

Real archives and reference files written at test time. A zip whose
end-of-central-directory record (classic or ZIP64) lists more members or
directory bytes than the caps is refused before `zipfile` makes an object per
member; a manifest with more references than `MAX_MANIFEST_REFERENCES` is
refused before it is parsed (the members are counted in its bytes, checked
against `json.loads` with Hypothesis); offsets and lengths of 2**63 and more
are a `MetadataError` naming the key, never a raw `OverflowError`.
"""

from __future__ import annotations

import json
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_lazy_zarr.core import ChunkCache, open_array
from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.sources.manifest import ManifestSource
from napari_lazy_zarr.core.storage import local, references
from napari_lazy_zarr.core.storage.local import MAX_ZIP_MEMBERS, BoundedZipStore
from napari_lazy_zarr.core.storage.references import MAX_MANIFEST_REFERENCES, json_members
from tests.core.test_manifest import _write_refs, _zarray

if TYPE_CHECKING:
    from pathlib import Path


def _zip_store(path: Path, members: int) -> Path:
    """A v2 array of `members - 1` one-byte chunks, zipped (ZIP64 past 65,535 members)."""
    side = int(np.ceil(np.sqrt(members - 1)))
    meta = json.loads(_zarray((side, side), (1, 1), "|u1"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(".zarray", json.dumps(meta))
        for index in range(members - 1):
            archive.writestr(f"{index // side}.{index % side}", bytes([index % 251]))
    return path


# -- zip archives --------------------------------------------------------------------


def test_a_zip_of_more_members_than_a_classic_zip_holds_is_refused_from_its_record(
    tmp_path: Path,
) -> None:
    path = _zip_store(tmp_path / "many.zip", MAX_ZIP_MEMBERS + 2)  # a ZIP64 record
    with ChunkCache(1 << 20) as cache, pytest.raises(MetadataError) as caught:
        open_array(str(path), cache=cache)
    message = str(caught.value)
    assert message.startswith(f"{path}: the zip archive lists {MAX_ZIP_MEMBERS + 2:,} members")
    assert "refused before reading it" in message


def test_a_zip_within_the_caps_opens_and_reads(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    data = (np.arange(48 * 40) % 251).astype("u1").reshape(48, 40)
    with zarr.storage.ZipStore(path, mode="w") as store:
        zarr.create_array(store, shape=data.shape, chunks=(16, 16), dtype="u1")[...] = data
    with ChunkCache(1 << 20) as cache:
        array = open_array(str(path), cache=cache)
        np.testing.assert_array_equal(array[...].result(timeout=10), data)


def test_a_zip_directory_over_its_byte_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _zip_store(tmp_path / "small.zip", 20)
    monkeypatch.setattr(local, "MAX_ZIP_DIRECTORY_BYTES", 100)
    with pytest.raises(MetadataError, match=r"members in a \d+-byte directory, more than"):
        BoundedZipStore(path)
    monkeypatch.setattr(local, "MAX_ZIP_DIRECTORY_BYTES", 1 << 20)
    monkeypatch.setattr(local, "MAX_ZIP_MEMBERS", 19)
    with pytest.raises(MetadataError, match=r"lists 20 members .* more than the 19 members"):
        BoundedZipStore(path)
    monkeypatch.setattr(local, "MAX_ZIP_MEMBERS", 20)
    assert len(BoundedZipStore(path)._members.namelist()) == 20


# -- manifests -------------------------------------------------------------------------


def test_a_manifest_of_too_many_references_is_refused_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs: dict[str, Any] = {".zarray": _zarray((4, 4000), (2, 4))}
    refs |= {f"0.{i}": ["pixels.raw", 16 * i, 16] for i in range(2_000)}
    path = _write_refs(tmp_path / "refs.json", refs)
    (tmp_path / "pixels.raw").write_bytes(bytes(32_000))
    monkeypatch.setattr(references, "MAX_MANIFEST_REFERENCES", 500)
    parsed: list[bytes] = []
    monkeypatch.setattr(references, "load_json", lambda raw, **_: parsed.append(raw))
    with pytest.raises(MetadataError) as caught:
        ManifestSource(path)
    assert str(caught.value).startswith(f"{path}: about 2,003 references (JSON members)")
    assert "more than the 500 this reader opens; refused before parsing" in str(caught.value)
    assert parsed == []


def test_a_manifest_just_over_the_cap_is_refused_after_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs: dict[str, Any] = {".zarray": _zarray((4, 400), (2, 4))}
    refs |= {f"0.{i}": ["pixels.raw", 16 * i, 16] for i in range(100)}
    path = _write_refs(tmp_path / "refs.json", refs)
    (tmp_path / "pixels.raw").write_bytes(bytes(1_600))
    monkeypatch.setattr(references, "MAX_MANIFEST_REFERENCES", 100)
    with pytest.raises(MetadataError, match=r"refs\.json: 101 references, more than the 100"):
        ManifestSource(path)
    monkeypatch.setattr(references, "MAX_MANIFEST_REFERENCES", 101)
    assert ManifestSource(path).shape == (4, 400)


def test_the_reference_cap_is_one_a_real_manifest_reaches(tmp_path: Path) -> None:
    assert 100_000 <= MAX_MANIFEST_REFERENCES <= 1_000_000
    assert references.MAX_MANIFEST_BYTES >= MAX_MANIFEST_REFERENCES * 64  # 64 B a reference


@pytest.mark.parametrize("key", [".zarray", "0.0"])
@pytest.mark.parametrize(
    "ref",
    [["pixels.raw", 2**64, 16], ["pixels.raw", 0, 2**64], ["pixels.raw", 2**63, 1]],
)
def test_offsets_and_lengths_of_2_63_and_more_are_a_metadata_error(
    tmp_path: Path, key: str, ref: list[Any]
) -> None:
    (tmp_path / "pixels.raw").write_bytes(bytes(16))
    refs: dict[str, Any] = {".zarray": _zarray((2, 4), (2, 4)), "0.0": ["pixels.raw", 0, 16]}
    refs[key] = ref
    path = _write_refs(tmp_path / "refs.json", refs)
    with pytest.raises(MetadataError) as caught:
        ManifestSource(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: key {key!r}: reference ")
    assert "must be below 2**63" in message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab:"\\{}[],\n é'),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet='k:"\\{}, é', max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


def _members(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_members(v) for v in value.values())
    if isinstance(value, list):
        return sum(_members(v) for v in value)
    return 0


@settings(max_examples=200, deadline=None)
@given(document=json_values, ensure_ascii=st.booleans(), indent=st.sampled_from([None, 1]))
def test_json_members_counts_what_json_parses(
    document: Any, ensure_ascii: bool, indent: int | None
) -> None:
    text = json.dumps(document, ensure_ascii=ensure_ascii, indent=indent).encode()
    assert json_members(text) == _members(json.loads(text))
