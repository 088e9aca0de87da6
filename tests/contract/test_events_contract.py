"""Store contract: business events, their listed recipients, the fan-out cursor and counts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, time

from tepat.domain.events import Event, EventState, event_message_key
from tepat.domain.models import Message, MessageStatus, User
from tepat.domain.routing import Channel, Priority
from tepat.ports.store import Store
from tests.support.messages import make_message

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def event(event_id: str = "ev-1", request_hash: str = "h1", **kw: object) -> Event:
    fields: dict[str, object] = {
        "event_id": event_id,
        "type": "order.paid",
        "category": "custom",
        "priority": Priority.NORMAL,
        "request_hash": request_hash,
        "all_users": False,
        "data": {"order": "8841", "a.b": {"$x": 1}},
        "occurred_at": T0,
        "listed": 3,
    }
    fields.update(kw)
    return Event(**fields)  # type: ignore[arg-type]


async def test_create_keeps_every_field_and_a_repeat_creates_nothing(store: Store) -> None:
    e = event(send_at=T0.replace(hour=12), local_time=None, priority=Priority.BULK)
    stored, created = await store.create_event(e, ["u3", "u1", "u2", "u1"])
    assert created
    assert (stored.event_id, stored.type, stored.category, stored.priority) == (
        "ev-1",
        "order.paid",
        "custom",
        Priority.BULK,
    )
    assert dict(stored.data) == {"order": "8841", "a.b": {"$x": 1}}
    assert (stored.occurred_at, stored.send_at, stored.local_time) == (
        T0,
        T0.replace(hour=12),
        None,
    )
    assert (stored.state, stored.cursor, stored.recipients, dict(stored.counts)) == (
        EventState.FANNING_OUT,
        "",
        0,
        {},
    )
    assert stored.listed == 3 and stored.request_hash == "h1"
    again, created = await store.create_event(event(request_hash="other"), ["u9"])
    assert not created and again == stored
    assert await store.get_event("ev-1") == stored
    assert await store.get_event("nope") is None
    assert await store.event_recipients("ev-1", False, "", 10) == ["u1", "u2", "u3"]


async def test_local_time_round_trips(store: Store) -> None:
    stored, _ = await store.create_event(event(local_time=time(9, 0), all_users=True), [])
    assert stored.local_time == time(9, 0) and stored.all_users


async def test_concurrent_creates_of_one_id_store_one_event(store: Store) -> None:
    results = await asyncio.gather(*(store.create_event(event(), ["u1", "u2"]) for _ in range(20)))
    assert sum(created for _, created in results) == 1
    assert all(e == results[0][0] for e, _ in results)
    assert await store.event_recipients("ev-1", False, "", 10) == ["u1", "u2"]


async def test_recipients_page_by_user_id_listed_or_all_users(store: Store) -> None:
    for uid in ("b", "a", "d", "c"):
        await store.upsert_user(User(user_id=uid, timezone="UTC"))
    await store.create_event(event(), ["z", "x", "y"])
    assert await store.event_recipients("ev-1", False, "", 2) == ["x", "y"]
    assert await store.event_recipients("ev-1", False, "y", 2) == ["z"]
    assert await store.event_recipients("ev-1", False, "z", 2) == []
    assert await store.event_recipients("ev-2", False, "", 2) == []  # another event's: none
    assert await store.event_recipients("ev-1", True, "", 3) == ["a", "b", "c"]
    assert await store.event_recipients("ev-1", True, "c", 3) == ["d"]


async def test_advance_is_compare_and_set_on_the_cursor(store: Store) -> None:
    await store.create_event(event(), ["u1", "u2", "u3"])
    assert await store.advance_event("ev-1", "", "u2", 2, {"inbox:delivered": 2}, False, T0)
    # The same page again (a crash before, or a second loop): not counted twice.
    assert not await store.advance_event("ev-1", "", "u2", 2, {"inbox:delivered": 2}, False, T0)
    assert await store.advance_event(
        "ev-1", "u2", "u3", 1, {"inbox:delivered": 1, "unknown_user": 0}, False, T0
    )
    assert [e.event_id for e in await store.events_fanning_out(10)] == ["ev-1"]
    assert await store.advance_event("ev-1", "u3", "u3", 0, {}, True, T0)
    got = await store.get_event("ev-1")
    assert got is not None
    assert (got.state, got.cursor, got.recipients) == (EventState.DONE, "u3", 3)
    assert got.counts.get("inbox:delivered") == 3 and got.counts.get("unknown_user", 0) == 0
    assert await store.events_fanning_out(10) == []
    assert not await store.advance_event("ev-1", "u3", "u4", 1, {}, True, T0)  # done stays done


async def test_events_fanning_out_oldest_first(store: Store) -> None:
    for n in range(3):
        await store.create_event(event(f"ev-{n}"), ["u1"])
    got = await store.events_fanning_out(2)
    assert len(got) == 2 and {e.event_id for e in got} <= {"ev-0", "ev-1", "ev-2"}


def _msg(event_id: str, user: str, status: MessageStatus, reason: str | None = None) -> Message:
    key = event_message_key(event_id, user, Channel.PUSH)
    fields = {"live_key": key, "slot_key": key, "status": status, "status_reason": reason}
    return make_message(
        key, user_id=user, category="custom", label="order.paid", scheduled_at=T0, **fields
    )


async def test_message_counts_cover_only_the_events_keys(store: Store) -> None:
    await store.insert_messages(
        [
            _msg("ev-1", "u1", MessageStatus.PENDING),
            _msg("ev-1", "u2", MessageStatus.FAILED, "render_error"),
            _msg("ev-1", "u3", MessageStatus.FAILED, "render_error"),
            _msg("ev-1", "u4", MessageStatus.SKIPPED, "quiet_hours"),
            _msg("ev-10", "u1", MessageStatus.PENDING),  # a longer id sharing a prefix
            _msg("ev-1x", "u1", MessageStatus.PENDING),
        ]
    )
    assert await store.event_message_counts("ev-1") == {
        ("push", "pending", ""): 1,
        ("push", "failed", "render_error"): 2,
        ("push", "skipped", "quiet_hours"): 1,
    }
    assert await store.event_message_counts("ev-10") == {("push", "pending", ""): 1}
    assert await store.event_message_counts("nope") == {}
