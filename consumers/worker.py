"""The consumer loop: take batches off every category queue and hand them to the dispatcher."""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import structlog

from tepat.domain.batches import BadBatch, Batch, decode_batch
from tepat.domain.queues import queue_may_use_critical_reserve, queue_priority
from tepat.ports.broker import Delivery
from tepat.runtime import Runtime
from tepat.tracing import HEADER as TRACEPARENT
from tepat.tracing import span

log = structlog.get_logger("tepat.consumer")


async def handle_delivery(
    rt: Runtime,
    delivery: Delivery,
    batch: Batch | None = None,
    before_send: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Dispatch one broker delivery, then ack it; a failure hands it back (nack).

    ``batch``: the delivery's body, already decoded (the consumer decodes it once, to
    order it); ``before_send``: awaited before its requests go out (the priority turn).
    """
    # The batch span of the outbox (its first message's trace) goes on here.
    with span("deliver", delivery.headers.get(TRACEPARENT), queue=delivery.queue):
        if batch is None:
            try:
                batch = decode_batch(delivery.queue, delivery.body)
            except BadBatch as e:
                log.error("unreadable broker message", queue=delivery.queue, error=str(e))
                await rt.broker.nack(delivery, str(e))
                return
        try:
            await rt.dispatcher.handle(batch, before_send=before_send)
        except rt.store.unavailable_errors as e:
            # An outage, not a bug: one line per batch, no traceback. The broker redelivers
            # it with its backoff; the lease re-drives what it had claimed.
            log.warning("store unavailable; batch handed back", queue=delivery.queue, error=str(e))
            await rt.broker.nack(delivery, f"store unavailable: {type(e).__name__}")
            return
        except Exception as e:  # the store or provider client failed unexpectedly
            log.exception("batch failed; handing it back", queue=delivery.queue)
            await rt.broker.nack(delivery, f"{type(e).__name__}: {e}")
            return
        await rt.broker.ack(delivery)


GATHER_WINDOW_SECONDS = 0.005
# Longest a drain waits for the batches in hand (real seconds; Expo's timeout is 15 s).
DRAIN_SECONDS = 30.0
# Longest a batch waits for a higher-priority batch of its second to be sent.
PRIORITY_HOLD_SECONDS = 1.0

Key = tuple[int, int]  # (due second, category priority)


@dataclass(eq=False)
class Turn:
    """One batch in hand: its delivery, its decoded body and its place in the order."""

    delivery: Delivery
    batch: Batch | None  # None: unreadable (nacked first)
    key: Key
    released: bool = False  # its turn came: its requests may go out
    sent: bool = False  # done (answered and recorded, or dropped): no longer holds others

    @property
    def size(self) -> int:
        return len(self.batch.ids) if self.batch is not None else 0


class PriorityHold:
    """The deliveries a consumer holds, ordered by (due second, category priority).

    A broker hands over batches in its own order (per queue, as they fire), and on
    ActiveMQ up to ``TEPAT_BROKER_LEAD_SECONDS`` before their instant. Every batch in
    hand is worked on at once: read, held until its instant, claimed, decided. Its
    requests go out only at its :meth:`turn`: after those of every batch in hand of
    an earlier second, and of the same second with a higher priority (``safety``
    before ``meal``), are done - but it waits at most ``PRIORITY_HOLD_SECONDS``
    without one of them finishing: one slow batch must not stop the consumer. The
    store work of a second overlaps; the sends keep the order.

    The order matters only where the provider's rate makes requests queue: when the
    unsent batches in hand of a second and of the seconds before it fit together in
    ``at_once`` messages (a second of push's configured rate, which the provider takes
    at once), they go without waiting for each other. Serialising them would only make
    every category but the first a provider round trip later, every second. A burst
    past it keeps the order to its end: its lower categories in hand count too.

    What is guaranteed: among the batches this consumer holds. A batch still
    inside the broker (beyond the prefetch), or held by another consumer
    process, is not seen.
    """

    def __init__(
        self,
        rt: Runtime,
        hold_seconds: float = PRIORITY_HOLD_SECONDS,
        at_once: float | None = None,
    ) -> None:
        self._hold_seconds = hold_seconds
        self._at_once = rt.settings.expo_rate_limit if at_once is None else at_once
        self._priority = {q: queue_priority(q, rt.categories) for q in rt.queues}
        # With a critical reserve these batches no longer queue behind others at the
        # provider: holding them behind earlier seconds' batches would only delay them.
        self._unheld = {
            q
            for q in rt.queues
            if rt.settings.critical_reserve and queue_may_use_critical_reserve(q, rt.categories)
        }
        self._heap: list[tuple[Key, int, Turn]] = []
        self._seq = itertools.count()
        self._arrived = asyncio.Event()
        self._sent = asyncio.Event()
        self._unsent: collections.Counter[Key] = collections.Counter()
        self._unsent_messages: collections.Counter[Key] = collections.Counter()

    def put(self, delivery: Delivery) -> Turn:
        """Hold ``delivery``; its body is decoded here, once."""
        try:
            batch: Batch | None = decode_batch(delivery.queue, delivery.body)
        except BadBatch:
            batch = None
        # Unreadable: first, to be dead-lettered without waiting for anything.
        due = int(batch.due.timestamp()) if batch is not None else 0
        turn = Turn(delivery, batch, (due, self._priority.get(delivery.queue, 99)))
        heapq.heappush(self._heap, (turn.key, next(self._seq), turn))
        self._arrived.set()
        return turn

    async def take(self) -> Turn:
        """The next batch to work on, earliest key first (give it back to :meth:`done`)."""
        while not self._heap:
            while not self._heap:
                self._arrived.clear()
                await self._arrived.wait()
            # Idle until now: batches a broker fires together arrive a frame at a
            # time, so wait a few milliseconds for the rest before choosing. Every
            # idle worker woke: those that find the heap emptied meanwhile wait again.
            await asyncio.sleep(GATHER_WINDOW_SECONDS)
        _, _, turn = heapq.heappop(self._heap)
        self._unsent[turn.key] += 1
        self._unsent_messages[turn.key] += turn.size
        return turn

    def _held(self, turn: Turn) -> bool:
        """Whether a batch ahead of ``turn`` is unsent, and the unsent batches of its second
        and earlier ones, ``turn`` among them, do not fit in ``at_once`` together."""
        if turn.delivery.queue in self._unheld:
            return False
        if not any(n and k < turn.key for k, n in self._unsent.items()):
            return False
        second = turn.key[0]
        together = sum(n for k, n in self._unsent_messages.items() if k[0] <= second)
        return together > self._at_once

    async def turn(self, turn: Turn) -> None:
        """Return when ``turn``'s requests may go out (see the class docstring).

        A batch ahead holds this one until it is *done* (its requests answered and
        recorded), not merely until its own turn came: its requests may still be
        queued in the rate limiter, and letting a ``meal`` batch queue beside them
        would interleave the two categories at the provider. Waiting for *done* also
        lets the acks bring in the batches of the same second beyond the prefetch,
        which then get ahead (releasing at submission let ``meal`` out 4.5 s before
        the last ``safety`` of a 20,000 burst). The bound counts from
        the last batch that finished: a backlog of ``safety`` that keeps draining
        holds ``meal`` for as long as it takes, one that is stuck only briefly.
        """
        if turn.released:  # asked again by a later instant or another channel of the batch
            return
        # Real time, deliberately: the hold is about requests on a socket.
        deadline = time.monotonic() + self._hold_seconds
        while self._held(turn):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._sent.clear()
            try:
                await asyncio.wait_for(self._sent.wait(), timeout=left)
            except TimeoutError:
                break
            deadline = time.monotonic() + self._hold_seconds  # progress: a batch finished
        turn.released = True

    def done(self, turn: Turn) -> None:
        if turn.sent:
            return
        turn.sent = True
        self._unsent[turn.key] -= 1
        self._unsent_messages[turn.key] -= turn.size
        if not self._unsent[turn.key]:
            del self._unsent[turn.key]
            del self._unsent_messages[turn.key]
        self._sent.set()


async def run_consumer(rt: Runtime, stop: asyncio.Event) -> None:
    """Consume until ``stop`` is set, then finish the batches in hand (drain) and return.

    One task reads deliveries into a :class:`PriorityHold`; a worker per batch in hand
    (the prefetch, at least 8) takes them from it in order. A batch waiting for its
    instant or its turn costs a worker nothing but memory: the store and the provider's
    connections bound the real work.
    """
    prefetch = rt.settings.consumer_prefetch
    hold = PriorityHold(rt)
    in_flight: set[asyncio.Task[None]] = set()

    async with rt.broker.consume(rt.queues, prefetch=prefetch) as deliveries:

        async def read() -> None:
            async for delivery in deliveries:
                hold.put(delivery)

        async def work() -> None:
            while True:
                turn = await hold.take()
                my_turn = partial(hold.turn, turn)
                task = asyncio.create_task(handle_delivery(rt, turn.delivery, turn.batch, my_turn))
                task.add_done_callback(lambda _, turn=turn: hold.done(turn))  # type: ignore[misc]
                # Leaves the set when it is done, not when this worker is cancelled:
                # a drain waits for every batch in hand to be recorded and acked.
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                # Waited on, not awaited: whatever the batch raises never ends the worker.
                await asyncio.wait({task})

        reader = asyncio.create_task(read())
        workers = [asyncio.create_task(work()) for _ in range(max(8, prefetch))]
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([reader, stopping], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # A hard stop (not a drain): abandon the batches in hand. Their claimed
            # messages stay `sending` until the sweeper's lease re-drives them.
            for task in in_flight:
                task.cancel()
            rt.dispatcher.channels.abandon()
            raise
        finally:
            stopping.cancel()
            reader.cancel()
            for w in workers:
                w.cancel()
            await asyncio.gather(reader, *workers, return_exceptions=True)
            if in_flight:
                log.info("draining", batches=len(in_flight))
                # Bounded in real time: a batch stuck on a dead provider connection must
                # not hold a shutdown forever. What is abandoned stays `sending` and the
                # sweeper's lease re-drives it (the documented duplicate window).
                _, stuck = await asyncio.wait(set(in_flight), timeout=DRAIN_SECONDS)
                if stuck:
                    log.warning("drain timed out; abandoning batches", batches=len(stuck))
                    for task in stuck:
                        task.cancel()
                    rt.dispatcher.channels.abandon()
                    await asyncio.gather(*stuck, return_exceptions=True)
        # Held but not started: leaving the broker's context hands them back for
        # redelivery (not a nack: that would count against their retries).


async def run_lease_renewal(rt: Runtime, stop: asyncio.Event) -> None:
    """Keep the lease of the batches in hand that wait long to be sent (a throttled
    rate, the priority hold), so the sweeper does not take them for a dead consumer's."""
    claims = rt.dispatcher.claims
    await rt.every(stop, claims.check_seconds, claims.renew_due, log, "lease renewal failed")


async def run_receipt_poller(rt: Runtime, stop: asyncio.Event) -> None:
    seconds = rt.settings.receipt_poll_interval_seconds
    await rt.every(stop, seconds, rt.receipts.poll_all, log, "receipt poll failed")
