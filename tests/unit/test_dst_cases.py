"""Acceptance cases for the rules of time (docs/PRINCIPLES.md §3), each worked out by hand.

Every expected UTC instant below is derived in its ``why`` column from the
zone's offsets, which ``test_transitions_are_where_the_table_says`` checks
against the ``tzdata`` release in use (2026f). Reminders are planned with
``plan_reminder`` over a 48 h window that crosses the transition.

Notation: "gap a-b" = wall times [a, b) that do not exist that day; "repeat a-b"
= wall times [a, b) that occur twice.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import pytest

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import Message, MessageStatus, QuietHours, Reminder, User
from tepat.domain.planning import plan_reminder
from tepat.domain.timerules import local_to_utc, quiet_period_end, utc_to_local
from tepat.domain.zones import TZDATA_RELEASE, load_zone

MEAL = CategoryPolicy("meal")  # quiet hours: defer
DROP = CategoryPolicy("mood", quiet_hours=QuietPolicy.DROP)
SAFETY = CategoryPolicy("safety", quiet_hours=QuietPolicy.BYPASS, priority=0)
NOW = datetime(2000, 1, 1, tzinfo=UTC)


def z(iso: str) -> datetime:
    """A UTC instant written as ``YYYY-MM-DD HH:MM``."""
    return datetime.fromisoformat(iso).replace(tzinfo=UTC)


def plan(
    zone: str,
    at: str,
    start: datetime,
    end: datetime,
    policy: CategoryPolicy = MEAL,
    quiet: QuietHours | None = None,
    plan_version: int = 1,
) -> list[Message]:
    user = User("u1", zone, quiet_hours=quiet, plan_version=plan_version)
    reminder = Reminder("u1", "r1", policy.name, time.fromisoformat(at), "title", "body")
    return list(plan_reminder(user, reminder, policy, start, end, NOW))


def planned_for(messages: list[Message], day: date) -> Message:
    (m,) = [m for m in messages if m.local_date == day]
    return m


# --------------------------------------------------------------------------
# The tz database in use, and where its transitions are.
# --------------------------------------------------------------------------


def test_zone_data_is_the_tzdata_package() -> None:
    assert TZDATA_RELEASE == "2026f"
    assert zoneinfo.TZPATH == ()  # the system copy (2025b here) is never read


@dataclass(frozen=True)
class Shift:
    zone: str
    at: str  # UTC instant of the transition
    before: timedelta
    after: timedelta


H = timedelta(hours=1)
M = timedelta(minutes=1)

TRANSITIONS = [
    # 02:00 EST -> 03:00 EDT: gap 02:00-03:00 on 2027-03-14
    Shift("America/New_York", "2027-03-14 07:00", -5 * H, -4 * H),
    # 02:00 EDT -> 01:00 EST: repeat 01:00-02:00 on 2027-11-07
    Shift("America/New_York", "2027-11-07 06:00", -4 * H, -5 * H),
    # 01:00 GMT -> 02:00 BST: gap 01:00-02:00 on 2027-03-28
    Shift("Europe/London", "2027-03-28 01:00", 0 * H, 1 * H),
    # 02:00 BST -> 01:00 GMT: repeat 01:00-02:00 on 2027-10-31
    Shift("Europe/London", "2027-10-31 01:00", 1 * H, 0 * H),
    # 02:00 +11 -> 01:30 +10:30: repeat 01:30-02:00 on 2027-04-04 (30-minute DST)
    Shift("Australia/Lord_Howe", "2027-04-03 15:00", 11 * H, 10 * H + 30 * M),
    # 02:00 +10:30 -> 02:30 +11: gap 02:00-02:30 on 2027-10-03
    Shift("Australia/Lord_Howe", "2027-10-02 15:30", 10 * H + 30 * M, 11 * H),
    # 03:45 +13:45 -> 02:45 +12:45: repeat 02:45-03:45 on 2027-04-04
    Shift("Pacific/Chatham", "2027-04-03 14:00", 13 * H + 45 * M, 12 * H + 45 * M),
    # 02:45 +12:45 -> 03:45 +13:45: gap 02:45-03:45 on 2027-09-26
    Shift("Pacific/Chatham", "2027-09-25 14:00", 12 * H + 45 * M, 13 * H + 45 * M),
    # Moscow's last spring-forward (then "permanent summer time" +04 ...)
    Shift("Europe/Moscow", "2011-03-26 23:00", 3 * H, 4 * H),
    # ... until 2014: 02:00 +04 -> 01:00 +03, repeat 01:00-02:00 on 2014-10-26
    Shift("Europe/Moscow", "2014-10-25 22:00", 4 * H, 3 * H),
    # Sao Paulo's last DST start: 00:00 -03 -> 01:00 -02, gap 00:00-01:00 on 2018-11-04
    Shift("America/Sao_Paulo", "2018-11-04 03:00", -3 * H, -2 * H),
    # ... and last DST end: 00:00 -02 -> 23:00 -03 (of 02-16), repeat 23:00-24:00 on 2019-02-16
    Shift("America/Sao_Paulo", "2019-02-17 02:00", -2 * H, -3 * H),
    # Samoa crossed the date line: 2011-12-29 24:00 -10 -> 2011-12-31 00:00 +14
    Shift("Pacific/Apia", "2011-12-30 10:00", -10 * H, 14 * H),
]


@pytest.mark.parametrize("shift", TRANSITIONS, ids=lambda s: f"{s.zone}@{s.at}")
def test_transitions_are_where_the_table_says(shift: Shift) -> None:
    """Checked on UTC instants only (UTC -> local is never ambiguous)."""
    zone = load_zone(shift.zone)
    at = z(shift.at)
    assert at.astimezone(zone).utcoffset() == shift.after
    assert (at - timedelta(seconds=1)).astimezone(zone).utcoffset() == shift.before
    # nothing else changes within a day either side
    for hours in range(1, 25):
        assert (at - hours * H).astimezone(zone).utcoffset() == shift.before
        assert (at + hours * H).astimezone(zone).utcoffset() == shift.after


def test_sao_paulo_abolished_dst_in_2019() -> None:
    """Under the old rule DST would have started 2019-11-03; it did not: -03 all year."""
    zone = load_zone("America/Sao_Paulo")
    for month in range(1, 13):
        for year in (2019, 2020, 2027):
            if (year, month) == (2019, 1):
                continue  # still in the 2018/19 summer (-02) until 2019-02-17
            at = datetime(year, month, 15, 12, tzinfo=UTC)
            if (year, month) == (2019, 2):
                at = datetime(2019, 2, 20, 12, tzinfo=UTC)
            assert at.astimezone(zone).utcoffset() == -3 * H


# --------------------------------------------------------------------------
# The acceptance table: (zone, local date, local time) -> UTC instant, and why.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    zone: str
    day: str
    at: str
    expected: str
    why: str


CASES = [
    # America/New_York 2027-03-14: gap 02:00-03:00 (EST -05 -> EDT -04 at 07:00Z)
    Case("America/New_York", "2027-03-14", "00:30", "2027-03-14 05:30", "EST -05"),
    Case("America/New_York", "2027-03-14", "01:30", "2027-03-14 06:30", "EST -05"),
    Case(
        "America/New_York",
        "2027-03-14",
        "02:30",
        "2027-03-14 07:30",
        "02:30 does not exist; offset before the gap is -05:00 -> 07:30Z (reads 03:30 EDT)",
    ),
    Case("America/New_York", "2027-03-14", "09:00", "2027-03-14 13:00", "EDT -04"),
    # America/New_York 2027-11-07: repeat 01:00-02:00 (EDT -04 -> EST -05 at 06:00Z)
    Case("America/New_York", "2027-11-07", "00:30", "2027-11-07 04:30", "EDT -04"),
    Case(
        "America/New_York",
        "2027-11-07",
        "01:30",
        "2027-11-07 05:30",
        "01:30 occurs at 05:30Z (EDT) and 06:30Z (EST); first occurrence",
    ),
    Case("America/New_York", "2027-11-07", "02:30", "2027-11-07 07:30", "EST -05"),
    Case("America/New_York", "2027-11-07", "09:00", "2027-11-07 14:00", "EST -05"),
    # Europe/London 2027-03-28: gap 01:00-02:00 (GMT +00 -> BST +01 at 01:00Z)
    Case("Europe/London", "2027-03-28", "00:30", "2027-03-28 00:30", "GMT +00"),
    Case(
        "Europe/London",
        "2027-03-28",
        "01:30",
        "2027-03-28 01:30",
        "01:30 does not exist; offset before the gap is +00:00 -> 01:30Z (reads 02:30 BST)",
    ),
    Case(
        "Europe/London",
        "2027-03-28",
        "02:30",
        "2027-03-28 01:30",
        "BST +01 -> 01:30Z: the same instant as the skipped 01:30",
    ),
    Case("Europe/London", "2027-03-28", "09:00", "2027-03-28 08:00", "BST +01"),
    # Europe/London 2027-10-31: repeat 01:00-02:00 (BST +01 -> GMT +00 at 01:00Z)
    Case(
        "Europe/London",
        "2027-10-31",
        "00:30",
        "2027-10-30 23:30",
        "BST +01: the previous UTC day",
    ),
    Case(
        "Europe/London",
        "2027-10-31",
        "01:30",
        "2027-10-31 00:30",
        "01:30 occurs at 00:30Z (BST) and 01:30Z (GMT); first occurrence",
    ),
    Case("Europe/London", "2027-10-31", "02:30", "2027-10-31 02:30", "GMT +00"),
    Case("Europe/London", "2027-10-31", "09:00", "2027-10-31 09:00", "GMT +00"),
    # Australia/Lord_Howe 2027-04-04: repeat 01:30-02:00 (+11 -> +10:30 at 04-03 15:00Z)
    Case("Australia/Lord_Howe", "2027-04-04", "00:30", "2027-04-03 13:30", "+11:00"),
    Case(
        "Australia/Lord_Howe",
        "2027-04-04",
        "01:30",
        "2027-04-03 14:30",
        "01:30 occurs at 14:30Z (+11) and 15:00Z (+10:30); first occurrence",
    ),
    Case(
        "Australia/Lord_Howe",
        "2027-04-04",
        "01:45",
        "2027-04-03 14:45",
        "01:45 occurs at 14:45Z (+11) and 15:15Z (+10:30); first occurrence",
    ),
    Case("Australia/Lord_Howe", "2027-04-04", "02:30", "2027-04-03 16:00", "+10:30"),
    Case("Australia/Lord_Howe", "2027-04-04", "09:00", "2027-04-03 22:30", "+10:30"),
    # Australia/Lord_Howe 2027-10-03: gap 02:00-02:30 (+10:30 -> +11 at 10-02 15:30Z)
    Case("Australia/Lord_Howe", "2027-10-03", "00:30", "2027-10-02 14:00", "+10:30"),
    Case("Australia/Lord_Howe", "2027-10-03", "01:30", "2027-10-02 15:00", "+10:30"),
    Case(
        "Australia/Lord_Howe",
        "2027-10-03",
        "02:15",
        "2027-10-02 15:45",
        "02:15 does not exist; offset before the gap is +10:30 -> 15:45Z (reads 02:45 +11)",
    ),
    Case(
        "Australia/Lord_Howe",
        "2027-10-03",
        "02:30",
        "2027-10-02 15:30",
        "02:30 exists: the first wall time after the 30-minute gap, +11 -> 15:30Z",
    ),
    Case("Australia/Lord_Howe", "2027-10-03", "09:00", "2027-10-02 22:00", "+11:00"),
    # Pacific/Chatham 2027-04-04: repeat 02:45-03:45 (+13:45 -> +12:45 at 04-03 14:00Z)
    Case("Pacific/Chatham", "2027-04-04", "00:30", "2027-04-03 10:45", "+13:45"),
    Case("Pacific/Chatham", "2027-04-04", "01:30", "2027-04-03 11:45", "+13:45"),
    Case(
        "Pacific/Chatham",
        "2027-04-04",
        "02:30",
        "2027-04-03 12:45",
        "+13:45; 02:30 is before the repeated 02:45-03:45",
    ),
    Case(
        "Pacific/Chatham",
        "2027-04-04",
        "03:00",
        "2027-04-03 13:15",
        "03:00 occurs at 13:15Z (+13:45) and 14:15Z (+12:45); first occurrence",
    ),
    Case("Pacific/Chatham", "2027-04-04", "09:00", "2027-04-03 20:15", "+12:45"),
    # Pacific/Chatham 2027-09-26: gap 02:45-03:45 (+12:45 -> +13:45 at 09-25 14:00Z)
    Case("Pacific/Chatham", "2027-09-26", "00:30", "2027-09-25 11:45", "+12:45"),
    Case("Pacific/Chatham", "2027-09-26", "01:30", "2027-09-25 12:45", "+12:45"),
    Case(
        "Pacific/Chatham",
        "2027-09-26",
        "02:30",
        "2027-09-25 13:45",
        "+12:45; 02:30 is just before the gap",
    ),
    Case(
        "Pacific/Chatham",
        "2027-09-26",
        "03:00",
        "2027-09-25 14:15",
        "03:00 does not exist; offset before the gap is +12:45 -> 14:15Z (reads 04:00 +13:45)",
    ),
    Case("Pacific/Chatham", "2027-09-26", "09:00", "2027-09-25 19:15", "+13:45"),
    # Half- and quarter-hour zones without DST
    Case("Asia/Kolkata", "2027-03-14", "00:30", "2027-03-13 19:00", "+05:30: previous UTC day"),
    Case("Asia/Kolkata", "2027-03-14", "09:00", "2027-03-14 03:30", "+05:30"),
    Case("Asia/Kathmandu", "2027-03-14", "00:30", "2027-03-13 18:45", "+05:45: previous UTC day"),
    Case("Asia/Kathmandu", "2027-03-14", "09:00", "2027-03-14 03:15", "+05:45"),
    # Europe/Moscow changed its rules: 2011 last spring-forward and no fall-back; 2014 back to +03
    Case(
        "Europe/Moscow",
        "2011-03-27",
        "02:30",
        "2011-03-26 23:30",
        "02:30 does not exist; offset before the gap is +03:00 -> 23:30Z the day before",
    ),
    Case("Europe/Moscow", "2011-03-27", "09:00", "2011-03-27 05:00", "+04:00"),
    Case(
        "Europe/Moscow",
        "2011-10-30",
        "09:00",
        "2011-10-30 05:00",
        "the old rule would have fallen back to +03 that night; from 2011 it stays +04",
    ),
    Case(
        "Europe/Moscow",
        "2014-10-26",
        "01:30",
        "2014-10-25 21:30",
        "01:30 occurs at 21:30Z (+04) and 22:30Z (+03); first occurrence",
    ),
    Case("Europe/Moscow", "2014-10-26", "09:00", "2014-10-26 06:00", "+03:00"),
    # America/Sao_Paulo: DST started at midnight; abolished in 2019
    Case(
        "America/Sao_Paulo",
        "2018-11-04",
        "00:30",
        "2018-11-04 03:30",
        "00:30 does not exist (gap 00:00-01:00); offset before is -03:00 -> 03:30Z",
    ),
    Case("America/Sao_Paulo", "2018-11-04", "09:00", "2018-11-04 11:00", "-02:00 (DST)"),
    Case(
        "America/Sao_Paulo",
        "2019-02-16",
        "23:30",
        "2019-02-17 01:30",
        "23:30 on 02-16 occurs at 01:30Z (-02) and 02:30Z (-03); first occurrence",
    ),
    Case(
        "America/Sao_Paulo",
        "2019-11-03",
        "00:30",
        "2019-11-03 03:30",
        "no DST any more: 00:30 exists, -03:00 (under the old rule it would not exist)",
    ),
    # The date line
    Case("Pacific/Kiritimati", "2027-06-10", "09:00", "2027-06-09 19:00", "+14:00"),
    Case("Pacific/Pago_Pago", "2027-06-10", "09:00", "2027-06-10 20:00", "-11:00"),
    Case("Pacific/Apia", "2011-12-29", "09:00", "2011-12-29 19:00", "-10:00 (DST)"),
    Case(
        "Pacific/Apia",
        "2011-12-30",
        "09:00",
        "2011-12-30 19:00",
        "the whole of 2011-12-30 was skipped; offset before is -10:00 -> 19:00Z",
    ),
    Case("Pacific/Apia", "2011-12-31", "09:00", "2011-12-30 19:00", "+14:00"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.zone}-{c.day}-{c.at}")
def test_acceptance_case(case: Case) -> None:
    day = date.fromisoformat(case.day)
    expected = z(case.expected)
    # a 48 h window centred on the expected instant: it crosses the transition (all
    # are within hours of these times) and the planner must find the date on its own
    start = expected - timedelta(hours=24)
    messages = plan(case.zone, case.at, start, start + timedelta(hours=48))
    m = planned_for(messages, day)
    assert m.scheduled_at == expected, case.why
    assert m.status is MessageStatus.PENDING
    assert m.local_time == time.fromisoformat(case.at)
    assert m.live_key == f"r|u1|r1|{case.day}"
    # and the rule function directly
    assert local_to_utc(day, time.fromisoformat(case.at), load_zone(case.zone)) == expected


def test_every_time_on_transition_days_crossing_windows() -> None:
    """All four acceptance times planned over one window per transition: exactly one
    message per local date, each at its table instant."""
    table = {(c.zone, c.day, c.at): z(c.expected) for c in CASES}
    for zone, day in {(c.zone, c.day) for c in CASES}:
        for at in ("00:30", "01:30", "02:30", "09:00"):
            if (zone, day, at) not in table:
                continue
            start = table[(zone, day, at)] - timedelta(hours=24)
            messages = plan(zone, at, start, start + timedelta(hours=48))
            dates = [m.local_date for m in messages]
            assert len(dates) == len(set(dates))
            assert (
                planned_for(messages, date.fromisoformat(day)).scheduled_at
                == table[(zone, day, at)]
            )


# --------------------------------------------------------------------------
# The date line.
# --------------------------------------------------------------------------


def test_kiritimati_and_pago_pago_same_utc_day_different_local_dates() -> None:
    """Kiritimati is +14, Pago Pago -11: 25 hours apart. Over the UTC day 2027-06-09,
    Kiritimati's 09:00 is on local 06-10 (09:00 - 14 h = 06-09 19:00Z) and Pago Pago's
    on local 06-09 (09:00 + 11 h = 06-09 20:00Z): one UTC day, one hour apart, two
    different local dates. The same local date 06-10 is 25 h apart in UTC."""
    day_start, day_end = z("2027-06-09 00:00"), z("2027-06-10 00:00")
    kir = plan("Pacific/Kiritimati", "09:00", day_start, day_end)
    pago = plan("Pacific/Pago_Pago", "09:00", day_start, day_end)
    assert [(m.local_date, m.scheduled_at) for m in kir] == [
        (date(2027, 6, 10), z("2027-06-09 19:00"))
    ]
    assert [(m.local_date, m.scheduled_at) for m in pago] == [
        (date(2027, 6, 9), z("2027-06-09 20:00"))
    ]
    same_date = [
        local_to_utc(date(2027, 6, 10), time(9), load_zone(n))
        for n in ("Pacific/Kiritimati", "Pacific/Pago_Pago")
    ]
    assert same_date[1] - same_date[0] == timedelta(hours=25)


def test_apia_skipped_day() -> None:
    """2011-12-30 never happened in Samoa. Window [12-29 18:00Z, 12-31 18:00Z):
    12-29 09:00 -10 = 12-29 19:00Z; 12-30 09:00 (skipped, read -10) = 12-30 19:00Z;
    12-31 09:00 +14 = 12-30 19:00Z; 2012-01-01 09:00 +14 = 12-31 19:00Z (outside).
    So the skipped date and the next one fall on the same instant: one message per
    local date still holds (two dates, two messages), but they coincide."""
    messages = plan("Pacific/Apia", "09:00", z("2011-12-29 18:00"), z("2011-12-31 18:00"))
    assert [(m.local_date, m.scheduled_at) for m in messages] == [
        (date(2011, 12, 29), z("2011-12-29 19:00")),
        (date(2011, 12, 30), z("2011-12-30 19:00")),
        (date(2011, 12, 31), z("2011-12-30 19:00")),
    ]
    # A window starting at 12-30 18:00Z, when the wall clock already reads 12-31 08:00:
    # the skipped date 12-30 still has its instant (19:00Z) inside, so it is planned
    # (the planner looks a local day either side of the window's wall dates).
    messages = plan("Pacific/Apia", "09:00", z("2011-12-30 18:00"), z("2012-01-01 18:00"))
    assert [(m.local_date, m.scheduled_at) for m in messages] == [
        (date(2011, 12, 30), z("2011-12-30 19:00")),
        (date(2011, 12, 31), z("2011-12-30 19:00")),
        (date(2012, 1, 1), z("2011-12-31 19:00")),
    ]


# --------------------------------------------------------------------------
# Quiet hours at plan time.
# --------------------------------------------------------------------------

NIGHT = QuietHours(time(22, 0), time(7, 0))  # wraps midnight
NY = "America/New_York"
JUNE = (z("2027-06-10 00:00"), z("2027-06-12 00:00"))  # EDT, -04, no transition


def test_quiet_hours_defer_to_end_of_period_next_morning() -> None:
    """23:00 EDT 06-10 = 06-11 03:00Z is inside 22:00-07:00; deferred to 07:00 EDT on
    06-11 = 11:00Z. The message keeps its local date (06-10) and so its live key."""
    m = planned_for(plan(NY, "23:00", *JUNE, quiet=NIGHT), date(2027, 6, 10))
    assert m.scheduled_at == z("2027-06-11 11:00")
    assert (m.status, m.status_reason) == (MessageStatus.PENDING, "deferred:quiet_hours")
    assert m.live_key == "r|u1|r1|2027-06-10"


def test_quiet_hours_after_midnight_defer_to_same_morning() -> None:
    """06:30 EDT 06-11 (10:30Z) is in the part after midnight; ends 07:00 EDT = 11:00Z."""
    m = planned_for(plan(NY, "06:30", *JUNE, quiet=NIGHT), date(2027, 6, 11))
    assert m.scheduled_at == z("2027-06-11 11:00")


@pytest.mark.parametrize("at", ["07:00", "21:59"])
def test_quiet_hours_edges_are_half_open(at: str) -> None:
    """[22:00, 07:00): 07:00 and 21:59 are outside, so they are not moved."""
    m = planned_for(plan(NY, at, *JUNE, quiet=NIGHT), date(2027, 6, 10))
    assert m.scheduled_at == local_to_utc(date(2027, 6, 10), time.fromisoformat(at), load_zone(NY))
    assert m.status_reason is None


def test_quiet_hours_start_is_inside() -> None:
    """22:00 EDT 06-10 (06-11 02:00Z) is inside; deferred to 06-11 07:00 EDT = 11:00Z."""
    m = planned_for(plan(NY, "22:00", *JUNE, quiet=NIGHT), date(2027, 6, 10))
    assert m.scheduled_at == z("2027-06-11 11:00")


def test_quiet_hours_drop_policy_skips() -> None:
    m = planned_for(plan(NY, "23:00", *JUNE, policy=DROP, quiet=NIGHT), date(2027, 6, 10))
    assert (m.status, m.status_reason) == (MessageStatus.SKIPPED, "quiet_hours")
    assert m.scheduled_at == z("2027-06-11 03:00")  # 23:00 EDT, unmoved


def test_safety_bypasses_quiet_hours() -> None:
    m = planned_for(plan(NY, "23:00", *JUNE, policy=SAFETY, quiet=NIGHT), date(2027, 6, 10))
    assert (m.status, m.status_reason) == (MessageStatus.PENDING, None)
    assert m.scheduled_at == z("2027-06-11 03:00")


def test_quiet_hours_non_wrapping() -> None:
    """Quiet 13:00-14:00: 13:30 EDT (17:30Z) is deferred to 14:00 EDT = 18:00Z."""
    m = planned_for(
        plan(NY, "13:30", *JUNE, quiet=QuietHours(time(13), time(14))), date(2027, 6, 10)
    )
    assert m.scheduled_at == z("2027-06-10 18:00")


def test_deferral_across_spring_forward() -> None:
    """23:00 EST on 03-13 (-05) = 03-14 04:00Z, in 22:00-07:00. The night is an hour
    short: the end, 07:00 on 03-14, is EDT (-04) = 11:00Z, not 12:00Z."""
    m = planned_for(
        plan(NY, "23:00", z("2027-03-13 12:00"), z("2027-03-15 12:00"), quiet=NIGHT),
        date(2027, 3, 13),
    )
    assert m.scheduled_at == z("2027-03-14 11:00")


def test_deferral_across_fall_back() -> None:
    """23:00 EDT on 11-06 (-04) = 11-07 03:00Z; the end, 07:00 EST (-05) on 11-07 = 12:00Z."""
    m = planned_for(
        plan(NY, "23:00", z("2027-11-06 12:00"), z("2027-11-08 12:00"), quiet=NIGHT),
        date(2027, 11, 6),
    )
    assert m.scheduled_at == z("2027-11-07 12:00")


def test_quiet_hours_ending_at_the_repeated_hour_end_at_its_second_pass() -> None:
    """Adak, 2000-10-29: the clock reads 01:00-01:59 twice (HDT, then HST). Quiet hours
    01:01-01:00 entered at 01:01 HDT end when the clock next reads 01:00: at 01:00 HST
    the same night (11:00Z), not a day later (hypothesis found it)."""
    zone = load_zone("America/Adak")
    instant = z("2000-10-29 10:01")
    quiet = QuietHours(time(1, 1), time(1, 0))
    assert quiet_period_end(utc_to_local(instant, zone), quiet, zone) == z("2000-10-29 11:00")


def test_quiet_end_in_the_gap() -> None:
    """Quiet 22:00-02:30 and the end, 02:30 on 03-14, does not exist: it is read with
    the offset before the gap, -05 -> 07:30Z (the clock then reads 03:30 EDT)."""
    m = planned_for(
        plan(
            NY,
            "23:00",
            z("2027-03-13 12:00"),
            z("2027-03-15 12:00"),
            quiet=QuietHours(time(22), time(2, 30)),
        ),
        date(2027, 3, 13),
    )
    assert m.scheduled_at == z("2027-03-14 07:30")


def test_quiet_end_in_the_repeated_hour_second_pass() -> None:
    """Quiet 22:00-01:30 on 2027-11-07 (repeat 01:00-02:00). A reminder at 01:15 is read
    as the first 01:15 (EDT, 05:15Z) and deferred to the first 01:30 (EDT, 05:30Z).
    Seen from the second pass (01:15 EST = 06:15Z, still quiet), the period ends at the
    second 01:30 (EST, 06:30Z): the fixed ``quiet_period_end``."""
    quiet = QuietHours(time(22), time(1, 30))
    m = planned_for(
        plan(NY, "01:15", z("2027-11-06 12:00"), z("2027-11-08 12:00"), quiet=quiet),
        date(2027, 11, 7),
    )
    assert m.scheduled_at == z("2027-11-07 05:30")
    ny = load_zone(NY)
    second = utc_to_local(z("2027-11-07 06:15"), ny)
    assert quiet_period_end(second, quiet, ny) == z("2027-11-07 06:30")


# --------------------------------------------------------------------------
# A user who moves: Asia/Jakarta -> Europe/London.
# --------------------------------------------------------------------------


def test_moving_zone_keeps_one_live_message_per_local_date() -> None:
    """Jakarta is +07 all year; London in June is BST +01. Over [06-09 00:00Z, +48 h):
    Jakarta 09:00 on 06-09 and 06-10 = 02:00Z each day; London (plan_version 2) 09:00 on
    06-09 and 06-10 = 08:00Z each day. Same local dates, so the same live keys: the
    store's unique index on live_key admits one message per date; the new plan's
    messages have new ids (the dedup key carries the plan version)."""
    start, end = z("2027-06-09 00:00"), z("2027-06-11 00:00")
    jakarta = plan("Asia/Jakarta", "09:00", start, end, plan_version=1)
    london = plan("Europe/London", "09:00", start, end, plan_version=2)
    assert [(m.local_date, m.scheduled_at) for m in jakarta] == [
        (date(2027, 6, 9), z("2027-06-09 02:00")),
        (date(2027, 6, 10), z("2027-06-10 02:00")),
    ]
    assert [(m.local_date, m.scheduled_at) for m in london] == [
        (date(2027, 6, 9), z("2027-06-09 08:00")),
        (date(2027, 6, 10), z("2027-06-10 08:00")),
    ]
    assert (
        [m.live_key for m in jakarta]
        == [m.live_key for m in london]
        == [
            "r|u1|r1|2027-06-09",
            "r|u1|r1|2027-06-10",
        ]
    )
    assert {m.id for m in jakarta}.isdisjoint(m.id for m in london)
    assert [m.dedup_key for m in london] == [
        "r|u1|r1|2027-06-09|p2",
        "r|u1|r1|2027-06-10|p2",
    ]
    # A unique index on live_key: inserting the second plan adds nothing new.
    live: dict[str | None, Message] = {}
    inserted = [live.setdefault(m.live_key, m) is m for m in jakarta + london]
    assert inserted == [True, True, False, False]


def test_moving_west_across_the_window_shares_a_date() -> None:
    """Window [06-09 05:00Z, 06-11 05:00Z): Jakarta plans 06-10 and 06-11 (02:00Z, the
    06-09 one at 02:00Z is before the window); London plans 06-09 and 06-10 (08:00Z;
    06-11 08:00Z is after it). Only 06-10 is shared, and it has one live key."""
    start, end = z("2027-06-09 05:00"), z("2027-06-11 05:00")
    jakarta = plan("Asia/Jakarta", "09:00", start, end, plan_version=1)
    london = plan("Europe/London", "09:00", start, end, plan_version=2)
    assert [m.local_date for m in jakarta] == [date(2027, 6, 10), date(2027, 6, 11)]
    assert [m.local_date for m in london] == [date(2027, 6, 9), date(2027, 6, 10)]
    shared = {m.live_key for m in jakarta} & {m.live_key for m in london}
    assert shared == {"r|u1|r1|2027-06-10"}
