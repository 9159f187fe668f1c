"""The one retry policy of the package's HTTP calls (dataset downloads, chat completions).

A reply with status 429 or 5xx is worth another attempt (so are the failures a caller declares
transient: a timeout, a connection broken mid-reply); attempt ``n`` (0-based) waits
``backoff * 2**n`` seconds, or the server's ``Retry-After`` (seconds or an HTTP date) when that
is longer. A ``Retry-After`` above ``max_retry_after`` is not waited for: the call fails at once.
"""

from __future__ import annotations

import email.utils
import math
import time
from dataclasses import dataclass

from kolm_search._params import non_negative_int, real

__all__ = ["RetryPolicy", "parse_retry_after"]


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (a number or an HTTP date); None if unusable."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    return None if math.isnan(seconds) else max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """When to try an HTTP request again, and how long to wait first (see the module docstring).

    Parameters
    ----------
    max_retries : int, default 3
        Attempts after the first.
    backoff : float, default 0.5
        The first wait in seconds, doubled each retry.
    max_retry_after : float, default 30
        Longest ``Retry-After`` honoured, in seconds.
    """

    max_retries: int = 3
    backoff: float = 0.5
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        non_negative_int("max_retries", self.max_retries)
        real("backoff", self.backoff, low=0.0)
        real("max_retry_after", self.max_retry_after, low=0.0)

    @staticmethod
    def retryable(status: int) -> bool:
        """True for a status worth another attempt: 429 (too many requests) or a 5xx."""
        return status == 429 or status >= 500

    def wait(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait after failed attempt ``attempt`` (0-based), or ``None`` when no retry
        is left or the server's ``retry_after`` exceeds ``max_retry_after`` (not worth waiting)."""
        if attempt >= self.max_retries or (retry_after is not None and retry_after > self.max_retry_after):
            return None
        return max(self.backoff * 2.0 ** attempt, retry_after or 0.0)
