"""A new tz database release re-plans pending messages (docs/PRINCIPLES.md §3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

from tepat.domain.models import MessageStatus, User, message_id_for
from tepat.services.planning.creator import TZDATA_META_KEY
from tests.support.pipeline import pipeline

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)


async def test_release_change_keeps_messages_whose_instant_the_rules_did_not_move(
    tmp_path: Path,
) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        await p.add_user("ana", "Africa/Casablanca", reminders=[("r", "meal", time(9, 0))])
        assert await p.rt.creator.replan_if_tzdata_changed("2026f") is None  # first start
        await p.rt.creator.plan_window(START, START + timedelta(hours=48))
        before = await p.messages("ana")
        assert len(before) == 2

        assert await p.rt.creator.replan_if_tzdata_changed("2026f") is None  # same release
        assert await p.messages("ana") == before

        result = await p.rt.creator.replan_if_tzdata_changed("2027a")
        assert result is not None and result.cancelled == 0
        assert [m.status for m in await p.messages("ana")] == [MessageStatus.PENDING] * 2
        assert await p.rt.store.get_meta(TZDATA_META_KEY) == "2027a"


async def test_release_change_replaces_a_message_planned_under_old_rules(tmp_path: Path) -> None:
    """A message whose nominal instant the old rules put an hour off (as Casablanca's
    did between releases) is cancelled and planned again at the instant the rules
    give now: same local date, new instant."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        await p.add_user("ana", "Africa/Casablanca", reminders=[("r", "meal", time(9, 0))])
        await p.rt.creator.replan_if_tzdata_changed("2026f")
        await p.rt.creator.plan_window(START, START + timedelta(hours=48))
        right = sorted(await p.messages("ana"), key=lambda m: m.nominal)[-1]
        # Rewrite the later one as the old rules would have planned it.
        assert await p.rt.store.transition(
            right.id,
            MessageStatus.CANCELLED,
            START,
            expect=[MessageStatus.PENDING],
            release_live_key=True,
        )
        old_rules = replace(
            right,
            id=message_id_for(right.dedup_key + "|old"),
            dedup_key=right.dedup_key + "|old",
            nominal_at=right.nominal + timedelta(hours=1),
            scheduled_at=right.scheduled_at + timedelta(hours=1),
            due_at=right.due + timedelta(hours=1),
            slot_key=None,
        )
        assert (await p.rt.store.insert_messages([old_rules])).created

        result = await p.rt.creator.replan_if_tzdata_changed("2027a")
        assert result is not None and result.cancelled == 1
        pending = [m for m in await p.messages("ana") if m.status is MessageStatus.PENDING]
        assert sorted(m.nominal for m in pending)[-1] == right.nominal
        assert (await p.rt.store.get_message(old_rules.id)).status is MessageStatus.CANCELLED  # type: ignore[union-attr]


async def test_tzdata_replan_interrupted_part_way_resumes_and_records_the_release_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        for name in ("ana", "ben", "cai"):
            await p.add_user(name, "Europe/Paris", reminders=[("r", "meal", time(9, 0))])
        await p.rt.creator.replan_if_tzdata_changed("2026f")
        creator = p.rt.creator
        real = creator.replan_user
        seen: list[str] = []

        async def failing(user_id: str, reason: str = "superseded") -> object:
            seen.append(user_id)
            if user_id == "cai":
                raise ConnectionError("store went away")
            return await real(user_id, reason=reason)

        monkeypatch.setattr(creator, "replan_user", failing)
        with pytest.raises(ConnectionError):
            await creator.replan_if_tzdata_changed("2027a")
        # Not recorded: the next start must finish the job.
        assert await p.rt.store.get_meta(TZDATA_META_KEY) == "2026f"

        monkeypatch.setattr(creator, "replan_user", real)
        assert await creator.replan_if_tzdata_changed("2027a") is not None
        assert await p.rt.store.get_meta(TZDATA_META_KEY) == "2027a"
        assert seen == ["ana", "ben", "cai"]


async def test_tzdata_replan_never_writes_back_a_stale_user_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user edited while the re-plan walks the pages keeps the edit."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        await p.add_user("ana", "Europe/Paris", reminders=[("r", "meal", time(9, 0))])
        await p.rt.creator.replan_if_tzdata_changed("2026f")
        store = p.rt.store
        real_iter = store.iter_users

        async def iter_then_edit(batch_size: int = 1000) -> AsyncIterator[list[User]]:
            async for page in real_iter(batch_size):
                # The page is read; the user moves to Tokyo before the re-plan reaches her.
                user = await store.get_user("ana")
                assert user is not None
                await store.upsert_user(replace(user, timezone="Asia/Tokyo"))
                yield page

        monkeypatch.setattr(store, "iter_users", iter_then_edit)
        await p.rt.creator.replan_if_tzdata_changed("2027a")
        user = await store.get_user("ana")
        assert user is not None and user.timezone == "Asia/Tokyo"
