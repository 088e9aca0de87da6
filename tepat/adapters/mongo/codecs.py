"""Documents <-> domain models.

Datetimes are BSON dates: UTC with **millisecond** precision. Every instant is
truncated to the millisecond *before* it is written or used in a query, and the
store returns what it stored, so a value read back compares equal to the value
the caller got back from the write, and the driver (which would silently
truncate anyway) never makes a query disagree with a stored value. Local dates
and times, which BSON has no type for, are ISO strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, time
from typing import Any

from tepat import tracing
from tepat.domain.models import (
    Device,
    Message,
    MessageStatus,
    QuietHours,
    Reminder,
    Ticket,
    User,
    slot_key_for,
)

# --- instants -------------------------------------------------------------------------


def bson_dt(value: datetime) -> datetime:
    """UTC, truncated to what a BSON date holds (whole milliseconds)."""
    if value.tzinfo is None:
        # PyMongo would silently read it as UTC; the domain only deals in aware instants.
        raise ValueError(f"naive datetime {value!r}: the store keeps UTC instants only")
    aware = value.astimezone(UTC)
    return aware.replace(microsecond=aware.microsecond - aware.microsecond % 1000)


def opt_bson_dt(value: datetime | None) -> datetime | None:
    return None if value is None else bson_dt(value)


def read_dt(value: datetime | None) -> datetime | None:
    # The driver returns its own FixedOffset UTC with tz_aware=True (and a naive
    # value without it); hand the domain the standard-library UTC either way.
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def read_dt_required(value: datetime) -> datetime:
    out = read_dt(value)
    assert out is not None
    return out


def opt_iso(value: date | time | None) -> str | None:
    return None if value is None else value.isoformat()


# --- documents <-> domain -------------------------------------------------------------


def user_fields(user: User, now: datetime) -> dict[str, Any]:
    qh = user.quiet_hours
    return {
        "timezone": user.timezone,
        "locale": user.locale,
        "quiet_hours": None
        if qh is None
        else {"start": qh.start.isoformat(), "end": qh.end.isoformat()},
        "enabled": user.enabled,
        "plan_version": user.plan_version,
        "updated_at": bson_dt(user.updated_at or now),
    }


def user_from_doc(doc: Mapping[str, Any]) -> User:
    qh = doc.get("quiet_hours")
    return User(
        user_id=doc["_id"],
        timezone=doc["timezone"],
        locale=doc["locale"],
        quiet_hours=None
        if qh is None
        else QuietHours(time.fromisoformat(qh["start"]), time.fromisoformat(qh["end"])),
        enabled=doc["enabled"],
        plan_version=doc["plan_version"],
        created_at=read_dt(doc.get("created_at")),
        updated_at=read_dt(doc.get("updated_at")),
    )


def pair_id(user_id: str, other_id: str) -> str:
    # Identifiers cannot contain "|" (tepat.domain.validation), so the join is unambiguous.
    return f"{user_id}|{other_id}"


def device_from_doc(doc: Mapping[str, Any]) -> Device:
    return Device(
        user_id=doc["user_id"],
        device_id=doc["device_id"],
        push_token=doc["push_token"],
        platform=doc.get("platform"),
        active=doc["active"],
        consecutive_failures=doc.get("consecutive_failures", 0),
        deactivated_reason=doc.get("deactivated_reason"),
        created_at=read_dt(doc.get("created_at")),
        updated_at=read_dt(doc.get("updated_at")),
    )


def device_activation(d: Device, updated: datetime) -> dict[str, Any]:
    """The upsert that binds ``d`` active with its token, stamped ``updated`` (a BSON
    instant); a new binding is created at the device's own ``created_at``, else then."""
    return {
        "$set": {
            "user_id": d.user_id,
            "device_id": d.device_id,
            "push_token": d.push_token,
            "platform": d.platform,
            "active": True,
            "consecutive_failures": 0,
            "deactivated_reason": None,
            "updated_at": updated,
        },
        "$setOnInsert": {"created_at": opt_bson_dt(d.created_at) or updated},
    }


def reminder_fields(r: Reminder, now: datetime) -> dict[str, Any]:
    return {
        "user_id": r.user_id,
        "reminder_id": r.reminder_id,
        "category": r.category,
        "local_time": r.local_time.isoformat(),
        "title": r.title,
        "body": r.body,
        "label": r.label,
        "days": list(r.days),
        "data": dict(r.data),
        "enabled": r.enabled,
        "version": r.version,
        "updated_at": bson_dt(r.updated_at or now),
    }


def reminder_from_doc(doc: Mapping[str, Any]) -> Reminder:
    return Reminder(
        user_id=doc["user_id"],
        reminder_id=doc["reminder_id"],
        category=doc["category"],
        local_time=time.fromisoformat(doc["local_time"]),
        title=doc["title"],
        body=doc["body"],
        label=doc["label"],
        days=tuple(doc["days"]),
        data=dict(doc.get("data") or {}),
        enabled=doc["enabled"],
        version=doc["version"],
        created_at=read_dt(doc.get("created_at")),
        updated_at=read_dt(doc.get("updated_at")),
    )


def message_doc(m: Message, now: datetime) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": m.id,
        "user_id": m.user_id,
        "category": m.category,
        "label": m.label,
        "title": m.title,
        "body": m.body,
        "scheduled_at": bson_dt(m.scheduled_at),
        "timezone": m.timezone,
        "dedup_key": m.dedup_key,
        "device_id": m.device_id,
        "reminder_id": m.reminder_id,
        "idempotency_key": m.idempotency_key,
        "request_hash": m.request_hash,
        "local_date": opt_iso(m.local_date),
        "local_time": opt_iso(m.local_time),
        "data": dict(m.data),
        "status": m.status.value,
        "status_reason": m.status_reason,
        "attempts": m.attempts,
        "ticket_id": m.ticket_id,
        "last_error": m.last_error,
        "plan_version": m.plan_version,
        "claimed_at": opt_bson_dt(m.claimed_at),
        # Stamps the caller left out come from the store's clock.
        "created_at": bson_dt(m.created_at or now),
        "updated_at": bson_dt(m.updated_at or now),
        "nominal_at": bson_dt(m.nominal),
        "due_at": bson_dt(m.due),
        "slot_key": m.slot,
        # The outbox mark, in the same write as the document (ports/store.py).
        "publish_pending": m.status is MessageStatus.PENDING,
        "channel": m.channel,
    }
    if m.content:
        doc["content"] = dict(m.content)
    if m.priority is not None:
        doc["priority"] = m.priority
    if trace_parent := m.trace_parent or tracing.current_traceparent():
        doc["trace_parent"] = trace_parent
    if m.live_key is not None:  # absent, not null: see tepat.adapters.mongo.indexes
        doc["live_key"] = m.live_key
    return doc


def message_from_doc(doc: Mapping[str, Any]) -> Message:
    ld, lt = doc.get("local_date"), doc.get("local_time")
    m = Message(
        id=doc["_id"],
        user_id=doc["user_id"],
        category=doc["category"],
        label=doc["label"],
        title=doc["title"],
        body=doc["body"],
        scheduled_at=read_dt_required(doc["scheduled_at"]),
        timezone=doc["timezone"],
        dedup_key=doc["dedup_key"],
        live_key=doc.get("live_key"),
        device_id=doc.get("device_id"),
        reminder_id=doc.get("reminder_id"),
        idempotency_key=doc.get("idempotency_key"),
        request_hash=doc.get("request_hash"),
        local_date=None if ld is None else date.fromisoformat(ld),
        local_time=None if lt is None else time.fromisoformat(lt),
        data=dict(doc.get("data") or {}),
        status=MessageStatus(doc["status"]),
        status_reason=doc.get("status_reason"),
        attempts=doc.get("attempts", 0),
        ticket_id=doc.get("ticket_id"),
        last_error=doc.get("last_error"),
        plan_version=doc.get("plan_version", 1),
        claimed_at=read_dt(doc.get("claimed_at")),
        created_at=read_dt(doc.get("created_at")),
        updated_at=read_dt(doc.get("updated_at")),
        # Absent only on a document written before these fields existed and not yet
        # backfilled (indexes.migrate): derived as the domain does.
        nominal_at=read_dt(doc.get("nominal_at")),
        due_at=read_dt(doc.get("due_at")),
        slot_key=doc.get("slot_key"),
        channel=doc.get("channel") or "push",
        content=dict(doc.get("content") or {}),
        priority=doc.get("priority"),
        trace_parent=doc.get("trace_parent"),
    )
    if m.nominal_at is None or m.due_at is None or m.slot_key is None:
        m = replace(m, nominal_at=m.nominal, due_at=m.due, slot_key=m.slot)
    return m


def legacy_backfill(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a document written before ``nominal_at``/``due_at``/``slot_key`` and the
    outbox mark existed lacks, as its own instant and slot imply them.

    Such a message was published the old way (or is the sweeper's), so its mark
    is clear; its slot spells the old (user, device, category, label, instant)
    one, which the old unique index kept unique among pending messages.
    """
    m = message_from_doc(doc)
    fields: dict[str, Any] = {}
    if "nominal_at" not in doc:
        fields["nominal_at"] = bson_dt(m.nominal)
    if "due_at" not in doc:
        fields["due_at"] = bson_dt(m.due)
    if "slot_key" not in doc:
        fields["slot_key"] = slot_key_for(m)
    if "publish_pending" not in doc:
        fields["publish_pending"] = False
    return fields


def ticket_doc(t: Ticket) -> dict[str, Any]:
    return {
        "_id": t.ticket_id,
        "message_id": t.message_id,
        "user_id": t.user_id,
        "device_id": t.device_id,
        "push_token": t.push_token,
        "sent_at": bson_dt(t.sent_at),
        "receipt_status": t.receipt_status,
        "receipt_error": t.receipt_error,
        "checked_at": opt_bson_dt(t.checked_at),
    }


def ticket_from_doc(doc: Mapping[str, Any]) -> Ticket:
    return Ticket(
        ticket_id=doc["_id"],
        message_id=doc["message_id"],
        user_id=doc["user_id"],
        device_id=doc["device_id"],
        push_token=doc["push_token"],
        sent_at=read_dt_required(doc["sent_at"]),
        receipt_status=doc.get("receipt_status"),
        receipt_error=doc.get("receipt_error"),
        checked_at=read_dt(doc.get("checked_at")),
    )
