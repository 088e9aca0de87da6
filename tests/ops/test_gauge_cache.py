"""Scrapes are cheap: /metrics never reads the store or the broker; one background task
does, on its interval (fake clock), and a failing source keeps its last values."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from tepat import metrics
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.ports.broker import QueueStats
from tepat.ports.repositories.messages import Counts
from tepat.runtime import open_runtime
from tests.ops.support import Exposition
from tests.support.messages import make_message
from tests.support.waiting import drive, eventually

KEY = "ops-cache-admin-key-0123456789abcdef"


def _counting(
    calls: Counter[str], name: str, fn: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def wrapped(*args: Any) -> Any:
        calls[name] += 1
        return await fn(*args)

    return wrapped


async def test_scrapes_serve_cached_gauges_refreshed_by_one_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(datetime(2027, 5, 1, tzinfo=UTC))
    settings = Settings(database_url=f"sqlite:///{tmp_path}/t.db", metrics_refresh_seconds=30)
    async with open_runtime(settings, clock=clock) as rt:
        calls: Counter[str] = Counter()
        monkeypatch.setattr(
            rt.store, "count_messages", _counting(calls, "store", rt.store.count_messages)
        )
        monkeypatch.setattr(rt.broker, "stats", _counting(calls, "broker", rt.broker.stats))
        transport = httpx.ASGITransport(app=create_app(rt, KEY))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def scrape() -> Exposition:
                r = await client.get("/metrics")
                assert r.status_code == 200
                return Exposition.parse(r.text)

            for _ in range(5):
                await scrape()
            assert calls == Counter()

            stop = asyncio.Event()
            task = asyncio.create_task(metrics.run_gauge_refresher(rt, stop))
            await eventually(lambda: calls == Counter(store=1, broker=1), what="first refresh")
            exp = await scrape()
            assert exp.value("tepat_messages", status="pending", category="meal") == 0
            assert exp.value(
                "tepat_gauges_last_refresh_timestamp_seconds", source="store"
            ) == pytest.approx(clock.now().timestamp())

            # The store fails: its gauges keep their values and their timestamp.
            async def broken() -> Counts:
                raise ConnectionError("store down")

            stamped = clock.now().timestamp()
            monkeypatch.setattr(rt.store, "count_messages", _counting(calls, "store", broken))
            await drive(clock, lambda: calls["store"] == 2, what="second refresh")

            async def broker_refreshed() -> bool:
                stamp = (await scrape()).value(
                    "tepat_gauges_last_refresh_timestamp_seconds", source="broker"
                )
                return (stamp or 0) > stamped

            await eventually(broker_refreshed, what="the broker's gauges refreshed")
            exp = await scrape()
            assert exp.value("tepat_messages", status="pending", category="meal") == 0
            assert exp.value(
                "tepat_gauges_last_refresh_timestamp_seconds", source="store"
            ) == pytest.approx(stamped)

            for _ in range(5):
                await scrape()
            assert calls == Counter(store=2, broker=2)
            stop.set()
            await task


async def test_queue_depth_comes_from_broker_stats(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2027, 5, 1, tzinfo=UTC))
    settings = Settings(database_url=f"sqlite:///{tmp_path}/t.db")
    async with open_runtime(settings, clock=clock) as rt:

        async def stats(queues: Sequence[str]) -> list[QueueStats]:
            return [
                QueueStats(q, ready=i, scheduled=10, in_flight=0, dead_letters=1)
                for i, q in enumerate(queues)
            ]

        rt.broker.stats = stats  # type: ignore[method-assign]
        await metrics.refresh_gauges(rt)
        exp = Exposition.parse(metrics.exposition().decode())
        second = rt.queues[1]
        assert exp.value("tepat_queue_depth", queue=second, state="ready") == 1
        assert exp.value("tepat_queue_depth", queue=second, state="dead_letters") == 1


async def test_oldest_due_unsent_is_the_age_of_the_oldest_due_message(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2027, 5, 1, tzinfo=UTC))
    settings = Settings(database_url=f"sqlite:///{tmp_path}/t.db")
    async with open_runtime(settings, clock=clock) as rt:
        await metrics.refresh_gauges(rt)
        assert metrics.REGISTRY.get_sample_value("tepat_oldest_due_unsent_seconds") == 0
        now = clock.now()
        await rt.store.insert_messages(
            [
                make_message("due", scheduled_at=now - timedelta(seconds=90), channel="sms"),
                make_message("later", scheduled_at=now + timedelta(seconds=30)),
            ]
        )
        await metrics.refresh_gauges(rt)
        assert metrics.REGISTRY.get_sample_value("tepat_oldest_due_unsent_seconds") == 90
        clock.advance(timedelta(seconds=60))
        await metrics.refresh_gauges(rt)
        assert metrics.REGISTRY.get_sample_value("tepat_oldest_due_unsent_seconds") == 150
