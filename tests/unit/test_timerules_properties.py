"""Property tests for the rules of time (docs/PRINCIPLES.md §3) over every IANA zone.

The reference used here never asks a zone to interpret a *local* time, so it
does not lean on PEP 495 ``fold`` semantics (which the code under test relies
on). It only converts UTC instants to wall clocks (``astimezone`` from UTC is
unambiguous) and derives everything else:

* the offsets a zone uses near a wall time come from sampling UTC instants
  every hour over ±3 days and bisecting each change to the second;
* a wall time's occurrences are the candidates ``naive - offset`` whose wall
  clock round-trips to ``naive``; ambiguous → the earliest;
* a wall time with no occurrence lies in a gap; it is read with the offset in
  effect at the UTC instant just before the transition that skipped it.

Facts established while writing these (tzdata 2026f, years 1990-2037):

* ``local_to_utc`` is strictly increasing over wall times that *exist*: no zone
  skips a wall time and then repeats it (checked exhaustively once over all
  zones; the property below keeps checking it).
* It is **not** monotonic across a gap: with the offset from before the gap,
  02:30 on New York's spring-forward day is 07:30Z while 03:00 is 07:00Z.
  ``test_gap_times_land_after_the_end_of_the_gap`` states exactly what holds.
* Across a fall-back, with the first occurrence, it is monotonic (it jumps
  forward by the length of the repeated hour).
"""

from __future__ import annotations

import functools
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import WEEKDAYS, Message, QuietHours, Reminder, User
from tepat.domain.planning import plan_reminder
from tepat.domain.timerules import (
    in_quiet_hours,
    local_to_utc,
    quiet_period_end,
    utc_to_local,
)
from tepat.domain.zones import available_zones, load_zone

ZONES = sorted(available_zones())
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
MARGIN = timedelta(days=3)  # offsets reach ±14 h and Apia skipped a whole day in 2011


# --------------------------------------------------------------------------
# The independent reference.
# --------------------------------------------------------------------------


def offset_at(zone: zoneinfo.ZoneInfo, instant: datetime) -> timedelta:
    """The zone's UTC offset at a UTC instant (UTC -> local is never ambiguous)."""
    off = instant.astimezone(zone).utcoffset()
    assert off is not None
    return off


def wall(zone: zoneinfo.ZoneInfo, instant: datetime) -> datetime:
    """Naive wall clock at a UTC instant, computed as instant + offset."""
    return (instant + offset_at(zone, instant)).replace(tzinfo=None)


@dataclass(frozen=True)
class Transition:
    at: datetime  # first UTC instant with the new offset
    before: timedelta
    after: timedelta


def transitions(zone: zoneinfo.ZoneInfo, lo: datetime, hi: datetime) -> list[Transition]:
    """Offset changes in [lo, hi): hourly sampling in UTC, bisected to the second."""
    found = []
    u, off = lo, offset_at(zone, lo)
    while u < hi:
        v = u + HOUR
        off_v = offset_at(zone, v)
        if off_v != off:
            a, b = u, v  # offset(a) == off, offset(b) != off
            while b - a > SECOND:
                m = a + (b - a) // 2
                m = m.replace(microsecond=0)
                if offset_at(zone, m) == off:
                    a = m
                else:
                    b = m
            found.append(Transition(b, off, offset_at(zone, b)))
        u, off = v, off_v
    return found


def occurrences(zone: zoneinfo.ZoneInfo, naive: datetime) -> list[datetime]:
    """Every UTC instant at which the wall clock reads ``naive``, earliest first."""
    as_utc = naive.replace(tzinfo=UTC)
    lo, hi = as_utc - MARGIN, as_utc + MARGIN
    offsets = {offset_at(zone, lo)}
    for t in transitions(zone, lo, hi):
        offsets |= {t.before, t.after}
    found = {as_utc - off for off in offsets if wall(zone, as_utc - off) == naive}
    return sorted(found)


def reference_local_to_utc(zone: zoneinfo.ZoneInfo, naive: datetime) -> datetime:
    """RFC 5545 reading of a wall time, computed without fold."""
    found = occurrences(zone, naive)
    if found:
        return found[0]  # ambiguous -> first occurrence
    as_utc = naive.replace(tzinfo=UTC)
    for t in transitions(zone, as_utc - MARGIN, as_utc + MARGIN):
        gap_start = (t.at + t.before).replace(tzinfo=None)
        gap_end = (t.at + t.after).replace(tzinfo=None)
        if gap_start <= naive < gap_end:
            before = offset_at(zone, t.at - SECOND)  # the instant just before the jump
            assert before == t.before
            return as_utc - before
    raise AssertionError(f"{naive} neither occurs nor lies in a gap in {zone.key}")


@functools.cache
def zone_transitions_of_year(name: str, year: int) -> tuple[Transition, ...]:
    zone = load_zone(name)
    return tuple(
        transitions(zone, datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
    )


# --------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------

zone_names = st.sampled_from(ZONES)
days = st.dates(min_value=date(1990, 1, 2), max_value=date(2037, 12, 30))
minute_times = st.builds(time, st.integers(0, 23), st.integers(0, 59))


@st.composite
def zone_and_local(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and a local wall time; half the time within hours of a real transition,

    so gaps and repeated hours are hit far more often than uniform sampling would.
    """
    name = draw(zone_names)
    day = draw(days)
    if draw(st.booleans()):
        near = zone_transitions_of_year(name, day.year)
        if near:
            t = draw(st.sampled_from(near))
            centre = wall(load_zone(name), t.at).replace(second=0, microsecond=0)
            return name, centre + timedelta(minutes=draw(st.integers(-180, 180)))
    return name, datetime.combine(day, draw(minute_times))


@st.composite
def zone_and_instant(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and a UTC instant (on the minute), biased towards transitions likewise."""
    name, local = draw(zone_and_local())
    return name, local.replace(tzinfo=UTC) - offset_at(load_zone(name), local.replace(tzinfo=UTC))


def quiet_hours_strategy() -> st.SearchStrategy[QuietHours]:
    return st.builds(QuietHours, minute_times, minute_times).filter(lambda q: q.start != q.end)


# --------------------------------------------------------------------------
# local_to_utc / utc_to_local.
# --------------------------------------------------------------------------


def test_reference_agrees_with_worked_examples() -> None:
    """The reference itself, checked by hand (New York, 2027).

    02:30 on 2027-03-14 does not exist (02:00 EST jumps to 03:00 EDT); the
    offset before the gap is -05:00, so 07:30Z. 01:30 on 2027-11-07 occurs at
    05:30Z (EDT, -04:00) and again at 06:30Z (EST); the first is 05:30Z.
    """
    ny = load_zone("America/New_York")
    assert occurrences(ny, datetime(2027, 3, 14, 2, 30)) == []
    assert reference_local_to_utc(ny, datetime(2027, 3, 14, 2, 30)) == datetime(
        2027, 3, 14, 7, 30, tzinfo=UTC
    )
    assert occurrences(ny, datetime(2027, 11, 7, 1, 30)) == [
        datetime(2027, 11, 7, 5, 30, tzinfo=UTC),
        datetime(2027, 11, 7, 6, 30, tzinfo=UTC),
    ]


@settings(max_examples=400, deadline=None)
@given(zone_and_local())
def test_local_to_utc_matches_reference(case: tuple[str, datetime]) -> None:
    name, naive = case
    zone = load_zone(name)
    got = local_to_utc(naive.date(), naive.time(), zone)
    assert got.tzinfo is UTC
    assert got == reference_local_to_utc(zone, naive)


@settings(max_examples=300, deadline=None)
@given(zone_and_local())
def test_round_trip_for_existing_times_and_gap_shift(case: tuple[str, datetime]) -> None:
    """Existing wall times round-trip; a skipped one reads later by exactly the gap."""
    name, naive = case
    zone = load_zone(name)
    instant = local_to_utc(naive.date(), naive.time(), zone)
    back = utc_to_local(instant, zone)
    if occurrences(zone, naive):
        assert back == naive
    else:
        as_utc = naive.replace(tzinfo=UTC)
        (t,) = [
            t
            for t in transitions(zone, as_utc - MARGIN, as_utc + MARGIN)
            if (t.at + t.before).replace(tzinfo=None)
            <= naive
            < (t.at + t.after).replace(tzinfo=None)
        ]
        assert back - naive == t.after - t.before


@settings(max_examples=300, deadline=None)
@given(zone_and_local(), st.integers(1, 24 * 60))
def test_strictly_increasing_over_existing_times(
    case: tuple[str, datetime], minutes_later: int
) -> None:
    """For wall times a < b that both exist, local_to_utc(a) < local_to_utc(b)."""
    name, a = case
    b = a + timedelta(minutes=minutes_later)
    zone = load_zone(name)
    assume(occurrences(zone, a) and occurrences(zone, b))
    assert local_to_utc(a.date(), a.time(), zone) < local_to_utc(b.date(), b.time(), zone)


@settings(max_examples=200, deadline=None)
@given(zone_names, st.integers(1990, 2037), st.data())
def test_gap_times_land_after_the_end_of_the_gap(name: str, year: int, data: st.DataObject) -> None:
    """Not monotonic across a gap, precisely: every skipped wall time is read with the
    offset from before, so it lands at or after the first instant past the gap, i.e.
    later than wall times just after the gap (New York: 02:30 -> 07:30Z, 03:00 -> 07:00Z).
    """
    zone = load_zone(name)
    gaps = [t for t in zone_transitions_of_year(name, year) if t.after > t.before]
    assume(gaps)
    t = data.draw(st.sampled_from(gaps))
    gap_start = wall(zone, t.at - SECOND) + SECOND
    size = t.after - t.before
    into = timedelta(seconds=data.draw(st.integers(0, int(size.total_seconds()) - 1)))
    skipped = gap_start + into
    assert occurrences(zone, skipped) == []
    got = local_to_utc(skipped.date(), skipped.time(), zone)
    assert got == t.at + into
    just_after = gap_start + size  # first wall time after the gap, reached at t.at
    assert local_to_utc(just_after.date(), just_after.time(), zone) == t.at
    assert got >= t.at


def test_new_york_gap_is_not_monotonic() -> None:
    """Worked example: 2027-03-14 New York, 02:30 (skipped, read as EST) is 07:30Z while
    03:00 EDT is 07:00Z: a later wall time, an earlier instant."""
    ny = load_zone("America/New_York")
    assert local_to_utc(date(2027, 3, 14), time(2, 30), ny) == datetime(
        2027, 3, 14, 7, 30, tzinfo=UTC
    )
    assert local_to_utc(date(2027, 3, 14), time(3, 0), ny) == datetime(
        2027, 3, 14, 7, 0, tzinfo=UTC
    )


# --------------------------------------------------------------------------
# Quiet hours.
# --------------------------------------------------------------------------


def quiet_minutes(quiet: QuietHours) -> set[int]:
    """Minutes of the day inside [start, end), walking forward from start (wraps)."""
    start = quiet.start.hour * 60 + quiet.start.minute
    end = quiet.end.hour * 60 + quiet.end.minute
    return {(start + k) % 1440 for k in range((end - start) % 1440)}


@settings(max_examples=500, deadline=None)
@given(quiet_hours_strategy(), minute_times)
def test_in_quiet_hours_matches_minute_set(quiet: QuietHours, at: time) -> None:
    expected = at.hour * 60 + at.minute in quiet_minutes(quiet)
    assert in_quiet_hours(at, quiet) is expected


@given(minute_times, minute_times)
def test_no_or_empty_quiet_hours_never_quiet(at: time, edge: time) -> None:
    assert not in_quiet_hours(at, None)
    assert not in_quiet_hours(at, QuietHours(edge, edge))


@st.composite
def quiet_near_instant(draw: st.DrawFn) -> tuple[str, datetime, QuietHours]:
    """An instant and quiet hours whose end is often close to the instant's wall
    time, so the end falls in gaps and repeated hours now and then."""
    name, instant = draw(zone_and_instant())
    if draw(st.booleans()):
        local = wall(load_zone(name), instant)
        end_dt = local + timedelta(minutes=draw(st.integers(-90, 90)))
        end = end_dt.time().replace(second=0)
    else:
        end = draw(minute_times)
    start = draw(minute_times.filter(lambda s: s != end))
    return name, instant, QuietHours(start, end)


@settings(max_examples=400, deadline=None)
@given(quiet_near_instant())
def test_quiet_period_end(case: tuple[str, datetime, QuietHours]) -> None:
    """The end of the quiet period holding ``instant`` is after it and is the next
    instant at which the wall clock reads ``quiet.end`` (when that wall time exists)."""
    name, instant, quiet = case
    zone = load_zone(name)
    local = utc_to_local(instant, zone)
    assume(in_quiet_hours(local.time(), quiet))
    got = quiet_period_end(local, quiet, zone)
    assert got > instant
    # under a day of wall time, plus at most a day of offset change (Apia 2011)
    assert got - instant < timedelta(days=2)
    nearby = (local.date() - timedelta(days=1), local.date(), local.date() + timedelta(days=1))
    readings = [c for d in nearby for c in occurrences(zone, datetime.combine(d, quiet.end))]
    # No instant strictly between reads quiet.end: got is the *next* end of quiet.
    assert not [c for c in readings if instant < c < got]
    if wall(zone, got).time() != quiet.end:
        # quiet.end was skipped by a gap that day: got is the gap reading of it
        assert any(
            not occurrences(zone, datetime.combine(d, quiet.end))
            and got == reference_local_to_utc(zone, datetime.combine(d, quiet.end))
            for d in nearby[1:]
        )


def test_quiet_end_in_repeated_hour_on_second_pass() -> None:
    """Worked example (bug found and fixed): New York 2027-11-07 repeats 01:00-02:00.
    Quiet hours 22:00-01:30. At 06:15Z the clock reads 01:15 EST (second pass), still
    quiet; the period ends when it next reads 01:30, i.e. 01:30 EST = 06:30Z. Before the
    fix the first occurrence (01:30 EDT = 05:30Z) was returned, an instant in the past."""
    ny = load_zone("America/New_York")
    quiet = QuietHours(time(22, 0), time(1, 30))
    now = datetime(2027, 11, 7, 6, 15, tzinfo=UTC)
    local = utc_to_local(now, ny)
    assert local == datetime(2027, 11, 7, 1, 15)
    assert quiet_period_end(local, quiet, ny) == datetime(2027, 11, 7, 6, 30, tzinfo=UTC)
    # First pass: 01:15 EDT = 05:15Z ends at 01:30 EDT = 05:30Z.
    first = utc_to_local(datetime(2027, 11, 7, 5, 15, tzinfo=UTC), ny)
    assert quiet_period_end(first, quiet, ny) == datetime(2027, 11, 7, 5, 30, tzinfo=UTC)


# --------------------------------------------------------------------------
# Planning.
# --------------------------------------------------------------------------

WINDOW = timedelta(hours=48)
NOW = datetime(1989, 1, 1, tzinfo=UTC)
policies = st.sampled_from([CategoryPolicy("meal", quiet_hours=q) for q in QuietPolicy])

day_sets = st.lists(st.sampled_from(WEEKDAYS), min_size=1, unique=True).map(
    lambda ds: tuple(d for d in WEEKDAYS if d in ds)
)


@st.composite
def planning_case(draw: st.DrawFn) -> tuple[User, Reminder, CategoryPolicy, datetime]:
    name, start = draw(zone_and_instant())
    if draw(st.booleans()):
        # a reminder time near the wall clock at ``start`` (often near a transition),
        # so reminders in gaps and repeated hours get planned
        near = wall(load_zone(name), start + timedelta(minutes=draw(st.integers(-120, 120))))
        at = near.time().replace(second=0)
    else:
        at = draw(minute_times)
    start -= timedelta(hours=draw(st.integers(0, 30)))  # so the window straddles transitions
    quiet = draw(st.none() | quiet_hours_strategy())
    user = User("u1", name, quiet_hours=quiet, plan_version=draw(st.integers(1, 3)))
    reminder = Reminder("u1", "r1", "meal", at, "t", "b", days=draw(day_sets))
    return user, reminder, draw(policies), start


Case = tuple[User, Reminder, CategoryPolicy, datetime]


def plan(
    user: User, reminder: Reminder, policy: CategoryPolicy, start: datetime, end: datetime
) -> list[Message]:
    return list(plan_reminder(user, reminder, policy, start, end, NOW))


@settings(max_examples=300, deadline=None)
@given(planning_case())
def test_plan_reminder_window(case: Case) -> None:
    user, reminder, policy, start = case
    end = start + WINDOW
    zone = load_zone(user.timezone)
    messages = plan(user, reminder, policy, start, end)
    dates = [m.local_date for m in messages]
    assert len(dates) == len(set(dates)), "at most one message per local date"
    live_keys = [m.live_key for m in messages]
    assert len(live_keys) == len(set(live_keys))
    for m in messages:
        assert m.local_date is not None
        nominal = reference_local_to_utc(zone, datetime.combine(m.local_date, reminder.local_time))
        assert start <= nominal < end
        assert reminder.fires_on(m.local_date)
        assert m.scheduled_at >= nominal  # quiet hours only ever defer
        local = utc_to_local(nominal, zone).time()
        quiet = in_quiet_hours(local, user.quiet_hours)
        if not quiet or policy.quiet_hours is QuietPolicy.BYPASS:
            assert (m.scheduled_at, m.status, m.status_reason) == (nominal, "pending", None)
        elif policy.quiet_hours is QuietPolicy.DROP:
            assert (m.scheduled_at, m.status, m.status_reason) == (
                nominal,
                "skipped",
                "quiet_hours",
            )
        else:
            assert user.quiet_hours is not None
            assert m.scheduled_at > nominal
            assert m.status == "pending"
            assert not in_quiet_hours(utc_to_local(m.scheduled_at, zone).time(), user.quiet_hours)
    # Completeness: every firing date whose instant lies in the window is planned.
    first = wall(zone, start).date() - timedelta(days=2)
    expected = set()
    for n in range((wall(zone, end).date() - first).days + 3):
        d = first + timedelta(days=n)
        at = reference_local_to_utc(zone, datetime.combine(d, reminder.local_time))
        if reminder.fires_on(d) and start <= at < end:
            expected.add(d)
    assert set(dates) == expected


@settings(max_examples=200, deadline=None)
@given(planning_case())
def test_planning_twice_gives_identical_ids(case: Case) -> None:
    user, reminder, policy, start = case
    end = start + WINDOW
    assert plan(user, reminder, policy, start, end) == plan(user, reminder, policy, start, end)
    assert [m.id for m in plan(user, reminder, policy, start, end)] == [
        m.id for m in plan(user, reminder, policy, start, end)
    ]


@settings(max_examples=200, deadline=None)
@given(planning_case(), st.integers(1, 47 * 60))
def test_overlapping_windows_union(case: Case, shift: int) -> None:
    """Planning [s, s+48h) and [s+shift, s+shift+48h), de-duplicated by live_key,
    is exactly the plan of [s, s+shift+48h)."""
    user, reminder, policy, start = case
    later = start + timedelta(minutes=shift)
    merged: dict[str | None, Message] = {}
    for m in plan(user, reminder, policy, start, start + WINDOW) + plan(
        user, reminder, policy, later, later + WINDOW
    ):
        if m.live_key in merged:
            assert merged[m.live_key] == m  # the same intent is the same message
        merged[m.live_key] = m
    union = plan(user, reminder, policy, start, later + WINDOW)
    assert sorted(merged.values(), key=lambda m: str(m.live_key)) == sorted(
        union, key=lambda m: str(m.live_key)
    )


def test_transition_scan_sees_consecutive_dst_changes() -> None:
    """The reference's scanner finds New York's 2027 transitions at 07:00Z and 06:00Z."""
    ts = zone_transitions_of_year("America/New_York", 2027)
    assert [(t.at, t.before, t.after) for t in ts] == [
        (datetime(2027, 3, 14, 7, tzinfo=UTC), timedelta(hours=-5), timedelta(hours=-4)),
        (datetime(2027, 11, 7, 6, tzinfo=UTC), timedelta(hours=-4), timedelta(hours=-5)),
    ]
    assert all(a.at < b.at for a, b in pairwise(ts))
