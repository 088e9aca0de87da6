"""The consumer loop: take batches off every category queue and hand them to the dispatcher."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import time

import structlog

from tepat.domain.batches import BadBatch, decode_batch
from tepat.ports.broker import Delivery
from tepat.runtime import Runtime
from tepat.services.loops import wait_or_stop

log = structlog.get_logger("tepat.consumer")


async def handle_delivery(rt: Runtime, delivery: Delivery) -> None:
    """Dispatch one broker delivery, then ack it; a failure hands it back (nack)."""
    try:
        batch = decode_batch(delivery.queue, delivery.body)
    except BadBatch as e:
        log.error("unreadable broker message", queue=delivery.queue, error=str(e))
        await rt.broker.nack(delivery, str(e))
        return
    try:
        await rt.dispatcher.handle(batch)
    except Exception as e:  # the store or provider client failed unexpectedly
        log.exception("batch failed; handing it back", queue=delivery.queue)
        await rt.broker.nack(delivery, f"{type(e).__name__}: {e}")
        return
    await rt.broker.ack(delivery)


GATHER_WINDOW_SECONDS = 0.005
# Longest a drain waits for the batches in hand (real seconds; Expo's timeout is 15 s).
DRAIN_SECONDS = 30.0
# Longest a batch waits for a higher-priority batch of its second still being sent.
PRIORITY_HOLD_SECONDS = 1.0


class PriorityHold:
    """The deliveries a consumer holds, taken by (due second, category priority).

    A broker hands over batches in its own order (per queue, as they fire). Under
    a backlog the consumer holds up to ``prefetch`` of them; taking them from
    this heap means an earlier second goes first, and within one second the
    higher-priority category (``safety``) goes first. A lower-priority batch of
    the same second also waits while a higher-priority one is being sent, so
    with several workers ``meal`` does not start beside ``safety`` - but for
    at most ``PRIORITY_HOLD_SECONDS``: one slow provider answer must not stop
    the consumer.

    What is guaranteed: among the batches this consumer holds. A batch still
    inside the broker (beyond the prefetch), or held by another consumer
    process, is not seen.
    """

    def __init__(self, rt: Runtime, hold_seconds: float = PRIORITY_HOLD_SECONDS) -> None:
        self._hold_seconds = hold_seconds
        self._priority = {q: p.priority for q, p in rt.categories.by_queue().items()}
        self._heap: list[tuple[int, int, int, Delivery]] = []
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._in_flight: collections.Counter[tuple[int, int]] = collections.Counter()
        self._started: dict[tuple[int, int], float] = {}

    def put(self, delivery: Delivery) -> None:
        due = _due_second(delivery)
        priority = self._priority.get(delivery.queue, 99)
        heapq.heappush(self._heap, (due, priority, next(self._seq), delivery))
        self._changed.set()

    def __len__(self) -> int:
        return len(self._heap)

    def _blocked_for(self, due: int, priority: int) -> float:
        """Seconds ``(due, priority)`` still waits for a higher priority of its second."""
        now = time.monotonic()
        waits = [
            self._hold_seconds - (now - self._started[key])
            for key, n in self._in_flight.items()
            if n and key[0] == due and key[1] < priority
        ]
        return max([w for w in waits if w > 0], default=0.0)

    async def take(self) -> tuple[Delivery, tuple[int, int]]:
        """The next batch to work on and its key (give the key back to :meth:`done`)."""
        idle = not self._heap
        while True:
            blocked = self._blocked_for(*self._heap[0][:2]) if self._heap else None
            if blocked == 0.0:
                break
            self._changed.clear()
            # Real time, deliberately: the hold is about requests on a socket.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=blocked)
            if idle:
                # Idle until now: batches a broker fires together arrive a frame at a
                # time, so wait a few milliseconds for the rest before choosing.
                await asyncio.sleep(GATHER_WINDOW_SECONDS)
                idle = False
        due, priority, _, delivery = heapq.heappop(self._heap)
        key = (due, priority)
        if not self._in_flight[key]:
            self._started[key] = time.monotonic()
        self._in_flight[key] += 1
        return delivery, key

    def done(self, key: tuple[int, int]) -> None:
        self._in_flight[key] -= 1
        if not self._in_flight[key]:
            del self._in_flight[key]
            self._started.pop(key, None)
        self._changed.set()

    def drain(self) -> list[Delivery]:
        held = [d for *_, d in sorted(self._heap)]
        self._heap.clear()
        return held


def _due_second(delivery: Delivery) -> int:
    try:
        return int(decode_batch(delivery.queue, delivery.body).due.timestamp())
    except BadBatch:
        return 0  # unreadable: handled (and dead-lettered) first


async def run_consumer(rt: Runtime, stop: asyncio.Event, concurrency: int = 8) -> None:
    """Consume until ``stop`` is set, then finish the batches in hand (drain) and return.

    One task reads deliveries into a :class:`PriorityHold`; up to ``concurrency``
    workers take them from it in priority order.
    """
    queues = rt.categories.queues()  # highest priority first
    hold = PriorityHold(rt)
    in_flight: set[asyncio.Task[None]] = set()

    async with rt.broker.consume(queues, prefetch=rt.settings.consumer_prefetch) as deliveries:

        async def read() -> None:
            async for delivery in deliveries:
                hold.put(delivery)

        async def work() -> None:
            while True:
                delivery, key = await hold.take()
                task = asyncio.create_task(handle_delivery(rt, delivery))
                task.add_done_callback(lambda _, key=key: hold.done(key))  # type: ignore[misc]
                # Leaves the set when it is done, not when this worker is cancelled:
                # a drain waits for every batch in hand to be recorded and acked.
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                # Waited on, not awaited: whatever the batch raises never ends the worker.
                await asyncio.wait({task})

        reader = asyncio.create_task(read())
        workers = [asyncio.create_task(work()) for _ in range(concurrency)]
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([reader, stopping], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # A hard stop (not a drain): abandon the batches in hand. Their claimed
            # messages stay `sending` until the sweeper's lease re-drives them.
            for task in in_flight:
                task.cancel()
            rt.dispatcher.abandon_sends()
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
                    rt.dispatcher.abandon_sends()
                    await asyncio.gather(*stuck, return_exceptions=True)
            # Held but not started: leaving the broker's context hands them back
            # for redelivery (not a nack: that would count against their retries).
            hold.drain()


async def run_receipt_poller(rt: Runtime, stop: asyncio.Event) -> None:
    interval = rt.settings.receipt_poll_interval_seconds
    while not stop.is_set():
        try:
            await rt.receipts.poll_all()
        except Exception:
            log.exception("receipt poll failed")
        await wait_or_stop(rt.clock, stop, interval)
