"""The MongoDB store: the production adapter of :class:`tepat.ports.store.Store`.

Written against PyMongo's own asyncio API (``pymongo.AsyncMongoClient``). Motor,
which the product card names, is deprecated (end of life May 2026) and PyMongo's
async client replaces it (GUIDE.md §6).

Every guarantee the port promises comes from a unique index created in
:meth:`MongoStore.open`, never from check-then-insert:

- ``messages.dedup_key`` unique;
- ``messages.live_key`` unique where it is a string. A message without a live
  key (or whose key was released on cancel) has the *field absent*: we ``$unset``
  rather than set ``null`` so "no live key" has one representation, written the
  same way by insert and by cancel, and so queries and the partial filter
  (``{$type: "string"}``) never have to care about a stored ``null``;
- pending messages unique per (user_id, device_key, category, label,
  scheduled_at), partial on ``{status: "pending"}``; ``device_key`` is the
  device id, or ``"*"`` for "all of the user's devices", because a partial
  unique index treats a missing field as ``null`` and we want that slot explicit;
- devices: one active document per ``device_id`` and per ``push_token``
  (partial on ``{active: true}``).

Datetimes are BSON dates: UTC with **millisecond** precision. Every instant is
truncated to the millisecond *before* it is written or used in a query, and the
store returns what it stored, so a value read back compares equal to the value
the caller got back from the write, and the driver (which would silently
truncate anyway) never makes a query disagree with a stored value. Local dates
and times, which BSON has no type for, are ISO strings.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, date, datetime, time
from typing import Any
from urllib.parse import urlsplit

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from tepat.clock import Clock, SystemClock
from tepat.domain.errors import DomainError
from tepat.domain.models import (
    Device,
    Message,
    MessageStatus,
    QuietHours,
    Reminder,
    Ticket,
    User,
)
from tepat.ports.store import (
    Counts,
    DeviceFailure,
    InsertResult,
    MessagePage,
    MessageQuery,
    StatusChange,
)

__all__ = ["MongoStore", "database_name"]

DEFAULT_DATABASE = "tepat"
DUPLICATE_KEY = 11000
ALL_DEVICES = "*"  # device_key of a message meant for every active device of its user
REPLACED = "replaced"  # deactivated_reason of a binding taken over by a new registration
_REGISTER_ATTEMPTS = 5


def database_name(url: str) -> str:
    """The database named by the URL path (``mongodb://host/tepat``), else ``tepat``.

    Parsed by hand rather than with the driver's URI parser so it also works for
    an injected client and never resolves ``mongodb+srv`` records.
    """
    path = urlsplit(url).path.lstrip("/")
    return path or DEFAULT_DATABASE


# --- instants -------------------------------------------------------------------------


def _dt(value: datetime) -> datetime:
    """UTC, truncated to what a BSON date holds (whole milliseconds)."""
    if value.tzinfo is None:
        # PyMongo would silently read it as UTC; the domain only deals in aware instants.
        raise ValueError(f"naive datetime {value!r}: the store keeps UTC instants only")
    aware = value.astimezone(UTC)
    return aware.replace(microsecond=aware.microsecond - aware.microsecond % 1000)


def _opt_dt(value: datetime | None) -> datetime | None:
    return None if value is None else _dt(value)


def _read_dt(value: datetime | None) -> datetime | None:
    # The driver returns its own FixedOffset UTC with tz_aware=True (and a naive
    # value without it); hand the domain the standard-library UTC either way.
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _req_dt(value: datetime) -> datetime:
    out = _read_dt(value)
    assert out is not None
    return out


def _opt_iso(value: date | time | None) -> str | None:
    return None if value is None else value.isoformat()


# --- documents <-> domain -------------------------------------------------------------


def _user_fields(user: User, now: datetime) -> dict[str, Any]:
    qh = user.quiet_hours
    return {
        "timezone": user.timezone,
        "locale": user.locale,
        "quiet_hours": None
        if qh is None
        else {"start": qh.start.isoformat(), "end": qh.end.isoformat()},
        "enabled": user.enabled,
        "plan_version": user.plan_version,
        "updated_at": _dt(user.updated_at or now),
    }


def _user(doc: Mapping[str, Any]) -> User:
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
        created_at=_read_dt(doc.get("created_at")),
        updated_at=_read_dt(doc.get("updated_at")),
    )


def _pair_id(user_id: str, other_id: str) -> str:
    # Identifiers cannot contain "|" (tepat.domain.validation), so the join is unambiguous.
    return f"{user_id}|{other_id}"


def _device(doc: Mapping[str, Any]) -> Device:
    return Device(
        user_id=doc["user_id"],
        device_id=doc["device_id"],
        push_token=doc["push_token"],
        platform=doc.get("platform"),
        active=doc["active"],
        consecutive_failures=doc.get("consecutive_failures", 0),
        deactivated_reason=doc.get("deactivated_reason"),
        created_at=_read_dt(doc.get("created_at")),
        updated_at=_read_dt(doc.get("updated_at")),
    )


def _reminder_fields(r: Reminder, now: datetime) -> dict[str, Any]:
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
        "updated_at": _dt(r.updated_at or now),
    }


def _reminder(doc: Mapping[str, Any]) -> Reminder:
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
        created_at=_read_dt(doc.get("created_at")),
        updated_at=_read_dt(doc.get("updated_at")),
    )


def _message_doc(m: Message, now: datetime) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": m.id,
        "user_id": m.user_id,
        "category": m.category,
        "label": m.label,
        "title": m.title,
        "body": m.body,
        "scheduled_at": _dt(m.scheduled_at),
        "timezone": m.timezone,
        "dedup_key": m.dedup_key,
        "device_id": m.device_id,
        "device_key": m.device_id if m.device_id is not None else ALL_DEVICES,
        "reminder_id": m.reminder_id,
        "idempotency_key": m.idempotency_key,
        "request_hash": m.request_hash,
        "local_date": _opt_iso(m.local_date),
        "local_time": _opt_iso(m.local_time),
        "data": dict(m.data),
        "status": m.status.value,
        "status_reason": m.status_reason,
        "attempts": m.attempts,
        "ticket_id": m.ticket_id,
        "last_error": m.last_error,
        "plan_version": m.plan_version,
        "claimed_at": _opt_dt(m.claimed_at),
        # Stamps the caller left out come from the store's clock.
        "created_at": _dt(m.created_at or now),
        "updated_at": _dt(m.updated_at or now),
    }
    if m.live_key is not None:  # absent, not null: see the module docstring
        doc["live_key"] = m.live_key
    return doc


def _message(doc: Mapping[str, Any]) -> Message:
    ld, lt = doc.get("local_date"), doc.get("local_time")
    return Message(
        id=doc["_id"],
        user_id=doc["user_id"],
        category=doc["category"],
        label=doc["label"],
        title=doc["title"],
        body=doc["body"],
        scheduled_at=_req_dt(doc["scheduled_at"]),
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
        claimed_at=_read_dt(doc.get("claimed_at")),
        created_at=_read_dt(doc.get("created_at")),
        updated_at=_read_dt(doc.get("updated_at")),
    )


def _ticket_doc(t: Ticket) -> dict[str, Any]:
    return {
        "_id": t.ticket_id,
        "message_id": t.message_id,
        "user_id": t.user_id,
        "device_id": t.device_id,
        "push_token": t.push_token,
        "sent_at": _dt(t.sent_at),
        "receipt_status": t.receipt_status,
        "receipt_error": t.receipt_error,
        "checked_at": _opt_dt(t.checked_at),
    }


def _ticket(doc: Mapping[str, Any]) -> Ticket:
    return Ticket(
        ticket_id=doc["_id"],
        message_id=doc["message_id"],
        user_id=doc["user_id"],
        device_id=doc["device_id"],
        push_token=doc["push_token"],
        sent_at=_req_dt(doc["sent_at"]),
        receipt_status=doc.get("receipt_status"),
        receipt_error=doc.get("receipt_error"),
        checked_at=_read_dt(doc.get("checked_at")),
    )


def _encode_cursor(scheduled_at: datetime, message_id: str) -> str:
    ms = int(scheduled_at.timestamp() * 1000)
    return base64.urlsafe_b64encode(f"{ms}|{message_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        ms, message_id = raw.split("|", 1)
        return datetime.fromtimestamp(int(ms) / 1000, UTC), message_id
    except (ValueError, binascii.Error, UnicodeDecodeError, OverflowError, OSError):
        raise DomainError("cursor", "not a cursor this service issued") from None


def _only_duplicates(exc: BulkWriteError) -> set[int]:
    """Input indexes rejected by a unique index; re-raises on any other failure."""
    details = exc.details
    errors = details.get("writeErrors", [])
    if details.get("writeConcernErrors") or any(e.get("code") != DUPLICATE_KEY for e in errors):
        raise exc
    return {int(e["index"]) for e in errors}


class MongoStore:
    """:class:`tepat.ports.store.Store` on MongoDB through ``pymongo.AsyncMongoClient``.

    ``client`` lets tests inject another client with the same async API (the
    mongomock facade in ``tests/support``); it is then not closed by :meth:`close`.
    """

    def __init__(self, url: str, *, client: Any | None = None, clock: Clock | None = None) -> None:
        self._url = url
        self._db_name = database_name(url)
        self._owns_client = client is None
        # The client and its collections are duck-typed (``Any``) on purpose: the
        # real AsyncMongoClient and the test facade share an API, not a class.
        self._client: Any = client
        self._clock: Clock = clock or SystemClock()

    # --- lifecycle ----------------------------------------------------------------

    @property
    def _db(self) -> Any:
        if self._client is None:
            raise RuntimeError("MongoStore.open() has not been called")
        return self._client[self._db_name]

    async def open(self) -> None:
        if self._client is None:
            # tz_aware: dates come back as aware UTC instead of naive values
            # that merely happen to be UTC.
            self._client = AsyncMongoClient(self._url, tz_aware=True, connect=False)
        await self._create_indexes()

    async def _create_indexes(self) -> None:
        # create_index with an identical spec is a no-op on the server, so open()
        # is idempotent. Names are explicit so a later spec change fails loudly
        # (IndexOptionsConflict) instead of piling up near-duplicate indexes.
        db = self._db
        messages = db["messages"]
        await messages.create_index("dedup_key", unique=True, name="uniq_dedup_key")
        await messages.create_index(
            "live_key",
            unique=True,
            name="uniq_live_key",
            partialFilterExpression={"live_key": {"$type": "string"}},
        )
        await messages.create_index(
            [
                ("user_id", ASCENDING),
                ("device_key", ASCENDING),
                ("category", ASCENDING),
                ("label", ASCENDING),
                ("scheduled_at", ASCENDING),
            ],
            unique=True,
            name="uniq_pending_slot",
            partialFilterExpression={"status": "pending"},
        )
        # due_pending / iter_pending / count by status.
        await messages.create_index(
            [("status", ASCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)],
            name="status_scheduled",
        )
        # list_messages (user history, newest first) and cancel_pending.
        await messages.create_index(
            [("user_id", ASCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)],
            name="user_scheduled",
        )
        # Small partial indexes for the sweeper's and the operator's views.
        await messages.create_index(
            [("claimed_at", ASCENDING), ("_id", ASCENDING)],
            name="sending_claimed",
            partialFilterExpression={"status": "sending"},
        )
        await messages.create_index(
            [("updated_at", DESCENDING), ("_id", DESCENDING)],
            name="failed_updated",
            partialFilterExpression={"status": "failed"},
        )

        devices = db["devices"]
        await devices.create_index(
            "device_id",
            unique=True,
            name="uniq_active_device_id",
            partialFilterExpression={"active": True},
        )
        await devices.create_index(
            "push_token",
            unique=True,
            name="uniq_active_push_token",
            partialFilterExpression={"active": True},
        )
        await devices.create_index([("user_id", ASCENDING), ("active", ASCENDING)], name="user")
        await devices.create_index("push_token", name="push_token")

        await db["reminders"].create_index("user_id", name="user")
        await db["preferences"].create_index("user_id", name="user")

        tickets = db["tickets"]
        await tickets.create_index(
            [("receipt_status", ASCENDING), ("sent_at", ASCENDING)], name="receipt_sent"
        )
        await tickets.create_index("message_id", name="message")

    async def close(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.close()
            self._client = None

    async def ping(self) -> None:
        await self._db.command("ping")

    async def get_meta(self, key: str) -> str | None:
        doc = await self._db["meta"].find_one({"_id": key})
        return None if doc is None else str(doc["value"])

    async def set_meta(self, key: str, value: str) -> None:
        await self._db["meta"].update_one({"_id": key}, {"$set": {"value": value}}, upsert=True)

    # --- users --------------------------------------------------------------------

    async def upsert_user(self, user: User) -> User:
        now = self._clock.now()
        doc = await self._db["users"].find_one_and_update(
            {"_id": user.user_id},
            {
                "$set": _user_fields(user, now),
                # Only a new user takes the given created_at: replacing keeps the original.
                "$setOnInsert": {"created_at": _dt(user.created_at or now)},
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return _user(doc)

    async def get_user(self, user_id: str) -> User | None:
        doc = await self._db["users"].find_one({"_id": user_id})
        return None if doc is None else _user(doc)

    async def get_users(self, user_ids: Sequence[str]) -> dict[str, User]:
        if not user_ids:
            return {}
        docs = await self._db["users"].find({"_id": {"$in": list(set(user_ids))}}).to_list(None)
        return {d["_id"]: _user(d) for d in docs}

    async def iter_users(self, batch_size: int = 1000) -> AsyncIterator[list[User]]:
        batch_size = max(1, batch_size)  # limit(0) would mean "everything"
        # Keyset on _id (the user id) rather than skip(): flat memory and cost per page.
        last: str | None = None
        while True:
            flt: dict[str, Any] = {} if last is None else {"_id": {"$gt": last}}
            docs = (
                await self._db["users"]
                .find(flt)
                .sort([("_id", ASCENDING)])
                .limit(batch_size)
                .to_list(None)
            )
            if not docs:
                return
            yield [_user(d) for d in docs]
            if len(docs) < batch_size:
                return
            last = docs[-1]["_id"]

    # --- devices ------------------------------------------------------------------

    async def register_device(self, device: Device) -> Device:
        devices = self._db["devices"]
        key = _pair_id(device.user_id, device.device_id)
        now = _dt(device.updated_at or self._clock.now())
        for attempt in range(_REGISTER_ATTEMPTS):
            # Step 1 frees the two partial unique indexes, step 2 takes them. Another
            # registration of the same id or token can slip in between; the index
            # then rejects our step 2 and we simply run both steps again.
            await devices.update_many(
                {
                    "_id": {"$ne": key},
                    "active": True,
                    "$or": [{"device_id": device.device_id}, {"push_token": device.push_token}],
                },
                {"$set": {"active": False, "deactivated_reason": REPLACED, "updated_at": now}},
            )
            try:
                doc = await devices.find_one_and_update(
                    {"_id": key},
                    {
                        "$set": {
                            "user_id": device.user_id,
                            "device_id": device.device_id,
                            "push_token": device.push_token,
                            "platform": device.platform,
                            "active": True,
                            "consecutive_failures": 0,
                            "deactivated_reason": None,
                            "updated_at": now,
                        },
                        "$setOnInsert": {"created_at": _opt_dt(device.created_at) or now},
                    },
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                if attempt == _REGISTER_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.01 * 2**attempt)
                continue
            return _device(doc)
        raise AssertionError("unreachable")  # pragma: no cover

    async def deactivate_device(self, user_id: str, device_id: str, reason: str) -> bool:
        result = await self._db["devices"].update_one(
            {"_id": _pair_id(user_id, device_id), "active": True},
            {"$set": self._deactivation(reason)},
        )
        return bool(result.modified_count)

    async def deactivate_token(self, push_token: str, reason: str) -> int:
        result = await self._db["devices"].update_many(
            {"push_token": push_token, "active": True}, {"$set": self._deactivation(reason)}
        )
        return int(result.modified_count)

    def _deactivation(self, reason: str) -> dict[str, Any]:
        return {"active": False, "deactivated_reason": reason, "updated_at": _dt(self._clock.now())}

    async def list_devices(self, user_id: str) -> list[Device]:
        docs = (
            await self._db["devices"]
            .find({"user_id": user_id})
            .sort([("device_id", ASCENDING)])
            .to_list(None)
        )
        return [_device(d) for d in docs]

    async def active_devices(self, user_ids: Sequence[str]) -> dict[str, list[Device]]:
        if not user_ids:
            return {}
        docs = (
            await self._db["devices"]
            .find({"user_id": {"$in": list(set(user_ids))}, "active": True})
            .sort([("user_id", ASCENDING), ("device_id", ASCENDING)])
            .to_list(None)
        )
        out: dict[str, list[Device]] = {}
        for d in docs:
            out.setdefault(d["user_id"], []).append(_device(d))
        return out

    async def record_device_outcome(
        self, push_token: str, ok: bool, max_failures: int, reason: str
    ) -> DeviceFailure:
        devices = self._db["devices"]
        active = {"push_token": push_token, "active": True}
        now = _dt(self._clock.now())
        if ok:
            # Only write when there is a streak to reset: success is the hot path.
            await devices.update_one(
                {**active, "consecutive_failures": {"$ne": 0}},
                {"$set": {"consecutive_failures": 0, "updated_at": now}},
            )
            return DeviceFailure(deactivated=False, consecutive_failures=0)
        # $inc is atomic, so concurrent failures each count; whoever reaches the
        # threshold deactivates, and the active:true filter lets only one of them win.
        doc = await devices.find_one_and_update(
            active,
            {"$inc": {"consecutive_failures": 1}, "$set": {"updated_at": now}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return DeviceFailure(deactivated=False, consecutive_failures=0)
        failures = int(doc["consecutive_failures"])
        if failures < max_failures:
            return DeviceFailure(deactivated=False, consecutive_failures=failures)
        result = await devices.update_one(
            {"_id": doc["_id"], "active": True}, {"$set": self._deactivation(reason)}
        )
        return DeviceFailure(deactivated=bool(result.modified_count), consecutive_failures=failures)

    # --- reminders ----------------------------------------------------------------

    async def upsert_reminder(self, reminder: Reminder) -> Reminder:
        now = self._clock.now()
        doc = await self._db["reminders"].find_one_and_update(
            {"_id": _pair_id(reminder.user_id, reminder.reminder_id)},
            {
                "$set": _reminder_fields(reminder, now),
                "$setOnInsert": {"created_at": _dt(reminder.created_at or now)},
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return _reminder(doc)

    async def get_reminder(self, user_id: str, reminder_id: str) -> Reminder | None:
        doc = await self._db["reminders"].find_one({"_id": _pair_id(user_id, reminder_id)})
        return None if doc is None else _reminder(doc)

    async def delete_reminder(self, user_id: str, reminder_id: str) -> bool:
        result = await self._db["reminders"].delete_one({"_id": _pair_id(user_id, reminder_id)})
        return bool(result.deleted_count)

    async def list_reminders(self, user_id: str) -> list[Reminder]:
        return (await self.reminders_for_users([user_id])).get(user_id, [])

    async def reminders_for_users(self, user_ids: Sequence[str]) -> dict[str, list[Reminder]]:
        if not user_ids:
            return {}
        docs = (
            await self._db["reminders"]
            .find({"user_id": {"$in": list(set(user_ids))}})
            .sort([("user_id", ASCENDING), ("reminder_id", ASCENDING)])
            .to_list(None)
        )
        out: dict[str, list[Reminder]] = {}
        for d in docs:
            out.setdefault(d["user_id"], []).append(_reminder(d))
        return out

    # --- preferences --------------------------------------------------------------
    # One document per (user, category): category names are free text, and a dotted
    # or $-prefixed name would be misread as a path inside a per-user subdocument.

    async def set_preferences(
        self, user_id: str, categories: Mapping[str, bool]
    ) -> dict[str, bool]:
        prefs = self._db["preferences"]
        for category, enabled in categories.items():
            await prefs.update_one(
                {"_id": f"{user_id}|{category}"},
                {"$set": {"user_id": user_id, "category": category, "enabled": bool(enabled)}},
                upsert=True,
            )
        return await self.get_preferences(user_id)

    async def get_preferences(self, user_id: str) -> dict[str, bool]:
        return (await self.preferences_for_users([user_id])).get(user_id, {})

    async def preferences_for_users(self, user_ids: Sequence[str]) -> dict[str, dict[str, bool]]:
        if not user_ids:
            return {}
        docs = (
            await self._db["preferences"]
            .find({"user_id": {"$in": list(set(user_ids))}})
            .sort([("user_id", ASCENDING), ("category", ASCENDING)])
            .to_list(None)
        )
        out: dict[str, dict[str, bool]] = {}
        for d in docs:
            out.setdefault(d["user_id"], {})[d["category"]] = bool(d["enabled"])
        return out

    # --- messages -----------------------------------------------------------------

    async def insert_messages(self, messages: Sequence[Message]) -> InsertResult:
        if not messages:
            return InsertResult(created=[], existing=0)
        now = self._clock.now()
        docs = [_message_doc(m, now) for m in messages]
        rejected: set[int] = set()
        try:
            # Unordered: one duplicate must not stop the rest of the batch, and the
            # server reports every rejected input by its index in this list.
            await self._db["messages"].insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            rejected = _only_duplicates(exc)
        created = [_message(d) for i, d in enumerate(docs) if i not in rejected]
        return InsertResult(created=created, existing=len(rejected))

    async def get_message(self, message_id: str) -> Message | None:
        doc = await self._db["messages"].find_one({"_id": message_id})
        return None if doc is None else _message(doc)

    async def get_messages(self, message_ids: Sequence[str]) -> list[Message]:
        if not message_ids:
            return []
        docs = (
            await self._db["messages"].find({"_id": {"$in": list(set(message_ids))}}).to_list(None)
        )
        by_id = {d["_id"]: d for d in docs}
        seen: set[str] = set()
        out: list[Message] = []
        for mid in message_ids:  # input order, each once
            if mid in by_id and mid not in seen:
                seen.add(mid)
                out.append(_message(by_id[mid]))
        return out

    async def find_by_live_key(self, live_key: str) -> Message | None:
        doc = await self._db["messages"].find_one({"live_key": live_key})
        return None if doc is None else _message(doc)

    async def claim(self, message_ids: Sequence[str], now: datetime) -> list[Message]:
        # One find_one_and_update per id rather than update_many + a claim token:
        # a single-document findAndModify is atomic and a *retryable write*, so a
        # network blip is retried by the driver exactly once and still tells us
        # whether *we* moved the message; a multi-document update is neither
        # retryable nor able to say which documents it changed.
        messages = self._db["messages"]
        claimed_at = _dt(now)
        out: list[Message] = []
        for mid in dict.fromkeys(message_ids):
            doc = await messages.find_one_and_update(
                {"_id": mid, "status": MessageStatus.PENDING.value},
                {
                    "$set": {
                        "status": MessageStatus.SENDING.value,
                        "claimed_at": claimed_at,
                        "updated_at": claimed_at,
                    },
                    "$inc": {"attempts": 1},
                },
                return_document=ReturnDocument.AFTER,
            )
            if doc is not None:
                out.append(_message(doc))
        return out

    async def transition(
        self,
        message_id: str,
        to: MessageStatus,
        now: datetime,
        *,
        expect: Sequence[MessageStatus],
        reason: str | None = None,
        ticket_id: str | None = None,
        last_error: str | None = None,
        scheduled_at: datetime | None = None,
        release_live_key: bool = False,
    ) -> bool:
        if not expect:
            return False
        query, update = _transition_update(
            StatusChange(
                message_id, to, reason, ticket_id, last_error, scheduled_at, release_live_key
            ),
            now,
            expect,
        )
        try:
            result = await self._db["messages"].update_one(query, update)
        except DuplicateKeyError:
            # Back to pending (or re-timed) onto a (user, device, category, label,
            # instant) slot another pending message holds: the update did not
            # happen, and that sibling carries the same notification.
            return False
        return bool(result.modified_count)

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        if not expect or not changes:
            return 0
        ops = [UpdateOne(*_transition_update(ch, now, expect)) for ch in changes]
        try:
            result = await self._db["messages"].bulk_write(ops, ordered=False)
        except BulkWriteError as e:
            # Unordered: every other update still ran; a duplicate-key one did not
            # happen (see transition). Anything else is a real failure.
            if any(err.get("code") != 11000 for err in e.details.get("writeErrors", [])):
                raise
            return int(e.details.get("nModified", 0))
        return int(result.modified_count)

    async def cancel_pending(
        self,
        user_id: str,
        after: datetime,
        now: datetime,
        reason: str,
        reminder_id: str | None = None,
    ) -> int:
        flt: dict[str, Any] = {
            "user_id": user_id,
            "status": MessageStatus.PENDING.value,
            "scheduled_at": {"$gte": _dt(after)},
        }
        # One-off messages (no reminder) name an absolute instant: never re-planned.
        flt["reminder_id"] = reminder_id if reminder_id is not None else {"$ne": None}
        # Each document is updated atomically and the status filter is re-checked
        # per document, so a message claimed meanwhile is left alone.
        result = await self._db["messages"].update_many(
            flt,
            {
                "$set": {
                    "status": MessageStatus.CANCELLED.value,
                    "status_reason": reason,
                    "updated_at": _dt(now),
                },
                "$unset": {"live_key": ""},
            },
        )
        return int(result.modified_count)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        if query.limit < 1:
            raise DomainError("limit", "must be at least 1")
        flt: dict[str, Any] = {"user_id": query.user_id}
        if query.statuses:
            flt["status"] = {"$in": sorted(s.value for s in query.statuses)}
        window: dict[str, Any] = {}
        if query.scheduled_from is not None:
            window["$gte"] = _dt(query.scheduled_from)
        if query.scheduled_to is not None:
            window["$lt"] = _dt(query.scheduled_to)
        if window:
            flt["scheduled_at"] = window
        if query.cursor is not None:
            at, mid = _decode_cursor(query.cursor)
            flt["$or"] = [
                {"scheduled_at": {"$lt": at}},
                {"scheduled_at": at, "_id": {"$lt": mid}},
            ]
        limit = query.limit
        docs = (
            await self._db["messages"]
            .find(flt)
            .sort([("scheduled_at", DESCENDING), ("_id", DESCENDING)])
            .limit(limit + 1)  # one extra tells whether another page exists
            .to_list(None)
        )
        items = [_message(d) for d in docs[:limit]]
        more = len(docs) > limit
        cursor = _encode_cursor(items[-1].scheduled_at, items[-1].id) if more and items else None
        return MessagePage(items=items, next_cursor=cursor)

    async def due_pending(self, before: datetime, limit: int) -> list[Message]:
        if limit <= 0:  # limit(0) means *no* limit to MongoDB
            return []
        docs = (
            await self._db["messages"]
            .find({"status": MessageStatus.PENDING.value, "scheduled_at": {"$lt": _dt(before)}})
            .sort([("scheduled_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [_message(d) for d in docs]

    async def iter_pending(self, batch_size: int = 1000) -> AsyncIterator[list[Message]]:
        batch_size = max(1, batch_size)  # limit(0) would mean "everything"
        pending = MessageStatus.PENDING.value
        last: tuple[datetime, str] | None = None
        while True:
            flt: dict[str, Any] = {"status": pending}
            if last is not None:
                at, mid = last
                flt["$or"] = [
                    {"scheduled_at": {"$gt": at}},
                    {"scheduled_at": at, "_id": {"$gt": mid}},
                ]
            docs = (
                await self._db["messages"]
                .find(flt)
                .sort([("scheduled_at", ASCENDING), ("_id", ASCENDING)])
                .limit(batch_size)
                .to_list(None)
            )
            if not docs:
                return
            yield [_message(d) for d in docs]
            if len(docs) < batch_size:
                return
            last = (docs[-1]["scheduled_at"], docs[-1]["_id"])

    async def stuck_sending(self, claimed_before: datetime, limit: int) -> list[Message]:
        if limit <= 0:  # limit(0) means *no* limit to MongoDB
            return []
        docs = (
            await self._db["messages"]
            .find(
                {
                    "status": MessageStatus.SENDING.value,
                    "claimed_at": {"$lt": _dt(claimed_before)},
                }
            )
            .sort([("claimed_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [_message(d) for d in docs]

    async def count_messages(self) -> Counts:
        cursor = await self._db["messages"].aggregate(
            [{"$group": {"_id": {"s": "$status", "c": "$category"}, "n": {"$sum": 1}}}]
        )
        rows = await cursor.to_list(None)
        return Counts(
            by_status_category={(r["_id"]["s"], r["_id"]["c"]): int(r["n"]) for r in rows}
        )

    async def dead_letters(self, limit: int, before_id: str | None = None) -> list[Message]:
        if limit <= 0:  # limit(0) means *no* limit to MongoDB
            return []
        failed = MessageStatus.FAILED.value
        flt: dict[str, Any] = {"status": failed}
        if before_id is not None:
            anchor = await self._db["messages"].find_one({"_id": before_id})
            if anchor is None:
                return []
            at = anchor.get("updated_at")
            flt["$or"] = [
                {"updated_at": {"$lt": at}},
                {"updated_at": at, "_id": {"$lt": before_id}},
            ]
        docs = (
            await self._db["messages"]
            .find(flt)
            .sort([("updated_at", DESCENDING), ("_id", DESCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [_message(d) for d in docs]

    # --- tickets ------------------------------------------------------------------

    async def add_tickets(self, tickets: Sequence[Ticket]) -> None:
        if not tickets:
            return
        try:
            # A replayed batch (consumer retried after a crash) must not fail the
            # tickets that are new, nor overwrite receipts of those already stored.
            await self._db["tickets"].insert_many([_ticket_doc(t) for t in tickets], ordered=False)
        except BulkWriteError as exc:
            _only_duplicates(exc)

    async def tickets_awaiting_receipt(self, sent_before: datetime, limit: int) -> list[Ticket]:
        if limit <= 0:  # limit(0) means *no* limit to MongoDB
            return []
        docs = (
            await self._db["tickets"]
            .find({"receipt_status": None, "sent_at": {"$lt": _dt(sent_before)}})
            .sort([("sent_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [_ticket(d) for d in docs]

    async def record_receipt(
        self, ticket_id: str, status: str, error: str | None, now: datetime
    ) -> bool:
        result = await self._db["tickets"].update_one(
            {"_id": ticket_id, "receipt_status": None},
            {"$set": {"receipt_status": status, "receipt_error": error, "checked_at": _dt(now)}},
        )
        return bool(result.modified_count)

    async def tickets_for_message(self, message_id: str) -> list[Ticket]:
        docs = (
            await self._db["tickets"]
            .find({"message_id": message_id})
            .sort([("sent_at", ASCENDING), ("_id", ASCENDING)])
            .to_list(None)
        )
        return [_ticket(d) for d in docs]


def _transition_update(
    change: StatusChange, now: datetime, expect: Sequence[MessageStatus]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter and update of one conditional status change."""
    fields: dict[str, Any] = {"status": change.to.value, "updated_at": _dt(now)}
    # Optional fields are only written when given, so a later transition
    # does not erase what an earlier one recorded.
    if change.reason is not None:
        fields["status_reason"] = change.reason
    if change.ticket_id is not None:
        fields["ticket_id"] = change.ticket_id
    if change.last_error is not None:
        fields["last_error"] = change.last_error
    if change.scheduled_at is not None:
        fields["scheduled_at"] = _dt(change.scheduled_at)
    update: dict[str, Any] = {"$set": fields}
    if change.release_live_key:
        update["$unset"] = {"live_key": ""}
    return {"_id": change.message_id, "status": {"$in": [s.value for s in expect]}}, update
