"""Decode backends: what reads and decodes a zarr array's chunks behind `ChunkSource`.

Three backends read the same zarr arrays (v2 and v3, sharded or not) on the
same read grid (a sharded array's inner chunks) and answer every chunk with
the same pixels:

``"zarr"``
    `ZarrChunkSource`: zarr-python's codecs driven by our own reads. Always
    installed, and the only backend whose reads are bounded by our code:
    regular files only, every read capped in bytes (and, for local files, in
    time), every decompression capped at the chunk's size, torn reads of a
    file rewritten meanwhile read again, HTTP through our bounded `HttpStore`.
``"tensorstore"``
    `TensorStoreChunkSource`: TensorStore reads and decodes each chunk with
    its own I/O threads and codecs (its cache off: ours caches). Local
    directories and ``http(s)://`` URLs. ``pip install tensorstore`` (the ``[tensorstore]`` extra).
``"zarrs"``
    `ZarrsChunkSource`: zarr-python with the zarrs Rust codec pipeline
    (``codec_pipeline.path = "zarrs.ZarrsCodecPipeline"``). Local directories
    only. ``pip install zarrs`` (the ``[zarrs]`` extra).

The rule (`choose_backend`): ``"auto"`` is ``"zarr"``. TensorStore and zarrs
open and read the files themselves, outside the byte, decompression and
file-type bounds above, so they are opt-in, for data the user trusts; and,
measured on this project's benchmark (`bench/backends.py`), neither makes a
cold view faster when chunks are read one per call, as the cache reads them.
Every backend opens the array with zarr-python first, so an array is refused
the same way whichever backend is asked for (object dtypes, pickle codecs,
non-image dtypes, a group, a missing path).

Examples
--------
>>> import tempfile, numpy as np, zarr
>>> path = tempfile.mkdtemp() + "/a.zarr"
>>> zarr.create_array(path, shape=(5, 6), chunks=(4, 4), dtype="u2")[:] = 1
>>> choose_backend("auto", path), "zarr" in available_backends()
('zarr', True)
>>> open_backend_source(path).read_chunk((1, 1))
array([[1, 1]], dtype=uint16)
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import zarr

from napari_lazy_zarr.core.errors import (
    ChunkReadError,
    LoadCancelledError,
    LoadTimeoutError,
    MetadataError,
    UnsupportedDataError,
)
from napari_lazy_zarr.core.keys import chunk_bounds
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.sources.protocol import SourceFields
from napari_lazy_zarr.core.sources.zarr import DEFAULT_RETRY, open_zarr_source
from napari_lazy_zarr.core.storage.retry import RetryPolicy, attempts_note
from napari_lazy_zarr.core.storage.vetting import is_remote

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_lazy_zarr.core.sources.protocol import ChunkSource

__all__ = [
    "BACKENDS",
    "ZARRS_PIPELINE_CONFIG",
    "Backend",
    "TensorStoreChunkSource",
    "ZarrsChunkSource",
    "available_backends",
    "choose_backend",
    "open_backend_source",
]

type Backend = Literal["zarr", "tensorstore", "zarrs"]

BACKENDS: Final[tuple[Backend, ...]] = ("zarr", "tensorstore", "zarrs")
"""Every backend, in the order `choose_backend` documents them."""

_PACKAGES: Final = {"tensorstore": "tensorstore", "zarrs": "zarrs"}
_READS: Final = {"tensorstore": "local directories and http(s) URLs", "zarrs": "local directories"}
ZARRS_PIPELINE_CONFIG: Final = {
    "codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
    # Refuse, at open, an array zarrs cannot read, rather than silently decoding it
    # with zarr-python's pipeline under the "zarrs" name.
    "codec_pipeline.strict": True,
}
"""zarr config opening an array with zarrs' codec pipeline (zarrs' documented settings)."""


def available_backends() -> tuple[Backend, ...]:
    """The backends whose packages are installed (``"zarr"`` always is).

    Examples
    --------
    >>> available_backends()[0]
    'zarr'
    """
    return tuple(
        name
        for name in BACKENDS
        if name not in _PACKAGES or importlib.util.find_spec(_PACKAGES[name]) is not None
    )


def choose_backend(requested: str, location: str | os.PathLike[str]) -> Backend:
    """The backend that reads `location` when `requested` is asked for.

    ``"auto"`` is ``"zarr"`` (see the module's docstring for why); any other
    name is taken as asked, once checked: it must be installed and able to
    read `location` (TensorStore: local directories and ``http(s)://`` URLs;
    zarrs: local directories).

    Raises
    ------
    ValueError
        `requested` is not ``"auto"`` or one of `BACKENDS`.
    UnsupportedDataError
        The backend's package is not installed, or it cannot read `location`.

    Examples
    --------
    >>> choose_backend("auto", "https://example.org/a.zarr")
    'zarr'
    >>> choose_backend("fastest", "/data/a.zarr")
    Traceback (most recent call last):
    ...
    ValueError: unknown backend 'fastest'; choose one of 'auto', 'zarr', 'tensorstore', 'zarrs'
    """
    if requested == "auto":
        return "zarr"
    if requested not in BACKENDS:
        allowed = ", ".join(repr(name) for name in ("auto", *BACKENDS))
        raise ValueError(f"unknown backend {requested!r}; choose one of {allowed}")
    backend: Backend = requested
    if backend == "zarr":
        return backend
    package = _PACKAGES[backend]
    where = os.fspath(location)
    if importlib.util.find_spec(package) is None:
        raise UnsupportedDataError(
            f"{where}: the {backend!r} backend needs the {package!r} package; "
            f"install it with: pip install {package} (the plugin's [{backend}] extra)"
        )
    scheme = where.split("://", 1)[0].lower() if is_remote(where) else None
    readable = scheme is None or (backend == "tensorstore" and scheme in ("http", "https"))
    if not readable or (scheme is None and os.path.isfile(where)):
        raise UnsupportedDataError(
            f"{where}: the {backend!r} backend reads {_READS[backend]} only; use backend='zarr'"
        )
    return backend


def open_backend_source(
    path_or_url: str | os.PathLike[str],
    *,
    path: str = "",
    backend: str = "auto",
    retry: RetryPolicy = DEFAULT_RETRY,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> ChunkSource:
    """Open the zarr array at `path_or_url` (and `path` inside it) with a decode backend.

    `backend` is ``"auto"`` or one of `BACKENDS`, resolved by `choose_backend`;
    ``"zarr"`` is exactly `open_zarr_source`. `retry` and `timeouts` apply to
    every backend's chunk reads (zarrs: retries only; its reads are local).

    Raises
    ------
    ValueError
        An unknown backend name.
    LazyZarrError
        What `open_zarr_source` raises (the array is checked by zarr-python
        first, whichever backend reads it), or `UnsupportedDataError` when the
        backend is not installed or cannot read this store or array.
    """
    chosen = choose_backend(backend, path_or_url)
    if chosen == "tensorstore":
        return TensorStoreChunkSource(path_or_url, path=path, retry=retry, timeouts=timeouts)
    if chosen == "zarrs":
        return ZarrsChunkSource(path_or_url, path=path, retry=retry, timeouts=timeouts)
    return open_zarr_source(path_or_url, path=path, retry=retry, timeouts=timeouts)


class _BackendSource(SourceFields):
    """What both optional backends share: zarr-python's checks, grid and identity, and
    the retried, error-wrapped chunk read.

    The array is opened first by `open_zarr_source` (the *reference*): its
    checks refuse the same arrays, and its read grid, fill value and identity
    are this source's (same data on the same grid, one open: the same identity).
    """

    backend: Backend

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        path: str,
        retry: RetryPolicy,
        timeouts: Timeouts,
    ) -> None:
        choose_backend(self.backend, path_or_url)
        self._reference = open_zarr_source(path_or_url, path=path, retry=retry, timeouts=timeouts)
        store = os.fspath(path_or_url)
        self._store_location = store
        self._path = path
        self._location = f"{store.rstrip('/')}/{path}" if path else store
        self._retry = retry
        self._timeouts = timeouts
        reference = self._reference
        self._identity = reference.identity
        self._shape = reference.shape
        self._dtype = reference.dtype
        self._fill_value = reference.fill_value
        self._grid = reference.grid

    @property
    def timeouts(self) -> Timeouts:
        """The time caps of this source's reads."""
        return self._timeouts

    def version(self) -> str:
        """The array's metadata version now (see `ZarrChunkSource.version`)."""
        return self._reference.version()

    def _read(
        self,
        coords: tuple[int, ...],
        read: Callable[[tuple[slice, ...]], np.ndarray[Any, Any]],
    ) -> np.ndarray[Any, Any]:
        """`read(box)` of chunk `coords`' box, retried; failures as `ChunkReadError`."""
        lo, hi = chunk_bounds(self._grid, coords, self._shape)
        box = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        attempts = 1

        def count(attempt: int, error: BaseException) -> None:
            nonlocal attempts
            attempts = attempt + 1

        try:
            data = self._retry.call(lambda: read(box), on_retry=count)
        except LoadCancelledError:
            raise  # not a failure of the data: the cache queues the chunk again
        except Exception as error:
            how = attempts_note(error, attempts)
            kind = LoadTimeoutError if isinstance(error, TimeoutError) else ChunkReadError
            raise kind(
                f"{self._location}: chunk {self._reference.stored_key(coords)!r} (grid "
                f"position {tuple(coords)}, {self.backend} backend): "
                f"{type(error).__name__}: {error} ({how})"
            ) from error
        return data if data.dtype == self._dtype else data.astype(self._dtype)


# TensorStore reports failures as ValueError("<absl status code>: message").
_TRANSIENT_STATUS: Final = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "RESOURCE_EXHAUSTED")


class _TransientStatus(ConnectionError):
    """A TensorStore failure worth retrying (its status said so)."""


def _storage_error(error: ValueError) -> Exception:
    """A TensorStore error as one `classify` understands (the original chained to it)."""
    status = str(error).split(":", 1)[0]
    if status in _TRANSIENT_STATUS:
        return _TransientStatus(str(error))
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
        return PermissionError(str(error))
    return error


@functools.cache
def _tensorstore_context() -> Any:
    """One TensorStore context for every source: its cache pool off (ours caches), and
    no HTTP retries of its own (`RetryPolicy` is the one retry policy)."""
    import tensorstore

    return tensorstore.Context(
        {
            "cache_pool": {"total_bytes_limit": 0},
            "http_request_retries": {"max_retries": 0},
        }
    )


class TensorStoreChunkSource(_BackendSource):
    """A `ChunkSource` whose chunks TensorStore reads and decodes (its cache off).

    Opens the array with zarr-python first (`open_zarr_source`: the same
    checks, read grid, fill value and identity), then with TensorStore's
    ``"zarr3"`` or ``"zarr"`` (v2) driver over a ``"file"`` or ``"http"``
    kvstore, read-only. `read_chunk` reads exactly one read-grid chunk's box
    (an inner chunk of a sharded array; clipped at the array's edge) with
    TensorStore's own I/O and decode threads, waiting at most
    ``timeouts.total`` (`LoadTimeoutError` past it); transient failures
    (TensorStore's UNAVAILABLE, DEADLINE_EXCEEDED, ...) are retried by `retry`.
    `cancel_load` cancels a read in flight (`CancellableSource`).

    TensorStore reads the files itself: none of `ZarrChunkSource`'s byte,
    decompression or file-type bounds apply. For trusted data.

    Examples
    --------
    >>> import tempfile, numpy as np, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> z = zarr.create_array(path, shape=(5, 6), chunks=(4, 4), dtype="u2")
    >>> z[:] = np.arange(30).reshape(5, 6)
    >>> TensorStoreChunkSource(path).read_chunk((1, 1))
    array([[28, 29]], dtype=uint16)
    """

    backend: Backend = "tensorstore"
    cancel_superseded = False
    """As `ZarrChunkSource`: a superseded read finishes (its chunk is parked); `cancel_load`
    serves `close()`."""

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        path: str = "",
        retry: RetryPolicy = DEFAULT_RETRY,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        super().__init__(path_or_url, path=path, retry=retry, timeouts=timeouts)
        import tensorstore

        kvstore: dict[str, Any]
        if is_remote(self._store_location):
            kvstore = {"driver": "http", "base_url": self._store_location, "path": path}
        else:
            root = os.path.abspath(os.path.join(self._store_location, path))
            kvstore = {"driver": "file", "path": root + "/"}
        zarr_format = self._reference.array.metadata.zarr_format
        spec = {"driver": "zarr3" if zarr_format == 3 else "zarr", "kvstore": kvstore}
        try:
            self._store = tensorstore.open(spec, read=True, context=_tensorstore_context()).result(
                timeout=timeouts.total
            )
        except (ValueError, TimeoutError) as error:
            raise MetadataError(
                f"{self._location}: TensorStore cannot open the array: {error}"
            ) from error
        self._futures: dict[tuple[int, ...], set[Any]] = {}
        self._futures_lock = threading.Lock()

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        coords = tuple(int(c) for c in coords)
        return self._read(coords, lambda box: self._read_box(coords, box))

    def _read_box(self, coords: tuple[int, ...], box: tuple[slice, ...]) -> np.ndarray[Any, Any]:
        future = self._store[box].read()
        with self._futures_lock:
            self._futures.setdefault(coords, set()).add(future)
        try:
            return np.asarray(future.result(timeout=self._timeouts.total))
        except TimeoutError as error:
            future.cancel()
            raise TimeoutError(f"no result within {self._timeouts.total} s") from error
        except asyncio.CancelledError as error:
            raise LoadCancelledError(
                f"{self._location}: the read of chunk {coords} was cancelled"
            ) from error
        except ValueError as error:
            translated = _storage_error(error)
            if translated is error:
                raise
            raise translated from error
        finally:
            with self._futures_lock:
                pending = self._futures.get(coords)
                if pending is not None:
                    pending.discard(future)
                    if not pending:
                        del self._futures[coords]

    def cancel_load(self, coords: tuple[int, ...]) -> None:
        """Cancel the reads of chunk `coords` in flight (they raise `LoadCancelledError`)."""
        with self._futures_lock:
            pending = tuple(self._futures.get(tuple(int(c) for c in coords), ()))
        for future in pending:
            future.cancel()

    def __repr__(self) -> str:
        return (
            f"TensorStoreChunkSource({self._location!r}, shape={self._shape}, dtype={self._dtype})"
        )


class ZarrsChunkSource(_BackendSource):
    """A `ChunkSource` whose chunks zarrs' Rust codec pipeline reads and decodes.

    Opens the array with zarr-python first (`open_zarr_source`: the same
    checks, read grid, fill value and identity), then again with zarrs'
    pipeline selected by its public configuration (`ZARRS_PIPELINE_CONFIG`,
    strict: an array zarrs cannot read is refused at open, never decoded by
    zarr-python's pipeline instead). zarr-python fixes an array's codec
    pipeline when it opens it (``AsyncArray`` builds it from the config then),
    so the setting is needed around the open only. `read_chunk` reads one
    read-grid chunk's box through zarr's public indexing. Local directories
    only; zarrs reads the files itself, outside `ZarrChunkSource`'s bounds and
    with no time cap of ours. For trusted data.

    Examples
    --------
    >>> import tempfile, numpy as np, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> z = zarr.create_array(path, shape=(5, 6), chunks=(4, 4), dtype="u2")
    >>> z[:] = np.arange(30).reshape(5, 6)
    >>> ZarrsChunkSource(path).read_chunk((1, 1))
    array([[28, 29]], dtype=uint16)
    """

    backend: Backend = "zarrs"

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        path: str = "",
        retry: RetryPolicy = DEFAULT_RETRY,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        super().__init__(path_or_url, path=path, retry=retry, timeouts=timeouts)
        import zarrs

        store = zarr.storage.LocalStore(self._store_location, read_only=True)
        try:
            with zarr.config.set(ZARRS_PIPELINE_CONFIG), warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # zarrs' own "unsupported" note
                array = zarr.open_array(store=store, path=path, mode="r")
        except Exception as error:  # zarrs' UnsupportedMetadataError among others
            raise UnsupportedDataError(
                f"{self._location}: zarrs cannot read this array "
                f"({type(error).__name__}: {error}); use backend='zarr'"
            ) from error
        pipeline = array.async_array.codec_pipeline
        if not isinstance(pipeline, zarrs.ZarrsCodecPipeline) or pipeline.impl is None:
            # zarr-python silently builds its own pipeline for a store zarrs does not take.
            raise UnsupportedDataError(
                f"{self._location}: zarrs cannot read this array (zarr-python chose "
                f"{type(pipeline).__name__}); use backend='zarr'"
            )
        self._array = array

    def read_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        coords = tuple(int(c) for c in coords)
        return self._read(coords, lambda box: np.asarray(self._array[box]))

    def __repr__(self) -> str:
        return f"ZarrsChunkSource({self._location!r}, shape={self._shape}, dtype={self._dtype})"
