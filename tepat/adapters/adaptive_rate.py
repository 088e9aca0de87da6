"""A send rate that finds what the provider really accepts, under a configured ceiling.

``TEPAT_EXPO_RATE_LIMIT`` is a ceiling, not a promise: an Expo project may be
allowed less, and several consumer processes share one project. Throwing the
configured rate at a provider that accepts a sixth of it only collects 429s.

- On a 429 the rate drops to what the provider was seen to accept over the
  last seconds (a little under it), or by a multiplicative step when nothing
  was accepted yet, and sending pauses for the provider's ``Retry-After``.
- While requests are accepted the rate creeps back up (0.2 % per second), so
  a provider that raised its limit is found again, slowly enough that a probe
  past the limit (one 429) comes about once per 15 seconds of full-rate sending.
- It never exceeds ``ceiling * share``: ``share`` is this process's part of
  the ceiling (``1 / live consumers``, see ``consumers/rate_share.py``).

Written by hand because the usual libraries (aiolimiter, pyrate-limiter) give
fixed rates; the adaptive part is the point here, and it is small.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock

# How far back accepted sends count when a 429 asks "what does the provider take?".
WINDOW_SECONDS = 2.0
# Relative increase per second of accepted sending.
INCREASE_PER_SECOND = 0.002
# Decrease when a 429 comes with nothing accepted to measure from.
DECREASE = 0.5
# Aim this far under the measured rate.
HEADROOM = 0.97
FLOOR = 1.0


class AdaptiveRate:
    def __init__(self, bucket: TokenBucket, ceiling: float, clock: Clock) -> None:
        self.bucket = bucket
        self.ceiling = float(ceiling)
        self.share = 1.0
        self.clock = clock
        self._accepted: deque[tuple[datetime, int]] = deque()
        self._first_accepted: datetime | None = None
        self._last_change = clock.now()
        self.throttled = 0

    @property
    def rate(self) -> float:
        return self.bucket.rate

    @property
    def limit(self) -> float:
        return max(FLOOR, self.ceiling * self.share)

    def set_share(self, share: float) -> None:
        """This process's part of the ceiling (0 < share <= 1)."""
        self.share = min(1.0, max(share, 1e-6))
        if self.bucket.rate > self.limit:
            self.bucket.set_rate(self.limit)
        elif self.bucket.rate < self.limit and self.throttled == 0:
            # Never throttled: the share alone sets the pace.
            self.bucket.set_rate(self.limit)

    def accepted(self, n: int) -> None:
        now = self.clock.now()
        if self._first_accepted is None:
            self._first_accepted = now
        self._accepted.append((now, n))
        self._forget_before(now)
        elapsed = (now - self._last_change).total_seconds()
        self._last_change = now
        if self.bucket.rate < self.limit and elapsed > 0:
            grown = self.bucket.rate * (1 + INCREASE_PER_SECOND * elapsed)
            self.bucket.set_rate(min(self.limit, grown))

    def throttled_by_provider(self, retry_after: float | None) -> None:
        now = self.clock.now()
        self.throttled += 1
        self._forget_before(now)
        taken = sum(n for _, n in self._accepted)
        if taken and self._first_accepted is not None:
            span = (now - self._first_accepted).total_seconds()
            span = min(WINDOW_SECONDS, max(1.0, span))
            target = min(self.bucket.rate, taken / span) * HEADROOM
        else:
            target = self.bucket.rate * DECREASE
        self.bucket.set_rate(max(FLOOR, min(self.limit, target)))
        self._last_change = now
        if retry_after:
            self.bucket.pause(retry_after)

    def _forget_before(self, now: datetime) -> None:
        while self._accepted and (now - self._accepted[0][0]).total_seconds() > WINDOW_SECONDS:
            self._accepted.popleft()
