"""Store contract: message templates, every version kept, never edited in place."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tepat.domain.routing import Channel
from tepat.domain.templates import TemplateKey, content_hash
from tepat.ports.store import Store

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
PAID_EN = TemplateKey("order.paid", Channel.PUSH, "en")
PAID_PT = TemplateKey("order.paid", Channel.PUSH, "pt-BR")
PAID_INBOX = TemplateKey("order.paid", Channel.INBOX, "en")
OVERDUE = TemplateKey("invoice.overdue", Channel.INBOX, "en")


def parts(title: str) -> dict[str, object]:
    return {"title": title, "body": "b", "data": {"url": "app://x/{{ id }}"}}


async def add(store: Store, key: TemplateKey, title: str, minutes: float = 0) -> tuple[int, bool]:
    p = parts(title)
    t, created = await store.add_template_version(
        key, p, content_hash(p), T0 + timedelta(minutes=minutes)
    )
    return t.version, created


async def test_each_new_content_is_a_new_version_and_old_ones_stay(store: Store) -> None:
    assert await add(store, PAID_EN, "one") == (1, True)
    assert await add(store, PAID_EN, "two", 1) == (2, True)
    assert await add(store, PAID_EN, "one", 2) == (3, True)  # back to old text: still new
    v1 = await store.get_template(PAID_EN, 1)
    assert v1 is not None
    assert v1.parts == parts("one")
    assert v1.created_at == T0
    assert v1.id == "order.paid:push:en:1"
    latest = await store.get_template(PAID_EN)
    assert latest is not None
    assert (latest.version, latest.parts["title"]) == (3, "one")
    assert latest.created_at == T0 + timedelta(minutes=2)


async def test_the_same_content_as_the_latest_creates_nothing(store: Store) -> None:
    await add(store, PAID_EN, "one")
    assert await add(store, PAID_EN, "one", 5) == (1, False)
    latest = await store.get_template(PAID_EN)
    assert latest is not None
    assert latest.version == 1
    assert latest.created_at == T0  # the stored version, untouched


async def test_keys_are_versioned_apart(store: Store) -> None:
    await add(store, PAID_EN, "one")
    await add(store, PAID_EN, "two")
    assert await add(store, PAID_PT, "um") == (1, True)
    assert await add(store, PAID_INBOX, "one") == (1, True)
    assert await store.get_template(PAID_PT, 2) is None
    assert await store.get_template(OVERDUE) is None


async def test_latest_templates_lists_the_latest_of_each_key_in_order(store: Store) -> None:
    await add(store, PAID_PT, "um")
    await add(store, PAID_EN, "one")
    await add(store, PAID_EN, "two")
    await add(store, OVERDUE, "late")
    await add(store, PAID_INBOX, "one")
    listed = await store.latest_templates()
    assert [(t.id, t.parts["title"]) for t in listed] == [
        ("invoice.overdue:inbox:en:1", "late"),
        ("order.paid:inbox:en:1", "one"),
        ("order.paid:push:en:2", "two"),
        ("order.paid:push:pt-BR:1", "um"),
    ]
    only = await store.latest_templates("invoice.overdue")
    assert [t.id for t in only] == ["invoice.overdue:inbox:en:1"]
    assert await store.latest_templates("otp.requested") == []


async def test_concurrent_puts_get_distinct_versions(store: Store) -> None:
    results = await asyncio.gather(*(add(store, PAID_EN, f"t{i}") for i in range(8)))
    assert sorted(v for v, _ in results) == list(range(1, 9))
    assert all(created for _, created in results)
    titles = set()
    for v in range(1, 9):
        t = await store.get_template(PAID_EN, v)
        assert t is not None
        titles.add(t.parts["title"])
    assert titles == {f"t{i}" for i in range(8)}  # none overwrote another


async def test_concurrent_identical_puts_create_one_version(store: Store) -> None:
    await add(store, PAID_EN, "old")
    results = await asyncio.gather(*(add(store, PAID_EN, "new") for _ in range(6)))
    assert {v for v, _ in results} == {2}
    assert sum(created for _, created in results) == 1
    assert await store.get_template(PAID_EN, 3) is None
