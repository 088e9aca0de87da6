"""The in-app inbox over HTTP: list, pages, unread, reads, and who may reach it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tests.api.conftest import (
    ADMIN,
    STORES,
    bearer,
    error_fields,
    problem,
    runtime_on,
    token_for,
)
from tests.api.helpers import create_user, ok
from tests.support.fake_push import FakePush


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    """Every test here on both stores: paging, idempotency and reads are adapter code."""
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_inbox") as r:
        yield r


def item_body(key: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "idempotency_key": key,
        "category": "custom",
        "title": f"Title {key}",
        "body": "Your order was paid",
        "link": "app://orders/8841",
        "data": {"order": 8841},
    }
    body.update(overrides)
    return body


async def deliver(client: httpx.AsyncClient, user: str, key: str, **kw: Any) -> dict[str, Any]:
    r = await client.post(f"/v1/users/{user}/inbox", json=item_body(key, **kw), headers=ADMIN)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_admin_puts_an_item_once_and_the_user_lists_it(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    first = await deliver(client, "alice", "order-8841", html="<p>paid</p>")
    assert first["status"] == "delivered" and first["read_at"] is None
    assert first["message_id"] == "order-8841"
    assert (first["title"], first["link"], first["data"]) == (
        "Title order-8841",
        "app://orders/8841",
        {"order": 8841},
    )
    assert first["html"] == "<p>paid</p>"
    again = await client.post(
        "/v1/users/alice/inbox", json=item_body("order-8841", title="other"), headers=ADMIN
    )
    assert again.status_code == 200
    assert again.json() == first
    page = await ok(await client.get("/v1/users/alice/inbox", headers=bearer("alice", clock)))
    assert page.json() == {"items": [first], "next_cursor": None, "unread_count": 1}


async def test_concurrent_puts_of_one_key_store_one_item(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")
    responses = await asyncio.gather(
        *(
            client.post("/v1/users/alice/inbox", json=item_body("k"), headers=ADMIN)
            for _ in range(20)
        )
    )
    assert sorted(r.status_code for r in responses) == [200] * 19 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    r = await client.get("/v1/users/alice/inbox/unread-count", headers=ADMIN)
    assert r.json() == {"unread_count": 1}


async def test_pages_newest_first_stay_exact_while_items_arrive(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    before = [(await deliver(client, "alice", f"m{i}"))["id"] for i in range(7)]
    auth = bearer("alice", clock)
    seen: list[str] = []
    cursor: str | None = None
    arrivals = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = (
            await ok(await client.get("/v1/users/alice/inbox", params=params, headers=auth))
        ).json()
        seen += [i["id"] for i in page["items"]]
        # New items land while the client pages: they belong to a fresh first page, and
        # never shift or repeat what the cursor walks through.
        await asyncio.gather(*(deliver(client, "alice", f"new{arrivals}-{j}") for j in range(2)))
        arrivals += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(before))
    first = (await client.get("/v1/users/alice/inbox", params={"limit": 2}, headers=auth)).json()
    assert all(i["message_id"].startswith("new") for i in first["items"])
    assert first["unread_count"] == 7 + 2 * arrivals


async def test_unread_filter_and_count(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await create_user(client, "alice")
    items = [await deliver(client, "alice", f"m{i}") for i in range(3)]
    auth = bearer("alice", clock)
    await ok(await client.post(f"/v1/users/alice/inbox/{items[1]['id']}/read", headers=auth))
    r = await client.get("/v1/users/alice/inbox", params={"unread": "true"}, headers=auth)
    assert [i["id"] for i in r.json()["items"]] == [items[2]["id"], items[0]["id"]]
    assert r.json()["unread_count"] == 2
    r = await client.get(
        "/v1/users/alice/inbox", params={"unread": "true", "limit": 1}, headers=auth
    )
    assert r.json()["next_cursor"] is not None
    r = await client.get(
        "/v1/users/alice/inbox",
        params={"unread": "true", "cursor": r.json()["next_cursor"]},
        headers=auth,
    )
    assert [i["id"] for i in r.json()["items"]] == [items[0]["id"]]
    r = await client.get("/v1/users/alice/inbox/unread-count", headers=auth)
    assert r.json() == {"unread_count": 2}


async def test_read_is_forward_only(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await create_user(client, "alice")
    item = await deliver(client, "alice", "m1")
    auth = bearer("alice", clock)
    first = (
        await ok(await client.post(f"/v1/users/alice/inbox/{item['id']}/read", headers=auth))
    ).json()
    assert first["status"] == "read"
    assert first["read_at"] == clock.now().isoformat().replace("+00:00", "Z")
    clock.advance(3600)
    again = (
        await ok(await client.post(f"/v1/users/alice/inbox/{item['id']}/read", headers=auth))
    ).json()
    assert again["read_at"] == first["read_at"]
    # Storing the message again does not make it unread.
    r = await client.post("/v1/users/alice/inbox", json=item_body("m1"), headers=ADMIN)
    assert r.json()["status"] == "read"


async def test_read_all_up_to_a_seq_then_everything(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    await create_user(client, "bob")
    items = [await deliver(client, "alice", f"m{i}") for i in range(4)]
    await deliver(client, "bob", "m0")
    auth = bearer("alice", clock)
    r = await client.post(
        "/v1/users/alice/inbox/read-all", json={"up_to_seq": items[1]["seq"]}, headers=auth
    )
    assert r.json() == {"marked": 2, "unread_count": 2}
    r = await client.post("/v1/users/alice/inbox/read-all", headers=auth)
    assert r.json() == {"marked": 2, "unread_count": 0}
    r = await client.post("/v1/users/alice/inbox/read-all", headers=auth)
    assert r.json() == {"marked": 0, "unread_count": 0}
    r = await client.get("/v1/users/bob/inbox/unread-count", headers=ADMIN)
    assert r.json() == {"unread_count": 1}


async def test_who_may_reach_an_inbox(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await create_user(client, "alice")
    await create_user(client, "bob")
    item = await deliver(client, "alice", "m1")
    for method, path in (
        ("GET", "/v1/users/alice/inbox"),
        ("GET", "/v1/users/alice/inbox/unread-count"),
        ("GET", "/v1/users/alice/inbox/stream"),
        ("POST", f"/v1/users/alice/inbox/{item['id']}/read"),
        ("POST", "/v1/users/alice/inbox/read-all"),
    ):
        problem(await client.request(method, path), 401)
        problem(await client.request(method, path, headers=bearer("bob", clock)), 403)
    # The query-string token is for the stream only, and only a user's JWT.
    token = token_for("alice", clock)
    problem(await client.get("/v1/users/alice/inbox", params={"access_token": token}), 401)
    r = await client.get(
        "/v1/users/alice/inbox/stream", params={"access_token": token_for("bob", clock)}
    )
    problem(r, 403)
    r = await client.get("/v1/users/alice/inbox/stream", params={"access_token": "not-a-jwt"})
    problem(r, 401)
    # Bob cannot read Alice's item through his own inbox either.
    r = await client.post(f"/v1/users/bob/inbox/{item['id']}/read", headers=bearer("bob", clock))
    problem(r, 404)
    # Only the admin puts items in an inbox.
    r = await client.post(
        "/v1/users/alice/inbox", json=item_body("m2"), headers=bearer("alice", clock)
    )
    problem(r, 403)


async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    auth = bearer("alice", clock)
    base = "/v1/users/alice/inbox"
    for params, field in (
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "-1"}, "cursor"),
        ({"cursor": "9" * 30}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"unread": "maybe"}, "unread"),
    ):
        assert error_fields(await client.get(base, params=params, headers=auth)) == {field}
    r = await client.get(f"{base}/stream", headers={**auth, "Last-Event-ID": "x1"})
    assert error_fields(r) == {"Last-Event-ID"}
    r = await client.get(f"{base}/stream", params={"last_event_id": "1.5"}, headers=auth)
    assert error_fields(r) == {"last_event_id"}
    r = await client.post(f"{base}/read-all", json={"up_to_seq": -1}, headers=auth)
    assert error_fields(r) == {"up_to_seq"}
    for body, field in (
        (item_body("m", link="javascript:alert(1)"), "link"),
        (item_body("m", category="nope"), "category"),
        (item_body("bad key"), "idempotency_key"),
        (item_body("m", title=""), "title"),
        (item_body("m", extra=1), "extra"),
    ):
        assert error_fields(await client.post(base, json=body, headers=ADMIN)) == {field}


async def test_unknown_user_and_item_are_404(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await create_user(client, "alice")
    problem(await client.get("/v1/users/nobody/inbox", headers=ADMIN), 404)
    problem(await client.post("/v1/users/nobody/inbox", json=item_body("m"), headers=ADMIN), 404)
    problem(await client.get("/v1/users/nobody/inbox/stream", headers=ADMIN), 404)
    r = await client.post("/v1/users/alice/inbox/inb_none/read", headers=bearer("alice", clock))
    problem(r, 404)


async def test_the_openapi_document_lists_the_inbox(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    paths = doc["paths"]
    assert set(paths["/v1/users/{user_id}/inbox"]) == {"get", "post"}
    stream = paths["/v1/users/{user_id}/inbox/stream"]["get"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {p["name"] for p in stream["parameters"]} >= {"Last-Event-ID", "last_event_id"}
