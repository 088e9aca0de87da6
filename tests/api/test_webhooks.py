"""/v1/webhooks: subscribe, list, read, delete, rotate the secret; bad input a 422 naming
the field; the secret shown once (issue 12, item 5)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.domain.webhooks import EVENT_TYPES, WEBHOOK_USER, secret_key
from tests.api.conftest import ADMIN, bearer, error_fields, problem

BODY: dict[str, Any] = {
    "url": "https://example.com/hooks",
    "event_types": ["message.delivered", "message.failed"],
    "categories": ["meal"],
    "description": "orders service",
}


async def create(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    r = await client.post("/v1/webhooks", json={**BODY, **overrides}, headers=ADMIN)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    assert r.headers["location"] == f"/v1/webhooks/{body['id']}"
    return body


async def test_create_returns_the_secret_once_and_reads_never_show_it(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    created = await create(client)
    assert created["secret"].startswith("whsec_") and len(secret_key(created["secret"])) == 32
    assert created["event_types"] == ["message.delivered", "message.failed"]
    assert (created["categories"], created["enabled"]) == (["meal"], True)
    assert created["secrets"] == [{"created_at": created["created_at"], "expires_at": None}]

    r = await client.get(f"/v1/webhooks/{created['id']}", headers=ADMIN)
    assert r.status_code == 200
    one = r.json()
    assert "secret" not in one and created["secret"] not in r.text
    assert one == {k: v for k, v in created.items() if k != "secret"}

    clock.advance(1)  # listed by creation time
    other = await create(client, url="http://127.0.0.1:9/h", categories=[])
    assert other["secret"] != created["secret"]
    listed = (await client.get("/v1/webhooks", headers=ADMIN)).json()["items"]
    assert [s["id"] for s in listed] == [created["id"], other["id"]]


async def test_rotation_returns_a_new_secret_and_keeps_the_old_one_signing_for_a_day(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    created = await create(client)
    clock.advance(timedelta(minutes=5))
    r = await client.post(f"/v1/webhooks/{created['id']}/rotate-secret", headers=ADMIN)
    assert r.status_code == 200, r.text
    rotated = r.json()
    assert rotated["secret"] != created["secret"]
    old, new = rotated["secrets"]
    assert old["created_at"] == created["created_at"]
    expires = clock.now() + timedelta(hours=24)
    assert old["expires_at"] == expires.isoformat().replace("+00:00", "Z")
    assert new["expires_at"] is None


async def test_delete_then_404(client: httpx.AsyncClient) -> None:
    created = await create(client)
    url = f"/v1/webhooks/{created['id']}"
    assert (await client.delete(url, headers=ADMIN)).status_code == 204
    problem(await client.get(url, headers=ADMIN), 404)
    problem(await client.delete(url, headers=ADMIN), 404)
    problem(await client.post(f"{url}/rotate-secret", headers=ADMIN), 404)
    assert (await client.get("/v1/webhooks", headers=ADMIN)).json()["items"] == []


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"url": "http://example.com/hooks"}, "url"),
        ({"url": "ftp://example.com/hooks"}, "url"),
        ({"url": "https://user:pw@example.com/hooks"}, "url"),
        ({"url": ""}, "url"),
        ({"url": 5}, "url"),
        ({"event_types": []}, "event_types"),
        ({"event_types": ["message.opened"]}, "event_types"),
        ({"event_types": "message.sent"}, "event_types"),
        ({"categories": ["nope"]}, "categories"),
        ({"description": "x" * 201}, "description"),
        ({"secret": "whsec_mine"}, "secret"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, overrides: dict[str, Any], field: str
) -> None:
    r = await client.post("/v1/webhooks", json={**BODY, **overrides}, headers=ADMIN)
    assert field in {f.split(".")[0] for f in error_fields(r)}, r.text


async def test_missing_fields_are_named(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/webhooks", json={}, headers=ADMIN)
    assert error_fields(r) == {"url", "event_types"}


async def test_a_bad_id_in_the_path_is_a_422(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/webhooks/a.b", headers=ADMIN)
    assert error_fields(r) == {"subscription_id"}


async def test_admin_only(client: httpx.AsyncClient, clock: FakeClock) -> None:
    problem(await client.get("/v1/webhooks"), 401)
    problem(await client.post("/v1/webhooks", json=BODY, headers=bearer("u1", clock)), 403)


def test_every_event_type_is_documented() -> None:
    from api.routes.webhooks import WebhookIn

    description = WebhookIn.model_fields["event_types"].description or ""
    assert all(t in description for t in EVENT_TYPES)


async def test_webhook_deliveries_are_no_users_messages(client: httpx.AsyncClient) -> None:
    # Deliveries are stored under the user id "~webhook", which the API never accepts.
    r = await client.get(f"/v1/users/{WEBHOOK_USER}/messages", headers=ADMIN)
    assert "user_id" in error_fields(r)
