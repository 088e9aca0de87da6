"""E-mail through the shared send path (tepat/services/sending/channel_sender.py) to a real
SMTP server.

The channel sender with the SMTP adapter, the SQLite store and aiosmtpd: the mail
arrives with both parts and the RFC 8058 headers; its unsubscribe link, POSTed to the
API, makes the next e-mail of that category skip ``opted_out``; a 550 5.1.1 fails the
message and suppresses the address, so the next one skips ``suppressed``; a 421 is
retried with backoff and then sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from api.app import create_app
from tepat.adapters.smtp_email import SmtpEmailChannel
from tepat.clock import FakeClock
from tepat.domain.contacts import SuppressionReason
from tepat.domain.models import Message, MessageStatus, User, slot_key_for
from tepat.domain.retry import RetryPolicy
from tepat.runtime import Runtime, open_runtime
from tepat.services.sending.channel_sender import ChannelSender
from tepat.services.unsubscribe import UnsubscribeLinks
from tepat.wiring import build_email_channel
from tests.api.conftest import ADMIN_KEY, START, make_settings
from tests.support.fake_push import FakePush
from tests.support.messages import make_message
from tests.support.smtp_server import SmtpServer

SECRET = "unsubscribe-secret-0123456789abcdef0123456789"
PUBLIC = "https://tepat.example"
ANA = "ana@example.com"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def server() -> Iterator[SmtpServer]:
    with SmtpServer() as s:
        yield s


@pytest.fixture
async def rt(tmp_path: Path, clock: FakeClock, server: SmtpServer) -> AsyncIterator[Runtime]:
    settings = make_settings(tmp_path).model_copy(
        update={
            "smtp_host": "127.0.0.1",
            "smtp_port": server.port,
            "smtp_tls": "none",
            "smtp_from": "Shop <no-reply@shop.example>",
            "public_url": PUBLIC,
            "unsubscribe_secret": SecretStr(SECRET),
        }
    )
    async with open_runtime(settings, clock=clock, push=FakePush()) as r:
        await r.store.upsert_user(User("ana", "UTC"))
        await r.store.set_contact("ana", "email", ANA, True, clock.now())
        yield r


@pytest.fixture
async def email(rt: Runtime) -> AsyncIterator[SmtpEmailChannel]:
    channel = build_email_channel(rt.settings, rt.clock)
    assert isinstance(channel, SmtpEmailChannel)
    yield channel
    await channel.close()


@pytest.fixture
def sender(rt: Runtime, email: SmtpEmailChannel) -> ChannelSender:
    async def nothing(*_: Any) -> None:
        return None

    links = UnsubscribeLinks(SECRET, PUBLIC, rt.clock)
    return ChannelSender(
        rt.store,
        rt.categories,
        rt.clock,
        {"email": email},
        retry=RetryPolicy(base_seconds=1, cap_seconds=60),
        flush=nothing,
        unsubscribe_url=links.url_for,
    )


def email_message(key: str, rt: Runtime, category: str = "custom") -> Message:
    dedup_key = f"test|{key}"
    now = rt.clock.now()
    m = make_message(
        dedup_key,
        user_id="ana",
        category=category,
        label="invoice.overdue",
        title="Invoice 8841 is overdue",
        body="Please pay invoice 8841.",
        channel="email",
        content={"html": "<p>Please pay invoice <b>8841</b>.</p>"},
        scheduled_at=now,
        nominal_at=now,
        due_at=now,
    )
    return dataclasses.replace(m, slot_key=slot_key_for(m))


async def run(rt: Runtime, sender: ChannelSender, *messages: Message) -> None:
    """What a consumer does with a batch: claim, read users and preferences, send."""
    ids = [m.id for m in messages]
    await rt.store.insert_messages(
        [m for m in messages if await rt.store.get_message(m.id) is None]
    )
    claimed = await rt.store.claim(ids, rt.clock.now())
    await sender.process(claimed)


async def state(rt: Runtime, m: Message) -> tuple[MessageStatus, str | None]:
    got = await rt.store.get_message(m.id)
    assert got is not None
    return got.status, got.status_reason


async def test_sent_with_both_parts_then_one_click_unsubscribe_skips_the_next(
    rt: Runtime, sender: ChannelSender, server: SmtpServer
) -> None:
    first = email_message("a", rt)
    await run(rt, sender, first)
    assert await state(rt, first) == (MessageStatus.SENT, None)
    got = await rt.store.get_message(first.id)
    assert got is not None and got.ticket_id == f"<{first.id}@shop.example>"
    mail = server.received[0].mail
    assert mail.get_content_type() == "multipart/alternative"
    text, html = mail.get_body(("plain",)), mail.get_body(("html",))
    assert text is not None and "Please pay invoice 8841." in text.get_content()
    assert html is not None and "<b>8841</b>" in html.get_content()
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    link = mail["List-Unsubscribe"].strip("<>")
    assert link.startswith(f"{PUBLIC}/u/")

    app = create_app(rt, ADMIN_KEY)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=PUBLIC) as client:
        r = await client.post(
            link.removeprefix(PUBLIC),
            content="List-Unsubscribe=One-Click",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert r.status_code == 200, r.text

    same_category, other_category = email_message("b", rt), email_message("c", rt, "meal")
    await run(rt, sender, same_category, other_category)
    assert await state(rt, same_category) == (MessageStatus.SKIPPED, "opted_out")
    assert await state(rt, other_category) == (MessageStatus.SENT, None)
    assert len(server.received) == 2


async def test_550_fails_and_suppresses_and_the_next_is_skipped_suppressed(
    rt: Runtime, sender: ChannelSender, server: SmtpServer
) -> None:
    server.replies[ANA] = "550 5.1.1 <ana@example.com>: Recipient address rejected"
    first = email_message("a", rt)
    await run(rt, sender, first)
    assert await state(rt, first) == (MessageStatus.FAILED, "smtp_550")
    found = await rt.store.suppressions_for("email", [ANA])
    assert found[ANA].reason == SuppressionReason.HARD_BOUNCE

    second = email_message("b", rt)
    await run(rt, sender, second)
    assert await state(rt, second) == (MessageStatus.SKIPPED, "suppressed")
    assert server.handler.rcpt_attempts[ANA] == 1  # the second never reached the relay


async def test_421_is_retried_with_backoff_then_sent(
    rt: Runtime, sender: ChannelSender, server: SmtpServer, clock: FakeClock
) -> None:
    server.replies[ANA] = "421 4.7.0 Try again later"
    m = email_message("a", rt)
    await run(rt, sender, m)
    back = await rt.store.get_message(m.id)
    assert back is not None and back.status == MessageStatus.PENDING
    assert back.due_at is not None and back.due_at > clock.now()  # backoff, not at once
    assert server.received == []

    del server.replies[ANA]
    clock.set(back.due_at + timedelta(milliseconds=1))
    await run(rt, sender, m)
    assert await state(rt, m) == (MessageStatus.SENT, None)
    assert len(server.received) == 1
    assert server.handler.rcpt_attempts[ANA] == 2
