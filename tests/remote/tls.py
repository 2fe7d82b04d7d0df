"""A certificate authority made at test time (`trustme`) and an HTTPS test server using it."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trustme

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class PrivateCA:
    """A CA no system trusts, its PEM file, and a server context with its certificate."""

    ca: trustme.CA
    pem: Path
    server: ssl.SSLContext


def private_ca(folder: Path) -> PrivateCA:
    """A fresh CA, its certificate in ``folder/ca.pem``, a certificate for 127.0.0.1/localhost."""
    ca = trustme.CA(organization_name="napari-lazy-zarr test lab")
    folder.mkdir(parents=True, exist_ok=True)
    pem = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    return PrivateCA(ca, pem, server)
