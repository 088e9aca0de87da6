"""Opening a MongoDB database written before the slot key, the outbox and per-user devices.

``MongoStore.open()`` retires the old indexes and backfills the new message
fields (``tepat.adapters.mongo.indexes.migrate``). Runs on the mongomock facade and
on the server of ``TEPAT_TEST_MONGO_URL`` (``tests/support/mongo_factory.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import ASCENDING, AsyncMongoClient

from tepat.adapters.mongo import MongoStore
from tepat.adapters.mongo.codecs import message_doc
from tepat.domain.models import Device, Message, MessageStatus, message_id_for, slot_key_for
from tests.support.mongo_async_mock import AsyncMockClient
from tests.support.mongo_factory import MOCK, MONGO_STORES, server_database

T0 = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)
DB = "tepat_migration"


@asynccontextmanager
async def _client(backend: str) -> AsyncIterator[tuple[Any, str]]:
    if backend == MOCK:
        yield AsyncMockClient(), DB
        return
    async with server_database() as url:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url, tz_aware=True)
        try:
            yield client, client.get_default_database().name
        finally:
            await client.close()


def _legacy(key: str, **fields: Any) -> Message:
    dedup = f"legacy|{key}"
    base = Message(
        id=message_id_for(dedup),
        user_id="u1",
        category="meal",
        label=key,
        title="t",
        body="b",
        scheduled_at=T0,
        timezone="UTC",
        dedup_key=dedup,
        live_key=f"r|u1|{key}|2027-03-14",
        reminder_id=key,
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(base, **fields)


def _legacy_doc(m: Message) -> dict[str, Any]:
    """The document as the previous version wrote it."""
    doc = message_doc(m, T0)
    for field in ("nominal_at", "due_at", "slot_key", "publish_pending"):
        del doc[field]
    doc["device_key"] = m.device_id or "*"
    return doc


async def _write_legacy_database(db: Any) -> list[Message]:
    messages = db["messages"]
    await messages.create_index(
        [
            ("user_id", ASCENDING),
            ("device_key", ASCENDING),
            ("category", ASCENDING),
            ("label", ASCENDING),
            ("scheduled_at", ASCENDING),
        ],
        unique=True,
        name="uniq_pending_slot",
        partialFilterExpression={"status": "pending"},
    )
    await db["devices"].create_index(
        "device_id",
        unique=True,
        name="uniq_active_device_id",
        partialFilterExpression={"active": True},
    )
    legacy = [
        _legacy("pending-a"),
        _legacy("pending-b", scheduled_at=T0 + timedelta(minutes=5)),
        # Two finished messages of one slot: the new unique index must not see them.
        _legacy("sent", label="same", status=MessageStatus.SENT),
        _legacy("sent-2", label="same", status=MessageStatus.SENT),
        _legacy("oneoff", reminder_id=None, live_key="o|u1|k1", idempotency_key="k1"),
    ]
    await messages.insert_many([_legacy_doc(m) for m in legacy])
    await db["devices"].insert_one(
        {
            "_id": "alice|phone",
            "user_id": "alice",
            "device_id": "phone",
            "push_token": "tok-a",
            "platform": "ios",
            "active": True,
            "consecutive_failures": 0,
            "deactivated_reason": None,
            "created_at": T0,
            "updated_at": T0,
        }
    )
    return legacy


@pytest.mark.parametrize("backend", MONGO_STORES)
async def test_open_migrates_a_database_of_the_previous_version(backend: str) -> None:
    async with _client(backend) as (client, name):
        db = client[name]
        legacy = await _write_legacy_database(db)
        store = MongoStore(f"mongodb://migration.invalid/{name}", client=client)
        await store.open()
        await store.open()  # idempotent: nothing left to drop or backfill

        messages = await db["messages"].index_information()
        devices = await db["devices"].index_information()
        assert "uniq_pending_slot" not in messages
        assert {"uniq_pending_slot_key", "outbox_due", "pending_due"} <= set(messages)
        assert "uniq_active_device_id" not in devices
        assert "uniq_active_user_device" in devices

        for m in legacy:
            stored = await store.get_message(m.id)
            assert stored is not None
            expected_slot = slot_key_for(m)
            assert (stored.nominal_at, stored.due_at, stored.slot_key) == (
                m.scheduled_at,
                m.scheduled_at,
                expected_slot,
            )
            raw = await db["messages"].find_one({"_id": m.id})
            assert raw is not None
            assert raw["publish_pending"] is False
            assert raw["slot_key"] == expected_slot

        # Published the old way: the sweeper sees them, the outbox does not.
        assert await store.unpublished(10) == []
        due = await store.due_pending(T0 + timedelta(hours=1), 10)
        assert {m.id for m in due} == {legacy[0].id, legacy[1].id, legacy[4].id}

        # A new plan of a legacy pending slot still collides with it.
        same_slot = dataclasses.replace(
            _legacy("pending-a"), id="new", dedup_key="new", live_key=None
        )
        assert (await store.insert_messages([same_slot])).existing == 1

        # Device ids are per user now: bob's phone leaves alice's alone.
        await store.register_device(Device("bob", "phone", "tok-b", created_at=T0))
        active = await store.active_devices(["alice", "bob"])
        assert sorted(active) == ["alice", "bob"]
