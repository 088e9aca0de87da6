"""``python -m bench.events``: a campaign to every user at 09:00 local, and a listed event.

In one process on a SQLite file (the fan-out is store-bound; the broker only sees what
is due within seconds, nothing here): N users in five zones, each with a phone, and the
order.paid templates. Then:

a. ``POST /v1/events`` with ``all_users`` and ``local_time: "09:00"``, timed (goal: the
   API answers in under a second, before any fan-out), then the fan-out loop's pages
   until done: recipients/s, and the process's RSS sampled after every page (goal: flat,
   under ``GOAL_RSS_GROWTH_MB`` from the first tenth of the recipients to the end).
b. ``POST /v1/events`` naming all N ids (``user_ids``; the largest request body), timed.

Correctness (read from the store afterwards): one push message and one inbox message per
user, each one's nominal instant 09:00 on its user's wall clock (the inbox items are
stored by the consumers at that instant: none yet), the event ``done`` with every
recipient counted, and a repeat of the request creating nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from datetime import time as dtime
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from api.app import create_app
from bench.report import Result, emit, log
from tepat.config import Settings
from tepat.domain.models import Device, User
from tepat.domain.templates import TemplateKey
from tepat.domain.timerules import utc_to_local
from tepat.domain.zones import load_zone
from tepat.runtime import open_runtime
from tepat.services.events import EventService
from tepat.services.templates import TemplateService

FULL_USERS = 100_000
QUICK_USERS = 2_000
GOAL_API_SECONDS = 1.0
GOAL_RSS_GROWTH_MB = 50.0
ZONES = ("Asia/Jakarta", "Europe/London", "America/New_York", "Asia/Kolkata", "UTC")
ADMIN_KEY = "bench-events-admin-key-0123456789"
HEADERS = {"X-API-Key": ADMIN_KEY}
SEED_BATCH = 2_000


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0  # pragma: no cover


def _body(event_id: str, **kw: Any) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": "order.paid",
        "data": {"order": "spring", "amount": "20%"},
        "occurred_at": "2027-03-01T00:00:00Z",
        **kw,
    }


async def _run(workdir: Path, users: int) -> Result:
    settings = Settings(
        database_url=f"sqlite:///{workdir}/events.db",
        broker_url="embedded://",
        admin_api_key=SecretStr(ADMIN_KEY),
        metrics_port=0,
    )
    async with open_runtime(settings) as rt:
        log(f"events: seeding {users} users with a phone each")
        for start in range(0, users, SEED_BATCH):
            ids = [f"u{n:07d}" for n in range(start, min(users, start + SEED_BATCH))]
            await rt.store.write_records(
                [User(user_id=u, timezone=ZONES[int(u[1:]) % len(ZONES)]) for u in ids],
                [
                    Device(user_id=u, device_id="phone", push_token=f"ExponentPushToken[{u}]")
                    for u in ids
                ],
                [],
            )
        app = create_app(rt, ADMIN_KEY)
        templates: TemplateService = app.state.templates
        service: EventService = app.state.events
        for channel in ("push", "inbox"):
            await templates.put(
                TemplateKey.parse("order.paid", channel, "en"),
                {"title": "Sale: {{ order }}", "body": "{{ amount }} off today"},
            )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            t0 = time.perf_counter()
            r = await client.post(
                "/v1/events",
                json=_body("campaign", all_users=True, local_time="09:00"),
                headers=HEADERS,
            )
            campaign_api_s = time.perf_counter() - t0
            assert r.status_code == 202, r.text

            log("events: fanning out the campaign")
            rss: list[tuple[int, float]] = [(0, _rss_mb())]
            t0 = time.perf_counter()
            while True:
                events = await rt.store.events_fanning_out(1)
                if not events:
                    break
                await service.fan_out_page(events[0])
                done = await rt.store.get_event("campaign")
                assert done is not None
                rss.append((done.recipients, _rss_mb()))
            fan_out_s = time.perf_counter() - t0
            tenth = next((mb for n, mb in rss if n >= users // 10), rss[-1][1])
            growth = max(mb for _, mb in rss) - tenth

            repeat = await client.post(
                "/v1/events",
                json=_body("campaign", all_users=True, local_time="09:00"),
                headers=HEADERS,
            )
            await service.fan_out_until_idle()

            ids = [f"u{n:07d}" for n in range(users)]
            t0 = time.perf_counter()
            r = await client.post("/v1/events", json=_body("listed", user_ids=ids), headers=HEADERS)
            listed_api_s = time.perf_counter() - t0
            assert r.status_code == 202, r.text
            status = (await client.get("/v1/events/campaign", headers=HEADERS)).json()

    checks = _check_store(workdir / "events.db", users)
    checks["repeat_is_the_same_202"] = repeat.status_code == 202
    checks["event_done_every_recipient"] = (
        status["state"] == "done" and status["recipients"] == users
    )
    checks["status_counts_match"] = (
        status["channels"]["push"]["created"] == users
        and status["channels"]["inbox"]["created"] == users
    )
    return Result(
        scenario="events",
        backend="embedded",
        parameters={"users": users, "zones": len(ZONES), "page_size": service.page_size},
        figures={
            "campaign_api_seconds": round(campaign_api_s, 3),
            "listed_api_seconds": round(listed_api_s, 3),
            "fan_out_seconds": round(fan_out_s, 2),
            "recipients_per_second": round(users / max(fan_out_s, 1e-9)),
            "messages_and_items_per_second": round(2 * users / max(fan_out_s, 1e-9)),
            "rss_growth_after_first_tenth_mb": round(growth, 1),
            "rss_end_mb": round(rss[-1][1], 1),
            "goal_api_seconds": GOAL_API_SECONDS,
            "goal_rss_growth_mb": GOAL_RSS_GROWTH_MB,
        },
        goals={
            "campaign_api_under_1s": campaign_api_s < GOAL_API_SECONDS,
            "listed_api_under_1s": listed_api_s < GOAL_API_SECONDS,
            "flat_memory": growth < GOAL_RSS_GROWTH_MB,
        },
        correctness=None,
        checks=checks,
        notes=[
            "one process, SQLite; fan-out = POST /v1/events answered -> event done "
            "(one push message and one inbox message per user)",
            "rss growth: the highest RSS during the fan-out minus the RSS after a tenth "
            "of the recipients; it includes SQLite's page cache filling (up to 64 MiB, "
            "CACHE_KIB), which grows with the database, not with the recipients in hand",
        ],
    )


def _check_store(db: Path, users: int) -> dict[str, bool]:
    conn = sqlite3.connect(db)
    campaign = "dedup_key >= 'e|campaign|' AND dedup_key < 'e|campaign}'"
    try:
        per_channel = {
            channel: (n, distinct)
            for channel, n, distinct in conn.execute(
                f"SELECT channel, count(*), count(DISTINCT user_id) FROM messages "
                f"WHERE {campaign} GROUP BY channel"
            )
        }
        items = conn.execute(
            "SELECT count(*) FROM inbox WHERE event_type = 'order.paid'"
        ).fetchone()[0]
        sample = conn.execute(
            f"SELECT timezone, nominal_at FROM messages WHERE {campaign} "
            "ORDER BY random() LIMIT 500"
        ).fetchall()
    finally:
        conn.close()
    nine = dtime(9, 0)
    at_nine = all(
        utc_to_local(datetime.fromisoformat(at).astimezone(UTC), load_zone(tz)).time() == nine
        for tz, at in sample
    )
    return {
        "one_push_message_per_user": per_channel.get("push") == (users, users),
        "one_inbox_message_per_user": per_channel.get("inbox") == (users, users),
        "inbox_items_wait_for_0900": items == 0,
        "each_at_0900_local": bool(sample) and at_nine,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, help=f"default {FULL_USERS:,}; quick {QUICK_USERS:,}")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    users = args.users or (QUICK_USERS if args.quick else FULL_USERS)
    os.environ.setdefault("TEPAT_LOG_LEVEL", "WARNING")
    with tempfile.TemporaryDirectory(prefix="tepat-bench-events-") as tmp:
        result = asyncio.run(_run(Path(tmp), users))
    emit(result, args.json)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
