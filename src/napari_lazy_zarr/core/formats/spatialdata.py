"""SpatialData stores (``spatialdata`` 0.8): which of their elements are images, and their names.

A SpatialData root is a zarr group whose attributes hold ``spatialdata_attrs``;
its elements sit in subgroups by kind: ``images/<name>`` and
``labels/<name>`` are OME-Zarr images and label images (of version
``0.5-dev-spatialdata``, read as 0.5: `core.formats.ome_dev`), while
``points``, ``shapes`` and ``tables`` hold dataframes and AnnData tables,
which are not images. Layers are named after their elements, as
napari-spatialdata names them. This module knows the layout; `core.formats.ome`
walks it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

__all__ = ["IMAGE_GROUPS", "OTHER_GROUPS", "element_name", "is_spatialdata", "skipped_notice"]

IMAGE_GROUPS: Final = ("images", "labels")
"""The root's subgroups whose members are OME-Zarr (label) images, in the order listed."""

OTHER_GROUPS: Final = ("points", "shapes", "tables")
"""The root's subgroups whose members are not images (skipped, with one notice)."""

_ATTRIBUTES: Final = "spatialdata_attrs"

logger = logging.getLogger(__name__)


def is_spatialdata(attributes: dict[str, Any]) -> bool:
    """Whether a group's attributes mark it as SpatialData's (a root, or one of its elements).

    Examples
    --------
    >>> is_spatialdata({"spatialdata_attrs": {"version": "0.2"}}), is_spatialdata({"ome": {}})
    (True, False)
    """
    return isinstance(attributes.get(_ATTRIBUTES), dict)


def element_name(attributes: dict[str, Any], path: str, root_name: str) -> str | None:
    """The layer name of the group at `path` when it is a SpatialData element (its name:
    the last part of its path, or `root_name` when opened directly; as napari-spatialdata
    names it), else None.

    SpatialData writes ``"image"`` or the element's path as the multiscales
    ``name``: neither is what its users call the element.

    Examples
    --------
    >>> element_name({"spatialdata_attrs": {"version": "0.3"}}, "images/raw", "blobs")
    'raw'
    >>> element_name({"spatialdata_attrs": {"version": "0.3"}}, "", "raw")
    'raw'
    >>> element_name({}, "images/raw", "blobs") is None
    True
    """
    if not is_spatialdata(attributes):
        return None
    return path.rstrip("/").rsplit("/", 1)[-1] if path else root_name


def skipped_notice(location: str, skipped: dict[str, list[str]]) -> None:
    """Log, once per store, the elements that are not images (by kind), if any."""
    listed = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in skipped.items() if names)
    if listed:
        logger.warning(
            "%s: SpatialData elements that are not images, not shown: %s", location, listed
        )
