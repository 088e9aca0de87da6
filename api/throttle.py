"""Brute-force throttling of secrets typed at the API: wrong ``X-API-Key`` values and
failed dashboard logins, counted per client IP over a sliding minute.

Past the limit, every key attempt from that IP (a right one included, so the answer
tells a guesser nothing) gets 429 with ``Retry-After`` until its oldest failure is a
minute old. The counts live in this process: each API process throttles on its own,
which bounds a guesser at ``limit`` tries a minute per process.
"""

from __future__ import annotations

import math
from collections import deque

from tepat.clock import Clock

WINDOW_SECONDS = 60.0
# Past this many client IPs the idle ones are forgotten first: a flood of addresses
# cannot grow the table without bound.
MAX_CLIENTS = 10_000


class FailureThrottle:
    def __init__(self, limit: int, clock: Clock) -> None:
        self._limit = limit
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Whole seconds ``client`` must wait before its next try, or None if it may try."""
        failures = self._recent(client)
        if failures is None or len(failures) < self._limit:
            return None
        return max(1, math.ceil(failures[0] + WINDOW_SECONDS - self._now()))

    def failed(self, client: str) -> None:
        failures = self._recent(client)
        if failures is None:
            if len(self._failures) >= MAX_CLIENTS:
                self._forget_idle()
            failures = self._failures[client] = deque(maxlen=self._limit)
        failures.append(self._now())

    def _recent(self, client: str) -> deque[float] | None:
        failures = self._failures.get(client)
        if failures is None:
            return None
        horizon = self._now() - WINDOW_SECONDS
        while failures and failures[0] <= horizon:
            failures.popleft()
        return failures

    def _forget_idle(self) -> None:
        horizon = self._now() - WINDOW_SECONDS
        for client in [c for c, f in self._failures.items() if not f or f[-1] <= horizon]:
            del self._failures[client]
        while len(self._failures) >= MAX_CLIENTS:  # all busy: the longest-known goes
            del self._failures[next(iter(self._failures))]

    def _now(self) -> float:
        return self._clock.now().timestamp()


def client_ip(scope_client: tuple[str, int] | list[object] | None) -> str:
    """The ASGI scope's client address (``None`` on some test transports)."""
    if not scope_client:
        return "unknown"
    return str(scope_client[0])
