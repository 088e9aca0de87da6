"""The decision a consumer takes at send time (docs/PRINCIPLES.md §1, principle 3).

Pure: it is given the current state and returns what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import Message, Reminder, SkipReason, User
from tepat.domain.planning import plan_reminder_on
from tepat.domain.preferences import allowed
from tepat.domain.timerules import in_quiet_hours, quiet_period_end, utc_to_local
from tepat.domain.zones import load_zone


@dataclass(frozen=True, slots=True)
class Send:
    pass


@dataclass(frozen=True, slots=True)
class Skip:
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class Supersede:
    """The reminder no longer intends this message: it ends ``skipped`` (superseded) and
    releases its live key for ``replacement`` (None: nothing is due for that date)."""

    replacement: Message | None


@dataclass(frozen=True, slots=True)
class Missed:
    late_by_seconds: float


@dataclass(frozen=True, slots=True)
class Defer:
    until: datetime


Decision = Send | Skip | Supersede | Missed | Defer


def check_still_intended(
    message: Message,
    user: User,
    reminder: Reminder | None,
    policy: CategoryPolicy,
    now: datetime,
) -> Supersede | None:
    """Compare a reminder message with what its reminder intends *now* for its local date
    (not by version: a message a re-plan could not cancel is judged too). Only the timing
    intent matters; a text edit reaching a message already due is not worth losing it.
    """
    if message.local_date is None:
        return None
    expected = plan_reminder_on(user, reminder, policy, message.local_date, now)
    if expected is None:
        return Supersede(None)
    if (expected.nominal, expected.category) != (message.nominal, message.category):
        # Moved: the new instant is planned if it is still ahead; an instant that
        # has already passed today is not sent late.
        return Supersede(expected if expected.nominal > now else None)
    return None


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
    if message.reminder_id is not None:
        superseded = check_still_intended(message, user, reminder, policy, now)
        if superseded is not None:
            return superseded
    if not allowed(preferences, message.category, message.channel):
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
