"""Business events (issue 12, part 1): an event, its recipients and its fan-out (pure).

An event (``order.paid`` for user 42, or a campaign to every user) is accepted once per
``event_id`` and fanned out in pages of recipients, in user-id order
(``tepat/services/events.py``); its cursor, the last recipient id done, lets a crash
resume after the last page recorded.

Every (event, user, channel) has one key, ``e|event|user|channel``
(:func:`event_message_key`): the message's dedup, live and slot key, so the unique
indexes make each at most once whatever runs twice. The keys of one event share a prefix
(:func:`event_key_prefix`): a range of the dedup index counts the event's messages.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, time, timedelta
from typing import Any

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import Message, MessageStatus, User
from tepat.domain.planning import Placement, _whole_ms_up, intent_message, place
from tepat.domain.routing import Channel, Priority
from tepat.domain.templates import TemplateFailure
from tepat.domain.timerules import local_to_utc, utc_to_local
from tepat.domain.zones import load_zone

#: A listed campaign's size limit (the issue's 100k ids); beyond it, use ``all_users``.
MAX_USER_IDS = 100_000
#: An event's ``data`` (the templates' variables), as compact JSON.
MAX_DATA_BYTES = 16 * 1024


class EventState(enum.StrEnum):
    # Stored but its recipients not all yet (MongoDB writes them after the event); a
    # repeat of the request completes it.
    ACCEPTING = "accepting"
    FANNING_OUT = "fanning_out"
    DONE = "done"


class Outcome(enum.StrEnum):
    """What fan-out did for one (recipient, channel) that is not a push message (those
    are counted from the messages themselves)."""

    DELIVERED = "delivered"  # an inbox item stored (or already there)
    RENDER_ERROR = TemplateFailure.RENDER_ERROR.value
    NOT_ROUTED = "not_routed"  # the route's condition did not hold (no active device)
    UNKNOWN_USER = "unknown_user"


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    type: str
    category: str
    priority: Priority
    request_hash: str  # tells a retry from a conflicting reuse of the id
    all_users: bool
    data: Mapping[str, Any]
    occurred_at: datetime
    send_at: datetime | None = None
    local_time: time | None = None
    listed: int = 0  # how many user ids the request named (0 for all_users)
    state: EventState = EventState.FANNING_OUT
    cursor: str = ""  # the last recipient id done ("" before the first page)
    recipients: int = 0  # recipients done so far
    # "channel:outcome" (and "unknown_user") -> how many; push messages are counted
    # from the store.
    counts: Mapping[str, int] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None


def event_key_prefix(event_id: str) -> str:
    return f"e|{event_id}|"


def event_key_range(event_id: str) -> tuple[str, str]:
    """``[low, high)`` holding every key of the event: ``|`` never appears in an id
    (``check_identifier``), and ``}`` is the character after it."""
    prefix = event_key_prefix(event_id)
    return prefix, prefix[:-1] + "}"


def event_message_key(event_id: str, user_id: str, channel: Channel) -> str:
    return f"{event_key_prefix(event_id)}{user_id}|{channel.value}"


def count_key(channel: Channel | None, outcome: Outcome | str) -> str:
    return f"{channel.value}:{outcome}" if channel is not None else str(outcome)


def recipient_instant(
    user: User, send_at: datetime | None, local_time: time | None, now: datetime
) -> datetime:
    """When the event is meant for this recipient (before quiet hours): ``send_at``, or the
    next ``local_time`` on the recipient's wall clock at or after ``now`` (the rules of
    time of ``timerules.local_to_utc``), or now."""
    if local_time is not None:
        zone = load_zone(user.timezone)
        today = utc_to_local(now, zone).date()
        for day in (today, today + timedelta(days=1), today + timedelta(days=2)):
            instant = local_to_utc(day, local_time, zone)
            if instant >= now:
                return instant
        raise AssertionError("a local time recurs within two days")  # pragma: no cover
    if send_at is not None and send_at > now:
        return _whole_ms_up(send_at)
    return now


def plan_event_message(
    event: Event,
    user: User,
    policy: CategoryPolicy,
    channel: Channel,
    title: str,
    body: str,
    data: Mapping[str, Any],
    now: datetime,
    content: Mapping[str, Any] | None = None,
    render_error: str | None = None,
) -> Message:
    """The message of ``event`` for ``user`` on ``channel``: pending at its instant (quiet
    hours placed, except for a critical event), or already ``failed``/``render_error``
    when its template did not render (recorded, so the key is taken and counted).
    ``content``: the channel's other rendered parts (html, link)."""
    nominal = recipient_instant(user, event.send_at, event.local_time, now)
    if event.priority is Priority.CRITICAL:
        policy = replace(policy, quiet_hours=QuietPolicy.BYPASS)
    placement = place(nominal, user, policy)
    if render_error is not None:
        placement = Placement(
            placement.scheduled_at, MessageStatus.FAILED, TemplateFailure.RENDER_ERROR.value
        )
    return intent_message(
        user,
        policy,
        event_message_key(event.event_id, user.user_id, channel),
        nominal,
        placement,
        now,
        label=event.type,
        title=title,
        body=body,
        data=dict(data),
        idempotency_key=event.event_id,
        last_error=render_error,
        channel=channel.value,
        content={**(content or {}), "event_type": event.type},
        priority=event.priority.value,
    )
