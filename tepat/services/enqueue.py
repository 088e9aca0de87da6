"""Put planned messages on their category's delay queue, batched per due second."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from tepat.clock import Clock
from tepat.domain.batches import batch_messages
from tepat.domain.categories import Categories
from tepat.domain.models import Message, MessageStatus
from tepat.ports.broker import Broker


class Enqueuer:
    def __init__(self, broker: Broker, categories: Categories, clock: Clock) -> None:
        self._broker = broker
        self._categories = categories
        self._clock = clock

    async def enqueue(self, messages: Iterable[Message], due: datetime | None = None) -> int:
        """Publish batches for the pending ``messages``; returns how many batches.

        ``due`` overrides each message's own instant: a retry, deferral or
        re-drive goes out at that instant while the stored ``scheduled_at``
        keeps the original one (lateness and the missed window count from it).
        """
        now = self._clock.now()
        if due is not None:
            messages = [
                replace(m, status=MessageStatus.PENDING, scheduled_at=due) for m in messages
            ]
        batches = batch_messages(messages, self._categories)
        for batch in batches:
            delay = max(0.0, (batch.due - now).total_seconds())
            await self._broker.publish(batch.queue, batch.encode(), delay)
        return len(batches)
