"""The Broker port: delay queues that carry timing, not truth.

The broker holds batches of message ids, each delivered at (or slightly
after) its due instant. Delivery is at least once: a batch that was not acked
comes back, and the consumer's atomic claim in the store makes a repeat harmless.
Shaped after dramatiq's broker interface: a small surface, real adapters
(embedded, ActiveMQ) and one contract suite (``tests/contract/test_broker_contract.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Delivery:
    """One broker message handed to a consumer; ack or nack it exactly once."""

    queue: str
    body: bytes
    delivery_id: str
    redelivered: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    ready: int  # due, waiting for a consumer
    scheduled: int  # not yet due
    in_flight: int  # delivered, not yet acked
    dead_letters: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    id: str
    queue: str  # the queue it died on
    body: bytes
    reason: str
    attempts: int


class Broker(Protocol):
    async def connect(self) -> None: ...

    async def close(self) -> None:
        """Stop consuming; anything delivered and not acked will be redelivered."""
        ...

    async def ping(self) -> None:
        """Raise if the broker cannot be reached."""
        ...

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        """Persist ``body`` on ``queue``, deliverable after ``delay_seconds``."""
        ...

    def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AbstractAsyncContextManager[AsyncIterator[Delivery]]:
        """Deliveries from ``queues`` with at most ``prefetch`` unacked at once.

        Leaving the context (or the task being cancelled) returns every unacked
        delivery to its queue for redelivery.
        """
        ...

    async def ack(self, delivery: Delivery) -> None: ...

    async def nack(self, delivery: Delivery, reason: str) -> None:
        """Hand the delivery back; past the redelivery limit it goes to the queue's DLQ."""
        ...

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]: ...

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]: ...

    async def replay_dead_letter(self, dead_letter_id: str) -> bool:
        """Move one dead letter back to its queue, due now; False if unknown."""
        ...
