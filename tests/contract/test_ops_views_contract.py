"""The Store's dashboard queries (``OpsViewRepository``), run against every adapter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tepat.domain.models import Device, Ticket
from tepat.ports.repositories.ops_views import SendSample
from tepat.ports.store import Store
from tests.contract.records import CANCELLED, FAILED, PENDING, SENDING, SENT, at, msg


def ticket(ticket_id: str, message_id: str, sent_at: datetime) -> Ticket:
    return Ticket(ticket_id, message_id, "u1", "d1", "tok", sent_at)


async def test_recent_sends_pair_each_ticket_with_its_message_newest_first(store: Store) -> None:
    meal = msg("m1", scheduled_at=at(0))
    safety = msg("m2", scheduled_at=at(1), category="safety")
    await store.insert_messages([meal, safety])
    await store.add_tickets(
        [
            ticket("t-old", meal.id, at(-10)),  # before the window
            ticket("t1", meal.id, at(0.5)),
            ticket("t2", meal.id, at(2)),  # a second device of the same message
            ticket("t3", safety.id, at(1.25)),
            ticket("t-orphan", "no-such-message", at(0.75)),  # no message: left out
        ]
    )
    found = await store.recent_sends(since=at(0.5), limit=10)
    assert found == [
        SendSample("meal", at(0), at(2)),
        SendSample("safety", at(1), at(1.25)),
        SendSample("meal", at(0), at(0.5)),
    ]
    assert await store.recent_sends(since=at(0.5), limit=2) == found[:2]
    assert await store.recent_sends(since=at(5), limit=10) == []
    assert await store.recent_sends(since=at(0), limit=0) == []


async def test_failures_since_count_failed_messages_by_reason(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(6)]
    await store.insert_messages(ms)
    reasons = [
        (ms[0], "DeviceNotRegistered", at(10)),
        (ms[1], "DeviceNotRegistered", at(11)),
        (ms[2], "outcome_unknown", at(12)),
        (ms[3], None, at(13)),
        (ms[4], "DeviceNotRegistered", at(1)),  # failed before the window
    ]
    for m, reason, when in reasons:
        assert await store.transition(m.id, FAILED, when, expect=[PENDING], reason=reason)
    assert await store.transition(ms[5].id, CANCELLED, at(10), expect=[PENDING])
    assert await store.failures_since(at(10)) == {
        "DeviceNotRegistered": 2,
        "outcome_unknown": 1,
        "": 1,
    }
    assert await store.failures_since(at(20)) == {}


async def test_devices_deactivated_since_count_by_reason(store: Store) -> None:
    # Deactivation stamps the store's own clock: the window is taken around real time.
    before = datetime.now(UTC) - timedelta(minutes=1)
    for n in range(4):
        await store.register_device(Device(f"u{n}", "phone", f"tok-{n}"))
    await store.deactivate_token("tok-0", "DeviceNotRegistered")
    await store.deactivate_token("tok-1", "DeviceNotRegistered")
    await store.deactivate_device("u2", "phone", "unregistered")
    counts = await store.devices_deactivated_since(before)
    assert counts == {"DeviceNotRegistered": 2, "unregistered": 1}
    # Registering again ends the deactivation: it no longer counts.
    await store.register_device(Device("u0", "phone", "tok-0"))
    assert await store.devices_deactivated_since(before) == {
        "DeviceNotRegistered": 1,
        "unregistered": 1,
    }
    assert await store.devices_deactivated_since(datetime.now(UTC) + timedelta(hours=1)) == {}


async def test_oldest_due_unsent_is_the_earliest_due_pending_or_sending_message(
    store: Store,
) -> None:
    now = at(10)
    assert await store.oldest_due_unsent(now) is None
    published = msg("published", scheduled_at=at(4))
    marked = msg("marked", scheduled_at=at(6))  # still carries the outbox mark
    sending = msg("sending", scheduled_at=at(3))
    retried = msg("retried", scheduled_at=at(1))  # a retry moved its due_at past now
    future = msg("future", scheduled_at=at(11))
    answered = [msg(f"answered{n}", scheduled_at=at(-n)) for n in range(3)]
    await store.insert_messages([published, marked, sending, retried, future, *answered])
    assert await store.mark_published([(published.id, published.due)]) == 1
    assert await store.transition(sending.id, SENDING, at(9), expect=[PENDING])
    assert await store.transition(retried.id, SENDING, at(2), expect=[PENDING])
    assert await store.transition(retried.id, PENDING, at(2), expect=[SENDING], due_at=at(12))
    for m, to in zip(answered, (SENT, FAILED, CANCELLED), strict=True):
        if to is SENT:
            assert await store.transition(m.id, SENDING, at(0), expect=[PENDING])
        assert await store.transition(m.id, to, at(0), expect=[PENDING, SENDING])

    assert await store.oldest_due_unsent(now) == at(3)  # the one being sent
    assert await store.transition(sending.id, SENT, at(10), expect=[SENDING])
    assert await store.oldest_due_unsent(now) == at(4)  # published, waiting for its consumer
    assert await store.oldest_due_unsent(at(5)) == at(4)
    assert await store.oldest_due_unsent(at(3.5)) is None  # nothing due yet
    assert await store.transition(published.id, SENDING, now, expect=[PENDING])
    assert await store.transition(published.id, SENT, now, expect=[SENDING])
    assert await store.oldest_due_unsent(now) == at(6)
    assert await store.oldest_due_unsent(at(13)) == at(6)


async def test_live_members_count_recent_beats_by_group_without_joining(store: Store) -> None:
    ttl = timedelta(minutes=7)  # at() counts minutes; nothing here is old enough to forget
    assert await store.live_members(at(0)) == {}
    await store.heartbeat("expo-rate:a", "c1", at(0), ttl)
    await store.heartbeat("expo-rate:a", "c2", at(5), ttl)
    await store.heartbeat("expo-rate:b", "c3", at(6), ttl)
    assert await store.live_members(at(1)) == {"expo-rate:a": 1, "expo-rate:b": 1}
    assert await store.live_members(at(0)) == {"expo-rate:a": 2, "expo-rate:b": 1}
    await store.leave("expo-rate:b", "c3")
    assert await store.live_members(at(0)) == {"expo-rate:a": 2}
    assert await store.live_members(at(7)) == {}
    # Reading joined nothing: the next beat still counts two members of a.
    assert await store.heartbeat("expo-rate:a", "c1", at(5), ttl) == 2
