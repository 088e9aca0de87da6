"""A send rate that finds what the provider really accepts, under a configured ceiling.

``TEPAT_EXPO_RATE_LIMIT`` is a ceiling, not a promise: an Expo project may be
allowed less, and several consumer processes share one project. Throwing the
configured rate at a provider that accepts a sixth of it only collects 429s.

- On a 429 the rate drops to what the provider was seen to accept over the
  last seconds (a little under it); that figure is remembered as the *known
  good* rate. Sending pauses for the provider's ``Retry-After``.
- A 429 with nothing accepted to measure (a storm) halves the rate once, not
  at every refusal: further 429s within ``DECREASE_GAP_SECONDS`` only pause.
  The rate never goes under ``FLOOR_SHARE`` of the ceiling, so a storm cannot
  leave the sender crawling for longer than the storm itself.
- While requests are accepted, the rate climbs back fast (x1.5 per second) up
  to the known good rate, then creeps up slowly (0.2 % per second) to probe
  for more, so a probe past the provider's limit (one 429) comes about once per
  15 seconds of full-rate sending.
- It never exceeds ``ceiling * share``: ``share`` is this process's part of the
  ceiling (``1 / live consumers``, see ``consumers/rate_share.py``).

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
# Probing above the known good rate: relative increase per second.
PROBE_PER_SECOND = 0.002
# Recovering up to the known good rate: factor per second.
RECOVER_PER_SECOND = 1.5
RECOVER_HORIZON_S = 60.0
# A 429 with nothing accepted to measure from.
DECREASE = 0.5
DECREASE_GAP_SECONDS = 2.0
# Aim this far under the measured rate.
HEADROOM = 0.97
# Never slower than this part of the ceiling (a storm must not outlast itself).
FLOOR_SHARE = 0.05


class AdaptiveRate:
    def __init__(self, bucket: TokenBucket, ceiling: float, clock: Clock) -> None:
        self.bucket = bucket
        self.ceiling = float(ceiling)
        self.share = 1.0
        self.clock = clock
        self._accepted: deque[tuple[datetime, int]] = deque()
        self._first_accepted: datetime | None = None
        self._last_change = clock.now()
        self._last_decrease: datetime | None = None
        self.known_good: float | None = None
        self.throttled = 0

    @property
    def rate(self) -> float:
        return self.bucket.rate

    @property
    def limit(self) -> float:
        return max(self.floor, self.ceiling * self.share)

    @property
    def floor(self) -> float:
        return max(1.0, self.ceiling * self.share * FLOOR_SHARE)

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
        rate = self.bucket.rate
        if rate >= self.limit or elapsed <= 0:
            return
        target = min(self.limit, self.known_good or self.limit)
        if rate < target:
            # The exponent is capped: after a long quiet spell 1.5**elapsed overflows a
            # float, and a minute of recovery already reaches any target.
            grown = min(target, rate * RECOVER_PER_SECOND ** min(elapsed, RECOVER_HORIZON_S))
        else:
            grown = rate * (1 + PROBE_PER_SECOND * elapsed)
        self.bucket.set_rate(min(self.limit, grown))

    def throttled_by_provider(self, retry_after: float | None) -> None:
        now = self.clock.now()
        self.throttled += 1
        self._forget_before(now)
        taken = sum(n for _, n in self._accepted)
        target: float | None = None
        if taken and self._first_accepted is not None:
            span = (now - self._first_accepted).total_seconds()
            span = min(WINDOW_SECONDS, max(1.0, span))
            measured = taken / span
            target = min(self.bucket.rate, measured) * HEADROOM
            self.known_good = target
        elif self._last_decrease is None or (
            (now - self._last_decrease).total_seconds() >= DECREASE_GAP_SECONDS
        ):
            target = self.bucket.rate * DECREASE
        if target is not None:
            self.bucket.set_rate(max(self.floor, min(self.limit, target)))
            self._last_decrease = now
        self._last_change = now
        if retry_after:
            self.bucket.pause(retry_after)

    def _forget_before(self, now: datetime) -> None:
        while self._accepted and (now - self._accepted[0][0]).total_seconds() > WINDOW_SECONDS:
            self._accepted.popleft()
