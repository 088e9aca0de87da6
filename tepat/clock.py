"""One injectable source of time for every component.

Production uses :class:`SystemClock`; tests use :class:`FakeClock` and move time
forward explicitly, so no test ever sleeps to let time pass.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return once ``now() >= when``."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        delay = (when - self.now()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when a test calls :meth:`advance` or :meth:`set`.

    Sleepers are woken in deadline order when time reaches their deadline.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2027, 1, 1, tzinfo=UTC)
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, when: datetime) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._seq), fut))
        await fut

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + timedelta(seconds=seconds))

    def set(self, when: datetime) -> None:
        if when < self._now:
            raise ValueError("a FakeClock never moves backwards")
        self._now = when
        while self._sleepers and self._sleepers[0][0] <= when:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    def advance(self, delta: timedelta | float) -> None:
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        self.set(self._now + step)

    @property
    def sleepers(self) -> int:
        """How many tasks are waiting on this clock (lets tests wait for quiescence)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def sleeping_until(self, when: datetime) -> int:
        """How many tasks wait for exactly ``when`` (lets a test see that a task got that far)."""
        return sum(1 for at, _, f in self._sleepers if at == when and not f.done())
