"""``tepat plan``'s progress line (on a terminal only) and its closing summary."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from tepat.services.planning.creator import PlanResult


class PlanProgress:
    """Counts pages as the creator reports them; redraws one stderr line at most every
    ``interval`` seconds when ``live`` (a terminal), so a pipe or a log file gets none of it."""

    def __init__(
        self,
        stream: TextIO,
        *,
        live: bool,
        interval: float = 0.2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._live = live
        self._interval = interval
        self._monotonic = monotonic
        self._started = monotonic()
        self._drawn_at: float | None = None
        self.users = 0
        self.total = PlanResult()

    def __call__(self, users: int, total: PlanResult) -> None:
        self.users += users
        self.total = total
        if not self._live:
            return
        now = self._monotonic()
        if self._drawn_at is None or now - self._drawn_at >= self._interval:
            self._drawn_at = now
            self._stream.write(
                f"\rplanning: {self.users:,} users done, {total.created:,} messages created,"
                f" {total.existing:,} existing, {self._rate(now):,.0f} created/s\x1b[K"
            )
            self._stream.flush()

    def finish(self) -> str:
        """Clear the progress line; the summary line to print."""
        now = self._monotonic()
        if self._drawn_at is not None:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
        t = self.total
        return (
            f"created {t.created}, existing {t.existing} ({self.users} users in"
            f" {now - self._started:.1f} s, {self._rate(now):,.0f} created/s)"
        )

    def _rate(self, now: float) -> float:
        elapsed = now - self._started
        return self.total.created / elapsed if elapsed > 0 else 0.0
