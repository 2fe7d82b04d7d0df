"""`open_array`: a zarr array opened as a `ChunkedArray`, the one place that ties the layers.

It checks the arguments, chooses the backend and opens the array's source
(`sources`), makes or shares the chunk cache (`cache`) and returns the lazy
array over both (`reading`). Nothing below it imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from napari_lazy_zarr.core.cache import (
    DEFAULT_TOTAL_BYTES_LIMIT,
    ChunkCache,
    check_concurrency,
    check_total_bytes_limit,
)
from napari_lazy_zarr.core.errors import LazyZarrError, MetadataError
from napari_lazy_zarr.core.reading.array import ChunkedArray
from napari_lazy_zarr.core.settings import DEFAULT_TIMEOUTS, Timeouts
from napari_lazy_zarr.core.sources.backends import choose_backend, open_backend_source
from napari_lazy_zarr.core.sources.zarr import DEFAULT_RETRY
from napari_lazy_zarr.core.storage.retry import RetryPolicy
from napari_lazy_zarr.core.storage.vetting import is_remote

if TYPE_CHECKING:
    import os

__all__ = ["REMOTE_CONCURRENCY", "open_array"]

REMOTE_CONCURRENCY: Final = 32
"""Default chunk loads in flight for remote stores (TensorStore's HTTP concurrency)."""


def open_array(
    path_or_url: str | os.PathLike[str],
    *,
    total_bytes_limit: int = DEFAULT_TOTAL_BYTES_LIMIT,
    concurrency: int | None = None,
    path: str = "",
    cache: ChunkCache | None = None,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    retry: RetryPolicy = DEFAULT_RETRY,
    backend: str = "auto",
    max_view_chunks: int | None = None,
    max_view_bytes: int | None = None,
) -> ChunkedArray:
    """Open a zarr array as a lazy `ChunkedArray` served by a chunk cache.

    Parameters
    ----------
    path_or_url
        A local `.zarr` directory (Zarr v2 or v3) or a URL zarr-python can open.
    total_bytes_limit
        Capacity of the chunk cache in bytes of decoded data (an int >= 0;
        default 1 GiB).
    concurrency
        Chunks loaded at once by worker threads (an int >= 1; default: one per
        core, at least 2, for local stores; 32 for URLs, as TensorStore keeps 32
        HTTP requests in flight).
    path
        The array's path inside the store, for arrays inside a group.
    cache
        Share an existing cache between arrays instead of creating one
        (`total_bytes_limit` and `concurrency` are then checked but unused).
    timeouts
        Time caps of every storage request, metadata and chunks (connect, idle
        read, total); a read over a cap fails with `LoadTimeoutError` and is retried.
    retry
        How transient failures (timeouts, resets, HTTP 429/5xx) are retried;
        a server's ``Retry-After`` is honoured within the policy's bounds.
    backend
        What reads and decodes the chunks (`napari_lazy_zarr.core.sources.backends`):
        ``"auto"`` (zarr-python through this project's bounded reads), ``"zarr"``,
        ``"tensorstore"`` or ``"zarrs"`` (opt-in, for trusted data).
    max_view_chunks, max_view_bytes
        The bounds of one read (see `ChunkedArray`): at most 65,536 chunks and
        the cache's limit (at least 256 MiB) of output by default; a read over
        them raises `PlanTooLargeError` at once, before any chunk is listed.

    Raises
    ------
    LazyZarrError
        A specific subclass naming the path and the problem (not found, not a
        zarr store, malformed or unreadable metadata, unsafe or unsupported
        dtype); any other failure to open is a `MetadataError` chaining its cause.
    TypeError, ValueError
        A bad argument, e.g. ``concurrency=2.5`` (programming errors: Python's
        builtin types, naming the argument), or an unknown `backend`.

    Examples
    --------
    >>> import tempfile, numpy as np, zarr
    >>> store = tempfile.mkdtemp() + "/image.zarr"
    >>> zarr.create_array(store, shape=(100, 100), chunks=(32, 32), dtype="u2")[:] = 7
    >>> image = open_array(store, total_bytes_limit=64 << 20)
    >>> image.shape, image.chunks
    ((100, 100), (32, 32))
    >>> int(image[10:20, 90:].result().sum())
    700
    >>> image.cache.statistics.loads
    2
    >>> image.cache.close()
    """
    # Arguments first: a mistake is reported before any I/O.
    check_total_bytes_limit(total_bytes_limit)
    for name, bound in (("max_view_chunks", max_view_chunks), ("max_view_bytes", max_view_bytes)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            raise TypeError(f"{name} must be an int, got {bound!r}")
        if bound is not None and bound < 1:
            raise ValueError(f"{name} must be >= 1, got {bound}")
    if concurrency is not None:
        check_concurrency(concurrency)
    if not isinstance(timeouts, Timeouts):
        raise TypeError(f"timeouts must be a Timeouts, got {timeouts!r}")
    if not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy, got {retry!r}")
    choose_backend(backend, path_or_url)  # an unknown name is a ValueError, before any I/O
    try:
        source = open_backend_source(
            path_or_url, path=path, backend=backend, retry=retry, timeouts=timeouts
        )
    except LazyZarrError:
        raise
    except Exception as error:  # the contract: nothing raw escapes to the user
        where = f"{path_or_url}{'/' + path if path else ''}"
        raise MetadataError(
            f"{where}: could not open the array: {type(error).__name__}: {error}"
        ) from error
    if cache is None:
        if concurrency is None and is_remote(path_or_url):
            # Remote chunks are latency-bound: keep many requests in flight.
            concurrency = REMOTE_CONCURRENCY
        cache = ChunkCache(total_bytes_limit, concurrency=concurrency)
    return ChunkedArray(
        source, cache, max_view_chunks=max_view_chunks, max_view_bytes=max_view_bytes
    )
