"""Use cases behind the user-facing API: users, devices, reminders, preferences, one-offs.

No HTTP here: inputs are checked with the domain's parsers (errors name the offending
field). Whatever changes planning re-plans through the creator, so the rules that cancel
superseded messages live in exactly one place.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from tepat.clock import Clock
from tepat.domain import preferences
from tepat.domain.categories import Categories
from tepat.domain.errors import DomainError, PushTokenInUse
from tepat.domain.models import Device, Message, QuietHours, Reminder, User
from tepat.domain.planning import plan_oneoff, request_fingerprint
from tepat.domain.validation import (
    check_identifier,
    check_push_kind,
    check_push_token,
    parse_days,
    parse_hhmm,
)
from tepat.domain.zones import load_zone
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.repositories.messages import MessagePage, MessageQuery, MessageRepository
from tepat.ports.repositories.preferences import PreferenceRepository
from tepat.ports.repositories.reminders import ReminderRepository
from tepat.ports.repositories.users import UserRepository
from tepat.services.outbox import Outbox

# Expo refuses notifications over 4096 bytes; keep room for what the dispatcher adds.
MAX_PAYLOAD_BYTES: Final = 3584
# A one-off further ahead than this is almost certainly a mistake (or a unit error).
MAX_SEND_AHEAD: Final = timedelta(days=366)


class AccountRecords(
    UserRepository,
    DeviceRepository,
    ReminderRepository,
    PreferenceRepository,
    MessageRepository,
    Protocol,
): ...


class Planner(Protocol):
    """Re-plans a user after a change (the creator)."""

    @property
    def horizon(self) -> timedelta: ...

    async def replan_user(self, user_id: str) -> object: ...


class HasUsers(Protocol):
    @property
    def store(self) -> UserRepository: ...


class AccountParts(Protocol):
    """What the account use cases are given; the runtime has these and more."""

    @property
    def store(self) -> AccountRecords: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def categories(self) -> Categories: ...

    @property
    def creator(self) -> Planner: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def push_kinds(self) -> Collection[str]:
        """The device kinds a push provider is configured for (nothing sends to others)."""
        ...


class NotFound(LookupError):
    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident!r} not found")


class IdempotencyConflict(Exception):
    """An idempotency key reused with a different request, or a slot already taken."""


class FieldConflict(Exception):
    """A valid request the stored state refuses (a quota reached, a token held by another
    user), naming the field that would have to change: the API's 409."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _Keep(enum.Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP  # "leave this field as it is" in partial updates


async def get_user(rt: HasUsers, user_id: str) -> User:
    user = await rt.store.get_user(check_identifier(user_id, "user_id"))
    if user is None:
        raise NotFound("user", user_id)
    return user


async def put_user(
    rt: AccountParts,
    user_id: str,
    *,
    timezone: str,
    locale: str | _Keep = KEEP,
    quiet_hours: QuietHours | _Keep | None = KEEP,
    enabled: bool | _Keep = KEEP,
) -> tuple[User, bool]:
    """Create or update a user; returns ``(user, created)``.

    Fields passed as :data:`KEEP` keep their stored value (defaults on create).
    A change of zone or quiet hours re-plans (a new plan version): the pending
    messages it changes end ``cancelled`` and are replaced; re-enabling re-plans too.
    Disabling cancels nothing: consumers skip a disabled user's messages at
    send time (``user_disabled``).
    """
    check_identifier(user_id, "user_id")
    load_zone(timezone, "timezone")
    now = rt.clock.now()
    old = await rt.store.get_user(user_id)
    user = merged_user(old, user_id, timezone, locale, quiet_hours, enabled, now)
    if old is not None and replace(user, updated_at=old.updated_at) == old:
        return old, False  # a repeated PUT: no write, nothing to re-plan
    stored, inserted = await rt.store.upsert_user(user)
    # A user new to this request has nothing planned, unless a concurrent request
    # created it first and a reminder was planned under that one's zone. The write that
    # inserted it need not look: a reminder needs its user first, so its re-plan comes
    # after this insert and reads this zone.
    if (
        plan_changed(old, user)
        if old is not None
        else not inserted and bool(await rt.store.list_reminders(user_id))
    ):
        # A new plan version, taken atomically: an overlapping PUT never reuses its keys.
        await rt.creator.replan_user(user_id)
        again = await rt.store.get_user(user_id)  # with the version the re-plan took
        assert again is not None
        stored = again
    return stored, inserted  # of two concurrent creates, the one whose write inserted


def merged_user(
    old: User | None,
    user_id: str,
    timezone: str,
    locale: str | _Keep,
    quiet_hours: QuietHours | _Keep | None,
    enabled: bool | _Keep,
    now: datetime,
) -> User:
    """``old`` (or a new user) with the given fields; :data:`KEEP` keeps a stored one."""
    base = old or User(user_id=user_id, timezone=timezone, created_at=now)
    return replace(
        base,
        timezone=timezone,
        locale=base.locale if locale is KEEP else locale,
        quiet_hours=base.quiet_hours if quiet_hours is KEEP else quiet_hours,
        enabled=base.enabled if enabled is KEEP else enabled,
        updated_at=now,
    )


def plan_changed(old: User, new: User) -> bool:
    """Whether planning sees the change of a stored user: it must re-plan."""
    return (old.timezone, old.quiet_hours) != (new.timezone, new.quiet_hours) or (
        new.enabled and not old.enabled  # re-enabled: plan what was skipped meanwhile
    )


async def register_device(
    rt: AccountParts,
    user_id: str,
    device_id: str,
    push_token: str,
    platform: str | None = None,
    *,
    kind: str = "expo",
    fallback: tuple[str, str] | None = None,
    from_other_users: bool = True,
    max_devices: int | None = None,
    check_endpoint: Callable[[str], Awaitable[None]] | None = None,
) -> Device:
    """Register or rotate a device's token (the store keeps one active binding each).

    ``check_endpoint`` (I/O) refuses a Web Push endpoint Tepat may not connect to.
    ``from_other_users=False`` (an end user's own token) refuses a token active on another
    user's device: tokens are not secrets, so a user must not pull another's phone onto
    their account; the backend may (a phone that changed hands). So is a new device past
    ``max_devices`` active ones: both are :class:`FieldConflict`.
    """
    await get_user(rt, user_id)
    now = rt.clock.now()
    device = checked_device(
        user_id, device_id, push_token, platform, now, kind, rt.push_kinds, fallback
    )
    tokens = [("push_token", kind, push_token)]
    if fallback is not None:
        tokens.append(("fallback.token", *fallback))
    if check_endpoint is not None:
        for field, its_kind, token in tokens:
            if its_kind == "webpush":
                try:
                    await check_endpoint(json.loads(token)["endpoint"])
                except DomainError as e:
                    raise DomainError(field, f"endpoint: {e.message}") from None
    if refused := await _past_device_quota(rt, user_id, device_id, max_devices, ours=False):
        raise refused
    try:
        device, activated = await rt.store.register_device(
            device, from_other_users=from_other_users
        )
    except PushTokenInUse:
        raise FieldConflict(
            "push_token", "active on another user's device; only the backend may move it"
        ) from None
    # As for reminders: the call that activated it undoes its own write past the cap.
    if activated and (
        refused := await _past_device_quota(rt, user_id, device_id, max_devices, ours=True)
    ):
        await rt.store.deactivate_device(user_id, device_id, "over_quota")
        raise refused
    return device


def checked_device(
    user_id: str,
    device_id: str,
    push_token: str,
    platform: str | None,
    now: datetime,
    kind: str,
    push_kinds: Collection[str],
    fallback: tuple[str, str] | None = None,
) -> Device:
    """A ``kind`` device whose kind is in ``push_kinds`` and whose token is shaped for it;
    its ``fallback`` (kind, token) alike."""
    check_identifier(device_id, "device_id")
    check_push_token(push_token, check_push_kind(kind, push_kinds))
    fallback_kind = fallback_token = None
    if fallback is not None:
        fallback_kind = check_push_kind(fallback[0], push_kinds, "fallback.kind")
        fallback_token = check_push_token(fallback[1], fallback_kind, "fallback.token")
    return Device(
        user_id,
        device_id,
        push_token,
        platform,
        created_at=now,
        updated_at=now,
        kind=kind,
        fallback_kind=fallback_kind,
        fallback_token=fallback_token,
    )


async def _past_device_quota(
    rt: AccountParts, user_id: str, device_id: str, max_devices: int | None, *, ours: bool
) -> FieldConflict | None:
    """The refusal of ``device_id`` if it is new (not active, or activated by this call:
    ``ours``) and the user's other active devices already reach ``max_devices``."""
    if max_devices is None:
        return None
    active = {d.device_id for d in await rt.store.list_devices(user_id) if d.active}
    if not (ours or device_id not in active):
        return None
    return _quota_refusal(len(active - {device_id}), max_devices, "device_id", "active devices")


async def deactivate_device(rt: AccountParts, user_id: str, device_id: str) -> None:
    """Deactivate a device; repeating it is harmless, an unknown device is NotFound."""
    await get_user(rt, user_id)
    check_identifier(device_id, "device_id")
    if await rt.store.deactivate_device(user_id, device_id, "unregistered"):
        return
    if not any(d.device_id == device_id for d in await rt.store.list_devices(user_id)):
        raise NotFound("device", device_id)


async def list_devices(rt: AccountParts, user_id: str) -> list[Device]:
    await get_user(rt, user_id)
    return await rt.store.list_devices(user_id)


async def put_reminder(
    rt: AccountParts,
    user_id: str,
    reminder_id: str,
    *,
    category: str,
    local_time: str,
    title: str,
    body: str,
    label: str = "",
    days: Sequence[str] | None = None,
    data: Mapping[str, Any] | None = None,
    enabled: bool = True,
    max_reminders: int | None = None,
) -> tuple[Reminder, bool]:
    """Create or replace a reminder and re-plan; ``(reminder, created)``, ``created`` only
    for the request whose write inserted it. One past ``max_reminders``: FieldConflict."""
    await get_user(rt, user_id)
    fields = ReminderItem(
        reminder_id, category, local_time, title, body, label, days, data, enabled
    )
    new = checked_reminder(rt.categories, user_id, fields, rt.clock.now())
    if max_reminders is None:
        old = await rt.store.get_reminder(user_id, reminder_id)
    else:  # one read for both: this reminder as stored, and how many the user has
        theirs = await rt.store.list_reminders(user_id)
        old = next((r for r in theirs if r.reminder_id == reminder_id), None)
        if old is None and (refused := _quota_refusal(len(theirs), max_reminders)):
            raise refused
    reminder = revised_reminder(old, new)
    if reminder is None:
        assert old is not None
        return old, False  # nothing that planning sees changed: keep the pending messages
    reminder, inserted = await rt.store.upsert_reminder(reminder)
    # Concurrent creates all pass the check above, so each that inserted counts again and
    # undoes its own insert past the cap: a race may refuse one that fits, never admit more.
    refused = None
    if inserted and max_reminders is not None:
        others = len(await rt.store.list_reminders(user_id)) - 1
        refused = _quota_refusal(others, max_reminders)
    if refused:
        await rt.store.delete_reminder(user_id, reminder_id)
    # After an undo too: it cancels what a plan run may have made of the undone reminder.
    await rt.creator.replan_user(user_id)
    if refused:
        raise refused
    return reminder, inserted


def _quota_refusal(
    others: int, cap: int, field: str = "reminder_id", what: str = "reminders"
) -> FieldConflict | None:
    """The refusal of one more if the user's ``others`` already reach the cap."""
    if others < cap:
        return None
    setting = (
        "TEPAT_MAX_DEVICES_PER_USER" if field == "device_id" else "TEPAT_MAX_REMINDERS_PER_USER"
    )
    return FieldConflict(
        field, f"the user has reached {cap} {what}, the most allowed ({setting}): delete one first"
    )


@dataclass(frozen=True, slots=True)
class ReminderItem:
    """A reminder as a request gives it."""

    reminder_id: str
    category: str
    local_time: str
    title: str
    body: str
    label: str = ""
    days: Sequence[str] | None = None
    data: Mapping[str, Any] | None = None
    enabled: bool = True


def checked_reminder(
    categories: Categories, user_id: str, r: ReminderItem, now: datetime
) -> Reminder:
    """Every field checked (a DomainError names the first bad one), as created ``now``."""
    check_identifier(r.reminder_id, "reminder_id")
    categories.get(r.category, "category")
    payload = check_payload(r.title, r.body, r.data)
    return Reminder(
        user_id=user_id,
        reminder_id=r.reminder_id,
        category=r.category,
        local_time=parse_hhmm(r.local_time, "local_time"),
        title=r.title,
        body=r.body,
        label=r.label,
        days=parse_days(r.days, "days"),
        data=payload,
        enabled=r.enabled,
        created_at=now,
        updated_at=now,
    )


def revised_reminder(old: Reminder | None, new: Reminder) -> Reminder | None:
    """What to write for ``new`` over the stored ``old``: a new version, or None when
    nothing planning sees changed (its pending messages stay)."""
    if old is None:
        return new
    if _planned_fields(old) == _planned_fields(new):
        return None
    return replace(new, version=old.version + 1, created_at=old.created_at)


def _planned_fields(r: Reminder) -> tuple[object, ...]:
    return (r.category, r.local_time, r.title, r.body, r.label, r.days, r.data, r.enabled)


async def delete_reminder(rt: AccountParts, user_id: str, reminder_id: str) -> None:
    """Delete a reminder and cancel its pending messages."""
    await get_user(rt, user_id)
    check_identifier(reminder_id, "reminder_id")
    if not await rt.store.delete_reminder(user_id, reminder_id):
        raise NotFound("reminder", reminder_id)
    await rt.creator.replan_user(user_id)


async def list_reminders(rt: AccountParts, user_id: str) -> list[Reminder]:
    await get_user(rt, user_id)
    return await rt.store.list_reminders(user_id)


async def set_preferences(
    rt: AccountParts, user_id: str, categories: Mapping[str, bool]
) -> dict[str, bool]:
    """Merge opt-ins/outs, per category (``"meal"``: every channel) or per category and
    channel (``"meal.email"``, see :mod:`tepat.domain.preferences`); returns every
    configured category (opted in unless stored otherwise) and the channel keys set."""
    await get_user(rt, user_id)
    names = rt.categories.names
    for key in categories:
        preferences.check_key(key, names, f"categories.{key}")
    stored = await rt.store.set_preferences(user_id, dict(categories))
    return preferences.view(stored, names)


async def get_preferences(rt: AccountParts, user_id: str) -> dict[str, bool]:
    await get_user(rt, user_id)
    return preferences.view(await rt.store.get_preferences(user_id), rt.categories.names)


async def list_messages(rt: AccountParts, query: MessageQuery) -> MessagePage:
    await get_user(rt, query.user_id)
    if query.scheduled_from and query.scheduled_to and query.scheduled_to < query.scheduled_from:
        raise DomainError("to", "must not be before 'from'")
    try:
        return await rt.store.list_messages(query)
    except DomainError:
        raise
    except ValueError:
        if query.cursor is None:
            raise
        raise DomainError("cursor", "not a cursor this API returned") from None


async def create_oneoff(
    rt: AccountParts,
    user_id: str,
    idempotency_key: str,
    category: str,
    title: str,
    body: str,
    data: Mapping[str, Any] | None = None,
    send_at: datetime | None = None,
) -> tuple[Message, bool]:
    """A one-off message now or at ``send_at``; returns ``(message, created)``.

    The idempotency key names the intent; the unique index on the live key decides which
    of concurrent requests creates it. A repeat with the same request returns the
    existing message; the same key with a different request is a conflict.
    """
    user = await get_user(rt, user_id)
    check_identifier(idempotency_key, "idempotency_key")
    policy = rt.categories.get(category, "category")
    payload = check_payload(title, body, data)
    now = rt.clock.now()
    send_at_utc = check_send_at(send_at, now)
    request_hash = request_fingerprint(
        {
            "category": category,
            "title": title,
            "body": body,
            "data": payload,
            "send_at": send_at_utc.isoformat() if send_at_utc else None,
        }
    )
    msg = plan_oneoff(
        user, policy, idempotency_key, title, body, payload, send_at_utc, now, request_hash
    )
    result = await rt.store.insert_messages([msg])
    if result.created:
        # Stored with its outbox mark: a broker failure is the publisher loop's, not the
        # client's.
        await rt.outbox.flush_soon()
        return result.created[0], True
    assert msg.live_key is not None
    existing = await rt.store.find_by_live_key(msg.live_key) or await rt.store.get_message(msg.id)
    if existing is None:
        # A one-off's slot is its own live key, so only a vanished intent gets here.
        raise IdempotencyConflict(
            f"idempotency_key {idempotency_key!r} was already used and cannot be reused"
        )
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(
            f"idempotency_key {idempotency_key!r} was already used with a different request"
        )
    return existing, False


def check_send_at(send_at: datetime | None, now: datetime) -> datetime | None:
    if send_at is None:
        return None
    if send_at.tzinfo is None or send_at.utcoffset() is None:
        raise DomainError("send_at", "expected an ISO 8601 instant with a UTC offset")
    try:
        utc = send_at.astimezone(UTC)
    except OverflowError:
        raise DomainError("send_at", "out of range") from None
    if utc - now > MAX_SEND_AHEAD:
        raise DomainError("send_at", f"must be within {MAX_SEND_AHEAD.days} days from now")
    return utc


# json.dumps(..., ensure_ascii=False, allow_nan=False), built once rather than per call.
_PAYLOAD_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def check_payload(title: str, body: str, data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The notification must be JSON and fit Expo's payload limit; returns ``data`` as a dict."""
    payload = dict(data or {})
    # One encoding for the usual valid notification (a bulk import checks thousands); the
    # parts are encoded one by one only to name the field at fault.
    try:
        size = len(
            _PAYLOAD_ENCODER.encode({"title": title, "body": body, "data": payload}).encode()
        )
    except (ValueError, TypeError, RecursionError):
        for field, value in (("title", title), ("body", body), ("data", payload)):
            try:
                _PAYLOAD_ENCODER.encode(value).encode()
            except (ValueError, TypeError, RecursionError):
                raise DomainError(
                    field, "must be valid JSON text (no NaN, no lone surrogates)"
                ) from None
        raise
    if size > MAX_PAYLOAD_BYTES:
        field = "data" if payload else "body"
        raise DomainError(
            field, f"notification too large: {size} bytes encoded (at most {MAX_PAYLOAD_BYTES})"
        )
    return payload
