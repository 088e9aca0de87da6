"""A batch that reaches the consumer before its instant is held, then sent at the instant.

On ActiveMQ every batch is published ``TEPAT_BROKER_LEAD_SECONDS`` early, so the
broker's late-firing scheduler does not show: the consumer must hold it on its clock,
claim it only ``TEPAT_CLAIM_AHEAD_SECONDS`` before its instant and send it at the exact
instant, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

from consumers.worker import run_consumer
from tepat.domain.batches import batch_messages
from tepat.domain.models import MessageStatus
from tepat.ports.broker import Delivery
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import RunningSandbox, running_sandbox
from tepat.services.accounts import create_oneoff, put_reminder
from tests.support.pipeline import Pipeline, pipeline
from tests.support.waiting import eventually, stays_false

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


async def test_a_batch_delivered_early_is_claimed_just_ahead_and_sent_at_its_instant(
    tmp_path: Path,
) -> None:
    # The broker's own lead off: the test hands the batch over early itself.
    async with pipeline(
        tmp_path, start=START, broker_lead_seconds=0, claim_ahead_seconds=0.25
    ) as p:
        _, device = await p.add_user("ana", reminders=[("breakfast", "meal", time(9, 0))])
        await p.rt.creator.plan_window(START, START + timedelta(hours=24))
        [m] = await p.messages("ana")
        p.clock.set(NINE - timedelta(seconds=1))
        # As ActiveMQ fires a batch published with the lead: in hand a second early.
        [batch] = batch_messages([m], p.rt.categories)
        assert batch.due == NINE
        await p.rt.broker.publish(batch.queue, batch.encode(), 0.0)

        async def in_hand() -> bool:
            [stats] = await p.rt.broker.stats([batch.queue])
            return stats.in_flight == 1 and stats.ready == 0

        await eventually(in_hand, what="the early batch in the consumer's hands")
        ahead = timedelta(seconds=p.rt.settings.claim_ahead_seconds)
        assert ahead > timedelta(0)
        p.clock.set(NINE - ahead - timedelta(milliseconds=1))
        assert await stays_false(lambda: bool(p.received_for(device.push_token)))
        assert await p.status_of(m.id) is MessageStatus.PENDING  # not claimed while held

        async def claimed() -> bool:
            return await p.status_of(m.id) is MessageStatus.SENDING

        # Claimed ahead of its instant, so that at the instant only the send is left ...
        p.clock.set(NINE - ahead)
        await eventually(claimed, what="claimed ahead")
        # ... and still not sent before it.
        p.clock.set(NINE - timedelta(milliseconds=1))
        assert await stays_false(lambda: bool(p.received_for(device.push_token)))
        p.clock.set(NINE)
        await eventually(lambda: bool(p.received_for(device.push_token)), what="arrival")
        [got] = p.received_for(device.push_token)
        assert datetime.fromisoformat(got["received_at"]) == NINE

        async def sent() -> bool:
            return await p.status_of(m.id) is MessageStatus.SENT

        await eventually(sent, what="recorded as sent")
        # The outbox's own batch for the same instant finds nothing left to claim.
        p.clock.set(NINE + timedelta(seconds=5))
        assert await stays_false(lambda: len(p.received_for(device.push_token)) > 1)


@pytest.fixture
def served() -> Iterator[RunningSandbox]:
    with running_sandbox(ExpoSandbox()) as s:
        yield s


@pytest.mark.activemq
async def test_activemq_publishes_with_the_lead_and_the_consumer_holds_until_the_instant(
    tmp_path: Path, served: RunningSandbox
) -> None:
    from tests.integration.test_activemq_delivery import _env, _runtime, _seed_oneoffs

    env = _env(tmp_path, served, f"t{uuid.uuid4().hex[:8]}")
    env["TEPAT_BROKER_LEAD_SECONDS"] = "1.5"
    async with _runtime(env) as rt:
        assert rt.settings.broker_lead_seconds == 1.5
        arrived: list[datetime] = []
        real_consume = rt.broker.consume

        @contextlib.asynccontextmanager
        async def stamped(
            queues: Sequence[str], prefetch: int
        ) -> AsyncIterator[AsyncIterator[Delivery]]:
            async with real_consume(queues, prefetch) as deliveries:

                async def each() -> AsyncIterator[Delivery]:
                    async for d in deliveries:
                        arrived.append(rt.clock.now())
                        yield d

                yield each()

        rt.broker.consume = stamped  # type: ignore[method-assign]
        stop = asyncio.Event()
        consumer = asyncio.create_task(run_consumer(rt, stop))
        try:
            tokens, send_at = await _seed_oneoffs(rt, 70, due_in=3.0)
            await eventually(
                lambda: len({r["to"] for r in served.sandbox.received()}) == 70,
                timeout=60,
                what="70 arrivals",
            )
        finally:
            stop.set()
            await consumer
        # Fired before the instant (the lead is longer than the scheduler's delay) ...
        assert arrived and min(arrived) < send_at
        # ... and held: nothing reached the provider before it, each token once.
        received = served.sandbox.received()
        assert min(datetime.fromisoformat(r["received_at"]) for r in received) >= send_at
        assert sorted(r["to"] for r in received) == sorted(tokens)


async def test_each_item_of_a_batch_is_sent_at_its_own_instant_within_the_second(
    tmp_path: Path,
) -> None:
    """A batch covers a whole second: the item due at .0 does not wait for the one at .5."""
    async with pipeline(tmp_path, start=START) as p:
        _, device = await p.add_user("ana")
        half = NINE + timedelta(milliseconds=500)
        for key, send_at in (("first", NINE), ("half", half)):
            await create_oneoff(p.rt, "ana", key, "meal", "t", key, send_at=send_at)
        # Published later, together, by the outbox loop once soon due: one batch.
        p.clock.set(NINE - timedelta(seconds=3))
        queue = p.rt.categories.get("meal").queue_name

        async def one_batch() -> bool:
            [stats] = await p.rt.broker.stats([queue])
            return stats.ready + stats.in_flight + stats.scheduled == 1

        def bodies() -> list[str]:
            return [r["body"] for r in p.received_for(device.push_token)]

        await eventually(one_batch, what="both in one batch")
        p.clock.set(NINE)
        await eventually(lambda: bodies() == ["first"], what="the .0 item at its instant")
        assert await stays_false(lambda: len(bodies()) > 1)  # the .5 one is held
        p.clock.set(half)
        await eventually(lambda: bodies() == ["first", "half"], what="the .5 item")
        at = [datetime.fromisoformat(r["received_at"]) for r in p.received_for(device.push_token)]
        assert at == [NINE, half]


async def test_the_embedded_broker_hands_a_batch_over_with_the_lead_and_it_waits_there(
    tmp_path: Path,
) -> None:
    """As on ActiveMQ: in the consumer's hands ``TEPAT_BROKER_LEAD_SECONDS`` early (who
    it goes to read ahead), claimed ``TEPAT_CLAIM_AHEAD_SECONDS`` early, sent only at its
    instant."""
    async with pipeline(
        tmp_path, start=START, broker_lead_seconds=2, claim_ahead_seconds=0.25
    ) as p:
        _, device = await p.add_user("ana")
        m, _ = await create_oneoff(p.rt, "ana", "k", "meal", "t", "b", send_at=NINE)
        queue = p.rt.categories.get("meal").queue_name

        async def in_hand() -> bool:
            [stats] = await p.rt.broker.stats([queue])
            return stats.in_flight == 1

        p.clock.set(NINE - timedelta(seconds=3))
        assert await stays_false(in_hand)  # more than the lead ahead: still in the broker
        p.clock.set(NINE - timedelta(seconds=2))
        await eventually(in_hand, what="the batch in the consumer's hands 2 s early")
        ahead = timedelta(seconds=p.rt.settings.claim_ahead_seconds)
        p.clock.set(NINE - ahead - timedelta(milliseconds=1))
        assert await stays_false(lambda: bool(p.received_for(device.push_token)))
        assert await p.status_of(m.id) is MessageStatus.PENDING
        p.clock.set(NINE - timedelta(milliseconds=1))
        assert await stays_false(lambda: bool(p.received_for(device.push_token)))
        p.clock.set(NINE)
        await eventually(lambda: bool(p.received_for(device.push_token)), what="arrival")
        [got] = p.received_for(device.push_token)
        assert datetime.fromisoformat(got["received_at"]) == NINE


async def _move_breakfast_to_ten(p: Pipeline) -> None:
    await put_reminder(
        p.rt, "ana", "breakfast", category="meal", local_time="10:00", title="t", body="b"
    )


@pytest.mark.parametrize("when", ["before the claim", "after the message was judged"])
async def test_a_change_before_the_claim_is_honoured_and_one_after_it_applies_next_time(
    tmp_path: Path, when: str
) -> None:
    """A message is claimed and judged ``TEPAT_CLAIM_AHEAD_SECONDS`` before its instant:
    a change of its reminder before that moves today's message; one that comes after it
    finds today's message judged and on its way, and applies from the next occurrence.
    Either way the day has one message, and nothing is lost."""
    async with pipeline(
        tmp_path, start=START, broker_lead_seconds=2, claim_ahead_seconds=0.25
    ) as p:
        _, device = await p.add_user("ana", reminders=[("breakfast", "meal", time(9, 0))])
        await p.rt.creator.plan_window(START, START + timedelta(hours=24))
        [m] = await p.messages("ana")
        ahead = timedelta(seconds=p.rt.settings.claim_ahead_seconds)
        queue = p.rt.categories.get("meal").queue_name

        async def in_hand() -> bool:
            [stats] = await p.rt.broker.stats([queue])
            return stats.in_flight == 1

        p.clock.set(NINE - timedelta(seconds=2))
        await eventually(in_hand, what="the batch in the consumer's hands")
        if when == "before the claim":
            p.clock.set(NINE - ahead - timedelta(milliseconds=1))
            await _move_breakfast_to_ten(p)
            p.clock.set(NINE)
            assert await stays_false(lambda: bool(p.received_for(device.push_token)))
            assert await p.status_of(m.id) is MessageStatus.CANCELLED
            p.clock.set(NINE + timedelta(hours=1))
            await eventually(lambda: bool(p.received_for(device.push_token)), what="at ten")
            [got] = p.received_for(device.push_token)
            assert datetime.fromisoformat(got["received_at"]) == NINE + timedelta(hours=1)
            return
        p.clock.set(NINE - ahead)
        # Claimed, read and decided: only its instant is awaited.
        await eventually(lambda: p.clock.sleeping_until(NINE) > 0, what="judged, held")
        assert await p.status_of(m.id) is MessageStatus.SENDING
        await _move_breakfast_to_ten(p)
        p.clock.set(NINE)
        await eventually(lambda: bool(p.received_for(device.push_token)), what="arrival")

        async def sent() -> bool:
            return await p.status_of(m.id) is MessageStatus.SENT

        await eventually(sent, what="recorded as sent")
        # Today had its message: the move applies from tomorrow, at ten.
        p.clock.set(NINE + timedelta(hours=2))
        assert await stays_false(lambda: len(p.received_for(device.push_token)) > 1)
        await p.rt.creator.plan_window(p.clock.now(), p.clock.now() + timedelta(hours=24))
        pending = [x for x in await p.messages("ana") if x.status is MessageStatus.PENDING]
        assert [x.due for x in pending] == [NINE + timedelta(days=1, hours=1)]
