"""Issue 19, tried as an attacker would with real credentials: a user against another
user, one app key against another, a user against the operator's limits. Every scenario
runs on both stores (the token rule lives in the adapters)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from pydantic import SecretStr

from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tests.api.conftest import (
    ADMIN,
    ADMIN_KEY,
    JWT_SECRET,
    bearer,
    error_fields,
    problem,
    runtime_on,
)
from tests.api.helpers import api_with as api
from tests.api.helpers import create_user, notification_body, ok, overlap_writes, reminder_body
from tests.support.fake_push import FakePush

BILLING_KEY = "billing-key-" + "b" * 32
MARKETING_KEY = "marketing-key-" + "m" * 32
BILLING = {"X-API-Key": BILLING_KEY}
MARKETING = {"X-API-Key": MARKETING_KEY}
BOB_TOKEN = "ExponentPushToken[bob-phone]"
APP_SETTINGS: dict[str, Any] = {
    "app_keys": {"billing": SecretStr(BILLING_KEY), "marketing": SecretStr(MARKETING_KEY)},
    "app_event_types": {"marketing": ["order.paid"]},
}


@pytest.fixture(params=["sqlite", "mongo-mock"])
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_hostile") as r:
        yield r


def event(event_id: str, type_: str = "order.paid") -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": type_,
        "user_ids": ["alice"],
        "data": {"order_id": "o-1", "amount": "1", "code": "123456", "invoice_id": "i-1"},
        "occurred_at": "2027-03-01T00:00:00Z",
    }


# ---------------------------------------------------------------- 1. push token takeover


async def alice_and_bob_with_his_phone(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")
    await create_user(client, "bob")
    await ok(
        await client.put(
            "/v1/users/bob/devices/phone", json={"push_token": BOB_TOKEN}, headers=ADMIN
        )
    )


async def test_a_user_cannot_pull_another_users_push_token_onto_their_account(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await alice_and_bob_with_his_phone(client)
    r = await client.put(
        "/v1/users/alice/devices/evil",
        json={"push_token": BOB_TOKEN},
        headers=bearer("alice", clock),
    )
    problem(r, 409)
    assert [e["field"] for e in r.json()["errors"]] == ["push_token"]
    bobs = (await client.get("/v1/users/bob/devices", headers=ADMIN)).json()["devices"]
    assert [(d["device_id"], d["active"]) for d in bobs] == [("phone", True)]
    alices = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert alices == []


async def test_the_backend_moves_a_token_when_the_phone_changed_hands(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await alice_and_bob_with_his_phone(client)
    await ok(
        await client.put(
            "/v1/users/alice/devices/phone", json={"push_token": BOB_TOKEN}, headers=ADMIN
        )
    )
    bobs = (await client.get("/v1/users/bob/devices", headers=ADMIN)).json()["devices"]
    assert [(d["active"], d["deactivated_reason"]) for d in bobs] == [(False, "replaced")]


async def test_a_user_still_moves_their_own_token_between_their_devices(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    alice = bearer("alice", clock)
    token = {"push_token": "ExponentPushToken[alice]"}
    await ok(await client.put("/v1/users/alice/devices/old", json=token, headers=alice))
    await ok(await client.put("/v1/users/alice/devices/new", json=token, headers=alice))
    found = (await client.get("/v1/users/alice/devices", headers=alice)).json()["devices"]
    assert [(d["device_id"], d["active"]) for d in found] == [("new", True), ("old", False)]


async def test_one_offs_are_a_backend_operation_unless_the_deployment_allows_them(
    rt: Runtime, clock: FakeClock
) -> None:
    async with api(rt) as c:
        await create_user(c, "alice")
        problem(
            await c.post(
                "/v1/users/alice/notifications",
                json=notification_body(),
                headers=bearer("alice", clock),
            ),
            403,
        )
        await ok(
            await c.post("/v1/users/alice/notifications", json=notification_body(), headers=ADMIN)
        )
    async with api(rt, allow_user_notifications=True) as c:
        body = notification_body(idempotency_key="k-2")
        r = await c.post("/v1/users/alice/notifications", json=body, headers=bearer("alice", clock))
        assert r.status_code == 201, r.text
        # still only to themselves
        problem(
            await c.post("/v1/users/bob/notifications", json=body, headers=bearer("alice", clock)),
            403,
        )


# ---------------------------------------------------------------- 2. app keys isolated


async def test_one_app_key_cannot_claim_or_read_anothers_event(rt: Runtime) -> None:
    async with api(rt, **APP_SETTINGS) as c:
        await create_user(c, "alice")
        # marketing takes billing's next id first: both are accepted, each its own
        r = await c.post("/v1/events", json=event("inv-7"), headers=MARKETING)
        assert r.status_code == 202, r.text
        assert r.json()["status_url"] == "/v1/events/inv-7"
        mine = await c.post("/v1/events", json=event("inv-7", "invoice.overdue"), headers=BILLING)
        assert mine.status_code == 202, mine.text
        got = await ok(await c.get("/v1/events/inv-7", headers=BILLING))
        assert (got.json()["event_id"], got.json()["type"]) == ("inv-7", "invoice.overdue")
        got = await ok(await c.get("/v1/events/inv-7", headers=MARKETING))
        assert got.json()["type"] == "order.paid"
        # billing's own id is not there for marketing, nor under billing's prefix
        await ok(await c.post("/v1/events", json=event("only-billing"), headers=BILLING))
        problem(await c.get("/v1/events/only-billing", headers=MARKETING), 404)
        problem(await c.get("/v1/events/billing:only-billing", headers=MARKETING), 404)
        # the admin key sees every app's event under its namespace
        admin = await ok(await c.get("/v1/events/billing:only-billing", headers=ADMIN))
        assert admin.json()["event_id"] == "billing:only-billing"


async def test_an_app_key_posts_only_the_event_types_it_was_given(rt: Runtime) -> None:
    async with api(rt, **APP_SETTINGS) as c:
        await create_user(c, "alice")
        r = await c.post("/v1/events", json=event("otp-1", "otp.requested"), headers=MARKETING)
        problem(r, 403)
        assert [e["field"] for e in r.json()["errors"]] == ["type"]
        problem(await c.get("/v1/events/otp-1", headers=MARKETING), 404)  # nothing stored
        # an app without a list keeps what it could do before
        r = await c.post("/v1/events", json=event("otp-1", "otp.requested"), headers=BILLING)
        assert r.status_code == 202, r.text


async def test_an_app_key_event_id_leaves_room_for_its_namespace(rt: Runtime) -> None:
    async with api(rt, **APP_SETTINGS) as c:
        r = await c.post("/v1/events", json=event("x" * 128), headers=BILLING)
        assert error_fields(r) == {"event_id"}
        assert "at most 120 characters" in r.text
        r = await c.post("/v1/events", json=event("x" * 120), headers=BILLING)
        assert r.status_code == 202, r.text


# ---------------------------------------------------------------- 3. quotas and pages


async def test_a_user_cannot_register_devices_past_the_quota(rt: Runtime, clock: FakeClock) -> None:
    async with api(rt, max_devices_per_user=2) as c:
        await create_user(c, "alice")
        alice = bearer("alice", clock)
        for n in (1, 2):
            body = {"push_token": f"ExponentPushToken[a{n}]"}
            await ok(await c.put(f"/v1/users/alice/devices/d{n}", json=body, headers=alice))
        third = {"push_token": "ExponentPushToken[a3]"}
        r = await c.put("/v1/users/alice/devices/d3", json=third, headers=alice)
        problem(r, 409)
        assert [e["field"] for e in r.json()["errors"]] == ["device_id"]
        # rotating a device it has is no new device
        await ok(await c.put("/v1/users/alice/devices/d2", json=third, headers=alice))
        # a deleted device frees its place
        await ok(await c.delete("/v1/users/alice/devices/d1", headers=alice))
        body = {"push_token": "ExponentPushToken[a4]"}
        await ok(await c.put("/v1/users/alice/devices/d3", json=body, headers=alice))


async def test_a_user_cannot_create_reminders_past_the_quota(rt: Runtime, clock: FakeClock) -> None:
    async with api(rt, max_reminders_per_user=2) as c:
        await create_user(c, "alice")
        alice = bearer("alice", clock)
        for name in ("a", "b"):
            await ok(
                await c.put(
                    f"/v1/users/alice/reminders/{name}", json=reminder_body(), headers=alice
                )
            )
        r = await c.put("/v1/users/alice/reminders/c", json=reminder_body(), headers=alice)
        problem(r, 409)
        assert [e["field"] for e in r.json()["errors"]] == ["reminder_id"]
        changed = reminder_body(local_time="13:00")
        await ok(await c.put("/v1/users/alice/reminders/b", json=changed, headers=alice))


# what creates each kind: the store method, the setting of its quota, a success's status
QUOTA_BURSTS = {
    "devices": ("register_device", "max_devices_per_user", 200),
    "reminders": ("upsert_reminder", "max_reminders_per_user", 201),
}


async def _counted(rt: Runtime, kind: str) -> set[str]:
    """What counts against the quota of ``kind``: active devices, every reminder."""
    if kind == "devices":
        return {d.device_id for d in await rt.store.list_devices("alice") if d.active}
    return {r.reminder_id for r in await rt.store.list_reminders("alice")}


@pytest.mark.parametrize("kind", sorted(QUOTA_BURSTS))
async def test_a_burst_of_creates_never_passes_the_quota(
    rt: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """30 creates that all counted none before any of them wrote: 5 stay, and every one
    that did not was refused."""
    method, setting, success = QUOTA_BURSTS[kind]
    overlap_writes(monkeypatch, rt, method, 30)
    async with api(rt, **{setting: 5}) as c:
        await create_user(c, "alice")
        alice = bearer("alice", clock)
        bodies = [
            {"push_token": f"ExponentPushToken[a{n}]"} if kind == "devices" else reminder_body()
            for n in range(30)
        ]
        results = await asyncio.gather(
            *(
                c.put(f"/v1/users/alice/{kind}/x{n}", json=body, headers=alice)
                for n, body in enumerate(bodies)
            )
        )
        kept = await _counted(rt, kind)
        assert len(kept) == 5  # the gate orders the writes, so none is refused needlessly
        assert kept == {f"x{n}" for n, r in enumerate(results) if r.status_code == success}
        for r in results:
            if r.status_code != success:
                problem(r, 409)


async def test_the_quotas_have_defaults(rt: Runtime) -> None:
    assert (rt.settings.max_devices_per_user, rt.settings.max_reminders_per_user) == (20, 50)


async def _all_pages(client: httpx.AsyncClient, url: str, field: str, limit: int) -> list[Any]:
    seen: list[Any] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        page = (await ok(await client.get(url, params=params, headers=ADMIN))).json()
        assert len(page[field]) <= limit
        seen += page[field]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


async def test_every_small_list_pages_with_a_cursor(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")
    for n in range(5):
        device = {"push_token": f"ExponentPushToken[p{n}]"}
        await ok(await client.put(f"/v1/users/alice/devices/d{n}", json=device, headers=ADMIN))
        await ok(
            await client.put(f"/v1/users/alice/reminders/r{n}", json=reminder_body(), headers=ADMIN)
        )
        hook = {"url": f"https://example.com/hooks/{n}", "event_types": ["message.sent"]}
        await ok(await client.post("/v1/webhooks", json=hook, headers=ADMIN))
    template = {"title": "Paid", "body": "Order {{ order_id }}"}
    for locale in ("en", "id", "pt-BR"):
        await ok(
            await client.put(
                f"/v1/templates/order.paid/push/{locale}", json=template, headers=ADMIN
            )
        )
    for channel, address in (("email", "ana@example.com"), ("sms", "+6281234567890")):
        body = {"address": address}
        await ok(await client.put(f"/v1/users/alice/contacts/{channel}", json=body, headers=ADMIN))

    devices = await _all_pages(client, "/v1/users/alice/devices", "devices", 2)
    assert [d["device_id"] for d in devices] == [f"d{n}" for n in range(5)]
    reminders = await _all_pages(client, "/v1/users/alice/reminders", "reminders", 2)
    assert [r["reminder_id"] for r in reminders] == [f"r{n}" for n in range(5)]
    hooks = await _all_pages(client, "/v1/webhooks", "items", 2)
    whole = (await ok(await client.get("/v1/webhooks", headers=ADMIN))).json()["items"]
    assert hooks == whole and len(whole) == 5
    templates = await _all_pages(client, "/v1/templates", "templates", 2)
    assert [t["locale"] for t in templates] == ["en", "id", "pt-BR"]
    contacts = await _all_pages(client, "/v1/users/alice/contacts", "contacts", 1)
    assert [c["channel"] for c in contacts] == ["email", "sms"]


@pytest.mark.parametrize(
    "url",
    [
        "/v1/users/alice/devices",
        "/v1/users/alice/reminders",
        "/v1/users/alice/contacts",
        "/v1/templates",
        "/v1/webhooks",
    ],
)
async def test_a_list_refuses_a_limit_over_the_cap_and_a_forged_cursor(
    client: httpx.AsyncClient, url: str
) -> None:
    await create_user(client, "alice")
    assert error_fields(await client.get(url, params={"limit": 201}, headers=ADMIN)) == {"limit"}
    forged = await client.get(url, params={"cursor": "%%%"}, headers=ADMIN)
    assert error_fields(forged) == {"cursor"}


# ---------------------------------------------------------------- 6. verification


async def test_a_user_cannot_mark_their_own_contact_verified(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    alice = bearer("alice", clock)
    url = "/v1/users/alice/contacts/email"
    r = await client.put(url, json={"address": "ana@example.com", "verified": True}, headers=alice)
    problem(r, 403)
    assert [e["field"] for e in r.json()["errors"]] == ["verified"]
    assert (await client.get("/v1/users/alice/contacts", headers=ADMIN)).json()["contacts"] == []
    # the backend verifies; the user re-saving the same address keeps it, a new one does not
    body = {"address": "ana@example.com", "verified": True}
    await ok(await client.put(url, json=body, headers=ADMIN))
    same = await ok(await client.put(url, json={"address": "ana@example.com"}, headers=alice))
    assert same.json()["verified"] is True
    new = await ok(await client.put(url, json={"address": "eve@example.com"}, headers=alice))
    assert new.json()["verified"] is False


# ---------------------------------------------------------------- 8. tokens, keys, sessions


def _token(clock: FakeClock, **claims: Any) -> dict[str, str]:
    payload = {"sub": "alice", "exp": int(clock.now().timestamp()) + 3600, **claims}
    return {"Authorization": "Bearer " + jwt.encode(payload, JWT_SECRET, algorithm="HS256")}


async def test_a_token_that_lives_for_ever_is_refused(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    for exp in (1e308, clock.now().timestamp() + 2 * 86400):
        r = await client.get("/v1/users/alice", headers=_token(clock, exp=exp))
        assert "TEPAT_JWT_MAX_LIFETIME_SECONDS" in str(problem(r, 401)["detail"])
    await ok(
        await client.get(
            "/v1/users/alice", headers=_token(clock, exp=clock.now().timestamp() + 86000)
        )
    )


async def test_issuer_and_audience_are_checked_when_set(rt: Runtime, clock: FakeClock) -> None:
    async with api(rt, jwt_issuer="https://login.shop", jwt_audience="tepat") as c:
        await create_user(c, "alice")
        good = {"iss": "https://login.shop", "aud": "tepat"}
        await ok(await c.get("/v1/users/alice", headers=_token(clock, **good)))
        for claims in (
            {},
            {"aud": "tepat"},
            {"iss": "https://login.shop"},
            {**good, "iss": "https://evil"},
            {**good, "aud": "other"},
        ):
            problem(await c.get("/v1/users/alice", headers=_token(clock, **claims)), 401)


async def test_wrong_api_keys_are_throttled_per_client(rt: Runtime, clock: FakeClock) -> None:
    async with api(rt, auth_failures_per_minute=3) as c:
        for _ in range(3):
            problem(await c.get("/v1/users/alice", headers={"X-API-Key": "guess" * 8}), 401)
        r = await c.get("/v1/users/alice", headers=ADMIN)  # even the right key: no oracle
        problem(r, 429)
        assert 1 <= int(r.headers["Retry-After"]) <= 60
        # the dashboard's key check shares the count
        problem(await c.get("/dashboard/data", headers=ADMIN), 429)
        # users' tokens are not throttled with the keys
        problem(await c.get("/v1/users/alice/devices", headers=bearer("alice", clock)), 404)
        clock.advance(timedelta(seconds=61))
        problem(await c.get("/v1/users/alice", headers=ADMIN), 404)


async def test_dashboard_login_is_throttled(rt: Runtime, clock: FakeClock) -> None:
    async with api(rt, auth_failures_per_minute=2) as c:
        for _ in range(2):
            r = await c.post("/dashboard/login", data={"key": "guess"})
            assert r.status_code == 401
        r = await c.post("/dashboard/login", data={"key": ADMIN_KEY})
        assert r.status_code == 429 and r.headers["Retry-After"]
        clock.advance(timedelta(seconds=61))
        r = await c.post("/dashboard/login", data={"key": ADMIN_KEY})
        assert r.status_code == 303


async def test_logout_ends_the_session_for_every_copy_of_the_cookie(rt: Runtime) -> None:
    async with api(rt) as c:
        r = await c.post("/dashboard/login", data={"key": ADMIN_KEY})
        assert r.status_code == 303
        cookie = c.cookies.get("tepat_dashboard", path="/dashboard")
        assert cookie
        page = await c.get("/dashboard")
        marker = '<meta name="csrf-token" content="'
        csrf = page.text.split(marker, 1)[1].split('"', 1)[0]
        assert (await c.get("/dashboard/data")).status_code == 200
        r = await c.post("/dashboard/logout", data={"csrf": csrf})
        assert r.status_code == 303
        # a copy of the cookie, sent after the logout
        copied = {"Cookie": f"tepat_dashboard={cookie}"}
        problem(await c.get("/dashboard/data", headers=copied), 401)


async def test_logout_in_one_api_process_ends_the_session_in_the_others(rt: Runtime) -> None:
    # Two apps over one store: two processes of `tepat api --workers 2`, or two replicas.
    async with api(rt) as first, api(rt) as second:
        assert (await first.post("/dashboard/login", data={"key": ADMIN_KEY})).status_code == 303
        cookie = first.cookies.get("tepat_dashboard", path="/dashboard")
        copied = {"Cookie": f"tepat_dashboard={cookie}"}
        assert (await second.get("/dashboard/data", headers=copied)).status_code == 200
        page = await first.get("/dashboard")
        csrf = page.text.split('<meta name="csrf-token" content="', 1)[1].split('"', 1)[0]
        assert (await first.post("/dashboard/logout", data={"csrf": csrf})).status_code == 303
        problem(await second.get("/dashboard/data", headers=copied), 401)
