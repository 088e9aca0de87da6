"""The Channel port's contract (tepat/ports/channel.py), run over every real adapter.

inbox against a SQLite store, e-mail against aiosmtpd, SMS against the Twilio sandbox
over HTTP, webhooks against a local HTTP receiver. What the one send path relies on:

* ``name`` is the channel, ``max_batch`` at least 1;
* one outcome per item, in order, each one of the port's four answers; a refused item
  does not spoil its neighbours;
* a provider that cannot be reached is an answer (``TryAgain``, not sent), never an error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tepat.adapters.sqlite import SqliteStore
from tepat.adapters.twilio_sms import TwilioSmsChannel
from tepat.adapters.webhook_out import WebhookChannel
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.categories import DEFAULT_CATEGORIES, Categories
from tepat.domain.models import Message, User
from tepat.domain.webhooks import EVENT_TYPES, Delivery, parse_target_policy
from tepat.ports.channel import Accepted, Channel, Delivered, Outgoing, Refused, Withheld
from tepat.ports.try_again import TryAgain
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.twilio import (
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    TwilioSandbox,
)
from tepat.sandbox.twilio_wire import NumberScript
from tepat.services.inbox import InboxService
from tepat.services.sending.inbox_channel import InboxChannel
from tepat.services.webhooks import WebhookService
from tepat.wiring import build_email_channel
from tests.support.form_receiver import running_receiver
from tests.support.smtp_server import SmtpServer, free_port

# The receivers listen on loopback, which webhook targets may reach only when allowed.
LOCAL = parse_target_policy("127.0.0.1")

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
SMS_FROM = "+14155550100"
DEAD_EMAIL = "gone@example.com"
DEAD_NUMBER = "+447911123499"


Live = Callable[[int], Outgoing]


@dataclass
class Subject:
    """One adapter under contract: a channel, how to address a live and a dead target,
    and (unless it has no provider to lose) a channel whose provider is unreachable."""

    channel: Channel
    live: Live
    dead: Outgoing
    unreachable: Callable[[], AbstractAsyncContextManager[tuple[Channel, Live]]] | None
    taken: type[Accepted] | type[Delivered]


def message(channel: str, i: int, content: dict[str, Any] | None = None) -> Message:
    return Message(
        f"{channel}-{i:020d}", "ana", "meal", "contract", "Lunch", "Time to eat.", START, "UTC",
        f"contract|{channel}|{i}", None, channel=channel, content=content or {},
    )  # fmt: skip


@asynccontextmanager
async def store_at(path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(path / "t.db"), clock=clock)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def closing(channel: Channel) -> AsyncIterator[Channel]:
    try:
        yield channel
    finally:
        await channel.close()


@asynccontextmanager
async def lost(channel: Channel, live: Live) -> AsyncIterator[tuple[Channel, Live]]:
    async with closing(channel):
        yield channel, live


@asynccontextmanager
async def inbox(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Subject]:
    async with store_at(tmp_path, clock) as store:
        await store.upsert_user(User("ana", "UTC"))
        service = InboxService(store, clock, Categories(DEFAULT_CATEGORIES))
        yield Subject(
            InboxChannel(service),
            lambda i: Outgoing(message("inbox", i), "ana"),
            Outgoing(message("inbox", 99), "nobody"),
            None,  # the inbox is our own store: no provider to lose
            Delivered,
        )


def email_settings(port: int) -> Settings:
    return Settings(
        smtp_host="127.0.0.1",
        smtp_port=port,
        smtp_tls="none",
        smtp_from="Tepat <no-reply@tepat.example>",
        smtp_timeout=10,
        public_url="https://tepat.example",
        unsubscribe_secret=SecretStr("unsubscribe-secret-0123456789abcdef0123456789"),
    )


def email_channel(port: int, clock: FakeClock) -> Channel:
    built = build_email_channel(email_settings(port), clock)
    assert built is not None
    return built


@asynccontextmanager
async def email(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Subject]:
    def live(i: int) -> Outgoing:
        return Outgoing(message("email", i), f"user{i}@example.com")

    with SmtpServer() as server:
        server.replies[DEAD_EMAIL] = "550 5.1.1 no such user"
        async with closing(email_channel(server.port, clock)) as channel:
            yield Subject(
                channel,
                live,
                Outgoing(message("email", 99), DEAD_EMAIL),
                lambda: lost(email_channel(free_port(), clock), live),
                Accepted,
            )


def sms_channel(base_url: str, public_url: str, clock: FakeClock) -> Channel:
    return TwilioSmsChannel(
        account_sid=DEFAULT_ACCOUNT_SID,
        auth_token=DEFAULT_AUTH_TOKEN,
        clock=clock,
        from_number=SMS_FROM,
        base_url=base_url,
        public_url=public_url,
        rate=1e9,  # the FakeClock never has to move for the limiter
    )


@asynccontextmanager
async def sms(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Subject]:
    def live(i: int) -> Outgoing:
        return Outgoing(message("sms", i), f"+4479111234{i:02d}")

    sandbox = TwilioSandbox(clock=clock)
    sandbox.script_number(DEAD_NUMBER, NumberScript(api_error=21211))
    with running_sandbox(sandbox) as server, running_receiver() as receiver:
        nowhere = f"http://127.0.0.1:{free_port()}"
        async with closing(sms_channel(server.base_url, receiver.base_url, clock)) as channel:
            yield Subject(
                channel,
                live,
                Outgoing(message("sms", 99), DEAD_NUMBER),
                lambda: lost(sms_channel(nowhere, receiver.base_url, clock), live),
                Accepted,
            )


@asynccontextmanager
async def webhook(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Subject]:
    with running_receiver() as receiver:
        async with store_at(tmp_path, clock) as store:
            service = WebhookService(store, clock, ["meal"], allow_http=True)
            up = await service.create(f"{receiver.base_url}/hooks", EVENT_TYPES)
            # A webhook's provider is its subscription's receiver: this one is down.
            down = await service.create(f"http://127.0.0.1:{free_port()}/hooks", EVENT_TYPES)

            def delivery(sub_id: str, i: int) -> Outgoing:
                body = Delivery(sub_id, f"evt-{i}", "message.sent", json.dumps({"n": i}))
                return Outgoing(message("webhook", i, body.content()), sub_id)

            async with closing(
                WebhookChannel(store, clock, allow_http=True, allowed_targets=LOCAL)
            ) as channel:
                yield Subject(
                    channel,
                    lambda i: delivery(up.id, i),
                    delivery("no-such-subscription", 99),
                    lambda: lost(
                        WebhookChannel(store, clock, allow_http=True, allowed_targets=LOCAL),
                        lambda i: delivery(down.id, i),
                    ),
                    Delivered,
                )


SUBJECTS = {"inbox": inbox, "email": email, "sms": sms, "webhook": webhook}


# The inbox is our own store: it has no provider to lose.
WITH_A_PROVIDER = sorted(set(SUBJECTS) - {"inbox"})


@pytest.fixture(params=sorted(SUBJECTS))
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    async with SUBJECTS[request.param](tmp_path, FakeClock(START)) as s:
        assert s.channel.name == request.param
        yield s


async def test_names_its_channel_and_takes_at_least_one_item_per_call(subject: Subject) -> None:
    assert isinstance(subject.channel.max_batch, int)
    assert subject.channel.max_batch >= 1


async def test_one_outcome_per_item_in_order_a_refusal_spoils_no_neighbour(
    subject: Subject,
) -> None:
    outcomes = await subject.channel.send([subject.live(1), subject.dead, subject.live(2)])
    assert len(outcomes) == 3
    assert isinstance(outcomes[0], subject.taken)
    assert isinstance(outcomes[1], Refused)
    assert outcomes[1].reason
    assert isinstance(outcomes[2], subject.taken)


async def test_a_whole_batch_is_answered(subject: Subject) -> None:
    n = min(subject.channel.max_batch, 5)
    outcomes = await subject.channel.send([subject.live(i) for i in range(n)])
    assert len(outcomes) == n
    assert all(isinstance(o, subject.taken) for o in outcomes)


async def test_an_item_no_longer_sendable_is_withheld_and_its_neighbours_sent(
    subject: Subject,
) -> None:
    """Asked after the adapter's own waits (tepat/services/sending/lease.py)."""
    lapsed = replace(subject.live(1), still_sendable=lambda: False)
    outcomes = await subject.channel.send([lapsed, subject.live(2)])
    assert outcomes[0] == Withheld()
    assert isinstance(outcomes[1], subject.taken)


@pytest.mark.parametrize("subject", WITH_A_PROVIDER, indirect=True)
async def test_a_withheld_item_is_never_tried_at_the_provider(subject: Subject) -> None:
    assert subject.unreachable is not None
    async with subject.unreachable() as (channel, live):
        outcomes = await channel.send([replace(live(1), still_sendable=lambda: False)])
    assert outcomes == [Withheld()]  # not a TryAgain: no connection was attempted


async def test_nothing_to_send_is_nothing_answered(subject: Subject) -> None:
    assert await subject.channel.send([]) == []


@pytest.mark.parametrize("subject", WITH_A_PROVIDER, indirect=True)
async def test_an_unreachable_provider_is_an_answer_not_an_error(subject: Subject) -> None:
    assert subject.unreachable is not None
    async with subject.unreachable() as (channel, live):
        outcomes = await channel.send([live(1), live(2)])
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert isinstance(outcome, TryAgain)
        # Nothing reached the provider: sending again cannot duplicate anything.
        assert not outcome.maybe_sent
        assert outcome.reason
