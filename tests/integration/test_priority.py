"""Under a backlog, a consumer takes same-second batches in category priority order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

from consumers.worker import PriorityHold, run_consumer
from tepat.domain.batches import Batch
from tepat.ports.broker import Delivery
from tests.support.pipeline import pipeline
from tests.support.waiting import drive

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


async def test_backlog_of_one_second_sends_every_safety_before_the_first_meal(
    tmp_path: Path,
) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        for n in range(150):
            await p.add_user(f"m{n:03d}", reminders=[("r", "meal", time(9, 0))])
            await p.add_user(f"s{n:03d}", reminders=[("r", "safety", time(9, 0))])
        await p.rt.creator.plan_window(START, START + timedelta(hours=24))
        p.clock.set(NINE)
        await p.rt.outbox.flush()
        # Four batches (two per category) are due and waiting when the consumer starts,
        # and the broker hands them over meal first (ActiveMQ fires in its own order).
        real_consume = p.rt.broker.consume

        @contextlib.asynccontextmanager
        async def meal_first(
            queues: Sequence[str], prefetch: int
        ) -> AsyncIterator[AsyncIterator[Delivery]]:
            async with real_consume(queues, prefetch) as deliveries:

                async def reordered() -> AsyncIterator[Delivery]:
                    held: list[Delivery] = []
                    async for d in deliveries:
                        held.append(d)
                        if len(held) == 4:
                            held.sort(key=lambda d: d.queue != "tepat.meal")
                            for x in held:
                                yield x
                            held.clear()

                yield reordered()

        p.rt.broker.consume = meal_first  # type: ignore[method-assign]
        stop = asyncio.Event()
        consumer = asyncio.create_task(run_consumer(p.rt, stop))
        try:
            # The client's rate limit (100/s here) spends fake seconds.
            await drive(
                p.clock,
                lambda: len(p.sandbox.received()) == 300,
                step=timedelta(seconds=1),
                what="all 300 sent",
            )
        finally:
            stop.set()
            await consumer
        order = [r["to"] for r in p.sandbox.received()]
        last_safety = max(i for i, to in enumerate(order) if "[s" in to)
        first_meal = min(i for i, to in enumerate(order) if "[m" in to)
        assert last_safety < first_meal


def _delivery(queue: str, due: datetime, n: int) -> Delivery:
    return Delivery(queue, Batch(queue, due, (f"id{n}",)).encode(), f"d{n}")


async def test_priority_hold_takes_earlier_seconds_first_then_higher_priority(
    tmp_path: Path,
) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt)
        meal, safety = "tepat.meal", "tepat.safety"
        hold.put(_delivery(meal, NINE, 1))
        hold.put(_delivery(safety, NINE + timedelta(seconds=1), 2))
        hold.put(_delivery(safety, NINE, 3))
        hold.put(_delivery(meal, NINE - timedelta(seconds=1), 4))
        taken = []
        for _ in range(4):
            delivery, key = await hold.take()
            taken.append(delivery.delivery_id)
            hold.done(key)
        assert taken == ["d4", "d3", "d1", "d2"]


async def test_a_slow_higher_priority_batch_holds_its_second_only_briefly(tmp_path: Path) -> None:
    """One slow provider answer for `safety` must not stop the consumer: a `meal` batch
    of the same second waits at most the hold, and one of a later second not at all."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt, hold_seconds=0.2)
        hold.put(_delivery("tepat.safety", NINE, 1))
        slow, _ = await hold.take()  # in flight, never done
        assert slow.delivery_id == "d1"
        hold.put(_delivery("tepat.meal", NINE + timedelta(seconds=1), 2))
        later, later_key = await asyncio.wait_for(hold.take(), timeout=0.15)
        assert later.delivery_id == "d2"  # a later second: not held
        hold.done(later_key)
        hold.put(_delivery("tepat.meal", NINE, 3))
        same, _ = await asyncio.wait_for(hold.take(), timeout=5)
        assert same.delivery_id == "d3"  # held, then released by the bound
