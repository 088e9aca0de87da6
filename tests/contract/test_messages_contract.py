"""The contract of messages (``tepat/ports/repositories/messages.py``); every (from, to) status
pair is in ``test_messages_transitions_contract.py``.

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import date, time, timedelta

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tepat import tracing
from tepat.domain.models import Message, MessageStatus, User, slot_key_for
from tepat.ports.repositories.messages import MessageQuery, StatusChange
from tepat.ports.store import Store
from tests.contract.records import (
    CANCELLED,
    DELIVERED,
    FAILED,
    PENDING,
    SENDING,
    SENT,
    T0,
    at,
    msg,
    oneoff,
    status_of,
)


async def test_message_round_trips_every_field(store: Store) -> None:
    m = msg(
        "full",
        device_id="d1",
        idempotency_key="idem-1",
        request_hash="abc123",
        local_date=date(2027, 3, 14),
        local_time=time(14, 30),
        data={"deep": {"list": [1, "two", None]}, "unicode": "makan siang 🍚"},
        status=SENT,
        status_reason="deferred:quiet_hours",
        attempts=2,
        ticket_id="ticket-1",
        last_error="ProviderError",
        plan_version=4,
        claimed_at=at(1.5),
        updated_at=at(2),
        nominal_at=at(-30),
        due_at=at(3),
        slot_key="s|a slot of its own",
        trace_parent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    result = await store.insert_messages([m])
    assert result.created == [m]
    assert await store.get_message(m.id) == m
    assert await store.find_by_live_key("live|full") == m


async def test_minimal_message_round_trips(store: Store) -> None:
    m = msg("bare", live_key=None, reminder_id=None)
    await store.insert_messages([m])
    assert await store.get_message(m.id) == m
    assert await store.get_message("missing") is None
    assert await store.find_by_live_key("live|bare") is None


async def test_a_message_written_with_tracing_on_keeps_the_context_it_was_made_in(
    store: Store,
) -> None:
    traced, outside = msg("traced"), msg("outside", user_id="u2")
    tracing.start([InMemorySpanExporter()], batch=False)
    try:
        with tracing.span("a request"):
            made_in = tracing.current_traceparent()
            await store.insert_messages([traced])
        await store.insert_messages([outside])  # no span: nothing to keep
    finally:
        tracing.stop()
    stored = [await store.get_message(m.id) for m in (traced, outside)]
    assert made_in is not None
    assert [m.trace_parent if m else "missing" for m in stored] == [made_in, None]


async def test_a_message_without_nominal_due_or_slot_is_stored_with_derived_ones(
    store: Store,
) -> None:
    bare = dataclasses.replace(msg("bare"), nominal_at=None, due_at=None, slot_key=None)
    derived = dataclasses.replace(bare, nominal_at=T0, due_at=T0, slot_key=slot_key_for(bare))
    assert (await store.insert_messages([bare])).created == [derived]
    assert await store.get_message(bare.id) == derived


async def test_get_messages_skips_unknown_ids(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(3)]
    await store.insert_messages(ms)
    found = await store.get_messages([ms[2].id, "missing", ms[0].id])
    assert sorted(m.id for m in found) == sorted([ms[0].id, ms[2].id])


async def test_insert_messages_twice_creates_nothing_new(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(20)]
    first = await store.insert_messages(ms)
    assert first.created == ms
    assert first.existing == 0
    second = await store.insert_messages(ms)
    assert second.created == []
    assert second.existing == 20


async def test_insert_messages_reports_the_new_ones_in_input_order(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(20)]
    await store.insert_messages(ms[5:15])
    result = await store.insert_messages(list(reversed(ms)))
    assert result.created == list(reversed(ms[:5] + ms[15:]))
    assert result.existing == 10


async def test_bulk_insert_reports_exactly_the_new_ones(store: Store) -> None:
    # Spans an adapter's internal statement batches; every third exists already.
    ms = [msg(f"bulk{n:05d}", scheduled_at=at(n % 97), label=str(n)) for n in range(700)]
    await store.insert_messages(ms[::3])
    result = await store.insert_messages(ms)
    assert [m.id for m in result.created] == [m.id for n, m in enumerate(ms) if n % 3]
    assert result.existing == len(ms[::3])
    counts = await store.count_messages()
    assert counts.by_status_category_channel == {("pending", "meal", "push"): 700}


async def test_the_same_message_twice_in_one_call_is_created_once(store: Store) -> None:
    m = msg("twice")
    result = await store.insert_messages([m, m])
    assert (result.created, result.existing) == ([m], 1)


async def test_a_live_key_refuses_a_new_plan_version_until_released(store: Store) -> None:
    v1 = msg("r1|2027-03-14|v1", live_key="r|u1|r1|2027-03-14")
    v2 = msg("r1|2027-03-14|v2", live_key="r|u1|r1|2027-03-14", scheduled_at=at(30))
    await store.insert_messages([v1])
    refused = await store.insert_messages([v2])
    assert (refused.created, refused.existing) == ([], 1)
    assert await store.get_message(v2.id) is None

    assert await store.transition(
        v1.id, CANCELLED, at(1), expect=[PENDING], reason="superseded", release_live_key=True
    )
    old = await store.get_message(v1.id)
    assert old is not None
    assert (old.status, old.live_key) == (CANCELLED, None)

    accepted = await store.insert_messages([v2])
    assert accepted.created == [v2]
    assert await store.find_by_live_key("r|u1|r1|2027-03-14") == v2


async def test_a_live_key_held_by_a_sent_message_is_never_reused(store: Store) -> None:
    v1 = msg("v1", live_key="r|u1|r1|2027-03-14")
    await store.insert_messages([v1])
    await store.claim([v1.id], at(0))
    assert await store.transition(v1.id, SENT, at(1), expect=[SENDING], ticket_id="t")
    assert not await store.transition(
        v1.id, CANCELLED, at(2), expect=[PENDING], reason="superseded", release_live_key=True
    )
    v2 = msg("v2", live_key="r|u1|r1|2027-03-14", scheduled_at=at(30))
    assert (await store.insert_messages([v2])).existing == 1


async def test_released_live_key_can_be_planned_again(store: Store) -> None:
    v1 = msg("v1", live_key="r|u1|r1|2027-03-14")
    await store.insert_messages([v1])
    assert await store.transition(
        v1.id, CANCELLED, at(1), expect=[PENDING], reason="superseded", release_live_key=True
    )
    v2 = msg("v2", live_key="r|u1|r1|2027-03-14", scheduled_at=at(30))
    assert (await store.insert_messages([v2])).created == [v2]


async def test_one_pending_message_per_user_device_category_label_instant(store: Store) -> None:
    first = msg("a", label="breakfast")
    same_slot = msg("b", label="breakfast")  # other keys, same pending slot
    other_label = msg("c", label="lunch")
    other_device = msg("d", label="breakfast", device_id="d1")
    other_category = msg("e", label="breakfast", category="mood")
    other_user = msg("f", label="breakfast", user_id="u2")
    other_instant = msg("g", label="breakfast", scheduled_at=at(1))
    result = await store.insert_messages(
        [first, same_slot, other_label, other_device, other_category, other_user, other_instant]
    )
    accepted = [first, other_label, other_device, other_category, other_user, other_instant]
    assert result.created == accepted
    assert result.existing == 1
    assert (
        await store.insert_messages([msg("h", label="breakfast", device_id="d1")])
    ).existing == 1
    # The slot is the *nominal* instant: one deferred by quiet hours still holds it.
    deferred = msg("i", label="breakfast", user_id="u3", scheduled_at=at(60), nominal_at=T0)
    same_nominal = msg("j", label="breakfast", user_id="u3")
    result = await store.insert_messages([deferred, same_nominal])
    assert (result.created, result.existing) == ([deferred], 1)


async def test_the_pending_slot_frees_once_the_first_is_no_longer_pending(store: Store) -> None:
    first = msg("a", label="breakfast")
    again = msg("b", label="breakfast")
    await store.insert_messages([first])
    assert (await store.insert_messages([again])).existing == 1
    await store.claim([first.id], T0)
    assert (await store.insert_messages([again])).created == [again]


async def test_two_oneoffs_at_one_instant_in_one_category_both_insert(store: Store) -> None:
    # Two chat messages at one send_at: distinct intents, never one slot. Also two
    # "send now" ones within one millisecond (MongoDB keeps milliseconds only).
    same = [oneoff(f"chat-{n}", label="chat", scheduled_at=at(5)) for n in range(3)]
    within_ms = [
        oneoff("now-1", label="chat", scheduled_at=T0 + timedelta(microseconds=100)),
        oneoff("now-2", label="chat", scheduled_at=T0 + timedelta(microseconds=400)),
    ]
    result = await store.insert_messages(same + within_ms)
    assert (len(result.created), result.existing) == (5, 0)
    assert [m.slot_key for m in result.created] == [m.live_key for m in same + within_ms]
    pending = await store.pending_for_user("u1")
    assert sorted(m.id for m in pending) == sorted(m.id for m in same + within_ms)
    # The same request again is still one message (its live key, its slot).
    again = await store.insert_messages([oneoff("chat-0", label="chat", scheduled_at=at(5))])
    assert (again.created, again.existing) == ([], 1)


async def test_deferred_messages_to_one_instant_keep_their_slots(store: Store) -> None:
    # Quiet hours until minute 60 defer several messages of one category and label.
    end = at(60)
    first = msg("r1-a", scheduled_at=at(0), reminder_id="r1")
    second = msg("r2-a", scheduled_at=at(5), reminder_id="r2")
    chat = oneoff("chat", scheduled_at=at(10))
    await store.insert_messages([first, second, chat])
    await store.claim([first.id, second.id, chat.id], at(0))
    # At send time, one by one and in one bulk write: every deferral happens.
    assert await store.transition(
        first.id, PENDING, at(1), expect=[SENDING], scheduled_at=end, due_at=end
    )
    changes = [
        StatusChange(m.id, PENDING, reason="deferred", scheduled_at=end, due_at=end)
        for m in (second, chat)
    ]
    assert await store.transition_many(changes, at(1), expect=[SENDING]) == 2
    moved = await store.get_messages([first.id, second.id, chat.id])
    assert [(m.status, m.scheduled_at, m.due_at) for m in moved] == [(PENDING, end, end)] * 3
    assert [m.slot_key for m in moved] == [first.slot_key, second.slot_key, chat.slot_key]
    assert [m.nominal_at for m in moved] == [at(0), at(5), at(10)]
    # At plan time: two reminders' messages placed at the same end of quiet hours.
    planned = [
        msg("r3-b", reminder_id="r3", scheduled_at=end, nominal_at=at(20)),
        msg("r4-b", reminder_id="r4", scheduled_at=end, nominal_at=at(25)),
    ]
    assert (await store.insert_messages(planned)).created == planned


async def test_back_to_pending_onto_a_held_slot_is_refused_not_raised(store: Store) -> None:
    a = msg("a", label="breakfast", reminder_id="r1")
    b = msg("b", label="breakfast", reminder_id="r2")  # the same slot
    c = msg("c", label="breakfast", reminder_id="r3", user_id="u2")
    c2 = msg("c2", label="breakfast", reminder_id="r4", user_id="u2")
    await store.insert_messages([a, c])
    await store.claim([a.id, c.id], at(0))
    assert (await store.insert_messages([b, c2])).created == [b, c2]  # the slots were free
    assert not await store.transition(a.id, PENDING, at(1), expect=[SENDING], due_at=at(2))
    retry = [StatusChange(c.id, PENDING, due_at=at(2))]
    assert await store.transition_many(retry, at(1), expect=[SENDING]) == 0
    assert [await status_of(store, m.id) for m in (a, c)] == [SENDING, SENDING]
    assert {m.id for m in await store.unpublished(10)} == {b.id, c2.id}
    assert await store.transition(a.id, FAILED, at(2), expect=[SENDING], reason="duplicate")


async def test_claim_moves_pending_to_sending_once(store: Store) -> None:
    a, b = msg("a", scheduled_at=at(0)), msg("b", scheduled_at=at(1))
    await store.insert_messages([a, b])
    claimed = await store.claim([a.id, b.id, "unknown"], at(5))
    assert sorted(m.id for m in claimed) == sorted([a.id, b.id])
    for m in claimed:
        assert (m.status, m.attempts, m.claimed_at, m.updated_at) == (SENDING, 1, at(5), at(5))
        assert await store.get_message(m.id) == m
    assert await store.claim([a.id, b.id], at(6)) == []


async def test_claim_counts_attempts_across_retries(store: Store) -> None:
    m = msg("a")
    await store.insert_messages([m])
    await store.claim([m.id], at(1))
    assert await store.transition(m.id, PENDING, at(2), expect=[SENDING], last_error="retry")
    [again] = await store.claim([m.id], at(3))
    assert (again.attempts, again.claimed_at, again.last_error) == (2, at(3), "retry")


async def test_concurrent_claims_take_each_message_exactly_once(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(60)]
    await store.insert_messages(ms)
    ids = [m.id for m in ms]
    first, second = await asyncio.gather(
        store.claim(ids, at(100)), store.claim(list(reversed(ids)), at(100))
    )
    a, b = {m.id for m in first}, {m.id for m in second}
    assert a.isdisjoint(b)
    assert a | b == set(ids)
    assert len(first) + len(second) == 60


async def test_transition_only_moves_from_an_expected_status(store: Store) -> None:
    m = msg("a")
    await store.insert_messages([m])
    assert not await store.transition(m.id, SENT, at(1), expect=[SENDING])
    assert await status_of(store, m.id) == PENDING
    await store.claim([m.id], at(1))
    assert await store.transition(m.id, SENT, at(2), expect=[SENDING], ticket_id="tk-1")
    # A late duplicate or a stale event never moves it back.
    assert not await store.transition(m.id, SENT, at(3), expect=[SENDING], ticket_id="tk-2")
    assert not await store.transition(m.id, PENDING, at(3), expect=[SENDING])
    assert await store.transition(m.id, DELIVERED, at(4), expect=[SENT])
    assert not await store.transition(m.id, FAILED, at(5), expect=[SENT], reason="late error")
    final = await store.get_message(m.id)
    assert final is not None
    assert (final.status, final.ticket_id, final.updated_at) == (DELIVERED, "tk-1", at(4))
    assert not await store.transition("unknown", SENT, at(5), expect=[SENDING])


async def test_transition_sets_the_given_fields_only(store: Store) -> None:
    m = msg("a", status_reason="deferred:quiet_hours")
    await store.insert_messages([m])
    await store.claim([m.id], at(1))
    assert await store.transition(
        m.id,
        PENDING,
        at(2),
        expect=[SENDING],
        last_error="TryAgain",
        scheduled_at=at(30),
    )
    moved = await store.get_message(m.id)
    assert moved is not None
    assert moved.status == PENDING
    assert moved.scheduled_at == at(30)
    # Back to pending without a due_at: due at the new scheduled_at. The nominal
    # instant and the slot never move.
    assert (moved.due_at, moved.nominal_at, moved.slot_key) == (at(30), T0, m.slot_key)
    assert moved.last_error == "TryAgain"
    assert moved.status_reason == "deferred:quiet_hours"
    assert moved.live_key == m.live_key
    assert moved.updated_at == at(2)
    assert await store.transition(m.id, FAILED, at(3), expect=[PENDING, SENDING], reason="gave up")
    failed = await store.get_message(m.id)
    assert failed is not None
    assert (failed.status, failed.status_reason) == (FAILED, "gave up")


async def test_claim_due_before_takes_only_messages_due_before_it(store: Store) -> None:
    early, boundary, late = (
        msg(key, label=key, scheduled_at=at(n)) for key, n in (("e", 0), ("b", 1), ("l", 2))
    )
    await store.insert_messages([early, boundary, late])
    claimed = await store.claim([early.id, boundary.id, late.id], at(5), due_before=at(1))
    assert [m.id for m in claimed] == [early.id]  # exclusive bound
    assert {m.id for m in await store.claim([boundary.id, late.id], at(5))} == {
        boundary.id,
        late.id,
    }


async def test_pending_for_user(store: Store) -> None:
    reminder_msg = msg("a", scheduled_at=at(5))
    one = oneoff("b", scheduled_at=at(1))
    deferred = msg("c", reminder_id="r2", scheduled_at=at(60), nominal_at=at(0))
    sent = msg("d", reminder_id="r3", status=SENT)
    cancelled = msg("e", reminder_id="r4")
    elsewhere = msg("f", user_id="u2")
    claimed = msg("g", reminder_id="r5", scheduled_at=at(7))
    await store.insert_messages([reminder_msg, one, deferred, sent, cancelled, elsewhere, claimed])
    await store.transition(cancelled.id, CANCELLED, at(0), expect=[PENDING], reason="x")
    await store.claim([claimed.id], at(0))
    mine = await store.pending_for_user("u1")
    assert sorted(m.id for m in mine) == sorted([reminder_msg.id, one.id, deferred.id])
    assert all(m.status == PENDING for m in mine)
    by_id = {m.id: m for m in mine}
    assert by_id[deferred.id] == deferred
    assert [m.id for m in await store.pending_for_user("u2")] == [elsewhere.id]
    assert await store.pending_for_user("nobody") == []


async def _insert_listing(store: Store) -> list[Message]:
    ms = [
        msg(f"m{n:02d}", scheduled_at=at(n // 3), label=f"l{n}")  # three per instant
        for n in range(25)
    ]
    ms.append(msg("elsewhere", user_id="u2"))
    await store.insert_messages(ms)
    return [m for m in ms if m.user_id == "u1"]


async def test_list_messages_pages_cover_everything_once_newest_first(store: Store) -> None:
    mine = await _insert_listing(store)
    expected = sorted(mine, key=lambda m: (m.scheduled_at, m.id), reverse=True)
    seen: list[Message] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.list_messages(MessageQuery("u1", limit=7, cursor=cursor))
        pages += 1
        seen.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 4
    assert [m.id for m in seen] == [m.id for m in expected]


async def test_list_messages_filters_by_status_and_half_open_range(store: Store) -> None:
    mine = await _insert_listing(store)
    await store.claim([m.id for m in mine[:6]], at(10))  # instants 0 and 1
    sending = await store.list_messages(MessageQuery("u1", statuses=frozenset({SENDING})))
    assert {m.id for m in sending.items} == {m.id for m in mine[:6]}
    assert sending.next_cursor is None

    window = await store.list_messages(
        MessageQuery("u1", scheduled_from=at(2), scheduled_to=at(4), limit=50)
    )
    assert {m.id for m in window.items} == {m.id for m in mine if at(2) <= m.scheduled_at < at(4)}
    assert len(window.items) == 6

    both = await store.list_messages(
        MessageQuery("u1", statuses=frozenset({SENDING, PENDING}), scheduled_from=at(1))
    )
    assert len(both.items) == 22


async def test_due_pending_lists_only_published_messages_by_due_at(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in (3, 0, 2, 1, 5)]
    await store.insert_messages(ms)
    # Still on the outbox: not yet published, so not lost by the broker either.
    assert await store.due_pending(before=at(10), limit=10) == []
    await store.mark_published([(m.id, m.due) for m in ms])
    await store.claim([ms[1].id], at(0))  # the one at minute 0 is no longer pending
    due = await store.due_pending(before=at(3), limit=10)
    assert [m.id for m in due] == [ms[3].id, ms[2].id]  # due at minutes 1 and 2
    assert len(await store.due_pending(before=at(10), limit=2)) == 2
    assert await store.due_pending(before=at(10), limit=0) == []

    # Re-driven: due at minute 4 now, listed by due_at (not scheduled_at) once published.
    assert await store.republish([ms[3].id], at(4)) == 1
    assert [m.id for m in await store.due_pending(before=at(10), limit=10)] == [
        ms[2].id,
        ms[0].id,
        ms[4].id,
    ]
    [again] = await store.unpublished(10)
    assert await store.mark_published([(again.id, again.due)]) == 1
    due = await store.due_pending(before=at(10), limit=10)
    assert [(m.id, m.due_at) for m in due] == [
        (ms[2].id, at(2)),
        (ms[0].id, at(3)),
        (ms[3].id, at(4)),
        (ms[4].id, at(5)),
    ]
    assert [m.id for m in await store.due_pending(before=at(4), limit=10)] == [
        ms[2].id,
        ms[0].id,
    ]


async def test_stuck_sending_finds_old_claims(store: Store) -> None:
    a, b, c = msg("a"), msg("b", scheduled_at=at(1)), msg("c", scheduled_at=at(2))
    await store.insert_messages([a, b, c])
    await store.claim([a.id], at(0))
    await store.claim([b.id], at(10))
    stuck = await store.stuck_sending(claimed_before=at(5), limit=10)
    assert [m.id for m in stuck] == [a.id]
    assert [m.id for m in await store.stuck_sending(claimed_before=at(11), limit=10)] == [
        a.id,
        b.id,
    ]


async def test_renew_claims_restarts_the_lease_of_what_is_still_sending(store: Store) -> None:
    a, b, c = msg("a"), msg("b", scheduled_at=at(1)), msg("c", scheduled_at=at(2))
    await store.insert_messages([a, b, c])
    await store.claim([a.id, b.id], at(0))
    assert await store.transition(b.id, SENT, at(1), expect=[SENDING], ticket_id="t")
    # c was never claimed, and b is recorded: only a's lease restarts.
    assert await store.renew_claims([a.id, b.id, c.id, a.id, "missing"], at(200)) == 1
    assert await store.stuck_sending(claimed_before=at(199), limit=10) == []
    [renewed] = await store.stuck_sending(claimed_before=at(201), limit=10)
    assert renewed.id == a.id and renewed.claimed_at == at(200)
    assert renewed.attempts == 1
    by_id = {m.id: m for m in await store.get_messages([b.id, c.id])}
    assert by_id[b.id].status is SENT and by_id[c.id].status is PENDING
    assert by_id[c.id].claimed_at is None
    assert await store.renew_claims([], at(300)) == 0


async def test_count_messages_by_status_category_and_channel(store: Store) -> None:
    ms = [
        msg("a", category="meal"),
        msg("b", category="meal", scheduled_at=at(1)),
        msg("c", category="mood"),
        msg("d", category="mood", scheduled_at=at(2), channel="sms"),
        msg("e", category="mood", scheduled_at=at(3), channel="sms"),
    ]
    await store.insert_messages(ms)
    await store.claim([ms[0].id], at(0))
    counts = await store.count_messages()
    assert counts.by_status_category_channel == {
        ("sending", "meal", "push"): 1,
        ("pending", "meal", "push"): 1,
        ("pending", "mood", "push"): 1,
        ("pending", "mood", "sms"): 2,
    }


async def test_dead_letters_newest_failure_first(store: Store) -> None:
    ms = [msg(f"m{n}", scheduled_at=at(n)) for n in range(5)]
    await store.insert_messages(ms)
    for n, m in enumerate(ms[:4]):
        assert await store.transition(m.id, FAILED, at(100 - n), expect=[PENDING], reason="x")
    first = await store.dead_letters(limit=2)
    assert [m.id for m in first] == [ms[0].id, ms[1].id]
    every = await store.dead_letters(limit=10)
    assert [m.id for m in every] == [m.id for m in ms[:4]]
    assert all(m.status == FAILED for m in every)


async def test_transition_many_applies_only_from_expected_statuses(store: Store) -> None:

    now = T0
    await store.upsert_user(User("tm", "UTC"))
    msgs = [
        Message(
            id=f"tm{i}",
            user_id="tm",
            category="meal",
            label=f"l{i}",
            title="t",
            body="b",
            scheduled_at=now,
            timezone="UTC",
            dedup_key=f"tm{i}",
            live_key=f"tm{i}",
        )
        for i in range(4)
    ]
    await store.insert_messages(msgs)
    await store.claim(["tm0", "tm1", "tm2"], now)  # tm3 stays pending
    later = now + timedelta(seconds=5)
    changes = [
        StatusChange("tm0", MessageStatus.SENT, ticket_id="ticket-0"),
        StatusChange("tm1", MessageStatus.SKIPPED, reason="opted_out"),
        StatusChange("tm2", MessageStatus.FAILED, reason="MessageTooBig", last_error="too big"),
        StatusChange("tm3", MessageStatus.SENT, ticket_id="ticket-3"),  # not sending: refused
        StatusChange("missing", MessageStatus.SENT),
    ]
    applied = await store.transition_many(changes, later, expect=[MessageStatus.SENDING])
    assert applied == 3
    got = {m.id: m for m in await store.get_messages(["tm0", "tm1", "tm2", "tm3"])}
    assert got["tm0"].status is MessageStatus.SENT and got["tm0"].ticket_id == "ticket-0"
    assert got["tm1"].status is MessageStatus.SKIPPED and got["tm1"].status_reason == "opted_out"
    assert got["tm2"].status is MessageStatus.FAILED and got["tm2"].last_error == "too big"
    assert got["tm3"].status is MessageStatus.PENDING and got["tm3"].ticket_id is None
    assert got["tm0"].updated_at == later
    # Repeating it changes nothing: the messages have left `sending`.
    assert await store.transition_many(changes, later, expect=[MessageStatus.SENDING]) == 0
    assert await store.transition_many([], later, expect=[MessageStatus.SENDING]) == 0
