"""Upgrading in place (issue 23): a SQLite file made before the registry of apps, holding a
user, a device and a pending one-off, opened by this version as the default app. The
one-off is delivered as before, the registry's tables are there, empty. On both brokers.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from tepat.adapters.sqlite import SqliteStore, schema
from tepat.clock import SystemClock
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.categories import DEFAULT_CATEGORIES
from tepat.domain.models import Device, MessageStatus, User
from tepat.domain.planning import plan_oneoff, request_fingerprint
from tests.support.app_deployment import DEFAULT_TOKEN, deployment
from tests.support.provider_sandboxes import BROKERS
from tests.support.waiting import eventually

pytestmark = pytest.mark.parametrize("broker", BROKERS)
REGISTRY_MIGRATION = 18  # tests/contract/test_apps_contract.py
TOKEN = "ExponentPushToken[old-ana]"


async def _old_deployment(db: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store as the version before apps left it: a user, a device, a one-off due in a
    moment, not sent. Returns the one-off's id."""
    monkeypatch.setattr(
        schema, "MIGRATIONS", tuple(m for m in schema.MIGRATIONS if m[0] < REGISTRY_MIGRATION)
    )
    clock = SystemClock()
    store = SqliteStore(str(db), clock=clock)
    await store.open()
    try:
        now = clock.now()
        user, _ = await store.upsert_user(User("ana", "UTC", created_at=now, updated_at=now))
        await store.register_device(Device("ana", "phone", TOKEN, created_at=now, updated_at=now))
        [policy] = [p for p in DEFAULT_CATEGORIES if p.name == "custom"]
        message = plan_oneoff(
            user,
            policy,
            "k",
            "Hello",
            "from before apps",
            {},
            now + timedelta(seconds=2),
            now,
            request_fingerprint({"k": 1}),
        )
        [created] = (await store.insert_messages([message])).created
    finally:
        await store.close()
        monkeypatch.undo()
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert "apps" not in tables
    return created.id


async def test_a_store_from_before_apps_is_the_default_app_and_delivers(
    tmp_path: Path, broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    message_id = await _old_deployment(tmp_path / "tepat.db", monkeypatch)
    async with deployment(tmp_path, broker) as d:
        store = d.runtime(DEFAULT_APP).store

        async def delivered() -> bool:
            m = await store.get_message(message_id)
            return m is not None and m.status in (MessageStatus.SENT, MessageStatus.DELIVERED)

        await eventually(delivered, timeout=30, what="the old one-off delivered")
        [arrived] = d.received(TOKEN)
        assert (arrived["body"], arrived["access_token"]) == ("from before apps", DEFAULT_TOKEN)
        r = await d.operator.get("/v1/admin/apps")
        assert r.status_code == 200 and r.json() == []
        assert d.apps.registry is not None
        assert await d.apps.registry.list_app_keys(DEFAULT_APP) == []
    conn = sqlite3.connect(tmp_path / "tepat.db")
    assert conn.execute("SELECT COUNT(*) FROM apps").fetchone() == (0,)
    assert conn.execute("SELECT COUNT(*) FROM app_keys").fetchone() == (0,)
    conn.close()
    assert not [p for p in os.listdir(tmp_path) if p.startswith("tepat.app-")]  # no app store
