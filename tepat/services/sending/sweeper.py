"""The sweeper: re-drive what the broker lost or a crashed consumer left behind.

The store is the source of truth. A message the outbox published that is
still ``pending`` well past its ``due_at`` was lost in transit; one still
``sending`` past the lease belongs to a consumer that died. Both go back onto
the outbox, due now; the consumer's checks then send them or close them as
``missed``. (A message that was never published needs no sweeper: its outbox
mark stays until the publisher's next pass.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

import structlog

from tepat.clock import Clock
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import MessageRepository, StatusChange
from tepat.ports.repositories.outbox import OutboxRepository
from tepat.services.outbox import Outbox

log = structlog.get_logger("tepat.sweeper")


class SweepRecords(MessageRepository, OutboxRepository, Protocol):
    """The messages swept and the outbox they go back onto."""


class Sweeper:
    def __init__(
        self,
        store: SweepRecords,
        outbox: Outbox,
        clock: Clock,
        grace: timedelta = timedelta(minutes=2),
        lease: timedelta = timedelta(minutes=5),
        batch: int = 1000,
    ) -> None:
        self._store = store
        self._outbox = outbox
        self._clock = clock
        # How late a published batch may be before it counts as lost (ActiveMQ's
        # scheduler fires up to seconds late under load; the broker's own nack
        # backoff can hold a batch for a while).
        self.grace = grace
        self.lease = lease
        self._batch = batch

    async def sweep_once(self) -> int:
        now = self._clock.now()
        lost = await self._store.due_pending(before=now - self.grace, limit=self._batch)
        redriven = await self._store.republish([m.id for m in lost], due_at=now) if lost else 0
        stuck = await self._store.stuck_sending(claimed_before=now - self.lease, limit=self._batch)
        if stuck:
            changes = [
                StatusChange(
                    m.id, MessageStatus.PENDING, last_error="consumer lease expired", due_at=now
                )
                for m in stuck
            ]
            redriven += await self._store.transition_many(
                changes, now, expect=[MessageStatus.SENDING]
            )
        if redriven:
            log.warning("re-driving messages", count=redriven)
            await self._outbox.flush()
        return redriven
