"""Store contract: a re-plan's two calls do what the single-record methods they name do,
in their order (``tepat/ports/repositories/replan.py``)."""

from __future__ import annotations

from tepat.domain.models import MessageStatus
from tepat.ports.repositories.users import PlanMark
from tepat.ports.store import Store
from tests.contract import records
from tests.contract.test_users_plan_marks_contract import FP, add_user, hours, reminder, to_plan


async def test_start_takes_a_fresh_version_then_reads_the_user_reminders_and_pending(
    store: Store,
) -> None:
    await add_user(store, "u1")
    await add_user(store, "u2")
    await store.upsert_reminder(reminder("u1", "b"))
    await store.upsert_reminder(reminder("u1", "a"))
    await store.upsert_reminder(reminder("u2", "c"))
    mine, theirs = records.msg("m1", user_id="u1"), records.msg("m2", user_id="u2")
    sent = records.msg("m3", user_id="u1", scheduled_at=records.at(5))
    await store.insert_messages([mine, theirs, sent])
    await store.transition(
        sent.id, MessageStatus.CANCELLED, records.at(1), expect=[MessageStatus.PENDING]
    )
    before = (await store.get_plan_targets(["u1"]))["u1"].stamp

    first = await store.start_replan("u1")
    second = await store.start_replan("u1")

    assert first is not None and second is not None
    assert second.version == first.version + 1  # two re-plans never share one
    assert first.target.user.user_id == "u1" and first.target.user.plan_version == first.version
    assert first.target.stamp != before and first.target.mark is None  # a change: no mark
    assert [r.reminder_id for r in first.reminders] == ["a", "b"]
    assert [m.id for m in first.pending] == [mine.id]
    assert await store.start_replan("nobody") is None


async def test_finish_inserts_once_marks_by_stamp_and_reads_pending_after(store: Store) -> None:
    await add_user(store, "u1")
    start = await store.start_replan("u1")
    assert start is not None
    a, b = (
        records.msg("a", scheduled_at=records.at(10)),
        records.msg("b", scheduled_at=records.at(20)),
    )
    mark = PlanMark("u1", start.target.stamp, hours(0), hours(48), FP)

    inserted, pending = await store.finish_replan("u1", [a, b, a], mark)

    assert [m.id for m in inserted.created] == [a.id, b.id] and inserted.existing == 1
    assert [m.id for m in pending] == [a.id, b.id]
    assert "u1" not in await to_plan(store)  # the mark stuck
    again, _ = await store.finish_replan("u1", [a], mark)
    assert again.created == [] and again.existing == 1


async def test_finish_with_a_stale_mark_still_inserts_but_leaves_the_user_to_plan(
    store: Store,
) -> None:
    await add_user(store, "u1")
    start = await store.start_replan("u1")
    assert start is not None
    await store.upsert_reminder(reminder("u1"))  # a change after the re-plan read
    mark = PlanMark("u1", start.target.stamp, hours(0), hours(48), FP)

    inserted, pending = await store.finish_replan("u1", [], mark)

    assert inserted.created == [] and pending == []
    assert "u1" in await to_plan(store)
