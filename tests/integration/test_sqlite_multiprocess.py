"""Two OS processes planning the same messages into one SQLite file at the same moment.

This is two ``tepat plan`` runs at once: both open a fresh file (so both
migrate it), then insert the same 5,000 messages page by page, one from the
front and one from the back so that their transactions interleave. The unique
indexes, not luck, must leave exactly one row per message.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from datetime import UTC, datetime, time, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path

from tepat.adapters.sqlite import SqliteStore
from tepat.adapters.sqlite.schema import MIGRATIONS
from tepat.domain.categories import CategoryPolicy
from tepat.domain.models import Message, Reminder, User, message_id_for
from tepat.domain.planning import plan_reminder

NOW = datetime(2027, 3, 14, tzinfo=UTC)
USERS = 1250  # x 2 reminders x about 2 local dates in the 48 h horizon
MESSAGES = 5000
PAGE = 250


def planned_messages() -> list[Message]:
    policy = CategoryPolicy("meal")
    messages: list[Message] = []
    for n in range(USERS):
        zone = ("Asia/Jakarta", "America/New_York", "Europe/Paris")[n % 3]
        user = User(f"user-{n:05d}", zone)
        for hour, label in ((8, "breakfast"), (19, "dinner")):
            reminder = Reminder(user.user_id, label, "meal", time(hour, 0), "Eat", "Now", label)
            messages.extend(
                plan_reminder(user, reminder, policy, NOW, NOW + timedelta(hours=48), NOW)
            )
    assert len(messages) >= MESSAGES
    return messages[:MESSAGES]


async def _plan(path: str, backwards: bool, barrier: Barrier) -> int:
    messages = planned_messages()
    pages = [messages[i : i + PAGE] for i in range(0, len(messages), PAGE)]
    if backwards:
        pages.reverse()
    await asyncio.to_thread(barrier.wait)  # open the fresh file together
    store = SqliteStore(path)
    await store.open()
    try:
        await asyncio.to_thread(barrier.wait)  # and insert together
        created = 0
        for page in pages:
            created += len((await store.insert_messages(page)).created)
        return created
    finally:
        await store.close()


def _planner(
    path: str, backwards: bool, barrier: Barrier, results: multiprocessing.Queue[int]
) -> None:
    results.put(asyncio.run(_plan(path, backwards, barrier)))


def test_two_processes_plan_the_same_messages_once(tmp_path: Path) -> None:
    path = str(tmp_path / "tepat.db")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2, timeout=120)
    results: multiprocessing.Queue[int] = ctx.Queue()
    procs = [
        ctx.Process(target=_planner, args=(path, backwards, barrier, results))
        for backwards in (False, True)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    created = [results.get(timeout=5) for _ in procs]

    assert sum(created) == MESSAGES
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (MESSAGES,)
        assert conn.execute("SELECT count(DISTINCT dedup_key) FROM messages").fetchone() == (
            MESSAGES,
        )
        migrations = conn.execute("SELECT version FROM schema_migrations").fetchall()
    assert migrations == [(version,) for version, _ in MIGRATIONS]


def _many_messages(count: int) -> list[Message]:
    return [
        Message(
            id=message_id_for(f"bulk|{n}"),
            user_id=f"user-{n // 4:05d}",
            category="meal",
            label=str(n % 4),
            title="Eat",
            body="Now",
            scheduled_at=NOW + timedelta(minutes=n % 600),
            timezone="UTC",
            dedup_key=f"bulk|{n}",
            live_key=f"live|{n}",
        )
        for n in range(count)
    ]


async def test_bulk_insert_spanning_transactions_reports_exactly_the_new_ones(
    tmp_path: Path,
) -> None:
    # More than two of the adapter's write transactions, with the insert of
    # one slice overlapping the encoding of the next.
    messages = _many_messages(12_001)
    store = SqliteStore(str(tmp_path / "tepat.db"))
    await store.open()
    try:
        await store.insert_messages(messages[::4])
        result = await store.insert_messages(messages)
    finally:
        await store.close()
    assert [m.id for m in result.created] == [m.id for n, m in enumerate(messages) if n % 4]
    assert result.existing == len(messages[::4])
