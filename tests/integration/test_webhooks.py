"""Status webhooks end to end at the adapter: status changes journaled by the store, turned
into delivery messages by the emitter, POSTed over real HTTP to a receiver (uvicorn on a
free port) by ``WebhookChannel``, retried on ``WEBHOOK_RETRY``.

The receiver answers 500 for the first 10 minutes of the injectable clock, then 200: it
gets every status event afterwards, each signed (checked by the spec verifier written in
tests/unit/test_webhook_signing.py, not Tepat's code) and each accepted once per stable id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tepat.adapters.sqlite import SqliteStore
from tepat.adapters.webhook_out import WEBHOOK_RETRY, WebhookChannel
from tepat.adapters.webhook_target import check_target
from tepat.clock import FakeClock
from tepat.domain.models import Message, MessageStatus
from tepat.domain.webhooks import (
    EVENT_TYPES,
    WEBHOOK_CHANNEL,
    parse_target_policy,
    status_event_id,
)
from tepat.ports.channel import Delivered, Outgoing, Refused
from tepat.ports.store import Store
from tepat.ports.try_again import TryAgain
from tepat.sandbox.runner import serving_app
from tepat.services.webhooks import WebhookEmitter, WebhookService
from tests.support.messages import make_message
from tests.unit.test_webhook_signing import spec_verify

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
S = MessageStatus
CATEGORIES = ("meal", "medication", "safety", "custom")
# The receivers here listen on 127.0.0.1: a private host that must be allow-listed.
LOCAL = parse_target_policy("127.0.0.1")
local_only = partial(check_target, policy=LOCAL)


@dataclass
class Received:
    at: datetime
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An ASGI receiver whose answer is a function of the test's clock."""

    clock: FakeClock
    answer: Callable[[datetime], int]
    requests: list[Received] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        status = self.answer(self.clock.now())
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.requests.append(Received(self.clock.now(), status, headers, b"".join(chunks)))
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"ok" if status < 300 else b"down"})

    def accepted(self) -> list[Received]:
        return [r for r in self.requests if 200 <= r.status < 300]


@asynccontextmanager
async def serving(app: Receiver) -> AsyncIterator[str]:
    async with serving_app(app) as server:
        yield server.url


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[Store, FakeClock]]:
    clock = FakeClock(T0)
    s = SqliteStore(str(tmp_path / "t.db"), clock=clock)
    await s.open()
    try:
        yield s, clock
    finally:
        await s.close()


def subject(key: str, category: str = "meal") -> Message:
    dedup = f"e|order-{key}|u-{key}|push"
    return make_message(
        dedup, user_id=f"u-{key}", category=category, scheduled_at=T0, live_key=dedup
    )


async def deliver_due(store: Store, channel: WebhookChannel, clock: FakeClock) -> int:
    """What the shared sender does for webhook deliveries: claim the due ones, send,
    record (delivered, failed, or back to pending after WEBHOOK_RETRY's backoff)."""
    now = clock.now()
    due = [
        m
        for m in await store.unpublished(10_000, due_before=now + timedelta(microseconds=1))
        if m.channel == WEBHOOK_CHANNEL
    ]
    claimed = await store.claim([m.id for m in due], now)
    if not claimed:
        return 0
    outcomes = await channel.send([Outgoing(m, str(m.content["subscription_id"])) for m in claimed])
    for m, outcome in zip(claimed, outcomes, strict=True):
        match outcome:
            case Delivered():
                await store.transition(m.id, S.DELIVERED, now, expect=[S.SENDING])
            case Refused(reason):
                await store.transition(m.id, S.FAILED, now, expect=[S.SENDING], reason=reason)
            case TryAgain(reason, retry_after):
                assert not WEBHOOK_RETRY.gives_up(m.attempts, m.scheduled_at, now), reason
                delay = WEBHOOK_RETRY.delay(m.attempts, retry_after)
                await store.transition(
                    m.id,
                    S.PENDING,
                    now,
                    expect=[S.SENDING],
                    last_error=reason,
                    due_at=now + timedelta(seconds=delay),
                )
            case _:
                raise AssertionError(outcome)
    return len(claimed)


async def next_due(store: Store) -> datetime | None:
    pending = [
        m
        for m in await store.unpublished(10_000, due_before=T0 + timedelta(days=30))
        if m.channel == WEBHOOK_CHANNEL
    ]
    return min((m.due for m in pending), default=None)


async def run_until_quiet(
    store: Store, channel: WebhookChannel, clock: FakeClock, emitter: WebhookEmitter
) -> None:
    """Emit and deliver, moving the clock to each next retry, until nothing waits."""
    for _ in range(1000):
        await emitter.emit_once()
        await deliver_due(store, channel, clock)
        when = await next_due(store)
        if when is None:
            return
        clock.set(max(when, clock.now()))
    raise AssertionError("deliveries still pending after 1000 rounds")


async def test_a_receiver_down_for_10_minutes_gets_every_event_afterwards_signed_once(
    store: tuple[Store, FakeClock],
) -> None:
    s, clock = store
    up_at = T0 + timedelta(minutes=10)
    receiver = Receiver(clock, lambda now: 200 if now >= up_at else 500)
    async with serving(receiver) as url:
        service = WebhookService(s, clock, CATEGORIES, check_target=local_only)
        sub = await service.create(f"{url}/hooks", EVENT_TYPES)
        secret = sub.secrets[0].secret
        channel = WebhookChannel(s, clock, allowed_targets=LOCAL)
        emitter = WebhookEmitter(s, clock)
        try:
            messages = [subject(str(i), CATEGORIES[i % 4]) for i in range(6)]
            await s.insert_messages(messages)
            expected: dict[str, tuple[str, str]] = {}

            async def change(m: Message, to: S, expect: S, reason: str | None = None) -> None:
                assert await s.transition(m.id, to, clock.now(), expect=[expect], reason=reason)
                expected[status_event_id(m.id, to.value)] = (m.id, to.value)

            # Every 30 s for 15 minutes: the emitter and the sender run; status changes
            # happen before, during and after the outage.
            script = {
                0: [(0, S.SENDING)],
                1: [(0, S.SENT), (1, S.SENDING), (2, S.SKIPPED)],
                6: [(0, S.DELIVERED), (1, S.FAILED)],
                14: [(3, S.MISSED)],
                19: [(4, S.SENDING)],
                21: [(4, S.SENT)],
                26: [(4, S.DELIVERED), (5, S.CANCELLED)],
            }
            previous = {m.id: S.PENDING for m in messages}
            for step in range(30):
                for index, to in script.get(step, []):
                    m = messages[index]
                    if to is S.SENDING:
                        assert await s.claim([m.id], clock.now())
                    elif to is S.CANCELLED:  # internal: never reported
                        assert await s.transition(m.id, to, clock.now(), expect=[previous[m.id]])
                    else:
                        await change(m, to, previous[m.id], reason="r" if to is S.SKIPPED else None)
                    previous[m.id] = to
                await emitter.emit_once()
                await deliver_due(s, channel, clock)
                clock.advance(30)
            await run_until_quiet(s, channel, clock, emitter)
        finally:
            await channel.close()

    assert len(expected) == 7
    failures = [r for r in receiver.requests if r.status == 500]
    assert failures and all(r.at < up_at for r in failures)  # the outage happened
    accepted = receiver.accepted()
    ids = [r.headers["webhook-id"] for r in accepted]
    assert sorted(ids) == sorted(expected)  # every event, each once
    for r in accepted:
        spec_verify(secret, r.headers, r.body, now=int(r.at.timestamp()))
        assert r.headers["content-type"] == "application/json"
        payload = json.loads(r.body)
        message_id, status = expected[r.headers["webhook-id"]]
        assert payload["data"]["message_id"] == message_id
        assert payload["data"]["status"] == status
        assert payload["type"] == {"missed": "message.skipped"}.get(status, f"message.{status}")
        assert payload["data"]["event_id"] is not None and payload["data"]["channel"] == "push"
    # Every delivery message ended delivered; none is listed as a user's message.
    assert await next_due(s) is None


async def test_a_410_disables_the_subscription_and_fails_the_delivery(
    store: tuple[Store, FakeClock],
) -> None:
    s, clock = store
    receiver = Receiver(clock, lambda now: 410)
    async with serving(receiver) as url:
        service = WebhookService(s, clock, CATEGORIES, check_target=local_only)
        sub = await service.create(f"{url}/hooks", ["message.sent"])
        channel = WebhookChannel(s, clock, allowed_targets=LOCAL)
        try:
            m = subject("a")
            await s.insert_messages([m])
            assert await s.claim([m.id], clock.now())
            assert await s.transition(m.id, S.SENT, clock.now(), expect=[S.SENDING])
            emitter = WebhookEmitter(s, clock)
            assert await emitter.emit_once() == 1
            assert await deliver_due(s, channel, clock) == 1
        finally:
            await channel.close()
    stored = await s.get_webhook_subscription(sub.id)
    assert stored is not None and not stored.enabled and stored.disabled_reason == "gone"
    [delivery] = [
        m for m in await s.dead_letters(10) if m.channel == WEBHOOK_CHANNEL and m.status is S.FAILED
    ]
    assert delivery.status_reason == "gone"
    assert len(receiver.requests) == 1


async def _one_delivery(s: Store, clock: FakeClock, url: str, channel: WebhookChannel) -> Message:
    """A subscription to ``url`` (registered while allowed), one status event, one
    attempt: the delivery message as the attempt left it."""
    service = WebhookService(s, clock, CATEGORIES, check_target=local_only)
    await service.create(f"{url}/hooks", ["message.sent"])
    m = subject("a")
    await s.insert_messages([m])
    assert await s.claim([m.id], clock.now())
    assert await s.transition(m.id, S.SENT, clock.now(), expect=[S.SENDING])
    assert await WebhookEmitter(s, clock).emit_once() == 1
    assert await deliver_due(s, channel, clock) == 1
    [delivery] = [
        d
        for d in await s.unpublished(10, due_before=clock.now() + timedelta(days=1))
        if d.channel == WEBHOOK_CHANNEL
    ] or [d for d in await s.dead_letters(10) if d.channel == WEBHOOK_CHANNEL]
    return delivery


async def test_at_send_time_a_target_now_internal_is_refused_and_never_called(
    store: tuple[Store, FakeClock],
) -> None:
    """DNS can change after registration: every connection is checked, and a channel
    without the allow-list refuses the loopback receiver without connecting."""
    s, clock = store
    receiver = Receiver(clock, lambda now: 200)
    async with serving(receiver) as url:
        channel = WebhookChannel(s, clock)  # nothing allow-listed
        try:
            delivery = await _one_delivery(s, clock, url, channel)
        finally:
            await channel.close()
    assert receiver.requests == []
    assert delivery.status is S.FAILED
    assert delivery.status_reason is not None
    assert delivery.status_reason.startswith("url_refused: 127.0.0.1 is a loopback address")


async def test_a_receivers_answer_body_is_never_stored(store: tuple[Store, FakeClock]) -> None:
    s, clock = store
    receiver = Receiver(clock, lambda now: 500)  # answers b"down"
    async with serving(receiver) as url:
        channel = WebhookChannel(s, clock, allowed_targets=LOCAL)
        try:
            delivery = await _one_delivery(s, clock, url, channel)
        finally:
            await channel.close()
    assert len(receiver.requests) == 1
    assert delivery.status is S.PENDING and delivery.last_error == "http_500"


async def test_a_rotated_secret_signs_beside_the_new_one_and_filters_apply(
    store: tuple[Store, FakeClock],
) -> None:
    s, clock = store
    receiver = Receiver(clock, lambda now: 204)
    async with serving(receiver) as url:
        service = WebhookService(s, clock, CATEGORIES, check_target=local_only)
        sub = await service.create(f"{url}/hooks", ["message.failed"], categories=["safety"])
        rotated = await service.rotate_secret(sub.id)
        channel = WebhookChannel(s, clock, allowed_targets=LOCAL)
        try:
            safety, meal = subject("s", "safety"), subject("m", "meal")
            await s.insert_messages([safety, meal])
            for m in (safety, meal):
                assert await s.transition(m.id, S.FAILED, clock.now(), expect=[S.PENDING])
            await run_until_quiet(s, channel, clock, WebhookEmitter(s, clock))
        finally:
            await channel.close()
    [r] = receiver.requests  # the meal failure is not subscribed to
    assert json.loads(r.body)["data"]["message_id"] == safety.id
    assert len(r.headers["webhook-signature"].split(" ")) == 2
    for secret in (sub.secrets[0].secret, rotated.secrets[-1].secret):
        spec_verify(secret, r.headers, r.body, now=int(r.at.timestamp()))


async def test_a_crash_between_insert_and_drop_creates_nothing_twice(
    store: tuple[Store, FakeClock],
) -> None:
    s, clock = store
    service = WebhookService(s, clock, CATEGORIES, check_target=local_only)
    await service.create("https://example.com/a", EVENT_TYPES)
    await service.create("https://example.com/b", EVENT_TYPES)
    m = subject("a")
    await s.insert_messages([m])
    assert await s.transition(m.id, S.SKIPPED, clock.now(), expect=[S.PENDING], reason="x")

    class Crash(Exception):
        pass

    emitter = WebhookEmitter(s, clock)
    original = s.drop_webhook_journal

    async def crash(entries: Any) -> int:
        raise Crash

    s.drop_webhook_journal = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        await emitter.emit_once()
    s.drop_webhook_journal = original  # type: ignore[method-assign]
    assert await emitter.emit_once() == 1  # the same entry again
    assert await emitter.emit_once() == 0
    deliveries = [d for d in await s.unpublished(100) if d.channel == WEBHOOK_CHANNEL]
    assert len(deliveries) == 2  # one per subscription, not four
    assert {d.content["event_id"] for d in deliveries} == {status_event_id(m.id, "skipped")}


async def test_through_the_pipeline_a_receiver_down_10_minutes_gets_every_event(
    tmp_path: Path,
) -> None:
    """The whole path: a push and a skip recorded by the consumer, journaled with the
    change, turned into deliveries by the scheduler's emitter, published by the outbox,
    claimed by the consumer and sent by the shared channel sender's webhook channel."""
    from datetime import time

    from scheduler.jobs import run_webhook_emitter
    from tests.support.pipeline import pipeline
    from tests.support.waiting import drive

    start = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
    nine = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
    up_at = nine + timedelta(minutes=10)
    receiver = Receiver(FakeClock(start), lambda now: 200 if now >= up_at else 500)
    async with (
        serving(receiver) as url,
        pipeline(tmp_path, start=start, webhook_allow_private_hosts="127.0.0.1") as p,
    ):
        receiver.clock = p.clock
        sub = await WebhookService(p.rt.store, p.clock, p.rt.categories.names).create(
            f"{url}/hooks", EVENT_TYPES
        )
        stop = asyncio.Event()
        emitter = asyncio.create_task(run_webhook_emitter(p.rt, stop))
        try:
            _, device = await p.add_user("ana", reminders=[("breakfast", "meal", time(9, 0))])
            await p.add_user("ben", reminders=[("breakfast", "meal", time(9, 0))])
            await p.rt.store.set_preferences("ben", {"meal": False})
            await p.rt.creator.plan_window(start, start + timedelta(hours=24))
            ana = {m.id for m in await p.messages("ana")}
            ben = {m.id for m in await p.messages("ben")}
            expected = {
                status_event_id(next(iter(ana)), "sent"),
                status_event_id(next(iter(ben)), "skipped"),
            }
            p.clock.set(nine)

            def done() -> bool:
                return {r.headers["webhook-id"] for r in receiver.accepted()} >= expected

            await drive(p.clock, done, step=timedelta(seconds=10), max_steps=1500, what="events")
        finally:
            stop.set()
            await emitter

    assert p.received_for(device.push_token)  # the push itself went out
    failures = [r for r in receiver.requests if r.status == 500]
    assert failures and all(r.at < up_at for r in failures)
    accepted = receiver.accepted()
    assert sorted(r.headers["webhook-id"] for r in accepted) == sorted(expected)  # once each
    for r in accepted:
        spec_verify(sub.secrets[0].secret, r.headers, r.body, now=int(r.at.timestamp()))
    by_type = {json.loads(r.body)["type"]: json.loads(r.body)["data"] for r in accepted}
    assert by_type["message.sent"]["user_id"] == "ana"
    assert by_type["message.skipped"]["reason"] == "opted_out"
    assert {d["channel"] for d in by_type.values()} == {"push"}
