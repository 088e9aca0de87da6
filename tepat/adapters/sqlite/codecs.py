"""Rows <-> models, and the text forms the store keeps.

Encoding: instants are UTC text in one fixed width format
(``2027-03-14T07:30:00.000000Z``) so text order is time order; local dates are
``YYYY-MM-DD``, local times ``HH:MM`` (``HH:MM:SS[.ffffff]`` only when they carry
seconds), reminder days comma-separated, ``data`` JSON text. Timestamps a
caller leaves ``None`` are stamped from the store's clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time
from functools import lru_cache
from typing import Any, TypeVar

from tepat import tracing
from tepat.domain.models import Device, Message, MessageStatus, QuietHours, Reminder, Ticket, User

T = TypeVar("T")
Row = tuple[Any, ...]


# Cached: a plan repeats the same few instants (one per zone and local time,
# and one "now") across hundreds of thousands of messages. Equal aware
# datetimes are the same instant, so they rightly share one text.
@lru_cache(maxsize=16384)
def _ts(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: the store keeps UTC instants only")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _ts_opt(value: datetime | None) -> str | None:
    return None if value is None else _ts(value)


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text)  # the trailing Z reads back as UTC


def _dt_opt(text: str | None) -> datetime | None:
    return None if text is None else _dt(text)


def _local_time(value: time) -> str:
    if value.second or value.microsecond:
        return value.isoformat()
    return value.isoformat(timespec="minutes")


def _local_time_opt(value: time | None) -> str | None:
    return None if value is None else _local_time(value)


# What json.dumps(value, separators=(",", ":"), ensure_ascii=False) builds on every call:
# built once, the same text for a third less time (a bulk import encodes a data object
# for each reminder and each message it plans).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _json(value: Mapping[str, Any]) -> str:
    if not value:
        return "{}"  # most messages carry no data; skip the encoder
    return _ENCODER.encode(value)


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --------------------------------------------------------------------------- users

_USER_COLUMNS = (
    "user_id, timezone, locale, quiet_start, quiet_end, enabled, plan_version, "
    "created_at, updated_at"
)


def _user_params(user: User, now: str) -> Row:
    quiet = user.quiet_hours
    return (
        user.user_id,
        user.timezone,
        user.locale,
        None if quiet is None else _local_time(quiet.start),
        None if quiet is None else _local_time(quiet.end),
        int(user.enabled),
        user.plan_version,
        _ts_opt(user.created_at) or now,
        _ts_opt(user.updated_at) or now,
    )


def _user(row: Row) -> User:
    user_id, tz, locale, q_start, q_end, enabled, plan_version, created, updated = row
    quiet = None
    if q_start is not None and q_end is not None:
        quiet = QuietHours(time.fromisoformat(q_start), time.fromisoformat(q_end))
    return User(
        user_id=user_id,
        timezone=tz,
        locale=locale,
        quiet_hours=quiet,
        enabled=bool(enabled),
        plan_version=plan_version,
        created_at=_dt(created),
        updated_at=_dt(updated),
    )


# --------------------------------------------------------------------------- devices

_DEVICE_COLUMNS = (
    "user_id, device_id, push_token, platform, active, consecutive_failures, "
    "deactivated_reason, created_at, updated_at"
)


def _device(row: Row) -> Device:
    user_id, device_id, token, platform, active, failures, reason, created, updated = row
    return Device(
        user_id=user_id,
        device_id=device_id,
        push_token=token,
        platform=platform,
        active=bool(active),
        consecutive_failures=failures,
        deactivated_reason=reason,
        created_at=_dt(created),
        updated_at=_dt(updated),
    )


# --------------------------------------------------------------------------- reminders

_REMINDER_COLUMNS = (
    "user_id, reminder_id, category, local_time, title, body, label, days, data, "
    "enabled, version, created_at, updated_at"
)


def _reminder_params(r: Reminder, now: str) -> Row:
    return (
        r.user_id,
        r.reminder_id,
        r.category,
        _local_time(r.local_time),
        r.title,
        r.body,
        r.label,
        ",".join(r.days),
        _json(r.data),
        int(r.enabled),
        r.version,
        _ts_opt(r.created_at) or now,
        _ts_opt(r.updated_at) or now,
    )


def _reminder(row: Row) -> Reminder:
    (user_id, reminder_id, category, local_time, title, body, label, days, data) = row[:9]
    enabled, version, created, updated = row[9:]
    return Reminder(
        user_id=user_id,
        reminder_id=reminder_id,
        category=category,
        local_time=time.fromisoformat(local_time),
        title=title,
        body=body,
        label=label,
        days=tuple(days.split(",")) if days else (),
        data=json.loads(data),
        enabled=bool(enabled),
        version=version,
        created_at=_dt(created),
        updated_at=_dt(updated),
    )


# --------------------------------------------------------------------------- messages

_MESSAGE_FIELDS = (
    "id",
    "user_id",
    "category",
    "label",
    "title",
    "body",
    "scheduled_at",
    "timezone",
    "dedup_key",
    "live_key",
    "device_id",
    "reminder_id",
    "idempotency_key",
    "request_hash",
    "local_date",
    "local_time",
    "data",
    "status",
    "status_reason",
    "attempts",
    "ticket_id",
    "last_error",
    "plan_version",
    "claimed_at",
    "created_at",
    "updated_at",
    "nominal_at",
    "due_at",
    "slot_key",
    "publish_pending",
    "channel",
    "content",
    "priority",
    "trace_parent",
)
_MESSAGE_COLUMNS = ", ".join(_MESSAGE_FIELDS)


def _message_params(m: Message, now: str) -> Row:
    return (
        m.id,
        m.user_id,
        m.category,
        m.label,
        m.title,
        m.body,
        _ts(m.scheduled_at),
        m.timezone,
        m.dedup_key,
        m.live_key,
        m.device_id,
        m.reminder_id,
        m.idempotency_key,
        m.request_hash,
        None if m.local_date is None else m.local_date.isoformat(),
        _local_time_opt(m.local_time),
        _json(m.data),
        m.status.value,
        m.status_reason,
        m.attempts,
        m.ticket_id,
        m.last_error,
        m.plan_version,
        _ts_opt(m.claimed_at),
        _ts_opt(m.created_at) or now,
        _ts_opt(m.updated_at) or now,
        _ts(m.nominal),
        _ts(m.due),
        m.slot,
        # The outbox mark, in the same write as the row (ports/store.py).
        1 if m.status is MessageStatus.PENDING else 0,
        m.channel,
        _json(m.content),
        m.priority,
        m.trace_parent or tracing.current_traceparent(),
    )


def _message(row: Row) -> Message:
    (mid, user_id, category, label, title, body, scheduled_at, tz, dedup_key, live_key) = row[:10]
    (device_id, reminder_id, idem_key, req_hash, local_date, local_time, data) = row[10:17]
    (status, reason, attempts, ticket_id, last_error, plan_version) = row[17:23]
    claimed_at, created_at, updated_at, nominal_at, due_at, slot_key = row[23:29]
    channel, content, priority, trace_parent = row[30:34]  # row[29] is the outbox mark
    return Message(
        id=mid,
        user_id=user_id,
        category=category,
        label=label,
        title=title,
        body=body,
        scheduled_at=_dt(scheduled_at),
        timezone=tz,
        dedup_key=dedup_key,
        live_key=live_key,
        device_id=device_id,
        reminder_id=reminder_id,
        idempotency_key=idem_key,
        request_hash=req_hash,
        local_date=None if local_date is None else date.fromisoformat(local_date),
        local_time=None if local_time is None else time.fromisoformat(local_time),
        data=json.loads(data),
        status=MessageStatus(status),
        status_reason=reason,
        attempts=attempts,
        ticket_id=ticket_id,
        last_error=last_error,
        plan_version=plan_version,
        claimed_at=_dt_opt(claimed_at),
        created_at=_dt(created_at),
        updated_at=_dt(updated_at),
        nominal_at=_dt(nominal_at),
        due_at=_dt(due_at),
        slot_key=slot_key,
        channel=channel,
        content=json.loads(content),
        priority=priority,
        trace_parent=trace_parent,
    )


# --------------------------------------------------------------------------- tickets

_TICKET_COLUMNS = (
    "ticket_id, message_id, user_id, device_id, push_token, sent_at, receipt_status, "
    "receipt_error, checked_at"
)


def _ticket_params(t: Ticket) -> Row:
    return (
        t.ticket_id,
        t.message_id,
        t.user_id,
        t.device_id,
        t.push_token,
        _ts(t.sent_at),
        t.receipt_status,
        t.receipt_error,
        _ts_opt(t.checked_at),
    )


def _ticket(row: Row) -> Ticket:
    ticket_id, message_id, user_id, device_id, token, sent_at, status, error, checked = row
    return Ticket(
        ticket_id=ticket_id,
        message_id=message_id,
        user_id=user_id,
        device_id=device_id,
        push_token=token,
        sent_at=_dt(sent_at),
        receipt_status=status,
        receipt_error=error,
        checked_at=_dt_opt(checked),
    )
