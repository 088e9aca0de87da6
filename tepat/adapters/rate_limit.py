"""A token bucket on the injectable clock: stay under a provider's rate instead of provoking 429s.

Tokens refill continuously at ``rate`` per second up to ``capacity``. Two ways to take them:

* :meth:`TokenBucket.acquire` (senders) *reserves* ``n`` tokens at once, even into debt, and
  then sleeps on the clock until the debt is repaid. Reservations are served in call order, so
  concurrent senders queue fairly without polling, and a request bigger than the bucket (100
  notifications through a 10/s bucket) still goes, just later. A sender that wakes checks
  again whether its tokens are there: a rate lowered or a :meth:`TokenBucket.pause` made while
  it slept (a provider's 429) applies to the reservations already waiting, not only to the
  next ones, so senders queued at the old rate do not all go at the old pace into more 429s.
  A sender that wakes late (a busy event loop) does not pass its lateness on as credit to the
  next one: a provider's bucket does not keep it either, so two requests must not reach it
  closer together than their cost allows.
* :meth:`TokenBucket.try_acquire` (the sandbox's server side) never waits: it takes the tokens
  or says how long until it could.

A *critical reserve* (``critical_reserve``, ``TEPAT_CRITICAL_RESERVE``) keeps a share of the
rate for the messages :func:`~tepat.domain.queues.may_use_critical_reserve` names: every
other token passes first through a second bucket at ``(1 - critical_reserve) * rate``, then
through this one like the rest. So other traffic never gets more than its share however
much of it waits, critical traffic finds the rest free at once, and everything together
stays under the rate. The second bucket follows this one's rate (a share, an adaptive
decrease) and its pauses. A per-(app, provider account) bucket is the same class put in
front, with its own reserve.

Time comes only from the clock, so tests drive the bucket with ``FakeClock`` and never sleep.
"""

from __future__ import annotations

import threading
from datetime import datetime

from tepat.clock import Clock
from tepat.metrics import count_reserve_used


class TokenBucket:
    def __init__(
        self,
        rate: float,
        clock: Clock,
        capacity: float | None = None,
        *,
        critical_reserve: float = 0.0,
        provider: str = "",  # the label of its reserve's use in the metrics
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        if capacity is not None and capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity!r}")
        if not 0 <= critical_reserve < 1:
            raise ValueError(f"critical_reserve must be in [0, 1), got {critical_reserve!r}")
        self.rate = self._configured = float(rate)
        self.capacity = float(capacity if capacity is not None else rate)
        self._burst = self.capacity
        self.clock = clock
        self._tokens = self.capacity
        self._updated: datetime = clock.now()
        # Every token ever reserved, and those reserved by acquire() calls still waiting for
        # them. A reservation is served once the tokens handed out (reserved + available)
        # reach its mark, whatever the rate did meanwhile.
        self._reserved = 0.0
        self._waiting = 0.0
        # The sandbox is called from a server thread and from tests at once.
        self._lock = threading.Lock()
        self.critical_reserve = critical_reserve
        self.provider = provider
        # What every token without a claim on the critical reserve passes first.
        rest = 1 - critical_reserve
        self._others = (
            TokenBucket(rate * rest, clock, self.capacity * rest) if critical_reserve else None
        )

    def _refill(self) -> None:
        now = self.clock.now()
        elapsed = (now - self._updated).total_seconds()
        if elapsed > 0:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)
            self._updated = now

    def set_rate(self, rate: float) -> None:
        """Change the refill rate from now on (tokens earned so far are kept)."""
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        with self._lock:
            self._refill()
            self.rate = float(rate)
            # A burst is never more than one second's worth at the new rate.
            self.capacity = min(self._burst, self.rate)
            self._tokens = min(self._tokens, self.capacity)
        if self._others is not None:
            self._others.set_rate(self.rate * (1 - self.critical_reserve))

    def set_share(self, share: float) -> None:
        """This process's part of the configured rate when several consumer processes send
        for one account or relay (``consumers/rate_share.py``)."""
        self.set_rate(self._configured * min(1.0, max(share, 1e-3)))

    def pause(self, seconds: float) -> None:
        """Hand out nothing for ``seconds`` (a provider's Retry-After): a reservation of a
        full bucket made now waits that long (not that long *plus* its own cost), and the
        reservations already waiting go after the pause, one after the other at the rate
        (the tokens they reserved before are owed again from the end of the pause)."""
        with self._lock:
            self._refill()
            self._tokens = min(self._tokens, self.capacity - seconds * self.rate - self._waiting)
        if self._others is not None:
            self._others.pause(seconds)

    @property
    def available(self) -> float:
        """Tokens available now (negative while a reservation's debt is being repaid)."""
        with self._lock:
            self._refill()
            return self._tokens

    def reserve(self, n: float = 1.0) -> float:
        """Take ``n`` tokens now, into debt if needed; return seconds to wait before using them."""
        with self._lock:
            self._take(n)
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def _take(self, n: float) -> float:
        """Reserve ``n`` tokens (the caller holds the lock); the mark they are served at."""
        if n < 0:
            raise ValueError(f"cannot reserve a negative number of tokens ({n!r})")
        self._refill()
        self._tokens -= n
        self._reserved += n
        return self._reserved

    async def acquire(self, n: float = 1.0, critical: float = 0) -> float:
        """Wait on the clock until ``n`` tokens are ours, ``critical`` of them allowed into
        the critical reserve; return how long that took (seconds)."""
        started = self.clock.now()
        await self.pass_share(n, critical)
        await self.acquire_ceiling(n)
        return (self.clock.now() - started).total_seconds()

    async def pass_share(self, n: float, critical: float = 0) -> None:
        """The first half of :meth:`acquire`: wait until the ``n - critical`` tokens without
        a claim on the critical reserve fit in the rest of the rate. A sender that holds a
        connection while it waits for :meth:`acquire_ceiling` waits here before taking one,
        so that other traffic held at its share does not keep the connections from
        critical traffic."""
        others = self._others
        if others is not None and critical < n:
            await others.acquire(n - critical)
        elif others is not None and critical and others._waiting:
            # Other traffic is held at its share: these tokens are the reserve's.
            count_reserve_used(self.provider, critical)

    async def acquire_ceiling(self, n: float) -> None:
        """The second half of :meth:`acquire`: ``n`` tokens of the whole rate, in call order."""
        with self._lock:
            mark = self._take(n)
            self._waiting += n
        try:
            while (delay := self._until(mark)) > 0:
                await self.clock.sleep(delay)
        finally:
            with self._lock:
                self._waiting -= n
        with self._lock:
            self._refill()
            # A sender that woke late does not hand its lateness on as credit: the
            # provider's bucket, full when this request reaches it, kept no more than a
            # bucket either, so the next request is owed its own cost from now.
            most = mark - n + max(self.capacity, n)
            self._tokens = min(self._tokens, most - self._reserved)

    def _until(self, mark: float) -> float:
        """Seconds until the tokens handed out reach ``mark`` at the current rate (0: now)."""
        with self._lock:
            self._refill()
            delay = (mark - (self._reserved + self._tokens)) / self.rate
        # Under the clock's resolution (1 us) is now: a sleep cannot be shorter.
        return delay if delay >= 1e-6 else 0.0

    def try_acquire(self, n: float = 1.0) -> float:
        """Take ``n`` tokens if available and return 0.0; otherwise take nothing and return the
        seconds until they would be.

        A request larger than the whole bucket is let through once the bucket is full (leaving
        it in debt), otherwise it could never pass at all.
        """
        if n < 0:
            raise ValueError(f"cannot take a negative number of tokens ({n!r})")
        with self._lock:
            self._refill()
            needed = min(n, self.capacity)
            if self._tokens >= needed:
                self._tokens -= n
                return 0.0
            return (needed - self._tokens) / self.rate
