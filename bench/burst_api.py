"""The burst again, with every reminder created through the HTTP API, as apps do.

No bulk plan: K users, each with one device and one daily reminder, registered with
``PUT /v1/users/{id}``, ``PUT …/devices/{id}`` and ``PUT …/reminders/{id}`` against the
API in its own process. The reminders' local times are chosen so that they all fall at
one instant T (a whole minute far enough ahead for the PUTs to finish) in each user's
own zone, the users spread over many zones. Each reminder PUT re-plans its user; T
being minutes ahead, the PUT leaves the publish to the outbox loop, whose passes
publish the re-plans of each second together (a PUT used to publish its own one-id
batch: issue 10), and the consumer coalesces the batches into requests of up to 100.

Processes: embedded, one ``tepat serve`` (API, consumers, scheduler: the broker lives
inside it); ActiveMQ, ``tepat api``, ``tepat scheduler`` and one ``tepat consumers``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from bench import seed
from bench.config import Config
from bench.procs import Child, Exited, child_env, free_port, tepat_argv
from bench.report import log
from bench.sandbox import Sandbox, running_sandbox
from tepat.adapters.expo_outcomes import KEEPALIVE_EXPIRY_SECONDS
from tepat.domain.zones import available_zones

ADMIN_KEY = "bench-admin-key-0123456789abcdef"
CLIENTS = 16  # concurrent HTTP clients, as many app servers would be
READY_CONSUMER = "runtime ready"
# Room after the last reminder PUT before T, on top of the estimate of how long they take
# (for the outbox loop's next pass, about a second). Small: the estimate below is already
# generous (the reminder PUTs took 1.4 to 1.5x the user PUTs in quick runs on both
# backends), and T is then rounded up to a whole minute, which is what the run waits for.
MARGIN_SECONDS = 5.0
# Reminder PUTs cost more than user or device PUTs (each re-plans its user and, on
# ActiveMQ, publishes with a receipt: 3x a user PUT was seen): the estimate of their
# duration assumes this many times slower, generously.
REMINDER_COST = 4.0


@dataclass
class ApiBurst:
    """What one API burst produced, for burst.py to tally like the bulk run."""

    at: datetime  # T: the one instant every reminder falls on
    category_of: dict[str, str]  # message id -> category, the messages due at T
    statuses: dict[str, int]  # of the messages due at T
    received: list[dict[str, Any]]
    sandbox_stats: dict[str, int]
    consumers: list[Exited]
    register: dict[str, Any]  # registration figures (requests/s), for information
    zones: int


def zone_fits(at: datetime, zone: str) -> bool:
    """Whether the local wall-clock time of ``at`` in ``zone`` names ``at`` again (the zone
    is in no DST fold or gap then, and its offset is whole minutes), so a reminder at that
    local HH:MM falls exactly on ``at``."""
    tz = ZoneInfo(zone)
    local = at.astimezone(tz)
    again = local.replace(tzinfo=None).replace(tzinfo=tz, fold=0)
    return local.second == 0 and again.astimezone(UTC) == at


def zones_for(at: datetime, count: int) -> list[str]:
    """``count`` zone names, cycling through every zone that fits ``at``."""
    usable = [z for z in sorted(available_zones()) if zone_fits(at, z)]
    return [usable[i % len(usable)] for i in range(count)]


def local_hhmm(at: datetime, zone: str) -> str:
    return at.astimezone(ZoneInfo(zone)).strftime("%H:%M")


async def _run_all(jobs: Sequence[Callable[[], Awaitable[None]]], clients: int) -> float:
    """Run ``jobs`` with ``clients`` at a time; returns the wall time in seconds."""
    queue = list(reversed(jobs))
    started = time.monotonic()

    async def client() -> None:
        while queue:
            await queue.pop()()

    await asyncio.gather(*(client() for _ in range(clients)))
    return time.monotonic() - started


async def _put(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    for attempt in range(5):
        try:
            r = await http.put(path, json=body)
        except httpx.TransportError:
            if attempt == 4:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
            continue
        if r.status_code >= 400:
            raise RuntimeError(f"PUT {path}: {r.status_code} {r.text[:300]}")
        return


async def register(base_url: str, count: int) -> tuple[datetime, list[str], dict[str, Any]]:
    """Users and devices, then T, then one reminder per user at T's local time in its zone.

    Returns T, the zone of each user, and the registration figures.
    """
    limits = httpx.Limits(
        max_connections=CLIENTS,
        max_keepalive_connections=CLIENTS,
        keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
    )
    headers = {"X-API-Key": ADMIN_KEY}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=60
    ) as http:
        # T is only known once the user and device PUTs show how fast this API is: the
        # zones are picked for an instant near it and checked again against T below.
        zones = zones_for(_next_minute(datetime.now(UTC) + timedelta(minutes=3)), count)

        def user(i: int) -> Callable[[], Awaitable[None]]:
            return lambda: _put(http, f"/v1/users/{_user_id(i)}", {"timezone": zones[i]})

        def device(i: int) -> Callable[[], Awaitable[None]]:
            return lambda: _put(
                http,
                f"/v1/users/{_user_id(i)}/devices/phone",
                {"push_token": seed.token_for(i), "platform": "android"},
            )

        users_s = await _run_all([user(i) for i in range(count)], CLIENTS)
        log(f"burst api: {count} user PUTs in {users_s:.1f}s ({count / users_s:.0f}/s)")
        devices_s = await _run_all([device(i) for i in range(count)], CLIENTS)
        log(f"burst api: {count} device PUTs in {devices_s:.1f}s ({count / devices_s:.0f}/s)")
        estimate = REMINDER_COST * max(users_s, devices_s) + MARGIN_SECONDS
        at = _next_minute(datetime.now(UTC) + timedelta(seconds=estimate))
        misfits = [i for i, zone in enumerate(zones) if not zone_fits(at, zone)]
        for i in misfits:  # a DST change between the two instants: rare, and moved to UTC
            zones[i] = "UTC"
            await _put(http, f"/v1/users/{_user_id(i)}", {"timezone": "UTC"})
        log(f"burst api: reminders at {at.isoformat()} in each user's zone ({estimate:.0f}s ahead)")

        def reminder(i: int) -> Callable[[], Awaitable[None]]:
            category = seed.CATEGORIES[i % len(seed.CATEGORIES)]
            body = {
                "category": category,
                "local_time": local_hhmm(at, zones[i]),
                "title": f"{category} #{i}",
                "body": "A reminder from the Tepat benchmark",
            }
            return lambda: _put(http, f"/v1/users/{_user_id(i)}/reminders/r0", body)

        reminders_s = await _run_all([reminder(i) for i in range(count)], CLIENTS)
        left = (at - datetime.now(UTC)).total_seconds()
        log(f"burst api: {count} reminder PUTs in {reminders_s:.1f}s; T in {left:.1f}s")
        if left < 0:
            raise RuntimeError(
                f"the reminder PUTs ended {-left:.1f}s after T: the margin was too small"
            )
    figures = {
        "clients": CLIENTS,
        "user_puts_per_second": round(count / users_s),
        "device_puts_per_second": round(count / devices_s),
        "reminder_puts_per_second": round(count / reminders_s),
        "seconds_to_spare_before_T": round(left, 1),
    }
    return at, zones, figures


def _user_id(i: int) -> str:
    return f"a{i:07d}"


def _next_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0) + timedelta(minutes=1)


def due_at(db: Path, at: datetime) -> tuple[dict[str, str], dict[str, int]]:
    """The messages due at ``at`` (id -> category) and their statuses (read-only)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute("SELECT id, category, status, scheduled_at FROM messages").fetchall()
    finally:
        conn.close()
    category_of: dict[str, str] = {}
    statuses: dict[str, int] = {}
    for mid, category, status, scheduled in rows:
        if abs((datetime.fromisoformat(scheduled) - at).total_seconds()) < 1:
            category_of[str(mid)] = str(category)
            statuses[str(status)] = statuses.get(str(status), 0) + 1
    return category_of, statuses


def _unfinished(statuses: dict[str, int]) -> int:
    return statuses.get("pending", 0) + statuses.get("sending", 0)


@contextmanager
def tepat_processes(workdir: Path, cfg: Config, embedded: bool, port: int) -> Iterator[list[Child]]:
    env = child_env({**cfg.env(), "TEPAT_ADMIN_API_KEY": ADMIN_KEY})
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if embedded:
        specs = [("serve", tepat_argv("serve", *host))]
    else:
        specs = [
            ("api", tepat_argv("api", *host)),
            ("scheduler", tepat_argv("scheduler")),
            ("consumer-0", tepat_argv("consumers")),
        ]
    children = [Child(name, argv, env, workdir / f"{name}.log") for name, argv in specs]
    try:
        yield children
    finally:
        exits = [c.stop(60) for c in children]
        for c, e in zip(children, exits, strict=True):
            if e.returncode != 0:
                log(f"{c.name} exited with {e.returncode}:\n{c.tail()}")


def _wait_http(url: str, children: list[Child], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        for c in children:
            if not c.alive():
                raise RuntimeError(f"{c.name} exited early:\n{c.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the API did not answer within {timeout:.0f}s")
        time.sleep(0.1)


def _wait_drained(db: Path, at: datetime, children: list[Child], timeout: float) -> None:
    """Until T has come and none of T's messages is pending or sending; bounded."""
    deadline = time.monotonic() + timeout
    last_left, last_change = -1, time.monotonic()
    while True:
        _, statuses = due_at(db, at)
        left = _unfinished(statuses)
        now = time.monotonic()
        if datetime.now(UTC) > at and left == 0:
            return
        if left != last_left or datetime.now(UTC) <= at:
            # progress, or T not yet come: a stall only counts from T on
            last_left, last_change = left, now
        for c in children:
            if not c.alive():
                log(f"{c.name} exited early:\n{c.tail()}")
                return
        if now > deadline or (datetime.now(UTC) > at and now - last_change > 30):
            log(f"burst api: {left} messages still pending/sending; giving up")
            return
        time.sleep(0.5)


def run_api_burst(
    workdir: Path, broker_url: str, prefix: str, count: int, sandbox_limit: float
) -> ApiBurst:
    embedded = broker_url == "embedded://"
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "tepat.db"
    port = free_port()
    with running_sandbox(workdir, sandbox_limit) as sandbox:
        cfg = Config(db_path=db, broker_url=broker_url, queue_prefix=prefix, expo_url=sandbox.url)
        with tepat_processes(workdir, cfg, embedded, port) as children:
            _wait_http(f"http://127.0.0.1:{port}", children, 60)
            for c in children:
                if c.name.startswith("consumer"):
                    c.wait_for_line(READY_CONSUMER, 60)
            at, zones, figures = asyncio.run(register(f"http://127.0.0.1:{port}", count))
            category_of, _ = due_at(db, at)
            if len(category_of) != count:
                log(f"burst api: {len(category_of)} messages due at T, {count} expected")
            wait = (at - datetime.now(UTC)).total_seconds() + 60 + count / 100
            _wait_drained(db, at, children, max(60.0, wait))
            received, stats = _sandbox_view(sandbox)
            category_of, statuses = due_at(db, at)
        exits = [c.exited for c in children if c.exited is not None]
    return ApiBurst(
        at=at,
        category_of=category_of,
        statuses=statuses,
        received=received,
        sandbox_stats=stats,
        consumers=exits,
        register=figures,
        zones=len(set(zones)),
    )


def _sandbox_view(sandbox: Sandbox) -> tuple[list[dict[str, Any]], dict[str, int]]:
    return sandbox.received(), sandbox.stats()
