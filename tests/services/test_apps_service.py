"""AppService (issue 23): making apps and their keys, on the SQLite store.

A key is shown once and found by its hash; validation names the field; a quota or a
taken id is a conflict (409), an unknown app or key not found (404).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tepat.adapters.sqlite import SqliteStore
from tepat.clock import FakeClock
from tepat.domain.apps import KEY_PREFIX, MAX_APPS, MAX_KEYS_PER_APP, App, hash_key
from tepat.domain.errors import DomainError
from tepat.services.accounts import FieldConflict, NotFound
from tepat.services.apps import AppService

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def check_rate(settings: dict[str, Any]) -> None:
    """What the composition root's check does: refuse a value, naming the field."""
    rate = settings.get("expo_rate_limit", 1)
    if not isinstance(rate, int) or rate <= 0:
        raise DomainError("settings.expo_rate_limit", "expected a positive whole number")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(tmp_path / "t.db"), clock=clock)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def service(store: SqliteStore, clock: FakeClock) -> AppService:
    return AppService(store, clock, check_rate)


async def test_create_makes_the_app_and_its_first_admin_key_shown_once(
    service: AppService, store: SqliteStore
) -> None:
    app, made, key = await service.create("shop", " Shop ", {"expo_rate_limit": 300})
    assert app == App("shop", "Shop", T0, {"expo_rate_limit": 300})
    assert await service.get("shop") == app
    assert await service.list_apps() == [app]

    assert key.startswith(KEY_PREFIX)
    [found] = await store.list_app_keys("shop")
    assert found.key_hash == hash_key(key) and found.app_id == "shop" and found.role == "admin"
    assert found.active and found.poster is None and found.event_types is None
    assert await service.keys("shop") == [found] == [made]
    assert key not in repr(found)  # the registry keeps the hash only


@pytest.mark.parametrize("app_id", ["Shop", "1shop", "sh_op", "", "a" * 32, "shop:x"])
async def test_create_refuses_an_id_outside_the_alphabet(service: AppService, app_id: str) -> None:
    with pytest.raises(DomainError) as e:
        await service.create(app_id, "Shop", {})
    assert e.value.field == "app_id"


async def test_create_refuses_the_default_app_and_a_taken_id(service: AppService) -> None:
    with pytest.raises(FieldConflict) as e:
        await service.create("default", "Default", {})
    assert e.value.field == "app_id"
    first, _, _ = await service.create("shop", "Shop", {})
    with pytest.raises(FieldConflict) as e:
        await service.create("shop", "Other", {})
    assert e.value.field == "app_id"
    assert await service.list_apps() == [first]
    assert len(await service.keys("shop")) == 1  # no key made for the refused one


async def test_settings_are_checked_by_name_then_by_value(service: AppService) -> None:
    with pytest.raises(DomainError) as e:
        await service.create("shop", "Shop", {"smtp_host": "h", "database_url": "x"})
    assert e.value.field == "settings.database_url"
    with pytest.raises(DomainError) as e:
        await service.create("shop", "Shop", {"expo_rate_limit": 0})
    assert e.value.field == "settings.expo_rate_limit"
    with pytest.raises(DomainError) as e:
        await service.create("shop", "  ", {})
    assert e.value.field == "name"
    assert await service.list_apps() == []


async def test_a_deployment_holds_at_most_max_apps(service: AppService) -> None:
    for n in range(MAX_APPS):
        await service.create(f"app-{n}", f"App {n}", {})
    with pytest.raises(FieldConflict):
        await service.create("one-more", "One more", {})
    assert len(await service.list_apps()) == MAX_APPS


async def test_update_replaces_what_is_given_with_the_same_checks(service: AppService) -> None:
    await service.create("shop", "Shop", {"expo_rate_limit": 300, "smtp_host": "h"})
    updated = await service.update("shop", settings={"smtp_host": "mail"})
    assert updated.settings == {"smtp_host": "mail"} and updated.version == 2
    assert updated.name == "Shop" and not updated.disabled
    disabled = await service.update("shop", disabled=True, name="Shop 2")
    assert disabled.disabled and disabled.name == "Shop 2" and disabled.version == 3

    with pytest.raises(DomainError) as e:
        await service.update("shop", settings={"expo_rate_limit": -1})
    assert e.value.field == "settings.expo_rate_limit"
    with pytest.raises(DomainError) as e:
        await service.update("shop", settings={"tepat_admin_key": "x"})
    assert e.value.field == "settings.tepat_admin_key"
    assert await service.get("shop") == disabled  # refused changes change nothing

    with pytest.raises(NotFound):
        await service.update("nope", name="x")
    with pytest.raises(NotFound):
        await service.get("nope")


async def test_an_events_key_posts_as_the_app_unless_named(
    service: AppService, store: SqliteStore, clock: FakeClock
) -> None:
    await service.create("shop", "Shop", {})
    clock.advance(timedelta(seconds=1))
    plain, _ = await service.add_key("shop", "events")
    assert plain.role == "events" and plain.poster == "shop" and plain.event_types is None
    clock.advance(timedelta(seconds=1))
    scoped, key = await service.add_key(
        "shop", "events", poster="billing", event_types=["order.paid", "order.paid"]
    )
    assert scoped.poster == "billing" and scoped.event_types == frozenset({"order.paid"})
    assert [k.key_id for k in await service.keys("shop")][1:] == [plain.key_id, scoped.key_id]
    assert (await store.list_app_keys("shop"))[-1] == scoped and scoped.key_hash == hash_key(key)


@pytest.mark.parametrize(
    ("role", "fields", "field"),
    [
        ("owner", {}, "role"),
        ("admin", {"poster": "billing"}, "poster"),
        ("admin", {"event_types": ["order.paid"]}, "event_types"),
        ("events", {"poster": "Bill:ing"}, "poster"),
        ("events", {"event_types": []}, "event_types"),
        ("events", {"event_types": ["Order"]}, "event_types"),
        ("events", {"event_types": "order.paid"}, "event_types"),
    ],
)
async def test_add_key_refuses_bad_fields_by_name(
    service: AppService, role: str, fields: dict[str, Any], field: str
) -> None:
    await service.create("shop", "Shop", {})
    with pytest.raises(DomainError) as e:
        await service.add_key("shop", role, **fields)
    assert e.value.field == field
    assert len(await service.keys("shop")) == 1


async def test_an_app_holds_at_most_max_active_keys(service: AppService) -> None:
    await service.create("shop", "Shop", {})
    for _ in range(MAX_KEYS_PER_APP - 1):
        await service.add_key("shop", "admin")
    with pytest.raises(FieldConflict) as e:
        await service.add_key("shop", "events")
    assert e.value.field == "keys"
    first = (await service.keys("shop"))[0]
    await service.revoke_key("shop", first.key_id)  # a revoked key frees its place
    await service.add_key("shop", "events")
    assert sum(k.active for k in await service.keys("shop")) == MAX_KEYS_PER_APP


async def test_revoke_is_for_an_active_key_of_that_app(
    service: AppService, store: SqliteStore, clock: FakeClock
) -> None:
    await service.create("shop", "Shop", {})
    await service.create("other", "Other", {})
    key, plain = await service.add_key("shop", "events")
    [other] = await service.keys("other")

    with pytest.raises(NotFound):
        await service.revoke_key("shop", other.key_id)
    with pytest.raises(NotFound):
        await service.revoke_key("nope", key.key_id)
    clock.advance(timedelta(minutes=1))
    await service.revoke_key("shop", key.key_id)
    [found] = [k for k in await store.list_app_keys("shop") if k.key_hash == hash_key(plain)]
    assert found.revoked_at == T0 + timedelta(minutes=1)
    with pytest.raises(NotFound):
        await service.revoke_key("shop", key.key_id)  # once
    assert await store.list_app_keys("other") == [other]


async def test_keys_and_add_key_of_an_unknown_app_are_not_found(service: AppService) -> None:
    with pytest.raises(NotFound):
        await service.keys("nope")
    with pytest.raises(NotFound):
        await service.add_key("nope", "admin")
