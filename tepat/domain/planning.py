"""Turning reminders and one-off requests into messages (pure; the creator jobs persist them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from tepat.domain.categories import Categories, CategoryPolicy, QuietPolicy
from tepat.domain.models import (
    Message,
    MessageStatus,
    Reminder,
    SkipReason,
    User,
    message_id_for,
    oneoff_live_key,
    reminder_live_key,
    slot_key_for,
)
from tepat.domain.timerules import (
    in_quiet_hours,
    local_dates_covering,
    local_to_utc,
    quiet_period_end,
    utc_to_local,
)
from tepat.domain.zones import load_zone


@dataclass(frozen=True, slots=True)
class Placement:
    """Where quiet hours put an intended instant."""

    scheduled_at: datetime
    status: MessageStatus = MessageStatus.PENDING
    reason: str | None = None


def place(nominal: datetime, user: User, policy: CategoryPolicy) -> Placement:
    """Apply the user's quiet hours to a nominal UTC instant under the category's policy."""
    quiet = user.quiet_hours
    if quiet is None or policy.quiet_hours is QuietPolicy.BYPASS:
        return Placement(nominal)
    zone = load_zone(user.timezone)
    local = utc_to_local(nominal, zone)
    if not in_quiet_hours(local.time(), quiet):
        return Placement(nominal)
    if policy.quiet_hours is QuietPolicy.DROP:
        return Placement(nominal, MessageStatus.SKIPPED, SkipReason.QUIET_HOURS.value)
    return Placement(quiet_period_end(local, quiet, zone), reason="deferred:quiet_hours")


def plan_reminder(
    user: User,
    reminder: Reminder,
    policy: CategoryPolicy,
    start: datetime,
    end: datetime,
    now: datetime,
) -> Iterator[Message]:
    """Messages for each local date whose nominal instant lies in ``[start, end)``; the
    instant is tested before a message is built (a window's edge dates mostly fall
    outside it: building their messages was most of planning's cost)."""
    if not (user.enabled and reminder.enabled):
        return
    zone = load_zone(user.timezone)
    for day in local_dates_covering(start, end, zone):
        if not reminder.fires_on(day):
            continue
        if start <= local_to_utc(day, reminder.local_time, zone) < end and (
            m := plan_reminder_on(user, reminder, policy, day, now)
        ):
            yield m


def plan_reminder_on(
    user: User, reminder: Reminder | None, policy: CategoryPolicy, day: date, now: datetime
) -> Message | None:
    """The message ``reminder`` intends for local date ``day`` under the user's current
    settings and plan version, or None if it intends none (none given, disabled, not
    that weekday)."""
    if reminder is None or not (user.enabled and reminder.enabled and reminder.fires_on(day)):
        return None
    zone = load_zone(user.timezone)
    nominal = local_to_utc(day, reminder.local_time, zone)
    placement = place(nominal, user, policy)
    live_key = reminder_live_key(user.user_id, reminder.reminder_id, day)
    # The plan version alone versions the key: it never repeats (a reminder's own
    # version restarts at 1 when it is deleted and created again).
    dedup_key = f"{live_key}|p{user.plan_version}"
    m = Message(
        id=message_id_for(dedup_key),
        user_id=user.user_id,
        category=reminder.category,
        # The pending-slot index is per label: reminders without one stay distinct.
        label=reminder.label or reminder.reminder_id,
        title=reminder.title,
        body=reminder.body,
        data=reminder.data,
        scheduled_at=placement.scheduled_at,
        nominal_at=nominal,
        due_at=placement.scheduled_at,
        timezone=user.timezone,
        dedup_key=dedup_key,
        live_key=live_key,
        reminder_id=reminder.reminder_id,
        local_date=day,
        local_time=reminder.local_time,
        status=placement.status,
        status_reason=placement.reason,
        plan_version=user.plan_version,
        created_at=now,
        updated_at=now,
    )
    # Set on the new message itself: replace() copied every field, which cost a fifth
    # of a bulk plan. Nothing else holds ``m`` yet.
    object.__setattr__(m, "slot_key", slot_key_for(m))
    return m


def intended_on(
    user: User, reminder: Reminder | None, categories: Categories, day: date, now: datetime
) -> Message | None:
    """:func:`plan_reminder_on` under the reminder's own category policy; None without a
    reminder, or when its category is no longer configured (nothing to plan, as in
    :func:`plan_user`)."""
    if reminder is None or reminder.category not in categories:
        return None
    return plan_reminder_on(user, reminder, categories.get(reminder.category), day, now)


def same_intent(a: Message, b: Message) -> bool:
    """Whether two messages for one (user, reminder, local date) would notify alike. A
    re-plan keeps a message that is still what the reminder intends, and replaces one
    that is not."""
    return all(
        getattr(a, f) == getattr(b, f)
        for f in ("nominal", "category", "label", "title", "body", "data", "timezone")
    )


def still_placed(expected: Message, pending: Message, now: datetime) -> bool:
    """Whether a pending message is still where the user's settings place it now: at the
    same instant, or at one that has already passed (a deferral or retry keeps its own).
    A message deferred by quiet hours since removed is due at its own instant again."""
    return expected.due == pending.due or expected.due <= now


def plan_user(
    user: User,
    reminders: Iterable[Reminder],
    categories: Categories,
    start: datetime,
    end: datetime,
    now: datetime,
) -> Iterator[Message]:
    for reminder in reminders:
        if reminder.category in categories:  # else removed from configuration: nothing to plan
            policy = categories.get(reminder.category)
            yield from plan_reminder(user, reminder, policy, start, end, now)


def request_fingerprint(payload: dict[str, Any]) -> str:
    """Stable hash of a one-off request body, to tell a retry from a conflicting reuse of a key."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _whole_ms_up(instant: datetime) -> datetime:
    """``instant`` rounded up to a whole millisecond, the finest instant every store keeps
    (a BSON date holds milliseconds): cut down there, a ``send_at`` given to the
    microsecond would be sent up to a millisecond before it."""
    extra = instant.microsecond % 1000
    return instant if not extra else instant + timedelta(microseconds=1000 - extra)


def plan_oneoff(
    user: User,
    policy: CategoryPolicy,
    idempotency_key: str,
    title: str,
    body: str,
    data: dict[str, Any],
    send_at: datetime | None,
    now: datetime,
    request_hash: str,
    device_id: str | None = None,
) -> Message:
    nominal = _whole_ms_up(send_at) if send_at is not None and send_at > now else now
    return intent_message(
        user,
        policy,
        oneoff_live_key(user.user_id, idempotency_key),
        nominal,
        place(nominal, user, policy),
        now,
        label="",
        title=title,
        body=body,
        data=data,
        device_id=device_id,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
    )


def intent_message(
    user: User,
    policy: CategoryPolicy,
    key: str,
    nominal: datetime,
    placement: Placement,
    now: datetime,
    **fields: Any,
) -> Message:
    """The message of one intent that is not a reminder's (a one-off, an event's): ``key``
    names it as its id, dedup, live and slot key, so distinct intents never collide."""
    local = utc_to_local(nominal, load_zone(user.timezone))
    return Message(
        id=message_id_for(key),
        user_id=user.user_id,
        category=policy.name,
        scheduled_at=placement.scheduled_at,
        nominal_at=nominal,
        due_at=placement.scheduled_at,
        slot_key=key,
        timezone=user.timezone,
        dedup_key=key,
        live_key=key,
        local_date=local.date(),
        local_time=local.time().replace(second=0, microsecond=0),
        status=placement.status,
        status_reason=placement.reason,
        plan_version=user.plan_version,
        created_at=now,
        updated_at=now,
        **fields,
    )


#: Bump when planning makes something else of the same inputs (placement, keys, which
#: dates a reminder covers): every standing planning mark then stops counting.
PLANNING_RULES = "1"

#: ``plan_next_at`` of a user with nothing to plan (disabled, no enabled reminder):
#: any change that could give them something clears their mark first.
NOTHING_AHEAD = datetime.max.replace(tzinfo=UTC)


def planning_fingerprint(categories: Categories) -> str:
    """What planning depends on besides the user's own records: the category
    configuration (which categories exist, their policies) and the rules. A plan
    mark made under another fingerprint does not count."""
    policies = sorted((repr(p) for p in categories), key=str)
    canonical = json.dumps([PLANNING_RULES, policies], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def next_nominal_from(
    user: User,
    reminders: Iterable[Reminder],
    categories: Categories,
    instant: datetime,
    now: datetime,
) -> datetime:
    """The first nominal instant at or after ``instant`` that ``user``'s reminders
    intend, or :data:`NOTHING_AHEAD`. Looks from the local date before ``instant``'s (a
    DST gap can move a date's instant into the next date) to eight days after.
    """
    if not user.enabled:
        return NOTHING_AHEAD
    zone = load_zone(user.timezone)
    local = utc_to_local(instant, zone).date()
    days = []
    for n in range(-1, 9):
        try:
            days.append(local + timedelta(days=n))
        except OverflowError:
            continue  # past either end of the calendar: no such date to plan
    best = NOTHING_AHEAD
    for reminder in reminders:
        if not reminder.enabled or reminder.category not in categories:
            continue  # intends nothing (as intended_on says)
        for day in days:
            if not reminder.fires_on(day):
                continue
            # plan_reminder_on's nominal instant, without building the message
            try:
                nominal = local_to_utc(day, reminder.local_time, zone)
            except OverflowError:
                continue  # an instant past the calendar's end is never planned
            if nominal >= instant:
                best = min(best, nominal)
                break  # a later date's instant is later still
    return best
