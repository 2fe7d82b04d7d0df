"""A ``206 Partial Content`` answer checked against the byte range that was asked.

Both HTTP clients (`HttpStore` and the reference reader's `read_remote`) ask
for one range at a time and take the body only after `check_partial` has
compared its ``Content-Range: bytes first-last/total`` with the request: the
first byte must be the one asked, the length the one asked (or what is left
before the end of the file, when the total says the range runs past it), the
total the one an earlier answer for the same URL gave. A server or proxy that
answers another range -- honestly labelled or not labelled at all -- would
otherwise have its bytes decoded as the chunk that was asked for (a sharded
inner chunk read at the wrong offset decodes to wrong pixels without error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)

__all__ = ["Span", "check_partial", "range_header"]

_CONTENT_RANGE: Final = re.compile(r"bytes[ \t]+([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)")


@dataclass(frozen=True, slots=True)
class Span:
    """The bytes a ``206`` answer holds: `first` to `last` inclusive, of `total` (None: ``*``)."""

    first: int
    last: int
    total: int | None

    @property
    def length(self) -> int:
        return self.last - self.first + 1

    def text(self) -> str:
        return f"bytes {self.first}-{self.last}/{'*' if self.total is None else self.total}"


def range_header(byte_range: ByteRequest) -> str:
    """The ``Range`` header value asking for `byte_range`.

    Examples
    --------
    >>> range_header(RangeByteRequest(10, 20)), range_header(SuffixByteRequest(8))
    ('bytes=10-19', 'bytes=-8')
    """
    match byte_range:
        case RangeByteRequest(start=start, end=end):
            return f"bytes={start}-{end - 1}"
        case OffsetByteRequest(offset=offset):
            return f"bytes={offset}-"
        case SuffixByteRequest(suffix=suffix):
            return f"bytes=-{suffix}"
    raise TypeError(f"unexpected byte range {byte_range!r}")


def check_partial(header: str | None, asked: ByteRequest, known_total: int | None) -> Span | str:
    """The span a ``206`` answer's `header` (its ``Content-Range``) declares, or what is wrong.

    `known_total` is the file's size as an earlier answer for the same URL
    gave it (None: unknown). A string is returned -- the reason, for the
    caller's retryable error -- when the header is missing or garbled, or
    declares another first byte, another length, or another total.

    Examples
    --------
    >>> check_partial("bytes 10-19/100", RangeByteRequest(10, 20), None)
    Span(first=10, last=19, total=100)
    >>> check_partial("bytes 90-99/100", RangeByteRequest(90, 120), None)  # cut at the end
    Span(first=90, last=99, total=100)
    >>> check_partial("bytes 0-9/100", RangeByteRequest(10, 20), None)
    'it starts at byte 0, not 10'
    >>> check_partial("bytes 10-19/100", RangeByteRequest(10, 20), 120)
    'the file holds 100 bytes, where an earlier answer said 120 (it changed meanwhile)'
    """
    if header is None:
        return "it has no Content-Range"
    match = _CONTENT_RANGE.fullmatch(header.strip())
    if match is None:
        return f"its Content-Range {header[:80]!r} is not 'bytes first-last/total'"
    first, last = int(match.group(1)), int(match.group(2))
    total = None if match.group(3) == "*" else int(match.group(3))
    span = Span(first, last, total)
    if last < first or (total is not None and last >= total):
        return f"its Content-Range {span.text()!r} is not a range of the file"
    if total is not None and known_total is not None and total != known_total:
        return (
            f"the file holds {total} bytes, where an earlier answer said {known_total} "
            "(it changed meanwhile)"
        )
    total = total if total is not None else known_total
    wanted: int | None
    match asked:
        case RangeByteRequest(start=start, end=end):
            wanted_first = start
            # A range running past the end of the file is cut there (RFC 9110, 14.1.2).
            wanted = end - start if total is None else min(end, total) - start
        case OffsetByteRequest(offset=offset):
            wanted_first, wanted = offset, None if total is None else total - offset
        case SuffixByteRequest(suffix=suffix):
            if total is None:
                return "it declares no total, so the last bytes asked cannot be located"
            wanted_first = max(0, total - suffix)
            wanted = total - wanted_first
        case _:
            raise TypeError(f"unexpected byte range {asked!r}")
    if first != wanted_first:
        return f"it starts at byte {first}, not {wanted_first}"
    if wanted is not None and span.length != wanted:
        return f"it holds {span.length} bytes, not {wanted}"
    return span
