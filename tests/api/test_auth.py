"""The auth matrix (issue 4), for every endpoint.

No credentials -> 401; a bad key, a forged, malformed or expired token -> 401;
another user's token -> 403; own token -> 2xx on user endpoints, 403 on admin
endpoints; the admin key -> 2xx everywhere. Only /healthz, /readyz and /metrics are open.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI

from api.app import create_app
from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, ADMIN_KEY, START, bearer, problem
from tests.api.helpers import make_broker_dead_letter, notification_body, reminder_body, scene

PLAN = {
    "start": START.isoformat(),
    "end": (START + timedelta(days=1)).isoformat(),
}

# (method, path, json body, expected success status); every path names alice.
USER_ENDPOINTS: list[tuple[str, str, Any, int]] = [
    ("PUT", "/v1/users/alice", {"timezone": "Asia/Jakarta"}, 200),
    ("GET", "/v1/users/alice", None, 200),
    ("PUT", "/v1/users/alice/devices/phone-2", {"push_token": "ExpoPushToken[p2]"}, 200),
    ("DELETE", "/v1/users/alice/devices/phone-1", None, 204),
    ("GET", "/v1/users/alice/devices", None, 200),
    ("PUT", "/v1/users/alice/reminders/dinner", reminder_body(local_time="19:00"), 201),
    ("DELETE", "/v1/users/alice/reminders/lunch", None, 204),
    ("GET", "/v1/users/alice/reminders", None, 200),
    ("PUT", "/v1/users/alice/preferences", {"categories": {"mood": False}}, 200),
    ("GET", "/v1/users/alice/preferences", None, 200),
    ("POST", "/v1/users/alice/notifications", notification_body(), 201),
    ("GET", "/v1/users/alice/messages", None, 200),
]
# Backend operations under a user's path (issue 19): the user's own token gets 403 by
# default (TEPAT_ALLOW_USER_NOTIFICATIONS), the admin key the success above.
BACKEND_ONLY = {("POST", "/v1/users/alice/notifications")}
ADMIN_ENDPOINTS: list[tuple[str, str, Any, int]] = [
    ("POST", "/v1/admin/plan", PLAN, 200),
    ("GET", "/v1/admin/queues", None, 200),
    ("GET", "/v1/admin/dead-letters", None, 200),
    ("POST", "/v1/admin/dead-letters/{dead}/replay", None, 200),
]
OPEN_ENDPOINTS = ["/healthz", "/readyz", "/metrics"]


def _ids(table: list[tuple[str, str, Any, int]]) -> list[str]:
    return [f"{m} {p}" for m, p, _, _ in table]


async def _call(
    client: httpx.AsyncClient,
    rt: Runtime,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str],
) -> httpx.Response:
    if "{dead}" in path:
        path = path.replace("{dead}", await make_broker_dead_letter(rt))
    return await client.request(method, path, json=body, headers=headers)


def _credentials(case: str, clock: FakeClock) -> dict[str, str]:
    match case:
        case "none":
            return {}
        case "wrong key":
            return {"X-API-Key": ADMIN_KEY + "x"}
        case "empty key":
            return {"X-API-Key": ""}
        case "expired token":
            return bearer("alice", clock, expires_in=timedelta(minutes=-5))
        case "forged token":
            forged = jwt.encode(
                {"sub": "alice", "exp": int(clock.now().timestamp()) + 3600},
                "some-other-secret-0123456789abcdef",
                algorithm="HS256",
            )
            return {"Authorization": f"Bearer {forged}"}
        case "token without exp":
            from tests.api.conftest import JWT_SECRET

            return {"Authorization": "Bearer " + jwt.encode({"sub": "alice"}, JWT_SECRET, "HS256")}
        case "malformed bearer":
            return {"Authorization": "Bearer not.a.jwt"}
        case "basic auth":
            return {"Authorization": "Basic YWxpY2U6cHc="}
    raise AssertionError(case)


UNAUTHENTICATED = [
    "none",
    "wrong key",
    "empty key",
    "expired token",
    "forged token",
    "token without exp",
    "malformed bearer",
    "basic auth",
]


@pytest.mark.parametrize("case", UNAUTHENTICATED)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    USER_ENDPOINTS + ADMIN_ENDPOINTS,
    ids=_ids(USER_ENDPOINTS + ADMIN_ENDPOINTS),
)
async def test_unauthenticated_is_401(
    client: httpx.AsyncClient,
    rt: Runtime,
    clock: FakeClock,
    method: str,
    path: str,
    body: Any,
    expected: int,
    case: str,
) -> None:
    await scene(client)
    r = await _call(client, rt, method, path, body, _credentials(case, clock))
    problem(r, 401)
    assert "WWW-Authenticate" in r.headers


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), USER_ENDPOINTS, ids=_ids(USER_ENDPOINTS)
)
async def test_user_endpoints(
    client: httpx.AsyncClient,
    rt: Runtime,
    clock: FakeClock,
    method: str,
    path: str,
    body: Any,
    expected: int,
) -> None:
    await scene(client)
    # Another user's token: 403, and nothing changed.
    problem(await _call(client, rt, method, path, body, bearer("bob", clock)), 403)
    # Own token: success, but for a backend operation.
    r = await _call(client, rt, method, path, body, bearer("alice", clock))
    if (method, path) in BACKEND_ONLY:
        problem(r, 403)
    else:
        assert r.status_code == expected, r.text


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), USER_ENDPOINTS, ids=_ids(USER_ENDPOINTS)
)
async def test_admin_key_reaches_user_endpoints(
    client: httpx.AsyncClient, rt: Runtime, method: str, path: str, body: Any, expected: int
) -> None:
    await scene(client)
    r = await _call(client, rt, method, path, body, ADMIN)
    assert r.status_code == expected, r.text


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), ADMIN_ENDPOINTS, ids=_ids(ADMIN_ENDPOINTS)
)
async def test_admin_endpoints(
    client: httpx.AsyncClient,
    rt: Runtime,
    clock: FakeClock,
    method: str,
    path: str,
    body: Any,
    expected: int,
) -> None:
    await scene(client)
    # A user token never reaches /v1/admin.
    body_403 = problem(await _call(client, rt, method, path, body, bearer("alice", clock)), 403)
    assert "X-API-Key" in str(body_403["detail"])
    r = await _call(client, rt, method, path, body, ADMIN)
    assert r.status_code == expected, r.text


@pytest.mark.parametrize("path", OPEN_ENDPOINTS)
async def test_open_endpoints_need_no_credentials(client: httpx.AsyncClient, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 200, r.text


async def test_unknown_v1_path_without_credentials_is_401_not_404(
    client: httpx.AsyncClient,
) -> None:
    problem(await client.get("/v1/nothing-here"), 401)
    problem(await client.get("/v1/nothing-here", headers=ADMIN), 404)


async def test_invalid_body_without_credentials_is_401_not_422(client: httpx.AsyncClient) -> None:
    r = await client.put(
        "/v1/users/alice", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    problem(r, 401)


async def test_token_for_another_user_cannot_read_by_path_tricks(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await scene(client)
    for path in ("/v1/users/bob/", "/v1/users/bob%2F..%2Falice", "/v1/users//alice"):
        r = await client.get(path, headers=bearer("alice", clock))
        assert r.status_code in (401, 403, 404), (path, r.status_code)
        assert "bob" not in r.text or r.status_code != 200


async def test_expired_token_says_so(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await scene(client)
    headers = bearer("alice", clock, expires_in=timedelta(minutes=10))
    assert (await client.get("/v1/users/alice", headers=headers)).status_code == 200
    clock.advance(timedelta(minutes=11))  # expiry follows the runtime's clock
    body = problem(await client.get("/v1/users/alice", headers=headers), 401)
    assert body["detail"] == "token expired"


async def test_bearer_refused_when_jwt_secret_unset(rt: Runtime, clock: FakeClock) -> None:
    settings = rt.settings.model_copy(update={"jwt_secret": None})
    app: FastAPI = create_app(dataclasses.replace(rt, settings=settings), ADMIN_KEY)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://tepat.test"
    ) as c:
        body = problem(await c.get("/v1/users/alice", headers=bearer("alice", clock)), 401)
        assert "TEPAT_JWT_SECRET" in str(body["detail"])
        assert (await c.get("/v1/users/alice", headers=ADMIN)).status_code == 404
