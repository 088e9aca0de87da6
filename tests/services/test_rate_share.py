"""Consumer processes share the provider's ceiling through heartbeats in the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from consumers.rate_share import BEAT_SECONDS, run_rate_share
from tepat import metrics
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.runtime import Runtime, open_runtime
from tests.support.fake_push import FakePush
from tests.support.waiting import eventually


class SharePush(FakePush):
    def __init__(self) -> None:
        super().__init__()
        self.share = 1.0

    def set_rate_share(self, share: float) -> None:
        self.share = share


@asynccontextmanager
async def two_consumers(
    tmp_path: Path, clock: FakeClock, a_push: SharePush, b_push: SharePush
) -> AsyncIterator[tuple[Runtime, Runtime]]:
    """Two consumer processes' runtimes on one store."""
    settings = Settings(database_url=f"sqlite:///{tmp_path}/t.db", broker_url="embedded://")
    async with (
        open_runtime(settings, clock=clock, push=a_push) as a,
        open_runtime(settings, clock=clock, push=b_push) as b,
    ):
        yield a, b


async def test_two_consumers_take_half_each_and_the_survivor_takes_all(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2027, 3, 1, 9, 0, tzinfo=UTC))
    a_push, b_push = SharePush(), SharePush()
    async with two_consumers(tmp_path, clock, a_push, b_push) as (a, b):
        a_stop, b_stop = asyncio.Event(), asyncio.Event()
        a_task = asyncio.create_task(run_rate_share(a, a_stop))
        b_task = asyncio.create_task(run_rate_share(b, b_stop))

        async def beat() -> bool:
            clock.advance(BEAT_SECONDS)
            return a_push.share == b_push.share == 0.5

        await eventually(beat, what="both at half the ceiling")
        assert metrics.REGISTRY.get_sample_value("tepat_live_consumers") == 2

        # b stops (a process killed without leaving is dropped after the TTL instead:
        # see the store contract's presence tests); a takes the whole ceiling.
        b_task.cancel()
        await asyncio.gather(b_task, return_exceptions=True)

        async def alone() -> bool:
            clock.advance(BEAT_SECONDS)
            return a_push.share == 1.0

        await eventually(alone, what="a alone")
        assert metrics.REGISTRY.get_sample_value("tepat_live_consumers") == 1
        a_stop.set()
        clock.advance(BEAT_SECONDS)
        await a_task


async def test_a_store_outage_keeps_the_share_and_logs_a_warning_a_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed beat must not double anyone's rate (the share stays), and an outage is
    one warning line a beat, not a traceback (issue 20: a store outage's log)."""
    clock = FakeClock(datetime(2027, 3, 1, 9, 0, tzinfo=UTC))
    a_push, b_push = SharePush(), SharePush()
    async with two_consumers(tmp_path, clock, a_push, b_push) as (a, b):
        # SQLite has no server to lose: as a Mongo store does, it names its outage's error.
        monkeypatch.setattr(type(a.store), "unavailable_errors", (ConnectionError,))
        stop = asyncio.Event()
        tasks = [asyncio.create_task(run_rate_share(rt, stop)) for rt in (a, b)]

        async def beat() -> bool:
            clock.advance(BEAT_SECONDS)
            return a_push.share == b_push.share == 0.5

        await eventually(beat, what="both at half the ceiling")
        beats = 0

        async def down(*args: object) -> int:
            nonlocal beats
            beats += 1
            raise ConnectionError("the store is down")

        with capture_logs() as logs:
            monkeypatch.setattr(a.store, "heartbeat", down)

            async def three_failed_beats() -> bool:
                clock.advance(BEAT_SECONDS)
                return beats >= 3

            await eventually(three_failed_beats, what="beats during the outage")
        assert a_push.share == 0.5  # kept, not doubled
        failed = [e for e in logs if e["event"] == "rate share heartbeat failed"]
        assert len(failed) >= 3 and {e["log_level"] for e in failed} == {"warning"}
        assert not [e for e in logs if e["log_level"] in ("error", "exception", "critical")]
        stop.set()
        clock.advance(BEAT_SECONDS)
        await asyncio.gather(*tasks)
