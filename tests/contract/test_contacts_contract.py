"""Store contract: contact points and suppressions (issue 13); provider-event dedup is in
``test_provider_events_contract.py``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tepat.domain.contacts import Contact, Suppression, SuppressionReason
from tepat.ports.store import Store

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
R = SuppressionReason


async def test_a_contact_is_set_replaced_and_removed_per_user_and_channel(store: Store) -> None:
    await store.set_contact("alice", "email", "alice@example.com", False, T0)
    await store.set_contact("alice", "sms", "+14155550100", True, T0)
    await store.set_contact("bob", "email", "bob@example.com", True, T0)
    assert await store.contacts_for_users(["alice", "bob", "carol"], "email") == {
        "alice": Contact("alice", "email", "alice@example.com", False, T0),
        "bob": Contact("bob", "email", "bob@example.com", True, T0),
    }
    later = T0 + timedelta(minutes=1)
    await store.set_contact("alice", "email", "a2@example.com", True, later)
    assert await store.list_contacts("alice") == [
        Contact("alice", "email", "a2@example.com", True, later),
        Contact("alice", "sms", "+14155550100", True, T0),
    ]
    await store.set_contact("alice", "email", None, False, later)
    await store.set_contact("alice", "email", None, False, later)  # removing none is fine
    assert await store.contacts_for_users(["alice"], "email") == {}
    assert [c.channel for c in await store.list_contacts("alice")] == ["sms"]
    assert await store.contacts_for_users([], "email") == {}


async def test_contacts_for_many_users_read_past_one_statement(store: Store) -> None:
    ids = [f"u{i:04d}" for i in range(1200)]
    for uid in ids[::7]:
        await store.set_contact(uid, "sms", f"+1415555{int(uid[1:]):04d}", True, T0)
    got = await store.contacts_for_users([*ids, *ids[:10]], "sms")  # duplicates too
    assert sorted(got) == ids[::7]


async def test_concurrent_first_sets_of_one_contact_leave_one(store: Store) -> None:
    await asyncio.gather(
        *(store.set_contact("alice", "email", f"a{i}@example.com", True, T0) for i in range(10))
    )
    [contact] = await store.list_contacts("alice")
    assert contact.address in {f"a{i}@example.com" for i in range(10)}


async def test_add_suppression_is_new_once_and_keeps_its_first_reason(store: Store) -> None:
    assert await store.add_suppression("sms", "+14155550100", R.STOP, T0, "twilio")
    later = T0 + timedelta(hours=1)
    assert not await store.add_suppression("sms", "+14155550100", R.MANUAL, later, "admin")
    assert await store.suppressions_for("sms", ["+14155550100", "+14155550101"]) == {
        "+14155550100": Suppression("sms", "+14155550100", R.STOP, T0, "twilio"),
    }
    # The same address on another channel is another suppression.
    assert await store.suppressions_for("email", ["+14155550100"]) == {}


async def test_a_stronger_reason_replaces_a_weaker_one_never_the_reverse(store: Store) -> None:
    addr = "x@example.com"
    later = T0 + timedelta(hours=1)
    assert await store.add_suppression("email", addr, R.MANUAL, T0, "admin")
    assert not await store.add_suppression("email", addr, R.HARD_BOUNCE, later, "smtp")
    assert (await store.suppressions_for("email", [addr]))[addr] == Suppression(
        "email", addr, R.HARD_BOUNCE, T0, "smtp"
    )
    assert not await store.add_suppression("email", addr, R.COMPLAINT, later, "ses")
    assert not await store.add_suppression("email", addr, R.HARD_BOUNCE, later, "smtp")
    assert not await store.add_suppression("email", addr, R.STOP, later, "x")
    assert (await store.suppressions_for("email", [addr]))[addr] == Suppression(
        "email", addr, R.COMPLAINT, T0, "ses"
    )


async def test_concurrent_adds_of_one_address_make_one_and_one_is_new(store: Store) -> None:
    results = await asyncio.gather(
        *(store.add_suppression("email", "x@example.com", R.HARD_BOUNCE, T0) for _ in range(10))
    )
    assert sorted(results) == [False] * 9 + [True]
    page = await store.list_suppressions(None, None, 10)
    assert [(s.channel, s.address) for s in page] == [("email", "x@example.com")]


async def test_lift_removes_and_says_whether_there_was_one(store: Store) -> None:
    await store.add_suppression("sms", "+14155550100", R.HARD_BOUNCE, T0)
    await store.add_suppression("sms", "+14155550101", R.STOP, T0)
    # A START reply lifts a STOP only: a dead number stays suppressed.
    assert not await store.lift_suppression("sms", "+14155550100", R.STOP)
    assert await store.lift_suppression("sms", "+14155550101", R.STOP)
    assert not await store.lift_suppression("sms", "+14155550101")
    assert await store.lift_suppression("sms", "+14155550100")
    assert await store.suppressions_for("sms", ["+14155550100", "+14155550101"]) == {}
    # Lifted, it can be added again and is new again.
    assert await store.add_suppression("sms", "+14155550100", R.STOP, T0)


async def test_list_suppressions_pages_by_channel_and_address(store: Store) -> None:
    for address in ("c@example.com", "a@example.com", "b@example.com"):
        await store.add_suppression("email", address, R.COMPLAINT, T0)
    for number in ("+14155550102", "+14155550101"):
        await store.add_suppression("sms", number, R.STOP, T0)

    seen: list[tuple[str, str]] = []
    after: tuple[str, str] | None = None
    while True:
        page = await store.list_suppressions(None, after, 2)
        if not page:
            break
        assert len(page) <= 2
        seen.extend((s.channel, s.address) for s in page)
        after = (page[-1].channel, page[-1].address)
    assert seen == [
        ("email", "a@example.com"),
        ("email", "b@example.com"),
        ("email", "c@example.com"),
        ("sms", "+14155550101"),
        ("sms", "+14155550102"),
    ]
    sms = await store.list_suppressions("sms", None, 10)
    assert [s.address for s in sms] == ["+14155550101", "+14155550102"]
    later = await store.list_suppressions("sms", ("sms", "+14155550101"), 10)
    assert [s.address for s in later] == ["+14155550102"]
    rest = await store.list_suppressions("sms", ("sms", "+14155550101"), 10)
    assert [s.address for s in rest] == ["+14155550102"]
    # A cursor from the email pages, used with the sms filter, still starts right.
    assert len(await store.list_suppressions("sms", ("email", "zzz"), 10)) == 2
    assert await store.list_suppressions("email", ("email", "c@example.com"), 10) == []
    assert await store.list_suppressions(None, None, 0) == []
