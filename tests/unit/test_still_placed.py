"""A pending reminder message is re-placed when the user's quiet hours move off (or onto)
its instant before it is due (tepat/domain/planning.py ``still_placed``), and keeps an
instant it reached by a send-time deferral or a retry once its placement has passed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta

from tepat.domain.categories import Categories
from tepat.domain.models import Message, QuietHours, Reminder, User
from tepat.domain.planning import intended_on, still_placed

CATEGORIES = Categories()
DAY = date(2027, 6, 1)
REMINDER = Reminder("bob", "r1", "mood", time(9, 30), "t", "b")
QUIET = QuietHours(time(9, 0), time(10, 0))
BOB = User("bob", "America/St_Johns", quiet_hours=QUIET)
NOMINAL = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)  # 09:30 NDT


def planned(user: User, now: datetime) -> Message:
    m = intended_on(user, REMINDER, CATEGORIES, DAY, now)
    assert m is not None
    return m


def test_quiet_hours_removed_before_the_instant_re_place_it() -> None:
    now = NOMINAL - timedelta(hours=3)
    deferred = planned(BOB, now)
    assert deferred.due == NOMINAL + timedelta(minutes=30)  # the quiet end, 10:00
    without_quiet = planned(replace(BOB, quiet_hours=None), now)
    assert without_quiet.due == NOMINAL
    assert not still_placed(without_quiet, deferred, now)


def test_quiet_hours_added_over_the_instant_re_place_it() -> None:
    now = NOMINAL - timedelta(hours=3)
    at_instant = planned(replace(BOB, quiet_hours=None), now)
    assert not still_placed(planned(BOB, now), at_instant, now)


def test_the_same_placement_is_kept() -> None:
    now = NOMINAL - timedelta(hours=3)
    assert still_placed(planned(BOB, now), planned(BOB, now), now)


def test_an_instant_reached_by_a_retry_is_kept_once_the_placement_has_passed() -> None:
    now = NOMINAL + timedelta(minutes=40)
    expected = planned(replace(BOB, quiet_hours=None), now)  # due at NOMINAL: passed
    retried = replace(expected, due_at=now + timedelta(minutes=2))
    assert still_placed(expected, retried, now)
