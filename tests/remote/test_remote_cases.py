"""The remote conformance cases (`tests/conformance/cases_remote.py`) in a real viewer.

S3 on moto and HTTPS with a private CA, this plugin configured the standard
way (``AWS_ENDPOINT_URL``, ``SSL_CERT_FILE``), as the peers are in
`docs/compatibility.py`. The servers serve the whole module (s3fs keeps one file
system per set of options, its endpoint read from the environment once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from napari_lazy_zarr.core.errors import MetadataError
from napari_lazy_zarr.core.sources.zarr import open_zarr_source
from tests.conformance.cases_remote import REMOTE_CASES, RemoteServers
from tests.conformance.check import open_case

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pytestqt.qtbot import QtBot


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteServers]:
    with RemoteServers(tmp_path_factory.mktemp("remote")) as running:
        yield running


def test_the_remote_cases_open_with_pixels_equal_to_the_writers(
    make_napari_viewer: Callable[..., Any], qtbot: QtBot, servers: RemoteServers
) -> None:
    viewer = make_napari_viewer(show=True)
    failures = {}
    for case in REMOTE_CASES:
        outcome = open_case(viewer, case.write(servers), "napari-lazy-zarr", qtbot.waitUntil)
        if not outcome.ok:
            failures[case.id] = outcome.error or "; ".join(outcome.problems)
    assert failures == {}


def test_our_endpoint_setting_overrides_aws_endpoint_url_only_when_set(
    servers: RemoteServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zarr

    data = np.arange(40 * 40, dtype=np.uint16).reshape(40, 40)
    url = "s3://remote/env.zarr"
    zarr.create_array(
        url, shape=data.shape, chunks=(20, 20), dtype=data.dtype,
        storage_options=servers.s3.options(),
    )[...] = data  # fmt: skip
    # AWS_ENDPOINT_URL (botocore's own variable, set by the servers) alone reaches moto.
    source = open_zarr_source(url)
    np.testing.assert_array_equal(source.read_chunk((1, 1)), data[20:, 20:])
    monkeypatch.setenv("NAPARI_LAZY_ZARR_S3_ENDPOINT_URL", "http://127.0.0.1:1")
    with pytest.raises(MetadataError, match=r"127\.0\.0\.1:1 does not answer.*s3_endpoint_url"):
        open_zarr_source(url)  # ours, when set, wins
