"""An in-process asyncio broker for laptops, small installs and tests.

It implements :class:`tepat.ports.broker.Broker` with the behaviour the
ActiveMQ adapter has (one delay queue per name, at-least-once delivery,
redelivery on nack after a growing delay and, past the retry age,
``DLQ.<queue>``), so the same contract suite runs against both. Shaped after
dramatiq's ``StubBroker``: plain dicts and heaps, no threads.

**Nothing here is durable.** A restart loses every queued batch on purpose: the
store is the source of truth, and on start the service re-enqueues the pending
messages it finds there (that is done by the service, not by this class).

Time comes only from the injected :class:`~tepat.clock.Clock`, so a
``FakeClock`` drives delays in tests without anyone sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tepat import tracing
from tepat.clock import Clock
from tepat.ports.broker import BrokerClosed, DeadLetter, Delivery, QueueStats, RedeliveryPolicy


@dataclass(slots=True, eq=False)
class _Message:
    id: str
    queue: str
    body: bytes
    due: datetime
    nacks: int = 0
    # set by the first nack: the retry age counts from here, never from a consumer crash
    first_failure: datetime | None = None
    redelivered: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _InFlight:
    message: _Message
    consumer: _Consumer


class EmbeddedBroker:
    """Delay queues in memory, one heap of ``(due, seq, message)`` per queue.

    When several queues a consumer listed have due messages, the one listed first wins
    (callers list queues in priority order, so ``safety`` drains before ``meal``); within
    a queue, earliest due first. Deliveries a consumer hands back by leaving its context
    do **not** count as a failure: a crashing consumer is not the message's fault, and
    counting it would dead-letter good batches during a bad deploy.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        redelivery: RedeliveryPolicy | None = None,
        lead_seconds: float = 0.0,
    ) -> None:
        self._clock = clock
        self._redelivery = redelivery or RedeliveryPolicy()
        # As on ActiveMQ (``TEPAT_BROKER_LEAD_SECONDS``): a published message is handed over
        # this much before its delay, so the consumer reads ahead and holds it until its
        # instant; at the instant only the claim and the send remain.
        self.lead_seconds = lead_seconds
        self._queues: dict[str, list[tuple[datetime, int, _Message]]] = {}
        self._in_flight: dict[str, _InFlight] = {}  # by delivery_id
        self._dead: dict[str, DeadLetter] = {}  # by id, in the order they died
        self._consumers: set[_Consumer] = set()
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------

    async def connect(self) -> None:
        self._closed = False

    async def close(self) -> None:
        """End every consumer's iteration and return its unacked deliveries."""
        self._closed = True
        for consumer in list(self._consumers):
            self._release(consumer)
        self._notify()

    async def ping(self) -> None:
        self._check_open()

    # -- producing ---------------------------------------------------------

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        self._check_open()
        # A negative delay means "already due"; clamping keeps such messages in
        # publish order, as they would be on a broker that ignores delays <= 0.
        due = self._clock.now() + timedelta(seconds=max(0.0, delay_seconds - self.lead_seconds))
        # The span publishing it (the outbox's) goes on in the consumer that takes it.
        self._push(_Message(uuid.uuid4().hex, queue, bytes(body), due, headers=tracing.headers()))

    # -- consuming ---------------------------------------------------------

    @asynccontextmanager
    async def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AsyncIterator[AsyncIterator[Delivery]]:
        self._check_open()
        if not queues:
            raise ValueError("consume needs at least one queue")
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        consumer = _Consumer(self, tuple(queues), prefetch)
        self._consumers.add(consumer)
        try:
            yield consumer
        finally:
            self._release(consumer)

    async def ack(self, delivery: Delivery) -> None:
        # An ack for a delivery that was already handed back (its consumer left)
        # is ignored: the message comes again, which at-least-once allows.
        entry = self._in_flight.pop(delivery.delivery_id, None)
        if entry is not None:
            entry.consumer.unacked.pop(delivery.delivery_id, None)
            self._notify()  # a prefetch slot is free

    async def nack(self, delivery: Delivery, reason: str) -> None:
        entry = self._in_flight.pop(delivery.delivery_id, None)
        if entry is None:
            return
        entry.consumer.unacked.pop(delivery.delivery_id, None)
        message = entry.message
        now = self._clock.now()
        message.nacks += 1
        if message.first_failure is None:
            message.first_failure = now
        if self._redelivery.dead(message.first_failure, now):
            dead = DeadLetter(message.id, message.queue, message.body, reason, message.nacks)
            self._dead[message.id] = dead
        else:
            message.redelivered = True
            message.due = now + timedelta(seconds=self._redelivery.delay(message.nacks))
            self._push(message)
        self._notify()

    # -- operations --------------------------------------------------------

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        # A linear scan: stats are read by metrics and operators now and then,
        # not per message, so counters kept on every move would not pay off.
        now = self._clock.now()
        result = []
        for queue in queues:
            heap = self._queues.get(queue, [])
            ready = sum(1 for due, _, _ in heap if due <= now)
            in_flight = sum(1 for e in self._in_flight.values() if e.message.queue == queue)
            dead = sum(1 for d in self._dead.values() if d.queue == queue)
            result.append(QueueStats(queue, ready, len(heap) - ready, in_flight, dead))
        return result

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]:
        wanted = set(queues)
        return [d for d in self._dead.values() if d.queue in wanted]

    async def replay_dead_letter(self, dead_letter_id: str, *, queue_prefix: str = "") -> bool:
        dead = self._dead.get(dead_letter_id)
        if dead is None or not dead.queue.startswith(queue_prefix):
            return False
        del self._dead[dead_letter_id]
        # A fresh start: due now, no attempts, not flagged as a redelivery.
        self._push(_Message(dead.id, dead.queue, dead.body, self._clock.now()))
        return True

    # -- internals used by _Consumer ----------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosed("the embedded broker is closed")

    def _push(self, message: _Message) -> None:
        heap = self._queues.setdefault(message.queue, [])
        heapq.heappush(heap, (message.due, next(self._seq), message))
        self._notify()

    def _notify(self) -> None:
        """Wake every waiting consumer so each re-reads the queues.

        A new Event per round makes this a broadcast: waiters hold the old one,
        which stays set, and later waiters start on a fresh one.
        """
        self._changed.set()
        self._changed = asyncio.Event()

    def _take_due(self, queues: Sequence[str]) -> _Message | None:
        now = self._clock.now()
        for queue in queues:  # priority order: the first queue with a due message wins
            heap = self._queues.get(queue)
            if heap and heap[0][0] <= now:
                return heapq.heappop(heap)[2]
        return None

    def _next_due(self, queues: Sequence[str]) -> datetime | None:
        heads = [heap[0][0] for q in queues if (heap := self._queues.get(q))]
        return min(heads, default=None)

    def _deliver(self, message: _Message, consumer: _Consumer) -> Delivery:
        delivery_id = uuid.uuid4().hex  # per attempt, so a stale ack can't ack a redelivery
        self._in_flight[delivery_id] = _InFlight(message, consumer)
        consumer.unacked[delivery_id] = None
        headers = {**message.headers, "message-id": message.id}
        return Delivery(message.queue, message.body, delivery_id, message.redelivered, headers)

    def _release(self, consumer: _Consumer) -> None:
        consumer.closed = True
        self._consumers.discard(consumer)
        for delivery_id in consumer.unacked:
            entry = self._in_flight.pop(delivery_id, None)
            if entry is not None:
                # Back at its original due time: it keeps its place ahead of later messages.
                entry.message.redelivered = True
                self._push(entry.message)
        consumer.unacked.clear()
        self._notify()

    async def _wait(self, changed: asyncio.Event, until: datetime | None) -> None:
        """Sleep until ``until`` on the broker's clock or until something changes."""
        if until is None:
            await changed.wait()
            return
        waiters = {
            asyncio.ensure_future(changed.wait()),
            asyncio.ensure_future(self._clock.sleep_until(until)),
        }
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Not awaited: awaiting here could swallow a cancellation of our own task.
            for waiter in waiters:
                waiter.cancel()


@dataclass(eq=False)
class _Consumer:
    broker: EmbeddedBroker
    queues: tuple[str, ...]
    prefetch: int
    unacked: dict[str, None] = field(default_factory=dict)  # delivery ids, in delivery order
    closed: bool = False

    def __aiter__(self) -> _Consumer:
        return self

    async def __anext__(self) -> Delivery:
        broker = self.broker
        # Yield once per delivery so a consumer that never awaits anything else
        # still lets its competitors take a share.
        await asyncio.sleep(0)
        while True:
            if self.closed:
                raise StopAsyncIteration
            # Take the event before looking at the queues: a change made after
            # the look sets this very event, so no wake-up can be missed.
            changed = broker._changed
            until: datetime | None = None
            if len(self.unacked) < self.prefetch:
                message = broker._take_due(self.queues)
                if message is not None:
                    return broker._deliver(message, self)
                until = broker._next_due(self.queues)
            await broker._wait(changed, until)
