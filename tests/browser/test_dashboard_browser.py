"""The operator dashboard in a real browser (Debian's chromium, driven by Playwright).

The whole service runs in-process (``live.py``) on a fake clock; the browser logs
in with the admin key, watches a planned message appear in ``scheduled`` and get
sent, sees a failure by provider code and a deactivated device, replays a dead
letter by clicking, and watches it leave the list. Every wait is on what the
page shows (Playwright's ``expect``), never a sleep.

Chromium: ``/usr/bin/chromium`` (``scripts/test.sh`` installs it), or the path
in ``TEPAT_TEST_CHROMIUM``. Without it the test is skipped, except in CI
(``CI=true``), where it must run. ``TEPAT_DASHBOARD_SCREENSHOT=docs/dashboard.png``
also saves the screenshot the operations guide (docs/guides/operations.md) shows.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tepat.domain.zones import TZDATA_RELEASE
from tests.browser.live import Live, live_service

ADMIN_KEY = "browser-test-admin-key-0123456789abcdef"
START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
RETRY_AGE_SECONDS = 5.0  # TEPAT_BROKER_RETRY_AGE_SECONDS: a nack this long after the first dies
ALICE = "ExponentPushToken[alice-phone]"
BOB = "ExponentPushToken[bob-old-phone]"
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


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_service(
        tmp_path,
        admin_key=ADMIN_KEY,
        start=START,
        broker_retry_age_seconds=RETRY_AGE_SECONDS,
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
    from playwright.sync_api import expect, sync_playwright

    for user, token in (("alice", ALICE), ("bob", BOB)):
        put(api, f"/v1/users/{user}", {"timezone": "Europe/London"})
        put(api, f"/v1/users/{user}/devices/phone", {"push_token": token})
    live.run(lambda: live.sandbox.script_token(BOB, ticket_error="DeviceNotRegistered"))

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
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            expect.set_options(timeout=TIMEOUT_MS)

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
        finally:
            browser.close()


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
