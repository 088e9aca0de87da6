"""Documents <-> domain models.

Datetimes are BSON dates: UTC with **millisecond** precision. Every instant is
truncated to the millisecond *before* it is written or used in a query, and the
store returns what it stored, so a value read back compares equal to the value
the caller got back from the write, and the driver (which would silently
truncate anyway) never makes a query disagree with a stored value. Local dates
and times, which BSON has no type for, are ISO strings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from datetime import UTC, date, datetime, time
from typing import Any, TypeVar

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

T = TypeVar("T")


def bson_dt(value: datetime) -> datetime:
    """UTC, truncated to what a BSON date holds (whole milliseconds)."""
    if value.tzinfo is None:
        # PyMongo would silently read it as UTC; the domain only deals in aware instants.
        raise ValueError(f"naive datetime {value!r}: the store keeps UTC instants only")
    aware = value.astimezone(UTC)
    return aware.replace(microsecond=aware.microsecond - aware.microsecond % 1000)


def opt_bson_dt(value: datetime | None) -> datetime | None:
    return None if value is None else bson_dt(value)


def read_dt_required(value: datetime) -> datetime:
    # The driver returns its own FixedOffset UTC with tz_aware=True (and a naive
    # value without it); hand the domain the standard-library UTC either way.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def read_dt(value: datetime | None) -> datetime | None:
    return None if value is None else read_dt_required(value)


def opt_iso(value: date | time | None) -> str | None:
    return None if value is None else value.isoformat()


def as_dict(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


def encoder(
    model: type[Any], id_field: str | None = None, **convert: Callable[[Any], Any]
) -> Callable[[Any], dict[str, Any]]:
    """``model`` -> document keyed by its field names (``_id`` for ``id_field``), each
    value through its converter in ``convert``, if it has one: :func:`decoder` reversed."""
    keys = [(f.name, "_id" if f.name == id_field else f.name) for f in fields(model)]

    def encode(obj: Any) -> dict[str, Any]:
        doc = {key: getattr(obj, name) for name, key in keys}
        for name, fn in convert.items():
            key = "_id" if name == id_field else name
            doc[key] = fn(doc[key])
        return doc

    return encode


def decoder(
    model: type[T], id_field: str | None = None, **convert: Callable[[Any], Any]
) -> Callable[[Mapping[str, Any]], T]:
    """Document -> ``model``, for documents keyed by the model's field names (``_id`` for
    ``id_field``): each value through its converter in ``convert``, if it has one. A field
    the document lacks (written before the field existed) takes the model's default."""
    dataclass_fields = fields(model)  # type: ignore[arg-type]
    keys = [(f.name, "_id" if f.name == id_field else f.name) for f in dataclass_fields]

    def decode(doc: Mapping[str, Any]) -> T:
        values = {name: doc[key] for name, key in keys if key in doc}
        for name, fn in convert.items():
            if name in values:
                values[name] = fn(values[name])
        return model(**values)

    return decode


_user_doc = encoder(
    User,
    "user_id",
    quiet_hours=lambda qh: (
        None if qh is None else {"start": qh.start.isoformat(), "end": qh.end.isoformat()}
    ),
)


def user_fields(user: User, now: datetime) -> dict[str, Any]:
    """Every field of ``user`` but its id and ``created_at``, stamped ``now`` if unstamped."""
    fields = _user_doc(user)
    del fields["_id"], fields["created_at"]
    return {**fields, "updated_at": bson_dt(user.updated_at or now)}


user_from_doc = decoder(
    User,
    "user_id",
    quiet_hours=lambda qh: (
        None
        if qh is None
        else QuietHours(time.fromisoformat(qh["start"]), time.fromisoformat(qh["end"]))
    ),
    created_at=read_dt,
    updated_at=read_dt,
)


def pair_id(user_id: str, other_id: str) -> str:
    # Identifiers cannot contain "|" (tepat.domain.validation), so the join is unambiguous.
    return f"{user_id}|{other_id}"


_device_doc = encoder(Device)
device_from_doc = decoder(Device, created_at=read_dt, updated_at=read_dt)


def device_activation(d: Device, updated: datetime) -> dict[str, Any]:
    """The upsert that binds ``d`` active with its token, stamped ``updated`` (a BSON
    instant); a new binding is created at the device's own ``created_at``, else then."""
    fields = _device_doc(d)
    del fields["created_at"]
    fields.update(active=True, consecutive_failures=0, deactivated_reason=None, updated_at=updated)
    return {"$set": fields, "$setOnInsert": {"created_at": opt_bson_dt(d.created_at) or updated}}


_reminder_doc = encoder(Reminder, local_time=time.isoformat, days=list, data=dict)


def reminder_upsert(r: Reminder, now: datetime) -> dict[str, Any]:
    """The update that creates or replaces ``r`` (a new one at its own ``created_at``)."""
    fields = _reminder_doc(r)
    del fields["created_at"]
    fields["updated_at"] = bson_dt(r.updated_at or now)
    return {"$set": fields, "$setOnInsert": {"created_at": bson_dt(r.created_at or now)}}


reminder_from_doc = decoder(
    Reminder,
    local_time=time.fromisoformat,
    days=tuple,
    data=as_dict,
    created_at=read_dt,
    updated_at=read_dt,
)


_message_doc = encoder(
    Message,
    "id",
    scheduled_at=bson_dt,
    local_date=opt_iso,
    local_time=opt_iso,
    data=dict,
    status=lambda status: status.value,
    claimed_at=opt_bson_dt,
    content=dict,
)


def message_doc(m: Message, now: datetime) -> dict[str, Any]:
    doc = _message_doc(m)
    doc.update(
        # Stamps the caller left out come from the store's clock.
        created_at=bson_dt(m.created_at or now),
        updated_at=bson_dt(m.updated_at or now),
        nominal_at=bson_dt(m.nominal),
        due_at=bson_dt(m.due),
        slot_key=m.slot,
        # The outbox mark, in the same write as the document (ports/store.py).
        publish_pending=m.status is MessageStatus.PENDING,
    )
    # The trace of the request or plan run that made it, if tracing is on.
    doc["trace_parent"] = m.trace_parent or tracing.current_traceparent()
    # Left out when empty; live_key absent, not null: see tepat.adapters.mongo.indexes.
    for key, empty in (
        ("content", {}),
        ("priority", None),
        ("live_key", None),
        ("trace_parent", None),
    ):
        if doc[key] == empty:
            del doc[key]
    return doc


_message = decoder(
    Message,
    "id",
    scheduled_at=read_dt_required,
    local_date=lambda d: None if d is None else date.fromisoformat(d),
    local_time=lambda t: None if t is None else time.fromisoformat(t),
    data=as_dict,
    status=MessageStatus,
    claimed_at=read_dt,
    created_at=read_dt,
    updated_at=read_dt,
    nominal_at=read_dt,
    due_at=read_dt,
    channel=lambda channel: channel or "push",
    content=as_dict,
)


def message_from_doc(doc: Mapping[str, Any]) -> Message:
    m = _message({"live_key": None, **doc})  # absent, not null: see tepat.adapters.mongo.indexes
    # nominal_at, due_at or slot_key absent only on a document written before these
    # fields existed and not yet backfilled (indexes.migrate): derived as the domain does.
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
    implied = {
        "nominal_at": bson_dt(m.nominal),
        "due_at": bson_dt(m.due),
        "slot_key": slot_key_for(m),
        "publish_pending": False,
    }
    return {name: value for name, value in implied.items() if name not in doc}


ticket_doc = encoder(Ticket, "ticket_id", sent_at=bson_dt, checked_at=opt_bson_dt)
ticket_from_doc = decoder(Ticket, "ticket_id", sent_at=read_dt_required, checked_at=read_dt)
