"""Errors the engine raises for bad input and failed reads.

Every message names the path (or chunk key) and the cause, so a user can act on it.
"""

from __future__ import annotations

__all__ = [
    "CacheClosedError",
    "ChunkReadError",
    "DisabledFeatureError",
    "IncompatibleSourcesError",
    "LazyZarrError",
    "LoadCancelledError",
    "LoadTimeoutError",
    "MetadataError",
    "MetadataWarning",
    "MissingCodecError",
    "NotAZarrStoreError",
    "PlanTooLargeError",
    "ReadOnlyError",
    "StoreNotFoundError",
    "UnsafeDataError",
    "UnsupportedDataError",
    "UnsupportedDtypeError",
]


class LazyZarrError(Exception):
    """Base class of the errors napari-lazy-zarr raises about data."""


class StoreNotFoundError(LazyZarrError, FileNotFoundError):
    """The path or URL does not exist."""


class NotAZarrStoreError(LazyZarrError, ValueError):
    """The path exists but holds no zarr array or group metadata."""


class MetadataError(LazyZarrError, ValueError):
    """The store's metadata is unreadable or malformed."""


class UnsupportedDataError(LazyZarrError, TypeError):
    """The array is valid zarr but cannot be shown as an image (e.g. a string dtype)."""


class UnsafeDataError(LazyZarrError, ValueError):
    """Decoding the array would run code from the file (object dtypes, pickle codecs)."""


class ChunkReadError(LazyZarrError, OSError):
    """A chunk could not be read or decoded; the message names the chunk key and cause."""


class IncompatibleSourcesError(LazyZarrError, ValueError):
    """Sources cannot be combined: their ranks, dtypes or extents disagree, or a bad axis."""


class PlanTooLargeError(LazyZarrError, ValueError):
    """A read would touch more chunks (or output bytes) than a view may: refused before
    any chunk is listed; read a smaller region or a coarser level, or raise the bound."""


class ReadOnlyError(LazyZarrError, NotImplementedError):
    """A write was attempted through a source or store that can only be read."""


class LoadTimeoutError(ChunkReadError, TimeoutError):
    """A read exceeded its time cap (connect, idle read or total); retryable."""


class LoadCancelledError(LazyZarrError):
    """A load was cancelled (its views moved on, or the cache closed) before it finished.

    Not a failure of the data: the cache puts a cancelled chunk back in the
    queue (or parks it), never in FAILED.
    """


class CacheClosedError(LazyZarrError, RuntimeError):
    """The chunk cache was closed while this call waited on it, or before it was made."""


class MetadataWarning(UserWarning):
    """Metadata that breaks its spec where it decides no pixel, read anyway: the message names
    the path, the key and the cause, and what is used instead (a default, a base version).

    E.g. an invalid optional ``omero`` block or label colour (the reader's defaults used), or
    an OME-Zarr development version such as ``0.5-dev-spatialdata`` (read as 0.5).
    """


class MissingCodecError(UnsupportedDataError):
    """The array's codec is valid but no installed package provides it; the message names
    the codec and what to install (``imagecodecs``, the ``[codecs]`` extra, for its codecs)."""


class DisabledFeatureError(UnsupportedDataError):
    """The store is valid but uses what zarr-python leaves disabled by default (a
    rectilinear chunk grid); the message names the zarr setting that enables it."""


class UnsupportedDtypeError(UnsupportedDataError):
    """The array's dtype is no image napari can show (complex, structured, strings, dates,
    durations); the message names the array, the dtype and what to do instead."""
