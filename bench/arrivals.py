"""What the sandbox accepted, per request and per second, from its own log of arrivals.

The sandbox stamps every notification it accepts with the instant it took the request
(``received_at``; one stamp for every notification of one request), so its log is its
own per-second count of accepted notifications: the figures below never use the
client's view of when it sent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Arrivals:
    """Accepted notifications grouped by the instant the sandbox took their request."""

    stamps: list[tuple[float, int]]  # (epoch seconds, notifications), oldest first

    @classmethod
    def of(cls, received: Sequence[dict[str, Any]]) -> Arrivals:
        per_stamp: Counter[float] = Counter()
        for r in received:
            if r.get("status") == "ok":
                per_stamp[datetime.fromisoformat(str(r["received_at"])).timestamp()] += 1
        return cls(sorted(per_stamp.items()))

    @property
    def total(self) -> int:
        return sum(n for _, n in self.stamps)

    def per_second(self) -> dict[int, int]:
        """Accepted notifications per whole UTC second (the sandbox's clock)."""
        out: Counter[int] = Counter()
        for at, n in self.stamps:
            out[int(at)] += n
        return dict(sorted(out.items()))

    def max_in_window(self, seconds: float = 1.0) -> int:
        """The most accepted in any half-open window ``[t, t + seconds)``: the worst
        second wherever it starts, not only on whole-second boundaries."""
        best = total = 0
        lo = 0
        for hi in range(len(self.stamps)):
            total += self.stamps[hi][1]
            while self.stamps[hi][0] - self.stamps[lo][0] >= seconds:
                total -= self.stamps[lo][1]
                lo += 1
            best = max(best, total)
        return best

    def refused_by_bucket(self, rate: float, capacity: float) -> int:
        """How many of these requests a provider enforcing ``rate`` with a token bucket of
        ``capacity`` (full at the start) would have refused, had they come as they came.
        The same rule as the sandbox's own limit (``TokenBucket.try_acquire``)."""
        tokens, last, refused = capacity, None, 0
        for at, n in self.stamps:
            if last is not None:
                tokens = min(capacity, tokens + (at - last) * rate)
            last = at
            if tokens >= min(n, capacity):
                tokens -= n
            else:
                refused += 1
        return refused

    def steady_rate(self) -> float | None:
        """Mean accepted per second over the whole seconds strictly inside the run (the
        first and last seconds are partial), or None when the run is under 3 s long."""
        counts = list(self.per_second().items())
        if len(counts) < 3:
            return None
        inner = counts[1:-1]
        span = inner[-1][0] - inner[0][0] + 1
        return sum(n for _, n in inner) / span
