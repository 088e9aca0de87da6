"""Store contract: planning marks (which users a plan run must read) and user ranges."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, time, timedelta

from tepat.domain.models import QuietHours, Reminder, User
from tepat.domain.planning import NOTHING_AHEAD
from tepat.ports.repositories.users import PlanMark, PlanTarget
from tepat.ports.store import Store
from tests.contract import records

T0 = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)
FP = "fp-1"


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


async def add_user(store: Store, uid: str, **fields: object) -> None:
    await store.upsert_user(User(uid, "UTC", created_at=T0, updated_at=T0, **fields))  # type: ignore[arg-type]


def reminder(uid: str, rid: str = "r1", **fields: object) -> Reminder:
    return records.reminder(
        rid,
        uid,
        local_time=time(8),
        title="t",
        body="b",
        created_at=None,
        updated_at=None,
        **fields,
    )


async def target(store: Store, uid: str) -> PlanTarget:
    return (await store.get_plan_targets([uid]))[uid]


async def mark(store: Store, uid: str, frm: float = 0, nxt: float = 48, fp: str = FP) -> int:
    t = await target(store, uid)
    return await store.set_plan_marks([PlanMark(uid, t.stamp, hours(frm), hours(nxt), fp)])


async def to_plan(
    store: Store, start: float = 0, end: float = 48, fp: str = FP, **kw: object
) -> list[str]:
    pages = store.users_to_plan(hours(start), hours(end), fp, **kw)  # type: ignore[arg-type]
    return [t.user.user_id async for page in pages for t in page]


async def test_a_new_user_has_no_mark_and_is_to_plan(store: Store) -> None:
    await add_user(store, "u1")
    t = await target(store, "u1")
    assert (t.user.user_id, t.mark) == ("u1", None)
    assert await to_plan(store) == ["u1"]
    assert await store.get_plan_targets(["nobody"]) == {}


async def test_a_mark_round_trips_and_covers_windows_inside_it(store: Store) -> None:
    await add_user(store, "u1")
    assert await mark(store, "u1", 0, 48) == 1
    t = await target(store, "u1")
    assert t.mark == PlanMark("u1", t.stamp, hours(0), hours(48), FP)
    assert await to_plan(store, 0, 48) == []
    assert await to_plan(store, 1, 47) == []
    assert await to_plan(store, -1, 48) == ["u1"]  # starts before the mark
    assert await to_plan(store, 0, 48.5) == ["u1"]  # ends past it
    assert await to_plan(store, 0, 48, fp="fp-2") == ["u1"]  # another configuration


async def test_marks_with_sub_millisecond_bounds_never_overstate_coverage(store: Store) -> None:
    # A mark may be kept at a coarser precision, but only ever narrower.
    await add_user(store, "u1")
    frm, nxt = T0 + timedelta(microseconds=500), T0 + timedelta(hours=1, microseconds=500)
    t = await target(store, "u1")
    await store.set_plan_marks([PlanMark("u1", t.stamp, frm, nxt, FP)])
    start, end = T0 + timedelta(microseconds=100), T0 + timedelta(hours=1, microseconds=900)
    assert [u async for u in store.users_to_plan(start, end, FP)] != []


async def test_every_planning_input_change_drops_the_mark(store: Store) -> None:
    for uid in ("zone", "quiet", "off", "version", "add", "edit", "delete", "other"):
        await add_user(store, uid)
    for uid in ("edit", "delete"):
        await store.upsert_reminder(reminder(uid))
    for uid in ("zone", "quiet", "off", "version", "add", "edit", "delete", "other"):
        assert await mark(store, uid) == 1
    await store.upsert_user(User("zone", "Asia/Jakarta", created_at=T0, updated_at=T0))
    await store.upsert_user(
        User("quiet", "UTC", quiet_hours=QuietHours(time(22), time(6)), created_at=T0)
    )
    await store.upsert_user(User("off", "UTC", enabled=False, created_at=T0, updated_at=T0))
    await store.start_replan("version")
    await store.upsert_reminder(reminder("add"))
    await store.upsert_reminder(dataclasses.replace(reminder("edit"), local_time=time(9, 0)))
    assert await store.delete_reminder("delete", "r1")
    assert await to_plan(store) == sorted(
        ["zone", "quiet", "off", "version", "add", "edit", "delete"]
    )
    assert (await target(store, "other")).mark is not None


async def test_a_mark_computed_before_a_change_is_refused(store: Store) -> None:
    await add_user(store, "u1")
    await add_user(store, "u2")
    stale = await target(store, "u1")
    read = await target(store, "u2")
    await store.upsert_reminder(reminder("u1"))  # after the plan run read u1
    await store.start_replan("u2")  # a re-plan of u2 meanwhile
    marks = [
        PlanMark("u1", stale.stamp, hours(0), hours(48), FP),
        PlanMark("u2", read.stamp, hours(0), hours(48), FP),
    ]
    assert await store.set_plan_marks(marks) == 0
    assert await to_plan(store) == ["u1", "u2"]
    fresh = await target(store, "u1")
    assert fresh.stamp != stale.stamp and fresh.mark is None
    assert await store.set_plan_marks([PlanMark("u1", fresh.stamp, hours(0), hours(48), FP)]) == 1
    assert await to_plan(store) == ["u2"]
    assert await store.set_plan_marks([]) == 0


async def test_users_to_plan_pages_in_id_order_within_a_range(store: Store) -> None:
    ids = [f"user-{n:02d}" for n in range(10)]
    for uid in ids:
        await add_user(store, uid)
    await mark(store, "user-04")
    pages = [
        [t.user.user_id for t in page]
        async for page in store.users_to_plan(hours(0), hours(48), FP, batch_size=3)
    ]
    assert [len(p) for p in pages] == [3, 3, 3]
    assert [uid for p in pages for uid in p] == [u for u in ids if u != "user-04"]
    assert await to_plan(store, after="user-02", until="user-06") == [
        "user-03",
        "user-05",
        "user-06",
    ]


async def test_user_id_bounds_split_users_into_ranges(store: Store) -> None:
    assert await store.user_id_bounds(4) == []
    ids = [f"user-{n:03d}" for n in range(100)]
    for uid in ids:
        await add_user(store, uid)
    assert await store.user_id_bounds(1) == []
    bounds = await store.user_id_bounds(4)
    assert bounds == ["user-024", "user-049", "user-074"]
    edges = ["", *bounds, None]
    covered: list[str] = []
    for after, until in itertools.pairwise(edges):
        part = await to_plan(store, after=after, until=until)
        assert 20 <= len(part) <= 30
        covered += part
    assert covered == ids


async def test_bulk_import_writes_drop_the_mark_too(store: Store) -> None:
    for uid in ("updated", "reminded", "other"):
        await add_user(store, uid)
        assert await mark(store, uid) == 1
    await store.write_records([User("updated", "Asia/Tokyo", created_at=T0, updated_at=T0)], [], [])
    await store.write_records([], [], [reminder("reminded")])
    assert await to_plan(store) == ["reminded", "updated"]


async def test_a_mark_of_nothing_ahead_round_trips_and_covers_every_later_window(
    store: Store,
) -> None:
    await add_user(store, "idle")
    t = await target(store, "idle")
    await store.set_plan_marks([PlanMark("idle", t.stamp, hours(0), NOTHING_AHEAD, FP)])
    stored = (await target(store, "idle")).mark
    assert stored is not None and stored.plan_next_at >= NOTHING_AHEAD - timedelta(seconds=1)
    assert await to_plan(store, 1, 24 * 365 * 100) == []
