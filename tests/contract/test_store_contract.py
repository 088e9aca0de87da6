"""The Store contract: every adapter runs this file through the ``store`` fixture.

Each test states one promise of ``tepat.ports.store``; none depends on an
adapter's internals, so a new adapter is correct when this file passes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest

from tepat.domain.models import (
    Device,
    Message,
    MessageStatus,
    QuietHours,
    Reminder,
    Ticket,
    User,
    message_id_for,
    slot_key_for,
)
from tepat.ports.repositories.messages import MessageQuery, StatusChange
from tepat.ports.store import Store

T0 = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)
PENDING = MessageStatus.PENDING
SENDING = MessageStatus.SENDING
SENT = MessageStatus.SENT
DELIVERED = MessageStatus.DELIVERED
FAILED = MessageStatus.FAILED
CANCELLED = MessageStatus.CANCELLED


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def msg(
    key: str,
    *,
    user_id: str = "u1",
    scheduled_at: datetime = T0,
    category: str = "meal",
    label: str = "",
    live_key: str | None = "",
    reminder_id: str | None = "r1",
    **fields: Any,
) -> Message:
    """A pending message whose keys derive from ``key``; ``live_key=""`` means "derive one".

    Complete as the planner writes it: ``nominal_at`` and ``due_at`` default to
    ``scheduled_at`` and ``slot_key`` to the domain's ``slot_key_for``.
    """
    dedup_key = f"test|{key}"
    base = Message(
        id=message_id_for(dedup_key),
        user_id=user_id,
        category=category,
        label=label,
        title=f"title {key}",
        body=f"body {key}",
        scheduled_at=scheduled_at,
        timezone="Asia/Jakarta",
        dedup_key=dedup_key,
        live_key=f"live|{key}" if live_key == "" else live_key,
        reminder_id=reminder_id,
        created_at=T0 - timedelta(days=1),
        updated_at=T0 - timedelta(days=1),
        nominal_at=scheduled_at,
        due_at=scheduled_at,
    )
    m = dataclasses.replace(base, **fields)
    return m if "slot_key" in fields else dataclasses.replace(m, slot_key=slot_key_for(m))


def oneoff(key: str, *, user_id: str = "u1", **fields: Any) -> Message:
    """A pending one-off: no reminder, its live key names the request."""
    return msg(
        key,
        user_id=user_id,
        reminder_id=None,
        live_key=f"o|{user_id}|{key}",
        idempotency_key=key,
        **fields,
    )


def device(user_id: str, device_id: str, token: str, **fields: Any) -> Device:
    base = Device(user_id, device_id, token, platform="ios", created_at=T0, updated_at=T0)
    return dataclasses.replace(base, **fields)


async def status_of(store: Store, message_id: str) -> MessageStatus:
    m = await store.get_message(message_id)
    assert m is not None
    return m.status


# --------------------------------------------------------------------------- users


async def test_user_round_trips_every_field(store: Store) -> None:
    user = User(
        user_id="u1",
        timezone="America/New_York",
        locale="id",
        quiet_hours=QuietHours(time(22, 0), time(6, 45)),
        enabled=False,
        plan_version=3,
        created_at=T0,
        updated_at=at(5),
    )
    assert await store.upsert_user(user) == user
    assert await store.get_user("u1") == user


async def test_user_without_quiet_hours_round_trips(store: Store) -> None:
    user = User("u1", "UTC", created_at=T0, updated_at=T0)
    await store.upsert_user(user)
    assert await store.get_user("u1") == user
    assert await store.get_user("nobody") is None


async def test_upsert_user_replaces_fields_but_keeps_created_at(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", created_at=T0, updated_at=T0))
    later = User("u1", "Europe/Paris", plan_version=2, created_at=at(60), updated_at=at(60))
    stored = await store.upsert_user(later)
    expected = dataclasses.replace(later, created_at=T0)
    assert stored == expected
    assert await store.get_user("u1") == expected


async def test_get_users_returns_only_known_users(store: Store) -> None:
    for uid in ("a", "b", "c"):
        await store.upsert_user(User(uid, "UTC", created_at=T0, updated_at=T0))
    found = await store.get_users(["a", "c", "zz"])
    assert sorted(found) == ["a", "c"]
    assert found["c"].user_id == "c"
    assert await store.get_users([]) == {}


async def test_iter_users_yields_every_user_once_in_id_order(store: Store) -> None:
    ids = [f"user-{n:02d}" for n in (5, 1, 7, 3, 2, 6, 4)]
    for uid in ids:
        await store.upsert_user(User(uid, "UTC", created_at=T0, updated_at=T0))
    pages = [page async for page in store.iter_users(batch_size=3)]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [u.user_id for p in pages for u in p] == sorted(ids)


async def test_next_plan_version_increments_and_returns_the_new_value(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", plan_version=4, created_at=T0, updated_at=T0))
    assert await store.next_plan_version("u1") == 5
    assert await store.next_plan_version("u1") == 6
    stored = await store.get_user("u1")
    assert stored is not None
    assert (stored.plan_version, stored.timezone) == (6, "UTC")
    # No user: nothing to re-plan, and no user is created.
    assert await store.next_plan_version("nobody") == 0
    assert await store.get_user("nobody") is None


async def test_next_plan_version_never_repeats_under_concurrency(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    await store.upsert_user(User("u2", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    versions = await asyncio.gather(
        *(store.next_plan_version("u1") for _ in range(50)),
        *(store.next_plan_version("u2") for _ in range(5)),
    )
    assert sorted(versions[:50]) == list(range(2, 52))
    assert sorted(versions[50:]) == list(range(2, 7))
    stored = await store.get_users(["u1", "u2"])
    assert (stored["u1"].plan_version, stored["u2"].plan_version) == (51, 6)


async def test_upsert_user_never_lowers_plan_version(store: Store) -> None:
    # A PUT that read the user before a concurrent re-plan took a version writes
    # its (older) snapshot: the fields change, the plan version does not go back.
    await store.upsert_user(User("u1", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    assert await store.next_plan_version("u1") == 2
    assert await store.next_plan_version("u1") == 3
    stale = User("u1", "Asia/Jakarta", plan_version=1, created_at=T0, updated_at=at(1))
    stored = await store.upsert_user(stale)
    assert (stored.timezone, stored.plan_version, stored.updated_at) == ("Asia/Jakarta", 3, at(1))
    assert await store.get_user("u1") == stored
    # A higher version is taken as given.
    higher = await store.upsert_user(dataclasses.replace(stale, plan_version=7))
    assert higher.plan_version == 7
    assert await store.next_plan_version("u1") == 8


async def test_upsert_user_racing_next_plan_version_keeps_every_version(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    snapshot = User("u1", "Europe/Paris", plan_version=1, created_at=T0, updated_at=at(1))
    results = await asyncio.gather(
        *(store.next_plan_version("u1") for _ in range(10)),
        *(store.upsert_user(snapshot) for _ in range(10)),
    )
    versions = [v for v in results if isinstance(v, int)]
    assert sorted(versions) == list(range(2, 12))
    stored = await store.get_user("u1")
    assert stored is not None
    assert (stored.plan_version, stored.timezone) == (11, "Europe/Paris")


# --------------------------------------------------------------------------- devices


async def test_register_device_round_trips_and_resets_failures(store: Store) -> None:
    d = device("u1", "d1", "ExponentPushToken[a]", consecutive_failures=2)
    stored = await store.register_device(d)
    expected = dataclasses.replace(d, consecutive_failures=0)
    assert stored == expected
    assert await store.list_devices("u1") == [expected]


async def test_token_moving_to_another_user_ends_the_old_binding(store: Store) -> None:
    # The same phone after a new login: the token is global, its old binding ends.
    await store.register_device(device("alice", "d1", "tok"))
    await store.register_device(device("alice", "d2", "tok-kept"))
    await store.register_device(device("bob", "d2", "tok"))
    devices = {d.device_id: d for d in await store.list_devices("alice")}
    assert (devices["d1"].active, devices["d1"].deactivated_reason) == (False, "replaced")
    assert (devices["d2"].active, devices["d2"].push_token) == (True, "tok-kept")
    active = await store.active_devices(["alice", "bob"])
    assert [(d.device_id, d.push_token) for d in active["bob"]] == [("d2", "tok")]
    assert [d.device_id for d in active["alice"]] == ["d2"]
    # One active binding per token: deactivating it by token finds bob's only.
    assert await store.deactivate_token("tok", "DeviceNotRegistered") == 1


async def test_token_moving_with_the_same_device_id_ends_the_old_binding(store: Store) -> None:
    await store.register_device(device("alice", "phone", "tok"))
    await store.register_device(device("bob", "phone", "tok"))
    [old] = await store.list_devices("alice")
    assert (old.active, old.deactivated_reason) == (False, "replaced")
    [new] = await store.list_devices("bob")
    assert (new.active, new.push_token) == (True, "tok")


async def test_same_device_id_under_two_users_are_two_devices(store: Store) -> None:
    # A device id is scoped to its user: bob registering "phone" must not touch alice's.
    alice = await store.register_device(device("alice", "phone", "tok-a"))
    bob = await store.register_device(device("bob", "phone", "tok-b", updated_at=at(5)))
    assert await store.list_devices("alice") == [alice]
    assert await store.list_devices("bob") == [bob]
    active = await store.active_devices(["alice", "bob"])
    assert {u: [(d.device_id, d.push_token) for d in ds] for u, ds in active.items()} == {
        "alice": [("phone", "tok-a")],
        "bob": [("phone", "tok-b")],
    }
    # Rotating bob's token, deactivating and re-registering his phone: alice's is untouched.
    await store.register_device(device("bob", "phone", "tok-b2", updated_at=at(6)))
    assert await store.deactivate_device("bob", "phone", "logout")
    await store.register_device(device("bob", "phone", "tok-b3", updated_at=at(7)))
    for _ in range(3):
        await store.record_device_outcome("tok-b3", ok=False, max_failures=3, reason="x")
    assert await store.list_devices("alice") == [alice]
    [b] = await store.list_devices("bob")
    assert (b.active, b.deactivated_reason) == (False, "x")


async def test_concurrent_registrations_of_one_device_id_by_two_users_both_stay(
    store: Store,
) -> None:
    await asyncio.gather(
        *(store.register_device(device(f"u{n}", "phone", f"tok-{n}")) for n in range(10))
    )
    active = await store.active_devices([f"u{n}" for n in range(10)])
    assert {u: [d.push_token for d in ds] for u, ds in active.items()} == {
        f"u{n}": [f"tok-{n}"] for n in range(10)
    }


async def test_concurrent_registrations_of_one_token_leave_one_active_binding(
    store: Store,
) -> None:
    users = [f"u{n}" for n in range(8)]
    await asyncio.gather(*(store.register_device(device(u, "phone", "tok")) for u in users))
    active = await store.active_devices(users)
    assert sum(len(ds) for ds in active.values()) == 1


async def test_token_rotation_on_the_same_device_keeps_one_row(store: Store) -> None:
    await store.register_device(device("u1", "d1", "tok-old"))
    await store.register_device(device("u1", "d1", "tok-new"))
    [d] = await store.list_devices("u1")
    assert (d.push_token, d.active) == ("tok-new", True)
    assert await store.deactivate_token("tok-old", "gone") == 0


async def test_registering_again_reactivates_a_deactivated_device(store: Store) -> None:
    await store.register_device(device("u1", "d1", "tok"))
    assert await store.deactivate_device("u1", "d1", "logout")
    assert not await store.deactivate_device("u1", "d1", "logout")
    [d] = await store.list_devices("u1")
    assert (d.active, d.deactivated_reason) == (False, "logout")
    again = await store.register_device(device("u1", "d1", "tok"))
    assert (again.active, again.deactivated_reason, again.consecutive_failures) == (True, None, 0)
    assert list(await store.active_devices(["u1"])) == ["u1"]


async def test_deactivate_token_counts_active_bindings(store: Store) -> None:
    await store.register_device(device("u1", "d1", "tok"))
    await store.register_device(device("u1", "d2", "other"))
    assert await store.deactivate_token("tok", "DeviceNotRegistered") == 1
    assert await store.deactivate_token("tok", "DeviceNotRegistered") == 0
    devices = {d.device_id: d for d in await store.list_devices("u1")}
    assert not devices["d1"].active
    assert devices["d1"].deactivated_reason == "DeviceNotRegistered"
    assert devices["d2"].active


async def test_active_devices_omits_users_without_one(store: Store) -> None:
    await store.register_device(device("u1", "d1", "t1"))
    await store.register_device(device("u1", "d2", "t2"))
    await store.register_device(device("u2", "d3", "t3"))
    await store.deactivate_device("u2", "d3", "logout")
    active = await store.active_devices(["u1", "u2", "u3"])
    assert list(active) == ["u1"]
    assert sorted(d.device_id for d in active["u1"]) == ["d1", "d2"]


async def test_three_failures_deactivate_and_a_success_resets(store: Store) -> None:
    await store.register_device(device("u1", "d1", "tok"))

    async def fail() -> tuple[bool, int]:
        r = await store.record_device_outcome(
            "tok", ok=False, max_failures=3, reason="ProviderError"
        )
        return r.deactivated, r.consecutive_failures

    assert await fail() == (False, 1)
    assert await fail() == (False, 2)
    ok = await store.record_device_outcome("tok", ok=True, max_failures=3, reason="")
    assert (ok.deactivated, ok.consecutive_failures) == (False, 0)
    [d] = await store.list_devices("u1")
    assert (d.active, d.consecutive_failures) == (True, 0)

    assert [await fail() for _ in range(3)] == [(False, 1), (False, 2), (True, 3)]
    [d] = await store.list_devices("u1")
    assert (d.active, d.deactivated_reason) == (False, "ProviderError")
    assert (await fail())[0] is False  # nothing active left to deactivate


# --------------------------------------------------------------------------- reminders


def reminder(reminder_id: str = "r1", user_id: str = "u1", **fields: Any) -> Reminder:
    base = Reminder(
        user_id=user_id,
        reminder_id=reminder_id,
        category="meal",
        local_time=time(7, 30),
        title="Breakfast",
        body="Time to eat",
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(base, **fields)


async def test_reminder_round_trips_every_field(store: Store) -> None:
    r = reminder(
        label="morning",
        days=("mon", "wed", "fri"),
        data={"screen": "meal", "n": [1, 2], "nested": {"ok": True}},
        enabled=False,
        version=4,
    )
    assert await store.upsert_reminder(r) == r
    assert await store.get_reminder("u1", "r1") == r
    assert await store.get_reminder("u1", "nope") is None


async def test_upsert_reminder_keeps_created_at(store: Store) -> None:
    await store.upsert_reminder(reminder())
    changed = reminder(local_time=time(8, 15), version=2)
    changed = dataclasses.replace(changed, created_at=at(60), updated_at=at(60))
    stored = await store.upsert_reminder(changed)
    assert stored == dataclasses.replace(changed, created_at=T0)
    assert await store.get_reminder("u1", "r1") == stored


async def test_list_delete_and_bulk_reminders(store: Store) -> None:
    await store.upsert_reminder(reminder("r1"))
    await store.upsert_reminder(reminder("r2"))
    await store.upsert_reminder(reminder("r9", user_id="u2"))
    assert sorted(r.reminder_id for r in await store.list_reminders("u1")) == ["r1", "r2"]
    assert await store.delete_reminder("u1", "r1")
    assert not await store.delete_reminder("u1", "r1")
    by_user = await store.reminders_for_users(["u1", "u2", "u3"])
    assert [r.reminder_id for r in by_user.get("u1", [])] == ["r2"]
    assert [r.reminder_id for r in by_user.get("u2", [])] == ["r9"]
    assert by_user.get("u3", []) == []


# --------------------------------------------------------------------------- preferences


async def test_preferences_merge(store: Store) -> None:
    assert await store.get_preferences("u1") == {}
    assert await store.set_preferences("u1", {"meal": False, "mood": True}) == {
        "meal": False,
        "mood": True,
    }
    merged = await store.set_preferences("u1", {"mood": False, "sleep": True})
    assert merged == {"meal": False, "mood": False, "sleep": True}
    assert await store.get_preferences("u1") == merged
    await store.set_preferences("u2", {"meal": True})
    both = await store.preferences_for_users(["u1", "u2", "u3"])
    assert both["u1"] == merged
    assert both["u2"] == {"meal": True}
    assert both.get("u3", {}) == {}


# --------------------------------------------------------------------------- messages


async def test_message_round_trips_every_field(store: Store) -> None:
    m = msg(
        "full",
        device_id="d1",
        idempotency_key="idem-1",
        request_hash="abc123",
        local_date=date(2027, 3, 14),
        local_time=time(14, 30),
        data={"deep": {"list": [1, "two", None]}, "unicode": "makan siang 🍚"},
        status=SENT,
        status_reason="deferred:quiet_hours",
        attempts=2,
        ticket_id="ticket-1",
        last_error="ProviderError",
        plan_version=4,
        claimed_at=at(1.5),
        updated_at=at(2),
        nominal_at=at(-30),
        due_at=at(3),
        slot_key="s|a slot of its own",
    )
    result = await store.insert_messages([m])
    assert result.created == [m]
    assert await store.get_message(m.id) == m
    assert await store.find_by_live_key("live|full") == m


async def test_minimal_message_round_trips(store: Store) -> None:
    m = msg("bare", live_key=None, reminder_id=None)
    await store.insert_messages([m])
    assert await store.get_message(m.id) == m
    assert await store.get_message("missing") is None
    assert await store.find_by_live_key("live|bare") is None


async def test_a_message_without_nominal_due_or_slot_is_stored_with_derived_ones(
    store: Store,
) -> None:
    bare = dataclasses.replace(msg("bare"), nominal_at=None, due_at=None, slot_key=None)
    derived = dataclasses.replace(bare, nominal_at=T0, due_at=T0, slot_key=slot_key_for(bare))
    assert (await store.insert_messages([bare])).created == [derived]
    assert await store.get_message(bare.id) == derived


async def test_get_messages_skips_unknown_ids(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(3)]
    await store.insert_messages(ms)
    found = await store.get_messages([ms[2].id, "missing", ms[0].id])
    assert sorted(m.id for m in found) == sorted([ms[0].id, ms[2].id])


async def test_insert_messages_twice_creates_nothing_new(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(20)]
    first = await store.insert_messages(ms)
    assert first.created == ms
    assert first.existing == 0
    second = await store.insert_messages(ms)
    assert second.created == []
    assert second.existing == 20


async def test_insert_messages_reports_the_new_ones_in_input_order(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(20)]
    await store.insert_messages(ms[5:15])
    result = await store.insert_messages(list(reversed(ms)))
    assert result.created == list(reversed(ms[:5] + ms[15:]))
    assert result.existing == 10


async def test_bulk_insert_reports_exactly_the_new_ones(store: Store) -> None:
    # Spans an adapter's internal statement batches; every third exists already.
    ms = [msg(f"bulk{n:05d}", scheduled_at=at(n % 97), label=str(n)) for n in range(700)]
    await store.insert_messages(ms[::3])
    result = await store.insert_messages(ms)
    assert [m.id for m in result.created] == [m.id for n, m in enumerate(ms) if n % 3]
    assert result.existing == len(ms[::3])
    counts = await store.count_messages()
    assert counts.by_status_category == {("pending", "meal"): 700}


async def test_the_same_message_twice_in_one_call_is_created_once(store: Store) -> None:
    m = msg("twice")
    result = await store.insert_messages([m, m])
    assert (result.created, result.existing) == ([m], 1)


async def test_a_live_key_refuses_a_new_plan_version_until_released(store: Store) -> None:
    v1 = msg("r1|2027-03-14|v1", live_key="r|u1|r1|2027-03-14")
    v2 = msg("r1|2027-03-14|v2", live_key="r|u1|r1|2027-03-14", scheduled_at=at(30))
    await store.insert_messages([v1])
    refused = await store.insert_messages([v2])
    assert (refused.created, refused.existing) == ([], 1)
    assert await store.get_message(v2.id) is None

    assert await store.transition(
        v1.id, CANCELLED, at(1), expect=[PENDING], reason="superseded", release_live_key=True
    )
    old = await store.get_message(v1.id)
    assert old is not None
    assert (old.status, old.live_key) == (CANCELLED, None)

    accepted = await store.insert_messages([v2])
    assert accepted.created == [v2]
    assert await store.find_by_live_key("r|u1|r1|2027-03-14") == v2


async def test_a_live_key_held_by_a_sent_message_is_never_reused(store: Store) -> None:
    v1 = msg("v1", live_key="r|u1|r1|2027-03-14")
    await store.insert_messages([v1])
    await store.claim([v1.id], at(0))
    assert await store.transition(v1.id, SENT, at(1), expect=[SENDING], ticket_id="t")
    assert not await store.transition(
        v1.id, CANCELLED, at(2), expect=[PENDING], reason="superseded", release_live_key=True
    )
    v2 = msg("v2", live_key="r|u1|r1|2027-03-14", scheduled_at=at(30))
    assert (await store.insert_messages([v2])).existing == 1


async def test_released_live_key_can_be_planned_again(store: Store) -> None:
    v1 = msg("v1", live_key="r|u1|r1|2027-03-14")
    await store.insert_messages([v1])
    assert await store.transition(
        v1.id, CANCELLED, at(1), expect=[PENDING], reason="superseded", release_live_key=True
    )
    v2 = msg("v2", live_key="r|u1|r1|2027-03-14", scheduled_at=at(30))
    assert (await store.insert_messages([v2])).created == [v2]


async def test_one_pending_message_per_user_device_category_label_instant(store: Store) -> None:
    first = msg("a", label="breakfast")
    same_slot = msg("b", label="breakfast")  # other keys, same pending slot
    other_label = msg("c", label="lunch")
    other_device = msg("d", label="breakfast", device_id="d1")
    other_category = msg("e", label="breakfast", category="mood")
    other_user = msg("f", label="breakfast", user_id="u2")
    other_instant = msg("g", label="breakfast", scheduled_at=at(1))
    result = await store.insert_messages(
        [first, same_slot, other_label, other_device, other_category, other_user, other_instant]
    )
    accepted = [first, other_label, other_device, other_category, other_user, other_instant]
    assert result.created == accepted
    assert result.existing == 1
    assert (
        await store.insert_messages([msg("h", label="breakfast", device_id="d1")])
    ).existing == 1
    # The slot is the *nominal* instant: one deferred by quiet hours still holds it.
    deferred = msg("i", label="breakfast", user_id="u3", scheduled_at=at(60), nominal_at=T0)
    same_nominal = msg("j", label="breakfast", user_id="u3")
    result = await store.insert_messages([deferred, same_nominal])
    assert (result.created, result.existing) == ([deferred], 1)


async def test_the_pending_slot_frees_once_the_first_is_no_longer_pending(store: Store) -> None:
    first = msg("a", label="breakfast")
    again = msg("b", label="breakfast")
    await store.insert_messages([first])
    assert (await store.insert_messages([again])).existing == 1
    await store.claim([first.id], T0)
    assert (await store.insert_messages([again])).created == [again]


async def test_two_oneoffs_at_one_instant_in_one_category_both_insert(store: Store) -> None:
    # Two chat messages at one send_at: distinct intents, never one slot. Also two
    # "send now" ones within one millisecond (MongoDB keeps milliseconds only).
    same = [oneoff(f"chat-{n}", label="chat", scheduled_at=at(5)) for n in range(3)]
    within_ms = [
        oneoff("now-1", label="chat", scheduled_at=T0 + timedelta(microseconds=100)),
        oneoff("now-2", label="chat", scheduled_at=T0 + timedelta(microseconds=400)),
    ]
    result = await store.insert_messages(same + within_ms)
    assert (len(result.created), result.existing) == (5, 0)
    assert [m.slot_key for m in result.created] == [m.live_key for m in same + within_ms]
    pending = await store.pending_for_user("u1")
    assert sorted(m.id for m in pending) == sorted(m.id for m in same + within_ms)
    # The same request again is still one message (its live key, its slot).
    again = await store.insert_messages([oneoff("chat-0", label="chat", scheduled_at=at(5))])
    assert (again.created, again.existing) == ([], 1)


async def test_deferred_messages_to_one_instant_keep_their_slots(store: Store) -> None:
    # Quiet hours until minute 60 defer several messages of one category and label.
    end = at(60)
    first = msg("r1-a", scheduled_at=at(0), reminder_id="r1")
    second = msg("r2-a", scheduled_at=at(5), reminder_id="r2")
    chat = oneoff("chat", scheduled_at=at(10))
    await store.insert_messages([first, second, chat])
    await store.claim([first.id, second.id, chat.id], at(0))
    # At send time, one by one and in one bulk write: every deferral happens.
    assert await store.transition(
        first.id, PENDING, at(1), expect=[SENDING], scheduled_at=end, due_at=end
    )
    changes = [
        StatusChange(m.id, PENDING, reason="deferred", scheduled_at=end, due_at=end)
        for m in (second, chat)
    ]
    assert await store.transition_many(changes, at(1), expect=[SENDING]) == 2
    moved = await store.get_messages([first.id, second.id, chat.id])
    assert [(m.status, m.scheduled_at, m.due_at) for m in moved] == [(PENDING, end, end)] * 3
    assert [m.slot_key for m in moved] == [first.slot_key, second.slot_key, chat.slot_key]
    assert [m.nominal_at for m in moved] == [at(0), at(5), at(10)]
    # At plan time: two reminders' messages placed at the same end of quiet hours.
    planned = [
        msg("r3-b", reminder_id="r3", scheduled_at=end, nominal_at=at(20)),
        msg("r4-b", reminder_id="r4", scheduled_at=end, nominal_at=at(25)),
    ]
    assert (await store.insert_messages(planned)).created == planned


async def test_back_to_pending_onto_a_held_slot_is_refused_not_raised(store: Store) -> None:
    a = msg("a", label="breakfast", reminder_id="r1")
    b = msg("b", label="breakfast", reminder_id="r2")  # the same slot
    c = msg("c", label="breakfast", reminder_id="r3", user_id="u2")
    c2 = msg("c2", label="breakfast", reminder_id="r4", user_id="u2")
    await store.insert_messages([a, c])
    await store.claim([a.id, c.id], at(0))
    assert (await store.insert_messages([b, c2])).created == [b, c2]  # the slots were free
    assert not await store.transition(a.id, PENDING, at(1), expect=[SENDING], due_at=at(2))
    retry = [StatusChange(c.id, PENDING, due_at=at(2))]
    assert await store.transition_many(retry, at(1), expect=[SENDING]) == 0
    assert [await status_of(store, m.id) for m in (a, c)] == [SENDING, SENDING]
    assert {m.id for m in await store.unpublished(10)} == {b.id, c2.id}
    assert await store.transition(a.id, FAILED, at(2), expect=[SENDING], reason="duplicate")


async def test_claim_moves_pending_to_sending_once(store: Store) -> None:
    a, b = msg("a", scheduled_at=at(0)), msg("b", scheduled_at=at(1))
    await store.insert_messages([a, b])
    claimed = await store.claim([a.id, b.id, "unknown"], at(5))
    assert sorted(m.id for m in claimed) == sorted([a.id, b.id])
    for m in claimed:
        assert (m.status, m.attempts, m.claimed_at, m.updated_at) == (SENDING, 1, at(5), at(5))
        assert await store.get_message(m.id) == m
    assert await store.claim([a.id, b.id], at(6)) == []


async def test_claim_counts_attempts_across_retries(store: Store) -> None:
    m = msg("a")
    await store.insert_messages([m])
    await store.claim([m.id], at(1))
    assert await store.transition(m.id, PENDING, at(2), expect=[SENDING], last_error="retry")
    [again] = await store.claim([m.id], at(3))
    assert (again.attempts, again.claimed_at, again.last_error) == (2, at(3), "retry")


async def test_concurrent_claims_take_each_message_exactly_once(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(60)]
    await store.insert_messages(ms)
    ids = [m.id for m in ms]
    first, second = await asyncio.gather(
        store.claim(ids, at(100)), store.claim(list(reversed(ids)), at(100))
    )
    a, b = {m.id for m in first}, {m.id for m in second}
    assert a.isdisjoint(b)
    assert a | b == set(ids)
    assert len(first) + len(second) == 60


async def test_transition_only_moves_from_an_expected_status(store: Store) -> None:
    m = msg("a")
    await store.insert_messages([m])
    assert not await store.transition(m.id, SENT, at(1), expect=[SENDING])
    assert await status_of(store, m.id) == PENDING
    await store.claim([m.id], at(1))
    assert await store.transition(m.id, SENT, at(2), expect=[SENDING], ticket_id="tk-1")
    # A late duplicate or a stale event never moves it back.
    assert not await store.transition(m.id, SENT, at(3), expect=[SENDING], ticket_id="tk-2")
    assert not await store.transition(m.id, PENDING, at(3), expect=[SENDING])
    assert await store.transition(m.id, DELIVERED, at(4), expect=[SENT])
    assert not await store.transition(m.id, FAILED, at(5), expect=[SENT], reason="late error")
    final = await store.get_message(m.id)
    assert final is not None
    assert (final.status, final.ticket_id, final.updated_at) == (DELIVERED, "tk-1", at(4))
    assert not await store.transition("unknown", SENT, at(5), expect=[SENDING])


async def test_transition_sets_the_given_fields_only(store: Store) -> None:
    m = msg("a", status_reason="deferred:quiet_hours")
    await store.insert_messages([m])
    await store.claim([m.id], at(1))
    assert await store.transition(
        m.id,
        PENDING,
        at(2),
        expect=[SENDING],
        last_error="RetryLater",
        scheduled_at=at(30),
    )
    moved = await store.get_message(m.id)
    assert moved is not None
    assert moved.status == PENDING
    assert moved.scheduled_at == at(30)
    # Back to pending without a due_at: due at the new scheduled_at. The nominal
    # instant and the slot never move.
    assert (moved.due_at, moved.nominal_at, moved.slot_key) == (at(30), T0, m.slot_key)
    assert moved.last_error == "RetryLater"
    assert moved.status_reason == "deferred:quiet_hours"
    assert moved.live_key == m.live_key
    assert moved.updated_at == at(2)
    assert await store.transition(m.id, FAILED, at(3), expect=[PENDING, SENDING], reason="gave up")
    failed = await store.get_message(m.id)
    assert failed is not None
    assert (failed.status, failed.status_reason) == (FAILED, "gave up")


async def test_claim_due_before_takes_only_messages_due_before_it(store: Store) -> None:
    early, boundary, late = (
        msg(key, label=key, scheduled_at=at(n)) for key, n in (("e", 0), ("b", 1), ("l", 2))
    )
    await store.insert_messages([early, boundary, late])
    claimed = await store.claim([early.id, boundary.id, late.id], at(5), due_before=at(1))
    assert [m.id for m in claimed] == [early.id]  # exclusive bound
    assert {m.id for m in await store.claim([boundary.id, late.id], at(5))} == {
        boundary.id,
        late.id,
    }


async def test_pending_for_user(store: Store) -> None:
    reminder_msg = msg("a", scheduled_at=at(5))
    one = oneoff("b", scheduled_at=at(1))
    deferred = msg("c", reminder_id="r2", scheduled_at=at(60), nominal_at=at(0))
    sent = msg("d", reminder_id="r3", status=SENT)
    cancelled = msg("e", reminder_id="r4")
    elsewhere = msg("f", user_id="u2")
    claimed = msg("g", reminder_id="r5", scheduled_at=at(7))
    await store.insert_messages([reminder_msg, one, deferred, sent, cancelled, elsewhere, claimed])
    await store.transition(cancelled.id, CANCELLED, at(0), expect=[PENDING], reason="x")
    await store.claim([claimed.id], at(0))
    mine = await store.pending_for_user("u1")
    assert sorted(m.id for m in mine) == sorted([reminder_msg.id, one.id, deferred.id])
    assert all(m.status == PENDING for m in mine)
    by_id = {m.id: m for m in mine}
    assert by_id[deferred.id] == deferred
    assert [m.id for m in await store.pending_for_user("u2")] == [elsewhere.id]
    assert await store.pending_for_user("nobody") == []


# --------------------------------------------------------------------------- outbox


def _keys(ms: list[Message]) -> list[tuple[str, datetime]]:
    return [(m.id, m.due) for m in ms]


async def test_outbox_mark_set_on_insert_and_back_to_pending_cleared_on_publish(
    store: Store,
) -> None:
    a, b, c = (
        msg("a", label="a", scheduled_at=at(2)),
        msg("b", label="b", scheduled_at=at(1)),
        msg("c", label="c", scheduled_at=at(1)),
    )
    done = msg("done", status=SENT)
    await store.insert_messages([a, b, c, done])
    expected = sorted([a, b, c], key=lambda m: (m.due, m.id))
    assert await store.unpublished(10) == expected
    assert await store.unpublished(2) == expected[:2]
    assert await store.unpublished(0) == []

    assert await store.mark_published(_keys(expected)) == 3
    assert await store.unpublished(10) == []
    assert await store.mark_published(_keys(expected)) == 0

    # Back to pending, in each way: due at due_at, else scheduled_at, else now.
    await store.claim([a.id, b.id, c.id], at(3))
    assert await store.transition(a.id, PENDING, at(4), expect=[SENDING], due_at=at(7))
    assert await store.transition(b.id, PENDING, at(4), expect=[SENDING], scheduled_at=at(9))
    assert await store.transition(c.id, PENDING, at(4), expect=[SENDING])
    back = await store.unpublished(10)
    assert [(m.id, m.status, m.due_at) for m in back] == [
        (c.id, PENDING, at(4)),
        (a.id, PENDING, at(7)),
        (b.id, PENDING, at(9)),
    ]
    assert await store.mark_published(_keys(back)) == 3
    assert await store.unpublished(10) == []

    # The same through transition_many.
    await store.claim([a.id, b.id], at(10))
    changes = [StatusChange(a.id, PENDING, due_at=at(12)), StatusChange(b.id, PENDING)]
    assert await store.transition_many(changes, at(11), expect=[SENDING]) == 2
    assert [(m.id, m.due_at) for m in await store.unpublished(10)] == [
        (b.id, at(11)),
        (a.id, at(12)),
    ]


async def test_unpublished_due_before_lists_only_messages_due_before_it(store: Store) -> None:
    ms = [msg(f"m{n}", label=f"l{n}", scheduled_at=at(n)) for n in (2, 0, 1, 3)]
    await store.insert_messages(ms)
    early = await store.unpublished(10, due_before=at(2))
    assert [m.due_at for m in early] == [at(0), at(1)]  # exclusive bound
    assert [m.due_at for m in await store.unpublished(1, due_before=at(2))] == [at(0)]
    assert await store.unpublished(10, due_before=at(0)) == []
    assert len(await store.unpublished(10, due_before=None)) == 4


async def test_unpublished_after_pages_by_due_at_then_id(store: Store) -> None:
    # two at one instant (ordered by id), one before, one after
    ms = [
        msg(f"m{n}", label=f"l{n}", scheduled_at=at(s)) for n, s in ((1, 1), (2, 1), (3, 0), (4, 2))
    ]
    await store.insert_messages(ms)
    everything = await store.unpublished(10)
    pages, after = [], None
    while page := await store.unpublished(1, after=after):
        pages.append(page[0])
        after = (page[0].due, page[0].id)
    assert pages == everything
    first_at_1 = everything[1]
    rest = await store.unpublished(10, due_before=at(2), after=(first_at_1.due, first_at_1.id))
    assert rest == [everything[2]]


async def test_unpublished_counts_per_due_at_and_category_in_a_window(store: Store) -> None:
    ms = [
        msg("a", label="a", scheduled_at=at(1)),
        msg("b", label="b", scheduled_at=at(1)),
        msg("c", label="c", scheduled_at=at(1), category="safety"),
        msg("d", label="d", scheduled_at=at(2)),
        msg("e", label="e", scheduled_at=at(3)),  # at the window's end: outside
        msg("f", label="f", scheduled_at=at(0)),  # before it
        msg("g", label="g", scheduled_at=at(2), status=SENT),  # not pending
    ]
    await store.insert_messages(ms)
    await store.mark_published([(ms[3].id, ms[3].due)])  # published already
    counts = await store.unpublished_counts(at(1), at(3))
    assert counts == {(at(1), "meal", "push", None): 2, (at(1), "safety", "push", None): 1}
    assert await store.unpublished_counts(at(3), at(3)) == {}


async def test_channel_content_and_priority_round_trip_and_count_apart(store: Store) -> None:
    ms = [
        msg("a", label="a", scheduled_at=at(1)),
        dataclasses.replace(
            msg("b", label="b", scheduled_at=at(1)),
            channel="inbox",
            content={"html": "<b>hi</b>", "link": "/x"},
            priority="critical",
        ),
        dataclasses.replace(
            msg("c", label="c", scheduled_at=at(1)), channel="email", priority="bulk"
        ),
    ]
    await store.insert_messages(ms)
    got = {m.id: m for m in await store.get_messages([m.id for m in ms])}
    assert (got[ms[0].id].channel, got[ms[0].id].content, got[ms[0].id].priority) == (
        "push",
        {},
        None,
    )
    assert got[ms[1].id].channel == "inbox"
    assert got[ms[1].id].content == {"html": "<b>hi</b>", "link": "/x"}
    assert got[ms[1].id].priority == "critical"
    claimed = await store.claim([ms[2].id], at(1))
    assert [(m.channel, m.priority) for m in claimed] == [("email", "bulk")]
    await store.insert_messages(
        [dataclasses.replace(msg("d", label="d", scheduled_at=at(1)), channel="sms")]
    )
    counts = await store.unpublished_counts(at(1), at(2))
    assert counts == {
        (at(1), "meal", "push", None): 1,
        (at(1), "meal", "inbox", "critical"): 1,
        (at(1), "meal", "sms", None): 1,
    }


async def test_mark_published_keeps_mark_when_due_at_moved(store: Store) -> None:
    m = msg("a")
    await store.insert_messages([m])
    [read] = await store.unpublished(10)
    # While the publisher publishes, a consumer claims it and schedules a retry.
    await store.claim([m.id], at(1))
    assert await store.transition(m.id, PENDING, at(1), expect=[SENDING], due_at=at(5))
    assert await store.mark_published([(read.id, read.due)]) == 0
    [retry] = await store.unpublished(10)
    assert (retry.id, retry.due_at) == (m.id, at(5))
    assert await store.mark_published([(m.id, at(5)), ("missing", at(5))]) == 1
    assert await store.unpublished(10) == []
    assert await store.mark_published([]) == 0


async def test_terminal_transition_clears_outbox_mark(store: Store) -> None:
    cancelled, failed, sending, sent, replanned = ms = [
        msg(key, label=key, scheduled_at=at(30) if key == "replanned" else T0)
        for key in ("cancelled", "failed", "sending", "sent", "replanned")
    ]
    await store.insert_messages(ms)
    assert len(await store.unpublished(10)) == 5
    # None of them was published: each leaves pending while still marked.
    assert await store.transition(cancelled.id, CANCELLED, at(1), expect=[PENDING], reason="x")
    assert (
        await store.transition_many(
            [StatusChange(failed.id, FAILED, reason="x")], at(1), expect=[PENDING]
        )
        == 1
    )
    await store.claim([sending.id, sent.id], at(1))
    assert await store.transition(sent.id, SENT, at(2), expect=[SENDING], ticket_id="t")
    assert await store.transition(
        replanned.id, CANCELLED, at(2), expect=[PENDING], reason="superseded"
    )
    assert await store.unpublished(10) == []
    # Nothing pending, so nothing to put back on the outbox either.
    assert await store.republish([m.id for m in ms], at(5)) == 0
    assert await store.republish_all_pending() == 0
    assert await store.unpublished(10) == []
    assert await store.due_pending(before=at(100), limit=10) == []


async def test_republish_puts_pending_messages_back_on_the_outbox(store: Store) -> None:
    a, b = msg("a", scheduled_at=at(0)), msg("b", scheduled_at=at(1))
    done = msg("done", scheduled_at=at(0), status=SENT)
    await store.insert_messages([a, b, done])
    await store.mark_published(_keys([a, b]))
    # The sweeper re-drives a: due now, back on the outbox, slot and nominal kept.
    assert await store.republish([a.id, a.id, done.id, "missing"], at(30)) == 1
    [redriven] = await store.unpublished(10)
    assert redriven == dataclasses.replace(a, due_at=at(30))
    assert await store.republish([], at(30)) == 0
    # After a restart of an in-memory broker: every pending message, due_at kept.
    assert await store.republish_all_pending() == 1
    assert _keys(await store.unpublished(10)) == [(b.id, at(1)), (a.id, at(30))]


async def _insert_listing(store: Store) -> list[Message]:
    ms = [
        msg(f"m{n:02d}", scheduled_at=at(n // 3), label=f"l{n}")  # three per instant
        for n in range(25)
    ]
    ms.append(msg("elsewhere", user_id="u2"))
    await store.insert_messages(ms)
    return [m for m in ms if m.user_id == "u1"]


async def test_list_messages_pages_cover_everything_once_newest_first(store: Store) -> None:
    mine = await _insert_listing(store)
    expected = sorted(mine, key=lambda m: (m.scheduled_at, m.id), reverse=True)
    seen: list[Message] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.list_messages(MessageQuery("u1", limit=7, cursor=cursor))
        pages += 1
        seen.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 4
    assert [m.id for m in seen] == [m.id for m in expected]


async def test_list_messages_filters_by_status_and_half_open_range(store: Store) -> None:
    mine = await _insert_listing(store)
    await store.claim([m.id for m in mine[:6]], at(10))  # instants 0 and 1
    sending = await store.list_messages(MessageQuery("u1", statuses=frozenset({SENDING})))
    assert {m.id for m in sending.items} == {m.id for m in mine[:6]}
    assert sending.next_cursor is None

    window = await store.list_messages(
        MessageQuery("u1", scheduled_from=at(2), scheduled_to=at(4), limit=50)
    )
    assert {m.id for m in window.items} == {m.id for m in mine if at(2) <= m.scheduled_at < at(4)}
    assert len(window.items) == 6

    both = await store.list_messages(
        MessageQuery("u1", statuses=frozenset({SENDING, PENDING}), scheduled_from=at(1))
    )
    assert len(both.items) == 22


async def test_due_pending_lists_only_published_messages_by_due_at(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in (3, 0, 2, 1, 5)]
    await store.insert_messages(ms)
    # Still on the outbox: not yet published, so not lost by the broker either.
    assert await store.due_pending(before=at(10), limit=10) == []
    await store.mark_published([(m.id, m.due) for m in ms])
    await store.claim([ms[1].id], at(0))  # the one at minute 0 is no longer pending
    due = await store.due_pending(before=at(3), limit=10)
    assert [m.id for m in due] == [ms[3].id, ms[2].id]  # due at minutes 1 and 2
    assert len(await store.due_pending(before=at(10), limit=2)) == 2
    assert await store.due_pending(before=at(10), limit=0) == []

    # Re-driven: due at minute 4 now, listed by due_at (not scheduled_at) once published.
    assert await store.republish([ms[3].id], at(4)) == 1
    assert [m.id for m in await store.due_pending(before=at(10), limit=10)] == [
        ms[2].id,
        ms[0].id,
        ms[4].id,
    ]
    [again] = await store.unpublished(10)
    assert await store.mark_published([(again.id, again.due)]) == 1
    due = await store.due_pending(before=at(10), limit=10)
    assert [(m.id, m.due_at) for m in due] == [
        (ms[2].id, at(2)),
        (ms[0].id, at(3)),
        (ms[3].id, at(4)),
        (ms[4].id, at(5)),
    ]
    assert [m.id for m in await store.due_pending(before=at(4), limit=10)] == [
        ms[2].id,
        ms[0].id,
    ]


async def test_stuck_sending_finds_old_claims(store: Store) -> None:
    a, b, c = msg("a"), msg("b", scheduled_at=at(1)), msg("c", scheduled_at=at(2))
    await store.insert_messages([a, b, c])
    await store.claim([a.id], at(0))
    await store.claim([b.id], at(10))
    stuck = await store.stuck_sending(claimed_before=at(5), limit=10)
    assert [m.id for m in stuck] == [a.id]
    assert [m.id for m in await store.stuck_sending(claimed_before=at(11), limit=10)] == [
        a.id,
        b.id,
    ]


async def test_count_messages_by_status_and_category(store: Store) -> None:
    ms = [
        msg("a", category="meal"),
        msg("b", category="meal", scheduled_at=at(1)),
        msg("c", category="mood"),
    ]
    await store.insert_messages(ms)
    await store.claim([ms[0].id], at(0))
    counts = await store.count_messages()
    assert counts.by_status_category == {
        ("sending", "meal"): 1,
        ("pending", "meal"): 1,
        ("pending", "mood"): 1,
    }


async def test_dead_letters_newest_failure_first_with_paging(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(5)]
    await store.insert_messages(ms)
    for n, m in enumerate(ms[:4]):
        assert await store.transition(m.id, FAILED, at(100 - n), expect=[PENDING], reason="x")
    first = await store.dead_letters(limit=2)
    assert [m.id for m in first] == [ms[0].id, ms[1].id]
    rest = await store.dead_letters(limit=10, before_id=first[-1].id)
    assert [m.id for m in rest] == [ms[2].id, ms[3].id]
    assert all(m.status == FAILED for m in first + rest)


# --------------------------------------------------------------------------- tickets


def ticket(ticket_id: str, message_id: str, sent_at: datetime, **fields: Any) -> Ticket:
    return Ticket(ticket_id, message_id, "u1", "d1", "tok", sent_at, **fields)


async def test_tickets_round_trip_per_message(store: Store) -> None:
    ts = [ticket("t1", "m1", at(0)), ticket("t2", "m1", at(1)), ticket("t3", "m2", at(0))]
    await store.add_tickets(ts)
    found = await store.tickets_for_message("m1")
    assert sorted(found, key=lambda t: t.ticket_id) == ts[:2]
    assert await store.tickets_for_message("none") == []


async def test_tickets_awaiting_receipt_oldest_first_then_recorded_once(store: Store) -> None:
    ts = [ticket(f"t{n}", "m1", at(n)) for n in (2, 0, 1, 9)]
    await store.add_tickets(ts)
    awaiting = await store.tickets_awaiting_receipt(sent_before=at(5), limit=10)
    assert [t.ticket_id for t in awaiting] == ["t0", "t1", "t2"]
    assert len(await store.tickets_awaiting_receipt(sent_before=at(5), limit=2)) == 2

    assert await store.record_receipt("t0", "error", "DeviceNotRegistered", at(20))
    assert not await store.record_receipt("t0", "ok", None, at(21))
    [t0] = [t for t in await store.tickets_for_message("m1") if t.ticket_id == "t0"]
    assert t0 == ticket(
        "t0",
        "m1",
        at(0),
        receipt_status="error",
        receipt_error="DeviceNotRegistered",
        checked_at=at(20),
    )
    awaiting = await store.tickets_awaiting_receipt(sent_before=at(5), limit=10)
    assert [t.ticket_id for t in awaiting] == ["t1", "t2"]


async def test_receipt_paging_reaches_tickets_behind_a_full_page(store: Store) -> None:
    # Five tickets share one instant and none has a receipt yet: a page of two
    # must not stop the poller from reaching the ones behind them.
    ts = [ticket(f"t0{c}", "m1", at(0)) for c in "edcba"]
    ts += [ticket(f"t1{c}", "m2", at(1)) for c in "ab"]
    ts += [ticket("t2", "m3", at(2)), ticket("late", "m4", at(9))]
    await store.add_tickets(ts)
    await store.record_receipt("t1a", "ok", None, at(3))
    seen: list[str] = []
    after: tuple[datetime, str] | None = None
    while True:
        page = await store.tickets_awaiting_receipt(sent_before=at(5), limit=2, after=after)
        seen += [t.ticket_id for t in page]
        if len(page) < 2:
            break
        after = (page[-1].sent_at, page[-1].ticket_id)
    assert seen == ["t0a", "t0b", "t0c", "t0d", "t0e", "t1b", "t2"]
    # Starting after a key inside an instant resumes within that instant.
    mid = await store.tickets_awaiting_receipt(at(5), limit=10, after=(at(0), "t0c"))
    assert [t.ticket_id for t in mid] == ["t0d", "t0e", "t1b", "t2"]
    assert await store.tickets_awaiting_receipt(at(5), limit=10, after=(at(2), "t2")) == []


# --------------------------------------------------------------------------- meta, lifecycle


async def test_meta_set_get_overwrite(store: Store) -> None:
    assert await store.get_meta("tzdata_release") is None
    await store.set_meta("tzdata_release", "2026f")
    await store.set_meta("other", "x")
    await store.set_meta("tzdata_release", "2027a")
    assert await store.get_meta("tzdata_release") == "2027a"
    assert await store.get_meta("other") == "x"


async def test_open_again_is_harmless(store: Store) -> None:
    await store.insert_messages([msg("a")])
    await store.open()
    await store.ping()
    assert await store.get_message(msg("a").id) == msg("a")


@pytest.mark.parametrize("count", [0, 1])
async def test_empty_and_tiny_inputs(store: Store, count: int) -> None:
    ms = [msg(f"m{n}") for n in range(count)]
    result = await store.insert_messages(ms)
    assert (len(result.created), result.existing) == (count, 0)
    assert await store.claim([], at(0)) == []
    await store.add_tickets([])


async def test_transition_many_applies_only_from_expected_statuses(store: Store) -> None:

    now = T0
    await store.upsert_user(User("tm", "UTC"))
    msgs = [
        Message(
            id=f"tm{i}",
            user_id="tm",
            category="meal",
            label=f"l{i}",
            title="t",
            body="b",
            scheduled_at=now,
            timezone="UTC",
            dedup_key=f"tm{i}",
            live_key=f"tm{i}",
        )
        for i in range(4)
    ]
    await store.insert_messages(msgs)
    await store.claim(["tm0", "tm1", "tm2"], now)  # tm3 stays pending
    later = now + timedelta(seconds=5)
    changes = [
        StatusChange("tm0", MessageStatus.SENT, ticket_id="ticket-0"),
        StatusChange("tm1", MessageStatus.SKIPPED, reason="opted_out"),
        StatusChange("tm2", MessageStatus.FAILED, reason="MessageTooBig", last_error="too big"),
        StatusChange("tm3", MessageStatus.SENT, ticket_id="ticket-3"),  # not sending: refused
        StatusChange("missing", MessageStatus.SENT),
    ]
    applied = await store.transition_many(changes, later, expect=[MessageStatus.SENDING])
    assert applied == 3
    got = {m.id: m for m in await store.get_messages(["tm0", "tm1", "tm2", "tm3"])}
    assert got["tm0"].status is MessageStatus.SENT and got["tm0"].ticket_id == "ticket-0"
    assert got["tm1"].status is MessageStatus.SKIPPED and got["tm1"].status_reason == "opted_out"
    assert got["tm2"].status is MessageStatus.FAILED and got["tm2"].last_error == "too big"
    assert got["tm3"].status is MessageStatus.PENDING and got["tm3"].ticket_id is None
    assert got["tm0"].updated_at == later
    # Repeating it changes nothing: the messages have left `sending`.
    assert await store.transition_many(changes, later, expect=[MessageStatus.SENDING]) == 0
    assert await store.transition_many([], later, expect=[MessageStatus.SENDING]) == 0
