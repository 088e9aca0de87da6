"""Store contract: many users' records at once (``BulkImportRepository``, the bulk import).

Each batch write must leave the store exactly as the single writes would, in input order.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, time, timedelta

from tepat.domain.models import QuietHours, User
from tepat.ports.repositories.bulk_import import NewUsersPlan
from tepat.ports.repositories.users import PlanMark
from tepat.ports.store import Store
from tests.contract.records import device, msg, reminder

T0 = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)


def user(user_id: str, tz: str = "UTC", **fields: object) -> User:
    base = User(user_id, tz, created_at=T0, updated_at=T0)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


async def upsert_users(store: Store, users: list[User]) -> list[bool]:
    return (await store.write_records(users, [], [])).created


# --------------------------------------------------------------------------- users


async def test_upsert_users_reports_which_it_created_and_stores_every_field(
    store: Store,
) -> None:
    await store.upsert_user(user("old", plan_version=7))
    later = T0 + timedelta(hours=1)
    batch = [
        user("a", "Asia/Jakarta", locale="id", quiet_hours=QuietHours(time(22), time(6))),
        user("old", "Europe/Paris", enabled=False, created_at=later, updated_at=later),
        user("b"),
    ]
    assert await upsert_users(store, batch) == [True, False, True]
    assert await store.get_user("a") == batch[0]
    # Replacing keeps created_at and never lowers the plan version.
    assert await store.get_user("old") == dataclasses.replace(
        batch[1], created_at=T0, plan_version=7
    )
    assert await upsert_users(store, batch) == [False, False, False]
    assert await upsert_users(store, []) == []


async def test_upsert_users_the_same_id_twice_ends_as_the_later(store: Store) -> None:
    created = await upsert_users(store, [user("a", "UTC"), user("a", "Asia/Tokyo")])
    assert created == [True, False]
    stored = await store.get_user("a")
    assert stored is not None and stored.timezone == "Asia/Tokyo"


async def test_concurrent_imports_of_a_new_user_create_it_once(store: Store) -> None:
    results = await asyncio.gather(
        *(upsert_users(store, [user("a"), user(f"x{n}")]) for n in range(6))
    )
    assert sum(r[0] for r in results) == 1
    assert all(r[1] for r in results)


# --------------------------------------------------------------------------- devices


async def test_register_devices_keeps_one_active_binding_per_token(store: Store) -> None:
    await store.register_device(device("alice", "phone", "tok-1"))
    await store.register_device(device("alice", "tablet", "tok-kept"))
    await store.write_records(
        [],
        [
            device("bob", "phone", "tok-1"),  # alice's token moves to bob
            device("carol", "phone", "tok-3"),  # same device id, another user: separate
            device("alice", "tablet", "tok-kept"),  # unchanged binding stays
        ],
        [],
    )
    alice = {d.device_id: d for d in await store.list_devices("alice")}
    assert (alice["phone"].active, alice["phone"].deactivated_reason) == (False, "replaced")
    assert (alice["tablet"].active, alice["tablet"].push_token) == (True, "tok-kept")
    active = await store.active_devices(["alice", "bob", "carol"])
    assert {u: [(d.device_id, d.push_token) for d in ds] for u, ds in active.items()} == {
        "alice": [("tablet", "tok-kept")],
        "bob": [("phone", "tok-1")],
        "carol": [("phone", "tok-3")],
    }


async def test_register_devices_in_input_order_for_a_repeated_token(store: Store) -> None:
    await store.write_records(
        [], [device("a", "d1", "tok"), device("b", "d1", "tok"), device("a", "d2", "t2")], []
    )
    active = await store.active_devices(["a", "b"])
    assert {u: [(d.device_id, d.push_token) for d in ds] for u, ds in active.items()} == {
        "a": [("d2", "t2")],
        "b": [("d1", "tok")],
    }


async def test_register_devices_swapping_tokens_between_two_devices(store: Store) -> None:
    await store.register_device(device("a", "d1", "t1"))
    await store.register_device(device("a", "d2", "t2"))
    await store.write_records([], [device("a", "d1", "t2"), device("a", "d2", "t1")], [])
    devices = {d.device_id: (d.push_token, d.active) for d in await store.list_devices("a")}
    assert devices == {"d1": ("t2", True), "d2": ("t1", True)}


async def test_register_devices_reactivates_and_resets_failures(store: Store) -> None:
    await store.register_device(device("a", "d1", "tok"))
    await store.record_device_outcome("tok", ok=False, max_failures=1, reason="gone")
    await store.write_records([], [device("a", "d1", "tok")], [])
    [d] = await store.list_devices("a")
    assert (d.active, d.consecutive_failures, d.deactivated_reason) == (True, 0, None)


async def test_concurrent_batches_naming_one_token_leave_one_active_binding(
    store: Store,
) -> None:
    users = [f"u{n}" for n in range(6)]
    await asyncio.gather(*(store.write_records([], [device(u, "phone", "tok")], []) for u in users))
    active = await store.active_devices(users)
    assert sum(len(ds) for ds in active.values()) == 1


# --------------------------------------------------------------------------- reminders


async def test_upsert_reminders_stores_each_and_keeps_created_at(store: Store) -> None:
    await store.upsert_reminder(reminder("r1", "u1"))
    later = T0 + timedelta(hours=2)
    batch = [
        reminder("r1", "u1", local_time=time(9), version=2, created_at=later, updated_at=later),
        reminder("r2", "u1", days=("mon",), data={"k": [1]}, label="x", enabled=False),
        reminder("r1", "u2"),
    ]
    await store.write_records([], [], batch)
    assert await store.get_reminder("u1", "r1") == dataclasses.replace(batch[0], created_at=T0)
    assert await store.get_reminder("u1", "r2") == batch[1]
    assert await store.get_reminder("u2", "r1") == batch[2]
    await store.write_records([], [], [])


async def test_upsert_reminders_the_same_one_twice_ends_as_the_later(store: Store) -> None:
    many = [reminder("r1", f"u{n}") for n in range(700)]  # more than one statement's rows
    await store.write_records([], [], [*many, reminder("r1", "u1", title="Later", version=2)])
    stored = await store.get_reminder("u1", "r1")
    assert stored is not None and (stored.title, stored.version) == ("Later", 2)
    assert len(await store.reminders_for_users([f"u{n}" for n in range(700)])) == 700


# --------------------------------------------------------------------------- planning marks


async def _marked(store: Store, user_id: str) -> None:
    t = (await store.get_plan_targets([user_id]))[user_id]
    mark = PlanMark(user_id, t.stamp, T0, T0 + timedelta(hours=48), "fp")
    assert await store.set_plan_marks([mark]) == 1


async def test_get_plan_targets_reads_each_user_with_stamp_and_mark(store: Store) -> None:
    await upsert_users(store, [user("a"), user("b")])
    await _marked(store, "a")
    targets = await store.get_plan_targets(["a", "b", "nobody"])
    assert set(targets) == {"a", "b"}
    for user_id, t in targets.items():
        assert t.user.user_id == user_id
    assert targets["a"].mark is not None and targets["b"].mark is None
    assert await store.get_plan_targets([]) == {}


async def test_batch_writes_drop_the_planning_mark_as_single_writes_do(store: Store) -> None:
    await upsert_users(store, [user("a"), user("b"), user("c")])
    for user_id in ("a", "b", "c"):
        await _marked(store, user_id)
    await upsert_users(store, [user("a", "Asia/Tokyo")])
    await store.write_records([], [], [reminder("r1", "b")])
    await store.write_records([], [device("c", "phone", "tok")], [])  # not a planning input
    targets = await store.get_plan_targets(["a", "b", "c"])
    assert targets["a"].mark is None
    assert targets["b"].mark is None
    assert targets["c"].mark is not None


# --------------------------------------------------------------------------- all three at once


async def test_write_records_writes_users_then_devices_then_reminders(store: Store) -> None:
    await store.upsert_user(user("old"))
    await store.register_device(device("old", "phone", "tok-moves"))
    await _marked(store, "old")
    users = [user("new", "Asia/Jakarta"), user("old", "Europe/Paris")]
    devices = [device("new", "phone", "tok-moves"), device("old", "tablet", "tok-2")]
    reminders = [reminder("r1", "new"), reminder("r1", "old", days=("sat", "sun"))]
    written = await store.write_records(users, devices, reminders)
    assert written.created == [True, False]
    assert (await store.get_user("new"), await store.get_user("old")) == (
        users[0],
        dataclasses.replace(users[1], created_at=T0),
    )
    active = await store.active_devices(["new", "old"])
    assert {u: [(d.device_id, d.push_token) for d in ds] for u, ds in active.items()} == {
        "new": [("phone", "tok-moves")],  # moved from old's phone, as register_devices does
        "old": [("tablet", "tok-2")],
    }
    assert await store.get_reminder("new", "r1") == reminders[0]
    assert await store.get_reminder("old", "r1") == reminders[1]
    targets = await store.get_plan_targets(["old"])
    assert targets["old"].mark is None  # a planning input changed: the mark drops
    # Stamps, where the store gives them, are those of the users it created, as written.
    assert set(written.stamps) <= {"new"}
    for user_id, stamp in written.stamps.items():
        assert (await store.get_plan_targets([user_id]))[user_id].stamp == stamp
    await store.write_records([], [], [reminder("r2", "new")])
    target = (await store.get_plan_targets(["new"]))["new"]
    assert target.stamp not in written.stamps.values()


async def test_write_records_with_only_some_kinds(store: Store) -> None:
    assert (await store.write_records([], [], [])).created == []
    await store.upsert_user(user("a"))
    assert (await store.write_records([], [device("a", "phone", "tok")], [])).created == []
    assert (await store.write_records([], [], [reminder("r1", "a")])).created == []
    assert [d.push_token for d in await store.list_devices("a")] == ["tok"]
    assert await store.get_reminder("a", "r1") == reminder("r1", "a")
    assert (await store.write_records([user("b")], [], [])).created == [True]


async def test_write_records_keeps_each_devices_kind(store: Store) -> None:
    devices = [device("u1", "phone", "ab" * 32, kind="apns"), device("u1", "tablet", "tok-2")]
    await store.write_records([user("u1")], devices, [])
    assert await store.list_devices("u1") == devices


async def test_write_records_plans_in_its_transaction_only_the_users_it_creates(
    store: Store,
) -> None:
    """Where the store plans with the records (``planned``), the messages and marks of
    the users it created are stored, those of a user someone else created are left out;
    elsewhere the plan is never made (the caller plans after the write)."""
    await store.upsert_user(user("old"))
    end = T0 + timedelta(hours=48)
    plan = NewUsersPlan(
        [msg("new-1", user_id="new"), msg("old-1", user_id="old")],
        [PlanMark(u, 0, T0, end, "fp") for u in ("new", "old")],
    )
    made: list[NewUsersPlan] = []

    def make() -> NewUsersPlan:
        made.append(plan)
        return plan

    written = await store.write_records([user("new"), user("old")], [], [], make)
    assert written.created == [True, False]
    if not written.planned:
        assert made == [] and await store.pending_for_user("new") == []
        return
    assert [m.id for m in await store.pending_for_user("new")] == [msg("new-1").id]
    assert await store.pending_for_user("old") == []
    targets = await store.get_plan_targets(["new", "old"])
    new, old = targets.get("new"), targets.get("old")
    assert new is not None and new.mark is not None and new.mark.plan_next_at == end
    assert old is not None and old.mark is None
    assert (await store.count_messages()).by_status_category_channel == {
        ("pending", "meal", "push"): 1
    }
