"""One outcome table, run over every channel: the same answer makes the same message.

Each case runs the real send path (the dispatcher's claim-decide-send, the channel
sender for every channel but push, the one recorder) on SQLite, with a scripted
provider per channel, and reads the message back. Push answers through its own port
(tickets, a whole-request ``TryAgain`` or ``Rejected``); the other channels through the
Channel port; both must end the same.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tepat.clock import FakeClock
from tepat.domain.categories import OUTCOME_UNKNOWN
from tepat.domain.models import Device, Message, MessageStatus, User, message_id_for, slot_key_for
from tepat.domain.retry import RetryPolicy
from tepat.metrics import REGISTRY
from tepat.ports.channel import Accepted, ChannelOutcome, Delivered, Outgoing, Refused
from tepat.ports.push import (
    PushRequest,
    Rejected,
    SendResult,
    TicketOk,
    Tickets,
)
from tepat.ports.try_again import TryAgain
from tepat.runtime import Runtime, open_runtime
from tepat.services.sending.channel_sender import ChannelSender
from tepat.services.sending.push_channel import PushChannel
from tests.api.conftest import START, make_settings
from tests.support.fake_push import FakePush

CHANNELS = ("push", "inbox", "email", "sms", "webhook")
# Base 10 s and a generator that draws the top of the jitter range: attempt 1 (the
# first claim) is due exactly 10 s later.
RETRY = RetryPolicy(base_seconds=10.0, cap_seconds=300.0, max_attempts=3)
BACKOFF = 10.0


class Crash(Exception):
    """The process dies after the provider took the request, before the record."""


class Top(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


@dataclass(frozen=True)
class Row:
    """An answer, the message's category and attempts before the claim, and what
    the message becomes: (status, status_reason, seconds from now to due_at)."""

    answer: ChannelOutcome | Crash
    expected: tuple[MessageStatus, str | None, float]
    category: str = "meal"  # maybe_sent: close
    attempts: int = 0
    # Push answers a TryAgain as one notification's (in Tickets, as FCM and APNs do
    # beside other notifications answered), not as the whole request's.
    each: bool = False
    # Channels whose provider never gives this answer, and why.
    cannot: dict[str, str] = field(default_factory=dict)
    # Channels that end otherwise on purpose: how, and why.
    unlike: dict[str, tuple[tuple[MessageStatus, str | None, float], str]] = field(
        default_factory=dict
    )


ONLY_ACCEPT = "its provider takes the message; a callback or receipt delivers it later"
ONLY_DELIVER = "final at once: nothing is left for a callback"
NO_PROVIDER = "the inbox is our own store: nothing to wait for or retry"
WEBHOOK_RETRIES = "a webhook's receiver dedupes on the delivery id: a maybe-sent one is retried"
PUSH_ONLY = {
    c: "its port answers per message: the rows without each= cover it"
    for c in CHANNELS
    if c != "push"
}

TABLE: dict[str, Row] = {
    "accepted": Row(
        Accepted("p-1"),
        (MessageStatus.SENT, None, 0),
        cannot={"inbox": ONLY_DELIVER, "webhook": ONLY_DELIVER},
    ),
    "delivered": Row(
        Delivered(),
        (MessageStatus.DELIVERED, None, 0),
        cannot={"push": ONLY_ACCEPT, "email": ONLY_ACCEPT, "sms": ONLY_ACCEPT},
    ),
    "refused": Row(Refused("refused: bad"), (MessageStatus.FAILED, "refused: bad", 0)),
    "try again": Row(
        TryAgain("503 busy"),
        (MessageStatus.PENDING, None, BACKOFF),
        cannot={"inbox": NO_PROVIDER},
    ),
    "try again after Retry-After": Row(
        TryAgain("429 slow down", retry_after=120.0, throttled=True),
        (MessageStatus.PENDING, None, 120.0),
        cannot={"inbox": NO_PROVIDER},
    ),
    "try again, given up": Row(
        TryAgain("503 busy"),
        (MessageStatus.FAILED, "gave up after 3 attempts: 503 busy", 0),
        attempts=2,
        cannot={"inbox": NO_PROVIDER},
    ),
    "5xx the provider says to retry, category closes": Row(
        # Expo's guidance (issue 19): retried with backoff, not left to the category.
        TryAgain("500 oops", server_error=True),
        (MessageStatus.PENDING, None, BACKOFF),
        cannot={"inbox": NO_PROVIDER},
    ),
    "maybe sent, category closes": Row(
        TryAgain("read timeout", maybe_sent=True),
        (MessageStatus.FAILED, OUTCOME_UNKNOWN, 0),
        cannot={"inbox": NO_PROVIDER},
        unlike={"webhook": ((MessageStatus.PENDING, None, BACKOFF), WEBHOOK_RETRIES)},
    ),
    "maybe sent, category retries": Row(
        TryAgain("read timeout", maybe_sent=True),
        (MessageStatus.PENDING, None, BACKOFF),
        category="safety",
        cannot={"inbox": NO_PROVIDER},
    ),
    "crash after send": Row(Crash(), (MessageStatus.SENDING, None, 0)),
}
# Push answers these for one notification too (in Tickets, as FCM and APNs do beside
# other notifications answered): the message must end the same.
ONE_NOTIFICATION = (
    "try again after Retry-After",
    "5xx the provider says to retry, category closes",
    "maybe sent, category closes",
    "maybe sent, category retries",
)


def for_one_notification(name: str) -> str:
    return f"{name}, for one notification"


TABLE.update(
    {
        for_one_notification(name): dataclasses.replace(
            TABLE[name], each=True, cannot=PUSH_ONLY, unlike={}
        )
        for name in ONE_NOTIFICATION
    }
)

CASES = [
    pytest.param(name, channel, id=f"{name}-{channel}")
    for name, row in TABLE.items()
    for channel in CHANNELS
    if channel not in row.cannot
]


class ScriptedPush(FakePush):
    """Expo's port answering one scripted answer for every request."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: ChannelOutcome | Crash = Accepted("p-1")
        self.each = False

    @property
    def sent(self) -> list[PushRequest]:
        return self.requests

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        self.batches.append(list(batch))
        match self.answer:
            case Accepted(provider_id):
                return Tickets([TicketOk(provider_id or "") for _ in batch])
            case Refused(reason):
                return Rejected(reason)
            case TryAgain() as again:
                return Tickets([again for _ in batch]) if self.each else again
            case Crash() as crash:
                raise crash
        raise AssertionError(f"push cannot answer {self.answer!r}")


class ScriptedChannel:
    """A Channel port answering one scripted answer for every item."""

    max_batch = 10

    def __init__(self, name: str, push: ScriptedPush) -> None:
        self.name = name
        self._script = push  # one script for every channel of the case
        self.sent: list[Outgoing] = []

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome]:
        self.sent.extend(items)
        answer = self._script.answer
        if isinstance(answer, Crash):
            raise answer
        return [answer for _ in items]

    async def close(self) -> None:
        pass


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    clock = FakeClock(START)
    async with open_runtime(make_settings(tmp_path), clock=clock, push=ScriptedPush()) as r:
        now = clock.now()
        await r.store.upsert_user(User("ana", "UTC"))
        await r.store.register_device(
            Device("ana", "phone", "ExponentPushToken[ana]", created_at=now, updated_at=now)
        )
        await r.store.set_contact("ana", "email", "ana@example.com", True, now)
        await r.store.set_contact("ana", "sms", "+447700900123", True, now)
        yield r


def message(channel: str, row: Row, now: datetime) -> Message:
    dedup_key = f"table|{channel}"
    content: dict[str, Any] = {"subscription_id": "sub-1"} if channel == "webhook" else {}
    m = Message(
        message_id_for(dedup_key), "ana", row.category, "table", "Title", "Body", now, "UTC",
        dedup_key, None, channel=channel, content=content, nominal_at=now, due_at=now,
        attempts=row.attempts,
    )  # fmt: skip
    return dataclasses.replace(m, slot_key=slot_key_for(m))


def dispatcher(rt: Runtime) -> tuple[ChannelSender, list[Any]]:
    """The send path with one scripted provider per channel, all answering alike."""
    push = ScriptedPush()
    channels: dict[str, Any] = {
        name: ScriptedChannel(name, push) for name in CHANNELS if name != "push"
    }
    sender = ChannelSender(
        rt.store,
        rt.categories,
        rt.clock,
        {"push": PushChannel({"expo": push}, rt.store, rt.clock, rt.categories), **channels},
        retry=RETRY,
        flush=rt.outbox.flush_quietly,
        rng=Top(),
    )
    return sender, [push, *channels.values()]


async def send_once(
    rt: Runtime, name: str, channel: str, late: timedelta = timedelta(0)
) -> tuple[Message, list[Any]]:
    """Claim one message of ``channel`` and send it through the real send path ``late``
    after its instant, its provider answering ``name``'s row; the providers, to see
    what they were sent."""
    row = TABLE[name]
    now = rt.clock.now()
    d, providers = dispatcher(rt)
    providers[0].answer, providers[0].each = row.answer, row.each
    m = message(channel, row, now)
    await rt.store.insert_messages([m])
    claimed = await rt.store.claim([m.id], now)
    assert [c.id for c in claimed] == [m.id]
    assert isinstance(rt.clock, FakeClock)
    rt.clock.advance(late)

    if isinstance(row.answer, Crash):
        with pytest.raises(Crash):
            await d.process(claimed)
    else:
        await d.process(claimed)
    return m, providers


@pytest.mark.parametrize(("name", "channel"), CASES)
async def test_the_same_answer_ends_the_same_on_every_channel(
    rt: Runtime, name: str, channel: str
) -> None:
    row = TABLE[name]
    now = rt.clock.now()
    m, providers = await send_once(rt, name, channel)

    assert sum(len(p.sent) for p in providers) == 1, "sent once, through its own channel"
    got = await rt.store.get_message(m.id)
    assert got is not None
    status, reason, due_in = row.unlike[channel][0] if channel in row.unlike else row.expected
    assert (got.status, got.status_reason, got.due_at) == (
        status,
        reason,
        now + timedelta(seconds=due_in),
    )
    if status is MessageStatus.SENT:
        assert got.ticket_id == "p-1"
    if isinstance(row.answer, TryAgain | Refused):
        assert got.last_error == row.answer.reason
    if isinstance(row.answer, Crash):
        # Left ``sending``: after the lease the sweeper re-drives it, as on every channel.
        assert isinstance(rt.clock, FakeClock)
        rt.clock.advance(rt.sweeper.lease + timedelta(seconds=1))
        assert await rt.sweeper.sweep_once() == 1
        again = await rt.store.get_message(m.id)
        assert again is not None
        assert (again.status, again.last_error, again.due_at) == (
            MessageStatus.PENDING,
            "consumer lease expired",
            rt.clock.now(),
        )


SEND_LINE = "send recorded"


@pytest.mark.parametrize(
    ("name", "channel", "outcome", "reason"),
    [
        ("accepted", "push", "sent", None),
        ("accepted", "email", "sent", None),
        ("delivered", "inbox", "delivered", None),
        ("refused", "sms", "failed", "refused: bad"),
        ("try again", "push", "retry", "503 busy"),
        ("try again, given up", "email", "failed", "gave up after 3 attempts: 503 busy"),
        ("maybe sent, category closes", "sms", "failed", OUTCOME_UNKNOWN),
    ],
)
async def test_each_recorded_send_logs_one_line_that_names_its_message(
    rt: Runtime, name: str, channel: str, outcome: str, reason: str | None
) -> None:
    # Sent 1.5 s after the message's instant, on its next claim (a row's attempts are
    # those before the claim).
    with capture_logs() as logs:
        m, _ = await send_once(rt, name, channel, late=timedelta(seconds=1.5))
    lines = [e for e in logs if e["event"] == SEND_LINE]
    assert lines == [
        {
            "event": SEND_LINE,
            "log_level": "info",
            "message_id": m.id,
            "user_id": "ana",
            "channel": channel,
            "category": TABLE[name].category,
            "attempt": TABLE[name].attempts + 1,
            "lateness_ms": 1500,
            "outcome": outcome,
            **({} if reason is None else {"reason": reason}),
        }
    ]


async def test_a_crash_before_the_record_logs_no_send(rt: Runtime) -> None:
    with capture_logs() as logs:
        await send_once(rt, "crash after send", "email")
    assert [e for e in logs if e["event"] == SEND_LINE] == []


@pytest.mark.parametrize(
    ("name", "action"),
    [
        (for_one_notification("maybe sent, category closes"), "closed"),
        (for_one_notification("maybe sent, category retries"), "retried"),
        (for_one_notification("5xx the provider says to retry, category closes"), "retried_5xx"),
    ],
)
async def test_one_notification_maybe_sent_is_counted_as_a_possible_duplicate(
    rt: Runtime, name: str, action: str
) -> None:
    labels = {"category": TABLE[name].category, "action": action}
    before = REGISTRY.get_sample_value("tepat_maybe_sent_total", labels) or 0.0
    await send_once(rt, name, "push")
    assert REGISTRY.get_sample_value("tepat_maybe_sent_total", labels) == before + 1


async def test_a_user_id_that_reads_like_a_skip_reason_is_still_its_own_target(
    rt: Runtime,
) -> None:
    """``skip:no_contact`` is a valid user id: their inbox message goes to them, not
    skipped as if no target had been found."""
    now = rt.clock.now()
    await rt.store.upsert_user(User("skip:no_contact", "UTC"))
    d, providers = dispatcher(rt)
    providers[0].answer = Delivered()
    m = dataclasses.replace(message("inbox", TABLE["delivered"], now), user_id="skip:no_contact")
    await rt.store.insert_messages([m])
    await d.process(await rt.store.claim([m.id], now))
    assert [o.target for o in providers[1].sent] == ["skip:no_contact"]
    got = await rt.store.get_message(m.id)
    assert got is not None and got.status is MessageStatus.DELIVERED
