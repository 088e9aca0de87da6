"""Put messages on their category's delay queue, batched per due second.

The outbox (``tepat/services/outbox.py``) is the one path in production code;
``enqueue`` stays for tests and benchmarks that seed a broker directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from tepat import tracing
from tepat.clock import Clock
from tepat.domain.batches import Batch, batch_messages
from tepat.domain.categories import Categories
from tepat.domain.models import Message, MessageStatus
from tepat.ports.broker import Broker

# Publishes in flight at once: lets a networked broker pipeline its receipts
# without flooding it (ActiveMQ took 600-1,200 batches/s here either way).
PUBLISH_CONCURRENCY = 16


class Enqueuer:
    def __init__(self, broker: Broker, categories: Categories, clock: Clock) -> None:
        self._broker = broker
        self.categories = categories
        self.clock = clock

    async def enqueue(self, messages: Iterable[Message], due: datetime | None = None) -> int:
        """Publish batches for the pending ``messages``; returns how many batches.
        ``due`` overrides each message's own instant."""
        if due is not None:
            messages = [
                replace(m, status=MessageStatus.PENDING, scheduled_at=due) for m in messages
            ]
        return await self.publish(batch_messages(messages, self.categories))

    async def publish(
        self, batches: list[Batch], trace_parents: Mapping[str, str | None] | None = None
    ) -> int:
        """Publish ``batches``; ``trace_parents`` (message id to its ``trace_parent``) puts
        each in a span of its messages' traces, carried in the broker headers."""
        now = self.clock.now()
        slots = asyncio.Semaphore(PUBLISH_CONCURRENCY)

        async def one(batch: Batch) -> None:
            traces = [t for i in batch.ids if (t := (trace_parents or {}).get(i))]
            async with slots:
                delay = max(0.0, (batch.due - now).total_seconds())
                # The first message's trace holds the span; the others link to it.
                parent, links = (traces[0], traces[1:]) if traces else (None, [])
                with tracing.span(
                    "outbox publish", parent, links, queue=batch.queue, messages=len(batch.ids)
                ):
                    await self._broker.publish(batch.queue, batch.encode(), delay)

        await asyncio.gather(*(one(b) for b in batches))
        return len(batches)
