"""The rules of time (docs/PRINCIPLES.md §3, RFC 5545 semantics).

- A local date and time in a zone becomes the instant when that zone's wall
  clock reads it.
- Ambiguous (clocks fall back): the first occurrence.
- Nonexistent (clocks spring forward): read with the UTC offset in effect
  before the gap, so 02:30 on New York's spring-forward day is 07:30Z.
- Quiet hours are local ``[start, end)`` and wrap midnight when end <= start.

PEP 495's ``fold=0`` gives exactly the two rules; the property tests check that against
an independent computation over every IANA zone.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo
from functools import lru_cache

from tepat.domain.models import QuietHours


# Planning asks for the same few (date, time, zone) over and over (every user of a zone
# with a reminder at 07:30 on one date): a hit costs a fifteenth of the conversion. The
# function is pure and its result immutable, so a cached answer is the same answer.
@lru_cache(maxsize=8192)
def local_to_utc(day: date, at: time, zone: tzinfo) -> datetime:
    """The UTC instant at which ``zone``'s wall clock reads ``day at``."""
    return datetime.combine(day, at).replace(tzinfo=zone, fold=0).astimezone(UTC)


def utc_to_local(instant: datetime, zone: tzinfo) -> datetime:
    """The wall clock in ``zone`` at ``instant`` (naive)."""
    return instant.astimezone(zone).replace(tzinfo=None)


def in_quiet_hours(at: time, quiet: QuietHours | None) -> bool:
    if quiet is None or quiet.start == quiet.end:
        return False
    if quiet.start < quiet.end:
        return quiet.start <= at < quiet.end
    return at >= quiet.start or at < quiet.end


def quiet_period_end(local: datetime, quiet: QuietHours, zone: tzinfo) -> datetime:
    """The UTC instant ending the quiet period that contains wall time ``local``."""
    instant = local.replace(tzinfo=zone).astimezone(UTC)
    # The next instant the wall clock reads quiet.end: today's or tomorrow's, either
    # pass through a repeated hour. In a fall-back night the clock can read the end
    # again the same day (01:01-01:00 quiet hours end at the second 01:00).
    # (In a gap, fold=1 reads the time with the offset after it, an earlier instant:
    # a nonexistent end keeps local_to_utc's reading.)
    candidates: list[datetime] = []
    for day in (local.date(), local.date() + timedelta(days=1)):
        first = local_to_utc(day, quiet.end, zone)
        second = datetime.combine(day, quiet.end, tzinfo=zone).replace(fold=1).astimezone(UTC)
        candidates.extend((first, second) if second > first else (first,))
    return min(c for c in candidates if c > instant)


def local_dates_covering(start: datetime, end: datetime, zone: tzinfo) -> list[date]:
    """Every local date in ``zone`` whose instants may fall in ``[start, end)`` (a day
    of margin each side absorbs offsets up to ±26 h and DST shifts)."""
    first = utc_to_local(start, zone).date() - timedelta(days=1)
    last = utc_to_local(end, zone).date() + timedelta(days=1)
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]
