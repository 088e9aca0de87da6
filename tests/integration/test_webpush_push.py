"""The Web Push adapter against the Web Push sandbox: what the browser would decrypt, the
VAPID token's shape, and how each answer of the push service maps."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tepat.adapters.apns_auth import read_signing_key
from tepat.adapters.webpush_push import Vapid, WebPushProvider, public_key_bytes
from tepat.clock import FakeClock
from tepat.domain.b64url import b64url
from tepat.ports.push import PushRequest, Rejected, TicketError, TicketOk, Tickets
from tepat.ports.try_again import TryAgain
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.webpush import WebPushSandbox

SUBJECT = "mailto:ops@tepat.test"


@dataclass
class WebPush:
    sandbox: WebPushSandbox
    provider: WebPushProvider
    clock: FakeClock
    key_file: Path
    base_url: str


@pytest.fixture
async def webpush(tmp_path: Path) -> AsyncIterator[WebPush]:
    clock = FakeClock()
    sandbox = WebPushSandbox(clock=clock)
    key_file = tmp_path / "vapid.pem"
    key_file.write_text(sandbox.vapid_key())
    vapid = Vapid(read_signing_key(key_file), SUBJECT, clock)
    with running_sandbox(sandbox) as server:
        async with WebPushProvider(vapid, clock=clock, base_url=server.base_url) as provider:
            yield WebPush(sandbox, provider, clock, key_file, server.base_url)


def push(subscription: str, **fields: object) -> PushRequest:
    return PushRequest("m-1", subscription, "Tepat", "Now", **fields)  # type: ignore[arg-type]


def tickets(result: object) -> list[TicketOk | TicketError | TryAgain]:
    assert isinstance(result, Tickets), result
    return result.outcomes


async def test_the_payload_decrypts_to_the_notification(webpush: WebPush) -> None:
    first, second = webpush.sandbox.subscribe("a"), webpush.sandbox.subscribe("b")
    request = push(first, data={"order": 7}, priority="normal", ttl_seconds=3600)
    # A message id that cannot be a Topic (over 32 characters) goes without one.
    other = PushRequest("m" * 33, second, "Tepat", "Now")
    got = tickets(await webpush.provider.send([request, other]))
    assert all(isinstance(t, TicketOk) and t.ticket_id.startswith("/message/") for t in got)
    a, b = sorted(webpush.sandbox.received(), key=lambda r: r["subscription"])
    assert a["payload"] == {"title": "Tepat", "body": "Now", "data": {"order": 7}}
    # The message id is the Topic: a copy sent again replaces the first, not beside it.
    assert a["headers"] == {"ttl": "3600", "urgency": "normal", "topic": "m-1"}
    assert b["headers"]["urgency"] == "high" and int(b["headers"]["ttl"]) > 0
    assert "topic" not in b["headers"]


async def test_the_vapid_token_names_the_endpoints_origin(webpush: WebPush) -> None:
    header = webpush.provider.vapid.header("https://push.example.net")
    scheme, _, params = header.partition(" ")
    values = dict(p.strip().partition("=")[::2] for p in params.split(","))
    key = read_signing_key(webpush.key_file)
    assert scheme == "vapid" and values["k"] == b64url(public_key_bytes(key.public_key()))
    claims = jwt.decode(
        values["t"],
        key.public_key(),
        algorithms=["ES256"],
        audience="https://push.example.net",
        options={"verify_exp": False},
    )
    lifetime = claims["exp"] - webpush.clock.now().timestamp()
    assert claims["sub"] == SUBJECT and 0 < lifetime <= 24 * 3600
    # One token per origin while it is young; a new one before it nears its end.
    assert webpush.provider.vapid.header("https://push.example.net") == header
    webpush.clock.advance(7 * 3600)
    assert webpush.provider.vapid.header("https://push.example.net") != header


@pytest.mark.parametrize("problem", ["untrusted key", "expired", "too long", "no subject"])
async def test_a_vapid_token_the_push_service_refuses_is_rejected(
    webpush: WebPush, problem: str
) -> None:
    # The provider's own clock stands apart from the sandbox's, to age its tokens.
    clock = FakeClock(webpush.clock.now())
    key = read_signing_key(webpush.key_file)
    if problem == "untrusted key":
        key = ec.generate_private_key(ec.SECP256R1())
    vapid = Vapid(key, "" if problem == "no subject" else SUBJECT, clock)
    if problem == "too long":
        clock.advance(timedelta(hours=13).total_seconds())  # exp 25 h ahead of the service
    async with WebPushProvider(vapid, clock=clock, base_url=webpush.base_url) as provider:
        vapid.header(webpush.sandbox.origin)
        if problem == "expired":
            webpush.clock.advance(13 * 3600)
        result = await provider.send([push(webpush.sandbox.subscribe())])
    assert isinstance(result, Rejected) and result.reason.startswith("401"), result
    assert webpush.sandbox.received() == []


@pytest.mark.parametrize(
    ("status", "code", "deactivate"),
    [(410, "Gone", True), (404, "NotFound", True), (413, "PayloadTooLarge", False)],
)
async def test_a_refusal_is_permanent_and_deactivates_only_a_dead_subscription(
    webpush: WebPush, status: int, code: str, deactivate: bool
) -> None:
    live, dead = webpush.sandbox.subscribe("live"), webpush.sandbox.subscribe("dead")
    webpush.sandbox.script_subscription("dead", status)
    got = tickets(await webpush.provider.send([push(live), push(dead)]))
    assert isinstance(got[0], TicketOk) and isinstance(got[1], TicketError)
    assert got[1] == TicketError(code, got[1].message, permanent=True, deactivate_device=deactivate)


async def test_an_unknown_subscription_is_not_found(webpush: WebPush) -> None:
    gone = json.loads(webpush.sandbox.subscribe())
    gone["endpoint"] = f"{webpush.sandbox.origin}/push/never-made"
    (got,) = tickets(await webpush.provider.send([push(json.dumps(gone))]))
    assert isinstance(got, TicketError) and got.deactivate_device and got.code == "NotFound"


async def test_a_big_payload_is_refused_without_a_request(webpush: WebPush) -> None:
    big = push(webpush.sandbox.subscribe(), data={"blob": "x" * 4000})
    (too_big,) = tickets(await webpush.provider.send([big]))
    assert isinstance(too_big, TicketError)
    assert (too_big.code, too_big.permanent, too_big.deactivate_device) == (
        "PayloadTooLarge",
        True,
        False,
    )
    assert webpush.sandbox.stats()["requests"] == 0
    # The largest payload allowed fits the push service's 4096 bytes once encrypted.
    fits = push(webpush.sandbox.subscribe(), data={"blob": "x" * 3940})
    assert isinstance(tickets(await webpush.provider.send([fits]))[0], TicketOk)


async def test_too_many_requests_is_tried_again_after_retry_after(webpush: WebPush) -> None:
    webpush.sandbox.fail_next(1, 429, retry_after=30)
    result = await webpush.provider.send([push(webpush.sandbox.subscribe())])
    assert isinstance(result, TryAgain), result
    assert result.throttled and not result.maybe_sent and result.retry_after == 30.0


async def test_server_errors_are_tried_again(webpush: WebPush) -> None:
    webpush.sandbox.fail_next(1, 502, retry_after=None)
    result = await webpush.provider.send([push(webpush.sandbox.subscribe())])
    assert isinstance(result, TryAgain), result
    assert result.server_error and not result.maybe_sent


async def test_a_bad_request_is_a_permanent_refusal(webpush: WebPush) -> None:
    webpush.sandbox.fail_next(1, 400, retry_after=None)
    (got,) = tickets(await webpush.provider.send([push(webpush.sandbox.subscribe())]))
    assert isinstance(got, TicketError) and got.permanent and not got.deactivate_device


async def test_the_sandbox_refuses_a_push_without_ttl_or_encryption(webpush: WebPush) -> None:
    header = webpush.provider.vapid.header(webpush.sandbox.origin)
    sid = json.loads(webpush.sandbox.subscribe())["endpoint"].rsplit("/", 1)[1]
    async with httpx.AsyncClient(base_url=webpush.base_url) as client:
        no_ttl = await client.post(
            f"/push/{sid}",
            content=b"x",
            headers={"authorization": header, "content-encoding": "aes128gcm"},
        )
        garbled = await client.post(
            f"/push/{sid}",
            content=b"x" * 100,
            headers={"authorization": header, "content-encoding": "aes128gcm", "ttl": "60"},
        )
    assert (no_ttl.status_code, garbled.status_code) == (400, 400)
    assert webpush.sandbox.received() == []


async def test_a_5xx_after_the_service_took_the_push_is_tried_again(webpush: WebPush) -> None:
    webpush.sandbox.fail_after_accept(1, "error", 502)
    result = await webpush.provider.send([push(webpush.sandbox.subscribe())])
    assert isinstance(result, TryAgain), result
    assert result.server_error
    (received,) = webpush.sandbox.received()
    assert received["answer_lost"] == "error"


async def test_the_sandbox_is_driven_over_http_too(webpush: WebPush) -> None:
    async with httpx.AsyncClient(base_url=webpush.base_url) as client:
        subscription = (await client.post("/_sandbox/subscribe")).text
        sid = json.loads(subscription)["endpoint"].rsplit("/", 1)[1]
        script = {"subscriptions": {sid: {"status": 410}}, "fail_next": {"count": 1}}
        described = (await client.post("/_sandbox/script", json=script)).json()
    assert described["subscriptions"] == {sid: {"status": 410}}
    throttled = await webpush.provider.send([push(subscription)])
    assert isinstance(throttled, TryAgain) and throttled.retry_after == 1.0
    (gone,) = tickets(await webpush.provider.send([push(subscription)]))
    assert isinstance(gone, TicketError) and gone.code == "Gone" and gone.deactivate_device


async def test_an_endpoint_on_a_private_address_is_never_sent_to(
    webpush: WebPush, tmp_path: Path
) -> None:
    """A subscription's endpoint is the user's to name: the provider the settings build
    (no TEPAT_WEBPUSH_URL) checks each connection as a webhook's, refuses a private
    address for good and deactivates the device; nothing reaches the service there."""
    from tepat.config import Settings
    from tepat.wiring import build_webpush_provider

    subscription = json.loads(webpush.sandbox.subscribe("inside"))
    port = httpx.URL(webpush.base_url).port
    subscription["endpoint"] = f"https://127.0.0.1:{port}/push/inside"
    settings = Settings(
        webpush_vapid_private_key_file=str(webpush.key_file), webpush_vapid_subject=SUBJECT
    )
    provider = build_webpush_provider(settings, webpush.clock)
    assert provider is not None
    async with provider:
        (refused,) = tickets(await provider.send([push(json.dumps(subscription))]))
    assert isinstance(refused, TicketError), refused
    assert (refused.code, refused.permanent, refused.deactivate_device) == (
        "url_refused",
        True,
        True,
    )
    assert "127.0.0.1" in refused.message
    assert webpush.sandbox.received() == []
