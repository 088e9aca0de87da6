"""Invalid input is a 422 problem+json naming the offending field, never a 500."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, JWT_SECRET, error_fields, problem
from tests.api.helpers import create_user, notification_body, reminder_body, scene


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
        # No APNs provider in this deployment: nothing could send to the device.
        ("/v1/users/alice/devices/d", {"push_token": "ab" * 32, "kind": "apns"}, "kind"),
        ("/v1/users/alice/devices/d", {"push_token": "ExpoPushToken[a]", "kind": "x"}, "kind"),
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


# ---- instants and numbers at the ends of the calendar: 422 naming the field, never a 500 ----


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01T00:00:00+01:00",  # 31 December of year 0 in UTC
        "0001-01-01T23:00:00+23:59",
        "0001-01-01T00:00:00.000001+00:01",
    ],
)
@pytest.mark.parametrize("param", ["from", "to"])
async def test_messages_from_or_to_before_year_one_in_utc_is_422_naming_it(
    client: httpx.AsyncClient, param: str, value: str
) -> None:
    r = await client.get("/v1/users/alice/messages", params={param: value}, headers=ADMIN)
    assert error_fields(r) == {param}, r.text
    assert "out of range" in r.text


@pytest.mark.parametrize(
    "value",
    ["9999-12-31T23:59:59-01:00", "9999-12-31T01:00:00-23:59", "9999-12-31T23:59:59.999999-00:01"],
)
@pytest.mark.parametrize("param", ["from", "to"])
async def test_messages_from_or_to_after_year_9999_in_utc_is_422_naming_it(
    client: httpx.AsyncClient, param: str, value: str
) -> None:
    r = await client.get("/v1/users/alice/messages", params={param: value}, headers=ADMIN)
    assert error_fields(r) == {param}, r.text


async def test_messages_from_and_to_at_the_very_ends_of_utc_are_accepted(
    client: httpx.AsyncClient,
) -> None:
    params = {"from": "0001-01-01T00:00:00Z", "to": "9999-12-31T23:59:59.999999Z"}
    r = await client.get("/v1/users/alice/messages", params=params, headers=ADMIN)
    assert r.status_code == 200, r.text
    # The same instants spelled with offsets that stay inside the calendar.
    params = {"from": "0001-01-01T00:00:00-01:00", "to": "9999-12-31T22:59:59+01:00"}
    r = await client.get("/v1/users/alice/messages", params=params, headers=ADMIN)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "0001-01-01T12:00:00+14:00"])
async def test_notification_send_at_before_year_one_in_utc_is_422_naming_send_at(
    client: httpx.AsyncClient, value: str
) -> None:
    r = await client.post(
        "/v1/users/alice/notifications", json=notification_body(send_at=value), headers=ADMIN
    )
    assert error_fields(r) == {"send_at"}, r.text


@pytest.mark.parametrize(
    ("window", "field"),
    [
        ({"start": "0001-01-01T00:00:00+01:00", "end": "2027-03-01T00:00:00Z"}, "start"),
        ({"start": "2027-03-01T00:00:00Z", "end": "9999-12-31T23:59:59-01:00"}, "end"),
        # Both in the calendar, but compared across offsets that leave it.
        ({"start": "9999-12-31T23:59:59-01:00", "end": "9999-12-31T23:59:59Z"}, "start"),
    ],
)
async def test_admin_plan_start_or_end_outside_the_calendar_in_utc_is_422_naming_it(
    client: httpx.AsyncClient, window: dict[str, str], field: str
) -> None:
    r = await client.post("/v1/admin/plan", json=window, headers=ADMIN)
    assert error_fields(r) == {field}, r.text


@pytest.mark.parametrize(
    ("window", "field"),
    [
        # Valid UTC instants whose local dates (a day either side, in every zone) are not.
        ({"start": "0001-01-01T00:00:00Z", "end": "0001-01-02T00:00:00Z"}, "start"),
        ({"start": "9999-12-30T00:00:00Z", "end": "9999-12-31T23:59:59Z"}, "start"),
        ({"start": "9999-12-28T00:00:00Z", "end": "9999-12-31T00:00:00Z"}, "end"),
    ],
)
async def test_admin_plan_window_at_the_ends_of_the_calendar_is_422_naming_it(
    client: httpx.AsyncClient, window: dict[str, str], field: str
) -> None:
    r = await client.post("/v1/admin/plan", json=window, headers=ADMIN)
    assert error_fields(r) == {field}, r.text
    assert "out of range" in r.text


async def test_admin_plan_window_just_inside_the_calendar_plans_every_zone(
    client: httpx.AsyncClient,
) -> None:
    for user, zone in (("east", "Pacific/Kiritimati"), ("west", "Etc/GMT+12")):
        await create_user(client, user, zone)
        r = await client.put(f"/v1/users/{user}/reminders/r", json=reminder_body(), headers=ADMIN)
        assert r.is_success, r.text
    for window in (
        {"start": "0001-01-03T00:00:00Z", "end": "0001-01-05T00:00:00Z"},
        {"start": "9999-12-27T00:00:00Z", "end": "9999-12-29T00:00:00Z"},
    ):
        r = await client.post("/v1/admin/plan", json=window, headers=ADMIN)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("exp", ["NaN", "Infinity", "-Infinity"])
async def test_a_token_whose_exp_is_not_a_finite_number_is_refused(
    client: httpx.AsyncClient, exp: str
) -> None:
    # Python's JSON reads NaN and Infinity; NaN compares false both ways, so an exp of
    # NaN used to mean "never expires".
    header = _b64url(b'{"alg":"HS256","typ":"JWT"}')
    claims = _b64url(b'{"sub":"alice","exp":' + exp.encode() + b"}")
    signing_input = f"{header}.{claims}".encode()
    signature = _b64url(hmac.new(JWT_SECRET.encode(), signing_input, hashlib.sha256).digest())
    r = await client.get(
        "/v1/users/alice", headers={"Authorization": f"Bearer {header}.{claims}.{signature}"}
    )
    assert problem(r, 401)["detail"] == "invalid token: exp and nbf must be numbers"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


_OFFSET_MINUTES = st.integers(-(24 * 60 - 1), 24 * 60 - 1)
_NEAR_THE_ENDS = st.one_of(
    st.datetimes(max_value=datetime(1, 1, 4)),
    st.datetimes(min_value=datetime(9999, 12, 28)),
    st.datetimes(),
)


@st.composite
def extreme_instants(draw: st.DrawFn) -> str:
    """ISO 8601 text of any wall time in years 1-9999 with any offset under a day."""
    naive = draw(_NEAR_THE_ENDS)
    offset = timezone(timedelta(minutes=draw(_OFFSET_MINUTES)))
    return naive.replace(tzinfo=offset).isoformat()  # spelling it never converts it


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(first=extreme_instants(), second=extreme_instants())
async def test_extreme_instants_in_every_datetime_parameter_are_never_a_500(
    client: httpx.AsyncClient, first: str, second: str
) -> None:
    """Whatever the instant, each datetime parameter answers 2xx or a 422 naming itself."""
    requests: list[tuple[str, str, dict[str, Any], set[str]]] = [
        ("GET", "/v1/users/alice/messages", {"params": {"from": first}}, {"from"}),
        ("GET", "/v1/users/alice/messages", {"params": {"to": first}}, {"to"}),
        (
            "GET",
            "/v1/users/alice/messages",
            {"params": {"from": first, "to": second}},
            {"from", "to"},
        ),
        (
            "POST",
            "/v1/users/alice/notifications",
            {"json": notification_body(idempotency_key=f"x{hash(first)}", send_at=first)},
            {"send_at"},
        ),
        ("POST", "/v1/admin/plan", {"json": {"start": first, "end": second}}, {"start", "end"}),
    ]
    for method, path, kwargs, fields in requests:
        r = await client.request(method, path, headers=ADMIN, **kwargs)
        if r.status_code == 422:
            assert error_fields(r) <= fields, (method, path, kwargs, r.text)
        else:
            assert r.is_success, (method, path, kwargs, r.text)
