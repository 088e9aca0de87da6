"""/v1/webhooks: subscribe, list, read, delete, rotate the secret; bad input a 422 naming
the field; the secret shown once (issue 12, item 5)."""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from tepat.adapters import webhook_target
from tepat.clock import FakeClock
from tepat.domain.webhooks import EVENT_TYPES, WEBHOOK_USER, IPAddress, secret_key
from tepat.runtime import open_runtime
from tests.api.conftest import ADMIN, ADMIN_KEY, bearer, error_fields, make_settings, problem
from tests.support.fake_push import FakePush

BODY: dict[str, Any] = {
    "url": "https://example.com/hooks",
    "event_types": ["message.delivered", "message.failed"],
    "categories": ["meal"],
    "description": "orders service",
}


# What the names in these tests resolve to: no test waits on (or depends on) real DNS.
DNS = {
    "example.com": ["93.184.215.14"],
    "hooks.example.org": ["2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
    "metadata.example.net": ["169.254.169.254"],
    "split.example.net": ["93.184.215.14", "10.0.0.1"],
    "mapped.example.net": ["::ffff:127.0.0.1"],
}


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> None:
    async def resolve(host: str, port: int, timeout: float) -> list[IPAddress]:  # noqa: ASYNC109
        try:
            return [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            pass
        if host not in DNS:
            raise OSError(f"{host}: Name or service not known")
        return [ipaddress.ip_address(a) for a in DNS[host]]

    monkeypatch.setattr(webhook_target, "resolve", resolve)


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
    other = await create(client, url="https://hooks.example.org/h", categories=[])
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


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",  # cloud metadata
        "https://10.0.0.1/hooks",
        "https://192.168.1.20/hooks",
        "http://127.0.0.1:6379/",  # any loopback port
        "http://localhost:8000/v1/admin",
        "https://[::1]/hooks",
        "https://[::ffff:169.254.169.254]/hooks",  # IPv4-mapped
        "https://[fd00::1]/hooks",
        "https://0.0.0.0/hooks",
        "https://224.0.0.1/hooks",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://printer.local/hooks",
        "https://metadata.example.net/hooks",  # a public name resolving to a private address
        "https://split.example.net/hooks",  # one of its addresses is private
        "https://mapped.example.net/hooks",
    ],
)
async def test_an_internal_target_is_a_422_naming_the_url(
    client: httpx.AsyncClient, url: str
) -> None:
    r = await client.post("/v1/webhooks", json={**BODY, "url": url}, headers=ADMIN)
    assert error_fields(r) == {"url"}, r.text
    assert "TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS" in r.text
    assert (await client.get("/v1/webhooks", headers=ADMIN)).json()["items"] == []


async def test_allow_listed_private_hosts_are_accepted(tmp_path: Path, clock: FakeClock) -> None:
    settings = make_settings(tmp_path).model_copy(
        update={"webhook_allow_private_hosts": "127.0.0.1, 10.0.0.0/8, metadata.example.net"}
    )
    async with open_runtime(settings, clock=clock, push=FakePush()) as rt:
        transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
            for url in (
                "http://127.0.0.1:9/h",
                "https://10.20.30.40/h",
                "https://metadata.example.net/h",
            ):
                await create(c, url=url)
            r = await c.post("/v1/webhooks", json={**BODY, "url": "https://[::1]/h"}, headers=ADMIN)
            assert error_fields(r) == {"url"}


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
