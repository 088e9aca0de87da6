""":class:`NamespacedBroker` over each real broker, registered as ``namespaced-<adapter>``.

So the whole broker contract suite runs on the wrapper too. A suite that only talks to
the wrapper would pass on one that forgot the namespace altogether (publishing and
consuming the bare names agree with each other), so the wrapper sits between two
:class:`QueueNameGuard`: below it every queue name must be in the namespace, above it
none may be. Every contract test then fails on a wrapper that forgets to prefix a name
it passes down or to strip one it hands up.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import cast

from tepat.adapters.namespaced_broker import ForwardingBroker, NamespacedBroker, SharedBroker
from tepat.ports.broker import DeadLetter, Delivery, QueueStats
from tests.support.broker_factories import BROKER_FACTORIES, BrokerFactory, BrokerHarness


def unique_namespace() -> str:
    """A namespace no other test (or earlier run on the shared broker) uses."""
    return f"ns{uuid.uuid4().hex[:10]}."


class QueueNameGuard(ForwardingBroker):
    """A broker that fails the test on any queue name crossing it that ``allowed`` refuses."""

    def __init__(self, inner: SharedBroker, allowed: Callable[[str], bool], side: str) -> None:
        super().__init__(inner)
        self._allowed = allowed
        self._side = side

    def _check(self, queue: str) -> str:
        assert self._allowed(queue), f"queue name {queue!r} {self._side}"
        return queue

    def _check_all(self, queues: Sequence[str]) -> Sequence[str]:
        for queue in queues:
            self._check(queue)
        return queues

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        await self.inner.publish(self._check(queue), body, delay_seconds)

    @asynccontextmanager
    async def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AsyncIterator[AsyncIterator[Delivery]]:
        async with self.inner.consume(self._check_all(queues), prefetch) as deliveries:
            yield _Checked(self, deliveries)

    async def ack(self, delivery: Delivery) -> None:
        self._check(delivery.queue)
        await self.inner.ack(delivery)

    async def nack(self, delivery: Delivery, reason: str) -> None:
        self._check(delivery.queue)
        await self.inner.nack(delivery, reason)

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        result = await self.inner.stats(self._check_all(queues))
        self._check_all([s.queue for s in result])
        return result

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]:
        result = await self.inner.dead_letters(self._check_all(queues))
        self._check_all([d.queue for d in result])
        return result

    async def replay_dead_letter(self, dead_letter_id: str, *, queue_prefix: str = "") -> bool:
        self._check(queue_prefix)
        return await self.inner.replay_dead_letter(dead_letter_id, queue_prefix=queue_prefix)


class _Checked:
    def __init__(self, guard: QueueNameGuard, inner: AsyncIterator[Delivery]) -> None:
        self._guard = guard
        self._inner = inner

    def __aiter__(self) -> _Checked:
        return self

    async def __anext__(self) -> Delivery:
        delivery = await self._inner.__anext__()
        self._guard._check(delivery.queue)
        return delivery


def guarded(inner: SharedBroker, namespace: str) -> QueueNameGuard:
    """``NamespacedBroker(inner, namespace)`` between the two guards."""
    below = QueueNameGuard(
        inner, lambda q: q.startswith(namespace), f"reached the broker without {namespace!r}"
    )
    return QueueNameGuard(
        NamespacedBroker(below, namespace),
        lambda q: not q.startswith(namespace),
        f"came back from the wrapper with {namespace!r} on it",
    )


def _namespaced(adapter: str) -> BrokerFactory:
    @asynccontextmanager
    async def harness() -> AsyncIterator[BrokerHarness]:
        async with BROKER_FACTORIES[adapter]() as inner:
            # the harness types the real adapters as plain Brokers
            broker = cast(SharedBroker, inner.broker)
            # The name stays the adapter's: a test skipped on an adapter is skipped on it
            # wrapped too, as the wrapper changes no property of the broker's but its names.
            yield replace(inner, broker=guarded(broker, unique_namespace()))

    return harness


# the wrapped ones too; imported after them
for _adapter in ("embedded", "activemq"):
    BROKER_FACTORIES[f"namespaced-{_adapter}"] = _namespaced(_adapter)
