"""The PushProvider port's contract (tepat/ports/push.py), run over every real adapter.

Expo, FCM, APNs and Web Push, each against its sandbox over real HTTP (APNs's over HTTP/2);
another provider joins ``PROVIDERS`` and passes the same tests. What the push path
relies on:

* ``max_batch`` at least 1, ``max_receipt_batch`` at least 1 or 0 (no receipts: the
  provider answers at send time), and a rate share it can take;
* one ticket per request, in order; a refused notification spoils no neighbour;
* a provider that cannot be reached is an answer (``TryAgain``, not sent), never an error;
* a request whose ``still_sendable`` says no is not sent: ``GateClosed`` names it;
* receipts for tickets that are ready, absent for the others (and for unknown ids); none
  at all from a provider without receipts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tepat.adapters.apns_auth import ProviderToken, read_signing_key
from tepat.adapters.apns_push import ApnsPushProvider
from tepat.adapters.expo_push import ExpoPushProvider
from tepat.adapters.fcm_auth import FcmAuth, read_service_account
from tepat.adapters.fcm_push import FcmPushProvider
from tepat.adapters.webpush_push import Vapid, WebPushProvider
from tepat.clock import FakeClock
from tepat.ports.push import (
    GateClosed,
    PushProvider,
    PushRequest,
    Receipts,
    TicketError,
    TicketOk,
    Tickets,
)
from tepat.ports.try_again import TryAgain
from tepat.sandbox.apns import ApnsSandbox
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.fcm import FcmSandbox
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.webpush import WebPushSandbox
from tests.support.smtp_server import free_port

RECEIPT_DELAY = 900.0


@dataclass
class Subject:
    """One provider under contract: a live token, a dead one, how to let receipts
    become ready, and the same provider pointed where nothing listens."""

    provider: PushProvider
    live: Callable[[int], PushRequest]
    dead: PushRequest
    later: Callable[[], None]
    unreachable: Callable[[], AbstractAsyncContextManager[PushProvider]]


def request(token: str) -> PushRequest:
    return PushRequest(message_id=f"m-{token}", push_token=token, title="Tepat", body="Now")


@asynccontextmanager
async def expo(tmp_path: Path) -> AsyncIterator[Subject]:
    clock = FakeClock()
    sandbox = ExpoSandbox(clock=clock, receipt_delay_seconds=RECEIPT_DELAY)
    dead = "ExponentPushToken[dead]"
    sandbox.script_token(dead, ticket_error="DeviceNotRegistered")
    with running_sandbox(sandbox) as server:
        # A generous rate so that the FakeClock never has to move for the limiter.
        async with ExpoPushProvider(server.base_url, clock=clock, rate_limit=1e9) as provider:
            yield Subject(
                provider,
                lambda i: request(f"ExponentPushToken[tok-{i}]"),
                request(dead),
                lambda: clock.advance(RECEIPT_DELAY),
                lambda: ExpoPushProvider(
                    f"http://127.0.0.1:{free_port()}", clock=clock, rate_limit=1e9
                ),
            )


@asynccontextmanager
async def fcm(tmp_path: Path) -> AsyncIterator[Subject]:
    clock = FakeClock()
    sandbox = FcmSandbox(clock=clock)
    sandbox.script_token("dead", "UNREGISTERED")
    with running_sandbox(sandbox) as server:
        account = tmp_path / "service-account.json"
        account.write_text(json.dumps(sandbox.service_account(server.base_url)))

        def provider(base_url: str) -> FcmPushProvider:
            auth = FcmAuth(read_service_account(str(account)), clock)
            return FcmPushProvider(auth, clock=clock, base_url=base_url, rate_limit=1e9)

        async with provider(server.base_url) as live:
            yield Subject(
                live,
                lambda i: request(f"fcm-token-{i}"),
                request("dead"),
                lambda: None,  # FCM answers at send time: nothing to wait for
                lambda: provider(f"http://127.0.0.1:{free_port()}"),
            )


@asynccontextmanager
async def apns(tmp_path: Path) -> AsyncIterator[Subject]:
    clock = FakeClock()
    sandbox = ApnsSandbox(clock=clock)
    key_file = tmp_path / "AuthKey.p8"
    key_file.write_text(sandbox.signing_key("KEYID12345"))
    dead = "d" * 64
    sandbox.script_token(dead, "Unregistered")

    def provider(base_url: str) -> ApnsPushProvider:
        key = read_signing_key(key_file)
        token = ProviderToken(key, key_id="KEYID12345", team_id=sandbox.team_id, clock=clock)
        return ApnsPushProvider(token, topic=sandbox.topic, clock=clock, base_url=base_url)

    with running_sandbox(sandbox) as server:
        async with provider(server.base_url) as live:
            yield Subject(
                live,
                lambda i: request(f"{i:064x}"),
                request(dead),
                lambda: None,  # APNs answers at send time: nothing to wait for
                lambda: provider(f"http://127.0.0.1:{free_port()}"),
            )


@asynccontextmanager
async def webpush(tmp_path: Path) -> AsyncIterator[Subject]:
    clock = FakeClock()
    sandbox = WebPushSandbox(clock=clock)
    key_file = tmp_path / "vapid.pem"
    key_file.write_text(sandbox.vapid_key())
    subscriptions = [sandbox.subscribe() for _ in range(5)]
    dead = sandbox.subscribe("dead")
    sandbox.script_subscription("dead", 410)

    def provider(base_url: str) -> WebPushProvider:
        vapid = Vapid(read_signing_key(key_file), "mailto:ops@tepat.test", clock)
        return WebPushProvider(vapid, clock=clock, base_url=base_url)

    with running_sandbox(sandbox) as server:
        async with provider(server.base_url) as live:
            yield Subject(
                live,
                lambda i: request(subscriptions[i % len(subscriptions)]),
                request(dead),
                lambda: None,  # a push service answers at send time: nothing to wait for
                lambda: provider(f"http://127.0.0.1:{free_port()}"),
            )


PROVIDERS = {"expo": expo, "fcm": fcm, "apns": apns, "webpush": webpush}


@pytest.fixture(params=sorted(PROVIDERS))
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    async with PROVIDERS[request.param](tmp_path) as s:
        yield s


def tickets(result: object) -> list[TicketOk | TicketError | TryAgain]:
    assert isinstance(result, Tickets), result
    return result.outcomes


async def test_batch_sizes_and_a_rate_share(subject: Subject) -> None:
    assert subject.provider.max_batch >= 1
    assert subject.provider.max_receipt_batch >= 0
    subject.provider.set_rate_share(0.5)  # several consumer processes: this one's half
    subject.provider.set_rate_share(1.0)


async def test_one_ticket_per_request_in_order_a_refusal_spoils_no_neighbour(
    subject: Subject,
) -> None:
    got = tickets(await subject.provider.send([subject.live(1), subject.dead, subject.live(2)]))
    assert [type(t) for t in got] == [TicketOk, TicketError, TicketOk]
    ok = [t.ticket_id for t in got if isinstance(t, TicketOk)]
    assert all(ok) and len(set(ok)) == 2
    refused = got[1]
    assert isinstance(refused, TicketError)
    assert refused.code and refused.permanent


async def test_an_unreachable_provider_is_an_answer_not_an_error(subject: Subject) -> None:
    async with subject.unreachable() as provider:
        result = await provider.send([subject.live(1), subject.live(2)])
    assert isinstance(result, TryAgain), result
    # Nothing reached the provider: sending again cannot duplicate anything.
    assert not result.maybe_sent
    assert result.reason


async def test_a_request_no_longer_sendable_is_not_sent(subject: Subject) -> None:
    lapsed = replace(subject.live(2), still_sendable=lambda: False)
    with pytest.raises(GateClosed) as closed:
        await subject.provider.send([subject.live(1), lapsed])
    assert closed.value.message_ids == {lapsed.message_id}
    # Nothing of the request went out: the others are sent again without it.
    assert [type(t) for t in tickets(await subject.provider.send([subject.live(1)]))] == [TicketOk]


async def test_receipts_of_ready_tickets_and_none_for_the_others(subject: Subject) -> None:
    got = tickets(await subject.provider.send([subject.live(1), subject.live(2)]))
    ids = [t.ticket_id for t in got if isinstance(t, TicketOk)]
    assert len(ids) == 2
    subject.later()
    result = await subject.provider.receipts([*ids, "never-issued"])
    assert isinstance(result, Receipts), result
    # A provider that answers at send time (max_receipt_batch 0) has no receipts to give.
    assert set(result.by_ticket) == (set(ids) if subject.provider.max_receipt_batch else set())
