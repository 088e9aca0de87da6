"""Plan runs read only the users whose planning mark does not cover the window, and
still plan every intended message exactly once (tepat/services/planning/creator.py).

Each test checks the promise itself: after any sequence of runs and changes, the
live messages are exactly what a plan from scratch would intend, none missing,
none twice. A real runtime (SQLite, embedded broker, fake clock).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

from tepat.clock import FakeClock
from tepat.domain.categories import Categories, CategoryPolicy, QuietPolicy
from tepat.domain.models import MessageStatus, Reminder, User
from tepat.domain.planning import plan_user
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime, open_runtime
from tepat.services import accounts
from tepat.services.planning.creator import Creator
from tests.api.conftest import make_settings
from tests.support.fake_push import FakePush

START = datetime(2027, 3, 1, 0, 0, tzinfo=UTC)
HORIZON = timedelta(hours=48)
USERS = ("ana", "budi", "citra")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def rt(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Runtime]:
    async with open_runtime(make_settings(tmp_path), clock=clock, push=FakePush()) as runtime:
        yield runtime


def reminder(uid: str, rid: str, at: time, category: str = "meal", **kw: object) -> Reminder:
    return Reminder(uid, rid, category, at, f"{rid} title", f"{rid} body", **kw)  # type: ignore[arg-type]


async def seed(rt: Runtime) -> None:
    """Users written straight to the store, as an import does: no re-plan, no mark."""
    zones = {"ana": "UTC", "budi": "Asia/Jakarta", "citra": "America/New_York"}
    times = {"ana": time(0, 5), "budi": time(12, 0), "citra": time(21, 30)}
    for uid in USERS:
        await rt.store.upsert_user(User(uid, zones[uid], created_at=START, updated_at=START))
        await rt.store.upsert_reminder(reminder(uid, "r1", times[uid]))
        await rt.store.upsert_reminder(
            reminder(uid, "weekdays", time(7, 45), days=("mon", "tue", "wed", "thu", "fri"))
        )


Intent = tuple[str, str, str, datetime]  # user, reminder, local date, nominal


async def live_intents(rt: Runtime, since: datetime) -> Counter[Intent]:
    found: Counter[Intent] = Counter()
    for uid in USERS:
        page = await rt.store.list_messages(MessageQuery(user_id=uid, limit=500))
        for m in page.items:
            if m.status is MessageStatus.CANCELLED or m.nominal < since:
                continue
            assert m.reminder_id is not None and m.local_date is not None
            found[(uid, m.reminder_id, str(m.local_date), m.nominal)] += 1
    return found


async def intended(rt: Runtime, since: datetime, until: datetime) -> Counter[Intent]:
    """What a plan from scratch of ``[since, until)`` makes of the store's records now."""
    pairs = []
    for uid in USERS:
        user = await rt.store.get_user(uid)
        assert user is not None
        pairs.append((user, await rt.store.list_reminders(uid)))
    return Counter(
        (
            m.user_id,
            m.reminder_id or "",
            m.local_date.isoformat() if m.local_date else "",
            m.nominal,
        )
        for user, reminders in pairs
        for m in plan_user(user, reminders, rt.categories, since, until, since)
    )


async def assert_exact(rt: Runtime, clock: FakeClock) -> None:
    now = clock.now()
    live = await live_intents(rt, now)
    assert max(live.values(), default=1) == 1, "an intent planned twice"
    # Beyond the last run's end nothing is demanded; inside it, everything.
    assert +(await intended(rt, now, now + HORIZON)) == Counter(
        {k: 1 for k in live if k[3] < now + HORIZON}
    )


async def test_a_second_run_with_nothing_new_reads_no_user(rt: Runtime, clock: FakeClock) -> None:
    await seed(rt)
    first = await rt.creator.plan_ahead()
    assert first.users_planned == len(USERS) and first.created > 0
    again = await rt.creator.plan_ahead()
    assert (again.users_planned, again.created, again.existing) == (0, 0, 0)
    await assert_exact(rt, clock)


async def test_the_horizon_moving_plans_only_the_users_with_something_in_the_new_slice(
    rt: Runtime, clock: FakeClock
) -> None:
    await seed(rt)
    await rt.creator.plan_ahead()
    # ana's 00:05 UTC on the third day enters the window; nobody else's does.
    clock.advance(timedelta(minutes=10))
    moved = await rt.creator.plan_ahead()
    assert (moved.users_planned, moved.created, moved.existing) == (1, 1, 0)
    await assert_exact(rt, clock)
    for _ in range(6 * 24):  # a whole day more, a run every 10 minutes
        clock.advance(timedelta(minutes=10))
        step = await rt.creator.plan_ahead()
        assert step.existing == 0  # a user's window starts where their mark ends
        await assert_exact(rt, clock)


async def test_changes_through_the_services_between_runs_leave_exactly_the_intended_messages(
    rt: Runtime, clock: FakeClock
) -> None:
    await seed(rt)
    await rt.creator.plan_ahead()
    await accounts.put_reminder(
        rt, "ana", "r2", category="mood", local_time="18:00", title="t", body="b"
    )
    await accounts.put_reminder(
        rt, "budi", "r1", category="meal", local_time="06:30", title="t", body="b"
    )
    await accounts.delete_reminder(rt, "citra", "r1")
    await accounts.put_user(rt, "citra", timezone="Europe/Paris")
    after_changes = await rt.creator.plan_ahead()
    assert after_changes.users_planned == 0  # each re-plan planned its user and marked them
    await assert_exact(rt, clock)
    for minutes in (10, 70, 600, 1440):
        clock.advance(timedelta(minutes=minutes))
        await rt.creator.plan_ahead()
        await assert_exact(rt, clock)
    await accounts.put_user(rt, "ana", timezone="UTC", enabled=False)
    clock.advance(timedelta(hours=30))
    off = await rt.creator.plan_ahead()
    await accounts.put_user(rt, "ana", timezone="UTC", enabled=True)
    await rt.creator.plan_ahead()
    await assert_exact(rt, clock)
    assert off.users_planned <= len(USERS)


async def test_a_change_between_a_runs_read_and_its_mark_is_planned_by_the_next_run(
    rt: Runtime, clock: FakeClock
) -> None:
    """A reminder written while a run is planning the user: the run's mark, computed
    from the older read, is refused, so the next run plans the new reminder (even
    when the writer did not re-plan, as a store-level import does)."""
    await seed(rt)
    store = rt.store
    real = store.reminders_for_users
    written = False

    async def read_then_change(user_ids: Sequence[str]) -> dict[str, list[Reminder]]:
        nonlocal written
        found = await real(user_ids)
        if not written:
            written = True
            await store.upsert_reminder(reminder("budi", "late", time(23, 0)))
        return found

    store.reminders_for_users = read_then_change  # type: ignore[method-assign]
    try:
        first = await rt.creator.plan_ahead()
    finally:
        store.reminders_for_users = real  # type: ignore[method-assign]
    assert first.users_planned == len(USERS)
    target = (await store.get_plan_targets(["budi"])).get("budi")
    assert target is not None and target.mark is None
    second = await rt.creator.plan_ahead()
    assert second.users_planned == 1 and second.created == 2  # budi's two 23:00 dates
    await assert_exact(rt, clock)


async def test_a_create_that_lost_the_race_to_another_re_plans_what_was_planned_meanwhile(
    rt: Runtime, clock: FakeClock
) -> None:
    """Two requests create one user at once; the other's reminders are planned in its
    zone before this one's upsert writes another zone. This request read no user, yet
    it must re-plan, or the messages keep the old zone; its write did not insert the
    user, so it does not say it created it (the API's 200, not 201)."""
    await seed(rt)
    await rt.creator.plan_ahead()
    store = rt.store
    real = store.get_user
    reads = 0

    async def read_before_the_other_insert(user_id: str) -> User | None:
        nonlocal reads
        reads += 1
        return None if reads == 1 else await real(user_id)

    store.get_user = read_before_the_other_insert  # type: ignore[method-assign]
    try:
        user, created = await accounts.put_user(rt, "ana", timezone="Asia/Tokyo")
    finally:
        store.get_user = real  # type: ignore[method-assign]
    assert not created and user.timezone == "Asia/Tokyo"
    await assert_exact(rt, clock)


async def test_a_new_user_with_nothing_to_plan_takes_no_plan_version(rt: Runtime) -> None:
    """The common sign-up: one upsert, no re-plan (the plan run marks the user)."""
    user, created = await accounts.put_user(rt, "dewi", timezone="UTC")
    assert created and user.plan_version == 1  # the default: none taken
    assert (await rt.store.get_user("dewi")) == user


async def test_a_replan_racing_a_run_never_leaves_a_mark_that_skips_its_change(
    rt: Runtime, clock: FakeClock
) -> None:
    await seed(rt)
    store = rt.store
    real = store.set_plan_marks
    raced = False

    async def replan_first(marks):  # type: ignore[no-untyped-def]
        nonlocal raced
        if not raced:
            raced = True
            await accounts.put_reminder(
                rt, "ana", "r1", category="meal", local_time="15:00", title="t", body="b"
            )
        return await real(marks)

    store.set_plan_marks = replan_first  # type: ignore[method-assign]
    try:
        await rt.creator.plan_ahead()
    finally:
        store.set_plan_marks = real  # type: ignore[method-assign]
    await rt.creator.plan_ahead()
    await assert_exact(rt, clock)


async def test_two_runs_at_once_plan_each_local_date_once(rt: Runtime, clock: FakeClock) -> None:
    await seed(rt)
    a, b = await asyncio.gather(rt.creator.plan_ahead(), rt.creator.plan_ahead())
    expected = sum((await intended(rt, START, START + HORIZON)).values())
    assert a.created + b.created == expected
    await assert_exact(rt, clock)


async def test_a_configuration_change_makes_every_mark_stop_counting(
    rt: Runtime, clock: FakeClock
) -> None:
    """A category that appears in the configuration (a new process start) gets its
    reminders planned although every user's mark was standing."""
    await seed(rt)
    await rt.store.upsert_reminder(reminder("ana", "walk", time(9, 0), category="walking"))
    await rt.creator.plan_ahead()
    assert (await rt.creator.plan_ahead()).users_planned == 0
    walking = Categories([*rt.categories, CategoryPolicy("walking", QuietPolicy.DEFER)])
    restarted = Creator(rt.store, rt.outbox, walking, clock, horizon=HORIZON)
    result = await restarted.plan_ahead()
    assert result.users_planned == len(USERS)
    assert result.created == 2  # ana's walks on two dates; the rest was there
    assert (await restarted.plan_ahead()).users_planned == 0


class Died(BaseException):
    """The scheduler process died here (not an Exception: nothing catches it)."""


async def test_a_run_that_dies_before_its_marks_leaves_the_next_run_planning_all(
    rt: Runtime, clock: FakeClock
) -> None:
    await seed(rt)
    store = rt.store
    real = store.set_plan_marks

    async def die(marks):  # type: ignore[no-untyped-def]
        raise Died

    store.set_plan_marks = die  # type: ignore[method-assign]
    try:
        with pytest.raises(Died):
            await rt.creator.plan_ahead()
    finally:
        store.set_plan_marks = real  # type: ignore[method-assign]
    again = await rt.creator.plan_ahead()
    assert again.users_planned == len(USERS) and again.created == 0  # all written before
    await assert_exact(rt, clock)
    assert (await rt.creator.plan_ahead()).users_planned == 0
