"""A send rate that finds what the provider really accepts, under a configured ceiling.

``TEPAT_EXPO_RATE_LIMIT`` is a ceiling, not a promise: an Expo project may be
allowed less, and several consumer processes share one project. Throwing the
configured rate at a provider that accepts a sixth of it only collects 429s.

- A 429 starts an *episode*: the rate drops to what the provider was seen to
  accept (a little under it), and that figure is remembered as the *known
  good* rate. Sending pauses for the provider's ``Retry-After``; the requests
  already waiting for tokens wait out the pause too and then go at the new
  rate (see :meth:`TokenBucket.pause`).
- One decrease per episode, not one per refused request: the requests that
  were already on their way when the rate came down (several are in flight at
  once) come back 429 together; they only pause. The sender says when each
  refused request left (``sent_at``), so a request sent before the last
  decrease is part of that episode.
- "What the provider accepts" is measured from the accepted requests since
  the last pause ended, over at most ``WINDOW_SECONDS``, up to the moment the
  refused request left: notifications accepted / time, the time never under a
  second (the provider's bucket holds about a second, so a shorter span says
  nothing about its rate). Seconds spent paused are not counted as seconds in
  which the provider accepted nothing.
- A 429 although the provider took what was sent at the current rate (measured at
  least ``PACE_KEPT`` of it) is not about the rate: requests that left on time reached
  it bunched (a busy event loop or network held some back, then let them go together)
  and found its bucket empty. It only pauses; lowering the rate a little on each such
  refusal compounded (600 -> 546/s after three) and held there for a minute. It still
  ends the episode: the requests refused with it are part of it, and a storm's halving
  waits ``DECREASE_GAP_SECONDS`` after it. A provider that really takes less is seen
  taking less than the rate by the next refusal, which lowers it.
- A 429 with nothing accepted to measure (a storm, or another sender using up
  the budget) halves the rate, at most once per ``DECREASE_GAP_SECONDS``. The
  rate never goes under ``FLOOR_SHARE`` of the ceiling, so a storm cannot
  leave the sender crawling for longer than the storm itself.
- While requests are accepted, the rate climbs back fast (x1.5 per second) up
  to the known good rate. Above it, it holds for ``HOLD_SECONDS`` after the
  last refusal (a rate just refused is not worth trying again at once: every
  probe past the limit costs a 429 and a pause), then creeps up slowly (0.2 %
  per second) to find whether the provider now takes more.
- A measurement over less than a second in which less was accepted than the
  refused request asked for (the first second of sending: a batch of 12
  accepted, then 100 refused 0.07 s later) says nothing about the provider's
  rate ("12/s"): it counts as nothing accepted, so the rate halves instead.
- It never exceeds ``ceiling * share``: ``share`` is this process's part of the
  ceiling (``1 / live consumers``, see ``consumers/rate_share.py``).
- Requests hold at most ``REQUEST_SECONDS`` of the rate (:meth:`request_size`):
  at 100/s, 50 notifications, not Expo's 100. The provider lets about a second
  of its rate through at once; a request of a whole second must find its bucket
  full, so it must reach the provider a full second after the previous one, and
  a request delayed on the way followed by one that is not (a busy event loop, a
  slow connection) is refused. Half-second requests leave half a second of
  slack. At 200/s and more (Expo's 600/s, or two consumers sharing it) nothing
  changes: requests stay at 100.

Every unit is notifications per second, as Expo counts them (up to 100 per
request), the same unit as the token bucket and the sandbox's limit.

Written by hand because the usual libraries (aiolimiter, pyrate-limiter) give
fixed rates; the adaptive part is the point here, and it is small.
"""

from __future__ import annotations

import logging
from collections import deque
from datetime import datetime, timedelta

from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock

log = logging.getLogger(__name__)

# The figures the module's docstring names. KEEP_SECONDS: how long accepted sends are
# remembered, since a refused request's answer can come back late (up to the client's
# timeout), and it is measured from when it left.
WINDOW_SECONDS = 3.0
KEEP_SECONDS = 30.0
MIN_SPAN_SECONDS = 1.0
PROBE_PER_SECOND = 0.002
HOLD_SECONDS = 60.0
RECOVER_PER_SECOND = 1.5
RECOVER_HORIZON_S = 60.0  # see accepted(): 1.5**elapsed overflows after a long quiet spell
DECREASE = 0.5
DECREASE_GAP_SECONDS = 2.0
HEADROOM = 0.97
PACE_KEPT = 0.99
FLOOR_SHARE = 0.05
REQUEST_SECONDS = 0.5


class AdaptiveRate:
    def __init__(self, bucket: TokenBucket, ceiling: float, clock: Clock) -> None:
        self.bucket = bucket
        self.ceiling = float(ceiling)
        self.share = 1.0
        self.clock = clock
        # (when the request left, notifications) of accepted requests, oldest first.
        self._accepted: deque[tuple[datetime, int]] = deque()
        self._paused_until: datetime | None = None
        self._last_change = clock.now()
        self._last_decrease: datetime | None = None
        self._last_refusal: datetime | None = None
        self.known_good: float | None = None
        self.throttled = 0  # refused requests
        self.episodes = 0  # decreases

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

    def request_size(self, most: int) -> int:
        """Notifications per request at the current rate: ``most`` (the provider's own
        limit) or fewer, so that a request is at most ``REQUEST_SECONDS`` of the rate."""
        return max(1, min(most, int(self.bucket.rate * REQUEST_SECONDS)))

    def accepted(self, n: int, sent_at: datetime | None = None) -> None:
        """``n`` notifications accepted in a request that left at ``sent_at`` (default now)."""
        now = self.clock.now()
        self._accepted.append((sent_at or now, n))
        self._forget_before(now - timedelta(seconds=KEEP_SECONDS))
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
        elif self._holding(now):
            return
        else:
            grown = rate * (1 + PROBE_PER_SECOND * elapsed)
        self.bucket.set_rate(min(self.limit, grown))

    def throttled_by_provider(
        self, retry_after: float | None, sent_at: datetime | None = None, n: int | None = None
    ) -> None:
        """The provider answered 429 to a request of ``n`` notifications that left at
        ``sent_at`` (default now)."""
        now = self.clock.now()
        sent = sent_at or now
        self.throttled += 1
        self._last_refusal = now
        self._last_change = now
        if self._last_decrease is None or sent >= self._last_decrease:
            self._decrease(now, sent, n)
        if retry_after:
            self.bucket.pause(retry_after)
            until = now + timedelta(seconds=retry_after)
            self._paused_until = max(until, self._paused_until or until)

    def _decrease(self, now: datetime, sent: datetime, refused: int | None) -> None:
        before = self.bucket.rate
        measured = self._measured(sent, refused)
        if measured is not None and measured >= before * PACE_KEPT:
            self._last_decrease = now
            log.info(
                "provider refused a request (429) while taking %.1f/s of %.1f: rate kept",
                measured,
                before,
            )
            return
        if measured is not None:
            target = min(before, measured) * HEADROOM
            self.known_good = target
        elif self._last_decrease is None or (
            (now - self._last_decrease).total_seconds() >= DECREASE_GAP_SECONDS
        ):
            target = before * DECREASE
        else:
            return
        self.bucket.set_rate(max(self.floor, min(self.limit, target)))
        self._last_decrease = now
        self.episodes += 1
        log.info(
            "provider refused a request (429): rate %.1f -> %.1f notifications/s (%s)",
            before,
            self.bucket.rate,
            f"accepted {measured:.1f}/s" if measured is not None else "nothing accepted to measure",
        )

    def _measured(self, end: datetime, refused: int | None) -> float | None:
        """Notifications/s accepted in requests that left since the last pause ended (at
        most ``WINDOW_SECONDS`` back) and before ``end``; None when there were none, or
        when under a second's burst was smaller than the ``refused`` request."""
        start = end - timedelta(seconds=WINDOW_SECONDS)
        if self._paused_until is not None:
            start = max(start, self._paused_until)
        sent = [(at, n) for at, n in self._accepted if start <= at < end]
        if not sent:
            return None
        taken = sum(n for _, n in sent)
        span = (end - min(at for at, _ in sent)).total_seconds()
        if span < MIN_SPAN_SECONDS and refused is not None and taken < refused:
            return None
        return taken / max(MIN_SPAN_SECONDS, span)

    def _holding(self, now: datetime) -> bool:
        return (
            self._last_refusal is not None
            and (now - self._last_refusal).total_seconds() < HOLD_SECONDS
        )

    def _forget_before(self, when: datetime) -> None:
        while self._accepted and self._accepted[0][0] < when:
            self._accepted.popleft()
