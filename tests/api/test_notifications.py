"""One-off notifications: idempotent on their key, even under concurrency."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx

from tepat.clock import FakeClock
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, problem
from tests.api.helpers import TOKEN, drain_due, notification_body, scene
from tests.support.fake_push import FakePush

URL = "/v1/users/alice/notifications"


async def test_repeat_returns_the_same_message_and_a_changed_body_conflicts(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    await scene(client)
    first = await client.post(URL, json=notification_body(), headers=ADMIN)
    assert first.status_code == 201, first.text
    again = await client.post(URL, json=notification_body(), headers=ADMIN)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert first.json()["status"] == "pending"

    for changed in (
        notification_body(body="Something else"),
        notification_body(data={"screen": "other"}),
        notification_body(send_at="2027-03-01T10:00:00+07:00"),
    ):
        body = problem(await client.post(URL, json=changed, headers=ADMIN), 409)
        assert "idempotency_key" in str(body["detail"])

    page = await rt.store.list_messages(MessageQuery(user_id="alice", limit=50))
    assert [m.id for m in page.items if m.reminder_id is None] == [first.json()["id"]]


async def test_same_key_for_another_user_is_another_message(client: httpx.AsyncClient) -> None:
    await scene(client)
    a = await client.post(URL, json=notification_body(), headers=ADMIN)
    b = await client.post("/v1/users/bob/notifications", json=notification_body(), headers=ADMIN)
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


async def test_send_at_is_kept_in_utc(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await scene(client)
    r = await client.post(
        URL, json=notification_body(send_at="2027-03-01T10:00:00+07:00"), headers=ADMIN
    )
    assert r.status_code == 201, r.text
    assert r.json()["scheduled_at"] == "2027-03-01T03:00:00Z"
    assert r.json()["local_date"] == "2027-03-01"
    assert r.json()["local_time"] == "10:00"


async def test_twenty_concurrent_identical_posts_create_one_message_and_one_send(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush
) -> None:
    """Checks both: one message in the store, one broker batch, and - after the
    consumer code path has run every due batch - exactly one push request."""
    await scene(client)
    responses = await asyncio.gather(
        *(client.post(URL, json=notification_body(), headers=ADMIN) for _ in range(20))
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 19 + [201], [r.text for r in responses if r.status_code >= 300]
    assert len({r.json()["id"] for r in responses}) == 1

    page = await rt.store.list_messages(MessageQuery(user_id="alice", limit=200))
    oneoffs = [m for m in page.items if m.reminder_id is None]
    assert len(oneoffs) == 1
    queue = rt.categories.get("custom").queue_name
    (stats,) = await rt.broker.stats([queue])
    assert stats.ready + stats.scheduled == 1  # one batch on the broker

    assert await drain_due(rt) == 1
    assert [r.push_token for r in push.requests] == [TOKEN]
    sent = await rt.store.get_message(oneoffs[0].id)
    assert sent is not None and sent.status == "sent"

    # And a late repeat still returns it, now sent, without sending again.
    late = await client.post(URL, json=notification_body(), headers=ADMIN)
    assert late.status_code == 200 and late.json()["status"] == "sent"
    assert await drain_due(rt) == 0
    assert len(push.requests) == 1


async def test_scheduled_one_off_waits_for_its_instant(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush
) -> None:
    await scene(client)
    send_at = clock.now() + timedelta(hours=2)
    r = await client.post(URL, json=notification_body(send_at=send_at.isoformat()), headers=ADMIN)
    assert r.status_code == 201
    assert await drain_due(rt) == 0
    clock.advance(timedelta(hours=2))
    assert await drain_due(rt) == 1
    assert len(push.requests) == 1
