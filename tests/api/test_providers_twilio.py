"""Twilio calls in: signed status callbacks move an SMS forward only, once; signed STOP and
START replies suppress and lift the number. Both stores.

Signatures are computed here with an HMAC-SHA1 written from Twilio's documented algorithm
(twilio.com/docs/usage/webhooks/webhooks-security), not with the module under test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from pydantic import SecretStr

from api.app import create_app
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.models import Message, MessageStatus
from tepat.ports.repositories.messages import StatusChange
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN_KEY, START, STORES, runtime_on
from tests.support.fake_push import FakePush

SID = "AC" + "0123456789abcdef" * 2
TOKEN = "f00d" * 8
PHONE = "+14155552671"
BASE = "http://tepat.test"
STATUS = "/v1/providers/twilio/status"
INBOUND = "/v1/providers/twilio/inbound"


def independent_signature(token: str, url: str, params: list[tuple[str, str]]) -> str:
    data = url
    for name, value in sorted(params):
        data += name + value
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def settings(tmp_path: Path, **extra: object) -> Settings:
    values: dict[str, object] = {
        "database_url": f"sqlite:///{tmp_path}/t.db",
        "broker_url": "embedded://",
        "admin_api_key": SecretStr(ADMIN_KEY),
        "twilio_account_sid": SID,
        "twilio_auth_token": SecretStr(TOKEN),
        "twilio_from": "+14155550100",
    }
    values.update(extra)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(params=STORES)
def store_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def rt(tmp_path: Path, store_name: str, clock: FakeClock) -> AsyncIterator[Runtime]:
    async with runtime_on(
        store_name, tmp_path, clock, FakePush(), "twilio_cb", settings(tmp_path)
    ) as r:
        yield r


@pytest.fixture
async def client(rt: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
        yield c


def a_message(rt: Runtime, message_id: str, channel: str) -> Message:
    return Message(
        id=message_id,
        user_id="u1",
        category="billing",
        label="invoice.overdue",
        title="Invoice overdue",
        body="Invoice 8841 is overdue.",
        scheduled_at=rt.clock.now(),
        timezone="UTC",
        dedup_key=f"d-{message_id}",
        live_key=f"l-{message_id}",
        channel=channel,
    )


async def sent_sms(
    rt: Runtime, message_id: str = "m-1", status: MessageStatus = MessageStatus.SENT
) -> str:
    """An SMS in ``status`` (sending or sent; pending: waiting for a retry after an
    answer that was lost), with a Twilio SID as its ticket."""
    now = rt.clock.now()
    message = a_message(rt, message_id, "sms")
    await rt.store.insert_messages([message])
    assert [m.id for m in await rt.store.claim([message_id], now)] == [message_id]
    sid = "SM" + message_id.encode().hex().ljust(32, "0")[:32]
    if status is MessageStatus.PENDING:
        retry = StatusChange(
            message_id,
            MessageStatus.PENDING,
            last_error="timeout",
            due_at=now + timedelta(minutes=1),
        )
        assert await rt.store.transition_many([retry], now, expect=[MessageStatus.SENDING]) == 1
    if status is MessageStatus.SENT:
        applied = await rt.store.transition_many(
            [StatusChange(message_id, MessageStatus.SENT, ticket_id=sid)],
            now,
            expect=[MessageStatus.SENDING],
        )
        assert applied == 1
    return sid


def callback(sid: str, status: str, **extra: str) -> list[tuple[str, str]]:
    params = [
        ("AccountSid", SID),
        ("ApiVersion", "2010-04-01"),
        ("From", "+14155550100"),
        ("MessageSid", sid),
        ("MessageStatus", status),
        ("SmsSid", sid),
        ("SmsStatus", status),
        ("To", PHONE),
    ]
    return params + list(extra.items())


async def post_signed(
    client: httpx.AsyncClient,
    path: str,
    params: list[tuple[str, str]],
    *,
    signed_url: str | None = None,
    token: str = TOKEN,
    signature: str | None = None,
) -> httpx.Response:
    url = signed_url or f"{BASE}{path}"
    sig = signature if signature is not None else independent_signature(token, url, params)
    return await client.post(
        path,
        content=urlencode(params),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": sig,
        },
    )


async def status_of(rt: Runtime, message_id: str) -> tuple[MessageStatus, str | None]:
    m = await rt.store.get_message(message_id)
    assert m is not None
    return m.status, m.status_reason


async def test_delivered_moves_the_sms_once(rt: Runtime, client: httpx.AsyncClient) -> None:
    sid = await sent_sms(rt)
    path = f"{STATUS}?m=m-1"
    for status in ("queued", "sent"):
        r = await post_signed(client, path, callback(sid, status))
        assert (r.status_code, r.headers["x-tepat-outcome"]) == (200, "no_change")
        assert (await status_of(rt, "m-1"))[0] is MessageStatus.SENT
    # No API key: the signature is the credential.
    r = await post_signed(client, path, callback(sid, "delivered"))
    assert (r.status_code, r.headers["x-tepat-outcome"]) == (200, "applied")
    assert (await status_of(rt, "m-1"))[0] is MessageStatus.DELIVERED
    again = await post_signed(client, path, callback(sid, "delivered"))
    assert (again.status_code, again.headers["x-tepat-outcome"]) == (200, "duplicate")
    assert (await status_of(rt, "m-1"))[0] is MessageStatus.DELIVERED


async def test_older_and_contrary_callbacks_change_nothing(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    sid = await sent_sms(rt)
    path = f"{STATUS}?m=m-1"
    assert (await post_signed(client, path, callback(sid, "delivered"))).status_code == 200
    late = [
        callback(sid, "sent"),
        callback(sid, "queued"),
        callback(sid, "undelivered", ErrorCode="30003"),
        callback(sid, "failed", ErrorCode="30008"),
    ]
    for params in late:
        r = await post_signed(client, path, params)
        assert r.status_code == 200
        assert r.headers["x-tepat-outcome"] in ("no_change", "stale")
    m = await rt.store.get_message("m-1")
    assert m is not None and (m.status, m.status_reason) == (MessageStatus.DELIVERED, None)


async def test_undelivered_fails_with_the_error_code_and_stays_failed(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    sid = await sent_sms(rt)
    path = f"{STATUS}?m=m-1"
    r = await post_signed(client, path, callback(sid, "undelivered", ErrorCode="30003"))
    assert r.headers["x-tepat-outcome"] == "applied"
    assert await status_of(rt, "m-1") == (MessageStatus.FAILED, "twilio_30003")
    r = await post_signed(client, path, callback(sid, "delivered"))
    assert r.headers["x-tepat-outcome"] == "stale"
    assert await status_of(rt, "m-1") == (MessageStatus.FAILED, "twilio_30003")
    # No number suppressed for an unreachable phone (it may come back).
    assert await rt.store.suppressions_for("sms", [PHONE]) == {}


async def test_a_dead_number_is_suppressed(rt: Runtime, client: httpx.AsyncClient) -> None:
    await rt.store.set_contact("u1", "sms", PHONE, True, rt.clock.now())  # the recipient
    sid = await sent_sms(rt)
    r = await post_signed(client, f"{STATUS}?m=m-1", callback(sid, "failed", ErrorCode="30006"))
    assert r.status_code == 200
    assert await status_of(rt, "m-1") == (MessageStatus.FAILED, "twilio_30006")
    suppressed = await rt.store.suppressions_for("sms", [PHONE])
    assert suppressed[PHONE].reason == "invalid" and suppressed[PHONE].source == "twilio"


async def test_a_dead_number_callback_naming_another_number_suppresses_nothing(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    await rt.store.set_contact("u1", "sms", PHONE, True, rt.clock.now())
    sid = await sent_sms(rt)
    params = [(k, "+14155552672" if k == "To" else v) for k, v in callback(sid, "failed")]
    r = await post_signed(client, f"{STATUS}?m=m-1", [*params, ("ErrorCode", "30006")])
    assert r.headers["x-tepat-outcome"] == "applied"
    assert await status_of(rt, "m-1") == (MessageStatus.FAILED, "twilio_30006")
    assert await rt.store.suppressions_for("sms", [PHONE, "+14155552672"]) == {}


async def test_a_signed_delivered_for_a_push_message_changes_nothing(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    """A valid signature names the SMS it is about: a push (or e-mail) message by the
    same id is never moved, pending or sent."""
    sid = await sent_sms(rt)
    push = a_message(rt, "p-1", "push")
    await rt.store.insert_messages([push])
    r = await post_signed(client, f"{STATUS}?m=p-1", callback(sid, "delivered"))
    assert (r.status_code, r.headers["x-tepat-outcome"]) == (200, "unknown_message")
    assert (await status_of(rt, "p-1"))[0] is MessageStatus.PENDING
    # Another SMS's SID for this SMS: not this message's callback either.
    other = await post_signed(client, f"{STATUS}?m=m-1", callback("SM" + "f" * 32, "delivered"))
    assert other.headers["x-tepat-outcome"] == "unknown_message"
    assert (await status_of(rt, "m-1"))[0] is MessageStatus.SENT


async def test_a_callback_that_beats_the_senders_record(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    sid = await sent_sms(rt, status=MessageStatus.SENDING)
    r = await post_signed(client, f"{STATUS}?m=m-1", callback(sid, "delivered"))
    assert r.headers["x-tepat-outcome"] == "applied"
    assert (await status_of(rt, "m-1"))[0] is MessageStatus.DELIVERED
    # The sender's own record comes after and changes nothing (it expects sending/pending).
    late = await rt.store.transition_many(
        [StatusChange("m-1", MessageStatus.SENT, ticket_id=sid)],
        rt.clock.now(),
        expect=[MessageStatus.SENDING, MessageStatus.PENDING],
    )
    assert late == 0


@pytest.mark.parametrize(
    "forge",
    ["missing", "garbage", "other token", "other url", "tampered", "extra field"],
)
async def test_a_bad_signature_is_403_and_changes_nothing(
    rt: Runtime, client: httpx.AsyncClient, forge: str
) -> None:
    sid = await sent_sms(rt)
    path = f"{STATUS}?m=m-1"
    params = callback(sid, "delivered")
    url = f"{BASE}{path}"
    good = independent_signature(TOKEN, url, params)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    body = urlencode(params)
    if forge == "garbage":
        headers["X-Twilio-Signature"] = "not-a-signature"
    elif forge == "other token":
        headers["X-Twilio-Signature"] = independent_signature("0" * 32, url, params)
    elif forge == "other url":
        headers["X-Twilio-Signature"] = independent_signature(
            TOKEN, f"{BASE}{STATUS}?m=m-2", params
        )
    elif forge == "tampered":
        headers["X-Twilio-Signature"] = good
        body = urlencode(callback(sid, "delivered", To="+14155550199"))
    elif forge == "extra field":
        headers["X-Twilio-Signature"] = good
        body = urlencode([*params, ("Extra", "1")])
    r = await client.post(path, content=body, headers=headers)
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["status"] == 403 and "X-Twilio-Signature" in r.json()["detail"]
    assert (await status_of(rt, "m-1"))[0] is MessageStatus.SENT
    # Nothing recorded either: the genuine callback still applies afterwards.
    ok = await post_signed(client, path, params)
    assert ok.headers["x-tepat-outcome"] == "applied"


async def test_unknown_fields_are_ignored_and_unknown_messages_answered(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    sid = await sent_sms(rt)
    params = callback(sid, "delivered", RawDlrDoneDate="2703010900", Whatever="x", ChannelPrefix="")
    r = await post_signed(client, f"{STATUS}?m=m-1", params)
    assert r.headers["x-tepat-outcome"] == "applied"
    gone = await post_signed(client, f"{STATUS}?m=nope", callback("SM" + "9" * 32, "delivered"))
    assert (gone.status_code, gone.headers["x-tepat-outcome"]) == (200, "unknown_message")
    no_id = await post_signed(client, STATUS, callback("SM" + "8" * 32, "delivered"))
    assert (no_id.status_code, no_id.headers["x-tepat-outcome"]) == (200, "unknown_message")


async def test_a_signed_callback_without_a_status_names_the_field(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    params = [("MessageSid", "SM" + "1" * 32), ("AccountSid", SID)]
    r = await post_signed(client, f"{STATUS}?m=m-1", params)
    assert r.status_code == 422
    assert r.json()["errors"] == [{"field": "MessageStatus", "message": "is required"}]


async def test_stop_and_start_replies(rt: Runtime, client: httpx.AsyncClient) -> None:
    def inbound(body: str, sender: str = PHONE) -> list[tuple[str, str]]:
        return [
            ("AccountSid", SID),
            ("Body", body),
            ("From", sender),
            ("MessageSid", "SM" + "2" * 32),
            ("NumMedia", "0"),
            ("To", "+14155550100"),
        ]

    r = await post_signed(client, INBOUND, inbound("Hello"))
    assert (r.status_code, r.headers["x-tepat-outcome"]) == (200, "ignored")
    assert r.headers["content-type"].startswith("text/xml") and "<Response>" in r.text
    assert await rt.store.suppressions_for("sms", [PHONE]) == {}

    forged = await post_signed(client, INBOUND, inbound(" stop "), token="0" * 32)
    assert forged.status_code == 403
    assert await rt.store.suppressions_for("sms", [PHONE]) == {}

    r = await post_signed(client, INBOUND, inbound(" stop "))
    assert r.headers["x-tepat-outcome"] == "stopped"
    got = (await rt.store.suppressions_for("sms", [PHONE]))[PHONE]
    assert (got.reason, got.source) == ("stop", "twilio")

    r = await post_signed(client, INBOUND, inbound("Start"))
    assert r.headers["x-tepat-outcome"] == "started"
    assert await rt.store.suppressions_for("sms", [PHONE]) == {}

    for word in ("STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"):
        await post_signed(client, INBOUND, inbound(word))
        assert PHONE in await rt.store.suppressions_for("sms", [PHONE])
        await post_signed(client, INBOUND, inbound("UNSTOP"))
        assert await rt.store.suppressions_for("sms", [PHONE]) == {}

    # START lifts a STOP, not an invalid number.
    await rt.store.add_suppression("sms", PHONE, "invalid", rt.clock.now(), source="twilio")  # type: ignore[arg-type]
    await post_signed(client, INBOUND, inbound("YES"))
    assert PHONE in await rt.store.suppressions_for("sms", [PHONE])
    bad = await post_signed(client, INBOUND, inbound("STOP", sender="not a number"))
    assert (bad.status_code, bad.headers["x-tepat-outcome"]) == (200, "ignored")


async def test_public_url_is_the_url_twilio_signed(
    tmp_path: Path, store_name: str, clock: FakeClock
) -> None:
    public = "https://sms.example.com/tepat"
    s = settings(tmp_path, public_url=public, unsubscribe_secret=SecretStr("u" * 32))
    async with runtime_on(store_name, tmp_path, clock, FakePush(), "twilio_pub", s) as rt:
        sid = await sent_sms(rt)
        transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
            path = f"{STATUS}?m=m-1"
            params = callback(sid, "delivered")
            internal = await post_signed(c, path, params)  # signed for http://tepat.test
            assert internal.status_code == 403
            r = await post_signed(c, path, params, signed_url=f"{public}{path}")
            assert r.headers["x-tepat-outcome"] == "applied"


async def test_without_twilio_configured_callbacks_are_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    s = settings(tmp_path, twilio_account_sid=None, twilio_auth_token=None, twilio_from=None)
    async with runtime_on("sqlite", tmp_path, clock, FakePush(), "unused", s) as rt:
        transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
            r = await post_signed(c, f"{STATUS}?m=m-1", callback("SM" + "1" * 32, "delivered"))
            assert r.status_code == 403
            assert "not configured" in r.json()["detail"]


async def test_delivered_wins_over_a_retry_waiting_failed_does_not(
    rt: Runtime, client: httpx.AsyncClient
) -> None:
    """The answer to the first attempt was lost (a retry is waiting), but Twilio sent it."""
    sid = await sent_sms(rt, "m-1", status=MessageStatus.PENDING)
    r = await post_signed(client, f"{STATUS}?m=m-1", callback(sid, "delivered"))
    assert r.headers["x-tepat-outcome"] == "applied"
    assert (await status_of(rt, "m-1"))[0] is MessageStatus.DELIVERED
    # The waiting retry finds nothing to claim: no second SMS.
    assert await rt.store.claim(["m-1"], rt.clock.now() + timedelta(minutes=2)) == []
    # A failure of the first attempt leaves the retry to try again.
    sid = await sent_sms(rt, "m-2", status=MessageStatus.PENDING)
    r = await post_signed(client, f"{STATUS}?m=m-2", callback(sid, "failed", ErrorCode="30008"))
    assert r.headers["x-tepat-outcome"] == "stale"
    assert (await status_of(rt, "m-2"))[0] is MessageStatus.PENDING
