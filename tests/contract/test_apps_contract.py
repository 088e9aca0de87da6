"""Store contract: the registry of apps and their keys (issue 23, ``tepat/domain/apps.py``),
its settings sealed at rest with ``TEPAT_SECRETS_KEY``, and a SQLite file made before
the registry gaining it when opened."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pymongo.errors import DuplicateKeyError

from tepat.adapters.sealed_apps import SEALED
from tepat.adapters.secret_box import MARKER, SecretKeyError
from tepat.adapters.sqlite import SqliteStore, schema
from tepat.config import load_settings
from tepat.domain.apps import App, AppKey, hash_key
from tepat.ports.store import Store
from tepat.wiring import app_repository

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
SECRET = "smtp-password-9f3a7c"
SETTINGS = {
    "smtp_host": "mail.example.com",
    "smtp_password": SECRET,
    "expo_rate_limit": 600,
    "categories": ["meal", "safety"],
}
KEY = Fernet.generate_key().decode()
REGISTRY_MIGRATION = 18


def make_app(app_id: str = "shop", **fields: object) -> App:
    base = App(app_id, f"{app_id} app", T0, dict(SETTINGS))
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def make_key(key_id: str, app_id: str = "shop", **fields: object) -> AppKey:
    base = AppKey(key_id, hash_key(f"tpk_{key_id}"), app_id, "admin", T0)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


async def test_an_app_is_created_once_and_read_back(store: Store) -> None:
    app = make_app()
    assert await store.create_app(app)
    assert await store.get_app("shop") == app

    assert not await store.create_app(make_app(name="another", settings={}))
    assert await store.get_app("shop") == app  # the first one, untouched
    assert await store.get_app("nope") is None


async def test_apps_are_listed_by_id_disabled_ones_too(store: Store) -> None:
    for app_id in ("zoo", "alpha", "mid"):
        assert await store.create_app(make_app(app_id, disabled=app_id == "mid"))
    apps = await store.list_apps()
    assert [a.app_id for a in apps] == ["alpha", "mid", "zoo"]
    assert [a.disabled for a in apps] == [False, True, False]


async def test_an_update_changes_what_is_given_and_bumps_the_version(store: Store) -> None:
    assert await store.create_app(make_app())

    renamed = await store.update_app("shop", name="Shop")
    assert renamed == make_app(name="Shop", version=2)

    replaced = await store.update_app("shop", settings={"jwt_issuer": "shop"})
    assert replaced is not None and replaced.settings == {"jwt_issuer": "shop"}  # whole
    assert replaced.version == 3 and replaced.name == "Shop"

    disabled = await store.update_app("shop", disabled=True)
    assert disabled is not None and disabled.disabled and disabled.version == 4
    enabled = await store.update_app("shop", disabled=False)
    assert enabled is not None and not enabled.disabled and enabled.version == 5
    assert enabled.settings == {"jwt_issuer": "shop"}
    assert await store.get_app("shop") == enabled

    assert await store.update_app("nope", name="x") is None
    assert await store.get_app("nope") is None


async def test_keys_are_listed_by_app_oldest_first(store: Store) -> None:
    later = make_key("k2", created_at=T0 + timedelta(seconds=1))
    events = make_key(
        "k3",
        role="events",
        poster="billing",
        event_types=frozenset({"order.paid", "order.shipped"}),
        created_at=T0 + timedelta(seconds=2),
    )
    for key in (later, events, make_key("k1"), make_key("o1", app_id="other")):
        await store.add_app_key(key)

    assert await store.list_app_keys("shop") == [make_key("k1"), later, events]
    assert [k.key_id for k in await store.list_app_keys("other")] == ["o1"]
    assert await store.list_app_keys("nope") == []


async def test_a_key_id_is_one_key(store: Store) -> None:
    await store.add_app_key(make_key("k1"))
    with pytest.raises((sqlite3.IntegrityError, DuplicateKeyError)):
        await store.add_app_key(make_key("k1", key_hash=hash_key("tpk_else")))
    assert await store.list_app_keys("shop") == [make_key("k1")]


async def test_a_key_is_revoked_once_and_only_through_its_app(store: Store) -> None:
    key = make_key("k1")
    await store.add_app_key(key)
    at = T0 + timedelta(minutes=5)

    assert not await store.revoke_app_key("other", "k1", at)
    assert not await store.revoke_app_key("shop", "k9", at)
    assert await store.list_app_keys("shop") == [key]

    assert await store.revoke_app_key("shop", "k1", at)
    revoked = dataclasses.replace(key, revoked_at=at)
    assert await store.list_app_keys("shop") == [revoked]
    assert not revoked.active
    assert not await store.revoke_app_key("shop", "k1", at + timedelta(minutes=1))
    assert await store.list_app_keys("shop") == [revoked]  # kept, revoked at the first time


# ---------------------------------------------------------------- settings at rest


async def test_with_a_key_the_stored_settings_show_no_secret(store: Store) -> None:
    sealed = app_repository(load_settings(secrets_key=KEY), store)
    assert await sealed.create_app(make_app())

    raw = await store.get_app("shop")  # what the store holds
    assert raw is not None and set(raw.settings) == {SEALED}
    assert raw.settings[SEALED].startswith(MARKER)
    assert SECRET not in repr(raw) and "smtp_password" not in repr(raw)
    assert await sealed.get_app("shop") == make_app()
    assert await sealed.list_apps() == [make_app()]

    changed = {**SETTINGS, "smtp_password": "rotated-4b1d"}
    updated = await sealed.update_app("shop", settings=changed)
    assert updated is not None and updated.settings == changed
    raw = await store.get_app("shop")
    assert raw is not None and "rotated-4b1d" not in repr(raw)


async def test_without_a_key_settings_are_stored_plain_and_read_with_a_key_later(
    store: Store,
) -> None:
    assert await app_repository(load_settings(), store).create_app(make_app())
    assert await store.get_app("shop") == make_app()

    keyed = app_repository(load_settings(secrets_key=KEY), store)
    assert await keyed.get_app("shop") == make_app()
    renamed = await keyed.update_app("shop", name="Shop")  # settings not given: left as they are
    assert renamed is not None and renamed.settings == SETTINGS


async def test_sealed_settings_without_the_key_are_refused_not_misread(store: Store) -> None:
    assert await app_repository(load_settings(secrets_key=KEY), store).create_app(make_app())
    with pytest.raises(SecretKeyError, match="an app's settings"):
        await app_repository(load_settings(), store).get_app("shop")


async def test_the_sqlite_row_holds_no_secret(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = SqliteStore(str(db))
    await store.open()
    try:
        assert await app_repository(load_settings(secrets_key=KEY), store).create_app(make_app())
    finally:
        await store.close()
    conn = sqlite3.connect(db)
    [(row,)] = conn.execute("SELECT settings FROM apps").fetchall()
    conn.close()
    assert MARKER in row and SECRET not in row


# ---------------------------------------------------------------- migration


def test_a_sqlite_file_from_before_the_registry_gains_it_with_its_rows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    before = tuple(m for m in schema.MIGRATIONS if m[0] < REGISTRY_MIGRATION)
    monkeypatch.setattr(schema, "MIGRATIONS", before)
    schema._migrate(conn, "t0")
    conn.execute("INSERT INTO meta VALUES ('kept', 'yes')")
    assert "apps" not in tables(conn)
    conn.close()
    monkeypatch.undo()

    async def reopen() -> None:
        store = SqliteStore(str(db))  # opening applies what is missing: the registry
        await store.open()
        try:
            assert await store.get_meta("kept") == "yes"
            assert await store.create_app(make_app())
            await store.add_app_key(make_key("k1"))
            assert await store.get_app("shop") == make_app()
            assert await store.list_app_keys("shop") == [make_key("k1")]
        finally:
            await store.close()

    asyncio.run(reopen())
    conn = sqlite3.connect(db)
    assert {"apps", "app_keys"} <= tables(conn)
    applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
    conn.close()
    assert sorted(applied) == [v for v, _ in schema.MIGRATIONS]


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
