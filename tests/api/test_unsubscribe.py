"""One-click unsubscribe over HTTP (RFC 8058): ``POST /u/{token}`` with no login.

A valid token opts its user out of its category on its channel (the preference
``"<category>.<channel>"``), once and idempotently; a forged, altered, expired or
malformed one is refused 4xx and changes nothing. ``GET`` shows a page and changes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from api.app import create_app
from tepat.clock import FakeClock
from tepat.runtime import Runtime, open_runtime
from tepat.services.unsubscribe import UnsubscribeLinks
from tests.api.conftest import ADMIN_KEY, STORES, make_settings, problem, runtime_on
from tests.api.helpers import create_user
from tests.support.fake_push import FakePush

SECRET = "unsubscribe-secret-0123456789abcdef0123456789"
PUBLIC = "https://tepat.example"
ONE_CLICK = {"content-type": "application/x-www-form-urlencoded"}


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    settings = make_settings(tmp_path).model_copy(
        update={"public_url": PUBLIC, "unsubscribe_secret": SecretStr(SECRET)}
    )
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_unsub", settings) as r:
        yield r


@pytest.fixture
def links(clock: FakeClock) -> UnsubscribeLinks:
    return UnsubscribeLinks(SECRET, PUBLIC, clock)


def path_of(url: str) -> str:
    assert url.startswith(PUBLIC + "/u/")
    return url.removeprefix(PUBLIC)


async def test_one_click_opts_out_of_that_category_on_that_channel(
    client: httpx.AsyncClient, rt: Runtime, links: UnsubscribeLinks
) -> None:
    await create_user(client, "alice")
    await rt.store.set_preferences("alice", {"promotions.sms": True})
    url = links.url_for("alice", "promotions", "email")

    r = await client.post(path_of(url), content="List-Unsubscribe=One-Click", headers=ONE_CLICK)

    assert r.status_code == 200, r.text
    assert r.json() == {"unsubscribed": True, "category": "promotions", "channel": "email"}
    assert r.headers["cache-control"] == "no-store"
    assert await rt.store.get_preferences("alice") == {
        "promotions.email": False,
        "promotions.sms": True,
    }
    # Repeating it (a provider retrying, a second click) changes nothing more.
    again = await client.post(path_of(url), content="List-Unsubscribe=One-Click")
    assert again.status_code == 200
    assert await rt.store.get_preferences("alice") == {
        "promotions.email": False,
        "promotions.sms": True,
    }


async def test_no_body_and_no_credentials_are_needed(
    client: httpx.AsyncClient, rt: Runtime, links: UnsubscribeLinks
) -> None:
    await create_user(client, "alice")
    r = await client.post(path_of(links.url_for("alice", "news", "email")))
    assert r.status_code == 200
    assert await rt.store.get_preferences("alice") == {"news.email": False}


async def test_a_forged_token_is_403_and_changes_nothing(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    forger = UnsubscribeLinks("another-secret-0123456789abcdef0123456789", PUBLIC, clock)
    r = await client.post(path_of(forger.url_for("alice", "promotions", "email")))
    body = problem(r, 403)
    assert body["errors"] == [{"field": "token", "message": "the signature does not match"}]
    assert await rt.store.get_preferences("alice") == {}


async def test_another_users_token_cannot_be_made_from_one(
    client: httpx.AsyncClient, rt: Runtime, links: UnsubscribeLinks
) -> None:
    await create_user(client, "alice")
    await create_user(client, "bob")
    token = links.url_for("alice", "promotions", "email").rpartition("/")[2]
    payload, mac = token.split(".")
    # Any change to the signed part, one character is enough.
    flipped = payload[:-1] + ("A" if payload[-1] != "A" else "B")
    r = await client.post(f"/u/{flipped}.{mac}")
    assert r.status_code in (400, 403)
    assert await rt.store.get_preferences("alice") == {}
    assert await rt.store.get_preferences("bob") == {}


async def test_an_expired_token_is_410_and_changes_nothing(
    client: httpx.AsyncClient, rt: Runtime, links: UnsubscribeLinks, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    url = links.url_for("alice", "promotions", "email")
    clock.advance(timedelta(days=91))
    problem(await client.post(path_of(url)), 410)
    assert await rt.store.get_preferences("alice") == {}


@pytest.mark.parametrize("token", ["garbage", "a.b.c", "x" * 600])
async def test_a_malformed_token_is_400(client: httpx.AsyncClient, token: str) -> None:
    body = problem(await client.post(f"/u/{token}"), 400)
    assert body["errors"] == [{"field": "token", "message": "not an unsubscribe token"}]


async def test_get_shows_a_page_with_a_post_button_and_changes_nothing(
    client: httpx.AsyncClient, rt: Runtime, links: UnsubscribeLinks
) -> None:
    await create_user(client, "alice")
    url = links.url_for("alice", "promotions", "email")
    page = await client.get(path_of(url), headers={"accept": "text/html"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<form method="post">' in page.text
    assert "<strong>promotions</strong> e-mails" in page.text
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert await rt.store.get_preferences("alice") == {}
    # The button: a form POST from a browser gets a page back.
    done = await client.post(
        path_of(url),
        content="List-Unsubscribe=One-Click",
        headers={**ONE_CLICK, "accept": "text/html"},
    )
    assert done.status_code == 200
    assert "You will no longer receive" in done.text
    assert await rt.store.get_preferences("alice") == {"promotions.email": False}


async def test_a_browser_following_an_expired_link_gets_a_page(
    client: httpx.AsyncClient, links: UnsubscribeLinks, clock: FakeClock
) -> None:
    url = links.url_for("alice", "promotions", "email")
    clock.advance(timedelta(days=91))
    page = await client.get(path_of(url), headers={"accept": "text/html"})
    assert page.status_code == 410
    assert "expired" in page.text


async def test_a_deleted_user_is_200_and_nothing_is_written(
    client: httpx.AsyncClient, rt: Runtime, links: UnsubscribeLinks
) -> None:
    r = await client.post(path_of(links.url_for("ghost", "promotions", "email")))
    assert r.status_code == 200
    assert await rt.store.get_preferences("ghost") == {}


async def test_without_a_secret_the_path_is_404(tmp_path: Path, clock: FakeClock) -> None:
    async with open_runtime(make_settings(tmp_path), clock=clock, push=FakePush()) as r:
        app: FastAPI = create_app(r, ADMIN_KEY)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            problem(await c.post("/u/abc.def"), 404)
