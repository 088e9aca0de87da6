"""Store contract: status webhook subscriptions, and the journal of status changes written
with the change itself (``tepat/domain/webhooks.py``)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from tepat.domain.inbox import InboxItem, inbox_item_id
from tepat.domain.models import Message, MessageStatus
from tepat.domain.webhooks import (
    EVENT_TYPES,
    WEBHOOK_USER,
    StatusChangeEntry,
    WebhookSecret,
    WebhookSubscription,
    delivery_message,
    rotate,
)
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.store import Store
from tests.support.messages import make_message

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
S = MessageStatus


def subscription(sub_id: str = "wh_1", **fields: object) -> WebhookSubscription:
    base = WebhookSubscription(
        id=sub_id,
        url="https://example.com/hooks",
        event_types=EVENT_TYPES,
        secrets=(WebhookSecret("whsec_" + "A" * 44, created_at=T0),),
        created_at=T0,
        updated_at=T0,
        categories=("meal",),
        description="orders",
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def message(key: str, user_id: str = "u1", status: S = S.PENDING, **fields: object) -> Message:
    dedup = f"test|{key}"
    return make_message(
        dedup, user_id=user_id, scheduled_at=T0, live_key=dedup, status=status, **fields
    )


def statuses(entries: list[StatusChangeEntry]) -> list[tuple[str, str]]:
    return sorted((e.message_id, e.status) for e in entries)


async def send(store: Store, m: Message, at: datetime) -> None:
    assert await store.claim([m.id], at)
    assert await store.transition(m.id, S.SENT, at, expect=[S.SENDING], ticket_id="t1")


async def test_subscriptions_are_created_once_read_listed_and_deleted(store: Store) -> None:
    sub = subscription()
    assert await store.create_webhook_subscription(sub)
    assert not await store.create_webhook_subscription(subscription(url="https://other.example"))
    assert await store.get_webhook_subscription("wh_1") == sub
    later = subscription("wh_0", created_at=T0 + timedelta(seconds=1), categories=())
    assert await store.create_webhook_subscription(later)
    assert [s.id for s in await store.list_webhook_subscriptions()] == ["wh_1", "wh_0"]
    assert await store.delete_webhook_subscription("wh_1")
    assert not await store.delete_webhook_subscription("wh_1")
    assert await store.get_webhook_subscription("wh_1") is None
    assert await store.list_webhook_subscriptions() == [later]


async def test_an_update_is_compare_and_set_on_the_version(store: Store) -> None:
    sub = subscription()
    await store.create_webhook_subscription(sub)
    rotated = rotate(sub, "whsec_" + "B" * 44, T0 + timedelta(hours=1))
    assert await store.update_webhook_subscription(rotated, expect_version=sub.version)
    stale = rotate(sub, "whsec_" + "C" * 44, T0 + timedelta(hours=2))
    assert not await store.update_webhook_subscription(stale, expect_version=sub.version)
    stored = await store.get_webhook_subscription(sub.id)
    assert stored == rotated
    assert stored is not None and [s.expires_at for s in stored.secrets] == [
        T0 + timedelta(hours=25),
        None,
    ]


async def test_no_journal_while_no_subscription_is_enabled(store: Store) -> None:
    m = message("a")
    await store.insert_messages([m])
    await send(store, m, T0)
    assert await store.webhook_journal(10) == []
    await store.create_webhook_subscription(subscription(enabled=False))
    assert await store.transition(m.id, S.DELIVERED, T0, expect=[S.SENT])
    assert await store.webhook_journal(10) == []


async def test_each_reported_status_change_is_journaled_with_the_change(store: Store) -> None:
    await store.create_webhook_subscription(subscription())
    a, b, c = message("a"), message("b", user_id="u2"), message("c")
    failed = message("f", status=S.FAILED, status_reason="render_error")
    await store.insert_messages([a, b, c, failed])
    at = T0 + timedelta(minutes=1)
    await send(store, a, at)
    assert await store.transition(a.id, S.DELIVERED, at, expect=[S.SENT])
    assert await store.claim([b.id], at)
    # A retry (back to pending) and a claim are not reported; the skip is.
    assert await store.transition(b.id, S.PENDING, at, expect=[S.SENDING], due_at=at)
    assert await store.claim([b.id], at)
    changes = [StatusChange(b.id, S.SKIPPED, reason="opted_out")]
    assert await store.transition_many(changes, at, expect=[S.SENDING]) == 1
    # A refused transition writes nothing.
    assert not await store.transition(c.id, S.SENT, at, expect=[S.SENDING])
    assert await store.transition(c.id, S.MISSED, at, expect=[S.PENDING], reason="missed")

    entries = await store.webhook_journal(100)
    assert statuses(entries) == sorted(
        [
            (a.id, "sent"),
            (a.id, "delivered"),
            (b.id, "skipped"),
            (c.id, "missed"),
            (failed.id, "failed"),
        ]
    )
    by = {(e.message_id, e.status): e for e in entries}
    skip = by[(b.id, "skipped")]
    assert (skip.user_id, skip.category, skip.reason, skip.at) == ("u2", "meal", "opted_out", at)
    assert by[(failed.id, "failed")].reason == "render_error"
    assert all(e.channel in (None, "push") for e in entries)

    assert await store.drop_webhook_journal(entries) == len(entries)
    assert await store.webhook_journal(100) == []


async def test_dropping_leaves_entries_written_since(store: Store) -> None:
    await store.create_webhook_subscription(subscription())
    m = message("a")
    await store.insert_messages([m])
    await send(store, m, T0)
    first = await store.webhook_journal(10)
    assert statuses(first) == [(m.id, "sent")]
    assert await store.transition(m.id, S.DELIVERED, T0, expect=[S.SENT])
    await store.drop_webhook_journal(first)
    assert statuses(await store.webhook_journal(10)) == [(m.id, "delivered")]
    assert await store.drop_webhook_journal(first) == 0  # twice: harmless


async def test_webhook_deliveries_are_not_journaled(store: Store) -> None:
    await store.create_webhook_subscription(subscription())
    m = message("a")
    await store.insert_messages([m])
    await send(store, m, T0)
    [entry] = await store.webhook_journal(10)
    await store.drop_webhook_journal([entry])
    delivery = delivery_message("wh_1", entry, {"type": "message.sent"}, T0)
    assert delivery.user_id == WEBHOOK_USER
    assert (await store.insert_messages([delivery, delivery])).existing == 1
    await send(store, delivery, T0)
    assert await store.webhook_journal(10) == []


async def test_an_inbox_items_first_read_is_journaled(store: Store) -> None:
    await store.create_webhook_subscription(subscription())

    def item(message_id: str) -> InboxItem:
        return InboxItem(
            item_id=inbox_item_id("u1", message_id),
            user_id="u1",
            message_id=message_id,
            category="meal",
            title="t",
            body="b",
            created_at=T0,
        )

    for mid in ("m1", "m2", "m3"):
        await store.put_inbox_item(item(mid))
    read_at = T0 + timedelta(minutes=3)
    assert await store.mark_inbox_read("u1", inbox_item_id("u1", "m1"), read_at)
    assert await store.mark_inbox_read("u1", inbox_item_id("u1", "m1"), read_at + timedelta(1))
    assert await store.mark_inbox_read_all("u1", read_at) == 2
    entries = await store.webhook_journal(10)
    assert statuses(entries) == [("m1", "read"), ("m2", "read"), ("m3", "read")]
    assert {(e.user_id, e.category, e.channel, e.at) for e in entries} == {
        ("u1", "meal", "inbox", read_at)
    }
    await store.drop_webhook_journal(entries)
    assert await store.webhook_journal(10) == []
