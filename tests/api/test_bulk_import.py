"""``POST /v1/bulk/users``: many whole users at once, per-item results, idempotent."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from datetime import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tepat.adapters.sqlite import SqliteStore
from tepat.clock import FakeClock
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.users import PlanTarget
from tepat.runtime import Runtime
from tepat.services.bulk_import import MAX_ITEMS
from tests.api.conftest import ADMIN, STORES, bearer, problem, runtime_on
from tests.api.helpers import create_user, ok, reminder_body
from tests.support.fake_push import FakePush

URL = "/v1/bulk/users"


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    """Every test here on both stores: the batch writes are adapter code."""
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_bulk") as r:
        yield r


NDJSON = {**ADMIN, "Content-Type": "application/x-ndjson"}


def item(user_id: str, n: int = 0, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user_id": user_id,
        "timezone": "Asia/Jakarta",
        "devices": [{"device_id": "phone", "push_token": f"ExponentPushToken[{user_id}-{n}]"}],
        "reminders": [
            {"reminder_id": "breakfast", **reminder_body(local_time="07:30", label="b")},
            {"reminder_id": "lunch", **reminder_body(local_time="12:00", label="l")},
            {"reminder_id": "dinner", **reminder_body(local_time="19:00", label="d")},
        ],
    }
    body.update(overrides)
    return body


def ndjson(items: list[Any]) -> str:
    return "\n".join(json.dumps(i) for i in items) + "\n"


async def plan_of(rt: Runtime, user_id: str) -> list[tuple[Any, ...]]:
    pending = await rt.store.pending_for_user(user_id)
    return sorted((m.reminder_id, m.local_date, m.scheduled_at) for m in pending)


def first_field(body: dict[str, object]) -> object:
    errors = body["errors"]
    assert isinstance(errors, list) and errors
    return errors[0]["field"]


async def all_messages(rt: Runtime) -> int:
    counts = await rt.store.count_messages()
    return sum(counts.by_status_category_channel.values())


async def test_json_array_creates_users_devices_reminders_and_plans_them(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    r = await ok(await client.post(URL, json=[item("a"), item("b")], headers=ADMIN))
    body = r.json()
    assert [(i["index"], i["user_id"], i["status"]) for i in body["items"]] == [
        (0, "a", "created"),
        (1, "b", "created"),
    ]
    assert (body["created"], body["updated"], body["unchanged"], body["errors"]) == (2, 0, 0, 0)
    devices = (await ok(await client.get("/v1/users/a/devices", headers=ADMIN))).json()
    assert [(d["device_id"], d["active"]) for d in devices["devices"]] == [("phone", True)]
    reminders = (await ok(await client.get("/v1/users/b/reminders", headers=ADMIN))).json()
    assert sorted(x["reminder_id"] for x in reminders["reminders"]) == [
        "breakfast",
        "dinner",
        "lunch",
    ]
    # Planned over the horizon as the single PUTs would plan the same user.
    await create_user(client, "single")
    for rem in item("single")["reminders"]:
        rid = rem.pop("reminder_id")
        await ok(await client.put(f"/v1/users/single/reminders/{rid}", json=rem, headers=ADMIN))
    expected = await plan_of(rt, "single")
    assert expected
    assert await plan_of(rt, "a") == expected


async def test_ndjson_with_valid_and_invalid_items_answers_each(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    bad_time = item("c")
    bad_time["reminders"][0]["local_time"] = "25:00"
    lines = [
        json.dumps(item("a")),
        "{not json",
        json.dumps(item("b", timezone="Mars/Base")),
        json.dumps(bad_time),
        json.dumps(item("d", extra=1)),
        json.dumps(item("e", devices=[{"device_id": "p", "push_token": "nope"}])),
        json.dumps(item("f", reminders=[{"reminder_id": "x", **reminder_body(category="??")}])),
        json.dumps(item("g")),
    ]
    r = await ok(await client.post(URL, content="\n".join(lines), headers=NDJSON))
    out = r.json()["items"]
    assert [i["status"] for i in out] == ["created"] + ["error"] * 6 + ["created"]

    def fields(index: int) -> list[str]:
        problem_doc = out[index]["problem"]
        assert problem_doc["status"] == 422 and problem_doc["detail"]
        return [e["field"] for e in problem_doc["errors"]]

    assert fields(1) == ["items[1]"]
    assert fields(2) == ["items[2].timezone"]
    assert out[2]["user_id"] == "b"
    assert fields(3) == ["items[3].reminders[0].local_time"]
    assert fields(4) == ["items[4].extra"]
    assert fields(5) == ["items[5].devices[0].push_token"]
    assert fields(6) == ["items[6].reminders[0].category"]
    # A failed item writes nothing at all.
    for user_id in ("b", "c", "d", "e", "f"):
        problem(await client.get(f"/v1/users/{user_id}", headers=ADMIN), 404)
    assert await rt.store.pending_for_user("c") == []
    assert await plan_of(rt, "g")


async def test_ndjson_lines_end_only_at_newline(client: httpx.AsyncClient) -> None:
    odd = item("a")
    odd["reminders"][0]["title"] = "Line\u2028separator\u0085next\x1ctoo"
    body = json.dumps(odd, ensure_ascii=False) + "\r\n\n" + json.dumps(item("b")) + "\r\n"
    r = await ok(await client.post(URL, content=body.encode(), headers=NDJSON))
    assert [i["status"] for i in r.json()["items"]] == ["created", "created"]
    got = (await ok(await client.get("/v1/users/a/reminders", headers=ADMIN))).json()
    titles = {x["reminder_id"]: x["title"] for x in got["reminders"]}
    assert titles["breakfast"] == odd["reminders"][0]["title"]


async def test_repeating_an_import_changes_nothing_and_plans_nothing(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock
) -> None:
    items = [item(f"u{n}") for n in range(5)]
    await ok(await client.post(URL, json=items, headers=ADMIN))
    before = await all_messages(rt)
    users_before = [await rt.store.get_user(f"u{n}") for n in range(5)]
    r = await ok(await client.post(URL, content=ndjson(items), headers=NDJSON))
    assert [i["status"] for i in r.json()["items"]] == ["unchanged"] * 5
    assert await all_messages(rt) == before
    assert [await rt.store.get_user(f"u{n}") for n in range(5)] == users_before


async def test_changes_re_plan_only_what_changed(client: httpx.AsyncClient, rt: Runtime) -> None:
    await ok(await client.post(URL, json=[item("a"), item("b")], headers=ADMIN))
    b_plan = await plan_of(rt, "b")
    changed = item("a")
    changed["reminders"][1]["local_time"] = "12:30"
    r = await ok(await client.post(URL, json=[changed, item("b")], headers=ADMIN))
    assert [i["status"] for i in r.json()["items"]] == ["updated", "unchanged"]
    assert await plan_of(rt, "b") == b_plan
    lunch = [m for m in await rt.store.pending_for_user("a") if m.reminder_id == "lunch"]
    assert lunch and all(m.scheduled_at.minute == 30 for m in lunch)
    cancelled = await rt.store.count_messages()
    assert any(s == MessageStatus.CANCELLED for s, _, _ in cancelled.by_status_category_channel)
    # A zone change through the import re-plans every reminder of that user.
    moved = item("b", timezone="Europe/London")
    await ok(await client.post(URL, json=[moved], headers=ADMIN))
    assert {m.timezone for m in await rt.store.pending_for_user("b")} == {"Europe/London"}


async def test_fields_left_out_keep_their_values(client: httpx.AsyncClient) -> None:
    await create_user(client, "a", locale="id", quiet_hours={"start": "22:00", "end": "06:00"})
    await ok(await client.post(URL, json=[item("a", reminders=[])], headers=ADMIN))
    user = (await ok(await client.get("/v1/users/a", headers=ADMIN))).json()
    assert (user["locale"], user["quiet_hours"]) == ("id", {"start": "22:00", "end": "06:00"})
    r = await ok(await client.post(URL, json=[item("a", quiet_hours=None)], headers=ADMIN))
    assert r.json()["items"][0]["status"] == "updated"
    user = (await ok(await client.get("/v1/users/a", headers=ADMIN))).json()
    assert user["quiet_hours"] is None


async def test_concurrent_repeats_of_one_import_create_nothing_twice(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    items = [item(f"u{n}") for n in range(20)]
    responses = await asyncio.gather(
        *(client.post(URL, json=items, headers=ADMIN) for _ in range(4))
    )
    statuses = [[i["status"] for i in (await ok(r)).json()["items"]] for r in responses]
    for n in range(20):
        column = [s[n] for s in statuses]
        assert column.count("created") == 1, column
    # Exactly one message per (user, reminder, local date), whichever import planned it.
    for n in range(20):
        pending = await rt.store.pending_for_user(f"u{n}")
        keys = [(m.reminder_id, m.local_date) for m in pending]
        assert keys and len(keys) == len(set(keys))
    await ok(await client.post(URL, json=[item("single")], headers=ADMIN))
    assert len(await rt.store.pending_for_user("u0")) == len(
        await rt.store.pending_for_user("single")
    )


async def test_a_token_moves_from_another_user_like_a_device_put(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    await ok(await client.post(URL, json=[item("alice")], headers=ADMIN))
    alice_token = item("alice")["devices"][0]["push_token"]
    bob = item("bob", devices=[{"device_id": "phone", "push_token": alice_token}])
    await ok(await client.post(URL, json=[bob], headers=ADMIN))
    active = await rt.store.active_devices(["alice", "bob"])
    assert {u: [d.push_token for d in ds] for u, ds in active.items()} == {"bob": [alice_token]}
    [old] = await rt.store.list_devices("alice")
    assert old.deactivated_reason == "replaced"


async def test_one_request_naming_a_token_or_user_twice_fails_the_later_item(
    client: httpx.AsyncClient,
) -> None:
    token = item("a")["devices"][0]["push_token"]
    items = [
        item("a"),
        item("b", devices=[{"device_id": "x", "push_token": token}]),
        item("a"),
    ]
    out = (await ok(await client.post(URL, json=items, headers=ADMIN))).json()["items"]
    assert [i["status"] for i in out] == ["created", "error", "error"]
    assert out[1]["problem"]["errors"][0]["field"] == "items[1].devices[0].push_token"
    assert out[2]["problem"]["errors"][0]["field"] == "items[2].user_id"


async def test_user_token_cannot_import(client: httpx.AsyncClient, clock: FakeClock) -> None:
    problem(await client.post(URL, json=[item("alice")]), 401)
    problem(await client.post(URL, json=[item("alice")], headers=bearer("alice", clock)), 403)
    problem(await client.get("/v1/users/alice", headers=ADMIN), 404)


async def test_a_body_that_is_not_json_or_ndjson_is_a_problem(client: httpx.AsyncClient) -> None:
    body = problem(await client.post(URL, content=b"{nope", headers=ADMIN), 400)
    assert body["errors"] == [{"field": "body", "message": "request body is not valid JSON"}]
    problem(await client.post(URL, content=b"garbage\nmore", headers=NDJSON), 400)
    body = problem(await client.post(URL, json={"user_id": "a"}, headers=ADMIN), 422)
    assert first_field(body) == "body"
    problem(await client.post(URL, content=b"\xff\xfe", headers=ADMIN), 400)
    problem(await client.post(URL, content=b"[" * 100_000, headers=ADMIN), 400)
    problem(await client.post(URL, content=b"[" * 100_000, headers=NDJSON), 400)
    text = {**ADMIN, "Content-Type": "text/plain"}
    problem(await client.post(URL, content=b"[]", headers=text), 415)
    r = await ok(await client.post(URL, json=[], headers=ADMIN))
    assert r.json()["items"] == []


async def test_more_items_than_the_limit_is_422_naming_it(client: httpx.AsyncClient) -> None:
    items = [{"user_id": f"u{n}", "timezone": "UTC"} for n in range(MAX_ITEMS + 1)]
    body = problem(await client.post(URL, json=items, headers=ADMIN), 422)
    assert first_field(body) == "items"
    assert str(MAX_ITEMS) in str(body["detail"])
    body = problem(await client.post(URL, content=ndjson(items), headers=NDJSON), 422)
    assert first_field(body) == "items"


async def test_openapi_documents_the_import(client: httpx.AsyncClient) -> None:
    doc = (await ok(await client.get("/openapi.json"))).json()
    operation = doc["paths"][URL]["post"]
    assert set(operation["requestBody"]["content"]) == {"application/json", "application/x-ndjson"}
    assert "BulkUserIn" in doc["components"]["schemas"]
    assert "BulkReminderIn" in doc["components"]["schemas"]


async def test_a_plan_run_after_an_import_finds_nothing_to_plan(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    """The import leaves each new user a planning mark, as a re-plan does: the periodic
    plan run neither reads them again nor creates anything."""
    items = [item(f"u{n}") for n in range(10)]
    items.append(item("off", enabled=False))
    await ok(await client.post(URL, json=items, headers=ADMIN))
    before = await all_messages(rt)
    result = await rt.creator.plan_ahead()
    assert (result.created, result.users_planned) == (0, 0)
    assert await all_messages(rt) == before
    # A later change drops the mark: the next run plans that user again.
    changed = item("u3")
    changed["reminders"][0]["local_time"] = "08:45"
    await ok(await client.post(URL, json=[changed], headers=ADMIN))
    await rt.store.upsert_reminder(
        dataclasses.replace(
            await rt.store.get_reminder("u4", "lunch") or pytest.fail("no reminder"),
            local_time=time(13, 0),
        )
    )
    result = await rt.creator.plan_ahead()
    assert result.users_planned == 1  # u4 (written behind the API's back); u3 re-planned


async def test_a_change_between_the_write_and_the_planning_is_planned_from_the_store(
    client: httpx.AsyncClient, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import plans a new user from the reminders it wrote only while nothing changed
    them since: a reminder another request moves in between is planned as stored."""
    if isinstance(rt.store, SqliteStore):
        pytest.skip("SQLite plans them in the write's own transaction: no window between")
    read_targets = rt.store.get_plan_targets

    async def change_first(user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        lunch = await rt.store.get_reminder("a", "lunch") or pytest.fail("no reminder")
        await rt.store.upsert_reminder(dataclasses.replace(lunch, local_time=time(12, 40)))
        return await read_targets(user_ids)

    monkeypatch.setattr(rt.store, "get_plan_targets", change_first)
    await ok(await client.post(URL, json=[item("a")], headers=ADMIN))
    lunch = [m for m in await rt.store.pending_for_user("a") if m.reminder_id == "lunch"]
    assert lunch and all(m.local_time == time(12, 40) for m in lunch)
    monkeypatch.undo()
    result = await rt.creator.plan_ahead()
    assert result.created == 0  # and the mark it left holds: nothing left to plan


async def test_payload_rules_name_the_field_as_the_single_put_does(
    client: httpx.AsyncClient,
) -> None:
    big = item("a")
    big["reminders"][2]["data"] = {"blob": "x" * 3000}
    big["reminders"][2]["body"] = "y" * 1000
    nan = item("b")
    nan["reminders"][0]["data"] = {"n": float("nan")}
    body = "[" + ",".join(json.dumps(i) for i in (big, nan, item("c"))) + "]"
    r = await ok(await client.post(URL, content=body, headers=ADMIN))
    out = r.json()["items"]
    assert [i["status"] for i in out] == ["error", "error", "created"]
    assert out[0]["problem"]["errors"][0]["field"] == "items[0].reminders[2].data"
    assert "too large" in out[0]["problem"]["errors"][0]["message"]
    assert out[1]["problem"]["errors"][0]["field"] == "items[1].reminders[0].data"
    same = {k: v for k, v in big["reminders"][2].items() if k != "reminder_id"}
    single = problem(await client.put("/v1/users/c/reminders/x", json=same, headers=ADMIN), 422)
    assert single["errors"] == [
        {"field": "data", "message": out[0]["problem"]["errors"][0]["message"]}
    ]
