"""Invalid input is a 422 problem+json naming the offending field, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, error_fields, problem
from tests.api.helpers import notification_body, reminder_body, scene


@pytest.fixture(autouse=True)
async def _scene(client: httpx.AsyncClient) -> None:
    await scene(client)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/users/alice", {"timezone": "Mars/Base"}, "timezone"),
        ("/v1/users/alice", {"timezone": ""}, "timezone"),
        ("/v1/users/alice", {"timezone": "UTC", "locale": "not a locale"}, "locale"),
        (
            "/v1/users/alice",
            {"timezone": "UTC", "quiet_hours": {"start": "25:00", "end": "07:00"}},
            "quiet_hours.start",
        ),
        (
            "/v1/users/alice",
            {"timezone": "UTC", "quiet_hours": {"start": "22:00", "end": "22:00"}},
            "quiet_hours.end",
        ),
        ("/v1/users/alice", {"timezone": "UTC", "colour": "blue"}, "colour"),
        ("/v1/users/alice", {}, "timezone"),
        ("/v1/users/alice/reminders/r", reminder_body(local_time="24:00"), "local_time"),
        ("/v1/users/alice/reminders/r", reminder_body(local_time="9:7"), "local_time"),
        ("/v1/users/alice/reminders/r", reminder_body(local_time="12:00 "), "local_time"),
        ("/v1/users/alice/reminders/r", reminder_body(category="gossip"), "category"),
        ("/v1/users/alice/reminders/r", reminder_body(days=[]), "days"),
        ("/v1/users/alice/reminders/r", reminder_body(days=["mon", "funday"]), "days"),
        ("/v1/users/alice/reminders/r", reminder_body(title=""), "title"),
        ("/v1/users/alice/reminders/r", reminder_body(title="x" * 201), "title"),
        ("/v1/users/alice/reminders/r", reminder_body(data=[1, 2]), "data"),
        ("/v1/users/alice/reminders/r", reminder_body(data={"blob": "x" * 3600}), "data"),
        ("/v1/users/alice/devices/d", {"push_token": "not-a-token"}, "push_token"),
        ("/v1/users/alice/devices/d", {"push_token": "ExponentPushToken[]"}, "push_token"),
        (
            "/v1/users/alice/devices/d",
            {"push_token": "ExpoPushToken[a]", "platform": "tv"},
            "platform",
        ),
        ("/v1/users/alice/preferences", {"categories": {"gossip": False}}, "categories.gossip"),
        ("/v1/users/alice/preferences", {"categories": {"meal": "maybe"}}, "categories.meal"),
        ("/v1/users/-alice", {"timezone": "UTC"}, "user_id"),
        ("/v1/users/alice/devices/a%20b", {"push_token": "ExpoPushToken[a]"}, "device_id"),
    ],
)
async def test_put_names_the_field(
    client: httpx.AsyncClient, path: str, body: Any, field: str
) -> None:
    r = await client.put(path, json=body, headers=ADMIN)
    assert field in error_fields(r), r.text


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"send_at": "2027-03-01T10:00:00"}, "send_at"),  # no offset
        ({"send_at": "2027-03-01"}, "send_at"),
        ({"send_at": 1804000000}, "send_at"),  # a number is not ISO 8601
        ({"send_at": "2099-03-01T10:00:00Z"}, "send_at"),  # beyond a year ahead
        ({"send_at": "9999-12-31T23:59:59-14:00"}, "send_at"),  # overflows in UTC
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "has space"}, "idempotency_key"),
        ({"category": "gossip"}, "category"),
        ({"title": 42}, "title"),
        ({"data": "text"}, "data"),
    ],
)
async def test_notification_names_the_field(
    client: httpx.AsyncClient, overrides: dict[str, Any], field: str
) -> None:
    r = await client.post(
        "/v1/users/alice/notifications", json=notification_body(**overrides), headers=ADMIN
    )
    assert field in error_fields(r), r.text


async def test_missing_fields_are_each_named(client: httpx.AsyncClient) -> None:
    r = await client.put("/v1/users/alice/reminders/r", json={"category": "meal"}, headers=ADMIN)
    assert {"local_time", "title", "body"} <= error_fields(r)


async def test_body_that_is_not_json(client: httpx.AsyncClient) -> None:
    r = await client.put(
        "/v1/users/alice",
        content=b'{"timezone": ',
        headers={**ADMIN, "Content-Type": "application/json"},
    )
    assert error_fields(r) == {"body"}


async def test_body_that_is_not_an_object(client: httpx.AsyncClient) -> None:
    r = await client.put("/v1/users/alice", json=["UTC"], headers=ADMIN)
    problem(r, 422)


async def test_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    r = await client.put(
        "/v1/users/alice", json={"timezone": "UTC", "locale": "x" * 100_000}, headers=ADMIN
    )
    problem(r, 413)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("from=2027-03-01T00:00:00", "from"),
        ("to=yesterday", "to"),
        ("status=lost", "status.0"),
        ("limit=0", "limit"),
        ("limit=1000", "limit"),
        ("cursor=%21%21%21", "cursor"),
        ("from=2027-03-02T00:00:00Z&to=2027-03-01T00:00:00Z", "to"),
    ],
)
async def test_message_query_names_the_parameter(
    client: httpx.AsyncClient, query: str, field: str
) -> None:
    r = await client.get(f"/v1/users/alice/messages?{query}", headers=ADMIN)
    assert field in error_fields(r), r.text


async def test_unencoded_plus_in_query_offset_is_understood(client: httpx.AsyncClient) -> None:
    r = await client.get(
        "/v1/users/alice/messages", params={"from": "2027-03-01T07:00:00+07:00"}, headers=ADMIN
    )
    assert r.status_code == 200
    raw = "/v1/users/alice/messages?from=2027-03-01T07:00:00+07:00"  # '+' arrives as ' '
    assert (await client.get(raw, headers=ADMIN)).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/users/nobody", None),
        ("GET", "/v1/users/nobody/devices", None),
        ("PUT", "/v1/users/nobody/devices/d", {"push_token": "ExpoPushToken[a]"}),
        ("DELETE", "/v1/users/alice/devices/no-such-device", None),
        ("GET", "/v1/users/nobody/reminders", None),
        ("PUT", "/v1/users/nobody/reminders/r", reminder_body()),
        ("DELETE", "/v1/users/alice/reminders/no-such-reminder", None),
        ("GET", "/v1/users/nobody/preferences", None),
        ("PUT", "/v1/users/nobody/preferences", {"categories": {}}),
        ("POST", "/v1/users/nobody/notifications", notification_body()),
        ("GET", "/v1/users/nobody/messages", None),
        ("POST", "/v1/admin/dead-letters/nope/replay", None),
    ],
)
async def test_unknown_resources_are_404(
    client: httpx.AsyncClient, method: str, path: str, body: Any
) -> None:
    problem(await client.request(method, path, json=body, headers=ADMIN), 404)


async def test_deleting_a_device_twice_is_harmless(client: httpx.AsyncClient) -> None:
    for _ in range(2):
        r = await client.delete("/v1/users/alice/devices/phone-1", headers=ADMIN)
        assert r.status_code == 204
    (device,) = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert device["active"] is False
    assert device["deactivated_reason"] == "unregistered"


async def test_admin_plan_window_is_checked(client: httpx.AsyncClient) -> None:
    backwards = {"start": "2027-03-02T00:00:00Z", "end": "2027-03-01T00:00:00Z"}
    assert error_fields(await client.post("/v1/admin/plan", json=backwards, headers=ADMIN)) == {
        "end"
    }
    naive = {"start": "2027-03-01T00:00:00", "end": "2027-03-02T00:00:00Z"}
    assert error_fields(await client.post("/v1/admin/plan", json=naive, headers=ADMIN)) == {"start"}


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        (
            "/v1/users/alice/reminders/r",
            b'{"category": "meal", "local_time": "12:00", "title": "t", "body": "b",'
            b' "label": "\\ud800"}',
            "label",
        ),
        ("/v1/users/alice/devices/d", b'{"push_token": "ExpoPushToken[\\udfff]"}', "push_token"),
        (
            "/v1/users/alice/reminders/r",
            b'{"category": "meal", "local_time": "12:00", "title": "t", "body": "b",'
            b' "data": {"k": "\\ud800"}}',
            "data",
        ),
        (
            "/v1/users/alice/reminders/r",
            b'{"category": "meal", "local_time": "12:00", "title": "t", "body": "b",'
            b' "data": {"k": NaN}}',
            "data",
        ),
    ],
)
async def test_text_that_cannot_be_stored_is_refused(
    client: httpx.AsyncClient, path: str, raw: bytes, field: str
) -> None:
    r = await client.put(path, content=raw, headers={**ADMIN, "Content-Type": "application/json"})
    assert field in error_fields(r), r.text


async def test_unexpected_failure_is_a_problem_not_a_traceback(
    app: FastAPI, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(user_id: str) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(rt.store, "get_user", broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
        body = problem(await c.get("/v1/users/alice", headers=ADMIN), 500)
    assert "disk on fire" not in str(body)  # details stay in the server log
