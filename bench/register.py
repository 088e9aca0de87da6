"""``bench register``: users, devices and reminders created through the HTTP API.

A real ``tepat api`` process (``--workers N`` of them on one port on ActiveMQ; on the
embedded broker, which cannot be shared, the API inside one ``tepat serve``) and N
concurrent httpx clients:

a. **per item, as an app does**: ``PUT /v1/users/{id}``, then ``PUT …/devices/{id}``,
   then three ``PUT …/reminders/{id}``. Each endpoint is timed in a phase of its own
   (requests/s per endpoint); users fully registered/s is users over the three phases.
b. **bulk**: ``POST /v1/bulk/users`` with ``BULK_BATCH`` whole users per request, the
   same N clients: users/s. Then one batch again: every item ``unchanged``, no new message.

Correctness (read from the SQLite file afterwards): every user, active device and
reminder stored; every reminder planned, no (user, reminder, local date) planned twice,
nothing cancelled (nothing was re-planned).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench import store_view
from bench.config import Config
from bench.cpu_use import tree_cpu_seconds
from bench.procs import Child, child_env, free_port, tepat_argv
from bench.report import Result, log
from tepat.adapters.expo_outcomes import KEEPALIVE_EXPIRY_SECONDS

GOAL_USERS_PER_SECOND = 2_000
FULL_USERS = 20_000  # bulk; the per-item phase takes a quarter (at most 5,000)
QUICK_USERS = 1_000
CLIENTS = 16
BULK_BATCH = 500
REMINDERS = (
    ("breakfast", "07:30", "meal"),
    ("water", "11:00", "hydration"),
    ("sleep", "22:15", "sleep"),
)
ZONES = ("Asia/Jakarta", "Europe/London", "America/New_York", "Asia/Kolkata", "UTC")
ADMIN_KEY = "bench-register-admin-key-0123456789"
HEADERS = {"X-API-Key": ADMIN_KEY}


def user_body(i: int) -> dict[str, Any]:
    return {"timezone": ZONES[i % len(ZONES)], "locale": "en"}


def device_body(user_id: str) -> dict[str, Any]:
    return {"push_token": f"ExponentPushToken[register-{user_id}]", "platform": "ios"}


def reminder_body(name: str, local_time: str, category: str) -> dict[str, Any]:
    return {
        "category": category,
        "local_time": local_time,
        "title": f"{name.title()} time",
        "body": f"A gentle reminder: {name}.",
        "data": {"screen": name},
    }


def bulk_item(i: int) -> dict[str, Any]:
    return {
        "user_id": f"b{i}",
        **user_body(i),
        "devices": [{"device_id": "phone", **device_body(f"b{i}")}],
        "reminders": [{"reminder_id": n, **reminder_body(n, t, c)} for n, t, c in REMINDERS],
    }


async def _drain(clients: int, jobs: Iterator[Callable[[], Awaitable[None]]]) -> float:
    """Run ``jobs`` on ``clients`` concurrent workers; returns the wall seconds."""

    async def worker() -> None:
        for job in jobs:  # one shared iterator: each job runs once
            await job()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - started


def _ok(r: httpx.Response) -> None:
    if not r.is_success:
        raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}")


async def per_item(
    client: httpx.AsyncClient, clients: int, users: int, api_pid: int
) -> dict[str, Any]:
    ids = range(users)
    cpu_before = tree_cpu_seconds(api_pid)

    def puts(path: Callable[[int], str], body: Callable[[int], dict[str, Any]], n: int) -> Any:
        for i in range(n):

            async def put(i: int = i) -> None:
                _ok(await client.put(path(i), json=body(i), headers=HEADERS))

            yield put

    user_s = await _drain(clients, puts(lambda i: f"/v1/users/p{i}", user_body, users))
    device_s = await _drain(
        clients,
        puts(lambda i: f"/v1/users/p{i}/devices/phone", lambda i: device_body(f"p{i}"), users),
    )
    reminder_jobs = [(i, r) for i in ids for r in REMINDERS]
    reminder_s = await _drain(
        clients,
        puts(
            lambda k: f"/v1/users/p{reminder_jobs[k][0]}/reminders/{reminder_jobs[k][1][0]}",
            lambda k: reminder_body(*reminder_jobs[k][1]),
            len(reminder_jobs),
        ),
    )
    total = user_s + device_s + reminder_s
    cpu = tree_cpu_seconds(api_pid) - cpu_before
    return {
        "users": users,
        "user_puts_per_second": round(users / user_s, 1),
        "device_puts_per_second": round(users / device_s, 1),
        "reminder_puts_per_second": round(len(reminder_jobs) / reminder_s, 1),
        "users_fully_registered_per_second": round(users / total, 1),
        "seconds": round(total, 2),
        "api_cpu_ms_per_user": round(cpu / users * 1000, 2),
    }


async def bulk(
    client: httpx.AsyncClient,
    clients: int,
    users: int,
    api_pid: int,
    make_item: Callable[[int], dict[str, Any]] = bulk_item,
) -> dict[str, Any]:
    batches = [list(range(s, min(s + BULK_BATCH, users))) for s in range(0, users, BULK_BATCH)]
    statuses: dict[str, int] = {}

    def jobs() -> Iterator[Callable[[], Awaitable[None]]]:
        for batch in batches:

            async def post(batch: Sequence[int] = batch) -> None:
                r = await client.post(
                    "/v1/bulk/users", json=[make_item(i) for i in batch], headers=HEADERS
                )
                _ok(r)
                for item in r.json()["items"]:
                    statuses[item["status"]] = statuses.get(item["status"], 0) + 1

            yield post

    cpu_before = tree_cpu_seconds(api_pid)
    seconds = await _drain(clients, jobs())
    cpu = tree_cpu_seconds(api_pid) - cpu_before
    return {
        "users": users,
        "batch": BULK_BATCH,
        "users_per_second": round(users / seconds, 1),
        "goal_users_per_second": GOAL_USERS_PER_SECOND,
        "seconds": round(seconds, 2),
        # CPU the API processes spent per user: 1000 / this is users/s per busy core.
        "api_cpu_ms_per_user": round(cpu / users * 1000, 2),
        "statuses": statuses,
    }


async def repeat_one_batch(
    client: httpx.AsyncClient, users: int, make_item: Callable[[int], dict[str, Any]] = bulk_item
) -> dict[str, int]:
    r = await client.post(
        "/v1/bulk/users",
        json=[make_item(i) for i in range(min(users, BULK_BATCH))],
        headers=HEADERS,
    )
    _ok(r)
    out: dict[str, int] = {}
    for item in r.json()["items"]:
        out[item["status"]] = out.get(item["status"], 0) + 1
    return out


def stored(db_path: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:

        def one(sql: str) -> int:
            return int(conn.execute(sql).fetchone()[0])

        return {
            "users": one("SELECT count(*) FROM users"),
            "active_devices": one("SELECT count(*) FROM devices WHERE active = 1"),
            "reminders": one("SELECT count(*) FROM reminders"),
            "reminders_planned": one(
                "SELECT count(*) FROM (SELECT DISTINCT user_id, reminder_id FROM messages "
                "WHERE status = 'pending' AND reminder_id IS NOT NULL)"
            ),
            "cancelled": one("SELECT count(*) FROM messages WHERE status = 'cancelled'"),
            "messages": one("SELECT count(*) FROM messages"),
        }
    finally:
        conn.close()


def wait_ready(port: int, workers: int, api: Child, timeout: float = 60.0) -> None:
    """Until ``/readyz`` answers and, with several workers, each has said it is ready
    (a worker still starting takes no connections, so the first would take them all)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not api.alive():
            raise RuntimeError(f"tepat api exited:\n{api.tail()}")
        try:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready and (workers == 1 or api.log_text().count("api worker ready") >= workers):
            return
        time.sleep(0.1)
    raise TimeoutError(f"tepat api not ready within {timeout:.0f}s:\n{api.tail()}")


def run_register(
    where: Path,
    backend: str,
    broker_url: str,
    prefix: str,
    users: int,
    clients: int,
    workers: int,
) -> Result:
    notes: list[str] = []
    if backend == "embedded" and workers > 1:
        notes.append(f"--workers {workers} asked, 1 used: the embedded broker lives in one process")
        workers = 1
    per_item_users = max(1, min(users // 4, 5_000))
    cfg = Config(db_path=where / "register.db", broker_url=broker_url, queue_prefix=prefix)
    port = free_port()
    env = child_env(
        {**cfg.env(), "TEPAT_ADMIN_API_KEY": ADMIN_KEY, "TEPAT_ACCESS_LOG_LEVEL": "WARNING"}
    )
    if backend == "embedded":
        # `tepat api` alone refuses the embedded broker (its writes would reach no
        # consumer): the API runs inside `tepat serve`, as a single-process install does.
        argv = tepat_argv("serve", "--port", str(port))
    else:
        argv = tepat_argv(
            "api", "--port", str(port), *(["--workers", str(workers)] * (workers > 1))
        )
    log(f"register: tepat api --workers {workers}, {clients} clients, {users} bulk users")
    api = Child("api", argv, env, where / "api.log")
    try:
        wait_ready(port, workers, api)

        async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, int], int, int]:
            limits = httpx.Limits(
                max_connections=clients,
                max_keepalive_connections=clients,
                keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
            )
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120
            ) as client:
                a = await per_item(client, clients, per_item_users, api.pid)
                log(f"register: per item {a['users_fully_registered_per_second']} users/s")
                b = await bulk(client, clients, users, api.pid)
                log(f"register: bulk {b['users_per_second']} users/s")
                before = store_view.message_count(cfg.db_path)
                again = await repeat_one_batch(client, users)
                after = store_view.message_count(cfg.db_path)
                return a, b, again, before, after

        a, b, again, before, after = asyncio.run(go())
    finally:
        exited = api.stop()
    total = per_item_users + users
    seen = stored(cfg.db_path)
    checks = {
        "every_user_stored": seen["users"] == total,
        "every_device_active": seen["active_devices"] == total,
        "every_reminder_stored": seen["reminders"] == total * len(REMINDERS),
        "every_reminder_planned": seen["reminders_planned"] == total * len(REMINDERS),
        "no_intent_planned_twice": store_view.duplicate_intents(cfg.db_path) == 0,
        "nothing_cancelled": seen["cancelled"] == 0,
        "bulk_every_item_created": b["statuses"] == {"created": users},
        "repeat_changes_nothing": set(again) == {"unchanged"} and after == before,
        "api_exited_cleanly": exited.returncode == 0,
    }
    goal = f"bulk_users_per_second>={GOAL_USERS_PER_SECOND}"
    return Result(
        scenario="register",
        backend=backend,
        parameters={
            "clients": clients,
            "workers": workers,
            "per_item_users": per_item_users,
            "bulk_users": users,
            "bulk_batch": BULK_BATCH,
        },
        figures={"per_item": a, "bulk": b, "stored": seen, "repeat_statuses": again},
        goals={goal: b["users_per_second"] >= GOAL_USERS_PER_SECOND},
        correctness=None,
        checks=checks,
        notes=notes,
    )
