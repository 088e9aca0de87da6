"""The contract of provider-event dedup (``tepat/ports/repositories/provider_events.py``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from tepat.adapters.sqlite import SqliteStore
from tepat.domain.contacts import SuppressionReason
from tepat.ports.store import Store

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
R = SuppressionReason


async def test_a_provider_event_is_recorded_once(store: Store) -> None:
    assert await store.record_provider_event("twilio", "SM1:delivered", T0)
    assert not await store.record_provider_event("twilio", "SM1:delivered", T0)
    assert await store.record_provider_event("twilio", "SM1:sent", T0)
    assert await store.record_provider_event("ses", "SM1:delivered", T0)  # another provider


async def test_a_provider_event_is_seen_once_recorded_and_only_for_its_provider(
    store: Store,
) -> None:
    assert not await store.provider_event_seen("ses", "msg-2")
    await store.record_provider_event("ses", "msg-2", T0)
    assert await store.provider_event_seen("ses", "msg-2")
    assert not await store.provider_event_seen("twilio", "msg-2")
    assert not await store.provider_event_seen("ses", "msg-3")


async def test_concurrent_records_of_one_provider_event_are_new_once(store: Store) -> None:
    results = await asyncio.gather(
        *(store.record_provider_event("ses", "msg-1", T0) for _ in range(20))
    )
    assert sorted(results) == [False] * 19 + [True]


async def test_two_sqlite_connections_record_a_provider_event_once(tmp_path: Path) -> None:
    # SQLite only: two stores on one file are two processes' connections; the primary key
    # decides across them too (MongoDB's unique index is the same for every client).
    path = str(tmp_path / "tepat.db")
    a, b = SqliteStore(path), SqliteStore(path)
    await a.open()
    await b.open()
    try:
        results = await asyncio.gather(
            *(s.record_provider_event("twilio", f"e{i}", T0) for i in range(20) for s in (a, b))
        )
        assert sum(results) == 20
        added = await asyncio.gather(
            *(s.add_suppression("sms", "+14155550100", R.STOP, T0) for s in (a, b) * 5)
        )
        assert sum(added) == 1
    finally:
        await a.close()
        await b.close()
