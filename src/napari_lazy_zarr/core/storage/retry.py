"""Retrying transient storage failures: exponential backoff with jitter, a bounded number of times.

Remote storage misbehaves in passing (connection resets, timeouts, HTTP 429
and 5xx, truncated bodies); those are retried. Refusals are not: HTTP
401/403 fail at once with a clear message, and data that does not decode
fails at once too (the bytes would be the same next time). A missing key
(HTTP 404) is not an error at all: zarr-python reads it as the fill value.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "NO_RETRY",
    "RetryPolicy",
    "attempts_note",
    "classify",
    "retry_after",
]

T = TypeVar("T")

type Verdict = Literal["transient", "denied", "permanent"]

_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_DENIED_STATUS = frozenset({401, 403})
_RATE_LIMITED = frozenset({429, 503})  # the statuses a server sends with a Retry-After


def _chain_status(error: BaseException) -> int | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = _status(current)
        if status is not None:
            return status
        current = current.__cause__ or current.__context__
    return None


def _status(error: BaseException) -> int | None:
    for name in ("status", "status_code", "code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def classify(error: BaseException) -> Verdict:
    """Whether a storage error is worth retrying.

    Examples
    --------
    >>> classify(ConnectionResetError())
    'transient'
    >>> classify(PermissionError("403 Forbidden"))
    'denied'
    >>> classify(ValueError("bad zstd frame"))
    'permanent'
    >>> from napari_lazy_zarr.core.errors import LoadTimeoutError
    >>> classify(LoadTimeoutError("chunk c/0/0: no byte for 30 s"))
    'transient'
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:  # look through wrapping errors
        seen.add(id(current))
        status = _status(current)
        if status in _DENIED_STATUS or isinstance(current, PermissionError):
            return "denied"
        if status in _TRANSIENT_STATUS:
            return "transient"
        if isinstance(current, ConnectionError | TimeoutError | asyncio.TimeoutError):
            return "transient"
        if getattr(current, "retryable", False) is True:  # e.g. a file changed while read
            return "transient"
        current = current.__cause__ or current.__context__
    return "permanent"


def attempts_note(error: BaseException, attempts: int) -> str:
    """How a read that failed with `error` after `attempts` tries was handled, for its message.

    Examples
    --------
    >>> attempts_note(PermissionError(), 1), attempts_note(ConnectionResetError(), 4)
    ('access denied, not retried', 'after 4 attempts')
    """
    verdict = classify(error)
    if verdict == "permanent" and getattr(error, "retryable", False):
        verdict = "transient"  # e.g. a file that kept changing while read
    if verdict == "denied":
        return "access denied, not retried"
    if attempts > 1:
        return f"after {attempts} attempts"
    # "not retried", never "not retryable": the user may still retry it (the inspector's
    # "Retry all failed"), e.g. once the file is fixed.
    return "a permanent error, not retried" if verdict == "permanent" else "1 attempt"


def retry_after(error: BaseException) -> float | None:
    """The wait, in seconds, a server asked for (``Retry-After``), found on `error`'s chain.

    Looks for a `retry_after` attribute (finite seconds >= 0) on the error and
    the errors it wraps (`__cause__`, `__context__`).

    Examples
    --------
    >>> error = ConnectionError("503 Service Unavailable")
    >>> error.retry_after = 3.0
    >>> wrapped = RuntimeError("read failed")
    >>> wrapped.__cause__ = error
    >>> retry_after(wrapped), retry_after(ValueError())
    (3.0, None)
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        value = getattr(current, "retry_after", None)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        ):
            return float(value)
        current = current.__cause__ or current.__context__
    return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a chunk read is retried.

    Attempt `n` (from 1) that fails transiently waits
    `min(max_delay, base_delay * 2**(n-1))` times a random factor in
    `[0.5, 1.0]` (jitter, so many chunks failing together do not retry in
    lockstep), then tries again, up to `attempts` tries in all. When the
    server said how long to wait (``Retry-After``, a `retry_after` attribute on
    the error or its causes), it waits that long instead; a server asking for
    more than `max_retry_after` seconds is not retried now (the read fails, and
    may be retried later, e.g. by `ChunkCache.retry`): blocking a worker that
    long would stall other chunks. No wait ends later than `deadline` seconds
    after the first try began: a retry that would is not made, and the last
    error propagates, so retrying a read is bounded in time.

    Examples
    --------
    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise ConnectionResetError("reset by peer")
    ...     return "data"
    >>> RetryPolicy(attempts=4, base_delay=0.0).call(flaky)
    'data'
    >>> len(calls)
    3
    """

    attempts: int = 4
    """Tries in all (1: never retry)."""
    base_delay: float = 0.1
    """Seconds before the first retry (before jitter); doubles with each retry."""
    max_delay: float = 2.0
    """Cap of the backoff, seconds."""
    max_retry_after: float = 10.0
    """Cap of a server's ``Retry-After``, seconds."""
    deadline: float = 120.0
    """Seconds from the first try after which no retry starts."""
    rate_limit_delay: float = 1.0
    """Seconds before the first retry of a 429 or 503 without ``Retry-After``; doubles."""

    def __post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise ValueError(f"RetryPolicy.attempts must be an int >= 1, got {self.attempts!r}")
        for name in ("base_delay", "max_delay", "max_retry_after", "deadline", "rate_limit_delay"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"RetryPolicy.{name} must be a finite number of seconds >= 0, got {value!r}"
                )

    def delay(self, attempt: int) -> float:
        """The backoff after failed attempt `attempt` (from 1), with jitter."""
        backoff: float = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return backoff * random.uniform(0.5, 1.0)

    def wait_before_retry(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait after failed attempt `attempt`: the server's ask, or the backoff.

        Examples
        --------
        >>> error = ConnectionError("429 Too Many Requests")
        >>> error.retry_after = 120
        >>> RetryPolicy(max_retry_after=5.0).wait_before_retry(1, error)
        5.0
        >>> 0.05 <= RetryPolicy().wait_before_retry(1, ConnectionResetError()) <= 0.1
        True
        """
        asked = retry_after(error)
        if asked is not None:
            return min(asked, self.max_retry_after)
        if _chain_status(error) in _RATE_LIMITED:
            backoff = min(self.max_retry_after, self.rate_limit_delay * 2.0 ** (attempt - 1))
            return backoff * random.uniform(0.5, 1.0)
        return self.delay(attempt)

    def call(
        self,
        fn: Callable[[], T],
        *,
        on_retry: Callable[[int, BaseException], None] | None = None,
    ) -> T:
        """`fn()`, retried on transient errors; the last error propagates.

        Examples
        --------
        A server asking to wait longer than `max_retry_after` (or than the
        deadline allows) is not retried:

        >>> def busy():
        ...     error = ConnectionError("503 Service Unavailable")
        ...     error.retry_after = 60.0
        ...     raise error
        >>> RetryPolicy().call(busy)
        Traceback (most recent call last):
        ...
        ConnectionError: 503 Service Unavailable
        """
        end = time.monotonic() + self.deadline
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as error:
                if attempt >= self.attempts or classify(error) != "transient":
                    raise
                asked = retry_after(error)
                if asked is not None and asked > self.max_retry_after:
                    raise  # the server asks for longer than a worker may wait
                wait = self.wait_before_retry(attempt, error)
                if time.monotonic() + wait > end:
                    raise  # retrying would outlast the deadline
                if on_retry is not None:
                    on_retry(attempt, error)
                time.sleep(wait)
                attempt += 1


NO_RETRY = RetryPolicy(attempts=1)
"""Fail on the first error."""
