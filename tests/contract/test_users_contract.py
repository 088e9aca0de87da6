"""The contract of users (``tepat/ports/repositories/users.py``); their planning marks are in
``test_users_plan_marks_contract.py``.

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import time

from tepat.domain.models import QuietHours, User
from tepat.ports.store import Store
from tests.contract.records import T0, at


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
    assert await store.upsert_user(user) == (user, True)
    assert await store.get_user("u1") == user


async def test_user_without_quiet_hours_round_trips(store: Store) -> None:
    user = User("u1", "UTC", created_at=T0, updated_at=T0)
    await store.upsert_user(user)
    assert await store.get_user("u1") == user
    assert await store.get_user("nobody") is None


async def test_upsert_user_replaces_fields_but_keeps_created_at(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", created_at=T0, updated_at=T0))
    later = User("u1", "Europe/Paris", plan_version=2, created_at=at(60), updated_at=at(60))
    stored, inserted = await store.upsert_user(later)
    assert not inserted
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


async def next_version(store: Store, user_id: str) -> int:
    """A re-plan's fresh plan version (0: no such user)."""
    start = await store.start_replan(user_id)
    return 0 if start is None else start.version


async def test_a_replan_takes_the_next_plan_version(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", plan_version=4, created_at=T0, updated_at=T0))
    assert await next_version(store, "u1") == 5
    assert await next_version(store, "u1") == 6
    stored = await store.get_user("u1")
    assert stored is not None
    assert (stored.plan_version, stored.timezone) == (6, "UTC")
    # No user: nothing to re-plan, and no user is created.
    assert await next_version(store, "nobody") == 0
    assert await store.get_user("nobody") is None


async def test_replan_versions_never_repeat_under_concurrency(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    await store.upsert_user(User("u2", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    versions = await asyncio.gather(
        *(next_version(store, "u1") for _ in range(50)),
        *(next_version(store, "u2") for _ in range(5)),
    )
    assert sorted(versions[:50]) == list(range(2, 52))
    assert sorted(versions[50:]) == list(range(2, 7))
    stored = await store.get_users(["u1", "u2"])
    assert (stored["u1"].plan_version, stored["u2"].plan_version) == (51, 6)


async def test_upsert_user_never_lowers_plan_version(store: Store) -> None:
    # A PUT that read the user before a concurrent re-plan took a version writes
    # its (older) snapshot: the fields change, the plan version does not go back.
    await store.upsert_user(User("u1", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    assert await next_version(store, "u1") == 2
    assert await next_version(store, "u1") == 3
    stale = User("u1", "Asia/Jakarta", plan_version=1, created_at=T0, updated_at=at(1))
    stored, _ = await store.upsert_user(stale)
    assert (stored.timezone, stored.plan_version, stored.updated_at) == ("Asia/Jakarta", 3, at(1))
    assert await store.get_user("u1") == stored
    # A higher version is taken as given.
    higher, _ = await store.upsert_user(dataclasses.replace(stale, plan_version=7))
    assert higher.plan_version == 7
    assert await next_version(store, "u1") == 8


async def test_upsert_user_racing_replans_keeps_every_version(store: Store) -> None:
    await store.upsert_user(User("u1", "UTC", plan_version=1, created_at=T0, updated_at=T0))
    snapshot = User("u1", "Europe/Paris", plan_version=1, created_at=T0, updated_at=at(1))
    results = await asyncio.gather(
        *(next_version(store, "u1") for _ in range(10)),
        *(store.upsert_user(snapshot) for _ in range(10)),
    )
    versions = [v for v in results if isinstance(v, int)]
    assert [r[1] for r in results if isinstance(r, tuple)] == [False] * 10
    assert sorted(versions) == list(range(2, 12))
    stored = await store.get_user("u1")
    assert stored is not None
    assert (stored.plan_version, stored.timezone) == (11, "Europe/Paris")


async def test_of_concurrent_creates_of_one_user_one_only_inserted(store: Store) -> None:
    new = User("u-new", "UTC", created_at=T0, updated_at=T0)
    results = await asyncio.gather(*(store.upsert_user(new) for _ in range(8)))
    assert [inserted for _, inserted in results].count(True) == 1
    assert all(user.user_id == "u-new" for user, _ in results)
