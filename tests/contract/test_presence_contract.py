"""Store contract: live members of a group (consumers sharing one rate ceiling)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tepat.ports.store import Store

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
TTL = timedelta(seconds=7)


async def test_members_count_while_they_beat_and_drop_out_when_silent(store: Store) -> None:
    assert await store.heartbeat("g", "a", T0, TTL) == 1
    assert await store.heartbeat("g", "b", T0 + timedelta(seconds=1), TTL) == 2
    assert await store.heartbeat("other", "c", T0 + timedelta(seconds=1), TTL) == 1
    # a keeps beating; b went silent 8 s ago
    assert await store.heartbeat("g", "a", T0 + timedelta(seconds=9), TTL) == 1
    assert await store.heartbeat("g", "b", T0 + timedelta(seconds=10), TTL) == 2


async def test_a_member_that_leaves_is_not_counted(store: Store) -> None:
    await store.heartbeat("g", "a", T0, TTL)
    await store.heartbeat("g", "b", T0, TTL)
    await store.leave("g", "b")
    await store.leave("g", "nobody")  # harmless
    assert await store.heartbeat("g", "a", T0 + timedelta(seconds=1), TTL) == 1


async def test_concurrent_first_beats_count_every_member(store: Store) -> None:
    await asyncio.gather(*(store.heartbeat("g", f"m{i}", T0, TTL) for i in range(5)))
    assert await store.heartbeat("g", "m0", T0, TTL) == 5
