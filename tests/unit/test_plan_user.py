"""The fast planning paths agree with plain searches (tepat/domain/planning.py):
``plan_user`` with every date's ``intended_on``, ``next_nominal_from`` with a plain search."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tepat.domain.categories import Categories
from tepat.domain.models import WEEKDAYS, QuietHours, Reminder, User
from tepat.domain.planning import (
    NOTHING_AHEAD,
    intended_on,
    next_nominal_from,
    plan_user,
)

CATEGORIES = Categories()
# DST at midnight (Santiago, Beirut), half-hour shifts (Lord Howe), the date line.
ZONES = (
    "UTC",
    "America/Santiago",
    "Asia/Beirut",
    "Australia/Lord_Howe",
    "Pacific/Kiritimati",
    "America/New_York",
    "Europe/London",
)
T0 = datetime(2027, 3, 1, tzinfo=UTC)

reminders = st.lists(
    st.builds(
        lambda rid, at, days, cat, on: Reminder(
            "u", f"r{rid}", cat, at, "t", "b", days=days, enabled=on
        ),
        st.integers(0, 5),
        st.times().map(lambda t: t.replace(second=0, microsecond=0)),
        st.sets(st.sampled_from(WEEKDAYS), min_size=0, max_size=7).map(
            lambda d: tuple(w for w in WEEKDAYS if w in d)
        ),
        st.sampled_from(["meal", "safety", "gone"]),  # "gone": not configured
        st.booleans(),
    ),
    max_size=4,
    unique_by=lambda r: r.reminder_id,
)
users = st.builds(
    lambda zone, quiet, on: User(
        "u", zone, quiet_hours=QuietHours(time(22), time(6)) if quiet else None, enabled=on
    ),
    st.sampled_from(ZONES),
    st.booleans(),
    st.booleans(),
)
instants = st.integers(0, 400 * 24 * 60).map(lambda m: T0 + timedelta(minutes=m, seconds=7))


@settings(max_examples=300, deadline=None)
@given(users, reminders, instants, st.integers(1, 72 * 60))
def test_plan_user_plans_what_every_dates_intent_in_the_window_is(
    user: User, rems: list[Reminder], start: datetime, minutes: int
) -> None:
    end = start + timedelta(minutes=minutes)
    fast = list(plan_user(user, rems, CATEGORIES, start, end, T0))
    # Searched plainly: every date from two before the window to two after, every reminder.
    days = [start.date() + timedelta(days=n) for n in range(-2, minutes // (24 * 60) + 3)]
    intended = (intended_on(user, r, CATEGORIES, day, T0) for r in rems for day in days)
    assert fast == [m for m in intended if m is not None and start <= m.nominal < end]


@settings(max_examples=300, deadline=None)
@given(users, reminders, instants)
def test_next_nominal_from_is_the_first_intended_instant_at_or_after(
    user: User, rems: list[Reminder], instant: datetime
) -> None:
    found = next_nominal_from(user, rems, CATEGORIES, instant, T0)
    # Searched plainly: every local date of the next three weeks, every reminder.
    day0 = instant.date() - timedelta(days=2)
    nominals = [
        m.nominal
        for r in rems
        for n in range(21)
        if (m := intended_on(user, r, CATEGORIES, day0 + timedelta(days=n), T0)) is not None
        and m.nominal >= instant
    ]
    assert found == min(nominals, default=NOTHING_AHEAD)
