"""Rows <-> models, and the text forms the store keeps.

Encoding: instants are UTC text in one fixed width format
(``2027-03-14T07:30:00.000000Z``) so text order is time order; local dates are
``YYYY-MM-DD``, local times ``HH:MM`` (``HH:MM:SS[.ffffff]`` only when they carry
seconds), reminder days comma-separated, ``data`` JSON text. Timestamps a
caller leaves ``None`` are stamped from the store's clock.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time
from functools import lru_cache
from operator import itemgetter
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


# What json.dumps(value, separators=(",", ":"), ensure_ascii=False) builds on every call:
# built once, the same text for a third less time (a bulk import encodes a data object
# for each reminder and each message it plans).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _json(value: Mapping[str, Any]) -> str:
    if not value:
        return "{}"  # most messages carry no data; skip the encoder
    return _ENCODER.encode(value)


def _json_object(text: str) -> dict[str, Any]:
    """:func:`_json` read back (the common ``{}`` without the parser)."""
    return {} if text == "{}" else json.loads(text)


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _decoder(
    model: Callable[..., T], columns: str, **convert: Callable[[Any], Any] | None
) -> Callable[[Row], T]:
    """Row -> ``model`` (a dataclass), for rows of ``columns`` named as its fields: each
    value through its converter in ``convert``, if it has one (``None`` leaves the column
    out). The fields it leaves to their defaults must come after all the others."""
    index = {name: i for i, name in enumerate(columns.split(", "))}
    kept = [name for name in index if name not in convert or convert[name] is not None]
    fields = [f.name for f in dataclasses.fields(model)]  # type: ignore[arg-type]
    given = fields[: len(kept)]
    if sorted(given) != sorted(kept):
        raise ValueError(f"{model.__name__}: columns {kept} are not its first fields")
    pick = itemgetter(*(index[name] for name in given))
    converted = [(i, fn) for i, name in enumerate(given) if (fn := convert.get(name)) is not None]

    # Positional, converting only the columns that need it: a keyword per column cost
    # three times as much for a Message (a claim decodes each row it takes).
    def decode(row: Row) -> T:
        values = list(pick(row))
        for i, fn in converted:
            values[i] = fn(values[i])
        return model(*values)

    return decode


def _encoder(columns: str, **convert: Callable[[Any], Any]) -> Callable[[Any], Row]:
    """Model -> row of ``columns`` named as its fields, each value through its converter
    in ``convert``, if it has one: :func:`_decoder` reversed."""
    fns = [(sys.intern(name), convert.get(name)) for name in columns.split(", ")]

    def encode(obj: Any) -> Row:
        return tuple(getattr(obj, n) if fn is None else fn(getattr(obj, n)) for n, fn in fns)

    return encode


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
    return User(user_id, tz, locale, quiet, bool(enabled), plan_version, _dt(created), _dt(updated))


_DEVICE_COLUMNS = (
    "user_id, device_id, push_token, platform, active, consecutive_failures, "
    "deactivated_reason, created_at, updated_at, kind, fallback_kind, fallback_token"
)


_device = _decoder(Device, _DEVICE_COLUMNS, active=bool, created_at=_dt, updated_at=_dt)


_REMINDER_COLUMNS = (
    "user_id, reminder_id, category, local_time, title, body, label, days, data, "
    "enabled, version, created_at, updated_at"
)


_reminder_row = _encoder(
    _REMINDER_COLUMNS,
    local_time=_local_time,
    days=",".join,
    data=_json,
    enabled=int,
    created_at=_ts_opt,
    updated_at=_ts_opt,
)


def _reminder_params(r: Reminder, now: str) -> Row:
    *row, created, updated = _reminder_row(r)
    return (*row, created or now, updated or now)


_reminder = _decoder(
    Reminder,
    _REMINDER_COLUMNS,
    local_time=time.fromisoformat,
    days=lambda days: tuple(days.split(",")) if days else (),
    data=json.loads,
    enabled=bool,
    created_at=_dt,
    updated_at=_dt,
)


_MESSAGE_COLUMNS = (
    "id, user_id, category, label, title, body, scheduled_at, timezone, dedup_key, live_key, "
    "device_id, reminder_id, idempotency_key, request_hash, local_date, local_time, data, "
    "status, status_reason, attempts, ticket_id, last_error, plan_version, claimed_at, "
    "created_at, updated_at, nominal_at, due_at, slot_key, publish_pending, channel, content, "
    "priority, trace_parent"
)


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
        None if m.local_time is None else _local_time(m.local_time),
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


_message = _decoder(
    Message,
    _MESSAGE_COLUMNS,
    scheduled_at=_dt,
    local_date=lambda d: None if d is None else date.fromisoformat(d),
    local_time=lambda t: None if t is None else time.fromisoformat(t),
    data=_json_object,
    # A lookup, not MessageStatus(value): an enum call is a dozen times slower.
    status={s.value: s for s in MessageStatus}.__getitem__,
    claimed_at=_dt_opt,
    created_at=_dt,
    updated_at=_dt,
    nominal_at=_dt,
    due_at=_dt,
    publish_pending=None,  # the outbox mark: the store's, not the message's
    content=_json_object,
)


_TICKET_COLUMNS = (
    "ticket_id, message_id, user_id, device_id, push_token, sent_at, receipt_status, "
    "receipt_error, checked_at"
)


_ticket_params = _encoder(_TICKET_COLUMNS, sent_at=_ts, checked_at=_ts_opt)
_ticket = _decoder(Ticket, _TICKET_COLUMNS, sent_at=_dt, checked_at=_dt_opt)
