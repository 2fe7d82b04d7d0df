"""Which OME-Zarr version a group declares, and its OME document read as that version.

Zarr v2 groups hold OME-Zarr 0.1 to 0.4 (the version in each multiscale, 0.4 when
absent), Zarr v3 groups 0.5 and 0.6 (under ``ome``). Drafts of a supported version
(``0.5-dev-spatialdata``, ``0.6.dev4``, ``0.6rc0``) are read as it, each with a
`MetadataWarning` (`core.formats.ome_dev`, `core.formats.ome_v06`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Final, Literal

from napari_lazy_zarr.core.errors import MetadataError, MetadataWarning, UnsupportedDataError
from napari_lazy_zarr.core.formats.ome_dev import as_base_version, dev_base
from napari_lazy_zarr.core.formats.ome_v06 import V06_VERSION, is_v06

if TYPE_CHECKING:
    import zarr

__all__ = ["SUPPORTED_VERSIONS", "ZARR_V2_VERSIONS", "OmeVersion", "ome_document"]

type OmeVersion = Literal["0.1", "0.2", "0.3", "0.4", "0.5", "0.6"]

SUPPORTED_VERSIONS: Final = ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")
ZARR_V2_VERSIONS: Final = ("0.1", "0.2", "0.3", "0.4")  # the OME versions of Zarr v2 groups


def ome_document(group: zarr.Group, full: str) -> tuple[OmeVersion, dict[str, Any]] | None:
    """``(version, OME attributes)`` of an OME-Zarr group, else None.

    Only routes on the declared version; `core.ngff` validates the rest. Zarr v3
    groups keep OME metadata under ``ome`` (0.5, 0.6), Zarr v2 groups at the top of
    ``.zattrs`` (0.1 to 0.4, whose version sits in each multiscale, or in none: 0.4).
    A draft of a supported version is read as it, with a `MetadataWarning`.
    """
    attributes = group.attrs.asdict()
    if group.metadata.zarr_format == 3:
        document = attributes.get("ome")
        if not isinstance(document, dict):
            return None
        version = document.get("version")
    else:
        multiscales = attributes.get("multiscales")
        if multiscales is None:
            return None
        document = attributes
        first = multiscales[0] if isinstance(multiscales, list) and multiscales else None
        version = first.get("version", "0.4") if isinstance(first, dict) else "0.4"
    zarr_format = group.metadata.zarr_format
    base = dev_base(version) if isinstance(version, str) else None
    if isinstance(version, str) and base in SUPPORTED_VERSIONS and base != V06_VERSION:
        # A draft of the next spec over a supported base (SpatialData: "0.5-dev-spatialdata").
        _draft_notice(full, version, base)
        document = as_base_version(document, version, base)
        version = base
    if isinstance(version, str) and is_v06(version) and version != V06_VERSION:
        _draft_notice(full, version, V06_VERSION)  # 0.6.dev4, 0.6rc0: read as 0.6
        document = {**document, "version": V06_VERSION}
        version = V06_VERSION
    # A version that is not a string is left to `parse_image` to reject.
    if isinstance(version, str) and version not in SUPPORTED_VERSIONS:
        raise UnsupportedDataError(
            f"{full}: OME-Zarr version {version} is not supported "
            f"(supported: {', '.join(SUPPORTED_VERSIONS)})"
        )
    if not isinstance(version, str):
        version = "0.5" if zarr_format == 3 else "0.4"
    if (version in ZARR_V2_VERSIONS) != (zarr_format == 2):
        expected = "0.1 to 0.4" if zarr_format == 2 else "0.5 and 0.6"
        raise MetadataError(
            f"{full}: OME-Zarr {version} metadata in a Zarr v{zarr_format} group "
            f"(OME-Zarr {expected} go with Zarr v{zarr_format})"
        )
    return version, document  # type: ignore[return-value]  # checked against the versions


def _draft_notice(full: str, version: str, base: str) -> None:
    warnings.warn(
        MetadataWarning(
            f"{full}: OME-Zarr version {version!r} is a development version: "
            f"read as OME-Zarr {base}"
        ),
        stacklevel=4,
    )
