"""``bench import``: N users registered through ``POST /v1/bulk/users``, then the first plan.

As an app does it: a real ``tepat serve`` (embedded broker) on the store under test — a
fresh SQLite file, or with ``--store mongo`` a database of its own on the MongoDB-wire
server ``--mongo-url`` names (default ``TEPAT_TEST_MONGO_URL``; shared: the run drops
only its own database) —
and ``--clients`` concurrent httpx clients posting ``register.BULK_BATCH`` whole users
per request (a user, an Expo device and ``--reminders`` daily reminders, over
``ZONES``). The import plans the users it creates over the horizon itself, in the
request. Then the scheduler's first plan (``tepat plan`` over ``[now, now + 48 h)`` in a
child process): every user's mark covers it, so it must create nothing.

Figures: import seconds, users/s, messages the import planned and their rate over the
import, the first plan's seconds, and the total beside the goal (issue 21: 100k users in
<= 16 s end to end). Checks: every user, device and reminder stored, every reminder
planned, no (user, reminder, local date) twice, the first plan created nothing, a
repeated batch answers ``unchanged`` and creates nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pymongo import MongoClient

from bench import register
from bench.config import Config
from bench.plan import HORIZON, Run, _run_plan
from bench.procs import Child, child_env, free_port, tepat_argv
from bench.report import Result, log
from tepat.adapters.expo_outcomes import KEEPALIVE_EXPIRY_SECONDS

FULL_USERS = 100_000
QUICK_USERS = 1_000
GOAL_TOTAL_S = 16.0
GOAL_PLAN_PER_S = 20_000
# The workload: 20 zones around the world, a device and daily reminders each.
ZONES = (
    "Pacific/Honolulu", "America/Anchorage", "America/Los_Angeles", "America/Denver",
    "America/Chicago", "America/New_York", "America/Sao_Paulo", "Atlantic/Azores",
    "Europe/London", "Europe/Berlin", "Africa/Cairo", "Europe/Moscow", "Asia/Dubai",
    "Asia/Karachi", "Asia/Kolkata", "Asia/Dhaka", "Asia/Jakarta", "Asia/Shanghai",
    "Asia/Tokyo", "Australia/Sydney",
)  # fmt: skip
REMINDERS = 1


def item(reminders: int) -> Callable[[int], dict[str, Any]]:
    """The bulk item of user ``i``: register's whole user, over ``ZONES``, with
    ``reminders`` of register's reminders (at most its three)."""

    def one(i: int) -> dict[str, Any]:
        body = register.bulk_item(i)
        body["timezone"] = ZONES[i % len(ZONES)]
        body["reminders"] = body["reminders"][:reminders]
        return body

    return one


class Stored:
    """What the store holds afterwards: a SQLite file or a MongoDB database."""

    def __init__(self, db_path: Path | None, mongo_url: str | None) -> None:
        self.db_path, self.mongo_url = db_path, mongo_url

    def counts(self) -> dict[str, int]:
        if self.mongo_url is None:
            assert self.db_path is not None
            figures = register.stored(self.db_path)
            figures["intents_twice"] = _sqlite_one(
                self.db_path,
                "SELECT count(*) FROM (SELECT 1 FROM messages WHERE reminder_id IS NOT NULL "
                "AND status != 'cancelled' GROUP BY user_id, reminder_id, local_date "
                "HAVING count(*) > 1)",
            )
            return figures
        client: MongoClient[dict[str, Any]] = MongoClient(self.mongo_url)
        try:
            db = client.get_default_database()
            twice = db["messages"].aggregate(
                [
                    {"$match": {"reminder_id": {"$ne": None}, "status": {"$ne": "cancelled"}}},
                    {
                        "$group": {
                            "_id": ["$user_id", "$reminder_id", "$local_date"],
                            "n": {"$sum": 1},
                        }
                    },
                    {"$match": {"n": {"$gt": 1}}},
                    {"$count": "n"},
                ]
            )
            planned = db["messages"].aggregate(
                [
                    {"$match": {"status": "pending", "reminder_id": {"$ne": None}}},
                    {"$group": {"_id": ["$user_id", "$reminder_id"]}},
                    {"$count": "n"},
                ]
            )
            return {
                "users": db["users"].count_documents({}),
                "active_devices": db["devices"].count_documents({"active": True}),
                "reminders": db["reminders"].count_documents({}),
                "reminders_planned": _first_count(planned),
                "cancelled": db["messages"].count_documents({"status": "cancelled"}),
                "messages": db["messages"].count_documents({}),
                "intents_twice": _first_count(twice),
            }
        finally:
            client.close()

    def message_count(self) -> int:
        return self.counts()["messages"]


def _first_count(cursor: Any) -> int:
    """The ``n`` of a ``$count`` stage's one document (none when nothing matched)."""
    return int(next(iter(cursor), {"n": 0})["n"])


def _sqlite_one(db_path: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


@contextmanager
def _mongo_database(server: str) -> Iterator[str]:
    """A database of this run's own on the shared server, dropped at the end."""
    name = f"bench_import_{uuid.uuid4().hex[:10]}"
    url = f"{server.rstrip('/')}/{name}"
    try:
        yield url
    finally:
        client: MongoClient[dict[str, Any]] = MongoClient(url)
        try:
            client.drop_database(name)
        finally:
            client.close()


def run_import(
    where: Path, mongo: str | None, prefix: str, users: int, clients: int, reminders: int
) -> Result:
    """On a fresh SQLite file, or with ``mongo`` (a server's URL) a database of its own."""
    if mongo is None:
        return _run(where, None, prefix, users, clients, reminders)
    with _mongo_database(mongo) as url:
        return _run(where, url, prefix, users, clients, reminders)


def _run(
    where: Path, mongo_url: str | None, prefix: str, users: int, clients: int, reminders: int
) -> Result:
    cfg = Config(
        db_path=where / "import.db",
        broker_url="embedded://",
        queue_prefix=prefix,
        database_url=mongo_url,
    )
    stored = Stored(None if mongo_url else cfg.db_path, mongo_url)
    port = free_port()
    env = child_env(
        {
            **cfg.env(),
            "TEPAT_ADMIN_API_KEY": register.ADMIN_KEY,
            "TEPAT_ACCESS_LOG_LEVEL": "WARNING",
        }
    )
    store_name = "mongo" if mongo_url else "sqlite"
    log(f"import: {users} users x {reminders} reminders, {clients} clients, {store_name}")
    api = Child("serve", tepat_argv("serve", "--port", str(port)), env, where / "serve.log")
    body = item(reminders)
    try:
        register.wait_ready(port, 1, api)

        async def go() -> tuple[dict[str, Any], dict[str, int], int, int]:
            limits = httpx.Limits(
                max_connections=clients,
                max_keepalive_connections=clients,
                keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
            )
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=300
            ) as client:
                done = await register.bulk(client, clients, users, api.pid, body)
                log(f"import: {done['users_per_second']} users/s")
                before = stored.message_count()
                again = await register.repeat_one_batch(client, users, body)
                return done, again, before, stored.message_count()

        imported, again, before, after = asyncio.run(go())
        # The scheduler's first run over its horizon, beside the serving process.
        start = datetime.now(UTC)
        first: Run = _run_plan("first-plan", cfg, start, start + HORIZON, where, 1)
        log(f"first plan: created {first.created} in {first.wall_seconds:.2f}s")
    finally:
        exited = api.stop()
    seen = stored.counts()
    planned = seen["messages"]
    # The scheduler plans inside the serving process: its planning, not an interpreter's
    # start, is what an app waits for.
    total_s = imported["seconds"] + first.plan_seconds
    checks = {
        "every_user_stored": seen["users"] == users,
        "every_device_active": seen["active_devices"] == users,
        "every_reminder_stored": seen["reminders"] == users * reminders,
        "every_reminder_planned": seen["reminders_planned"] == users * reminders,
        "no_intent_planned_twice": seen["intents_twice"] == 0,
        "nothing_cancelled": seen["cancelled"] == 0,
        "every_item_created": imported["statuses"] == {"created": users},
        "repeat_changes_nothing": set(again) == {"unchanged"} and after == before,
        "first_plan_created_nothing": first.created == 0,
        "serve_exited_cleanly": exited.returncode == 0,
    }
    import_plan_rate = planned / imported["seconds"]
    figures = {
        "import_seconds": imported["seconds"],
        "users_per_second": imported["users_per_second"],
        "api_cpu_ms_per_user": imported["api_cpu_ms_per_user"],
        "messages_planned_by_import": planned,
        "messages_per_second_over_import": round(import_plan_rate),
        "first_plan_seconds": round(first.plan_seconds, 2),
        "first_plan_process_wall_seconds": round(first.wall_seconds, 2),
        "first_plan_users_read": first.users_planned,
        "total_seconds": round(total_s, 2),
        "stored": seen,
    }
    return Result(
        scenario="import",
        backend=f"embedded+{store_name}",
        parameters={
            "users": users,
            "reminders_per_user": reminders,
            "zones": len(ZONES),
            "clients": clients,
            "batch": register.BULK_BATCH,
        },
        figures=figures,
        goals={
            f"total_seconds<={GOAL_TOTAL_S:.0f}": total_s <= GOAL_TOTAL_S,
            f"messages_per_second_over_import>={GOAL_PLAN_PER_S}": (
                import_plan_rate >= GOAL_PLAN_PER_S
            ),
        },
        correctness=None,
        checks=checks,
        notes=[
            "the import plans the users it creates over the 48 h horizon inside each "
            "request: its seconds include that planning; messages/s is the messages it "
            "planned over the import's wall time",
            "first plan: `tepat plan` over the scheduler's window, its planning time "
            "(the process's wall time, interpreter start included, beside it); the "
            "import's marks cover the window",
        ],
    )
