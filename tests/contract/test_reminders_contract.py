"""The contract of reminders (``tepat/ports/repositories/reminders.py``).

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import time

from tepat.ports.store import Store
from tests.contract.records import T0, at, reminder


async def test_reminder_round_trips_every_field(store: Store) -> None:
    r = reminder(
        label="morning",
        days=("mon", "wed", "fri"),
        data={"screen": "meal", "n": [1, 2], "nested": {"ok": True}},
        enabled=False,
        version=4,
    )
    assert await store.upsert_reminder(r) == (r, True)
    assert await store.get_reminder("u1", "r1") == r
    assert await store.get_reminder("u1", "nope") is None


async def test_upsert_reminder_keeps_created_at(store: Store) -> None:
    await store.upsert_reminder(reminder())
    changed = reminder(local_time=time(8, 15), version=2)
    changed = dataclasses.replace(changed, created_at=at(60), updated_at=at(60))
    stored, inserted = await store.upsert_reminder(changed)
    assert not inserted
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


async def test_of_concurrent_upserts_of_a_new_reminder_exactly_one_inserts(store: Store) -> None:
    """What decides a PUT's 201: the write, not a read before it. (A findAndModify
    pre-image on a server told two or three of eight, half of the time: hence 5 rounds.)"""
    for rid in ("a", "b", "c", "d", "e"):
        takes = [reminder(rid, title=f"take {n}", version=n) for n in range(1, 9)]
        results = await asyncio.gather(*(store.upsert_reminder(r) for r in takes))
        assert [inserted for _, inserted in results].count(True) == 1
        assert all(stored.created_at == T0 for stored, _ in results)
        assert await store.get_reminder("u1", rid) in [stored for stored, _ in results]
    assert (await store.upsert_reminder(reminder("r2")))[1]
    assert not (await store.upsert_reminder(reminder("r2")))[1]
