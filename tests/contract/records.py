"""Records for the store contract suites: messages, devices, reminders and tickets as
the tests write them, and the instants they use."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, time, timedelta
from typing import Any

from tepat.domain.models import (
    Device,
    Message,
    MessageStatus,
    Reminder,
    Ticket,
    message_id_for,
    slot_key_for,
)
from tepat.ports.store import Store

T0 = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)
PENDING = MessageStatus.PENDING
SENDING = MessageStatus.SENDING
SENT = MessageStatus.SENT
DELIVERED = MessageStatus.DELIVERED
FAILED = MessageStatus.FAILED
CANCELLED = MessageStatus.CANCELLED


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def msg(
    key: str,
    *,
    user_id: str = "u1",
    scheduled_at: datetime = T0,
    category: str = "meal",
    label: str = "",
    live_key: str | None = "",
    reminder_id: str | None = "r1",
    **fields: Any,
) -> Message:
    """A pending message whose keys derive from ``key``; ``live_key=""`` means "derive one".

    Complete as the planner writes it: ``nominal_at`` and ``due_at`` default to
    ``scheduled_at`` and ``slot_key`` to the domain's ``slot_key_for``.
    """
    dedup_key = f"test|{key}"
    base = Message(
        id=message_id_for(dedup_key),
        user_id=user_id,
        category=category,
        label=label,
        title=f"title {key}",
        body=f"body {key}",
        scheduled_at=scheduled_at,
        timezone="Asia/Jakarta",
        dedup_key=dedup_key,
        live_key=f"live|{key}" if live_key == "" else live_key,
        reminder_id=reminder_id,
        created_at=T0 - timedelta(days=1),
        updated_at=T0 - timedelta(days=1),
        nominal_at=scheduled_at,
        due_at=scheduled_at,
    )
    m = dataclasses.replace(base, **fields)
    return m if "slot_key" in fields else dataclasses.replace(m, slot_key=slot_key_for(m))


def oneoff(key: str, *, user_id: str = "u1", **fields: Any) -> Message:
    """A pending one-off: no reminder, its live key names the request."""
    return msg(
        key,
        user_id=user_id,
        reminder_id=None,
        live_key=f"o|{user_id}|{key}",
        idempotency_key=key,
        **fields,
    )


def device(user_id: str, device_id: str, token: str, **fields: Any) -> Device:
    base = Device(user_id, device_id, token, platform="ios", created_at=T0, updated_at=T0)
    return dataclasses.replace(base, **fields)


async def status_of(store: Store, message_id: str) -> MessageStatus:
    m = await store.get_message(message_id)
    assert m is not None
    return m.status


def reminder(reminder_id: str = "r1", user_id: str = "u1", **fields: Any) -> Reminder:
    base = Reminder(
        user_id=user_id,
        reminder_id=reminder_id,
        category="meal",
        local_time=time(7, 30),
        title="Breakfast",
        body="Time to eat",
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(base, **fields)


def ticket(ticket_id: str, message_id: str, sent_at: datetime, **fields: Any) -> Ticket:
    return Ticket(ticket_id, message_id, "u1", "d1", "tok", sent_at, **fields)
