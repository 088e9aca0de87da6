"""Issue 22's delivery scenarios for every push provider, on both brokers: the ones Expo
passes (tests/integration/test_delivery.py), each run against each provider's sandbox
over HTTP (FCM, APNs over HTTP/2, Web Push, Expo) through the whole pipeline: store,
broker (embedded, or a real ActiveMQ), outbox, consumer. Time is a FakeClock shared by
Tepat and the sandbox; the device's kind picks its provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

from tepat.clock import FakeClock
from tepat.domain.categories import OUTCOME_UNKNOWN
from tepat.domain.models import Device, MessageStatus
from tests.support.pipeline import Pipeline, pipeline
from tests.support.provider_sandboxes import (
    EVERY_KIND_AND_BROKER,
    ProviderSandbox,
    on_broker,
    served,
    subscribed,
)
from tests.support.waiting import drive, eventually, stays_false

pytestmark = EVERY_KIND_AND_BROKER

# 2027-03-01 is a Monday; London is on GMT (UTC+0) until 2027-03-28.
START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


@dataclass
class Scene:
    p: Pipeline
    provider: ProviderSandbox

    async def device(self, user_id: str, category: str, at: time = time(9, 0)) -> Device:
        """A user whose one device is of the provider's kind, with one reminder."""
        _, device = await self.p.add_user(
            user_id,
            token=self.provider.token(user_id),
            kind=self.provider.kind,
            reminders=[("r", category, at)],
        )
        return device

    def arrivals(self, device: Device) -> list[datetime]:
        return self.provider.arrivals(device.push_token)

    async def is_(self, message_id: str, status: MessageStatus) -> bool:
        return (await self.p.status_of(message_id)) is status


@pytest.fixture
async def scene(kind: str, broker: str, tmp_path: Path) -> AsyncIterator[Scene]:
    clock = FakeClock(START)
    with served(kind, clock, tmp_path) as provider:
        async with pipeline(
            tmp_path,
            clock=clock,
            push_providers={kind: provider.provider(clock)},
            **on_broker(broker, clock),
        ) as p:
            await subscribed(p.rt.broker)
            yield Scene(p, provider)


async def _plan(scene: Scene, hours: int = 24) -> None:
    await scene.p.rt.creator.plan_window(START, START + timedelta(hours=hours))


async def test_on_time_nothing_before_the_instant(scene: Scene) -> None:
    device = await scene.device("ana", "meal")
    await _plan(scene)
    scene.p.clock.set(NINE - timedelta(seconds=1))
    assert await stays_false(lambda: bool(scene.arrivals(device)))
    scene.p.clock.set(NINE)
    await eventually(lambda: bool(scene.arrivals(device)), what="arrival")
    assert scene.arrivals(device) == [NINE]
    [m] = await scene.p.messages("ana")
    await eventually(lambda: scene.is_(m.id, MessageStatus.SENT), what="recorded as sent")


async def test_once_with_two_consumers_and_every_batch_delivered_twice(scene: Scene) -> None:
    devices = [await scene.device(f"u{i}", "meal") for i in range(5)]
    await _plan(scene)
    scene.p.start_consumer()  # a second consumer
    scene.p.clock.set(NINE - timedelta(seconds=1))
    # The broker hands every batch out twice (at least once): the claim decides.
    due = [m for i in range(5) for m in await scene.p.messages(f"u{i}")]
    assert len(due) == 5
    await scene.p.rt.enqueuer.enqueue(due)
    scene.p.clock.set(NINE)
    await eventually(lambda: all(scene.arrivals(d) for d in devices), what="every arrival")
    assert await stays_false(lambda: any(len(scene.arrivals(d)) > 1 for d in devices))
    assert [scene.arrivals(d) for d in devices] == [[NINE]] * 5


async def test_dead_token_deactivates_and_the_next_day_is_skipped(scene: Scene) -> None:
    device = await scene.device("fay", "sleep")
    scene.provider.kill(device.push_token)
    await _plan(scene, hours=48)
    first, second = sorted(await scene.p.messages("fay"), key=lambda m: m.scheduled_at)
    scene.p.clock.set(NINE)
    await eventually(lambda: scene.is_(first.id, MessageStatus.FAILED), what="refused")
    [dev] = await scene.p.rt.store.list_devices("fay")
    assert not dev.active
    scene.p.clock.set(NINE + timedelta(days=1))
    await eventually(lambda: scene.is_(second.id, MessageStatus.SKIPPED), what="next day skipped")
    skipped = await scene.p.rt.store.get_message(second.id)
    assert skipped is not None and skipped.status_reason == "no_active_device"
    assert scene.arrivals(device) == []


async def test_429_waits_at_least_its_retry_after_then_goes_once(scene: Scene) -> None:
    device = await scene.device("gus", "meal")
    await _plan(scene)
    scene.provider.refuse_next(429, retry_after=3)
    scene.p.clock.set(NINE)
    [m] = await scene.p.messages("gus")
    sent = lambda: scene.is_(m.id, MessageStatus.SENT)  # noqa: E731
    await drive(scene.p.clock, sent, step=timedelta(seconds=1), what="sent after the 429")
    [arrival] = scene.arrivals(device)
    assert arrival - NINE >= timedelta(seconds=scene.provider.least_wait(3))
    assert scene.provider.sandbox.stats()["too_many_requests"] == 1


async def test_5xx_is_retried_and_sent_once(scene: Scene) -> None:
    """Even for a category that closes a maybe-sent message (meal): the provider asks for
    its 5xx to be retried."""
    device = await scene.device("hal", "meal")
    await _plan(scene)
    scene.provider.refuse_next(500)
    scene.p.clock.set(NINE)
    [m] = await scene.p.messages("hal")
    sent = lambda: scene.is_(m.id, MessageStatus.SENT)  # noqa: E731
    await drive(scene.p.clock, sent, step=timedelta(seconds=5), what="sent after the 5xx")
    assert len(scene.arrivals(device)) == 1
    assert scene.provider.sandbox.stats()["server_errors"] == 1


async def test_timeout_closes_a_close_category_and_retries_safety(scene: Scene) -> None:
    """The provider took it and its answer never came: ``meal`` (close) does not risk a
    duplicate (failed, outcome_unknown, one copy); ``safety`` (retry) prefers a duplicate
    to a missing alert (sent again: two copies)."""
    meal_device = await scene.device("mia", "meal")
    safety_device = await scene.device("sam", "safety", time(9, 30))
    await _plan(scene)
    scene.provider.stall_next()
    scene.p.clock.set(NINE)
    [meal] = await scene.p.messages("mia")
    await eventually(lambda: scene.is_(meal.id, MessageStatus.FAILED), what="meal closed")
    closed = await scene.p.rt.store.get_message(meal.id)
    assert closed is not None and closed.status_reason == OUTCOME_UNKNOWN
    assert len(scene.arrivals(meal_device)) == 1

    scene.provider.stall_next()
    scene.p.clock.set(NINE + timedelta(minutes=30))
    [alert] = await scene.p.messages("sam")
    sent = lambda: scene.is_(alert.id, MessageStatus.SENT)  # noqa: E731
    await drive(scene.p.clock, sent, step=timedelta(seconds=5), what="safety sent again")
    assert len(scene.arrivals(safety_device)) == 2
