"""The APNs adapter against the APNs sandbox over HTTP/2: what it sends, how each answer
maps, its provider token's renewal, and one connection for many streams."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest

from tepat.adapters.apns_auth import ProviderToken, read_signing_key
from tepat.adapters.apns_push import ApnsPushProvider
from tepat.clock import FakeClock
from tepat.domain.models import User, slot_key_for
from tepat.ports.push import PushRequest, Rejected, TicketError, TicketOk, Tickets
from tepat.ports.try_again import TryAgain
from tepat.runtime import open_runtime
from tepat.sandbox.apns import ApnsSandbox
from tepat.sandbox.server import running_sandbox
from tepat.services import accounts
from tests.api.conftest import make_settings
from tests.support.fake_push import FakePush
from tests.support.messages import make_message

KEY_ID = "KEYID12345"


@dataclass
class Apns:
    sandbox: ApnsSandbox
    provider: ApnsPushProvider
    clock: FakeClock
    base_url: str


@pytest.fixture
async def apns(tmp_path: Path) -> AsyncIterator[Apns]:
    clock = FakeClock()
    sandbox = ApnsSandbox(clock=clock)
    key_file = tmp_path / "AuthKey.p8"
    key_file.write_text(sandbox.signing_key(KEY_ID))
    token = ProviderToken(
        read_signing_key(key_file), key_id=KEY_ID, team_id=sandbox.team_id, clock=clock
    )
    with running_sandbox(sandbox) as server:
        provider = ApnsPushProvider(
            token, topic=sandbox.topic, clock=clock, base_url=server.base_url
        )
        async with provider:
            yield Apns(sandbox, provider, clock, server.base_url)


def device(i: int) -> str:
    return f"{i:064x}"


def push(token: str, **fields: object) -> PushRequest:
    return PushRequest(f"m-{token}", token, "Tepat", "Now", **fields)  # type: ignore[arg-type]


def tickets(result: object) -> list[TicketOk | TicketError | TryAgain]:
    assert isinstance(result, Tickets), result
    return result.outcomes


async def test_what_goes_out_headers_and_payload(apns: Apns) -> None:
    message_id = str(uuid.uuid4())
    request = PushRequest(
        message_id,
        device(1),
        "Hello",
        "World",
        data={"order": 7},
        priority="normal",
        ttl_seconds=3600,
        sound=None,
    )
    got = tickets(await apns.provider.send([request, push(device(2))]))
    # APNs echoes the apns-id it was given: the ticket names the message.
    assert got[0] == TicketOk(message_id)
    assert isinstance(got[1], TicketOk) and got[1].ticket_id
    # Without one, APNs makes one: a version 4 UUID in upper case.
    made = uuid.UUID(got[1].ticket_id)
    assert made.version == 4 and got[1].ticket_id == str(made).upper()
    first, second = sorted(apns.sandbox.received(), key=lambda r: r["token"])
    assert first["headers"] == {
        "apns-topic": apns.sandbox.topic,
        "apns-push-type": "alert",
        "apns-priority": "5",
        "apns-expiration": str(int(apns.clock.now().timestamp()) + 3600),
        "apns-collapse-id": message_id,
        "apns-id": message_id,
    }
    assert first["payload"] == {"order": 7, "aps": {"alert": {"title": "Hello", "body": "World"}}}
    assert second["headers"]["apns-priority"] == "10"
    assert "apns-id" not in second["headers"] and "apns-expiration" not in second["headers"]
    # Its id is longer than APNs takes for a collapse id: none.
    assert "apns-collapse-id" not in second["headers"]
    assert second["payload"]["aps"]["sound"] == "default"


@pytest.mark.parametrize(
    ("reason", "deactivate"),
    [
        ("Unregistered", True),
        ("BadDeviceToken", True),
        ("DeviceTokenNotForTopic", True),
        ("PayloadTooLarge", False),
        ("BadTopic", False),
    ],
)
async def test_a_refusal_is_permanent_and_deactivates_only_a_dead_token(
    apns: Apns, reason: str, deactivate: bool
) -> None:
    apns.sandbox.script_token(device(9), reason)
    got = tickets(await apns.provider.send([push(device(1)), push(device(9))]))
    assert isinstance(got[0], TicketOk)
    assert isinstance(got[1], TicketError)
    assert got[1] == TicketError(
        reason, got[1].message, permanent=True, deactivate_device=deactivate
    )


async def test_a_bad_token_or_a_big_payload_is_refused_without_a_request(apns: Apns) -> None:
    big = push(device(1), data={"blob": "x" * 4096})
    bad_token, too_big = tickets(await apns.provider.send([push("not-a-device-token"), big]))
    assert isinstance(bad_token, TicketError) and isinstance(too_big, TicketError)
    assert (bad_token.code, bad_token.permanent, bad_token.deactivate_device) == (
        "BadDeviceToken",
        True,
        True,
    )
    assert (too_big.code, too_big.permanent, too_big.deactivate_device) == (
        "PayloadTooLarge",
        True,
        False,
    )
    assert apns.sandbox.stats()["requests"] == 0


async def test_too_many_requests_backs_off_throttled(apns: Apns) -> None:
    apns.sandbox.fail_next(1, 429)
    result = await apns.provider.send([push(device(1))])
    assert isinstance(result, TryAgain), result
    assert result.throttled and not result.maybe_sent and result.retry_after == 10.0
    # Beside an accepted neighbour it is that notification's temporary refusal.
    apns.sandbox.script_token(device(2), "TooManyRequests")
    got = tickets(await apns.provider.send([push(device(1)), push(device(2))]))
    assert isinstance(got[0], TicketOk)
    assert isinstance(got[1], TryAgain) and got[1].throttled and got[1].retry_after == 10.0


@pytest.mark.parametrize(("status", "server_error"), [(500, True), (503, False)])
async def test_server_errors_are_tried_again(apns: Apns, status: int, server_error: bool) -> None:
    apns.sandbox.fail_next(1, status)
    result = await apns.provider.send([push(device(1))])
    assert isinstance(result, TryAgain), result
    assert result.server_error is server_error and not result.maybe_sent
    assert tickets(await apns.provider.send([push(device(1))]))[0] == TicketOk(
        apns.sandbox.received()[-1]["apns_id"]
    )


async def test_the_provider_token_is_renewed_after_40_minutes_not_before(apns: Apns) -> None:
    await apns.provider.send([push(device(1))])
    apns.clock.advance(timedelta(minutes=39, seconds=59).total_seconds())
    await apns.provider.send([push(device(2))])
    assert apns.sandbox.stats()["provider_tokens"] == 1
    apns.clock.advance(1)
    got = tickets(await apns.provider.send([push(device(3))]))
    assert isinstance(got[0], TicketOk)
    assert apns.sandbox.stats()["provider_tokens"] == 2


async def test_an_expired_provider_token_is_signed_again_once_for_a_burst(apns: Apns) -> None:
    await apns.provider.send([push(device(1))])
    apns.clock.advance(60)  # a new token differs from the old in its iat
    apns.sandbox.fail_next(5, 403, "ExpiredProviderToken")
    got = tickets(await apns.provider.send([push(device(i)) for i in range(5)]))
    assert all(isinstance(t, TicketOk) for t in got), got
    assert apns.sandbox.stats()["provider_tokens"] == 2


async def test_a_provider_token_refused_twice_is_rejected(apns: Apns) -> None:
    apns.sandbox.fail_next(2, 403, "InvalidProviderToken")
    result = await apns.provider.send([push(device(1))])
    assert isinstance(result, Rejected) and "InvalidProviderToken" in result.reason
    assert apns.sandbox.stats()["requests"] == 2


async def test_a_token_older_than_an_hour_is_expired_on_the_sandbox(tmp_path: Path) -> None:
    clock = FakeClock()
    sandbox = ApnsSandbox(clock=clock)
    key = tmp_path / "AuthKey.p8"
    key.write_text(sandbox.signing_key(KEY_ID))
    # The provider's own clock stands still: its token is never renewed, and ages.
    token = ProviderToken(
        read_signing_key(key), key_id=KEY_ID, team_id=sandbox.team_id, clock=FakeClock()
    )
    with running_sandbox(sandbox) as server:
        async with ApnsPushProvider(
            token, topic=sandbox.topic, clock=clock, base_url=server.base_url
        ) as provider:
            clock.advance(3601)
            result = await provider.send([push(device(1))])
    assert isinstance(result, Rejected) and "ExpiredProviderToken" in result.reason


async def test_many_concurrent_sends_share_one_connection(apns: Apns) -> None:
    for _ in range(2):
        got = tickets(await apns.provider.send([push(device(i)) for i in range(100)]))
        assert all(isinstance(t, TicketOk) for t in got)
    assert apns.sandbox.stats()["notifications"] == 200
    assert apns.sandbox.stats()["connections"] == 1
    # The count is of connections: a second client is a second one.
    other = ApnsPushProvider(
        apns.provider.token, topic="dev.tepat.app", clock=apns.clock, base_url=apns.base_url
    )
    async with other:
        await other.send([push(device(1))])
    assert apns.sandbox.stats()["connections"] == 2


def test_a_key_that_is_not_an_apns_key_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "AuthKey.p8"
    bad.write_text("not a key")
    with pytest.raises(ValueError, match="not an unencrypted PEM private key"):
        read_signing_key(bad)
    with pytest.raises(ValueError, match="cannot read"):
        read_signing_key(tmp_path / "missing.p8")


async def test_a_5xx_after_apns_took_the_notification_is_tried_again(apns: Apns) -> None:
    apns.sandbox.fail_after_accept(1, "error", 500)
    result = await apns.provider.send([push(device(1))])
    assert isinstance(result, TryAgain), result
    # Apple asks for a 500 to be retried: a rare copy is counted, not avoided.
    assert result.server_error and not result.maybe_sent
    (received,) = apns.sandbox.received()
    assert received["answer_lost"] == "error"


async def test_an_answer_stalled_beside_an_accepted_one_is_that_notification_maybe_sent(
    apns: Apns,
) -> None:
    apns.sandbox.fail_after_accept(1, "stall")  # whichever of the two streams comes first
    short = ApnsPushProvider(
        apns.provider.token, topic=apns.sandbox.topic, clock=apns.clock, base_url=apns.base_url,
        timeout=0.3,
    )  # fmt: skip
    async with short:
        got = tickets(await short.send([push(device(1)), push(device(2))]))
    (lost,) = [t for t in got if isinstance(t, TryAgain)]
    assert lost.maybe_sent and not lost.server_error, lost
    assert sum(isinstance(t, TicketOk) for t in got) == 1
    assert apns.sandbox.stats()["notifications"] == 2


async def test_the_send_path_asks_apns_for_the_priority_and_expiry_of_the_category(
    apns: Apns, tmp_path: Path
) -> None:
    now = apns.clock.now()
    safety = make_message("k-safety", category="safety", priority="bulk", scheduled_at=now)
    meal = make_message("k-meal", priority="bulk", scheduled_at=now - timedelta(minutes=10))
    settings = make_settings(tmp_path)
    push = {"apns": apns.provider}
    async with open_runtime(settings, clock=apns.clock, push=FakePush(), push_providers=push) as rt:
        await rt.store.upsert_user(User("u1", "UTC"))
        await accounts.register_device(rt, "u1", "iphone", device(1), kind="apns")
        sent = [replace(m, nominal_at=m.scheduled_at, due_at=now) for m in (safety, meal)]
        sent = [replace(m, slot_key=slot_key_for(m)) for m in sent]
        await rt.store.insert_messages(sent)
        await rt.dispatcher.channels.process(await rt.store.claim([m.id for m in sent], now))
    by_id = {r["payload"]["tepat_message_id"]: r["headers"] for r in apns.sandbox.received()}
    at = int(now.timestamp())
    # Safety breaks quiet hours: never held back, even marked bulk; a bulk meal may wait.
    assert by_id[safety.id]["apns-priority"] == "10"
    assert by_id[meal.id]["apns-priority"] == "5"
    # Each expires when its message would have been missed: 30 min after it was due.
    assert by_id[safety.id]["apns-expiration"] == str(at + 30 * 60)
    assert by_id[meal.id]["apns-expiration"] == str(at + 20 * 60)
    # A copy sent again (maybe sent) replaces the first on the phone.
    assert by_id[meal.id]["apns-collapse-id"] == meal.id
