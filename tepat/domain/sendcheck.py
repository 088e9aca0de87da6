"""The decision a consumer takes at send time (GUIDE.md §1, principle 3).

Pure: it is given the current state and returns what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import Message, Reminder, SkipReason, User
from tepat.domain.timerules import in_quiet_hours, quiet_period_end, utc_to_local
from tepat.domain.zones import load_zone


@dataclass(frozen=True, slots=True)
class Send:
    pass


@dataclass(frozen=True, slots=True)
class Skip:
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class Missed:
    late_by_seconds: float


@dataclass(frozen=True, slots=True)
class Defer:
    until: datetime


Decision = Send | Skip | Missed | Defer


def decide(
    message: Message,
    user: User | None,
    reminder: Reminder | None,
    preferences: Mapping[str, bool],
    active_devices: int,
    policy: CategoryPolicy,
    now: datetime,
) -> Decision:
    if user is None:
        return Skip(SkipReason.USER_DELETED)
    if not user.enabled:
        return Skip(SkipReason.USER_DISABLED)
    # One-offs name an absolute instant; only reminder messages follow re-plans.
    if message.reminder_id is not None and (
        message.plan_version < user.plan_version or reminder is None or not reminder.enabled
    ):
        return Skip(SkipReason.SUPERSEDED)
    if not preferences.get(message.category, True):
        return Skip(SkipReason.OPTED_OUT)
    late = now - message.scheduled_at
    if late > policy.missed_window:
        return Missed(late.total_seconds())
    if user.quiet_hours is not None and policy.quiet_hours is not QuietPolicy.BYPASS:
        zone = load_zone(user.timezone)
        local = utc_to_local(now, zone)
        if in_quiet_hours(local.time(), user.quiet_hours):
            if policy.quiet_hours is QuietPolicy.DROP:
                return Skip(SkipReason.QUIET_HOURS)
            return Defer(quiet_period_end(local, user.quiet_hours, zone))
    if active_devices == 0:
        return Skip(SkipReason.NO_ACTIVE_DEVICE)
    return Send()
