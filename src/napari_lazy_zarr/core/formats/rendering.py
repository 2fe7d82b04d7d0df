"""Optional display metadata as layer settings: ``omero`` channels, label colours and properties.

Display metadata never decides whether an image opens: what is invalid in it
(`core.formats.ngff` lists the rules) gives one `MetadataWarning` naming the
path, the keys and the causes, and the reader's defaults for those parts — the
defaults it uses when the metadata is absent: a channel named
``"<image> [<index>]"``, napari's gray colormap, contrast limits sampled from
the data, visible. Only required metadata (multiscales, datasets, axes,
transforms) refuses an image.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from napari_lazy_zarr.core.errors import MetadataError, MetadataWarning
from napari_lazy_zarr.core.formats.ngff import parse_label_colors

if TYPE_CHECKING:
    from collections.abc import Sequence

    from napari_lazy_zarr.core.formats.ngff import LabelColor, Omero

__all__ = ["DEFAULT_COLOR", "ChannelDisplay", "label_colors", "label_properties", "warn_ignored"]

DEFAULT_COLOR: Final = "#FFFFFF"
"""A channel's colour when ``omero`` gives none (or an invalid one): napari's gray colormap."""

_MAX_QUOTED: Final = 4  # problems quoted in one warning
_LABEL_VALUE: Final = "label-value"


def warn_ignored(full: str, what: str, problems: Sequence[str], *, stacklevel: int = 2) -> None:
    """Warn (`MetadataWarning`) that `what` at `full` is invalid and defaults are used.

    `problems` are ``"loc: message"`` lines; at most four are quoted.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_ignored("a.zarr", "omero", ["omero.channels.0.color: Field required"])
    >>> print(caught[0].message)
    a.zarr: invalid optional omero metadata ignored, defaults used: omero.channels.0.color: Field required
    """  # noqa: E501
    more = len(problems) - _MAX_QUOTED
    listed = "; ".join(problems[:_MAX_QUOTED]) + (f" (and {more} more)" if more > 0 else "")
    warnings.warn(
        MetadataWarning(
            f"{full}: invalid optional {what} metadata ignored, defaults used: {listed}"
        ),
        stacklevel=stacklevel + 1,
    )


@dataclass(frozen=True, slots=True)
class ChannelDisplay:
    """Per-channel display settings from ``omero`` (all None without it).

    Attributes
    ----------
    names
        Layer names, one per channel.
    colors
        ``#RRGGBB`` per channel (`DEFAULT_COLOR` where ``omero`` gives none).
    limits
        ``(start, end)`` contrast limits per channel, or None when any channel's
        window is missing or unusable (the reader samples them from the data).
    visible
        Per channel: its ``active`` flag (True when absent).
    """

    names: tuple[str, ...] | None = None
    colors: tuple[str, ...] | None = None
    limits: tuple[tuple[float, float], ...] | None = None
    visible: tuple[bool, ...] | None = None

    @classmethod
    def from_omero(
        cls, omero: Omero, n_channels: int, image: str, full: str, *, titled: str | None = None
    ) -> ChannelDisplay:
        """Channel settings from `omero`; a labelled channel of a `titled` image (its
        multiscales name) is named ``"<title>: <label>"``, as napari-ome-zarr names it, so two
        images' channels do not collide; an unlabelled one ``"<image> [<index>]"``.

        An ``omero`` listing another number of channels than the image has is
        ignored (warned): which channel it describes cannot be known.

        Examples
        --------
        >>> from napari_lazy_zarr.core.formats.ngff import Channel, Omero, Window
        >>> omero = Omero((Channel("#00FF00", Window(0, 99), label="GFP"), Channel(None, None)))
        >>> display = ChannelDisplay.from_omero(omero, 2, "cells", "cells.zarr")
        >>> display.names, display.colors, display.limits
        (('GFP', 'cells [1]'), ('#00FF00', '#FFFFFF'), None)
        """
        channels = omero.channels
        if len(channels) != n_channels:
            warn_ignored(
                full,
                "omero",
                [f"omero.channels: lists {len(channels)} channels, the image has {n_channels}"],
            )
            return cls()
        greyscale = omero.model == "greyscale"
        windows = [None if c.window is None else (c.window.start, c.window.end) for c in channels]
        # A window napari cannot use (start >= end, or not finite), or none, is a display hint
        # missing, not data: without it the limits are sampled from the data instead.
        usable = all(
            w is not None and math.isfinite(w[0]) and math.isfinite(w[1]) and w[0] < w[1]
            for w in windows
        )
        return cls(
            names=tuple(
                f"{image} [{index}]"
                if c.label is None
                else c.label
                if titled is None
                else f"{titled}: {c.label}"
                for index, c in enumerate(channels)
            ),
            colors=tuple(
                DEFAULT_COLOR if greyscale or c.color is None else c.color for c in channels
            ),
            limits=tuple(w for w in windows if w is not None) if usable else None,
            visible=tuple(c.active is not False for c in channels),
        )


def label_colors(
    document: Any, full: str
) -> tuple[tuple[int, tuple[int, int, int, int]], ...] | None:
    """``(label value, RGBA)`` pairs of a label image's ``image-label`` (None when none).

    Entries whose ``rgba`` is null give no colour. Invalid entries are left out
    (one `MetadataWarning` names them), as is a label value listed again (the
    first entry counts); ``colors`` that is not a list gives no colours.

    Examples
    --------
    >>> import warnings
    >>> colors = [{"label-value": 1, "rgba": [255, 0, 0, 255]}, {"label-value": 2, "rgba": "red"}]
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     label_colors({"colors": colors}, "labels/cells")
    ((1, (255, 0, 0, 255)),)
    >>> print(caught[0].message)  # doctest: +ELLIPSIS
    labels/cells: invalid optional image-label colors metadata ignored, ...colors.1.rgba: ...
    """
    try:
        parsed = parse_label_colors(document, full)
    except MetadataError as error:
        kept, problems = _valid_entries(document["colors"], full)
        parsed = tuple(kept)
        warn_ignored(full, "image-label colors", problems or [str(error)])
    pairs = tuple((c.value, c.rgba) for c in parsed or () if c.rgba is not None)
    return pairs or None


def _valid_entries(colors: Any, full: str) -> tuple[list[LabelColor], list[str]]:
    """The valid entries of an invalid ``colors`` (first of each value) and the problems."""
    if not isinstance(colors, list | tuple):
        return [], [f"colors: must be a list, got {type(colors).__name__}"]
    kept: list[LabelColor] = []
    problems: list[str] = []
    seen: set[int] = set()
    prefix = f"{full}: invalid OME-Zarr image-label metadata: "
    for index, entry in enumerate(colors):
        try:
            (color,) = parse_label_colors({"colors": [entry]}, full) or ()
        except MetadataError as error:
            problems.append(str(error).removeprefix(prefix).replace("colors.0", f"colors.{index}"))
            continue
        if color.value in seen:
            problems.append(f"colors.{index}: label value {color.value} listed again")
            continue
        seen.add(color.value)
        kept.append(color)
    return kept, problems


def label_properties(document: Any, full: str) -> tuple[dict[str, Any], ...] | None:
    """The ``properties`` of a label image's ``image-label``, one dict per label value, sorted
    by it (None when it gives none).

    Each entry is an object with an integer ``label-value`` and any other keys
    (an area, a class...). Entries without an integer ``label-value`` are left out,
    as is a label value listed again (the first entry counts); one
    `MetadataWarning` names them.

    Examples
    --------
    >>> import warnings
    >>> properties = [{"label-value": 2, "area": 40}, {"label-value": 1, "class": "cell"}]
    >>> label_properties({"properties": properties}, "labels/cells")
    ({'label-value': 1, 'class': 'cell'}, {'label-value': 2, 'area': 40})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     label_properties({"properties": [{"area": 3}]}, "labels/cells") is None
    True
    >>> print(caught[0].message)  # doctest: +ELLIPSIS
    labels/cells: invalid optional image-label properties ...: properties.0: no integer label-value
    """
    if not isinstance(document, dict) or document.get("properties") is None:
        return None
    entries = document["properties"]
    if not isinstance(entries, list | tuple):
        warn_ignored(
            full,
            "image-label properties",
            [f"properties: must be a list, got {type(entries).__name__}"],
        )
        return None
    kept: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for index, entry in enumerate(entries):
        value = entry.get(_LABEL_VALUE) if isinstance(entry, dict) else None
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"properties.{index}: no integer {_LABEL_VALUE}")
        elif value in kept:
            problems.append(f"properties.{index}: label value {value} listed again")
        else:
            kept[value] = dict(entry)
    if problems:
        warn_ignored(full, "image-label properties", problems)
    return tuple(kept[value] for value in sorted(kept)) or None
