"""One app's queues on a broker shared with other apps (issue 23).

:class:`NamespacedBroker` wraps any :class:`~tepat.ports.broker.Broker` and puts every
queue name it is given behind a namespace: with ``"app.b."``, ``tepat.meal`` is
``app.b.tepat.meal`` on the broker, and its dead letters are on ``DLQ.app.b.tepat.meal``
(both adapters name a queue's DLQ ``DLQ.<queue>``, ActiveMQ's own dead-letter strategy
too), so another app's consumers, statistics and dead-letter listings never meet them.
What the wrapper returns speaks the names its caller used: ``Delivery.queue``,
``QueueStats.queue`` and ``DeadLetter.queue`` come back without the namespace.

The default app uses the inner broker as it is: its queue names stay today's.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Protocol

from tepat.ports.broker import Broker, DeadLetter, Delivery, QueueStats

# Dot-separated words ending in a dot: safe in a STOMP destination and in a file or
# metric label, never an ActiveMQ wildcard (``*``, ``>``) nor a composite (``,``).
_NAMESPACE = re.compile(r"^(?:[A-Za-z0-9_-]+\.)+$")
# Not a namespace: ``DLQ.x.`` would put an app's queues among another queue's dead letters.
_RESERVED = ("DLQ.", "ActiveMQ.")


class SharedBroker(Broker, Protocol):
    """What the wrapper needs of the broker its app shares (both real adapters have it)."""

    @property
    def lead_seconds(self) -> float:
        """How far ahead of its delay a message is handed over."""

    async def replay_dead_letter(self, dead_letter_id: str, *, queue_prefix: str = "") -> bool:
        """The port's replay, refused (False) for a letter not on a ``queue_prefix`` queue."""


class ForwardingBroker:
    """The base of a broker over another: forwards the lifecycle and the lead to ``inner``."""

    def __init__(self, inner: SharedBroker) -> None:
        self.inner = inner

    @property
    def lead_seconds(self) -> float:
        # read by the doctor's scheduler probe, which publishes net of it
        return self.inner.lead_seconds

    async def connect(self) -> None:
        await self.inner.connect()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        await self.inner.ping()


class NamespacedBroker(ForwardingBroker):
    """The :class:`~tepat.ports.broker.Broker` port on ``inner``, every queue under ``namespace``.

    A delivery is acked or nacked with the inner adapter's own :class:`Delivery` (the
    ActiveMQ adapter's nack re-sends to ``delivery.queue``, which must be the queue on
    the broker): those handed out are kept by ``delivery_id`` until acked, nacked, or
    their ``consume`` context is left, so at most a prefetch per open context. An ack
    or nack of a delivery this wrapper did not hand out (or no longer holds) is ignored,
    as the adapters ignore one for a delivery already handed back: it comes again, and
    another app's delivery is never acked through this one.

    No app's namespace may begin another's (``app.a.`` and ``app.a.b.``): replaying a
    dead letter by id looks on the queues that begin with the namespace. One made of a
    fixed word and the app id (which has no dot), ``app.<id>.``, never does. Headers
    stay as the inner adapter wrote them (ActiveMQ's ``destination`` has the namespace).
    """

    def __init__(self, inner: SharedBroker, namespace: str) -> None:
        if not _NAMESPACE.match(namespace) or namespace.startswith(_RESERVED):
            raise ValueError(
                f"invalid broker namespace {namespace!r}: dot-separated words ending in"
                " '.', not starting with DLQ. or ActiveMQ."
            )
        super().__init__(inner)
        self.namespace = namespace
        # delivery_id -> (the inner adapter's delivery, the ids its consume context holds)
        self._held: dict[str, tuple[Delivery, set[str]]] = {}

    def _name(self, queue: str) -> str:
        return self.namespace + queue

    def _names(self, queues: Sequence[str]) -> list[str]:
        return [self._name(q) for q in queues]

    def _strip(self, name: str) -> str:
        """The caller's name of a queue on the broker; the inner adapter only ever
        answers about the queues it was asked for, so anything else is a defect."""
        if not name.startswith(self.namespace):
            raise RuntimeError(f"queue {name!r} is outside namespace {self.namespace!r}")
        return name.removeprefix(self.namespace)

    # -- producing and consuming -------------------------------------------

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        await self.inner.publish(self._name(queue), body, delay_seconds)

    @asynccontextmanager
    async def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AsyncIterator[AsyncIterator[Delivery]]:
        held: set[str] = set()
        try:
            async with self.inner.consume(self._names(queues), prefetch) as deliveries:
                yield _Deliveries(self, deliveries, held)
        finally:
            # the inner adapter has handed these back; a late ack of one is ignored
            for delivery_id in held:
                self._held.pop(delivery_id, None)

    def _hand_out(self, inner: Delivery, held: set[str]) -> Delivery:
        self._held[inner.delivery_id] = (inner, held)
        held.add(inner.delivery_id)
        return replace(inner, queue=self._strip(inner.queue))

    def _take_back(self, delivery: Delivery) -> Delivery | None:
        entry = self._held.pop(delivery.delivery_id, None)
        if entry is None:
            return None
        inner, held = entry
        held.discard(delivery.delivery_id)
        return inner

    async def ack(self, delivery: Delivery) -> None:
        if (inner := self._take_back(delivery)) is not None:
            await self.inner.ack(inner)

    async def nack(self, delivery: Delivery, reason: str) -> None:
        if (inner := self._take_back(delivery)) is not None:
            await self.inner.nack(inner, reason)

    # -- operations --------------------------------------------------------

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        return [
            replace(s, queue=self._strip(s.queue))
            for s in await self.inner.stats(self._names(queues))
        ]

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]:
        return [
            replace(d, queue=self._strip(d.queue))
            for d in await self.inner.dead_letters(self._names(queues))
        ]

    async def replay_dead_letter(self, dead_letter_id: str, *, queue_prefix: str = "") -> bool:
        # An id is all the caller gives: another app's letter is unknown here, as it
        # would be on a broker of this app's own.
        return await self.inner.replay_dead_letter(
            dead_letter_id, queue_prefix=self._name(queue_prefix)
        )


class _Deliveries:
    """The inner consumer's deliveries with the namespace taken off their queue.

    A class, not an async generator: a caller's ``wait_for`` that times out on
    ``__anext__`` would close a generator for good, while the inner iterator goes on.
    """

    def __init__(
        self, broker: NamespacedBroker, inner: AsyncIterator[Delivery], held: set[str]
    ) -> None:
        self._broker = broker
        self._inner = inner
        self._held = held

    def __aiter__(self) -> _Deliveries:
        return self

    async def __anext__(self) -> Delivery:
        return self._broker._hand_out(await self._inner.__anext__(), self._held)
