"""MongoDB writes a listed event in steps (event, recipients, then fanning out): a crash
between them leaves it ``accepting``, unseen by the fan-out, and a retry finishes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tepat.adapters.mongo import MongoStore
from tepat.adapters.mongo.events import EventsMixin
from tepat.domain.events import EventState
from tests.contract.test_events_contract import event
from tests.support.mongo_async_mock import AsyncMockClient


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MongoStore]:
    del tmp_path
    s = MongoStore("mongodb://mongomock.invalid/tepat_ev", client=AsyncMockClient())
    await s.open()
    yield s
    await s.close()


async def test_a_crash_before_the_recipients_is_finished_by_a_retry(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = EventsMixin._put_recipients

    async def crash(self: Any, event_id: str, ids: Any) -> None:
        raise ConnectionError("process died")

    monkeypatch.setattr(EventsMixin, "_put_recipients", crash)
    with pytest.raises(ConnectionError):
        await store.create_event(event(), ["u2", "u1"])
    monkeypatch.setattr(EventsMixin, "_put_recipients", real)
    stored = await store.get_event("ev-1")
    assert stored is not None and stored.state is EventState.ACCEPTING
    assert await store.events_fanning_out(10) == []  # never a partial list

    # Another request under the id does not complete it with its own list.
    other, created = await store.create_event(event(request_hash="other"), ["x"])
    assert not created and other.state is EventState.ACCEPTING

    again, created = await store.create_event(event(), ["u2", "u1"])
    assert not created and again.state is EventState.FANNING_OUT
    assert await store.event_recipients("ev-1", False, "", 10) == ["u1", "u2"]
    assert [e.event_id for e in await store.events_fanning_out(10)] == ["ev-1"]
