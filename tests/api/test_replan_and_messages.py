"""Moving a user re-plans their messages; the messages list pages through them."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import httpx

from tepat.clock import FakeClock
from tepat.metrics import refresh_gauges
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, START, problem
from tests.api.helpers import drain_due, ok, reminder_body, scene
from tests.support.fake_push import FakePush


async def all_messages(
    client: httpx.AsyncClient, user_id: str, **params: Any
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = await ok(await client.get(f"/v1/users/{user_id}/messages", params=query, headers=ADMIN))
        page = r.json()
        out.extend(page["messages"])
        cursor = page["next_cursor"]
        if cursor is None:
            return out


async def test_jakarta_to_london_replans_without_sending_a_local_date_twice(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush
) -> None:
    # alice (Asia/Jakarta, UTC+7) has lunch at 12:00 daily; at START (07:00 in
    # Jakarta) the 48 h plan holds 1 and 2 March at 05:00Z.
    await scene(client)
    before = await all_messages(client, "alice")
    assert sorted(m["scheduled_at"] for m in before) == [
        "2027-03-01T05:00:00Z",
        "2027-03-02T05:00:00Z",
    ]
    # 1 March's lunch goes out in Jakarta.
    clock.set(START + timedelta(hours=5))
    assert await drain_due(rt) == 1
    assert len(push.requests) == 1

    # Then she flies to London (06:00 there, still 1 March).
    clock.set(START + timedelta(hours=6))
    version = (await ok(await client.get("/v1/users/alice", headers=ADMIN))).json()["plan_version"]
    moved = await ok(
        await client.put("/v1/users/alice", json={"timezone": "Europe/London"}, headers=ADMIN)
    )
    assert moved.json()["plan_version"] > version

    after = await all_messages(client, "alice")
    by_status = Counter(m["status"] for m in after)
    assert by_status == {"sent": 1, "cancelled": 1, "pending": 1}, after
    (cancelled,) = [m for m in after if m["status"] == "cancelled"]
    assert cancelled["timezone"] == "Asia/Jakarta"
    assert cancelled["local_date"] == "2027-03-02"
    assert cancelled["status_reason"] == "superseded"
    pending = sorted((m for m in after if m["status"] == "pending"), key=lambda m: m["local_date"])
    # London's 12:00 on 1 March (12:00Z) lies in the new 48 h window, but 1 March
    # was already sent in Jakarta: it is not planned again.
    assert [(m["local_date"], m["scheduled_at"], m["timezone"]) for m in pending] == [
        ("2027-03-02", "2027-03-02T12:00:00Z", "Europe/London"),
    ]
    live = [m["local_date"] for m in after if m["status"] != "cancelled"]
    assert len(live) == len(set(live)), live

    # Saying the same again changes nothing.
    await ok(await client.put("/v1/users/alice", json={"timezone": "Europe/London"}, headers=ADMIN))
    assert len(await all_messages(client, "alice")) == len(after)


async def test_changing_a_reminder_replans_only_its_messages(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    await scene(client)
    await ok(
        await client.put(
            "/v1/users/alice/reminders/dinner",
            json=reminder_body(label="dinner", local_time="19:00"),
            headers=ADMIN,
        )
    )
    r = await ok(
        await client.put(
            "/v1/users/alice/reminders/lunch",
            json=reminder_body(local_time="12:30"),
            headers=ADMIN,
        )
    )
    assert r.json()["version"] == 2
    msgs = await all_messages(client, "alice")
    lunch_pending = [m for m in msgs if m["reminder_id"] == "lunch" and m["status"] == "pending"]
    assert {m["scheduled_at"][11:16] for m in lunch_pending} == {"05:30"}
    assert all(m["status"] == "pending" for m in msgs if m["reminder_id"] == "dinner")

    # An identical PUT is not a change: no new version, nothing re-planned.
    same = await ok(
        await client.put(
            "/v1/users/alice/reminders/lunch", json=reminder_body(local_time="12:30"), headers=ADMIN
        )
    )
    assert same.json()["version"] == 2
    assert len(await all_messages(client, "alice")) == len(msgs)

    # Deleting cancels its pending messages.
    assert (
        await client.delete("/v1/users/alice/reminders/lunch", headers=ADMIN)
    ).status_code == 204
    msgs = await all_messages(client, "alice")
    assert {m["status"] for m in msgs if m["reminder_id"] == "lunch"} == {"cancelled"}
    reminders = (await client.get("/v1/users/alice/reminders", headers=ADMIN)).json()["reminders"]
    assert [r["reminder_id"] for r in reminders] == ["dinner"]


async def test_messages_pagination_filters_and_order(client: httpx.AsyncClient) -> None:
    await scene(client)
    plan = await ok(
        await client.post(
            "/v1/admin/plan",
            json={"start": START.isoformat(), "end": (START + timedelta(days=10)).isoformat()},
            headers=ADMIN,
        )
    )
    # The re-plan planned the first 48 h and marked them: the window is planned after them.
    assert plan.json() == {"created": 8, "existing": 0}

    pages = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/users/alice/messages", params=params, headers=ADMIN)).json()
        pages.append(page["messages"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    flat = [m for p in pages for m in p]
    assert len({m["id"] for m in flat}) == 10
    instants = [m["scheduled_at"] for m in flat]
    assert instants == sorted(instants, reverse=True)  # newest scheduled first
    assert set(flat[0]) >= {
        "id", "category", "reminder_id", "label", "local_date", "local_time", "timezone",
        "scheduled_at", "status", "status_reason", "attempts", "ticket_id", "created_at",
        "updated_at",
    }  # fmt: skip
    assert flat[0]["label"] == "lunch" and flat[0]["local_time"] == "12:00"

    window = await all_messages(
        client, "alice", **{"from": "2027-03-03T00:00:00+07:00", "to": "2027-03-05T00:00:00+07:00"}
    )
    assert [m["local_date"] for m in window] == ["2027-03-04", "2027-03-03"]
    assert await all_messages(client, "alice", status="sent") == []
    assert len(await all_messages(client, "alice", status=["pending", "sent"])) == 10


async def test_preferences_merge_and_list_every_category(client: httpx.AsyncClient) -> None:
    await scene(client)
    r = await ok(
        await client.put(
            "/v1/users/alice/preferences", json={"categories": {"mood": False}}, headers=ADMIN
        )
    )
    prefs = r.json()["categories"]
    assert prefs["mood"] is False and prefs["meal"] is True and "safety" in prefs
    await ok(
        await client.put(
            "/v1/users/alice/preferences", json={"categories": {"meal": False}}, headers=ADMIN
        )
    )
    got = (await client.get("/v1/users/alice/preferences", headers=ADMIN)).json()["categories"]
    assert (got["mood"], got["meal"]) == (False, False)


async def test_user_put_keeps_fields_left_out(client: httpx.AsyncClient) -> None:
    await scene(client)
    await ok(
        await client.put(
            "/v1/users/alice",
            json={"timezone": "Asia/Jakarta", "quiet_hours": {"start": "22:00", "end": "07:00"}},
            headers=ADMIN,
        )
    )
    r = await ok(
        await client.put("/v1/users/alice", json={"timezone": "Asia/Jakarta"}, headers=ADMIN)
    )
    assert r.json()["quiet_hours"] == {"start": "22:00", "end": "07:00"}
    r = await ok(
        await client.put(
            "/v1/users/alice", json={"timezone": "Asia/Jakarta", "quiet_hours": None}, headers=ADMIN
        )
    )
    assert r.json()["quiet_hours"] is None


async def test_device_token_moves_between_devices(client: httpx.AsyncClient) -> None:
    await scene(client)
    token = "ExponentPushToken[shared]"
    await ok(
        await client.put("/v1/users/alice/devices/a", json={"push_token": token}, headers=ADMIN)
    )
    await ok(await client.put("/v1/users/bob/devices/b", json={"push_token": token}, headers=ADMIN))
    alice = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert {d["device_id"]: d["active"] for d in alice} == {"phone-1": True, "a": False}
    bob = (await client.get("/v1/users/bob/devices", headers=ADMIN)).json()["devices"]
    assert [(d["device_id"], d["active"]) for d in bob] == [("b", True)]


async def test_dead_letters_and_queues(client: httpx.AsyncClient, rt: Runtime) -> None:
    from tests.api.helpers import make_broker_dead_letter

    dead_id = await make_broker_dead_letter(rt)
    body = (await client.get("/v1/admin/dead-letters", headers=ADMIN)).json()
    assert body["messages"] == []
    assert [(d["id"], d["body"], d["attempts"]) for d in body["broker"]] == [
        (dead_id, "not a batch", 2)
    ]
    queues = (await client.get("/v1/admin/queues", headers=ADMIN)).json()["queues"]
    by_name = {q["queue"]: q for q in queues}
    # every queue the consumers read: the critical ones first, then by category priority
    assert [q["queue"] for q in queues][:4] == [
        "tepat.push.critical",
        "tepat.inbox.critical",
        "tepat.safety",
        "tepat.meal",
    ]
    assert {"tepat.inbox.normal", "tepat.inbox.bulk", "tepat.webhooks"} <= set(by_name)
    assert by_name["tepat.safety"]["dead_letters"] == 1
    r = await client.post(f"/v1/admin/dead-letters/{dead_id}/replay", headers=ADMIN)
    assert r.json() == {"id": dead_id, "replayed": True}
    problem(await client.post(f"/v1/admin/dead-letters/{dead_id}/replay", headers=ADMIN), 404)


async def test_readyz_and_metrics(client: httpx.AsyncClient, rt: Runtime) -> None:
    await scene(client)
    ready = (await client.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["tzdata"]
    await refresh_gauges(rt)  # in `serve` a background task does this (tepat/metrics.py)
    text = (await client.get("/metrics")).text
    assert 'tepat_messages{category="meal",channel="push",status="pending"} 2.0' in text
    assert 'tepat_queue_depth{queue="tepat.meal",state="scheduled"}' in text
    assert f'tepat_tzdata_info{{release="{ready["tzdata"]}"}} 1.0' in text

    await rt.store.close()  # the store goes away: not ready, still alive
    r = await client.get("/readyz")
    body = problem(r, 503)
    assert body["checks"]["broker"] == "ok" and body["checks"]["store"] != "ok"  # type: ignore[index]
    assert (await client.get("/healthz")).status_code == 200
    await rt.store.open()


async def test_failed_messages_are_listed_with_their_payload(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush
) -> None:
    from tepat.ports.push import TicketError
    from tests.api.helpers import notification_body

    await scene(client)
    push.refuse_with = TicketError("MessageTooBig", "too big", permanent=True)
    r = await client.post("/v1/users/alice/notifications", json=notification_body(), headers=ADMIN)
    assert r.status_code == 201
    assert await drain_due(rt) == 1
    body = (await client.get("/v1/admin/dead-letters", headers=ADMIN)).json()
    (failed,) = body["messages"]
    assert failed["id"] == r.json()["id"] and failed["status"] == "failed"
    assert (failed["title"], failed["body"], failed["data"]) == (
        "Hello",
        "A one-off",
        {"screen": "home"},
    )
    assert "MessageTooBig" in failed["last_error"] and failed["attempts"] == 1
    assert body["broker"] == []
