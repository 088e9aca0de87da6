"""The contract of devices (``tepat/ports/repositories/devices.py``).

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses

from tepat.ports.store import Store
from tests.contract.records import at, device


async def test_register_device_round_trips_and_resets_failures(store: Store) -> None:
    d = device("u1", "d1", "ExponentPushToken[a]", consecutive_failures=2)
    expected = dataclasses.replace(d, consecutive_failures=0)
    assert await store.register_device(d) == (expected, True)
    assert await store.register_device(d) == (expected, False)
    assert await store.list_devices("u1") == [expected]


async def test_a_device_keeps_its_kind_and_a_rotation_may_change_it(store: Store) -> None:
    fcm = device("u1", "d1", "fcm-token:abc", kind="fcm")
    assert await store.register_device(fcm) == (fcm, True)
    assert [d.kind for d in (await store.active_devices(["u1"]))["u1"]] == ["fcm"]
    # The same phone moved from FCM direct to Expo: one row, the new kind.
    expo = device("u1", "d1", "ExponentPushToken[a]", updated_at=at(5))
    assert (await store.register_device(expo))[0].kind == "expo"
    assert [(d.kind, d.push_token) for d in await store.list_devices("u1")] == [
        ("expo", "ExponentPushToken[a]")
    ]


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
    alice, _ = await store.register_device(device("alice", "phone", "tok-a"))
    bob, _ = await store.register_device(device("bob", "phone", "tok-b", updated_at=at(5)))
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


async def test_a_dead_fallback_token_is_dropped_and_the_device_kept(store: Store) -> None:
    """The fallback provider's dead-token answer clears the fallback of every device
    naming it; each device's own binding (and any other device) is untouched."""
    phone = device("u1", "d1", "ExponentPushToken[a]", fallback_kind="fcm", fallback_token="f")
    other = device("u2", "d2", "ExponentPushToken[b]", fallback_kind="fcm", fallback_token="g")
    await store.register_device(phone)
    await store.register_device(other)
    assert await store.deactivate_token("f", "UNREGISTERED") == 1
    assert await store.deactivate_token("f", "UNREGISTERED") == 0
    active = await store.active_devices(["u1", "u2"])
    [d1], [d2] = active["u1"], active["u2"]
    assert (d1.push_token, d1.kind, d1.fallback_kind, d1.fallback_token) == (
        "ExponentPushToken[a]",
        "expo",
        None,
        None,
    )
    assert d1.deactivated_reason is None and d1.consecutive_failures == 0
    assert (d2.fallback_kind, d2.fallback_token) == ("fcm", "g")


async def test_registering_again_reactivates_a_deactivated_device(store: Store) -> None:
    await store.register_device(device("u1", "d1", "tok"))
    assert await store.deactivate_device("u1", "d1", "logout")
    assert not await store.deactivate_device("u1", "d1", "logout")
    [d] = await store.list_devices("u1")
    assert (d.active, d.deactivated_reason) == (False, "logout")
    again, activated = await store.register_device(device("u1", "d1", "tok"))
    assert activated
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


async def test_of_concurrent_registrations_of_a_new_device_exactly_one_activates(
    store: Store,
) -> None:
    """What lets a quota undo only its own write: the write reports the activation
    (5 rounds: a server's findAndModify pre-image told two or three, half of the time)."""
    for dev in ("a", "b", "c", "d", "e"):
        tokens = [f"ExponentPushToken[{dev}{n}]" for n in range(8)]
        results = await asyncio.gather(
            *(store.register_device(device("u1", dev, t)) for t in tokens)
        )
        assert [activated for _, activated in results].count(True) == 1
        [stored] = [s for s in await store.list_devices("u1") if s.device_id == dev]
        assert stored.active
        assert stored in [d for d, _ in results]
