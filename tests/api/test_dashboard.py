"""``/dashboard``: who may see it, the session cookie, CSRF on replay, and the figures.

The page itself runs in a real browser in ``tests/browser/``; this file holds the
HTTP rules and the figures the JSON carries, on the fake clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from api.dashboard_session import COOKIE, SESSION_SECONDS
from api.routes.dashboard import FIND_LIMIT
from tepat import metrics
from tepat.app_context import app_context
from tepat.clock import FakeClock
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.models import MessageStatus
from tepat.domain.outcomes import Next
from tepat.domain.zones import TZDATA_RELEASE
from tepat.ports.channel import Accepted
from tepat.ports.push import TicketError, TicketOk
from tepat.ports.repositories.presence import LIVE_TTL
from tepat.ports.try_again import TryAgain
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, ADMIN_KEY, problem
from tests.api.helpers import (
    create_user,
    drain_due,
    make_broker_dead_letter,
    notification_body,
    ok,
    scene,
)
from tests.support.fake_push import FakePush

NOTIFY = "/v1/users/alice/notifications"


async def login(client: httpx.AsyncClient) -> str:
    """Log in through the form; returns the page's CSRF token."""
    r = await client.post("/dashboard/login", data={"key": ADMIN_KEY})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard", r.text
    page = await client.get("/dashboard")
    assert page.status_code == 200, page.text
    marker = '<meta name="csrf-token" content="'
    start = page.text.index(marker) + len(marker)
    return page.text[start : page.text.index('"', start)]


async def data(client: httpx.AsyncClient, **kw: Any) -> dict[str, Any]:
    r = await ok(await client.get("/dashboard/data", **kw))
    return dict(r.json())


async def test_without_credentials_only_the_login_form_and_assets_are_served(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/dashboard")
    assert page.status_code == 303 and page.headers["location"] == "/dashboard/login"
    form = await client.get("/dashboard/login")
    assert form.status_code == 200 and 'name="key"' in form.text
    assert "frame-ancestors 'none'" in form.headers["content-security-policy"]
    for name in ("dashboard.js", "dashboard.css"):
        assert (await client.get(f"/dashboard/static/{name}")).status_code == 200
    problem(await client.get("/dashboard/static/dashboard.html"), 404)  # templates stay in
    problem(await client.get("/dashboard/data"), 401)
    problem(await client.get("/dashboard/data", headers={"X-API-Key": "wrong"}), 401)
    problem(await client.post("/dashboard/dead-letters/x/replay"), 401)


async def test_a_wrong_key_is_refused_and_the_right_one_gives_a_strict_http_only_cookie(
    client: httpx.AsyncClient,
) -> None:
    wrong = await client.post("/dashboard/login", data={"key": "not-the-key"})
    assert wrong.status_code == 401 and "not the admin key" in wrong.text
    assert COOKIE not in client.cookies

    r = await client.post("/dashboard/login", data={"key": ADMIN_KEY})
    cookie = r.headers["set-cookie"].lower()
    for attribute in ("httponly", "samesite=strict", "path=/dashboard", "max-age="):
        assert attribute in cookie, cookie
    assert "secure" not in cookie  # plain HTTP here; over HTTPS it is Secure (next test)
    assert ADMIN_KEY not in r.headers["set-cookie"]

    body = await data(client)
    assert body["tzdata_release"] == TZDATA_RELEASE
    # The cookie is the dashboard's only: the API proper still wants its headers.
    problem(await client.get("/v1/admin/queues"), 401)


async def test_the_cookie_is_secure_over_https(app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://tepat.test") as c:
        r = await c.post("/dashboard/login", data={"key": ADMIN_KEY})
        assert "secure" in r.headers["set-cookie"].lower()


async def test_a_forged_or_expired_cookie_is_no_session(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await login(client)
    good = client.cookies[COOKIE]
    expires, nonce, signature = good.split(".")
    for forged in (
        f"{int(expires) + 3600}.{nonce}.{signature}",  # a longer life, same signature
        f"{expires}.{nonce}.{'0' * len(signature)}",
        f"{expires}.{nonce}.{signature}é",
        "garbage",
    ):
        client.cookies.clear()
        raw = {b"Cookie": f"{COOKIE}={forged}".encode("latin-1")}
        problem(await client.get("/dashboard/data", headers=raw), 401)
        assert (await client.get("/dashboard", headers=raw)).status_code == 303
    client.cookies.set(COOKIE, good)
    await data(client)
    clock.advance(timedelta(seconds=SESSION_SECONDS + 1))
    problem(await client.get("/dashboard/data"), 401)


async def test_replay_needs_the_csrf_token_with_the_cookie_and_leaves_the_list(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    dead_id = await make_broker_dead_letter(rt)
    csrf = await login(client)
    listed = (await data(client))["dead_letters"]
    assert [(d["id"], d["reason"], d["attempts"]) for d in listed] == [(dead_id, "unreadable", 2)]
    assert listed[0]["messages"] is None  # not a Tepat batch

    url = f"/dashboard/dead-letters/{dead_id}/replay"
    problem(await client.post(url), 403)  # the cookie alone: what a forged request has
    problem(await client.post(url, headers={"X-CSRF-Token": "guess"}), 403)
    problem(await client.post(url, headers={b"X-CSRF-Token": "é".encode("latin-1")}), 403)
    assert await rt.broker.dead_letters(rt.categories.queues())  # still there

    r = await ok(await client.post(url, headers={"X-CSRF-Token": csrf}))
    assert r.json() == {"id": dead_id, "replayed": True}
    assert (await data(client))["dead_letters"] == []  # not served from the cache
    problem(await client.post(url, headers={"X-CSRF-Token": csrf}), 404)


async def test_the_api_key_header_reaches_data_and_replay_without_a_session(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    dead_id = await make_broker_dead_letter(rt)
    assert (await data(client, headers=ADMIN))["dead_letters"][0]["id"] == dead_id
    await ok(await client.post(f"/dashboard/dead-letters/{dead_id}/replay", headers=ADMIN))


async def test_logout_clears_the_cookie_and_needs_the_token(client: httpx.AsyncClient) -> None:
    csrf = await login(client)
    problem(await client.post("/dashboard/logout", data={"csrf": "wrong"}), 403)
    r = await client.post("/dashboard/logout", data={"csrf": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/login"
    assert COOKIE not in client.cookies
    problem(await client.get("/dashboard/data"), 401)


async def test_figures_follow_a_send_a_failure_and_a_dead_device(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, push: FakePush, app: FastAPI
) -> None:
    await scene(client)
    queue = rt.categories.get("custom").queue_name
    # due within the outbox's publish_soon: on the broker now (one further ahead
    # waits in the store until its batch is full or soon due)
    send_at = clock.now() + timedelta(seconds=4)
    await ok(
        await client.post(
            NOTIFY, json=notification_body(send_at=send_at.isoformat()), headers=ADMIN
        )
    )
    await rt.outbox.flush()
    before = await data(client, headers=ADMIN)
    custom = next(q for q in before["queues"] if q["category"] == "custom")
    assert (custom["queue"], custom["scheduled"], custom["ready"]) == (queue, 1, 0)
    assert before["rates"]["sends_per_second"] == 0
    assert before["rates"]["lateness_p99_seconds"] is None

    clock.advance(timedelta(seconds=4 + 3))  # sent 3 s after its instant
    assert await drain_due(rt) == 1
    app.state.dashboard.invalidate()  # the cache runs on real time, which has not passed
    after = await data(client, headers=ADMIN)
    custom = next(q for q in after["queues"] if q["category"] == "custom")
    assert (custom["scheduled"], custom["ready"], custom["in_flight"]) == (0, 0, 0)
    assert after["rates"]["sends_per_second"] == 1 / 60
    assert after["rates"]["lateness_p50_seconds"] == 3.0
    assert after["rates"]["lateness_p99_seconds"] == 3.0
    assert after["rates"]["lateness_samples"] == 1

    # bob's phone is gone: the message fails with Expo's code and the device is deactivated.
    await create_user(client, "bob")
    await ok(
        await client.put(
            "/v1/users/bob/devices/phone",
            json={"push_token": "ExponentPushToken[bob]"},
            headers=ADMIN,
        )
    )
    push.refuse_with = TicketError(
        "DeviceNotRegistered", "not registered", permanent=True, deactivate_device=True
    )
    bob = notification_body(idempotency_key="b")
    await ok(await client.post("/v1/users/bob/notifications", json=bob, headers=ADMIN))
    assert await drain_due(rt) == 1
    app.state.dashboard.invalidate()
    figures = await data(client, headers=ADMIN)
    assert figures["failures_by_code"] == {"DeviceNotRegistered": 1}
    assert figures["devices_deactivated"] == {"DeviceNotRegistered": 1}
    assert figures["devices_deactivated_total"] == 1


async def test_viewers_share_one_snapshot_within_the_cache_time(
    client: httpx.AsyncClient, app: FastAPI, clock: FakeClock
) -> None:
    first = await data(client, headers=ADMIN)
    clock.advance(5)  # the figures' clock moves; the cache's (real time) has not
    assert (await data(client, headers=ADMIN))["generated_at"] == first["generated_at"]
    app.state.dashboard.invalidate()
    assert (await data(client, headers=ADMIN))["generated_at"] != first["generated_at"]


async def test_every_channel_s_queues_are_listed_with_their_batches(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    await rt.broker.publish("tepat.webhooks", b"a batch")
    await rt.broker.publish("tepat.inbox.normal", b"another", delay_seconds=60)
    lines = (await data(client, headers=ADMIN))["queues"]
    assert sorted(q["queue"] for q in lines) == sorted(rt.queues)
    assert {q["channel"] for q in lines} == {"push", "inbox", "webhook"}
    by_queue = {q["queue"]: q for q in lines}
    assert by_queue["tepat.webhooks"] == {
        "channel": "webhook",
        "queue": "tepat.webhooks",
        "category": None,
        "ready": 1,
        "scheduled": 0,
        "in_flight": 0,
        "dead_letters": 0,
    }
    assert (by_queue["tepat.inbox.normal"]["scheduled"], by_queue["tepat.meal"]["category"]) == (
        1,
        "meal",
    )
    assert by_queue["tepat.push.critical"]["category"] is None


def channel(figures: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(next(c for c in figures["channels"] if c["channel"] == name))


async def test_channels_oldest_due_and_live_consumers_come_from_the_store(
    client: httpx.AsyncClient, rt: Runtime, clock: FakeClock, app: FastAPI
) -> None:
    await scene(client)
    figures = await data(client, headers=ADMIN)
    assert [c["channel"] for c in figures["channels"]] == list(rt.channels)
    assert figures["oldest_due_unsent_seconds"] is None
    assert figures["live_consumers"] == 0
    sent_before = channel(figures, "push")["answers_by_outcome"].get("sent", 0)
    planned = channel(figures, "push")["messages_by_status"]["pending"]  # alice's reminder

    # Due now, and nobody consumes it for 30 s (a stopped consumer, a locked store).
    body = notification_body(send_at=clock.now().isoformat())
    await ok(await client.post(NOTIFY, json=body, headers=ADMIN))
    clock.advance(30)
    await rt.store.heartbeat("expo-rate:test", "consumer-1", clock.now(), LIVE_TTL)
    app.state.dashboard.invalidate()
    figures = await data(client, headers=ADMIN)
    assert channel(figures, "push")["messages_by_status"]["pending"] == planned + 1
    assert figures["oldest_due_unsent_seconds"] == 30.0
    assert figures["live_consumers"] == 1

    assert await drain_due(rt) == 1
    clock.advance(LIVE_TTL + timedelta(seconds=1))  # the consumer stopped beating
    app.state.dashboard.invalidate()
    figures = await data(client, headers=ADMIN)
    push = channel(figures, "push")
    assert (push["messages_by_status"]["sent"], push["provider"]) == (1, "expo")
    assert push["messages_by_status"]["pending"] == planned
    assert push["answers_by_outcome"]["sent"] == sent_before + 1  # this process sent it
    assert figures["oldest_due_unsent_seconds"] is None
    assert figures["live_consumers"] == 0


async def test_a_channel_s_429s_and_retries_are_this_process_s_counters(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    before = channel(await data(client, headers=ADMIN), "inbox")
    throttled = TryAgain("inbox_429: slow down", throttled=True)
    metrics.count_provider_error("inbox", throttled)
    metrics.count_provider_error("inbox", TryAgain("inbox_503: busy"))  # not a 429
    retry = Next(MessageStatus.PENDING)
    metrics.count_answer("inbox", "custom", throttled, retry)
    app.state.dashboard.invalidate()
    after = channel(await data(client, headers=ADMIN), "inbox")
    assert after["throttled"] == before["throttled"] + 1
    assert after["retries"] == before["retries"] + 1
    retried = after["answers_by_outcome"]["retry"]
    assert retried == before["answers_by_outcome"].get("retry", 0) + 1


def provider(figures: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(next(p for p in figures["push_providers"] if p["provider"] == name))


async def test_each_push_provider_has_a_line_of_its_sends_and_429s(
    client: httpx.AsyncClient, rt: Runtime, app: FastAPI
) -> None:
    figures = await data(client, headers=ADMIN)
    shown = [p["provider"] for p in figures["push_providers"]]
    assert set(rt.push_kinds) <= set(shown)  # configured ones, before they answer
    before = {name: provider(figures, name) for name in shown}
    expo_before = before["expo"]["sends_by_outcome"]
    # Another kind's answers (a provider the runtime does not know: counted all the same).
    metrics.count_push_answer("webpush", TryAgain("429: slow down", throttled=True))
    metrics.count_push_answer("webpush", TicketError("Gone", "gone", permanent=True))
    metrics.count_push_answer("expo", TicketOk("t-1"))
    app.state.dashboard.invalidate()
    figures = await data(client, headers=ADMIN)
    webpush = provider(figures, "webpush")
    old = before.get("webpush", {"throttled": 0, "sends_by_outcome": {}})
    assert webpush["throttled"] == old["throttled"] + 1
    assert webpush["sends_by_outcome"]["refused"] == old["sends_by_outcome"].get("refused", 0) + 1
    expo = provider(figures, "expo")
    assert expo["sends_by_outcome"]["accepted"] == expo_before.get("accepted", 0) + 1
    assert expo["throttled"] == before["expo"]["throttled"]


def app_line(figures: dict[str, Any], app: str) -> dict[str, Any]:
    found = [a for a in figures["apps"] if a["app"] == app]
    return dict(found[0]) if found else {"sent": 0, "answers": 0, "throttled": 0, "reserve_used": 0}


async def test_each_app_has_a_line_of_its_sends_429s_reserve_use_and_lateness(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    figures = await data(client, headers=ADMIN)
    assert DEFAULT_APP in [a["app"] for a in figures["apps"]]  # before it sends
    before = {name: app_line(figures, name) for name in (DEFAULT_APP, "dash-b")}
    sent, retry = Next(MessageStatus.SENT), Next(MessageStatus.PENDING)
    throttled = TryAgain("inbox_429: slow down", throttled=True)
    with app_context("dash-b"):
        for late in (0.3, 0.3, 0.3, 40.0):  # 3 in the (0.25, 0.5] bucket, 1 in (30, 60]
            metrics.count_answer("inbox", "custom", Accepted(), sent)
            metrics.observe_lateness("inbox", "custom", late)
        metrics.count_answer("inbox", "custom", throttled, retry)
        metrics.count_provider_error("inbox", throttled)
        metrics.count_reserve_used("twilio", 2)
    metrics.count_answer("inbox", "custom", Accepted(), sent)  # the default app's
    app.state.dashboard.invalidate()
    figures = await data(client, headers=ADMIN)
    b, default = app_line(figures, "dash-b"), app_line(figures, DEFAULT_APP)
    moved = {
        key: b[key] - before["dash-b"][key]
        for key in ("sent", "answers", "throttled", "reserve_used")
    }
    assert moved == {"sent": 4, "answers": 5, "throttled": 1, "reserve_used": 2}
    assert default["sent"] == before[DEFAULT_APP]["sent"] + 1
    assert default["throttled"] == before[DEFAULT_APP]["throttled"]
    # dash-b is this test's own app: its buckets hold these four observations only.
    assert b["lateness_p50_seconds"] == pytest.approx(0.25 + 0.25 * 2 / 3)  # rank 2 of 3
    assert b["lateness_p99_seconds"] == pytest.approx(30 + 30 * (3.96 - 3) / 1)


async def test_a_store_that_fails_leaves_the_page_up_saying_so_with_the_last_figures(
    client: httpx.AsyncClient, rt: Runtime, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    await scene(client)
    before = await data(client, headers=ADMIN)
    assert (before["store"]["up"], before["store"]["error"], before["problems"]) == (
        True,
        None,
        [],
    )

    async def gone(*_: Any) -> Any:
        raise ConnectionError("the store is gone")

    monkeypatch.setattr(rt.store, "count_messages", gone)  # a read
    monkeypatch.setattr(rt.store, "set_meta", gone)  # the probe's write
    app.state.dashboard.invalidate()
    during = await data(client, headers=ADMIN)  # an answer, not a 500
    assert (during["store"]["up"], during["store"]["error"]) == (
        False,
        "ConnectionError: the store is gone",
    )
    assert metrics.REGISTRY.get_sample_value("tepat_store_up", {"probe": "dashboard"}) == 0
    assert during["channels"] == before["channels"]  # the last figures read
    assert during["problems"] == [
        "store: cannot be read (ConnectionError: the store is gone); older figures",
        "store unavailable: ConnectionError: the store is gone",
    ]

    monkeypatch.undo()
    app.state.dashboard.invalidate()
    after = await data(client, headers=ADMIN)
    assert (after["store"]["up"], after["problems"]) == (True, [])
    assert metrics.REGISTRY.get_sample_value("tepat_store_up", {"probe": "dashboard"}) == 1


async def test_find_a_message_by_id_or_by_user(client: httpx.AsyncClient, rt: Runtime) -> None:
    await scene(client)
    ids = []
    for n in range(FIND_LIMIT + 2):
        body = notification_body(idempotency_key=f"k{n}")
        ids.append((await ok(await client.post(NOTIFY, json=body, headers=ADMIN))).json()["id"])

    found = (await ok(await client.get(f"/dashboard/messages?id={ids[0]}", headers=ADMIN))).json()
    (message,) = found["messages"]
    assert (message["id"], message["user_id"], message["status"]) == (ids[0], "alice", "pending")
    assert message["channel"] == "push" and message["category"] == "custom"

    by_user = (await ok(await client.get("/dashboard/messages?user=alice", headers=ADMIN))).json()
    assert len(by_user["messages"]) == FIND_LIMIT == by_user["limit"]
    assert {m["user_id"] for m in by_user["messages"]} == {"alice"}
    for query in ("id=nope", "user=nobody"):
        r = await ok(await client.get(f"/dashboard/messages?{query}", headers=ADMIN))
        assert r.json()["messages"] == []

    for bad in ("", "?id=a&user=b", "?id=", "?user=%3Cscript%3E", f"?id={'x' * 129}"):
        problem(await client.get(f"/dashboard/messages{bad}", headers=ADMIN), 422)
    problem(await client.get(f"/dashboard/messages?id={ids[0]}"), 401)
    await login(client)  # the session cookie serves it too (a read: no CSRF token)
    await ok(await client.get(f"/dashboard/messages?id={ids[0]}"))
