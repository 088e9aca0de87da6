"""Under a backlog, a consumer takes same-second batches in category priority order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

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
    # A client at 100/s: the 300 due are a backlog of three seconds (within one second of
    # the rate, order would not matter: everything goes at once).
    async with pipeline(tmp_path, start=START, consumer=False, expo_rate_limit=100) as p:
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
            turn = await hold.take()
            taken.append(turn.delivery.delivery_id)
            hold.done(turn)
        assert taken == ["d4", "d3", "d1", "d2"]


async def test_a_batch_sends_after_the_higher_priority_batches_of_its_second(
    tmp_path: Path,
) -> None:
    """All batches in hand are worked on at once; their sends take turns."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt, hold_seconds=60, at_once=1)
        hold.put(_delivery("tepat.meal", NINE, 1))
        hold.put(_delivery("tepat.safety", NINE, 2))
        first, second = await hold.take(), await hold.take()
        assert (first.delivery.delivery_id, second.delivery.delivery_id) == ("d2", "d1")
        meal_turn = asyncio.create_task(hold.turn(second))
        for _ in range(20):  # let the loop run: the meal turn stays blocked
            await asyncio.sleep(0)
        assert not meal_turn.done()  # safety has not sent yet
        await hold.turn(first)  # nothing ahead of safety
        for _ in range(20):
            await asyncio.sleep(0)
        # Safety's turn came, but its requests may still wait in the rate limiter:
        # meal queues behind them only once safety is done.
        assert first.released and not meal_turn.done()
        hold.done(first)
        await asyncio.wait_for(meal_turn, timeout=5)
        assert second.released


async def test_batches_that_fit_in_what_the_provider_takes_at_once_go_together(
    tmp_path: Path,
) -> None:
    """Within a second of the rate nothing queues at the provider: a meal batch does not
    wait a round trip for the safety batches of its second; past it, it does."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt, hold_seconds=60, at_once=2)
        hold.put(_delivery("tepat.safety", NINE, 1))
        hold.put(_delivery("tepat.safety", NINE, 2))
        hold.put(_delivery("tepat.meal", NINE, 3))
        *safety, meal = [await hold.take() for _ in range(3)]
        meal_turn = asyncio.create_task(hold.turn(meal))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not meal_turn.done()  # one message each: 2 safety ahead + itself > 2
        hold.done(safety[0])  # 1 safety ahead + itself: 2
        await asyncio.wait_for(meal_turn, timeout=5)
        assert meal.released and not safety[1].sent


async def test_a_draining_safety_backlog_holds_meal_past_the_bound_while_it_progresses(
    tmp_path: Path,
) -> None:
    """The bound counts from the last batch that finished: safety batches that keep
    finishing hold a meal batch of their second for longer than the bound."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt, hold_seconds=0.3, at_once=1)
        for n in range(4):
            hold.put(_delivery("tepat.safety", NINE, n))
        hold.put(_delivery("tepat.meal", NINE, 9))
        safety = [await hold.take() for _ in range(4)]
        meal = await hold.take()
        assert meal.delivery.delivery_id == "d9"
        meal_turn = asyncio.create_task(hold.turn(meal))
        for s in safety:  # one finishes every 0.2 s: 0.8 s in all, over twice the bound
            await hold.turn(s)
            await asyncio.sleep(0.2)  # real time: the bound is about a socket
            assert not meal_turn.done()
            hold.done(s)
        await asyncio.wait_for(meal_turn, timeout=5)


async def test_a_slow_higher_priority_batch_holds_its_second_only_briefly(tmp_path: Path) -> None:
    """One slow provider answer for `safety` must not stop the consumer: a `meal` batch
    of the same second waits for its turn at most the hold."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt, hold_seconds=0.2, at_once=1)
        hold.put(_delivery("tepat.safety", NINE, 1))
        slow = await hold.take()  # in hand, never sent
        assert slow.delivery.delivery_id == "d1"
        hold.put(_delivery("tepat.meal", NINE, 3))
        same = await asyncio.wait_for(hold.take(), timeout=5)
        assert same.delivery.delivery_id == "d3"
        await asyncio.wait_for(hold.turn(same), timeout=5)  # released by the bound
        assert same.released and not slow.sent


async def test_idle_workers_that_wake_to_fewer_batches_than_they_are_keep_waiting(
    tmp_path: Path,
) -> None:
    """Every idle worker wakes when a batch arrives; those that find nothing left must
    wait for the next one. They used to die on an empty heap (IndexError, unseen), until
    one worker was left and the consumer worked on one batch at a time."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        hold = PriorityHold(p.rt)
        idle = [asyncio.create_task(hold.take()) for _ in range(5)]
        await asyncio.sleep(0)  # all five are waiting
        hold.put(_delivery("tepat.meal", NINE, 1))
        hold.put(_delivery("tepat.safety", NINE, 2))
        await asyncio.wait(idle, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0.05)  # real time: the others pass their gather window and look again
        finished = [t for t in idle if t.done()]
        assert all(t.exception() is None for t in finished)
        assert sorted(t.result().delivery.delivery_id for t in finished) == ["d1", "d2"]
        still = [t for t in idle if not t.done()]
        assert len(still) == 3  # waiting, not dead
        hold.put(_delivery("tepat.mood", NINE, 3))
        got, _ = await asyncio.wait(still, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert [t.result().delivery.delivery_id for t in got] == ["d3"]
        for t in idle:
            t.cancel()


@pytest.mark.parametrize("reserve", [0.2, 0.0])
async def test_with_a_critical_reserve_safety_is_not_held_behind_earlier_seconds(
    tmp_path: Path, reserve: float
) -> None:
    """With a reserve the flood's older batches no longer share safety's tokens at the
    provider: waiting for them only delays safety. Without one the order holds."""
    async with pipeline(tmp_path, start=START, consumer=False, critical_reserve=reserve) as p:
        hold = PriorityHold(p.rt, hold_seconds=60, at_once=1)
        hold.put(_delivery("tepat.meal", NINE, 1))
        hold.put(_delivery("tepat.safety", NINE + timedelta(seconds=1), 2))
        meal, safety = await hold.take(), await hold.take()
        safety_turn = asyncio.create_task(hold.turn(safety))
        for _ in range(20):
            await asyncio.sleep(0)
        assert safety_turn.done() is bool(reserve)
        hold.done(meal)
        await asyncio.wait_for(safety_turn, timeout=5)
