"""The operator dashboard in a real browser (Debian's chromium, driven by Playwright).

The whole service runs in-process (``live.py``) on a fake clock; the browser logs
in with the admin key, watches a planned message appear in ``scheduled`` and get
sent, sees a failure by provider code and a deactivated device, replays a dead
letter by clicking, and watches it leave the list. Then the episodes an operator
must see while they last, each on the page and in ``/metrics``: an Expo 429 and a
crashed consumer; an SMS (Twilio 20429) and an e-mail (SMTP 421 4.7.0) throttling
episode; a Twilio 5xx failed over to the second account; the SQLite file held locked
by another connection. Every wait is on what the page shows (Playwright's ``expect``)
or on what ``/metrics`` says, never a sleep.

Chromium: ``/usr/bin/chromium`` (``scripts/test.sh`` installs it), or the path
in ``TEPAT_TEST_CHROMIUM``. Without it the test is skipped, except in CI
(``CI=true``), where it must run. ``TEPAT_DASHBOARD_SCREENSHOT=docs/dashboard.png``
also saves the screenshot the operations guide (docs/guides/operations.md) shows.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from tepat.domain.models import slot_key_for
from tepat.domain.zones import TZDATA_RELEASE
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN
from tests.browser.live import Live, live_service
from tests.support.messages import make_message

ADMIN_KEY = "browser-test-admin-key-0123456789abcdef"
START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
RETRY_AGE_SECONDS = 5.0  # TEPAT_BROKER_RETRY_AGE_SECONDS: a nack this long after the first dies
ALICE = "ExponentPushToken[alice-phone]"
BOB = "ExponentPushToken[bob-old-phone]"
ALICE_PHONE = "+14155552671"
ALICE_MAIL = "alice@example.com"
TIMEOUT_MS = 20_000


def chromium() -> str:
    path = os.environ.get("TEPAT_TEST_CHROMIUM") or shutil.which("chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        path = None
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the browser test: chromium or playwright is missing")
        pytest.skip(
            "no chromium (or no playwright): `apt-get install chromium` and "
            "`pip install -e '.[test]'`, as scripts/test.sh does"
        )
    return path


@contextmanager
def dashboard_page(executable: str) -> Iterator[tuple[Any, list[str]]]:
    """A Chromium page, and the page errors and console warnings it logs (none expected)."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's own sandbox cannot start.
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            problems: list[str] = []
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text} ({m.location.get('url')})")
                    # The browser asks for a favicon on its own; the service has none.
                    if m.type in ("error", "warning")
                    and not str(m.location.get("url")).endswith("/favicon.ico")
                    else None
                ),
            )
            expect.set_options(timeout=TIMEOUT_MS)
            yield page, problems
        finally:
            browser.close()


def log_in(page: Any, live: Live) -> None:
    from playwright.sync_api import expect

    page.goto(f"{live.base_url}/dashboard/login")
    page.fill("#key", ADMIN_KEY)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/dashboard$"))


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_service(
        tmp_path,
        admin_key=ADMIN_KEY,
        start=START,
        broker_retry_age_seconds=RETRY_AGE_SECONDS,
        # A second Twilio account (failover), on the same sandbox: the first's URL.
        twilio_secondary_account_sid=DEFAULT_ACCOUNT_SID,
        twilio_secondary_auth_token=SecretStr(DEFAULT_AUTH_TOKEN),
    ) as service:
        yield service


@pytest.fixture
def api(live: Live) -> Iterator[httpx.Client]:
    headers = {"X-API-Key": ADMIN_KEY}
    with httpx.Client(base_url=live.base_url, headers=headers, timeout=10) as client:
        yield client


def put(api: httpx.Client, path: str, body: dict[str, Any]) -> None:
    r = api.put(path, json=body)
    assert r.is_success, r.text


def notify(api: httpx.Client, user: str, key: str, category: str, at: datetime | None) -> str:
    body: dict[str, Any] = {"idempotency_key": key, "category": category, "title": key}
    body["body"] = f"{category} one-off"
    if at is not None:
        body["send_at"] = at.isoformat()
    r = api.post(f"/v1/users/{user}/notifications", json=body)
    assert r.is_success, r.text
    return str(r.json()["id"])


def test_dashboard_in_chromium(live: Live, api: httpx.Client, tmp_path: Path) -> None:
    executable = chromium()
    from playwright.sync_api import expect

    for user, token in (("alice", ALICE), ("bob", BOB)):
        put(api, f"/v1/users/{user}", {"timezone": "Europe/London"})
        put(api, f"/v1/users/{user}/devices/phone", {"push_token": token})
    live.run(lambda: live.sandbox.script_token(BOB, ticket_error="DeviceNotRegistered"))

    with dashboard_page(executable) as (page, problems):
        # Without a session the page sends the browser to the login form.
        page.goto(f"{live.base_url}/dashboard")
        expect(page).to_have_url(re.compile(r"/dashboard/login$"))
        page.fill("#key", "not the key")
        page.click("button[type=submit]")
        expect(page.locator(".error")).to_contain_text("not the admin key")
        problems.clear()  # the 401 of that attempt is logged to the console, as it should be
        page.fill("#key", ADMIN_KEY)
        page.click("button[type=submit]")
        expect(page).to_have_url(re.compile(r"/dashboard$"))
        expect(page.locator("#tzdata")).to_have_text(TZDATA_RELEASE)
        cookie = next(c for c in page.context.cookies() if c["name"] == "tepat_dashboard")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie

        def cell(category: str, column: str) -> Any:
            return page.locator(f'#queues tr[data-category="{category}"] td.{column}')

        # Messages planned minutes ahead, one per (queue, second): each batch
        # waits in the store to fill until it is due within seconds.
        expect(cell("custom", "scheduled")).to_have_text("0")
        due = START + timedelta(minutes=5)
        custom_id = notify(api, "alice", "hello", "custom", due)
        notify(api, "alice", "lunch", "meal", START + timedelta(minutes=8))
        notify(api, "alice", "check-in", "safety", START + timedelta(minutes=9))
        live.advance(live.rt.settings.outbox_interval_seconds)
        expect(page.locator("#sends-per-second")).to_have_text("0.00")
        expect(cell("custom", "scheduled")).to_have_text("0")

        # Meanwhile an unreadable batch is nacked, then, past the retry age, dead-lettered
        # (the clock moves a minute: the planned message is not due yet).
        queue = live.rt.categories.get("mood").queue_name
        dead_id = make_dead_letter(live, queue)
        row = page.locator(f'#dead-letters tr[data-id="{dead_id}"]')
        expect(row.locator("td.attempts")).to_have_text("2")
        expect(row.locator("td.reason")).to_contain_text("not a Tepat batch")
        expect(cell("mood", "dead")).to_have_text("1")
        # Due within seconds: the outbox loop's pass puts it on its queue, `scheduled`.
        live.advance((due - live.run(live.clock.now)).total_seconds() - 3)
        expect(cell("custom", "scheduled")).to_have_text("1")
        expect(cell("meal", "scheduled")).to_have_text("0")

        # Its instant passes: it is sent, two seconds late by the service's clock.
        live.advance((due - live.run(live.clock.now)).total_seconds() + 2)
        expect(cell("custom", "scheduled")).to_have_text("0")
        expect(page.locator("#sends-per-second")).to_have_text("0.02")  # 1 in the last 60 s
        expect(page.locator("#lateness-p50")).to_have_text("2.0 s")
        # The default app's line: this process's counters (other tests' sends too).
        default_app = page.locator('#apps tr[data-app="default"]')
        expect(default_app.locator("td.sent")).to_have_text(NOT_ZERO)
        expect(default_app.locator("td.p50")).to_have_text(re.compile(r"^\d+(\.\d)? (ms|s|min)$"))
        listed = api.get("/v1/users/alice/messages", params={"status": "sent"}).json()
        assert [m["id"] for m in listed["messages"]] == [custom_id], listed
        assert [n["to"] for n in live.sandbox.received()] == [ALICE]

        # Bob's phone is gone: a failure by Expo's code and a deactivated device.
        notify(api, "bob", "hi", "custom", None)
        failures = page.locator('#failures tr[data-code="DeviceNotRegistered"] td.n')
        expect(failures).to_have_text("1")
        expect(page.locator("#devices-deactivated")).to_have_text("1")
        expect(row.locator("button.replay")).to_be_visible()

        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        if target := os.environ.get("TEPAT_DASHBOARD_SCREENSHOT"):
            shutil.copyfile(shot, target)

        # Replay it by clicking: it leaves the list (and the broker's DLQ).
        row.locator("button.replay").click()
        expect(row).to_have_count(0)
        expect(page.locator("#dead-letters td.empty")).to_have_text("none")
        expect(cell("mood", "dead")).to_have_text("0")
        assert live.call(live.rt.broker.dead_letters([queue])) == []

        page.click("text=Log out")
        expect(page).to_have_url(re.compile(r"/dashboard/login$"))
        assert problems == [], problems


BY_THE_DASHBOARD = {"probe": "dashboard"}  # its probe writes (the gauges' run on the clock)
NOT_ZERO = re.compile(r"^(?!0$)\d")  # a chart's highest point above zero


def test_an_expo_throttling_episode_and_a_consumer_crash_show_while_they_happen(
    live: Live, api: httpx.Client
) -> None:
    """Expo answers 429: the push row's 429s and its chart move, the retry is sent; then
    the consumer crashes mid-send: live consumers drop to 0 and the message it had in
    hand ages, found by id as sending; the consumer starts again and, past the message's
    lease, sends it again."""
    executable = chromium()
    from playwright.sync_api import expect

    put(api, "/v1/users/alice", {"timezone": "Europe/London"})
    put(api, "/v1/users/alice/devices/phone", {"push_token": ALICE})
    with dashboard_page(executable) as (page, problems):
        log_in(page, live)
        push = page.locator('#channels tr[data-channel="push"]')
        chart = push.locator("svg.spark")
        expect(page.locator("#live-consumers")).to_have_text("1")
        expect(page.locator("#oldest-due")).to_have_text("none")
        throttled_before = int(push.locator("td.throttled").inner_text())
        # The same 429 under its provider (a device kind), per notification.
        expo = page.locator('#push-providers tr[data-provider="expo"]')
        expo_throttled = int(expo.locator("td.throttled").inner_text())
        expo_accepted = int(expo.locator("td.accepted").inner_text())

        # Expo refuses the next request with 429: counted, and the message waits to retry.
        live.run(lambda: live.sandbox.fail_next(1, 429, retry_after=1.0))
        notify(api, "alice", "rush", "custom", None)
        expect(push.locator("td.throttled")).to_have_text(str(throttled_before + 1))
        expect(expo.locator("td.throttled")).to_have_text(str(expo_throttled + 1))
        expect(push.locator("td.answers")).to_contain_text("retry")
        waiting_for_its_retry(page, "push")
        # Time passes: the retry is sent; the chart has drawn both rates.
        live.advance(30)
        expect(push.locator("td.sent")).to_have_text("1")
        expect(expo.locator("td.accepted")).to_have_text(str(expo_accepted + 1))
        expect(chart).to_have_attribute("data-throttled", NOT_ZERO)
        live.advance(1)  # one more refresh, so the send's interval is closed and drawn
        expect(chart).to_have_attribute("data-sends", NOT_ZERO)
        assert [n["to"] for n in live.sandbox.received()] == [ALICE]

        # The consumer crashes mid-send (its loops cancelled where they stand, nothing
        # drained): Expo has the request, its answer never comes back. Nobody beats, and
        # the message stays `sending`, older every second.
        live.run(lambda: live.sandbox.fail_after_accept(1, "stall"))
        held = notify(api, "alice", "held", "custom", None)
        wait_for(live, lambda: live.sandbox.stalled() == 1, "the request in Expo's hands")
        expect(push.locator("td.sending")).to_have_text("1")
        live.crash_consumer()
        expect(page.locator("#live-consumers")).to_have_text("0")
        live.advance(30)
        expect(page.locator("#oldest-due")).to_have_text("30.0 s")
        wait_for_metric(live, "tepat_oldest_due_unsent_seconds", {}, lambda age: age == 30)
        page.select_option("#find-by", "id")
        page.fill("#find-value", held)
        page.click("#find button")
        found = page.locator(f'#found tr[data-id="{held}"]')
        expect(found.locator("td.status")).to_have_text("sending")

        # Started again, the consumer leaves it alone (it may be another's, in hand) until
        # its lease runs out; then the sweeper re-drives it, a possible duplicate.
        redriven = {"cause": "lease_expired"}
        redriven_before = scraped(live, "tepat_sending_redriven_total", redriven)
        live.run(live.sandbox.release_stalled)
        live.start_consumer()
        expect(page.locator("#live-consumers")).to_have_text("1")
        expect(push.locator("td.sending")).to_have_text("1")
        live.advance(live.rt.settings.sending_lease_seconds)
        expect(page.locator("#oldest-due")).to_have_text("none")
        expect(push.locator("td.sent")).to_have_text("2")
        assert [n["to"] for n in live.sandbox.received()] == [ALICE] * 3  # held went twice
        assert scraped(live, "tepat_sending_redriven_total", redriven) == redriven_before + 1
        live.advance(live.rt.settings.metrics_refresh_seconds)  # the gauges' next read
        wait_for_metric(live, "tepat_oldest_due_unsent_seconds", {}, lambda age: age == 0)
        page.select_option("#find-by", "user")
        page.fill("#find-value", "alice")
        page.click("#find button")
        expect(found.locator("td.status")).to_have_text("sent")
        expect(page.locator("#found tbody tr")).to_have_count(2)
        assert problems == [], problems


def test_sms_and_email_throttling_show_while_they_happen(live: Live, api: httpx.Client) -> None:
    """Twilio answers 429 (its 20429), then the SMTP relay answers 421 4.7.0: each time the
    channel's row counts the 429 and the retry while the message waits, /metrics counts
    the throttled answer by channel, and once the provider takes it again the retry is
    sent and the row's chart shows the episode."""
    executable = chromium()
    put(api, "/v1/users/alice", {"timezone": "Europe/London"})
    put(api, "/v1/users/alice/contacts/sms", {"address": ALICE_PHONE, "verified": True})
    put(api, "/v1/users/alice/contacts/email", {"address": ALICE_MAIL, "verified": True})
    with dashboard_page(executable) as (page, problems):
        log_in(page, live)
        live.run(lambda: live.twilio.fail_next(1, 429))  # the next request only
        throttling_episode(page, live, "sms", "twilio_20429", lift=lambda: None)
        assert [m["to"] for m in live.twilio.received()] == [ALICE_PHONE]
        failover_episode(page, live)
        assert [m["to"] for m in live.twilio.received()] == [ALICE_PHONE] * 2

        live.smtp.replies[ALICE_MAIL] = "421 4.7.0 Too many messages, slow down"
        throttling_episode(
            page, live, "email", "smtp_421", lift=lambda: live.smtp.replies.pop(ALICE_MAIL)
        )
        assert [r.rcpt_tos for r in live.smtp.received] == [[ALICE_MAIL]]
        assert problems == [], problems


def failover_episode(page: Any, live: Live) -> None:
    """Twilio answers a 5xx: the SMS goes through the second account at once, and the
    row counts the failover by route, as /metrics does."""
    from playwright.sync_api import expect

    route = {"channel": "sms", "from": "twilio", "to": "twilio_secondary"}
    labels = {**route, "possible_duplicate": "false"}
    before = int(scraped(live, "tepat_failovers_total", labels))
    live.run(lambda: live.twilio.fail_next(1, 503))
    send_now(live, "sms", "sms-failover")
    row = page.locator('#channels tr[data-channel="sms"]')
    expect(row.locator("td.failovers")).to_have_text(f"twilio → twilio_secondary {before + 1}")
    assert scraped(live, "tepat_failovers_total", labels) == before + 1


def throttling_episode(
    page: Any, live: Live, channel: str, code: str, lift: Callable[[], object]
) -> None:
    """A message to alice on ``channel``, throttled by its provider (already told to):
    seen on the dashboard and in /metrics while it waits; ``lift`` ends the episode."""
    from playwright.sync_api import expect

    row = page.locator(f'#channels tr[data-channel="{channel}"]')
    expect(row).to_be_visible()
    # Counters are this process's since it started: earlier tests may have moved them.
    throttled = int(row.locator("td.throttled").inner_text())
    retries = int(row.locator("td.retries").inner_text())
    labels = {"channel": channel, "kind": "throttled", "code": code}
    scraped_before = scraped(live, "tepat_provider_errors_total", labels)

    send_now(live, channel, f"{channel}-rush")
    expect(row.locator("td.throttled")).to_have_text(str(throttled + 1))
    expect(row.locator("td.retries")).to_have_text(str(retries + 1))
    waiting_for_its_retry(page, channel)
    expect(row.locator("td.answers")).to_contain_text("retry")
    assert scraped(live, "tepat_provider_errors_total", labels) == scraped_before + 1
    assert scraped(live, "tepat_sends_total", {"channel": channel, "outcome": "retry"}) >= 1

    lift()
    live.advance(30)  # past the retry's backoff
    expect(row.locator("td.sent")).to_have_text("1")
    expect(row.locator("td.pending")).to_have_text("0")
    expect(row.locator("td.sending")).to_have_text("0")
    expect(row.locator("svg.spark")).to_have_attribute("data-throttled", NOT_ZERO)
    sent = {"channel": channel, "outcome": "sent"}
    wait_for_metric(live, "tepat_sends_total", sent, lambda n: n >= 1)


def test_a_store_lock_shows_while_it_lasts(live: Live, api: httpx.Client, tmp_path: Path) -> None:
    """Another connection holds the SQLite file locked (BEGIN EXCLUSIVE): the dashboard
    still answers (reads go on beside the lock, in WAL), shows the store unavailable and a
    due message waiting, /metrics says tepat_store_up 0; once the lock is let go the store
    is up again and the held message is sent."""
    executable = chromium()
    from playwright.sync_api import expect

    put(api, "/v1/users/alice", {"timezone": "Europe/London"})
    put(api, "/v1/users/alice/devices/phone", {"push_token": ALICE})
    with dashboard_page(executable) as (page, problems):
        log_in(page, live)
        expect(page.locator("#store-status")).to_have_text("up")
        expect(page.locator("#store-detail")).to_contain_text("a write took")
        due = live.run(live.clock.now) + timedelta(seconds=10)
        held = notify(api, "alice", "held", "custom", due)  # a write: before the lock

        lock = sqlite3.connect(tmp_path / "tepat.db", isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            live.advance(15)  # it falls due while the store takes no write
            expect(page.locator("#store-status")).to_have_text("unavailable")
            expect(page.locator("#store-detail")).to_contain_text("locked or overloaded")
            expect(page.locator("#problems")).to_contain_text("store unavailable")
            expect(page.locator("#oldest-due")).to_have_text("5.0 s")
            assert scraped(live, "tepat_store_up", BY_THE_DASHBOARD) == 0
            assert scraped(live, "tepat_store_probe_seconds", BY_THE_DASHBOARD) >= 2.0
        finally:
            lock.execute("ROLLBACK")
            lock.close()

        expect(page.locator("#store-status")).to_have_text("up")
        expect(page.locator("#problems")).to_be_hidden()
        push = page.locator('#channels tr[data-channel="push"]')
        expect(push.locator("td.sent")).to_have_text("1")
        expect(page.locator("#oldest-due")).to_have_text("none")
        wait_for_metric(live, "tepat_store_up", BY_THE_DASHBOARD, lambda up: up == 1)
        listed = api.get("/v1/users/alice/messages", params={"status": "sent"}).json()
        assert [m["id"] for m in listed["messages"]] == [held], listed
        assert problems == [], problems


def waiting_for_its_retry(page: Any, channel: str) -> None:
    """One message of ``channel``'s row waits for its retry: pending, or sending once
    claimed ahead of its instant (TEPAT_CLAIM_AHEAD_SECONDS) when its backoff is shorter
    than that lead, on a clock that stands still until the test moves it."""
    page.wait_for_function(
        "sel => [...document.querySelectorAll(sel)]"
        ".reduce((n, td) => n + Number(td.textContent), 0) === 1",
        arg=f'#channels tr[data-channel="{channel}"] :is(td.pending, td.sending)',
    )


def send_now(live: Live, channel: str, key: str) -> str:
    """A message to alice on ``channel``, due now, put in the store and on its queue as
    an event's message is (the API's one-off notifications are push only)."""
    now = live.run(live.clock.now)
    at = {"scheduled_at": now, "nominal_at": now, "due_at": now}
    message = make_message(
        f"browser|{key}", user_id="alice", category="custom", channel=channel, **at
    )
    message = dataclasses.replace(message, slot_key=slot_key_for(message))

    async def queued() -> None:
        await live.rt.store.insert_messages([message])
        await live.rt.outbox.flush()

    live.call(queued())
    return message.id


async def scrape(live: Live, name: str, labels: dict[str, str]) -> float:
    """The sum of ``name``'s samples with ``labels`` in the service's /metrics, as
    Prometheus would scrape it (awaited on the service's loop: it serves the request)."""
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{live.base_url}/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def scraped(live: Live, name: str, labels: dict[str, str]) -> float:
    return live.call(scrape(live, name, labels))


def wait_for_metric(
    live: Live, name: str, labels: dict[str, str], holds: Callable[[float], bool]
) -> None:
    async def scraped_holds() -> bool:
        return holds(await scrape(live, name, labels))

    wait_for(live, scraped_holds, f"{name}{labels} in /metrics")


def make_dead_letter(live: Live, queue: str) -> str:
    """Publish a batch the consumer cannot read; move time past the retry age after its
    first nack, so its next nack dead-letters it. Returns the dead letter's id."""
    broker = live.rt.broker
    live.call(broker.publish(queue, b"not a batch"))

    async def nacked_once() -> bool:
        (stats,) = await broker.stats([queue])
        return stats.scheduled == 1 and stats.in_flight == 0  # handed back, due later

    wait_for(live, nacked_once, "the first nack")
    live.advance(61)  # past the retry age and the longest redelivery delay

    async def dead() -> bool:
        return bool(await broker.dead_letters([queue]))

    wait_for(live, dead, "the dead letter")
    (letter,) = live.call(broker.dead_letters([queue]))
    return letter.id


def wait_for(live: Live, pred: Any, what: str) -> None:
    from tests.support.waiting import eventually

    live.call(eventually(pred, timeout=TIMEOUT_MS / 1000, what=what))
