"""A one-off's ``send_at`` given finer than a millisecond is never kept earlier than asked.

A BSON date holds milliseconds: cut down there, a ``send_at`` of ``...00.700123`` was
stored (and so held and sent) at ``...00.700``, early; the model test found it on
mongomock. Planning rounds it up to the millisecond, so every store keeps the same
instant and none is before the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tepat.domain.categories import Categories
from tepat.domain.models import User
from tepat.domain.planning import plan_oneoff
from tepat.ports.store import Store
from tests.support.store_factories import STORE_FACTORIES

NOW = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with STORE_FACTORIES[request.param](tmp_path) as s:
        yield s


@pytest.mark.parametrize("micros", [700_123, 700_000, 999_999, 1])
async def test_a_send_at_finer_than_a_millisecond_is_kept_at_or_after_it(
    store: Store, micros: int
) -> None:
    user = User("ana", "Europe/London", created_at=NOW, updated_at=NOW)
    await store.upsert_user(user)
    send_at = NOW + timedelta(minutes=7, microseconds=micros)
    policy = Categories().get("meal")
    message = plan_oneoff(user, policy, "k1", "t", "b", {}, send_at, NOW, "hash")
    await store.insert_messages([message])
    [stored] = await store.get_messages([message.id])
    for instant in (stored.scheduled_at, stored.due):
        assert send_at <= instant < send_at + timedelta(milliseconds=1)
    # Both stores keep the same instant: a whole millisecond.
    assert stored.due.microsecond % 1000 == 0
