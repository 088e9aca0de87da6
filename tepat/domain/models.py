"""The things Tepat keeps: users, devices, reminders, preferences and messages.

Plain frozen dataclasses: no I/O and no framework. Instants are timezone-aware
UTC ``datetime``; local dates and times are naive ``date`` / ``time`` that only
mean something together with the user's zone.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from typing import Any

WEEKDAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class MessageStatus(enum.StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    DELIVERED = "delivered"
    FAILED = "failed"
    SKIPPED = "skipped"
    MISSED = "missed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


# Every status change a message may make; the store adapters refuse any other like a
# lost compare-and-set, keeping only the statuses of a caller's ``expect`` this table
# allows (``allowed_sources``). Who makes each change:
#
#   pending  -> sending    a consumer's claim
#   pending  -> cancelled  a re-plan drops a message it no longer intends
#   pending  -> sent, delivered
#                          a late answer or a delivery callback about a message already
#                          released for a retry: the truth wins
#   pending  -> failed, skipped, missed
#                          closed before any claim (no product path today; the store's
#                          contract relies on it)
#   sending  -> sent, delivered, failed, skipped, missed
#                          the consumer records the answer or its send-time checks
#   sending  -> pending    a retryable failure, or the sweeper re-driving an expired
#                          lease: the one step back
#   sent     -> delivered, failed
#                          push receipts, e-mail events, Twilio status callbacks
#
# Terminal statuses never change again: a repeated or older provider event does nothing.
ALLOWED_TRANSITIONS: dict[MessageStatus, frozenset[MessageStatus]] = {
    MessageStatus(src): frozenset(MessageStatus(dst) for dst in targets.split())
    for src, targets in {
        "pending": "sending cancelled sent delivered failed skipped missed",
        "sending": "sent delivered failed skipped missed pending",
        "sent": "delivered failed",
        "delivered": "",
        "failed": "",
        "skipped": "",
        "missed": "",
        "cancelled": "",
    }.items()
}
# A status the table lets go nowhere.
TERMINAL_STATUSES = frozenset(s for s, targets in ALLOWED_TRANSITIONS.items() if not targets)


def can_transition(src: MessageStatus, dst: MessageStatus) -> bool:
    return dst in ALLOWED_TRANSITIONS[src]


def allowed_sources(
    to: MessageStatus, expect: Iterable[MessageStatus]
) -> tuple[MessageStatus, ...]:
    """The statuses of ``expect`` (in its order, each once) from which the table lets a
    message move to ``to``: what a store's conditional update may match. Empty: the
    change is refused whatever the message's status."""
    return tuple(s for s in dict.fromkeys(expect) if can_transition(s, to))


# What a consumer's claim (``MessageRepository.claim``) takes to ``sending``: a message that
# waits, as the table allows.
CLAIMABLE: tuple[MessageStatus, ...] = allowed_sources(
    MessageStatus.SENDING, (MessageStatus.PENDING,)
)


class SkipReason(enum.StrEnum):
    OPTED_OUT = "opted_out"
    QUIET_HOURS = "quiet_hours"
    NO_ACTIVE_DEVICE = "no_active_device"
    SUPERSEDED = "superseded"
    USER_DISABLED = "user_disabled"
    USER_DELETED = "user_deleted"
    NO_CONTACT = "no_contact"  # e-mail / SMS: no address or number (or not verified)
    SUPPRESSED = "suppressed"  # e-mail / SMS: the provider said the target is dead


@dataclass(frozen=True, slots=True)
class QuietHours:
    """Local ``[start, end)``; wraps midnight when ``end <= start``."""

    start: time
    end: time


@dataclass(frozen=True, slots=True)
class User:
    user_id: str
    timezone: str
    locale: str = "en"
    quiet_hours: QuietHours | None = None
    enabled: bool = True
    # Bumped atomically by the store at every re-plan of this user
    # (``Store.start_replan``); never repeats, so neither do dedup keys.
    plan_version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Device:
    user_id: str
    device_id: str
    push_token: str
    platform: str | None = None
    active: bool = True
    consecutive_failures: int = 0
    deactivated_reason: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # The push service the token is for (``PUSH_KINDS``): that service's provider sends.
    kind: str = "expo"
    # A second token of the same phone for another kind's service (an Expo app's
    # FCM or APNs token), sent to only when the primary's provider is down.
    fallback_kind: str | None = None
    fallback_token: str | None = None


# Expo's push service first: every device registered before kinds existed is one.
PUSH_KINDS: tuple[str, ...] = ("expo", "fcm", "apns", "webpush")


@dataclass(frozen=True, slots=True)
class Reminder:
    user_id: str
    reminder_id: str
    category: str
    local_time: time
    title: str
    body: str
    label: str = ""
    # Lower-case three-letter names (``WEEKDAYS``); all seven when not restricted.
    days: tuple[str, ...] = WEEKDAYS
    data: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    # Bumped when a change to the reminder must re-plan its pending messages.
    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def fires_on(self, day: date) -> bool:
        return WEEKDAYS[day.weekday()] in self.days


@dataclass(frozen=True, slots=True)
class Message:
    """One intended notification.

    ``dedup_key`` names the intent and plan version, unique forever; ``live_key`` the
    intent alone (user, reminder, local date), unique among messages not cancelled, so
    a local date is sent at most once even across re-plans.

    Three instants: ``nominal_at``, what the intent asked for, never moves;
    ``scheduled_at``, where quiet hours put it (lateness counts from it); ``due_at``,
    when it is next dispatched (only a retry or re-drive moves it).
    """

    id: str
    user_id: str
    category: str
    label: str
    title: str
    body: str
    scheduled_at: datetime
    timezone: str
    dedup_key: str
    live_key: str | None
    device_id: str | None = None  # None: all of the user's active devices
    reminder_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    local_date: date | None = None
    local_time: time | None = None
    data: dict[str, Any] = field(default_factory=dict)
    status: MessageStatus = MessageStatus.PENDING
    status_reason: str | None = None
    attempts: int = 0
    ticket_id: str | None = None
    last_error: str | None = None
    plan_version: int = 1
    claimed_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # Defaults derive from ``scheduled_at`` (``nominal``, ``due``, ``slot``).
    nominal_at: datetime | None = None
    due_at: datetime | None = None
    # The pending-slot identity (unique among pending messages): see ``slot_key_for``.
    slot_key: str | None = None
    # tepat.domain.routing.Channel's values, and "webhook" for status events out.
    channel: str = "push"
    # The channel's rendered parts besides title and body (html, link), pinned.
    content: dict[str, Any] = field(default_factory=dict)
    # An event's priority ("critical": the channel's critical queue, never behind bulk).
    priority: str | None = None
    # The W3C traceparent of what made it (an API request, a plan run), stamped by the
    # store when tracing is on (tepat/tracing.py): its send and receipt join that trace.
    trace_parent: str | None = None

    @property
    def nominal(self) -> datetime:
        return self.nominal_at or self.scheduled_at

    @property
    def due(self) -> datetime:
        return self.due_at or self.scheduled_at

    @property
    def slot(self) -> str:
        return self.slot_key or slot_key_for(self)


def slot_key_for(m: Message) -> str:
    """The pending slot a message takes: a one-off's is its own intent (live key); a
    reminder's is (user, device, category, label, *nominal* instant), so two reminders
    with one label at one time are one notification, and deferring several messages to
    the same end of quiet hours collides with nothing.
    """
    if m.reminder_id is None and m.live_key is not None:
        return m.live_key
    nominal = (m.nominal_at or m.scheduled_at).astimezone(UTC)
    # Milliseconds: the precision every store keeps (MongoDB's dates).
    stamp = nominal.isoformat(timespec="milliseconds")
    return f"s|{m.user_id}|{m.device_id or ''}|{m.category}|{m.label}|{stamp}"


def message_id_for(dedup_key: str) -> str:
    """Deterministic id, so planning the same intent twice names the same message."""
    return hashlib.blake2b(dedup_key.encode(), digest_size=12).hexdigest()


def reminder_live_key(user_id: str, reminder_id: str, local_date: date) -> str:
    return f"r|{user_id}|{reminder_id}|{local_date.isoformat()}"


def oneoff_live_key(user_id: str, idempotency_key: str) -> str:
    return f"o|{user_id}|{idempotency_key}"


@dataclass(frozen=True, slots=True)
class Ticket:
    """One provider ticket: the outcome of sending a message to one device."""

    ticket_id: str
    message_id: str
    user_id: str
    device_id: str
    push_token: str
    sent_at: datetime
    receipt_status: str | None = None  # None until polled; "ok" | "error"
    receipt_error: str | None = None
    checked_at: datetime | None = None
