"""The FCM adapter against the FCM sandbox over real HTTP: how answers map to outcomes,
access tokens (renewed before expiry, once under concurrency, again after a 401), and
the message FCM receives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tepat.adapters.fcm_auth import REFRESH_EARLY, FcmAuth, read_service_account
from tepat.adapters.fcm_push import FCM_TERMS, MIN_RETRY_SECONDS, FcmPushProvider, classify
from tepat.adapters.h2_client import H2Response
from tepat.clock import FakeClock
from tepat.config import load_settings
from tepat.ports.push import PushRequest, Rejected, TicketError, TicketOk, Tickets
from tepat.ports.try_again import TryAgain
from tepat.sandbox.fcm import FcmSandbox, fcm_error
from tepat.sandbox.server import running_sandbox
from tepat.wiring import build_fcm_provider

LIFETIME = 3600


@dataclass
class Fcm:
    sandbox: FcmSandbox
    provider: FcmPushProvider
    clock: FakeClock


def push(token: str, **kw: object) -> PushRequest:
    return PushRequest(f"m-{token}", token, "Hello", "World", **kw)  # type: ignore[arg-type]


@pytest.fixture
async def fcm(tmp_path: Path) -> AsyncIterator[Fcm]:
    clock = FakeClock()
    sandbox = FcmSandbox(clock=clock, token_lifetime_seconds=LIFETIME)
    with running_sandbox(sandbox) as server:
        account = tmp_path / "sa.json"
        account.write_text(json.dumps(sandbox.service_account(server.base_url, "proj-1")))
        auth = FcmAuth(read_service_account(str(account)), clock)
        provider = FcmPushProvider(auth, clock=clock, base_url=server.base_url, rate_limit=1e9)
        async with provider:
            yield Fcm(sandbox, provider, clock)


def outcomes(result: object) -> list[TicketOk | TicketError | TryAgain]:
    assert isinstance(result, Tickets), result
    return result.outcomes


async def test_each_fcm_error_maps_to_its_outcome(fcm: Fcm) -> None:
    for token in ("UNREGISTERED", "INVALID_ARGUMENT", "SENDER_ID_MISMATCH", "UNAVAILABLE"):
        fcm.sandbox.script_token(token, token)
    ok, gone, bad, other, down = outcomes(
        await fcm.provider.send(
            [
                push("t1"),
                push("UNREGISTERED"),
                push("INVALID_ARGUMENT"),
                push("SENDER_ID_MISMATCH"),
                push("UNAVAILABLE"),
            ]
        )
    )
    assert isinstance(ok, TicketOk) and ok.ticket_id.startswith("projects/proj-1/messages/")
    for refused in (gone, bad, other):
        assert isinstance(refused, TicketError)
        assert refused.permanent and refused.deactivate_device, refused
    assert [gone.code, bad.code, other.code] == [  # type: ignore[union-attr]
        "UNREGISTERED",
        "INVALID_ARGUMENT",
        "SENDER_ID_MISMATCH",
    ]
    # Beside a ticket, a temporary failure is that message's own TryAgain.
    assert isinstance(down, TryAgain) and not down.maybe_sent and not down.server_error
    assert down.retry_after == MIN_RETRY_SECONDS and down.reason.startswith("UNAVAILABLE")
    assert [r["message"]["token"] for r in fcm.sandbox.received()] == ["t1"]


def _answer(code: str, retry_after: float | None = None) -> H2Response:
    sent = fcm_error(code, retry_after)
    # As the HTTP/2 client reads an answer: header names in lower case.
    headers = {name.lower(): value for name, value in sent.headers.items()}
    return H2Response(sent.status_code, headers, bytes(sent.body))


def test_answers_without_a_request() -> None:
    clock = FakeClock()
    throttled = classify(_answer("QUOTA_EXCEEDED", 30), clock.now())
    assert isinstance(throttled, TryAgain) and throttled.throttled
    assert throttled.retry_after == 30 and not throttled.maybe_sent
    # Without Retry-After, or with a shorter one, FCM asks for at least 10 s; its terms
    # (backoff from 10 s, not past an hour) go with every retried answer.
    for code, server_error, retry_after in (
        ("UNAVAILABLE", False, None),
        ("INTERNAL", True, None),
        ("QUOTA_EXCEEDED", False, 3),
    ):
        again = classify(_answer(code, retry_after), clock.now())
        assert isinstance(again, TryAgain), code
        assert again.retry_after == MIN_RETRY_SECONDS and again.server_error is server_error
        assert again.terms is FCM_TERMS
    assert isinstance(classify(_answer("THIRD_PARTY_AUTH_ERROR"), clock.now()), Rejected)
    # An INVALID_ARGUMENT about the message, not the token: refused, the device kept.
    payload = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "bad ttl"}}
    refused = classify(H2Response(400, {}, json.dumps(payload).encode()), clock.now())
    assert isinstance(refused, TicketError)
    assert refused.permanent and not refused.deactivate_device


async def test_a_whole_batch_refused_is_one_try_again(fcm: Fcm) -> None:
    fcm.sandbox.fail_next(2, 429, retry_after=30)
    result = await fcm.provider.send([push("a"), push("b")])
    assert isinstance(result, TryAgain) and result.throttled and result.retry_after == 30
    assert result.terms is FCM_TERMS
    assert fcm.provider.adaptive.throttled == 1
    fcm.clock.advance(30)  # the rate limiter holds back for the Retry-After
    assert isinstance((await fcm.provider.send([push("a")])), Tickets)


async def test_an_answer_lost_after_sending_is_maybe_sent(fcm: Fcm) -> None:
    fcm.sandbox.fail_after_accept(1, "drop")
    result = await fcm.provider.send([push("a")])
    assert isinstance(result, TryAgain) and result.maybe_sent, result
    assert len(fcm.sandbox.received()) == 1


async def test_an_answer_lost_beside_an_accepted_one_is_that_message_maybe_sent(
    fcm: Fcm,
) -> None:
    fcm.sandbox.fail_after_accept(1, "drop")  # whichever of the two FCM takes first
    got = outcomes(await fcm.provider.send([push("a"), push("b")]))
    (lost,) = [o for o in got if isinstance(o, TryAgain)]
    assert lost.maybe_sent and not lost.throttled, lost
    assert sum(isinstance(o, TicketOk) for o in got) == 1
    assert sorted(r["message"]["token"] for r in fcm.sandbox.received()) == ["a", "b"]


async def test_the_token_is_renewed_five_minutes_before_it_expires(fcm: Fcm) -> None:
    await fcm.provider.send([push("a")])
    assert fcm.provider.auth.refreshes == 1
    fcm.clock.advance(LIFETIME - REFRESH_EARLY.total_seconds() - 5)
    await fcm.provider.send([push("a")])
    assert fcm.provider.auth.refreshes == 1
    fcm.clock.advance(10)
    assert outcomes(await fcm.provider.send([push("a")]))[0] == outcomes_ok(fcm)
    assert fcm.provider.auth.refreshes == 2
    assert fcm.sandbox.stats()["unauthorized"] == 0


def outcomes_ok(fcm: Fcm) -> TicketOk:
    return TicketOk(fcm.sandbox.received()[-1]["name"])


async def test_one_refresh_for_many_concurrent_sends(fcm: Fcm) -> None:
    tokens = await asyncio.gather(*(fcm.provider.auth.token() for _ in range(20)))
    assert len(set(tokens)) == 1 and isinstance(tokens[0], str)
    assert fcm.sandbox.stats()["token_requests"] == 1


async def test_a_401_gets_one_new_token_then_the_send_goes(fcm: Fcm) -> None:
    await fcm.provider.send([push("a")])
    fcm.sandbox.revoke_tokens()
    got = outcomes(await fcm.provider.send([push("b"), push("c"), push("d")]))
    assert all(isinstance(t, TicketOk) for t in got)
    # Three 401s, one refresh between them.
    assert fcm.sandbox.stats()["unauthorized"] == 3
    assert fcm.provider.auth.refreshes == 2


async def test_an_account_the_token_endpoint_refuses_is_rejected(fcm: Fcm, tmp_path: Path) -> None:
    stranger = FcmSandbox().service_account(fcm.provider.base_url)
    account = tmp_path / "stranger.json"
    account.write_text(json.dumps(stranger))
    auth = FcmAuth(read_service_account(str(account)), fcm.clock)
    base = fcm.provider.base_url
    async with FcmPushProvider(auth, clock=fcm.clock, base_url=base, rate_limit=1e9) as p:
        result = await p.send([push("a")])
    assert isinstance(result, Rejected) and "invalid_grant" in result.reason
    assert fcm.sandbox.received() == []


async def test_the_message_fcm_receives(fcm: Fcm) -> None:
    request = push("a", data={"n": 1, "s": "x"}, ttl_seconds=60, priority="normal")
    await fcm.provider.send([request])
    message = fcm.sandbox.received()[0]["message"]
    assert message["notification"] == {"title": "Hello", "body": "World"}
    assert message["data"] == {"n": "1", "s": "x"}
    assert message["android"]["priority"] == "normal" and message["android"]["ttl"] == "60s"
    # The category's time to live reaches iPhones too, as APNs's expiry (a UNIX time).
    expiry = int(fcm.clock.now().timestamp()) + 60
    assert message["apns"]["headers"] == {"apns-priority": "5", "apns-expiration": str(expiry)}


def test_a_bad_service_account_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "not.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a readable service account"):
        read_service_account(str(path))


async def test_the_provider_the_settings_describe(fcm: Fcm, tmp_path: Path) -> None:
    base = fcm.provider.base_url
    account = tmp_path / "sa.json"
    account.write_text(json.dumps(fcm.sandbox.service_account(base, "from-file")))
    settings = load_settings(fcm_credentials_file=str(account), fcm_url=base)
    assert settings.fcm_project_id == "from-file"
    assert build_fcm_provider(load_settings(), fcm.clock) is None
    provider = build_fcm_provider(settings, fcm.clock)
    assert provider is not None
    async with provider:
        assert isinstance((await provider.send([push("a")])), Tickets)
    assert fcm.sandbox.received()[0]["name"].startswith("projects/from-file/")


async def test_a_second_401_after_a_new_token_is_rejected(tmp_path: Path) -> None:
    clock = FakeClock()
    # Every token it issues has already lapsed on arrival.
    sandbox = FcmSandbox(clock=clock, token_lifetime_seconds=0)
    with running_sandbox(sandbox) as server:
        account = tmp_path / "sa.json"
        account.write_text(json.dumps(sandbox.service_account(server.base_url)))
        auth = FcmAuth(read_service_account(str(account)), clock)
        async with FcmPushProvider(auth, clock=clock, base_url=server.base_url) as provider:
            result = await provider.send([push("a")])
    assert isinstance(result, Rejected) and "UNAUTHENTICATED" in result.reason
    assert auth.refreshes == 2 and sandbox.stats()["unauthorized"] == 2
    assert sandbox.received() == []
