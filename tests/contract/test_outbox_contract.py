"""The contract of the outbox (``tepat/ports/repositories/outbox.py``).

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from tepat.domain.models import Message
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.store import Store
from tests.contract.records import CANCELLED, FAILED, PENDING, SENDING, SENT, T0, at, msg


def _keys(ms: list[Message]) -> list[tuple[str, datetime]]:
    return [(m.id, m.due) for m in ms]


async def test_outbox_mark_set_on_insert_and_back_to_pending_cleared_on_publish(
    store: Store,
) -> None:
    a, b, c = (
        msg("a", label="a", scheduled_at=at(2)),
        msg("b", label="b", scheduled_at=at(1)),
        msg("c", label="c", scheduled_at=at(1)),
    )
    done = msg("done", status=SENT)
    await store.insert_messages([a, b, c, done])
    expected = sorted([a, b, c], key=lambda m: (m.due, m.id))
    assert await store.unpublished(10) == expected
    assert await store.unpublished(2) == expected[:2]
    assert await store.unpublished(0) == []

    assert await store.mark_published(_keys(expected)) == 3
    assert await store.unpublished(10) == []
    assert await store.mark_published(_keys(expected)) == 0

    # Back to pending, in each way: due at due_at, else scheduled_at, else now.
    await store.claim([a.id, b.id, c.id], at(3))
    assert await store.transition(a.id, PENDING, at(4), expect=[SENDING], due_at=at(7))
    assert await store.transition(b.id, PENDING, at(4), expect=[SENDING], scheduled_at=at(9))
    assert await store.transition(c.id, PENDING, at(4), expect=[SENDING])
    back = await store.unpublished(10)
    assert [(m.id, m.status, m.due_at) for m in back] == [
        (c.id, PENDING, at(4)),
        (a.id, PENDING, at(7)),
        (b.id, PENDING, at(9)),
    ]
    assert await store.mark_published(_keys(back)) == 3
    assert await store.unpublished(10) == []

    # The same through transition_many.
    await store.claim([a.id, b.id], at(10))
    changes = [StatusChange(a.id, PENDING, due_at=at(12)), StatusChange(b.id, PENDING)]
    assert await store.transition_many(changes, at(11), expect=[SENDING]) == 2
    assert [(m.id, m.due_at) for m in await store.unpublished(10)] == [
        (b.id, at(11)),
        (a.id, at(12)),
    ]


async def test_unpublished_due_before_lists_only_messages_due_before_it(store: Store) -> None:
    ms = [msg(f"m{n}", label=f"l{n}", scheduled_at=at(n)) for n in (2, 0, 1, 3)]
    await store.insert_messages(ms)
    early = await store.unpublished(10, due_before=at(2))
    assert [m.due_at for m in early] == [at(0), at(1)]  # exclusive bound
    assert [m.due_at for m in await store.unpublished(1, due_before=at(2))] == [at(0)]
    assert await store.unpublished(10, due_before=at(0)) == []
    assert len(await store.unpublished(10, due_before=None)) == 4


async def test_unpublished_after_pages_by_due_at_then_id(store: Store) -> None:
    # two at one instant (ordered by id), one before, one after
    ms = [
        msg(f"m{n}", label=f"l{n}", scheduled_at=at(s)) for n, s in ((1, 1), (2, 1), (3, 0), (4, 2))
    ]
    await store.insert_messages(ms)
    everything = await store.unpublished(10)
    pages, after = [], None
    while page := await store.unpublished(1, after=after):
        pages.append(page[0])
        after = (page[0].due, page[0].id)
    assert pages == everything
    first_at_1 = everything[1]
    rest = await store.unpublished(10, due_before=at(2), after=(first_at_1.due, first_at_1.id))
    assert rest == [everything[2]]


async def test_unpublished_counts_per_due_at_and_category_in_a_window(store: Store) -> None:
    ms = [
        msg("a", label="a", scheduled_at=at(1)),
        msg("b", label="b", scheduled_at=at(1)),
        msg("c", label="c", scheduled_at=at(1), category="safety"),
        msg("d", label="d", scheduled_at=at(2)),
        msg("e", label="e", scheduled_at=at(3)),  # at the window's end: outside
        msg("f", label="f", scheduled_at=at(0)),  # before it
        msg("g", label="g", scheduled_at=at(2), status=SENT),  # not pending
    ]
    await store.insert_messages(ms)
    await store.mark_published([(ms[3].id, ms[3].due)])  # published already
    counts = await store.unpublished_counts(at(1), at(3))
    assert counts == {(at(1), "meal", "push", None): 2, (at(1), "safety", "push", None): 1}
    assert await store.unpublished_counts(at(3), at(3)) == {}


async def test_channel_content_and_priority_round_trip_and_count_apart(store: Store) -> None:
    ms = [
        msg("a", label="a", scheduled_at=at(1)),
        dataclasses.replace(
            msg("b", label="b", scheduled_at=at(1)),
            channel="inbox",
            content={"html": "<b>hi</b>", "link": "/x"},
            priority="critical",
        ),
        dataclasses.replace(
            msg("c", label="c", scheduled_at=at(1)), channel="email", priority="bulk"
        ),
    ]
    await store.insert_messages(ms)
    got = {m.id: m for m in await store.get_messages([m.id for m in ms])}
    assert (got[ms[0].id].channel, got[ms[0].id].content, got[ms[0].id].priority) == (
        "push",
        {},
        None,
    )
    assert got[ms[1].id].channel == "inbox"
    assert got[ms[1].id].content == {"html": "<b>hi</b>", "link": "/x"}
    assert got[ms[1].id].priority == "critical"
    claimed = await store.claim([ms[2].id], at(1))
    assert [(m.channel, m.priority) for m in claimed] == [("email", "bulk")]
    await store.insert_messages(
        [dataclasses.replace(msg("d", label="d", scheduled_at=at(1)), channel="sms")]
    )
    counts = await store.unpublished_counts(at(1), at(2))
    assert counts == {
        (at(1), "meal", "push", None): 1,
        (at(1), "meal", "inbox", "critical"): 1,
        (at(1), "meal", "sms", None): 1,
    }


async def test_mark_published_keeps_mark_when_due_at_moved(store: Store) -> None:
    m = msg("a")
    await store.insert_messages([m])
    [read] = await store.unpublished(10)
    # While the publisher publishes, a consumer claims it and schedules a retry.
    await store.claim([m.id], at(1))
    assert await store.transition(m.id, PENDING, at(1), expect=[SENDING], due_at=at(5))
    assert await store.mark_published([(read.id, read.due)]) == 0
    [retry] = await store.unpublished(10)
    assert (retry.id, retry.due_at) == (m.id, at(5))
    assert await store.mark_published([(m.id, at(5)), ("missing", at(5))]) == 1
    assert await store.unpublished(10) == []
    assert await store.mark_published([]) == 0


async def test_terminal_transition_clears_outbox_mark(store: Store) -> None:
    cancelled, failed, sending, sent, replanned = ms = [
        msg(key, label=key, scheduled_at=at(30) if key == "replanned" else T0)
        for key in ("cancelled", "failed", "sending", "sent", "replanned")
    ]
    await store.insert_messages(ms)
    assert len(await store.unpublished(10)) == 5
    # None of them was published: each leaves pending while still marked.
    assert await store.transition(cancelled.id, CANCELLED, at(1), expect=[PENDING], reason="x")
    assert (
        await store.transition_many(
            [StatusChange(failed.id, FAILED, reason="x")], at(1), expect=[PENDING]
        )
        == 1
    )
    await store.claim([sending.id, sent.id], at(1))
    assert await store.transition(sent.id, SENT, at(2), expect=[SENDING], ticket_id="t")
    assert await store.transition(
        replanned.id, CANCELLED, at(2), expect=[PENDING], reason="superseded"
    )
    assert await store.unpublished(10) == []
    # Nothing pending, so nothing to put back on the outbox either.
    assert await store.republish([m.id for m in ms], at(5)) == 0
    assert await store.republish_all_pending() == 0
    assert await store.unpublished(10) == []
    assert await store.due_pending(before=at(100), limit=10) == []


async def test_republish_puts_pending_messages_back_on_the_outbox(store: Store) -> None:
    a, b = msg("a", scheduled_at=at(0)), msg("b", scheduled_at=at(1))
    done = msg("done", scheduled_at=at(0), status=SENT)
    await store.insert_messages([a, b, done])
    await store.mark_published(_keys([a, b]))
    # The sweeper re-drives a: due now, back on the outbox, slot and nominal kept.
    assert await store.republish([a.id, a.id, done.id, "missing"], at(30)) == 1
    [redriven] = await store.unpublished(10)
    assert redriven == dataclasses.replace(a, due_at=at(30))
    assert await store.republish([], at(30)) == 0
    # After a restart of an in-memory broker: every pending message, due_at kept.
    assert await store.republish_all_pending() == 1
    assert _keys(await store.unpublished(10)) == [(b.id, at(1)), (a.id, at(30))]
