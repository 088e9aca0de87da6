"""A new tz database release re-plans pending messages (GUIDE.md §3)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path

from scheduler.creator import TZDATA_META_KEY
from tepat.domain.models import MessageStatus
from tests.support.pipeline import pipeline

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)


async def test_release_change_replans_pending_messages_once(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        await p.add_user("ana", "Africa/Casablanca", reminders=[("r", "meal", time(9, 0))])
        assert await p.rt.creator.replan_if_tzdata_changed("2026f") is None  # first start
        await p.rt.creator.plan_window(START, START + timedelta(hours=48))
        before = await p.messages("ana")
        assert len(before) == 2

        assert await p.rt.creator.replan_if_tzdata_changed("2026f") is None  # same release
        assert await p.messages("ana") == before

        result = await p.rt.creator.replan_if_tzdata_changed("2027a")
        assert result is not None and result.cancelled == 2 and result.created == 2
        after = await p.messages("ana")
        live = [m for m in after if m.status is MessageStatus.PENDING]
        cancelled = [m for m in after if m.status is MessageStatus.CANCELLED]
        assert len(live) == 2 and len(cancelled) == 2
        assert {m.local_date for m in live} == {m.local_date for m in before}
        assert await p.rt.store.get_meta(TZDATA_META_KEY) == "2027a"
