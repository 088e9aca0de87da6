"""Every (from, to) pair of message statuses, on every store adapter: the store
enforces the domain's transition table (``tepat.domain.models.ALLOWED_TRANSITIONS``).

An allowed pair moves the message; any other leaves it exactly as it was and counts as
not applied, whatever the caller put in ``expect``."""

from __future__ import annotations

import itertools

import pytest

from tepat.domain.models import (
    ALLOWED_TRANSITIONS,
    CLAIMABLE,
    Message,
    MessageStatus,
    can_transition,
)
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.store import Store
from tests.contract.records import at, msg

PAIRS = list(itertools.product(MessageStatus, MessageStatus))
EVERY_STATUS = list(MessageStatus)
PENDING, SENDING, SENT, CANCELLED = (
    MessageStatus.PENDING,
    MessageStatus.SENDING,
    MessageStatus.SENT,
    MessageStatus.CANCELLED,
)


def in_status(method: str, src: MessageStatus, dst: MessageStatus) -> Message:
    key = f"{method}-{src.value}-{dst.value}"
    # Its own label: a slot of its own, so pending ones never collide.
    return msg(key, label=key, status=src)


async def stored(store: Store, m: Message) -> Message:
    got = await store.get_message(m.id)
    assert got is not None
    return got


def test_the_table_names_every_status_and_terminal_ones_go_nowhere() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(MessageStatus)
    for status, targets in ALLOWED_TRANSITIONS.items():
        assert status not in targets  # no move to itself: a repeat is never "applied"
        assert not targets if status.terminal else targets
    assert CLAIMABLE == (MessageStatus.PENDING,)


@pytest.mark.parametrize("method", ["transition", "transition_many"])
@pytest.mark.parametrize("expect_all", [False, True], ids=["expect-from", "expect-all"])
async def test_every_pair_moves_only_when_the_table_allows_it(
    store: Store, method: str, expect_all: bool
) -> None:
    """``expect-from``: the caller expects exactly the current status; ``expect-all``:
    the caller expects anything, and the table alone decides."""
    tag = f"{method}-{'all' if expect_all else 'from'}"
    messages = {(src, dst): in_status(tag, src, dst) for src, dst in PAIRS}
    await store.insert_messages(list(messages.values()))
    before = {pair: await stored(store, m) for pair, m in messages.items()}
    for (src, dst), m in messages.items():
        expect = EVERY_STATUS if expect_all else [src]
        if method == "transition":
            applied = await store.transition(m.id, dst, at(1), expect=expect, reason="walk")
        else:
            change = StatusChange(m.id, dst, reason="walk")
            applied = bool(await store.transition_many([change], at(1), expect=expect))
        after = await stored(store, m)
        if can_transition(src, dst):
            assert applied, (src, dst)
            assert (after.status, after.status_reason) == (dst, "walk"), (src, dst)
        else:
            assert not applied, (src, dst)
            assert after == before[(src, dst)], (src, dst)


async def test_transition_many_applies_the_allowed_changes_of_a_mixed_batch(
    store: Store,
) -> None:
    messages = {pair: in_status("mixed", *pair) for pair in PAIRS}
    await store.insert_messages(list(messages.values()))
    changes = [StatusChange(m.id, dst) for (_, dst), m in messages.items()]
    applied = await store.transition_many(changes, at(1), expect=EVERY_STATUS)
    assert applied == sum(can_transition(src, dst) for src, dst in PAIRS)
    for (src, dst), m in messages.items():
        expected = dst if can_transition(src, dst) else src
        assert (await stored(store, m)).status is expected, (src, dst)


async def test_a_batch_of_one_kind_writes_each_change_its_own_values(store: Store) -> None:
    """A batch's ``sent`` (each with its ticket) and its cancellations (each releasing its
    live key): every message gets its own values, a message not in ``expect`` none."""
    sending = [msg(f"own-{i}", label=f"own-{i}", status=MessageStatus.SENDING) for i in range(3)]
    pending = [msg(f"own-p{i}", label=f"own-p{i}") for i in range(2)]
    await store.insert_messages([*sending, *pending])
    sent = [StatusChange(m.id, MessageStatus.SENT, ticket_id=f"t-{m.id}") for m in sending]
    refused = StatusChange(pending[0].id, MessageStatus.SENT, ticket_id="t-refused")
    assert await store.transition_many([*sent, refused], at(1), expect=[SENDING]) == 3
    for m in sending:
        after = await stored(store, m)
        assert (after.status, after.ticket_id, after.updated_at) == (SENT, f"t-{m.id}", at(1))
    assert (await stored(store, pending[0])).status is MessageStatus.PENDING
    cancel = [
        StatusChange(m.id, CANCELLED, reason=f"r-{m.id}", release_live_key=True) for m in pending
    ]
    assert await store.transition_many(cancel, at(2), expect=[PENDING]) == 2
    for m in pending:
        after = await stored(store, m)
        assert (after.status, after.status_reason, after.live_key) == (CANCELLED, f"r-{m.id}", None)


async def test_a_message_twice_in_one_batch_moves_once_then_is_refused(store: Store) -> None:
    """Changes apply in order, each seeing the one before: the second finds the message
    ``sent``, not ``sending``."""
    m = msg("twice", label="twice", status=MessageStatus.SENDING)
    await store.insert_messages([m])
    changes = [
        StatusChange(m.id, SENT, reason="first"),
        StatusChange(m.id, MessageStatus.FAILED, reason="second"),
    ]
    assert await store.transition_many(changes, at(1), expect=[SENDING]) == 1
    after = await stored(store, m)
    assert (after.status, after.status_reason) == (SENT, "first")


async def test_a_claim_takes_only_claimable_messages(store: Store) -> None:
    messages = {s: msg(f"claim-{s.value}", label=s.value, status=s) for s in MessageStatus}
    await store.insert_messages(list(messages.values()))
    before = {s: await stored(store, m) for s, m in messages.items()}
    claimed = await store.claim([m.id for m in messages.values()], at(1))
    assert {m.id for m in claimed} == {messages[s].id for s in CLAIMABLE}
    for s, m in messages.items():
        after = await stored(store, m)
        if s in CLAIMABLE:
            assert after.status is MessageStatus.SENDING
        else:
            assert after == before[s], s
