"""Seeding through the Store API (not timed): users, reminders, devices and due messages."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time
from pathlib import Path

from tepat.adapters.mongo import MongoStore
from tepat.adapters.sqlite import SqliteStore
from tepat.adapters.sqlite.codecs import (
    _REMINDER_COLUMNS,
    _USER_COLUMNS,
    Row,
    _placeholders,
    _reminder_params,
    _ts,
    _user_params,
)
from tepat.adapters.sqlite.schema import BUSY_TIMEOUT_S
from tepat.domain.categories import DEFAULT_CATEGORIES
from tepat.domain.models import Device, Message, Reminder, User, message_id_for, oneoff_live_key
from tepat.domain.zones import available_zones
from tepat.ports.store import Store

CATEGORIES = tuple(c.name for c in DEFAULT_CATEGORIES)
CHUNK = 500
SEED_TRANSACTION = 20_000  # users per write transaction when seeding the planning population


def reminder_time(user_index: int, k: int) -> time:
    """Varied local times: morning, midday and evening, minutes spread over the hour."""
    base = (7, 12, 19)[k]
    minute = (user_index * 7 + k * 13) % 60
    return time(base + (user_index // 60 + k) % 3, minute)


def planning_records(i: int, zones: Sequence[str]) -> tuple[User, list[Reminder]]:
    """User number ``i`` of the planning population and their three daily reminders."""
    user = User(user_id=f"u{i:07d}", timezone=zones[i % len(zones)])
    reminders = []
    for k in range(3):
        category = CATEGORIES[(i + k) % len(CATEGORIES)]
        reminders.append(
            Reminder(
                user_id=user.user_id,
                reminder_id=f"r{k}",
                category=category,
                local_time=reminder_time(i, k),
                title=f"{category} time",
                body="A reminder from the Tepat benchmark",
            )
        )
    return user, reminders


async def seed_planning(db_path: Path, users: int) -> int:
    """``users`` users over every IANA zone, three daily reminders each; returns reminders.

    The store's own schema (opened once), then rows written with its own encoders in
    large transactions: a million users through one call each would take longer
    than the plan it prepares. The rows are what ``upsert_user`` and
    ``upsert_reminder`` write (the schema's triggers run as for them).
    """
    zones = sorted(available_zones())
    store = SqliteStore(str(db_path))
    await store.open()
    await store.close()
    now = _ts(datetime.now(UTC))
    conn = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        user_sql = f"INSERT INTO users ({_USER_COLUMNS}) VALUES ({_placeholders(9)})"
        reminder_sql = f"INSERT INTO reminders ({_REMINDER_COLUMNS}) VALUES ({_placeholders(13)})"
        for first in range(0, users, SEED_TRANSACTION):
            rows_u: list[Row] = []
            rows_r: list[Row] = []
            for i in range(first, min(users, first + SEED_TRANSACTION)):
                user, reminders = planning_records(i, zones)
                rows_u.append(_user_params(user, now))
                rows_r.extend(_reminder_params(r, now) for r in reminders)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(user_sql, rows_u)
            conn.executemany(reminder_sql, rows_r)
            conn.execute("COMMIT")
    finally:
        conn.close()
    return users * 3


@dataclass(frozen=True)
class Due:
    """One seeded message: who receives it and when it is due."""

    id: str
    token: str
    category: str
    scheduled_at: datetime


def token_for(i: int, kind: str = "expo") -> str:
    """Recipient ``i``'s device token, of the shape ``kind``'s validation accepts."""
    if kind == "fcm":
        return f"bench-fcm-{i:07d}"
    if kind == "apns":
        return f"{i:064x}"  # 64 hex digits
    return f"ExponentPushToken[bench-{i:07d}]"


def store_at(database: Path | str) -> Store:
    """Tepat's store on a SQLite file (a path or a ``sqlite:///`` URL) or a MongoDB URL."""
    where = str(database)
    if isinstance(database, Path) or where.startswith("sqlite:///"):
        return SqliteStore(where.removeprefix("sqlite:///"))
    return MongoStore(where)


async def seed_recipients(
    database: Path | str,
    count: int,
    kind: str = "expo",
    fallback: Callable[[int], str | None] = lambda i: None,
    first: int = 0,
) -> None:
    """One user with one active ``kind`` device per message to come (so a token names a
    message), numbered from ``first`` (as :func:`due_messages` takes it); ``fallback(i)``:
    the FCM token device ``i`` fails over to, if any.

    Through the bulk writes, CHUNK records a round trip: one call per record, CHUNK at a
    time, opened more connections than a loaded MongoDB-wire server accepted in time.
    """
    store = store_at(database)
    await store.open()
    try:
        for start in range(first, first + count, CHUNK):
            ids = range(start, min(start + CHUNK, first + count))
            await store.write_records(
                [User(user_id=f"d{i:07d}", timezone="UTC") for i in ids],
                [
                    Device(
                        user_id=f"d{i:07d}",
                        device_id=f"phone-{i}",
                        push_token=token_for(i, kind),
                        kind=kind,
                        fallback_kind=None if fallback(i) is None else "fcm",
                        fallback_token=fallback(i),
                    )
                    for i in ids
                ],
                [],
            )
    finally:
        await store.close()


def due_messages(
    instants: Sequence[tuple[datetime, str]], first: int = 0, kind: str = "expo"
) -> list[tuple[Message, Due]]:
    """Messages for recipients first..first+n-1, one-offs due at the given instants and
    categories."""
    out = []
    for i, (at, category) in enumerate(instants, start=first):
        user_id = f"d{i:07d}"
        key = f"bench-{i}"
        live_key = oneoff_live_key(user_id, key)
        message = Message(
            id=message_id_for(live_key),
            user_id=user_id,
            category=category,
            label="",
            title=f"{category} #{i}",
            body="A notification from the Tepat benchmark",
            scheduled_at=at,
            timezone="UTC",
            dedup_key=live_key,
            live_key=live_key,
            idempotency_key=key,
            local_date=at.date(),
            local_time=at.time().replace(second=0, microsecond=0),
        )
        out.append((message, Due(message.id, token_for(i, kind), category, at)))
    return out


async def insert_messages(database: Path | str, messages: Sequence[Message]) -> int:
    store = store_at(database)
    await store.open()
    try:
        result = await store.insert_messages(messages)
    finally:
        await store.close()
    return len(result.created)
