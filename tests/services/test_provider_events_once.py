"""Every provider callback acts first and records last (``tepat.services.provider_events``),
on every store: a process that dies between the two writes leaves the event to the
provider's retry, whose effect then lands exactly once; a replay after the record
changes nothing.

Providers: SES over SNS and the signed relay (``EmailEvents``), Twilio status callbacks
(``apply_status``). A "death" is a store that raises once at a chosen write; the retry
runs on the same store, as the provider's next delivery to any process would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest

from tepat.clock import FakeClock
from tepat.domain.contacts import Suppression
from tepat.domain.email_events import EmailEvent, Kind
from tepat.domain.models import Message, MessageStatus
from tepat.ports.store import Store
from tepat.services.email_events import EmailEvents
from tepat.services.twilio_callbacks import StatusCallback, apply_status
from tests.contract.records import T0, msg
from tests.support.dies_once import Died, DiesOnce
from tests.support.store_factories import STORE_FACTORIES

ADDRESS = "ana@example.com"
PHONE = "+14155550100"


@dataclass(frozen=True)
class Provider:
    """One provider's callback for one message, delivered through ``deliver``."""

    name: str
    message: Message
    deliver: Callable[[Store, FakeClock], Awaitable[str]]  # -> the outcome it answers
    channel: str
    address: str
    status: MessageStatus  # where the callback moves the message
    suppressed: bool  # whether it suppresses the address


def email(name: str, provider: str, kind: Kind, permanent: bool = False) -> Provider:
    message = msg(f"{name}-mail", label=name, channel="email", status=MessageStatus.SENT)
    event = EmailEvent(
        kind=kind,
        type_name=kind.capitalize(),
        message_id=message.id,
        provider_message_id=f"ses-{name}",
        recipients=(ADDRESS,),
        permanent=permanent,
        detail="Permanent/General" if permanent else None,
    )

    async def deliver(store: Store, clock: FakeClock) -> str:
        applied = await EmailEvents(store, clock).apply(provider, f"{name}-event", event)
        return applied.outcome

    status = {
        "bounce": MessageStatus.FAILED if permanent else MessageStatus.SENT,
        "complaint": MessageStatus.SENT,
        "delivery": MessageStatus.DELIVERED,
    }[kind]
    suppressed = kind == "complaint" or (kind == "bounce" and permanent)
    return Provider(name, message, deliver, "email", ADDRESS, status, suppressed)


def twilio(name: str, status: str, error_code: str | None) -> Provider:
    message = msg(f"{name}-sms", label=name, channel="sms", status=MessageStatus.SENT)
    callback = StatusCallback(message.id, f"SM{name}", status, error_code, PHONE)

    async def deliver(store: Store, clock: FakeClock) -> str:
        return str(await apply_status(store, clock, callback))

    moved = MessageStatus.DELIVERED if status == "delivered" else MessageStatus.FAILED
    return Provider(name, message, deliver, "sms", PHONE, moved, error_code is not None)


PROVIDERS = [
    email("ses-bounce", "ses", "bounce", permanent=True),
    email("ses-complaint", "ses", "complaint"),
    email("ses-delivery", "ses", "delivery"),
    email("relay-bounce", "relay", "bounce", permanent=True),
    email("relay-delivery", "relay", "delivery"),
    twilio("twilio-delivered", "delivered", None),
    twilio("twilio-dead-number", "undelivered", "30005"),
]
# Those that write twice when acting: a death between the status and the suppression.
TWO_WRITES = [p for p in PROVIDERS if p.suppressed and p.status is not MessageStatus.SENT]


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with STORE_FACTORIES[request.param](tmp_path) as s:
        yield s


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


async def given(store: Store, p: Provider) -> None:
    """The message, sent to its user's contact: the one address a callback may suppress."""
    await store.set_contact(p.message.user_id, p.channel, p.address, True, T0)
    await store.insert_messages([p.message])


async def effect(store: Store, p: Provider) -> tuple[Message | None, list[Suppression]]:
    """All a callback may change: its message and the suppressions."""
    suppressions = await store.list_suppressions(None, None, 100)
    return await store.get_message(p.message.id), suppressions


async def assert_landed(store: Store, p: Provider) -> None:
    message, suppressions = await effect(store, p)
    assert message is not None
    assert message.status is p.status
    expected = [(p.channel, p.address)] if p.suppressed else []
    assert [(s.channel, s.address) for s in suppressions] == expected


@pytest.mark.parametrize("p", PROVIDERS, ids=lambda p: p.name)
async def test_a_death_before_the_record_is_healed_by_the_retry_once(
    store: Store, clock: FakeClock, p: Provider
) -> None:
    await given(store, p)
    dying = DiesOnce(store, "record_provider_event")
    with pytest.raises(Died):
        await p.deliver(cast(Store, dying), clock)
    await assert_landed(store, p)  # acted on, not recorded
    acted = await effect(store, p)

    clock.advance(timedelta(minutes=5))  # the provider's retry
    assert await p.deliver(store, clock) != "duplicate"
    await assert_landed(store, p)
    assert await effect(store, p) == acted  # the retry changed nothing more

    clock.advance(timedelta(minutes=5))  # and once recorded, a repeat is one
    assert await p.deliver(store, clock) == "duplicate"
    assert await effect(store, p) == acted


@pytest.mark.parametrize("p", TWO_WRITES, ids=lambda p: p.name)
async def test_a_death_between_the_status_and_the_suppression_is_healed_by_the_retry(
    store: Store, clock: FakeClock, p: Provider
) -> None:
    await given(store, p)
    dying = DiesOnce(store, "transition_many", after=True)
    with pytest.raises(Died):
        await p.deliver(cast(Store, dying), clock)
    message, suppressions = await effect(store, p)
    assert message is not None and message.status is p.status
    assert suppressions == []  # the second write never happened

    clock.advance(timedelta(minutes=5))
    assert await p.deliver(store, clock) != "duplicate"
    await assert_landed(store, p)


@pytest.mark.parametrize("p", PROVIDERS, ids=lambda p: p.name)
async def test_a_replay_after_the_record_changes_nothing_even_once_lifted(
    store: Store, clock: FakeClock, p: Provider
) -> None:
    await given(store, p)
    assert await p.deliver(store, clock) != "duplicate"
    await assert_landed(store, p)
    # An operator lifts the suppression; an old event's replay must not bring it back.
    await store.lift_suppression(p.channel, p.address)
    before = await effect(store, p)
    clock.advance(timedelta(hours=1))
    assert await p.deliver(store, clock) == "duplicate"
    assert await effect(store, p) == before
