"""Store contract: the in-app inbox, one item per (user, message id), read forward-only."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tepat.domain.inbox import InboxItem, InboxStatus, inbox_item_id
from tepat.ports.store import Store

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def item(user: str, message: str, title: str = "t", minutes: float = 0) -> InboxItem:
    return InboxItem(
        item_id=inbox_item_id(user, message),
        user_id=user,
        message_id=message,
        event_type="order.paid",
        category="custom",
        title=title,
        body="b",
        html="<p>b</p>",
        link="app://orders/1",
        data={"order": "1", "n": 2},
        created_at=T0 + timedelta(minutes=minutes),
    )


async def put(store: Store, user: str, message: str, title: str = "t") -> InboxItem:
    stored, created = await store.put_inbox_item(item(user, message, title))
    assert created
    return stored


async def test_put_stores_every_field_and_assigns_increasing_seqs(store: Store) -> None:
    a = await put(store, "alice", "m1")
    b = await put(store, "bob", "m1")  # the same message id is another user's own item
    c = await put(store, "alice", "m2")
    assert 0 < a.seq < b.seq < c.seq
    [got] = await store.list_inbox("alice", 1)
    assert got == c
    assert got.item_id == inbox_item_id("alice", "m2")
    assert (got.event_type, got.category, got.title, got.body) == ("order.paid", "custom", "t", "b")
    assert (got.html, got.link, dict(got.data)) == (
        "<p>b</p>",
        "app://orders/1",
        {"order": "1", "n": 2},
    )
    assert got.created_at == T0
    assert got.read_at is None and got.status is InboxStatus.DELIVERED


async def test_putting_the_same_message_again_returns_the_stored_item(store: Store) -> None:
    first = await put(store, "alice", "m1", "first")
    again, created = await store.put_inbox_item(item("alice", "m1", "second", minutes=5))
    assert not created
    assert again == first  # nothing changed, not even the title or the time
    assert len(await store.list_inbox("alice", 10)) == 1


async def test_concurrent_puts_of_one_message_store_one_item(store: Store) -> None:
    results = await asyncio.gather(
        *(store.put_inbox_item(item("alice", "m1", f"try {i}")) for i in range(20))
    )
    assert sum(created for _, created in results) == 1
    assert len({stored.seq for stored, _ in results}) == 1
    assert len(await store.list_inbox("alice", 50)) == 1
    assert await store.inbox_unread_count("alice") == 1


async def test_concurrent_puts_of_different_messages_get_distinct_seqs(store: Store) -> None:
    results = await asyncio.gather(
        *(store.put_inbox_item(item("alice", f"m{i}")) for i in range(20))
    )
    seqs = [stored.seq for stored, created in results if created]
    assert len(seqs) == 20 and len(set(seqs)) == 20


async def test_list_pages_newest_first_by_seq(store: Store) -> None:
    stored = [await put(store, "alice", f"m{i}") for i in range(5)]
    await put(store, "bob", "other")
    newest_first = [s.seq for s in reversed(stored)]
    page1 = await store.list_inbox("alice", 2)
    assert [i.seq for i in page1] == newest_first[:2]
    page2 = await store.list_inbox("alice", 2, before_seq=page1[-1].seq)
    assert [i.seq for i in page2] == newest_first[2:4]
    page3 = await store.list_inbox("alice", 2, before_seq=page2[-1].seq)
    assert [i.seq for i in page3] == newest_first[4:]
    assert await store.list_inbox("alice", 2, before_seq=page3[-1].seq) == []
    assert await store.list_inbox("nobody", 10) == []


async def test_unread_filter(store: Store) -> None:
    a, b, c = [await put(store, "alice", f"m{i}") for i in range(3)]
    await store.mark_inbox_read("alice", b.item_id, T0)
    unread = await store.list_inbox("alice", 10, unread_only=True)
    assert [i.seq for i in unread] == [c.seq, a.seq]
    assert [i.seq for i in await store.list_inbox("alice", 10, c.seq, unread_only=True)] == [a.seq]
    assert await store.inbox_unread_count("alice") == 2


async def test_items_after_a_seq_oldest_first_for_one_user(store: Store) -> None:
    a = await put(store, "alice", "m1")
    await put(store, "bob", "m1")
    b = await put(store, "alice", "m2")
    c = await put(store, "alice", "m3")
    assert [i.seq for i in await store.inbox_after("alice", 0, 10)] == [a.seq, b.seq, c.seq]
    assert [i.seq for i in await store.inbox_after("alice", a.seq, 10)] == [b.seq, c.seq]
    assert [i.seq for i in await store.inbox_after("alice", a.seq, 1)] == [b.seq]
    assert await store.inbox_after("alice", c.seq, 10) == []


async def test_read_is_forward_only_and_keeps_the_first_read_at(store: Store) -> None:
    a = await put(store, "alice", "m1")
    first = await store.mark_inbox_read("alice", a.item_id, T0 + timedelta(minutes=1))
    assert first is not None
    assert first.read_at == T0 + timedelta(minutes=1)
    assert first.status is InboxStatus.READ
    again = await store.mark_inbox_read("alice", a.item_id, T0 + timedelta(minutes=9))
    assert again is not None and again.read_at == T0 + timedelta(minutes=1)
    assert await store.inbox_unread_count("alice") == 0


async def test_another_users_item_is_not_found(store: Store) -> None:
    a = await put(store, "alice", "m1")
    assert await store.mark_inbox_read("bob", a.item_id, T0) is None
    assert await store.mark_inbox_read("alice", "inb_nothing", T0) is None
    [still] = await store.list_inbox("alice", 1)
    assert still.read_at is None


async def test_read_all_marks_unread_items_up_to_a_seq_and_keeps_earlier_reads(
    store: Store,
) -> None:
    a, b, c, d = [await put(store, "alice", f"m{i}") for i in range(4)]
    await put(store, "bob", "m1")
    await store.mark_inbox_read("alice", a.item_id, T0)
    assert await store.mark_inbox_read_all("alice", T0 + timedelta(hours=1), up_to_seq=c.seq) == 2
    assert await store.inbox_unread_count("alice") == 1
    assert await store.mark_inbox_read_all("alice", T0 + timedelta(hours=2)) == 1
    assert await store.mark_inbox_read_all("alice", T0 + timedelta(hours=3)) == 0
    by_seq = {i.seq: i.read_at for i in await store.list_inbox("alice", 10)}
    assert by_seq == {
        a.seq: T0,
        b.seq: T0 + timedelta(hours=1),
        c.seq: T0 + timedelta(hours=1),
        d.seq: T0 + timedelta(hours=2),
    }
    assert await store.inbox_unread_count("bob") == 1
