"""The sweeper: re-drive what the broker lost or a crashed consumer left behind.

The store is the source of truth. A message the outbox published that is
still ``pending`` well past its ``due_at`` was lost in transit; one still
``sending`` past the lease belongs to a consumer that died. Both go back onto
the outbox, due now; the consumer's checks then send them or close them as
``missed``. (A message that was never published needs no sweeper: its outbox
mark stays until the publisher's next pass.)

Where one process owns the store (the embedded broker), the next start needs no
lease: whatever is still ``sending`` was the previous process's, so
:meth:`Sweeper.redrive_left_sending` re-drives it at once by the same rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.models import Message, MessageStatus
from tepat.ports.repositories.messages import MessageRepository, StatusChange
from tepat.ports.repositories.outbox import OutboxRepository
from tepat.services.outbox import Outbox
from tepat.services.sending.lease import DEFAULT_LEASE

log = structlog.get_logger("tepat.sweeper")


class SweepRecords(MessageRepository, OutboxRepository, Protocol): ...


@dataclass(eq=False)
class Sweeper:
    store: SweepRecords
    outbox: Outbox
    clock: Clock
    # How late a published batch may be before it counts as lost (ActiveMQ's
    # scheduler fires up to seconds late under load; the broker's own nack
    # backoff can hold a batch for a while).
    grace: timedelta = timedelta(minutes=2)
    lease: timedelta = DEFAULT_LEASE
    batch: int = 1000

    async def sweep_once(self) -> int:
        now = self.clock.now()
        lost = await self.store.due_pending(before=now - self.grace, limit=self.batch)
        redriven = await self.store.republish([m.id for m in lost], due_at=now) if lost else 0
        stuck = await self.store.stuck_sending(claimed_before=now - self.lease, limit=self.batch)
        if stuck:
            redriven += await self._redrive_sending(stuck, "lease_expired", now)
        if redriven:
            log.warning("re-driving messages", count=redriven)
            await self.outbox.flush()
        return redriven

    async def redrive_left_sending(self) -> int:
        """Re-drive every message still ``sending``, however recent its claim; returns how
        many. Only for the start of the one process that can own the store, before it
        consumes: then they are the previous process's, and it is gone. They go onto the
        outbox marked; the caller publishes them (``Runtime.recover_at_start``)."""
        now = self.clock.now()
        redriven = 0
        # Claims up to a lease ahead of this clock too: the previous process's may have
        # run ahead of this one's (a clock step back between the two).
        while stuck := await self.store.stuck_sending(
            claimed_before=now + self.lease, limit=self.batch
        ):
            moved = await self._redrive_sending(stuck, "restart", now)
            if not moved:
                break
            redriven += moved
        if redriven:
            log.warning(
                "re-driving messages the previous process left sending, at once",
                count=redriven,
                why="this process alone owns the store (embedded broker), so no live consumer"
                " holds them; they may have reached the provider (the duplicate window)",
            )
        return redriven

    async def _redrive_sending(
        self,
        stuck: Sequence[Message],
        cause: Literal["lease_expired", "restart"],
        now: datetime,
    ) -> int:
        """Back to ``pending``, due now, on the outbox; counted as possible duplicates."""
        error = "consumer lease expired" if cause == "lease_expired" else "restarted while sending"
        changes = [
            StatusChange(m.id, MessageStatus.PENDING, last_error=error, due_at=now) for m in stuck
        ]
        moved = await self.store.transition_many(changes, now, expect=[MessageStatus.SENDING])
        metrics.count_sending_redriven(cause, moved)
        return moved
