"""When to try a failed send again: full-jitter exponential backoff, bounded.

See "Exponential Backoff And Jitter" (AWS architecture blog): full jitter
spreads retries of a burst evenly instead of in synchronized waves.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class ProviderTerms:
    """What a provider asks of the retries of what it refused for the moment: back off
    from at least ``base_seconds``, and stop once the message is ``max_age`` past due
    (FCM: 10 s and an hour)."""

    base_seconds: float
    max_age: timedelta


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_seconds: float = 1.0
    cap_seconds: float = 300.0
    max_attempts: int = 10
    max_age: timedelta = timedelta(hours=1)

    def delay(
        self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before attempt number ``attempt + 1`` (``attempt`` >= 1)."""
        # The exponent is bounded: 2**1023 and beyond overflow a float.
        ceiling = min(self.cap_seconds, self.base_seconds * 2.0 ** min(max(0, attempt - 1), 64))
        jitter = (rng or random).uniform(0, ceiling)
        return max(jitter, retry_after or 0.0)

    def under(self, terms: ProviderTerms | None) -> RetryPolicy:
        """This policy held to a provider's ``terms``: the slower backoff, the shorter age."""
        if terms is None:
            return self
        base = max(self.base_seconds, terms.base_seconds)
        return replace(self, base_seconds=base, max_age=min(self.max_age, terms.max_age))

    def gives_up(self, attempts: int, first_due: datetime, now: datetime) -> bool:
        return attempts >= self.max_attempts or now - first_due > self.max_age
