"""Time-zone data: always the ``tzdata`` package, never the system copy.

``zoneinfo`` reads the system database first, and the copies disagree (on our
machines the system files are older and differ for 2027 in a dozen zones).
Emptying the search path makes ``zoneinfo`` fall back to the ``tzdata``
package, whose release we can name in logs, ``/readyz`` and metrics.
"""

from __future__ import annotations

import functools
import zoneinfo

import tzdata

from tepat.domain.errors import DomainError

zoneinfo.reset_tzpath(to=())
zoneinfo.ZoneInfo.clear_cache()

TZDATA_RELEASE: str = tzdata.IANA_VERSION


@functools.cache
def available_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def load_zone(name: str, field: str = "timezone") -> zoneinfo.ZoneInfo:
    """The zone called ``name``, or a DomainError naming ``field``."""
    if not isinstance(name, str) or name not in available_zones():
        raise DomainError(field, f"unknown IANA time zone {name!r}")
    return _zone(name)


@functools.cache
def _zone(name: str) -> zoneinfo.ZoneInfo:
    # ZoneInfo keeps only 8 zones strongly cached; planning cycles through all ~600,
    # so without this each lookup re-reads and re-parses the zone file. The set of
    # names is fixed, so the cache is bounded.
    return zoneinfo.ZoneInfo(name)
