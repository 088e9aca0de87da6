"""Issue 13's acceptance, driven as a new user would: configuration in the environment,
everything else through the HTTP API.

``invoice.overdue`` is routed to email and SMS in ``TEPAT_EVENT_TYPES``; e-mail goes over
real SMTP to an ``aiosmtpd`` server started here, SMS over real HTTP to the project's
Twilio sandbox. The user's contacts, the templates, the event, suppressions, preferences,
the one-click unsubscribe and Twilio's status callbacks all go through the API; the fan-out
and the consumers run as ``tests/api`` runs them (``fan_out_until_idle``, ``drain_due``) on
the fake clock, on both stores.

The sandbox runs on a clock of its own that never moves, so its callbacks never fall due:
they would go to ``TEPAT_PUBLIC_URL`` (an https host the one-click link needs, unreachable
here). The test posts them instead, to the URL the sandbox recorded, signed as Twilio signs
(an HMAC-SHA1 written here from Twilio's documentation, independent of the project's).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator, Iterator, MutableMapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from structlog.testing import capture_logs

from api.app import create_app
from tepat.clock import FakeClock
from tepat.domain.models import Message, MessageStatus
from tepat.runtime import Runtime
from tepat.sandbox.server import RunningTwilioSandbox, running_sandbox
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox
from tepat.services.events import EventService
from tests.api.conftest import ADMIN, ADMIN_KEY, START, STORES, problem, runtime_on
from tests.api.helpers import create_user, drain_due, ok
from tests.support.fake_push import FakePush
from tests.support.smtp_server import SmtpServer
from tests.support.waiting import eventually

PUBLIC = "https://tepat.example"
MAILTO = "unsubscribe@shop.example"
SENDER = "+14155550100"
ANA_EMAIL, ANA_PHONE = "ana@example.com", "+14155552671"
BEN_EMAIL, BEN_PHONE = "ben@example.com", "+14155552672"
LINK_DAYS = 30
RELAY_SECRET = "relay-events-secret-0123456789abcdef0123456789"

EVENT_TYPES = {
    "invoice.overdue": {
        "category": "custom",
        "channels": [{"channel": "email"}, {"channel": "sms"}],
    }
}
EMAIL_V1 = {
    "title": "Invoice {{ invoice }} is overdue",
    "body": "Please pay {{ amount }} for invoice {{ invoice }}.",
    "html": "<p>Please pay <b>{{ amount }}</b> for invoice {{ invoice }}.</p>",
}
EMAIL_V2 = {"title": "EDITED {{ invoice }}", "body": "EDITED", "html": "<p>EDITED</p>"}
SMS_V1 = {"body": "Invoice {{ invoice }} is overdue: please pay {{ amount }}."}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


@pytest.fixture
def twilio() -> Iterator[RunningTwilioSandbox]:
    sandbox = TwilioSandbox(clock=FakeClock(START), callback_delay_seconds=60)
    with running_sandbox(sandbox) as running:
        yield running


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    clock: FakeClock,
    smtp: SmtpServer,
    twilio: RunningTwilioSandbox,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Runtime]:
    """The configuration a new user writes into the environment (tests/api's settings
    read it beside their own: store, broker, keys)."""
    env = {
        "TEPAT_EVENT_TYPES": json.dumps(EVENT_TYPES),
        "TEPAT_SMTP_HOST": "127.0.0.1",
        "TEPAT_SMTP_PORT": str(smtp.port),
        "TEPAT_SMTP_TLS": "none",
        "TEPAT_SMTP_FROM": "Shop <billing@shop.example>",
        "TEPAT_PUBLIC_URL": PUBLIC,
        "TEPAT_UNSUBSCRIBE_SECRET": "unsubscribe-secret-0123456789abcdef0123456789",
        "TEPAT_UNSUBSCRIBE_MAILTO": MAILTO,
        "TEPAT_UNSUBSCRIBE_LINK_DAYS": str(LINK_DAYS),
        "TEPAT_EMAIL_EVENTS_SECRET": RELAY_SECRET,
        "TEPAT_TWILIO_ACCOUNT_SID": DEFAULT_ACCOUNT_SID,
        "TEPAT_TWILIO_AUTH_TOKEN": DEFAULT_AUTH_TOKEN,
        "TEPAT_TWILIO_FROM": SENDER,
        "TEPAT_TWILIO_URL": twilio.base_url,
        "TEPAT_TWILIO_RATE": "1000",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with runtime_on(request.param, tmp_path, clock, FakePush(), "tepat_e2e") as r:
        assert set(r.dispatcher.channels.channels) >= {"email", "sms"}
        yield r


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every structlog line of the test, as its fields."""
    with capture_logs() as captured:
        yield captured


@pytest.fixture
def app(rt: Runtime) -> FastAPI:
    return create_app(rt, ADMIN_KEY)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    # The public URL's host: the one-click links in the mail are followed as they are.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=PUBLIC) as c:
        yield c


# ---------------------------------------------------------------- driving the API


async def user(client: httpx.AsyncClient, user_id: str, email: str, phone: str) -> None:
    await create_user(client, user_id, "UTC")
    for channel, address in (("email", email), ("sms", phone)):
        r = await ok(
            await client.put(
                f"/v1/users/{user_id}/contacts/{channel}",
                json={"address": address, "verified": True},
                headers=ADMIN,
            )
        )
        assert r.json()["address"] == address


async def template(client: httpx.AsyncClient, channel: str, parts: dict[str, Any]) -> str:
    r = await client.put(f"/v1/templates/invoice.overdue/{channel}/en", json=parts, headers=ADMIN)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def event_body(event_id: str, *user_ids: str) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": "invoice.overdue",
        "user_ids": list(user_ids),
        "data": {"invoice": "8841", "amount": "$120 & tax"},
        "occurred_at": "2027-03-01T00:00:00+00:00",
    }


async def post_event(client: httpx.AsyncClient, event_id: str, *user_ids: str) -> None:
    r = await client.post("/v1/events", json=event_body(event_id, *user_ids), headers=ADMIN)
    assert r.status_code == 202, r.text


async def fan_out(app: FastAPI) -> None:
    """What the scheduler's fan-out loop does, until nothing is left to fan out."""
    service: EventService = app.state.events
    await service.fan_out_until_idle()


async def deliver(app: FastAPI, rt: Runtime) -> None:
    await fan_out(app)
    await drain_due(rt)


async def event_status(client: httpx.AsyncClient, event_id: str) -> dict[str, Any]:
    return dict((await ok(await client.get(f"/v1/events/{event_id}", headers=ADMIN))).json())


async def messages(client: httpx.AsyncClient, user_id: str) -> list[dict[str, Any]]:
    r = await ok(await client.get(f"/v1/users/{user_id}/messages", headers=ADMIN))
    return list(r.json()["messages"])


async def message_with_ticket(
    client: httpx.AsyncClient, user_id: str, ticket: str
) -> dict[str, Any]:
    [found] = [m for m in await messages(client, user_id) if m["ticket_id"] == ticket]
    return found


def signature(token: str, url: str, params: dict[str, str]) -> str:
    """Twilio's X-Twilio-Signature, from its documentation: Base64 of the HMAC-SHA1, keyed
    by the auth token, of the full URL followed by each POST parameter's name and value,
    sorted by name."""
    signed = url + "".join(name + params[name] for name in sorted(params))
    digest = hmac.new(token.encode(), signed.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


async def twilio_status(
    client: httpx.AsyncClient,
    sms: dict[str, Any],
    status: str,
    token: str = DEFAULT_AUTH_TOKEN,
) -> httpx.Response:
    """The status callback Twilio posts to the message's ``StatusCallback``."""
    url = str(sms["status_callback"])
    assert url.startswith(f"{PUBLIC}/v1/providers/twilio/status?"), url
    params = {
        "AccountSid": DEFAULT_ACCOUNT_SID,
        "ApiVersion": "2010-04-01",
        "From": SENDER,
        "MessageSid": sms["sid"],
        "MessageStatus": status,
        "SmsSid": sms["sid"],
        "SmsStatus": status,
        "To": sms["to"],
    }
    headers = {"X-Twilio-Signature": signature(token, url, params)}
    return await client.post(url.removeprefix(PUBLIC), data=params, headers=headers)


def unsubscribe_links(mail: Any) -> tuple[str, str]:
    """(the https one-click URL, the mailto) of a received mail's List-Unsubscribe."""
    found = re.findall(r"<([^>]+)>", str(mail["List-Unsubscribe"]))
    [https] = [u for u in found if u.startswith("https://")]
    [mailto] = [u for u in found if u.startswith("mailto:")]
    return https, mailto


async def one_click(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """What a mailbox provider POSTs for the one-click button (RFC 8058 section 3.2)."""
    return await client.post(
        url.removeprefix(PUBLIC),
        content="List-Unsubscribe=One-Click",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )


# ---------------------------------------------------------------- the acceptance


async def test_invoice_overdue_arrives_by_email_and_sms_and_twilio_callbacks_move_it(
    client: httpx.AsyncClient,
    app: FastAPI,
    rt: Runtime,
    clock: FakeClock,
    smtp: SmtpServer,
    twilio: RunningTwilioSandbox,
) -> None:
    await user(client, "ana", ANA_EMAIL, ANA_PHONE)
    pinned = await template(client, "email", EMAIL_V1)
    await template(client, "sms", SMS_V1)
    await post_event(client, "inv-8841", "ana")
    await fan_out(app)
    # Edited after the messages were created: they keep the version pinned then.
    edited = await template(client, "email", EMAIL_V2)
    assert (pinned, edited) == ("invoice.overdue:email:en:1", "invoice.overdue:email:en:2")
    await drain_due(rt)

    [received] = smtp.received
    assert received.rcpt_tos == [ANA_EMAIL]
    mail = received.mail
    assert mail["To"] == ANA_EMAIL
    assert mail["Subject"] == "Invoice 8841 is overdue"
    assert mail.get_content_type() == "multipart/alternative"
    text, html = mail.get_body(("plain",)), mail.get_body(("html",))
    assert text is not None and html is not None
    assert text.get_content().strip() == "Please pay $120 & tax for invoice 8841."
    assert "<p>Please pay <b>$120 &amp; tax</b> for invoice 8841.</p>" in html.get_content()
    https, mailto = unsubscribe_links(mail)
    assert https.startswith(f"{PUBLIC}/u/")
    assert mailto.startswith(f"mailto:{MAILTO}")
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"

    [sms] = twilio.sandbox.received()
    assert (sms["to"], sms["from"]) == (ANA_PHONE, SENDER)
    assert sms["body"] == "Invoice 8841 is overdue: please pay $120 & tax."
    message = await message_with_ticket(client, "ana", sms["sid"])
    assert message["status"] == "sent"

    # A forged callback (signed with another token) is refused and changes nothing.
    problem(await twilio_status(client, sms, "delivered", token="f" * 32), 403)
    assert await message_with_ticket(client, "ana", sms["sid"]) == message

    assert (await twilio_status(client, sms, "delivered")).status_code == 200
    delivered = await message_with_ticket(client, "ana", sms["sid"])
    assert (delivered["status"], delivered["status_reason"]) == ("delivered", None)

    # Twilio repeats a callback, and an older status arrives late: neither changes it.
    clock.advance(5)
    for status in ("delivered", "sent", "queued"):
        assert (await twilio_status(client, sms, status)).status_code == 200
        assert await message_with_ticket(client, "ana", sms["sid"]) == delivered

    got = await event_status(client, "inv-8841")
    assert got["channels"]["sms"]["by_status"] == {"delivered": 1}
    assert got["channels"]["email"]["by_status"] == {"sent": 1}
    assert (got["recipients"], got["messages_created"], got["failed"]) == (1, 2, 0)


async def test_a_550_fails_and_suppresses_the_next_event_skips_email_suppressed(
    client: httpx.AsyncClient,
    app: FastAPI,
    rt: Runtime,
    smtp: SmtpServer,
    twilio: RunningTwilioSandbox,
) -> None:
    await user(client, "ana", ANA_EMAIL, ANA_PHONE)
    await user(client, "ben", BEN_EMAIL, BEN_PHONE)
    await template(client, "email", EMAIL_V1)
    await template(client, "sms", SMS_V1)
    smtp.replies[BEN_EMAIL] = f"550 5.1.1 <{BEN_EMAIL}>: Recipient address rejected"
    await post_event(client, "inv-1", "ana", "ben")
    await deliver(app, rt)

    assert [r.rcpt_tos for r in smtp.received] == [[ANA_EMAIL]]
    first = await event_status(client, "inv-1")
    assert first["channels"]["email"]["by_status"] == {"sent": 1, "failed": 1}
    assert first["channels"]["email"]["failed_reasons"] == {"smtp_550": 1}
    assert first["channels"]["sms"]["by_status"] == {"sent": 2}
    [failed] = [m for m in await messages(client, "ben") if m["status"] == "failed"]
    assert failed["status_reason"] == "smtp_550"

    r = await ok(await client.get("/v1/suppressions", headers=ADMIN))
    [suppressed] = r.json()["items"]
    assert (suppressed["channel"], suppressed["address"], suppressed["reason"]) == (
        "email",
        BEN_EMAIL,
        "hard_bounce",
    )

    await post_event(client, "inv-2", "ben")
    await deliver(app, rt)
    second = await event_status(client, "inv-2")
    assert second["channels"]["email"]["skipped"] == {"suppressed": 1}
    assert second["channels"]["sms"]["by_status"] == {"sent": 1}
    assert second["skipped"] == {"suppressed": 1}
    assert smtp.handler.rcpt_attempts[BEN_EMAIL] == 1  # the second never reached the relay
    assert len(twilio.sandbox.received()) == 3


async def test_a_421_is_retried_with_backoff_then_sent_and_delivered(
    client: httpx.AsyncClient,
    app: FastAPI,
    rt: Runtime,
    clock: FakeClock,
    smtp: SmtpServer,
    logs: list[MutableMapping[str, Any]],
) -> None:
    await user(client, "ana", ANA_EMAIL, ANA_PHONE)
    await template(client, "email", EMAIL_V1)
    await template(client, "sms", SMS_V1)
    smtp.replies[ANA_EMAIL] = "421 4.7.0 Try again later"
    await post_event(client, "inv-1", "ana")
    await fan_out(app)
    # The first retry waits up to a second (full jitter): its batch may be handed over at
    # once and held by the consumer on the clock, so the drain runs while the clock moves.
    draining = asyncio.create_task(drain_due(rt))

    async def waiting_email() -> Message | None:
        """The e-mail waiting for its retry: pending, or already claimed for it (its
        backoff shorter than TEPAT_CLAIM_AHEAD_SECONDS: claimed at once, sent at its
        instant, which this clock has not reached)."""
        for m in await messages(client, "ana"):
            got = await rt.store.get_message(m["id"])
            if got is None or got.channel != "email":
                continue
            if got.attempts == 1 and got.status is MessageStatus.PENDING:
                return got
            if got.attempts == 2 and got.status is MessageStatus.SENDING:
                return got
        return None

    async def retry_waiting() -> bool:
        return await waiting_email() is not None

    await eventually(retry_waiting, what="the e-mail back to pending after the 421")
    back = await waiting_email()
    assert back is not None and back.status_reason is None
    assert back.due_at is not None and back.due_at > clock.now()  # backoff, not at once
    assert smtp.received == [] and smtp.handler.rcpt_attempts[ANA_EMAIL] == 1
    got = await event_status(client, "inv-1")
    assert got["channels"]["email"]["pending"] == 1

    del smtp.replies[ANA_EMAIL]
    clock.set(back.due_at + timedelta(milliseconds=1))
    await draining
    await drain_due(rt)  # a batch the broker held for its instant
    assert [r.rcpt_tos for r in smtp.received] == [[ANA_EMAIL]]
    assert smtp.handler.rcpt_attempts[ANA_EMAIL] == 2
    got = await event_status(client, "inv-1")
    assert got["channels"]["email"]["by_status"] == {"sent": 1}
    assert got["channels"]["sms"]["by_status"] == {"sent": 1}
    # One line per send of ana's: the e-mail's retry then its second attempt, the SMS.
    assert sorted(
        (e["channel"], e["attempt"], e["outcome"], e.get("reason"))
        for e in logs
        if e["event"] == "send recorded" and e["user_id"] == "ana"
    ) == [("email", 1, "retry", "smtp_421"), ("email", 2, "sent", None), ("sms", 1, "sent", None)]

    # The relay then reports the delivery (a signed SES-shaped event of a relay of ours).
    mail = smtp.received[0].mail
    event = {
        "eventId": "delivery-1",
        "notificationType": "Delivery",
        "delivery": {"recipients": [ANA_EMAIL]},
        "mail": {
            "messageId": "relay-1",
            "headers": [{"name": "X-Tepat-Message-Id", "value": mail["X-Tepat-Message-Id"]}],
        },
    }
    raw = json.dumps(event).encode()
    digest = hmac.new(RELAY_SECRET.encode(), raw, hashlib.sha256).hexdigest()
    r = await client.post(
        "/v1/providers/email/events",
        content=raw,
        headers={"X-Tepat-Signature": f"sha256={digest}", "content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    got = await event_status(client, "inv-1")
    assert got["channels"]["email"]["by_status"] == {"delivered": 1}


async def test_one_click_unsubscribe_opts_out_of_that_categorys_email_only(
    client: httpx.AsyncClient,
    app: FastAPI,
    rt: Runtime,
    clock: FakeClock,
    smtp: SmtpServer,
    twilio: RunningTwilioSandbox,
) -> None:
    await user(client, "ana", ANA_EMAIL, ANA_PHONE)
    await template(client, "email", EMAIL_V1)
    await template(client, "sms", SMS_V1)
    await post_event(client, "inv-1", "ana")
    await deliver(app, rt)
    old_link, _ = unsubscribe_links(smtp.received[0].mail)

    # Its link expires after TEPAT_UNSUBSCRIBE_LINK_DAYS.
    clock.advance(timedelta(days=LINK_DAYS + 1).total_seconds())
    problem(await one_click(client, old_link), 410)
    await post_event(client, "inv-2", "ana")
    await deliver(app, rt)
    assert len(smtp.received) == 2
    link, _ = unsubscribe_links(smtp.received[1].mail)

    token = link.rsplit("/", 1)[1]
    forged = f"{link[: -len(token)]}{token[:-2]}{'AA' if token[-2:] != 'AA' else 'BB'}"
    problem(await one_click(client, forged), 403)
    prefs = await ok(await client.get("/v1/users/ana/preferences", headers=ADMIN))
    assert "custom.email" not in prefs.json()["categories"]

    done = await one_click(client, link)
    assert done.is_success, done.text
    prefs = await ok(await client.get("/v1/users/ana/preferences", headers=ADMIN))
    assert prefs.json()["categories"]["custom.email"] is False
    assert prefs.json()["categories"]["custom"] is True

    await post_event(client, "inv-3", "ana")
    await deliver(app, rt)
    got = await event_status(client, "inv-3")
    assert got["channels"]["email"]["skipped"] == {"opted_out": 1}
    assert got["channels"]["sms"]["by_status"] == {"sent": 1}
    assert len(smtp.received) == 2
    assert len(twilio.sandbox.received()) == 3


async def test_repeating_the_event_alone_or_twenty_at_once_sends_nothing_new(
    client: httpx.AsyncClient,
    app: FastAPI,
    rt: Runtime,
    smtp: SmtpServer,
    twilio: RunningTwilioSandbox,
) -> None:
    await user(client, "ana", ANA_EMAIL, ANA_PHONE)
    await template(client, "email", EMAIL_V1)
    await template(client, "sms", SMS_V1)
    await post_event(client, "inv-1", "ana")
    await deliver(app, rt)
    assert (len(smtp.received), len(twilio.sandbox.received())) == (1, 1)
    before = await event_status(client, "inv-1")

    await post_event(client, "inv-1", "ana")
    body = event_body("inv-1", "ana")
    repeats = await asyncio.gather(
        *(client.post("/v1/events", json=body, headers=ADMIN) for _ in range(20))
    )
    assert {r.status_code for r in repeats} == {202}
    await deliver(app, rt)

    assert (len(smtp.received), len(twilio.sandbox.received())) == (1, 1)
    assert len(await messages(client, "ana")) == 2
    after = await event_status(client, "inv-1")
    assert after["updated_at"] == before["updated_at"]
    assert after == before
