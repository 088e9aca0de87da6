"""The Broker port: delay queues that carry timing, not truth.

Batches of message ids, each delivered at (or slightly after) its due instant, at least
once: a batch not acked comes back, and the consumer's atomic claim makes a repeat
harmless.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol


class BrokerClosed(ConnectionError):
    """The broker adapter was closed; call ``connect()`` again to use it."""


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


@dataclass(frozen=True, slots=True)
class RedeliveryPolicy:
    """When a nacked delivery comes back, and when it is dead-lettered instead.

    The ``n``-th nack hands the message back after ``base * 2**(n-1)`` seconds, capped,
    within ``±jitter`` so batches nacked together by one outage do not all return at
    once. A nack dead-letters only once the message has been failing for ``retry_age``
    since its first nack: a store outage shorter than that only delays the batches in
    flight, while a poison batch still reaches the DLQ.
    """

    base_seconds: float = 1.0
    cap_seconds: float = 60.0
    retry_age: timedelta = timedelta(minutes=15)
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.base_seconds <= self.cap_seconds:
            raise ValueError("redelivery needs 0 < base_seconds <= cap_seconds")
        if self.retry_age <= timedelta(0):
            raise ValueError("retry_age must be positive")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def bounds(self, nacks: int) -> tuple[float, float]:
        """The shortest and longest delay after the ``nacks``-th nack (1 for the first)."""
        nominal = min(self.cap_seconds, self.base_seconds * 2 ** min(max(nacks, 1) - 1, 32))
        return nominal * (1 - self.jitter), min(self.cap_seconds, nominal * (1 + self.jitter))

    def delay(self, nacks: int) -> float:
        """Seconds until the message comes back after its ``nacks``-th nack."""
        return random.uniform(*self.bounds(nacks))

    def dead(self, first_failure: datetime, now: datetime) -> bool:
        """Whether a nack at ``now`` dead-letters a message failing since ``first_failure``."""
        return now - first_failure >= self.retry_age


class Broker(Protocol):
    async def connect(self) -> None: ...

    async def close(self) -> None:
        """Stop consuming; anything delivered and not acked will be redelivered."""

    async def ping(self) -> None:
        """Raise if the broker cannot be reached."""

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        """Persist ``body`` on ``queue``, deliverable after ``delay_seconds``."""

    def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AbstractAsyncContextManager[AsyncIterator[Delivery]]:
        """Deliveries from ``queues`` with at most ``prefetch`` unacked at once; leaving
        the context returns every unacked delivery to its queue for redelivery."""

    async def ack(self, delivery: Delivery) -> None: ...

    async def nack(self, delivery: Delivery, reason: str) -> None:
        """Hand the delivery back, due again after the :class:`RedeliveryPolicy` delay (to
        the queue's DLQ, with ``reason``, once it has been failing for the retry age)."""

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]: ...

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]: ...

    async def replay_dead_letter(self, dead_letter_id: str) -> bool:
        """Move one dead letter back to its queue, due now; False if unknown."""
