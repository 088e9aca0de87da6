"""The sweeper: re-drive what the broker lost or a crashed consumer left behind.

The store is the source of truth, so anything still ``pending`` well past its
instant was lost in transit (or never enqueued, if a creator died between
insert and publish), and anything ``sending`` past the lease belongs to a
consumer that died. Both are put back on their queue, due now; the consumer's
checks then send them or close them as ``missed``.
"""

from __future__ import annotations

from datetime import timedelta

import structlog

from tepat.clock import Clock
from tepat.domain.models import MessageStatus
from tepat.ports.store import Store
from tepat.services.enqueue import Enqueuer

log = structlog.get_logger("tepat.sweeper")


class Sweeper:
    def __init__(
        self,
        store: Store,
        enqueuer: Enqueuer,
        clock: Clock,
        grace: timedelta = timedelta(minutes=6),
        lease: timedelta = timedelta(minutes=5),
        batch: int = 1000,
    ) -> None:
        self._store = store
        self._enqueuer = enqueuer
        self._clock = clock
        # Longer than the longest retry backoff, so a message waiting for its
        # retry is not re-driven early.
        self.grace = grace
        self.lease = lease
        self._batch = batch

    async def sweep_once(self) -> int:
        now = self._clock.now()
        redrive = []
        for m in await self._store.due_pending(before=now - self.grace, limit=self._batch):
            if m.claimed_at is not None and m.claimed_at > now - self.grace:
                continue  # released for a retry recently; its retry batch is on the way
            redrive.append(m)
        for m in await self._store.stuck_sending(
            claimed_before=now - self.lease, limit=self._batch
        ):
            if await self._store.transition(
                m.id,
                MessageStatus.PENDING,
                now,
                expect=[MessageStatus.SENDING],
                last_error="consumer lease expired",
            ):
                redrive.append(m)
        if redrive:
            log.warning("re-driving messages", count=len(redrive))
            await self._enqueuer.enqueue(redrive, due=now)
        return len(redrive)
