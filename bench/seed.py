"""Seeding through the Store API (not timed): users, reminders, devices and due messages."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, time
from pathlib import Path
from typing import TypeVar

from tepat.adapters.sqlite import SqliteStore
from tepat.domain.categories import DEFAULT_CATEGORIES
from tepat.domain.models import Device, Message, Reminder, User, message_id_for, oneoff_live_key
from tepat.domain.zones import available_zones

CATEGORIES = tuple(c.name for c in DEFAULT_CATEGORIES)
CHUNK = 500

T = TypeVar("T")


async def _in_chunks(items: Sequence[T], one: Callable[[T], Awaitable[None]]) -> None:
    """Keep the store's worker thread busy: up to CHUNK calls in flight at a time."""
    for start in range(0, len(items), CHUNK):
        await asyncio.gather(*(one(x) for x in items[start : start + CHUNK]))


def reminder_time(user_index: int, k: int) -> time:
    """Varied local times: morning, midday and evening, minutes spread over the hour."""
    base = (7, 12, 19)[k]
    minute = (user_index * 7 + k * 13) % 60
    return time(base + (user_index // 60 + k) % 3, minute)


async def seed_planning(db_path: Path, users: int) -> int:
    """``users`` users over every IANA zone, three daily reminders each; returns reminders."""
    zones = sorted(available_zones())
    store = SqliteStore(str(db_path))
    await store.open()
    try:

        async def one(i: int) -> None:
            user = await store.upsert_user(
                User(user_id=f"u{i:07d}", timezone=zones[i % len(zones)])
            )
            for k in range(3):
                category = CATEGORIES[(i + k) % len(CATEGORIES)]
                await store.upsert_reminder(
                    Reminder(
                        user_id=user.user_id,
                        reminder_id=f"r{k}",
                        category=category,
                        local_time=reminder_time(i, k),
                        title=f"{category} time",
                        body="A reminder from the Tepat benchmark",
                    )
                )

        await _in_chunks(range(users), one)
    finally:
        await store.close()
    return users * 3


@dataclass(frozen=True)
class Due:
    """One seeded message: who receives it and when it is due."""

    id: str
    token: str
    category: str
    scheduled_at: datetime


def token_for(i: int) -> str:
    return f"ExponentPushToken[bench-{i:07d}]"


async def seed_recipients(db_path: Path, count: int) -> None:
    """One user with one active device per message to come (so a token names a message)."""
    store = SqliteStore(str(db_path))
    await store.open()
    try:

        async def one(i: int) -> None:
            user_id = f"d{i:07d}"
            await store.upsert_user(User(user_id=user_id, timezone="UTC"))
            await store.register_device(
                Device(user_id=user_id, device_id=f"phone-{i}", push_token=token_for(i))
            )

        await _in_chunks(range(count), one)
    finally:
        await store.close()


def due_messages(
    instants: Sequence[tuple[datetime, str]], first: int = 0
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
        out.append((message, Due(message.id, token_for(i), category, at)))
    return out


async def insert_messages(db_path: Path, messages: Sequence[Message]) -> int:
    store = SqliteStore(str(db_path))
    await store.open()
    try:
        result = await store.insert_messages(messages)
    finally:
        await store.close()
    return len(result.created)
