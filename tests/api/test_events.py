"""``POST /v1/events`` and its fan-out, on both stores: routing, templates, idempotency,
crash and resume, local times across zones, and the status handle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tepat.clock import FakeClock
from tepat.domain.models import Message, MessageStatus
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime, event_service
from tepat.services.events import EventService
from tests.api.conftest import ADMIN, START, STORES, bearer, error_fields, problem, runtime_on
from tests.api.helpers import create_user, drain_due, ok
from tests.support.fake_push import FakePush

PUSH_EN = {"title": "Order {{ order }} paid", "body": "Thanks, {{ amount }} received"}
INBOX_EN = {"title": "Paid: {{ order }}", "body": "{{ amount }} received", "link": "/orders"}


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    """Events, recipients, cursors and keys are adapter code: every test on both stores."""
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_events") as r:
        yield r


def events(app: FastAPI) -> EventService:
    service: EventService = app.state.events
    return service


def event_body(event_id: str = "ord-8841", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event_id": event_id,
        "type": "order.paid",
        "user_ids": ["alice"],
        "data": {"order": "8841", "amount": "$12"},
        "occurred_at": "2027-03-01T07:00:00+07:00",
    }
    body.update(overrides)
    return body


async def templates(client: httpx.AsyncClient, locale: str = "en", **parts: Any) -> None:
    for channel, base in (("push", PUSH_EN), ("inbox", INBOX_EN)):
        body = {**base, **parts}
        r = await client.put(
            f"/v1/templates/order.paid/{channel}/{locale}", json=body, headers=ADMIN
        )
        assert r.status_code in (200, 201), r.text


async def user_with_phone(client: httpx.AsyncClient, user_id: str, **extra: Any) -> None:
    await create_user(client, user_id, **extra)
    token = f"ExponentPushToken[{user_id}-phone]"
    await ok(
        await client.put(
            f"/v1/users/{user_id}/devices/phone", json={"push_token": token}, headers=ADMIN
        )
    )


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/events", json=body, headers=ADMIN)


async def status(client: httpx.AsyncClient, event_id: str = "ord-8841") -> dict[str, Any]:
    r = await ok(await client.get(f"/v1/events/{event_id}", headers=ADMIN))
    return dict(r.json())


async def event_messages(rt: Runtime, user_id: str, channel: str = "push") -> list[Message]:
    page = await rt.store.list_messages(MessageQuery(user_id=user_id, limit=200))
    return [m for m in page.items if m.dedup_key.startswith("e|") and m.channel == channel]


async def test_order_paid_reaches_push_and_inbox_once(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush, clock: FakeClock
) -> None:
    await user_with_phone(client, "alice")
    await templates(client)
    r = await post(client, event_body())
    assert r.status_code == 202, r.text
    assert r.json() == {
        "event_id": "ord-8841",
        "type": "order.paid",
        "state": "fanning_out",
        "status_url": "/v1/events/ord-8841",
    }
    assert (await status(client))["recipients"] == 0  # the API answered before fan-out
    assert await events(app).fan_out_until_idle() >= 1
    await drain_due(rt)
    [sent] = push.requests
    assert (sent.title, sent.body, sent.push_token) == (
        "Order 8841 paid",
        "Thanks, $12 received",
        "ExponentPushToken[alice-phone]",
    )
    inbox = await ok(await client.get("/v1/users/alice/inbox", headers=bearer("alice", clock)))
    [item] = inbox.json()["items"]
    assert (item["title"], item["body"], item["link"]) == ("Paid: 8841", "$12 received", "/orders")
    assert item["event_type"] == "order.paid"
    got = await status(client)
    assert got["state"] == "done"
    assert (got["recipients"], got["messages_created"], got["sent"], got["failed"]) == (1, 2, 2, 0)
    assert got["channels"]["push"]["by_status"] == {"sent": 1}
    assert got["channels"]["inbox"]["sent"] == 1
    assert got["skipped"] == {}


async def test_repeats_and_twenty_concurrent_posts_create_nothing_new(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush, clock: FakeClock
) -> None:
    await user_with_phone(client, "alice")
    await templates(client)
    responses = await asyncio.gather(*(post(client, event_body()) for _ in range(20)))
    assert {r.status_code for r in responses} == {202}
    assert len({r.text for r in responses}) == 1
    await events(app).fan_out_until_idle()
    again = await post(client, event_body())
    assert again.status_code == 202 and again.json()["state"] == "done"
    await events(app).fan_out_until_idle()
    await drain_due(rt)
    assert len(push.requests) == 1
    assert len(await event_messages(rt, "alice")) == 1
    inbox = await client.get("/v1/users/alice/inbox", headers=bearer("alice", clock))
    assert len(inbox.json()["items"]) == 1
    got = await status(client)
    assert (got["recipients"], got["messages_created"]) == (1, 2)


async def test_the_same_event_id_with_another_body_is_a_409(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")
    assert (await post(client, event_body())).status_code == 202
    r = await post(client, event_body(data={"order": "9999", "amount": "$1"}))
    assert "different request" in str(problem(r, 409)["detail"])


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"type": "order.shipped"}, "type"),
        ({"type": "Not A Type"}, "type"),
        ({"event_id": "has space"}, "event_id"),
        ({"user_ids": None}, "user_ids"),
        ({"user_ids": []}, "user_ids"),
        ({"all_users": True}, "user_ids"),
        ({"user_ids": ["ok", "bad id"]}, "user_ids.1"),
        ({"user_ids": "alice"}, "user_ids"),
        ({"occurred_at": "yesterday"}, "occurred_at"),
        ({"occurred_at": "2027-03-01T07:00:00"}, "occurred_at"),
        ({"priority": "urgent"}, "priority"),
        ({"local_time": "25:00"}, "local_time"),
        ({"local_time": "09:00", "send_at": "2027-03-01T09:00:00Z"}, "local_time"),
        ({"send_at": "2030-03-01T09:00:00Z"}, "send_at"),
        ({"data": {"blob": "x" * 20_000}}, "data"),
        ({"data": []}, "data"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, overrides: dict[str, Any], field: str
) -> None:
    body = event_body(**overrides)
    if body.get("user_ids") is None:
        body.pop("user_ids")
    assert field in error_fields(await post(client, body))


async def test_missing_fields_are_named(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/events", json={}, headers=ADMIN)
    assert {"event_id", "type", "occurred_at"} <= error_fields(r)


async def test_only_the_admin_key_posts_or_reads_events(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    r = await client.post("/v1/events", json=event_body(), headers=bearer("alice", clock))
    problem(r, 403)
    problem(await client.post("/v1/events", json=event_body()), 401)
    problem(await client.get("/v1/events/x", headers=bearer("alice", clock)), 403)
    problem(await client.get("/v1/events/nope", headers=ADMIN), 404)


async def test_a_render_error_fails_that_recipient_not_the_event(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush
) -> None:
    await user_with_phone(client, "alice")
    await user_with_phone(client, "bruno", locale="pt-BR")
    await templates(client)
    # Portuguese names a variable the event does not carry: its render fails.
    await templates(client, "pt", title="Pedido {{ pedido }}")
    await post(client, event_body(user_ids=["alice", "bruno"]))
    await events(app).fan_out_until_idle()
    await drain_due(rt)
    assert [r.push_token for r in push.requests] == ["ExponentPushToken[alice-phone]"]
    [failed] = await event_messages(rt, "bruno")
    assert (failed.status, failed.status_reason) == (MessageStatus.FAILED, "render_error")
    got = await status(client)
    assert got["state"] == "done"
    assert (got["sent"], got["failed"]) == (2, 2)  # alice: push + inbox; bruno: both failed
    assert got["channels"]["push"]["by_status"] == {"sent": 1, "failed": 1}
    assert got["channels"]["inbox"]["failed"] == 1
    assert got["channels"]["push"]["failed_reasons"] == {"render_error": 1}
    assert got["channels"]["inbox"]["failed_reasons"] == {"render_error": 1}


async def test_locale_falls_back_from_pt_br_to_pt_then_the_default(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush
) -> None:
    await user_with_phone(client, "bruno", locale="pt-BR")
    await user_with_phone(client, "kenji", locale="ja")
    await templates(client)
    await templates(client, "pt", title="Pedido {{ order }} pago")
    await post(client, event_body(user_ids=["bruno", "kenji"]))
    await events(app).fan_out_until_idle()
    await drain_due(rt)
    titles = {r.push_token: r.title for r in push.requests}
    assert titles == {
        "ExponentPushToken[bruno-phone]": "Pedido 8841 pago",
        "ExponentPushToken[kenji-phone]": "Order 8841 paid",
    }


async def test_routes_unknown_users_and_opt_outs_are_counted(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime
) -> None:
    await user_with_phone(client, "alice")
    await create_user(client, "nodevice")
    await create_user(client, "quiet")
    await ok(
        await client.put(
            "/v1/users/quiet/preferences", json={"categories": {"custom": False}}, headers=ADMIN
        )
    )
    await templates(client)
    await post(client, event_body(user_ids=["alice", "nodevice", "quiet", "ghost"]))
    await events(app).fan_out_until_idle()
    await drain_due(rt)  # the preference is checked at send time, on every channel
    got = await status(client)
    assert (got["recipients"], got["unknown_users"], got["listed"]) == (4, 1, 4)
    # order.paid: inbox always, push only with an active device
    assert got["channels"]["push"]["skipped"] == {"not_routed": 2}
    assert got["channels"]["inbox"]["skipped"] == {"opted_out": 1}
    assert got["channels"]["inbox"]["sent"] == 2
    assert got["channels"]["push"]["created"] == 1


class CrashingStore:
    """The real store, failing the cursor's move once: a crash after a page's writes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.crashes = 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def advance_event(self, *args: Any, **kw: Any) -> bool:
        if self.crashes:
            self.crashes -= 1
            raise ConnectionError("crash before the cursor moved")
        moved: bool = await self._inner.advance_event(*args, **kw)
        return moved


async def test_a_crash_mid_fan_out_resumes_without_loss_or_duplicates(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush, clock: FakeClock
) -> None:
    users = [f"u{n}" for n in range(7)]
    for u in users:
        await user_with_phone(client, u)
    await templates(client)
    await post(client, event_body(user_ids=users))
    first = events(app)
    first.page_size = 3
    [event] = await rt.store.events_fanning_out(10)
    assert await first.fan_out_page(event)  # one page, then the process stops

    # A new process: its first page's writes land, then it dies before the cursor moves.
    crashing = CrashingStore(rt.store)
    restarted = event_service(rt)
    restarted.store = crashing
    restarted.page_size = 3
    [event] = await rt.store.events_fanning_out(10)
    with pytest.raises(ConnectionError):
        await restarted.fan_out_page(event)
    again = await rt.store.get_event("ord-8841")
    assert again is not None and (again.cursor, again.recipients) == ("u2", 3)

    # And another, which finishes.
    final = event_service(rt)
    final.page_size = 3
    await final.fan_out_until_idle()
    await drain_due(rt)
    assert sorted(r.push_token for r in push.requests) == sorted(
        f"ExponentPushToken[{u}-phone]" for u in users
    )
    for u in users:
        inbox = await client.get(f"/v1/users/{u}/inbox", headers=bearer(u, clock))
        assert len(inbox.json()["items"]) == 1, u
    got = await status(client)
    assert got["state"] == "done"
    assert (got["recipients"], got["sent"]) == (7, 14)
    assert got["channels"]["inbox"]["created"] == 7  # counted once, with the cursor


async def test_all_users_at_local_time_plan_each_zone_under_quiet_hours(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, clock: FakeClock
) -> None:
    # START is 2027-03-01T00:00Z: Jakarta reads 07:00, London 00:00, New York 19:00 (Feb 28).
    assert clock.now() == START
    await user_with_phone(client, "jkt", timezone="Asia/Jakarta")
    await user_with_phone(client, "lon", timezone="Europe/London")
    await user_with_phone(client, "nyc", timezone="America/New_York")
    await user_with_phone(
        client,
        "lonquiet",
        timezone="Europe/London",
        quiet_hours={"start": "08:30", "end": "10:00"},
    )
    await templates(client)
    r = await post(client, event_body(user_ids=None, all_users=True, local_time="09:00"))
    assert r.status_code == 202, r.text
    await events(app).fan_out_until_idle()
    planned = {u: (await event_messages(rt, u))[0] for u in ("jkt", "lon", "nyc", "lonquiet")}
    at = {u: (m.nominal, m.scheduled_at) for u, m in planned.items()}
    assert at == {
        "jkt": (utc(2, 0), utc(2, 0)),  # 09:00 WIB the same day
        "lon": (utc(9, 0), utc(9, 0)),
        "nyc": (utc(14, 0), utc(14, 0)),  # 09:00 EST on 1 March, not 28 February's (past)
        "lonquiet": (utc(9, 0), utc(10, 0)),  # deferred to the end of quiet hours
    }
    assert all(m.status is MessageStatus.PENDING for m in planned.values())
    got = await status(client)
    assert (got["recipients"], got["pending"], got["local_time"]) == (4, 8, "09:00")
    # the inbox items wait for each recipient's 09:00 too, on the inbox channel's queue
    assert got["channels"]["inbox"]["pending"] == 4
    inbox = {u: (await event_messages(rt, u, "inbox"))[0].scheduled_at for u in planned}
    assert inbox == {u: m.scheduled_at for u, m in planned.items()}


async def test_local_time_in_a_spring_forward_gap_follows_the_reminder_rule(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, clock: FakeClock
) -> None:
    clock.set(datetime(2027, 3, 14, 5, 0, tzinfo=UTC))  # 00:00 EST, the day clocks jump
    await user_with_phone(client, "nyc", timezone="America/New_York")
    await templates(client)
    await post(client, event_body(user_ids=["nyc"], local_time="02:30"))
    await events(app).fan_out_until_idle()
    [m] = await event_messages(rt, "nyc")
    # 02:30 does not exist that day: read with the offset before the gap (-05:00).
    assert m.nominal == datetime(2027, 3, 14, 7, 30, tzinfo=UTC)


async def test_send_at_later_plans_for_that_instant(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime
) -> None:
    await user_with_phone(client, "alice")
    await templates(client)
    await post(client, event_body(send_at="2027-03-01T12:00:00.0004+00:00"))
    await events(app).fan_out_until_idle()
    [m] = await event_messages(rt, "alice")
    assert m.nominal == datetime(2027, 3, 1, 12, 0, 0, 1000, tzinfo=UTC)  # whole ms, up


def utc(hour: int, minute: int) -> datetime:
    return datetime(2027, 3, 1, hour, minute, tzinfo=UTC)


async def test_the_scheduler_loop_fans_out_what_the_api_accepted(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush
) -> None:
    from scheduler.jobs import run_event_fanout
    from tepat.processes import SCHEDULER_PARTS
    from tests.support.waiting import eventually

    assert run_event_fanout in SCHEDULER_PARTS  # `tepat scheduler` and `tepat serve`
    await user_with_phone(client, "alice")
    await templates(client)
    await post(client, event_body())
    stop = asyncio.Event()
    loop = asyncio.create_task(run_event_fanout(rt, stop))

    async def done() -> bool:
        state: str = (await status(client))["state"]
        return state == "done"

    try:
        await eventually(done, what="the event fanned out")
    finally:
        stop.set()
        await asyncio.wait_for(loop, 5)
    await drain_due(rt)
    assert len(push.requests) == 1


async def test_an_open_inbox_stream_gets_the_event_once(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush
) -> None:
    from tepat.domain.inbox import InboxItem
    from tepat.services.inbox import InboxService
    from tests.support.waiting import eventually, stays_false

    await user_with_phone(client, "alice")
    await templates(client)
    inbox: InboxService = app.state.inbox  # the API's: the fan-out wakes its streams
    received: list[InboxItem] = []

    async def hold_open() -> None:
        async for item in await inbox.open_stream("alice", 0):
            if item is not None:
                received.append(item)

    stream = asyncio.create_task(hold_open())
    try:
        await post(client, event_body())
        await events(app).fan_out_until_idle()
        await drain_due(rt)  # the inbox channel's consumer stores it at its instant
        await eventually(lambda: len(received) == 1, what="the item on the stream")
        await asyncio.gather(*(post(client, event_body()) for _ in range(20)))
        await events(app).fan_out_until_idle()
        await drain_due(rt)
        assert await stays_false(lambda: len(received) > 1)
    finally:
        stream.cancel()
    assert received[0].title == "Paid: 8841" and received[0].event_type == "order.paid"
    await drain_due(rt)
    assert len(push.requests) == 1


async def test_a_template_edited_after_fan_out_does_not_change_what_is_sent(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush, clock: FakeClock
) -> None:
    await user_with_phone(client, "alice")
    await templates(client)
    await post(client, event_body(send_at="2027-03-01T00:10:00Z"))
    await events(app).fan_out_until_idle()
    await templates(client, title="Edited {{ order }}")  # version 2, after the message exists
    clock.advance(600)
    await drain_due(rt)
    assert [r.title for r in push.requests] == ["Order 8841 paid"]


async def test_a_retry_after_a_template_edit_renders_the_pinned_version(
    client: httpx.AsyncClient, app: FastAPI, rt: Runtime, push: FakePush, clock: FakeClock
) -> None:
    from tepat.ports.push import TicketError

    await user_with_phone(client, "alice")
    await templates(client)
    await post(client, event_body())
    await events(app).fan_out_until_idle()
    # the first attempt is refused for now (Expo's rate error: retryable, in 30 s; a
    # retry within the same second would be held on the fake clock by drain_due)
    push.refuse_with = TicketError(
        "MessageRateExceeded", "slow down", permanent=False, retry_after=30
    )
    await drain_due(rt)
    [first] = push.requests
    [m] = await event_messages(rt, "alice")
    assert m.status is MessageStatus.PENDING and m.attempts == 1  # back for a retry
    await templates(client, title="Edited {{ order }}")  # version 2, between the attempts
    push.refuse_with = None
    clock.advance(120)  # past the retry's backoff
    await drain_due(rt)
    assert (
        [r.title for r in push.requests]
        == [first.title, first.title]
        == [
            "Order 8841 paid",
            "Order 8841 paid",
        ]
    )
    [m] = await event_messages(rt, "alice")
    assert m.status is MessageStatus.SENT
