"""TwilioSmsChannel against the Twilio sandbox over real HTTP, and the sandbox's own wire.

Status callbacks land in a form receiver; their ``X-Twilio-Signature`` is checked with a
HMAC-SHA1 written here from Twilio's documented algorithm, not with the module under test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tepat.adapters.twilio_sms import TwilioSmsChannel, status_callback_url
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.models import Message
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Refused, Withheld
from tepat.ports.try_again import TryAgain
from tepat.sandbox.faults import AfterAccept
from tepat.sandbox.server import RunningTwilioSandbox, running_sandbox
from tepat.sandbox.twilio import (
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    CallbackOrder,
    TwilioSandbox,
)
from tepat.sandbox.twilio_wire import NumberScript
from tepat.wiring import build_sms_channel
from tests.support.form_receiver import FormReceiver, Post, running_receiver
from tests.support.http_trace import BODY_CUT_SHORT, BODY_SENT, trace_then_raise
from tests.support.messages import make_message
from tests.support.waiting import eventually

FROM = "+14155550100"
ALICE = "+447911123456"  # valid mobile numbers (libphonenumber), used in examples
BOB = "+14155552671"
MESSAGES = f"/2010-04-01/Accounts/{DEFAULT_ACCOUNT_SID}/Messages.json"


def independent_signature(token: str, url: str, params: list[tuple[str, str]]) -> str:
    """twilio.com/docs/usage/webhooks/webhooks-security: the full URL, then each POST
    parameter's name and value, sorted by name; HMAC-SHA1 keyed by the auth token; base64."""
    data = url
    for name, value in sorted(params, key=lambda p: (p[0], p[1])):
        data += name + value
    mac = hmac.new(token.encode("utf-8"), data.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


def sms(message_id: str, body: str = "Invoice 8841 is overdue.") -> Message:
    return make_message(
        f"d-{message_id}",
        id=message_id,
        category="billing",
        label="invoice.overdue",
        title="Invoice overdue",
        body=body,
        scheduled_at=datetime(2027, 3, 1, 9, tzinfo=UTC),
        channel="sms",
    )


def sms_channel(base_url: str, clock: FakeClock, **options: Any) -> TwilioSmsChannel:
    """A channel on the sandbox's default account, from ``FROM``, at a rate the FakeClock
    never has to move for; ``options`` override any of these."""
    defaults: dict[str, Any] = {"auth_token": DEFAULT_AUTH_TOKEN, "from_number": FROM, "rate": 1e9}
    return TwilioSmsChannel(
        account_sid=DEFAULT_ACCOUNT_SID, clock=clock, base_url=base_url, **(defaults | options)
    )


async def send_once(ch: TwilioSmsChannel) -> ChannelOutcome:
    """One SMS to ``ALICE`` through ``ch``, closed after."""
    try:
        [outcome] = await ch.send([Outgoing(sms("m-1"), ALICE)])
    finally:
        await ch.close()
    assert not isinstance(outcome, Withheld)  # nothing here stops it being sent
    return outcome


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2027, 3, 1, 9, tzinfo=UTC))


@pytest.fixture
def sandbox(clock: FakeClock) -> TwilioSandbox:
    return TwilioSandbox(clock=clock)


@pytest.fixture
def server(sandbox: TwilioSandbox) -> Iterator[RunningTwilioSandbox]:
    with running_sandbox(sandbox) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[FormReceiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
async def channel(
    server: RunningTwilioSandbox, receiver: FormReceiver, clock: FakeClock
) -> AsyncIterator[TwilioSmsChannel]:
    ch = sms_channel(server.base_url, clock, public_url=receiver.base_url)
    yield ch
    await ch.close()


async def test_accepted_then_signed_callbacks_queued_sent_delivered(
    channel: TwilioSmsChannel, sandbox: TwilioSandbox, receiver: FormReceiver
) -> None:
    [outcome] = await channel.send([Outgoing(sms("m-1"), ALICE)])
    assert isinstance(outcome, Accepted)
    [got] = sandbox.received()
    assert outcome.provider_id == got["sid"] and got["sid"].startswith("SM")
    assert len(got["sid"]) == 34
    assert (got["to"], got["from"], got["body"]) == (ALICE, FROM, "Invoice 8841 is overdue.")
    assert got["status_callback"] == f"{receiver.base_url}/v1/providers/twilio/status?m=m-1"
    assert (got["num_segments"], got["encoding"]) == (1, "GSM-7")

    await eventually(lambda: len(receiver.received()) == 3, what="three callbacks")
    posts = receiver.received()
    assert [p.param("MessageStatus") for p in posts] == ["queued", "sent", "delivered"]
    for post in posts:
        assert post.url == got["status_callback"]
        assert post.param("MessageSid") == got["sid"] == post.param("SmsSid")
        assert (post.param("To"), post.param("From")) == (ALICE, FROM)
        assert post.param("AccountSid") == DEFAULT_ACCOUNT_SID
        assert post.headers["x-twilio-signature"] == independent_signature(
            DEFAULT_AUTH_TOKEN, post.url, post.params
        )
        assert post.param("ErrorCode") is None
    # Counted once the receiver has answered, just after it recorded the post.
    await eventually(lambda: sandbox.stats()["callbacks_posted"] == 3, what="the count")
    assert [c["http_status"] for c in sandbox.callbacks()] == [200, 200, 200]


async def test_undelivered_and_failed_carry_an_error_code(
    channel: TwilioSmsChannel, sandbox: TwilioSandbox, receiver: FormReceiver
) -> None:
    sandbox.script_number(ALICE, NumberScript(status="undelivered", error_code=30003))
    sandbox.script_number(BOB, NumberScript(status="failed", error_code=30008))
    outcomes = await channel.send([Outgoing(sms("m-a"), ALICE), Outgoing(sms("m-b"), BOB)])
    assert all(isinstance(o, Accepted) for o in outcomes)
    await eventually(lambda: len(receiver.received()) == 5, what="five callbacks")
    by_message: dict[str, list[Post]] = {}
    for post in receiver.received():
        by_message.setdefault(post.url.rsplit("=", 1)[1], []).append(post)
    assert [p.param("MessageStatus") for p in by_message["m-a"]] == [
        "queued",
        "sent",
        "undelivered",
    ]
    assert by_message["m-a"][-1].param("ErrorCode") == "30003"
    assert [p.param("MessageStatus") for p in by_message["m-b"]] == ["queued", "failed"]
    assert by_message["m-b"][-1].param("ErrorCode") == "30008"


async def test_callbacks_reversed_or_duplicated_on_request(
    channel: TwilioSmsChannel, sandbox: TwilioSandbox, receiver: FormReceiver
) -> None:
    sandbox.set_callbacks(order=CallbackOrder.REVERSED)
    await channel.send([Outgoing(sms("m-r"), ALICE)])
    await eventually(lambda: len(receiver.received()) == 3, what="reversed callbacks")
    assert [p.param("MessageStatus") for p in receiver.received()] == [
        "delivered",
        "sent",
        "queued",
    ]
    sandbox.set_callbacks(order=CallbackOrder.DUPLICATED)
    await channel.send([Outgoing(sms("m-d"), BOB)])
    await eventually(lambda: len(receiver.received()) == 9, what="duplicated callbacks")
    statuses = [p.param("MessageStatus") for p in receiver.received()[3:]]
    assert statuses == ["queued", "queued", "sent", "sent", "delivered", "delivered"]


async def test_callbacks_wait_for_their_delay_on_the_clock(
    channel: TwilioSmsChannel, sandbox: TwilioSandbox, receiver: FormReceiver, clock: FakeClock
) -> None:
    sandbox.set_callbacks(delay_seconds=5)
    await channel.send([Outgoing(sms("m-1"), ALICE)])
    assert sandbox.pending_callbacks() == 3
    clock.advance(5)
    await eventually(lambda: len(receiver.received()) == 1, what="the queued callback")
    assert sandbox.pending_callbacks() == 2
    clock.advance(10)
    await eventually(lambda: len(receiver.received()) == 3, what="the rest")


@pytest.mark.parametrize(
    ("to", "script", "reason", "suppress"),
    [
        ("+1555", None, "twilio_21211", "invalid"),
        ("07911123456", None, "twilio_21211", "invalid"),  # not E.164
        (ALICE, NumberScript(api_error=21211), "twilio_21211", "invalid"),
        (ALICE, NumberScript(api_error=21614), "twilio_21614", "invalid"),
        (ALICE, NumberScript(api_error=21610), "twilio_21610", "stop"),
        (ALICE, NumberScript(api_error=21408), "twilio_21408", None),
    ],
)
async def test_refusals_are_typed(
    channel: TwilioSmsChannel,
    sandbox: TwilioSandbox,
    to: str,
    script: NumberScript | None,
    reason: str,
    suppress: str | None,
) -> None:
    if script is not None:
        sandbox.script_number(to, script)
    [outcome] = await channel.send([Outgoing(sms("m-1"), to)])
    assert outcome == Refused(reason, suppress=suppress)
    assert sandbox.received() == []


async def test_a_stop_reply_makes_the_number_unsubscribed(
    server: RunningTwilioSandbox,
    channel: TwilioSmsChannel,
    sandbox: TwilioSandbox,
    receiver: FormReceiver,
) -> None:
    url = f"{receiver.base_url}/v1/providers/twilio/inbound"
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        answer = await http.post(
            "/_sandbox/inbound", json={"url": url, "from": ALICE, "body": "stop"}
        )
    assert answer.json() == {"http_status": 200}
    [post] = receiver.received()
    assert (post.param("From"), post.param("Body"), post.param("OptOutType")) == (
        ALICE,
        "stop",
        "STOP",
    )
    assert post.headers["x-twilio-signature"] == independent_signature(
        DEFAULT_AUTH_TOKEN, url, post.params
    )
    [outcome] = await channel.send([Outgoing(sms("m-1"), ALICE)])
    assert outcome == Refused("twilio_21610", suppress="stop")
    await sandbox.inbound(url, ALICE, "START")
    [outcome] = await channel.send([Outgoing(sms("m-2"), ALICE)])
    assert isinstance(outcome, Accepted)


async def test_too_many_segments_is_refused_without_a_request(
    channel: TwilioSmsChannel, sandbox: TwilioSandbox
) -> None:
    outcomes = await channel.send(
        [
            Outgoing(sms("m-long", "a" * 460), ALICE),  # 4 GSM-7 segments
            Outgoing(sms("m-ucs", "ж" * 202), ALICE),  # 4 UCS-2 segments
            Outgoing(sms("m-empty", ""), ALICE),
            Outgoing(sms("m-ok", "a" * 459), BOB),  # 3 segments: the limit
        ]
    )
    assert outcomes[:3] == [
        Refused("too_many_segments"),
        Refused("too_many_segments"),
        Refused("empty_body"),
    ]
    assert isinstance(outcomes[3], Accepted)
    assert [r["to"] for r in sandbox.received()] == [BOB]
    assert sandbox.received()[0]["num_segments"] == 3
    assert sandbox.stats()["requests"] == 1


async def test_throttled_by_twilio(channel: TwilioSmsChannel, sandbox: TwilioSandbox) -> None:
    sandbox.set_rate_limit(2)  # requests/s on the sandbox's (fake, unmoving) clock
    outcomes = await channel.send([Outgoing(sms(f"m-{i}"), ALICE) for i in range(3)])
    accepted = [o for o in outcomes if isinstance(o, Accepted)]
    throttled = [o for o in outcomes if isinstance(o, TryAgain)]
    assert len(accepted) == 2 and len(throttled) == 1
    assert throttled[0].throttled and not throttled[0].maybe_sent
    assert throttled[0].reason.startswith("twilio_20429")
    sandbox.set_rate_limit(None)
    sandbox.fail_next(1, 429)
    [outcome] = await channel.send([Outgoing(sms("m-x"), ALICE)])
    assert isinstance(outcome, TryAgain) and outcome.throttled


async def test_503_was_not_sent_but_a_500_or_a_lost_answer_may_have_been(
    server: RunningTwilioSandbox, sandbox: TwilioSandbox, clock: FakeClock
) -> None:
    ch = sms_channel(server.base_url, clock, timeout=0.5)
    try:
        sandbox.fail_next(1, 503)
        [outcome] = await ch.send([Outgoing(sms("m-1"), ALICE)])
        # Twilio's 20503: retry with back-off; not left to the category's maybe-sent policy.
        assert isinstance(outcome, TryAgain) and not outcome.maybe_sent and not outcome.throttled
        assert sandbox.received() == []  # refused before accepting: it was not sent

        # Twilio's 20500: retrying a send after a 500 may deliver a second SMS.
        sandbox.fail_next(1, 500)
        [outcome] = await ch.send([Outgoing(sms("m-0"), ALICE)])
        assert isinstance(outcome, TryAgain) and outcome.maybe_sent and not outcome.server_error

        sandbox.fail_after_accept(1, AfterAccept.STALL)
        [outcome] = await ch.send([Outgoing(sms("m-2"), ALICE)])
        assert isinstance(outcome, TryAgain) and outcome.maybe_sent
        assert "timeout" in outcome.reason
        assert len(sandbox.received()) == 1  # it was: a retry would send a copy

        sandbox.fail_after_accept(1, AfterAccept.ERROR, 502)
        [outcome] = await ch.send([Outgoing(sms("m-3"), ALICE)])
        assert isinstance(outcome, TryAgain) and outcome.maybe_sent
        assert len(sandbox.received()) == 2
    finally:
        await ch.close()


async def test_connection_refused_was_not_sent(clock: FakeClock) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    outcome = await send_once(sms_channel(f"http://127.0.0.1:{port}", clock))
    assert isinstance(outcome, TryAgain) and not outcome.maybe_sent


@pytest.mark.parametrize(
    ("events", "maybe_sent"),
    [
        pytest.param(
            BODY_CUT_SHORT,
            False,
            id="body_cut_short_was_not_sent",
        ),
        pytest.param(
            BODY_SENT,
            True,
            id="body_sent_then_the_answer_lost_may_have_been",
        ),
    ],
)
async def test_a_lost_connection_was_sent_only_if_the_body_went_out_whole(
    clock: FakeClock, events: list[str], maybe_sent: bool
) -> None:
    """httpcore reports a write error as the read error that follows it
    (tepat/adapters/expo_outcomes.py ``SendProgress``): only how far the request got tells
    whether Twilio could have created the message."""
    error = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    ch = sms_channel("http://twilio.test", clock, transport=trace_then_raise(events, error))
    outcome = await send_once(ch)
    assert isinstance(outcome, TryAgain) and outcome.maybe_sent is maybe_sent
    assert "talking to Twilio" in outcome.reason and "Server disconnected" in outcome.reason


async def test_bad_credentials_are_retried_not_failed(
    server: RunningTwilioSandbox, sandbox: TwilioSandbox, clock: FakeClock
) -> None:
    outcome = await send_once(sms_channel(server.base_url, clock, auth_token="f" * 32))
    assert isinstance(outcome, TryAgain) and not outcome.maybe_sent
    assert outcome.reason.startswith("twilio_20003")
    assert sandbox.stats()["unauthorized"] == 1


async def test_the_adapter_keeps_to_its_rate_on_the_clock(
    server: RunningTwilioSandbox, sandbox: TwilioSandbox, clock: FakeClock
) -> None:
    ch = sms_channel(server.base_url, clock, rate=10, max_connections=30)
    try:
        import asyncio

        task = asyncio.ensure_future(ch.send([Outgoing(sms(f"m-{i}"), ALICE) for i in range(25)]))
        await eventually(lambda: len(sandbox.received()) == 10, what="the first second's 10")
        await eventually(lambda: clock.sleepers > 0, what="the rest waiting on the clock")
        assert len(sandbox.received()) == 10
        clock.advance(1)
        await eventually(lambda: len(sandbox.received()) == 20, what="the second second's 10")
        await eventually(lambda: clock.sleepers > 0, what="the last 5 waiting")
        assert len(sandbox.received()) == 20
        clock.advance(1)
        outcomes = await task
        assert all(isinstance(o, Accepted) for o in outcomes)
        assert len({r["sid"] for r in sandbox.received()}) == 25
    finally:
        await ch.close()


async def test_messaging_service_instead_of_a_from_number(
    server: RunningTwilioSandbox, sandbox: TwilioSandbox, clock: FakeClock
) -> None:
    service = "MG" + "ab" * 16
    outcome = await send_once(
        sms_channel(server.base_url, clock, messaging_service_sid=service, from_number=None)
    )
    assert isinstance(outcome, Accepted)
    [got] = sandbox.received()
    assert (got["messaging_service_sid"], got["from"], got["status_callback"]) == (
        service,
        None,
        None,
    )


# ---- the sandbox's wire, as a client other than ours sees it ----


async def test_sandbox_wire_shapes(server: RunningTwilioSandbox) -> None:
    auth = (DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN)
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        created = await http.post(
            MESSAGES, auth=auth, data={"To": ALICE, "From": FROM, "Body": "Olá 👋"}
        )
        assert created.status_code == 201
        body = created.json()
        assert body["status"] == "queued" and body["direction"] == "outbound-api"
        assert (body["num_segments"], body["account_sid"]) == ("1", DEFAULT_ACCOUNT_SID)
        assert (
            body["uri"] == f"/2010-04-01/Accounts/{DEFAULT_ACCOUNT_SID}/Messages/{body['sid']}.json"
        )
        assert body["date_created"].endswith("+0000")

        for data, code in [
            ({"From": FROM, "Body": "x"}, 21604),
            ({"To": ALICE, "Body": "x"}, 21603),
            ({"To": ALICE, "From": FROM}, 21602),
            ({"To": ALICE, "From": FROM, "Body": "x" * 1601}, 21617),
            ({"To": ALICE, "From": "+1", "Body": "x"}, 21212),
            ({"To": "+1555", "From": FROM, "Body": "x"}, 21211),
        ]:
            refused = await http.post(MESSAGES, auth=auth, data=data)
            assert refused.status_code == 400, data
            error = refused.json()
            assert set(error) == {"code", "message", "more_info", "status"}
            assert (error["code"], error["status"]) == (code, 400)
            assert error["more_info"] == f"https://www.twilio.com/docs/errors/{code}"
        assert (
            "+1555"
            in (
                await http.post(
                    MESSAGES, auth=auth, data={"To": "+1555", "From": FROM, "Body": "x"}
                )
            ).json()["message"]
        )

        form = {"To": ALICE, "From": FROM, "Body": "x"}
        unauthenticated = [
            await http.post(MESSAGES, data=form),
            await http.post(MESSAGES, auth=(DEFAULT_ACCOUNT_SID, "wrong"), data=form),
            await http.post(MESSAGES, auth=("AC" + "0" * 32, DEFAULT_AUTH_TOKEN), data=form),
        ]
        for denied in unauthenticated:
            assert denied.status_code == 401
            assert denied.json()["code"] == 20003
            assert denied.headers["www-authenticate"].startswith("Basic")
        other = MESSAGES.replace(DEFAULT_ACCOUNT_SID, "AC" + "0" * 32)
        denied = await http.post(other, auth=auth, data={"To": ALICE, "From": FROM, "Body": "x"})
        assert denied.status_code == 401

        script = await http.post(
            "/_sandbox/script",
            json={"numbers": {BOB: {"api_error": 21610}}, "next_429": 1, "rate_limit": 5},
        )
        assert script.json()["numbers"][BOB]["api_error"] == 21610
        throttled = await http.post(
            MESSAGES, auth=auth, data={"To": ALICE, "From": FROM, "Body": "x"}
        )
        assert throttled.status_code == 429 and throttled.json()["code"] == 20429
        refused = await http.post(MESSAGES, auth=auth, data={"To": BOB, "From": FROM, "Body": "x"})
        assert refused.json()["code"] == 21610
        bad = await http.post("/_sandbox/script", json={"numbers": {BOB: {"api_error": 1}}})
        assert bad.status_code == 400
        received = (await http.get("/_sandbox/received")).json()["received"]
        assert [r["body"] for r in received] == ["Olá 👋"]
        assert received[0]["encoding"] == "UCS-2"
        assert (await http.delete("/_sandbox/received")).status_code == 204
        assert (await http.get("/_sandbox/received")).json() == {"received": []}


def test_build_sms_channel_needs_credentials(clock: FakeClock) -> None:
    assert build_sms_channel(Settings(), clock) is None
    settings = Settings(
        twilio_account_sid=DEFAULT_ACCOUNT_SID,
        twilio_auth_token=SecretStr(DEFAULT_AUTH_TOKEN),
        twilio_from=FROM,
        twilio_rate=7,
        sms_max_segments=2,
        public_url="https://tepat.example.com/",
    )
    channel = build_sms_channel(settings, clock)
    assert isinstance(channel, TwilioSmsChannel)
    assert channel.name == "sms" and channel.max_segments == 2 and channel.limiter.rate == 7
    assert channel.form(Outgoing(sms("m/1 x"), ALICE))["StatusCallback"] == (
        "https://tepat.example.com/v1/providers/twilio/status?m=m%2F1%20x"
    )
    assert status_callback_url("https://h/", "m") == "https://h/v1/providers/twilio/status?m=m"
