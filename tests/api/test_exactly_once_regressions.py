"""Regression tests for the holes in the core promise (issue 9), each named after its scenario.

Every scenario here is something an app does on an ordinary day; each one lost,
refused or stalled a message before the fix. They run through the HTTP API on
a real runtime (SQLite, embedded broker, fake clock, fake push provider).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, START
from tests.api.helpers import (
    TOKEN,
    create_user,
    drain_due,
    notification_body,
    ok,
    overlap_writes,
    reminder_body,
    scene,
)
from tests.support.fake_push import FakePush

ALICE = "/v1/users/alice"


async def statuses(rt: Runtime, user_id: str) -> list[tuple[str, str | None, str]]:
    """(status, local date, scheduled_at) of every message, oldest first."""
    page = await rt.store.list_messages(MessageQuery(user_id=user_id, limit=500))
    return sorted(
        (
            m.status.value,
            m.local_date.isoformat() if m.local_date else None,
            m.scheduled_at.isoformat(),
        )
        for m in page.items
    )


async def pending_local_dates(rt: Runtime, user_id: str) -> list[str]:
    page = await rt.store.list_messages(MessageQuery(user_id=user_id, limit=500))
    return sorted(
        m.local_date.isoformat()
        for m in page.items
        if m.status is MessageStatus.PENDING and m.local_date is not None
    )


# --------------------------------------------------------------- 1. slots identify the intent


async def test_two_oneoffs_at_one_instant_in_one_category_are_both_accepted_and_sent(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush
) -> None:
    await scene(client)
    send_at = "2027-03-01T10:00:00+07:00"
    for key in ("chat-1", "chat-2"):
        r = await client.post(
            f"{ALICE}/notifications",
            json=notification_body(idempotency_key=key, send_at=send_at, body=key),
            headers=ADMIN,
        )
        assert r.status_code == 201, r.text
    clock.set(datetime.fromisoformat(send_at))
    await drain_due(rt)
    assert sorted(r.body for r in push.requests) == ["chat-1", "chat-2"]


async def test_two_send_now_oneoffs_in_one_instant_are_both_accepted(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush
) -> None:
    """The clock does not move between them (MongoDB's millisecond, or a fast client)."""
    await scene(client)
    codes = [
        (
            await client.post(
                f"{ALICE}/notifications",
                json=notification_body(idempotency_key=f"now-{n}", body=f"n{n}"),
                headers=ADMIN,
            )
        ).status_code
        for n in range(3)
    ]
    assert codes == [201, 201, 201]
    await drain_due(rt)
    assert sorted(r.body for r in push.requests) == ["n0", "n1", "n2"]


async def test_quiet_hours_defer_two_oneoffs_to_one_end_instant_and_both_are_sent(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush
) -> None:
    await scene(client)
    await ok(
        await client.put(
            ALICE,
            json={"timezone": "Asia/Jakarta", "quiet_hours": {"start": "22:00", "end": "07:00"}},
            headers=ADMIN,
        )
    )
    for key, at in (("a", "2027-03-01T23:00:00+07:00"), ("b", "2027-03-01T23:30:00+07:00")):
        r = await client.post(
            f"{ALICE}/notifications",
            json=notification_body(idempotency_key=key, send_at=at, body=key),
            headers=ADMIN,
        )
        assert r.status_code == 201, r.text
        assert r.json()["scheduled_at"] == "2027-03-02T00:00:00Z"  # 07:00 in Jakarta
    clock.set(datetime.fromisoformat("2027-03-02T07:00:00+07:00"))
    await drain_due(rt)
    assert sorted(r.body for r in push.requests) == ["a", "b"]


async def test_send_time_deferral_of_two_messages_to_one_end_of_quiet_hours_sends_both(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush
) -> None:
    """Quiet hours set after planning: the consumer defers both messages at send time,
    to the same end instant. Neither may be refused and left in `sending`."""
    await scene(client)
    at = "2027-03-01T21:00:00+07:00"
    for key in ("a", "b"):
        await ok(
            await client.post(
                f"{ALICE}/notifications",
                json=notification_body(idempotency_key=key, send_at=at, body=key),
                headers=ADMIN,
            )
        )
    await ok(
        await client.put(
            ALICE,
            json={"timezone": "Asia/Jakarta", "quiet_hours": {"start": "20:00", "end": "07:00"}},
            headers=ADMIN,
        )
    )
    clock.set(datetime.fromisoformat(at))
    await drain_due(rt)
    assert push.requests == []
    oneoffs = [
        m
        for m in (await rt.store.list_messages(MessageQuery("alice", limit=50))).items
        if m.reminder_id is None
    ]
    assert {m.status for m in oneoffs} == {MessageStatus.PENDING}
    clock.set(datetime.fromisoformat("2027-03-02T07:00:00+07:00"))
    await drain_due(rt)
    assert sorted(r.body for r in push.requests if r.body in ("a", "b")) == ["a", "b"]


async def test_deferral_the_store_refuses_ends_failed_with_its_reason_not_stuck_in_sending(
    client: httpx.AsyncClient,
    rt: Runtime,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await scene(client)
    at = "2027-03-01T21:00:00+07:00"
    r = await ok(
        await client.post(
            f"{ALICE}/notifications", json=notification_body(send_at=at), headers=ADMIN
        )
    )
    await ok(
        await client.put(
            ALICE,
            json={"timezone": "Asia/Jakarta", "quiet_hours": {"start": "20:00", "end": "07:00"}},
            headers=ADMIN,
        )
    )
    real = rt.store.transition

    async def refuse_back_to_pending(message_id: str, to: MessageStatus, *a: Any, **k: Any) -> bool:
        if to is MessageStatus.PENDING:
            return False  # what a unique index refusing the row looks like
        return await real(message_id, to, *a, **k)

    monkeypatch.setattr(rt.store, "transition", refuse_back_to_pending)
    clock.set(datetime.fromisoformat(at))
    await drain_due(rt)
    m = await rt.store.get_message(r.json()["id"])
    assert m is not None
    assert (m.status, m.status_reason) == (MessageStatus.FAILED, "deferral_failed")


# --------------------------------------------------------------- 3. re-planning


async def test_delete_then_recreate_a_reminder_with_the_same_id_plans_the_new_time(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    await scene(client)  # alice: lunch at 12:00 Jakarta
    r = await client.delete(f"{ALICE}/reminders/lunch", headers=ADMIN)
    assert r.status_code == 204, r.text
    await ok(
        await client.put(
            f"{ALICE}/reminders/lunch", json=reminder_body(local_time="13:00"), headers=ADMIN
        )
    )
    page = await rt.store.list_messages(MessageQuery("alice", limit=50))
    pending = sorted(
        m.scheduled_at.isoformat() for m in page.items if m.status is MessageStatus.PENDING
    )
    # 13:00 in Jakarta is 06:00Z, on both dates of the 48 h window.
    assert pending == ["2027-03-01T06:00:00+00:00", "2027-03-02T06:00:00+00:00"]


async def test_two_overlapping_user_puts_leave_every_local_date_planned(
    client: httpx.AsyncClient, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client's retried PUT arrives while the first is still re-planning."""
    await scene(client)
    before = await pending_local_dates(rt, "alice")
    assert before == ["2027-03-01", "2027-03-02"]
    overlap_writes(monkeypatch, rt, "upsert_user", 2)
    body = {"timezone": "Europe/London"}
    results = await asyncio.gather(*(client.put(ALICE, json=body, headers=ADMIN) for _ in range(2)))
    assert all(r.is_success for r in results), [r.text for r in results]
    assert await pending_local_dates(rt, "alice") == before
    page = await rt.store.list_messages(MessageQuery("alice", limit=50))
    live = Counter(m.live_key for m in page.items if m.status is not MessageStatus.CANCELLED)
    assert all(n == 1 for n in live.values()), live


async def test_two_overlapping_reminder_edits_leave_the_last_time_planned(
    client: httpx.AsyncClient, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await scene(client)
    overlap_writes(monkeypatch, rt, "upsert_reminder", 3)
    results = await asyncio.gather(
        *(
            client.put(f"{ALICE}/reminders/lunch", json=reminder_body(local_time=t), headers=ADMIN)
            for t in ("12:30", "13:00", "13:30")
        )
    )
    assert all(r.is_success for r in results)
    stored = await rt.store.get_reminder("alice", "lunch")
    assert stored is not None
    page = await rt.store.list_messages(MessageQuery("alice", limit=50))
    pending = [m for m in page.items if m.status is MessageStatus.PENDING]
    assert sorted(m.local_date.isoformat() for m in pending if m.local_date) == [
        "2027-03-01",
        "2027-03-02",
    ]
    assert {m.local_time for m in pending} == {stored.local_time}


async def test_of_two_overlapping_puts_of_a_new_reminder_only_the_inserting_one_is_201(
    client: httpx.AsyncClient, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read "no such reminder" before either writes; only the write that inserted
    it may answer 201 Created."""
    await scene(client)
    overlap_writes(monkeypatch, rt, "upsert_reminder", 2)
    results = await asyncio.gather(
        *(
            client.put(f"{ALICE}/reminders/supper", json=reminder_body(title=t), headers=ADMIN)
            for t in ("Supper", "Dinner")
        )
    )
    assert sorted(r.status_code for r in results) == [200, 201], [r.text for r in results]


async def test_of_two_overlapping_puts_of_a_new_user_only_the_inserting_one_is_201(
    client: httpx.AsyncClient, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read "no such user" before either writes; only the write that inserted it
    may answer 201 Created, and the user is stored as the later write left it."""
    overlap_writes(monkeypatch, rt, "upsert_user", 2)
    results = await asyncio.gather(
        *(
            client.put("/v1/users/bob", json={"timezone": zone}, headers=ADMIN)
            for zone in ("Asia/Jakarta", "Europe/Paris")
        )
    )
    assert sorted(r.status_code for r in results) == [200, 201], [r.text for r in results]
    stored = await rt.store.get_user("bob")
    assert stored is not None
    assert stored.timezone == results[1].json()["timezone"]


async def test_replan_keeps_a_message_deferred_by_quiet_hours(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush
) -> None:
    """Lunch at 12:00 falls in quiet hours 11:00-13:00 and waits until 13:00. At 12:30 the
    user widens quiet hours to 13:30: today's lunch must still arrive (at 13:30), not be
    cancelled because its nominal 12:00 has passed."""
    await create_user(client, "alice", quiet_hours={"start": "11:00", "end": "13:00"})
    await ok(
        await client.put(f"{ALICE}/devices/phone-1", json={"push_token": TOKEN}, headers=ADMIN)
    )
    await ok(await client.put(f"{ALICE}/reminders/lunch", json=reminder_body(), headers=ADMIN))
    clock.set(datetime.fromisoformat("2027-03-01T12:30:00+07:00"))
    await ok(
        await client.put(
            ALICE,
            json={"timezone": "Asia/Jakarta", "quiet_hours": {"start": "11:00", "end": "13:30"}},
            headers=ADMIN,
        )
    )
    assert "2027-03-01" in await pending_local_dates(rt, "alice")
    clock.set(datetime.fromisoformat("2027-03-01T13:00:00+07:00"))
    await drain_due(rt)  # still quiet: deferred again, to 13:30
    clock.set(datetime.fromisoformat("2027-03-01T13:30:00+07:00"))
    await drain_due(rt)
    assert [r.title for r in push.requests] == ["Lunch"]


# --------------------------------------------------------------- 4. the outbox


async def test_oneoff_accepted_while_the_broker_is_down_is_sent_once_it_is_back(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush, monkeypatch: pytest.MonkeyPatch
) -> None:
    await scene(client)

    async def broker_down(*_: Any, **__: Any) -> None:
        raise ConnectionError("broker unreachable")

    real = rt.broker.publish
    monkeypatch.setattr(rt.broker, "publish", broker_down)
    r = await client.post(f"{ALICE}/notifications", json=notification_body(), headers=ADMIN)
    assert r.status_code == 201, r.text  # accepted: stored with its outbox mark
    again = await client.post(f"{ALICE}/notifications", json=notification_body(), headers=ADMIN)
    assert again.status_code == 200 and again.json()["id"] == r.json()["id"]
    monkeypatch.setattr(rt.broker, "publish", real)
    await drain_due(rt)  # the outbox's next pass publishes it
    assert [x.message_id for x in push.requests] == [r.json()["id"]]


def record_publishes(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    """Every (queue, body) the broker is asked to publish from now on, in order."""
    published: list[tuple[str, bytes]] = []
    real = rt.broker.publish

    async def counting(queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        published.append((queue, body))
        await real(queue, body, delay_seconds)

    monkeypatch.setattr(rt.broker, "publish", counting)
    return published


async def test_reminders_put_through_the_api_are_published_in_batches_per_due_second(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """250 users each PUT a reminder for 09:00 UTC, as apps do: the broker sees at most
    one message per 100 ids and due second, not one per user."""
    published = record_publishes(rt, monkeypatch)
    for n in range(250):
        user = f"u{n:03d}"
        await create_user(client, user, "UTC")
        await ok(
            await client.put(
                f"/v1/users/{user}/reminders/r",
                json=reminder_body(local_time="09:00"),
                headers=ADMIN,
            )
        )
    assert published == []  # due hours ahead: nothing published per call
    clock.set(START + timedelta(hours=8, minutes=55))
    await rt.outbox.flush()
    assert len(published) == 2  # two full batches of the 250 ids due at 09:00:00
    clock.set(START + timedelta(hours=8, minutes=59, seconds=58))
    await rt.outbox.flush()
    assert len(published) == 3  # the last 50 once soon due, never one per user
    assert sorted(len(json.loads(body)["ids"]) for _, body in published) == [50, 100, 100]


async def test_reminders_put_minutes_before_their_instant_are_published_by_the_loop_in_batches(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10: the same 250 PUTs three minutes before 09:00, inside the outbox's
    publish-ahead window: no call publishes its own one-id broker message; the
    publisher loop's next pass publishes them in full batches."""
    published = record_publishes(rt, monkeypatch)
    clock.set(START + timedelta(hours=8, minutes=57))
    for n in range(250):
        user = f"u{n:03d}"
        await create_user(client, user, "UTC")
        await ok(
            await client.put(
                f"/v1/users/{user}/reminders/r",
                json=reminder_body(local_time="09:00"),
                headers=ADMIN,
            )
        )
    assert published == []
    await rt.outbox.flush()  # the publisher loop's pass
    assert len(published) == 2  # the full batches; 50 ids wait to fill
    clock.set(START + timedelta(hours=8, minutes=59, seconds=58))
    await rt.outbox.flush()
    assert len(published) == 3


async def test_reminders_put_between_publisher_passes_still_make_full_batches(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10's API burst: the PUTs for one instant arrive over many passes of the
    publisher loop (a few dozen each); each pass used to publish its few dozen ids as
    one broker message, and the consumer then sent Expo requests of that size."""
    published = record_publishes(rt, monkeypatch)
    clock.set(START + timedelta(hours=8, minutes=58))
    for n in range(250):
        user = f"u{n:03d}"
        await create_user(client, user, "UTC")
        await ok(
            await client.put(
                f"/v1/users/{user}/reminders/r",
                json=reminder_body(local_time="09:00"),
                headers=ADMIN,
            )
        )
        if n % 30 == 29:
            clock.advance(timedelta(seconds=1))
            await rt.outbox.flush()  # the loop's pass, every second
    clock.set(START + timedelta(hours=8, minutes=59, seconds=57))
    await rt.outbox.flush()
    assert sorted(len(json.loads(body)["ids"]) for _, body in published) == [50, 100, 100]
    ids = [i for _, body in published for i in json.loads(body)["ids"]]
    assert len(ids) == len(set(ids)) == 250


async def test_a_reminder_put_seconds_before_its_instant_is_published_by_the_call(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    published = record_publishes(rt, monkeypatch)
    await create_user(client, "u1", "UTC")
    clock.set(START + timedelta(hours=8, minutes=59, seconds=58))
    await ok(
        await client.put(
            "/v1/users/u1/reminders/r", json=reminder_body(local_time="09:00"), headers=ADMIN
        )
    )
    assert len(published) == 1  # due before the loop could be relied on: not left to it


# --------------------------------------------------------------- 6. device ids are scoped


async def test_another_user_registering_the_same_device_id_leaves_mine_active(
    client: httpx.AsyncClient,
) -> None:
    await scene(client)  # alice: phone-1
    await ok(
        await client.put(
            "/v1/users/bob/devices/phone-1",
            json={"push_token": "ExponentPushToken[bob-phone]"},
            headers=ADMIN,
        )
    )
    mine = (await ok(await client.get(f"{ALICE}/devices", headers=ADMIN))).json()
    assert [(d["device_id"], d["active"]) for d in _items(mine)] == [("phone-1", True)]


async def test_a_token_moving_to_another_user_ends_the_old_binding(
    client: httpx.AsyncClient,
) -> None:
    await scene(client)
    await ok(
        await client.put("/v1/users/bob/devices/tablet", json={"push_token": TOKEN}, headers=ADMIN)
    )
    mine = (await ok(await client.get(f"{ALICE}/devices", headers=ADMIN))).json()
    assert [(d["device_id"], d["active"]) for d in _items(mine)] == [("phone-1", False)]
    bobs = (await ok(await client.get("/v1/users/bob/devices", headers=ADMIN))).json()
    assert [(d["device_id"], d["active"]) for d in _items(bobs)] == [("tablet", True)]


def _items(body: Any) -> list[dict[str, Any]]:
    return list(body["devices"])
