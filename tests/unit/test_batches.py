"""Broker batches: ids grouped per (queue, due second), at most 100 each."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tepat.domain.batches import (
    MAX_BATCH,
    BadBatch,
    Batch,
    BatchBuilder,
    batch_messages,
    decode_batch,
)
from tepat.domain.categories import Categories, CategoryPolicy
from tepat.domain.models import Message, MessageStatus
from tests.support.messages import make_message

T0 = datetime(2027, 6, 10, 13, 0, tzinfo=UTC)
CATS = Categories(
    [CategoryPolicy("safety", priority=0), CategoryPolicy("meal"), CategoryPolicy("mood")]
)


def msg(i: int, category: str = "meal", at: datetime = T0, **kw: object) -> Message:
    key = f"k{i}"
    return make_message(
        key, id=f"m{i}", user_id="u", category=category, scheduled_at=at, live_key=key, **kw
    )


def test_groups_per_queue_and_second_and_splits_at_100() -> None:
    """250 meal messages in one second -> 100 + 100 + 50; a message 0.9 s later is the
    same second; one a second later is a new batch; safety goes to its own queue and,
    within a second, before meal (category priority)."""
    messages = [msg(i) for i in range(250)]
    messages.append(msg(250, at=T0 + timedelta(milliseconds=900)))
    messages.append(msg(251, at=T0 + timedelta(seconds=1)))
    messages.append(msg(252, category="safety"))
    batches = batch_messages(messages, CATS)
    assert [(b.queue, b.due, len(b.ids)) for b in batches] == [
        ("tepat.safety", T0, 1),
        ("tepat.meal", T0, 100),
        ("tepat.meal", T0, 100),
        ("tepat.meal", T0, 51),
        ("tepat.meal", T0 + timedelta(seconds=1), 1),
    ]
    assert batches[1].ids[:3] == ("m0", "m1", "m2")  # input order kept within a group
    assert "m250" in batches[3].ids


def test_builder_fills_batches_across_calls() -> None:
    """Pages of 30 messages for the same second add up to full batches, not 1 per page."""
    builder = BatchBuilder(CATS)
    full = []
    for page in range(9):
        full += builder.add([msg(page * 30 + i) for i in range(30)])
    assert [len(b.ids) for b in full] == [100, 100]
    [rest] = builder.drain()
    assert len(rest.ids) == 70 and rest.ids[-1] == "m269"
    assert builder.drain() == []


def test_only_pending_messages_of_known_categories() -> None:
    messages = [
        msg(1),
        msg(2, status=MessageStatus.SKIPPED),
        msg(3, status=MessageStatus.SENDING),
        msg(4, category="gone"),
    ]
    assert [b.ids for b in batch_messages(messages, CATS)] == [("m1",)]


def test_empty() -> None:
    assert batch_messages([], CATS) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["meal", "mood", "safety"]), st.integers(0, 5 * 10**6)),
        max_size=400,
    )
)
def test_batching_partitions_the_pending_messages(specs: list[tuple[str, int]]) -> None:
    messages = [
        msg(i, category=c, at=T0 + timedelta(microseconds=us)) for i, (c, us) in enumerate(specs)
    ]
    batches = batch_messages(messages, CATS)
    ids = [i for b in batches for i in b.ids]
    assert Counter(ids) == Counter(m.id for m in messages)  # each exactly once
    by_id = {m.id: m for m in messages}
    for b in batches:
        assert 1 <= len(b.ids) <= MAX_BATCH
        assert b.due.microsecond == 0
        for i in b.ids:
            m = by_id[i]
            assert CATS.get(m.category).queue_name == b.queue
            assert b.due <= m.scheduled_at < b.due + timedelta(seconds=1)
    # fewest batches: per group, ceil(n / 100)
    groups = Counter(
        (CATS.get(m.category).queue_name, int(m.scheduled_at.timestamp())) for m in messages
    )
    assert len(batches) == sum(-(-n // MAX_BATCH) for n in groups.values())
    assert [b.due for b in batches] == sorted(b.due for b in batches)


@given(
    st.lists(st.text(min_size=1, max_size=40), max_size=MAX_BATCH),
    st.integers(0, 2**32),
)
def test_encode_decode_round_trip(ids: list[str], second: int) -> None:
    batch = Batch("tepat.meal", datetime.fromtimestamp(second, UTC), tuple(ids))
    assert decode_batch("tepat.meal", batch.encode()) == batch


def test_encoding_is_compact_json() -> None:
    """Worked example: 2027-06-10 is 20979 days after 1970-01-01 (57 years with 14 leap
    days = 20819 days to 2027-01-01, plus 160 days), so 13:00Z on it is
    20979 * 86400 + 13 * 3600 = 1812632400 s after the epoch."""
    body = Batch("q", T0, ("a", "b")).encode()
    assert body == b'{"v":1,"due":1812632400,"ids":["a","b"]}'
    assert int(T0.timestamp()) == 1812632400


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"garbage",
        b"\xff\xfe",
        b"null",
        b"[]",
        b'"ids"',
        b"{}",
        b'{"due":1}',
        b'{"ids":[]}',
        b'{"due":"soon","ids":[]}',
        b'{"due":null,"ids":[]}',
        b'{"due":1,"ids":"abc"}',
        b'{"due":1,"ids":[1,2]}',
        b'{"due":1,"ids":[null]}',
        b'{"due":1e30,"ids":[]}',  # OverflowError escaped before the fix
        b'{"due":Infinity,"ids":[]}',  # likewise
        b'{"due":NaN,"ids":[]}',
        b'{"due":99999999999999,"ids":[]}',
        b'{"due":-99999999999999,"ids":[]}',
    ],
)
def test_bad_batch_on_garbage(body: bytes) -> None:
    with pytest.raises(BadBatch):
        decode_batch("q", body)


@given(st.binary(max_size=200))
def test_decode_never_raises_anything_but_bad_batch(body: bytes) -> None:
    try:
        batch = decode_batch("q", body)
    except BadBatch:
        return
    assert batch.queue == "q"
    assert all(isinstance(i, str) for i in batch.ids)
