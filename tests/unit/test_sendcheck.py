"""decide(): what a consumer does with a claimed message, given the state now."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta

import pytest

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import Message, QuietHours, Reminder, SkipReason, User
from tepat.domain.sendcheck import Decision, Defer, Missed, Send, Skip, Supersede, decide
from tests.support.messages import make_message

DUE = datetime(2027, 6, 10, 13, 0, tzinfo=UTC)  # 09:00 EDT in New York
MEAL = CategoryPolicy("meal")
MOOD_DROP = CategoryPolicy("mood", quiet_hours=QuietPolicy.DROP)
SAFETY = CategoryPolicy("safety", quiet_hours=QuietPolicy.BYPASS, priority=0)
NIGHT = QuietHours(time(22), time(7))

USER = User("u1", "America/New_York", plan_version=2)
REMINDER = Reminder("u1", "r1", "meal", time(9), "t", "b")
MESSAGE = make_message(
    "r|u1|r1|2027-06-10|u2|r1",
    id="m1",
    scheduled_at=DUE,
    timezone="America/New_York",
    live_key="r|u1|r1|2027-06-10",
    reminder_id="r1",
    local_date=date(2027, 6, 10),
    local_time=time(9),
    plan_version=2,
)
ONEOFF = replace(MESSAGE, reminder_id=None, dedup_key="o|u1|k", live_key="o|u1|k")


def run(
    message: Message = MESSAGE,
    user: User | None = USER,
    reminder: Reminder | None = REMINDER,
    preferences: dict[str, bool] | None = None,
    active_devices: int = 1,
    policy: CategoryPolicy = MEAL,
    now: datetime = DUE,
) -> Decision:
    return decide(message, user, reminder, preferences or {}, active_devices, policy, now)


def test_on_time_sends() -> None:
    assert run() == Send()


def test_user_deleted() -> None:
    assert run(user=None) == Skip(SkipReason.USER_DELETED)


def test_user_disabled() -> None:
    assert run(user=replace(USER, enabled=False)) == Skip(SkipReason.USER_DISABLED)


def test_older_plan_version_still_intended_is_sent() -> None:
    """Planned under version 2; a re-plan since (version 3) changed nothing for this
    date: the message is judged by what the reminder intends, not by a number."""
    assert run(user=replace(USER, plan_version=3)) == Send()


def test_reminder_moved_later_supersedes_with_the_new_instant() -> None:
    later = replace(REMINDER, local_time=time(9, 30))
    decision = run(user=replace(USER, plan_version=3), reminder=later)
    assert isinstance(decision, Supersede) and decision.replacement is not None
    assert decision.replacement.nominal == DUE + timedelta(minutes=30)
    assert decision.replacement.live_key == MESSAGE.live_key


def test_reminder_moved_to_an_instant_already_passed_supersedes_with_none() -> None:
    earlier = replace(REMINDER, local_time=time(8, 30))
    assert run(reminder=earlier) == Supersede(None)


def test_user_moved_zone_supersedes_with_the_new_local_instant() -> None:
    decision = run(user=replace(USER, timezone="America/Los_Angeles", plan_version=3))
    assert isinstance(decision, Supersede) and decision.replacement is not None
    assert decision.replacement.nominal == DUE + timedelta(hours=3)


def test_text_edit_reaching_a_due_message_still_sends_it() -> None:
    assert run(reminder=replace(REMINDER, title="new title")) == Send()


def test_newer_message_than_user_is_not_superseded() -> None:
    assert run(message=replace(MESSAGE, plan_version=3)) == Send()


def test_oneoff_is_not_superseded_by_a_replan() -> None:
    """One-offs name an absolute instant; a zone change does not void them."""
    assert run(message=replace(ONEOFF, plan_version=1), reminder=None) == Send()


def test_reminder_deleted() -> None:
    assert run(reminder=None) == Supersede(None)


def test_reminder_disabled() -> None:
    assert run(reminder=replace(REMINDER, enabled=False)) == Supersede(None)


def test_reminder_no_longer_on_that_weekday() -> None:
    assert run(reminder=replace(REMINDER, days=("mon",))) == Supersede(None)


def test_opted_out_of_the_category() -> None:
    assert run(preferences={"meal": False}) == Skip(SkipReason.OPTED_OUT)
    assert run(preferences={"mood": False, "meal": True}) == Send()
    assert run(preferences={"mood": False}) == Send()  # unset means opted in


@pytest.mark.parametrize(
    ("late", "expected"),
    [
        (timedelta(minutes=45), Missed(45 * 60.0)),
        (timedelta(minutes=30, seconds=1), Missed(30 * 60.0 + 1)),
        (timedelta(minutes=30), Send()),  # the window is inclusive
        (timedelta(minutes=29), Send()),
        (timedelta(seconds=-5), Send()),  # a little early (batch granularity)
    ],
)
def test_missed_window(late: timedelta, expected: Decision) -> None:
    assert run(now=DUE + late) == expected


def test_missed_window_is_per_category() -> None:
    policy = CategoryPolicy("meal", missed_window=timedelta(minutes=5))
    assert run(policy=policy, now=DUE + timedelta(minutes=6)) == Missed(360.0)


QUIET_USER = replace(USER, quiet_hours=NIGHT)
# 23:30 EDT on 06-10 = 06-11 03:30Z: inside 22:00-07:00; the period ends 07:00 EDT = 11:00Z
LATE_NIGHT = datetime(2027, 6, 11, 3, 30, tzinfo=UTC)
# A one-off: the quiet-hours rules apply alike, without a reminder to compare with.
NIGHT_MESSAGE = replace(ONEOFF, scheduled_at=LATE_NIGHT)


def test_quiet_hours_now_defers_to_their_end() -> None:
    got = run(message=NIGHT_MESSAGE, user=QUIET_USER, now=LATE_NIGHT)
    assert got == Defer(until=datetime(2027, 6, 11, 11, 0, tzinfo=UTC))


def test_quiet_hours_now_drop_policy_skips() -> None:
    got = run(
        message=replace(NIGHT_MESSAGE, category="mood"),
        user=QUIET_USER,
        policy=MOOD_DROP,
        now=LATE_NIGHT,
    )
    assert got == Skip(SkipReason.QUIET_HOURS)


def test_safety_bypasses_quiet_hours() -> None:
    got = run(
        message=replace(NIGHT_MESSAGE, category="safety"),
        user=QUIET_USER,
        policy=SAFETY,
        now=LATE_NIGHT,
    )
    assert got == Send()


def test_quiet_hours_are_judged_now_not_at_plan_time() -> None:
    """The user set quiet hours after planning: a 09:00 message is not affected, and
    one planned for 21:59 EDT but processed at 22:00 EDT (02:00Z) is deferred."""
    assert run(user=QUIET_USER) == Send()
    planned = datetime(2027, 6, 11, 1, 59, tzinfo=UTC)
    now = datetime(2027, 6, 11, 2, 0, tzinfo=UTC)
    got = run(message=replace(ONEOFF, scheduled_at=planned), user=QUIET_USER, now=now)
    assert got == Defer(until=datetime(2027, 6, 11, 11, 0, tzinfo=UTC))


def test_defer_in_second_pass_of_repeated_hour_is_in_the_future() -> None:
    """New York 2027-11-07 repeats 01:00-02:00. Quiet 22:00-01:30; at 06:15Z the clock
    reads 01:15 EST (second pass): defer to 01:30 EST = 06:30Z, not the past 05:30Z."""
    now = datetime(2027, 11, 7, 6, 15, tzinfo=UTC)
    user = replace(USER, quiet_hours=QuietHours(time(22), time(1, 30)))
    got = run(message=replace(ONEOFF, scheduled_at=now), user=user, now=now)
    assert got == Defer(until=datetime(2027, 11, 7, 6, 30, tzinfo=UTC))


def test_no_active_device() -> None:
    assert run(active_devices=0) == Skip(SkipReason.NO_ACTIVE_DEVICE)


def test_precedence() -> None:
    """Deleted/disabled beat everything; opted-out beats missed; missed beats quiet
    hours; quiet hours beat no-device (the device may be back by morning)."""

    def everything_wrong(user: User | None) -> Decision:
        return run(
            message=replace(MESSAGE, scheduled_at=LATE_NIGHT, plan_version=1),
            user=user,
            reminder=None,
            preferences={"meal": False},
            active_devices=0,
            now=LATE_NIGHT + timedelta(hours=1),
        )

    assert everything_wrong(None) == Skip(SkipReason.USER_DELETED)
    assert everything_wrong(replace(QUIET_USER, enabled=False)) == Skip(SkipReason.USER_DISABLED)
    assert everything_wrong(QUIET_USER) == Supersede(None)
    assert run(
        message=NIGHT_MESSAGE,
        user=QUIET_USER,
        preferences={"meal": False},
        now=LATE_NIGHT + timedelta(hours=1),
    ) == Skip(SkipReason.OPTED_OUT)
    assert run(
        message=NIGHT_MESSAGE, user=QUIET_USER, now=LATE_NIGHT + timedelta(hours=1)
    ) == Missed(3600.0)
    assert run(message=NIGHT_MESSAGE, user=QUIET_USER, active_devices=0, now=LATE_NIGHT) == Defer(
        until=datetime(2027, 6, 11, 11, 0, tzinfo=UTC)
    )
