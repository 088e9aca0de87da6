"""No credential of one app reads or changes another app's data (issue 23): a matrix over
every route of the API.

Two apps, alpha and beta, beside the default one. Beta holds a user, a device, a
reminder, preferences, a one-off, a contact, a template, a webhook subscription and an
event, each carrying a marker string. Then every ``/v1/`` route the application has (read
from its router, so a route added later is in the matrix without editing this test) is
called with beta's ids by each credential of alpha (its admin key, its events key, a user
token of its own for beta's user id), and by the default app's admin key. No answer
carries beta's marker, none is a 500, and beta's store is the same, row for row,
afterwards.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI

from api.app import create_app
from tepat.clock import FakeClock
from tepat.domain.apps import App
from tepat.runtime import Runtime, open_runtime
from tepat.services.apps import AppService
from tepat.tenancy import Apps, app_database_url, app_settings, queue_namespace, settings_check
from tepat.wiring import app_repository
from tests.api.conftest import ADMIN, ADMIN_KEY, JWT_SECRET, make_settings
from tests.api.helpers import notification_body, reminder_body
from tests.support.fake_push import FakePush

MARKER = "beta-private-7f3a"
ALPHA_SECRET = "alpha-jwt-secret-0123456789abcdef0123456789"
BETA_SECRET = "beta-jwt-secret-0123456789abcdef0123456789ab"
# beta's ids, by the path parameter that names them
BETA_IDS = {
    "user_id": "alice",
    "device_id": "phone-1",
    "reminder_id": "lunch",
    "channel": "email",
    "address": "alice-beta@example.com",
    "event_id": "ev-1",
    "event_type": "order.paid",
    "locale": "en",
    "item_id": "item-1",
    "subscription_id": "",  # filled in when beta's subscription is made
    "dead_letter_id": "dl-1",
}
USER = {"timezone": "UTC"}
EVENT = {
    "event_id": "ev-1",
    "type": "order.paid",
    "user_ids": ["alice"],
    "occurred_at": "2027-03-01T00:00:00Z",
    "data": {"order_id": "o-1", "amount": "10"},
}
# a valid body per write route, so that a write reaches the store when it may
BODIES: dict[tuple[str, str], Any] = {
    ("PUT", "/v1/users/{user_id}"): {"timezone": "Asia/Jakarta"},
    ("PUT", "/v1/users/{user_id}/devices/{device_id}"): {"push_token": "ExpoPushToken[a]"},
    ("PUT", "/v1/users/{user_id}/reminders/{reminder_id}"): reminder_body(),
    ("PUT", "/v1/users/{user_id}/preferences"): {"categories": {"mood": False}},
    ("POST", "/v1/users/{user_id}/notifications"): notification_body(),
    ("PUT", "/v1/users/{user_id}/contacts/{channel}"): {"address": "a@example.com"},
    ("PUT", "/v1/templates/{event_type}/{channel}/{locale}"): {"subject": "s", "body": "b"},
    ("POST", "/v1/events"): EVENT,
}
# answered by the operator alone, or not in the matrix: the apps themselves, provider
# callbacks (signed by the provider, no credentials) and the live stream (it stays open)
SKIPPED = ("/v1/admin/apps", "/v1/providers/", "/v1/users/{user_id}/inbox/stream")


@pytest.fixture
def clock() -> FakeClock:
    from tests.api.conftest import START

    return FakeClock(START)


def _opener(base: Any, default: Runtime) -> Any:
    def open_app(app: App) -> Any:
        return open_runtime(
            app_settings(base, app),
            clock=default.clock,
            push=FakePush(),
            app_id=app.app_id,
            queue_namespace=queue_namespace(app.app_id),
        )

    return open_app


@contextlib.asynccontextmanager
async def _deployment(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[FastAPI, Apps]]:
    settings = make_settings(tmp_path)
    async with open_runtime(settings, clock=clock, push=FakePush()) as rt:
        apps = Apps(
            settings, rt, registry=app_repository(settings, rt.store), opener=_opener(settings, rt)
        )
        try:
            yield create_app(rt, ADMIN_KEY, apps=apps), apps
        finally:
            await apps.close()


@pytest.fixture
async def deployment(
    tmp_path: Path, clock: FakeClock
) -> AsyncIterator[tuple[httpx.AsyncClient, Apps]]:
    async with _deployment(tmp_path, clock) as (app, apps):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
            yield c, apps


def _token(sub: str, secret: str, clock: FakeClock, app: str | None) -> dict[str, str]:
    claims: dict[str, Any] = {
        "sub": sub,
        "exp": int((clock.now() + timedelta(hours=1)).timestamp()),
    }
    if app is not None:
        claims["app"] = app
    return {"Authorization": f"Bearer {jwt.encode(claims, secret, algorithm='HS256')}"}


async def _new_app(client: httpx.AsyncClient, app_id: str, secret: str) -> dict[str, str]:
    r = await client.post(
        "/v1/admin/apps",
        json={"app_id": app_id, "name": app_id.title(), "settings": {"jwt_secret": secret}},
        headers=ADMIN,
    )
    assert r.status_code == 201, r.text
    return {"X-API-Key": r.json()["admin_key"]["key"]}


async def _events_key(client: httpx.AsyncClient, app_id: str) -> dict[str, str]:
    r = await client.post(f"/v1/admin/apps/{app_id}/keys", json={"role": "events"}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return {"X-API-Key": r.json()["key"]}


async def _seed_beta(client: httpx.AsyncClient, beta: dict[str, str]) -> None:
    calls: list[tuple[str, str, Any]] = [
        ("PUT", "/v1/users/alice", {"timezone": "Europe/Berlin", "locale": "en"}),
        ("PUT", "/v1/users/alice/devices/phone-1", {"push_token": f"ExpoPushToken[{MARKER}]"}),
        ("PUT", "/v1/users/alice/reminders/lunch", reminder_body(title=MARKER)),
        ("PUT", "/v1/users/alice/preferences", {"categories": {"mood": False}}),
        ("POST", "/v1/users/alice/notifications", notification_body(body=MARKER)),
        ("PUT", "/v1/users/alice/contacts/email", {"address": BETA_IDS["address"]}),
        ("PUT", "/v1/templates/order.paid/push/en", {"title": MARKER, "body": MARKER}),
        (
            "POST",
            "/v1/events",
            EVENT,
        ),
    ]
    for method, path, body in calls:
        r = await client.request(method, path, json=body, headers=beta)
        assert r.status_code < 300, (method, path, r.text)
    r = await client.post(
        "/v1/webhooks",
        json={"url": f"https://{MARKER}.example.com/hook", "event_types": ["message.sent"]},
        headers=beta,
    )
    assert r.status_code == 201, r.text
    BETA_IDS["subscription_id"] = r.json()["id"]
    # Beta's own credentials see its marker: the checks below can tell a leak.
    r = await client.get("/v1/users/alice/devices", headers=beta)
    assert MARKER in r.text


def _dump(path: str) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Every row of every table of a SQLite store, in a stable order."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [
            (t, sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr))
            for t in sorted(tables)
        ]


def apps_api(client: httpx.AsyncClient) -> FastAPI:
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    app = transport.app
    assert isinstance(app, FastAPI)
    return app


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every operation of the OpenAPI document under /v1/."""
    return [
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/v1/") and not path.startswith(SKIPPED)
        for method in sorted(operations)
    ]


def _fill(path: str) -> str:
    names = re.findall(r"{(\w+)}", path)
    missing = [n for n in names if n not in BETA_IDS]
    assert not missing, f"add beta's id for {missing} (route {path}) to BETA_IDS"
    for name in names:
        path = path.replace(f"{{{name}}}", BETA_IDS[name])
    return path


@pytest.mark.parametrize("credential", ["alpha admin", "alpha events", "alpha user", "default"])
async def test_no_credential_of_another_app_reaches_beta(
    deployment: tuple[httpx.AsyncClient, Apps], clock: FakeClock, credential: str
) -> None:
    client, apps = deployment
    alpha = await _new_app(client, "alpha", ALPHA_SECRET)
    beta = await _new_app(client, "beta", BETA_SECRET)
    await _seed_beta(client, beta)
    headers = {
        "alpha admin": alpha,
        "alpha events": await _events_key(client, "alpha"),
        "alpha user": _token("alice", ALPHA_SECRET, clock, "alpha"),
        "default": ADMIN,
    }[credential]
    beta_db = app_database_url(apps.base.database_url, "beta").removeprefix("sqlite:///")
    before = _dump(beta_db)
    routes = _routes(apps_api(client))
    assert len(routes) >= 40, routes  # the matrix covers the API, not a handful
    for method, template in routes:
        body = BODIES.get((method, template), {} if method in ("POST", "PUT", "PATCH") else None)
        path = _fill(template)
        r = await client.request(method, path, json=body, headers=headers)
        assert r.status_code < 500, (method, template, r.text)
        for secret in (MARKER, BETA_IDS["address"]):
            # a refusal may repeat what the caller sent in the path, nothing else of beta's
            if secret in r.text:
                assert secret in path and r.status_code >= 400, (method, template, r.text)
    assert _dump(beta_db) == before


async def test_a_user_token_is_checked_with_its_own_apps_secret(
    deployment: tuple[httpx.AsyncClient, Apps], clock: FakeClock
) -> None:
    client, _ = deployment
    beta = await _new_app(client, "beta", BETA_SECRET)
    await _new_app(client, "alpha", ALPHA_SECRET)
    assert (await client.put("/v1/users/alice", json=USER, headers=beta)).status_code == 201
    own = _token("alice", BETA_SECRET, clock, "beta")
    assert (await client.get("/v1/users/alice", headers=own)).status_code == 200
    for forged in (
        _token("alice", BETA_SECRET, clock, "alpha"),  # beta's secret, alpha named
        _token("alice", JWT_SECRET, clock, "beta"),  # the deployment's secret, beta named
        _token("alice", BETA_SECRET, clock, None),  # beta's secret, no app: the default
        _token("alice", ALPHA_SECRET, clock, "nobody"),  # no such app
    ):
        r = await client.get("/v1/users/alice", headers=forged)
        assert r.status_code == 401, r.text


async def test_the_apps_are_the_operators(
    deployment: tuple[httpx.AsyncClient, Apps], clock: FakeClock
) -> None:
    client, _ = deployment
    alpha = await _new_app(client, "alpha", ALPHA_SECRET)
    for method, path in (
        ("GET", "/v1/admin/apps"),
        ("POST", "/v1/admin/apps/alpha/keys"),
        ("PATCH", "/v1/admin/apps/alpha"),
    ):
        r = await client.request(method, path, json={"role": "admin"}, headers=alpha)
        assert r.status_code == 403, (method, path, r.text)


async def test_a_revoked_key_stops_at_once_and_a_disabled_app_is_not_served(
    deployment: tuple[httpx.AsyncClient, Apps], clock: FakeClock
) -> None:
    client, apps = deployment
    alpha = await _new_app(client, "alpha", ALPHA_SECRET)
    r = await client.post("/v1/admin/apps/alpha/keys", json={"role": "admin"}, headers=ADMIN)
    second = {"X-API-Key": r.json()["key"]}
    assert (await client.put("/v1/users/u", json=USER, headers=second)).status_code == 201
    keys = (await client.get("/v1/admin/apps/alpha/keys", headers=ADMIN)).json()
    first_id = next(k["key_id"] for k in keys if k["key_id"] != r.json()["key_id"])
    r = await client.delete(f"/v1/admin/apps/alpha/keys/{first_id}", headers=ADMIN)
    assert r.status_code == 204, r.text
    assert (await client.get("/v1/users/u", headers=alpha)).status_code == 401
    assert (await client.get("/v1/users/u", headers=second)).status_code == 200
    r = await client.patch("/v1/admin/apps/alpha", json={"disabled": True}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["served"] is False, r.text
    assert apps.runtime("alpha") is None
    assert (await client.get("/v1/users/u", headers=second)).status_code == 401
    r = await client.patch("/v1/admin/apps/alpha", json={"disabled": False}, headers=ADMIN)
    assert r.json()["served"] is True
    # its data is where it was
    assert (await client.get("/v1/users/u", headers=second)).status_code == 200


async def test_a_key_made_by_another_process_works_at_once(
    deployment: tuple[httpx.AsyncClient, Apps], clock: FakeClock
) -> None:
    """Made in the registry behind this process's back (as another API process would):
    looked up again on first use instead of refused, and not counted as a wrong key."""
    client, apps = deployment
    await _new_app(client, "alpha", ALPHA_SECRET)
    clock.advance(timedelta(seconds=2))  # past the last refresh's second
    assert apps.registry is not None
    service = AppService(apps.registry, clock, settings_check(apps.base))
    _, key = await service.add_key("alpha", "admin")
    r = await client.put("/v1/users/u", json=USER, headers={"X-API-Key": key})
    assert r.status_code == 201, r.text
    # a wrong key is still refused, once looked up
    r = await client.get("/v1/users/u", headers={"X-API-Key": key + "x"})
    assert r.status_code == 401, r.text
