"""Retry-After (RFC 9110, section 10.2.3): how long a server asked its client to wait.

Pure functions of their input and an injected ``now``; the HTTP target turns the result into the
floor of the next attempt's delay (beat_engine/backoff.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

# The statuses that define Retry-After as "come back later": 503 (RFC 9110) and 429 (RFC 6585).
# On a 3xx it names a redirect's delay, and redirects are not followed.
RETRY_AFTER_STATUSES = frozenset({429, 503})

# Far beyond any ceiling a deployment would set; it only keeps timedelta from overflowing.
_LONGEST = timedelta(days=3650)


def http_date(value: str) -> datetime | None:
    """An HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) as aware UTC."""
    try:
        parsed = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    # HTTP-dates are always GMT; the obsolete forms parse without a zone.
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def retry_after_delay(value: str, *, now: datetime) -> timedelta | None:
    """The wait a Retry-After value asks for, counted from ``now``; None when it is malformed.

    ``delay-seconds`` is a non-negative decimal integer (ASCII digits only: no sign, no
    fraction); otherwise the value must be an HTTP-date, and one already past asks for no
    wait. ``now`` should be the response's own Date when it has one, so that the server's
    clock is compared with the server's clock.
    """
    text = value.strip()
    if text.isascii() and text.isdigit():
        # Clamp as an integer first: int(text) may exceed what a timedelta can hold.
        return timedelta(seconds=min(int(text), _LONGEST // timedelta(seconds=1)))
    when = http_date(text)
    if when is None:
        return None
    return min(max(timedelta(0), when - now), _LONGEST)
