"""ExpoPushProvider against the Expo sandbox over real HTTP: typed outcomes for every case."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from tepat.adapters.expo_push import ExpoPushProvider
from tepat.clock import FakeClock
from tepat.ports.push import (
    PushProvider,
    PushRequest,
    ReceiptError,
    ReceiptOk,
    Receipts,
    Rejected,
    TicketError,
    TicketOk,
    Tickets,
)
from tepat.ports.try_again import TryAgain
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.faults import AfterAccept
from tepat.sandbox.server import RunningSandbox, running_sandbox
from tests.support import expo_fixtures
from tests.support.http_trace import BODY_CUT_SHORT, BODY_SENT, trace_then_raise
from tests.support.waiting import eventually


def tok(i: int | str, spelling: str = "ExponentPushToken") -> str:
    return f"{spelling}[tok-{i}]"


def req(
    token: str,
    body: str = "It is time",
    *,
    data: dict[str, object] | None = None,
    category: str | None = None,
    ttl_seconds: int | None = None,
) -> PushRequest:
    return PushRequest(
        message_id=f"m-{token}",
        push_token=token,
        title="Tepat",
        body=body,
        data=data or {},
        category=category,
        ttl_seconds=ttl_seconds,
    )


# the sandbox over HTTP, its receipts due when the test moves the clock
clock, sandbox, server = expo_fixtures.clock, expo_fixtures.sandbox, expo_fixtures.server


@pytest.fixture
async def provider(server: RunningSandbox, clock: FakeClock) -> AsyncIterator[ExpoPushProvider]:
    # A generous rate so that the FakeClock never has to move for the limiter in these tests.
    async with ExpoPushProvider(server.base_url, clock=clock, rate_limit=1e9) as p:
        yield p


def tickets_of(result: object) -> list[TicketOk | TicketError | TryAgain]:
    assert isinstance(result, Tickets), result
    return result.outcomes


def test_it_is_a_push_provider() -> None:
    provider: PushProvider = ExpoPushProvider("http://localhost:1", clock=FakeClock())
    assert (provider.max_batch, provider.max_receipt_batch) == (100, 1000)


# ---- tickets ----


async def test_tickets_come_back_in_order_for_both_token_spellings(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    sandbox.script_token(tok("dead"), ticket_error="DeviceNotRegistered")
    batch = [req(tok(1)), req(tok(2, "ExpoPushToken")), req(tok("dead")), req(tok(3))]
    outcomes = tickets_of(await provider.send(batch))
    assert [type(o) for o in outcomes] == [TicketOk, TicketOk, TicketError, TicketOk]
    received = sandbox.received()
    assert [r["to"] for r in received] == [r.push_token for r in batch]
    assert [getattr(o, "ticket_id", None) for o in outcomes] == [r["ticket_id"] for r in received]
    dead = outcomes[2]
    assert isinstance(dead, TicketError)
    assert (dead.code, dead.permanent, dead.deactivate_device) == (
        "DeviceNotRegistered",
        True,
        True,
    )


async def test_the_message_carries_title_body_data_and_options(
    server: RunningSandbox, clock: FakeClock, sandbox: ExpoSandbox
) -> None:
    async with ExpoPushProvider(
        server.base_url, clock=clock, rate_limit=1e9, channel_per_category=True
    ) as provider:
        request = req(tok(1), data={"message_id": "m1"}, category="reminders", ttl_seconds=600)
        tickets_of(await provider.send([request]))
    (entry,) = sandbox.received()
    assert (entry["title"], entry["body"], entry["data"]) == (
        "Tepat",
        "It is time",
        {"message_id": "m1"},
    )
    assert (entry["channel_id"], entry["ttl"], entry["priority"], entry["sound"]) == (
        "reminders",
        600,
        "high",
        "default",
    )


async def test_bodies_over_1_kib_are_gzipped_and_small_ones_are_not(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    tickets_of(await provider.send([req(tok(1))]))
    assert sandbox.stats()["gzip_requests"] == 0
    outcomes = tickets_of(await provider.send([req(tok(i), body="x" * 100) for i in range(20)]))
    assert all(isinstance(o, TicketOk) for o in outcomes)
    assert sandbox.stats()["gzip_requests"] == 1
    assert [r["content_encoding"] for r in sandbox.received()] == [None] + ["gzip"] * 20


async def test_an_oversize_payload_is_caught_locally_and_the_rest_still_go(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    big = req(tok("big"), data={"blob": "y" * 4100})
    outcomes = tickets_of(await provider.send([req(tok(1)), big, req(tok(2))]))
    assert isinstance(outcomes[0], TicketOk) and isinstance(outcomes[2], TicketOk)
    too_big = outcomes[1]
    assert isinstance(too_big, TicketError)
    assert (too_big.code, too_big.permanent, too_big.deactivate_device) == (
        "MessageTooBig",
        True,
        False,
    )
    assert "4096" in too_big.message
    assert [r["to"] for r in sandbox.received()] == [tok(1), tok(2)]  # never sent


async def test_a_malformed_token_is_rejected_locally_as_a_dead_device(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    outcomes = tickets_of(await provider.send([req("fcm:abc"), req("ExponentPushToken[]")]))
    for outcome in outcomes:
        assert isinstance(outcome, TicketError)
        assert (outcome.code, outcome.permanent, outcome.deactivate_device) == (
            "DeviceNotRegistered",
            True,
            True,
        )
        assert "not an Expo push token" in outcome.message
    assert sandbox.stats()["requests"] == 0  # nothing left to send: no request at all


@pytest.mark.parametrize(
    ("code", "permanent", "deactivate", "retry_after"),
    [
        ("DeviceNotRegistered", True, True, None),
        ("MessageTooBig", True, False, None),
        ("MessageRateExceeded", False, False, 60.0),
        ("InvalidCredentials", True, False, None),
        ("MismatchSenderId", True, False, None),
        ("DeveloperError", True, False, None),
        ("ExpoError", False, False, None),
        ("ProviderError", False, False, None),
    ],
)
async def test_ticket_errors_are_classified(
    provider: ExpoPushProvider,
    sandbox: ExpoSandbox,
    code: str,
    permanent: bool,
    deactivate: bool,
    retry_after: float | None,
) -> None:
    sandbox.script_token(tok("x"), ticket_error=code)
    ok, failed = tickets_of(await provider.send([req(tok(1)), req(tok("x"))]))
    assert isinstance(ok, TicketOk)
    assert failed == TicketError(
        code=code,
        message=failed.message if isinstance(failed, TicketError) else "",
        permanent=permanent,
        deactivate_device=deactivate,
        retry_after=retry_after,
    )


async def test_configuration_errors_are_logged_loudly(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox.script_token(tok(1), ticket_error="InvalidCredentials")
    with caplog.at_level("ERROR", logger="tepat.adapters.expo_push"):
        await provider.send([req(tok(1))])
    assert any("InvalidCredentials" in r.getMessage() for r in caplog.records)


async def test_more_than_a_batch_is_a_caller_bug(provider: ExpoPushProvider) -> None:
    with pytest.raises(ValueError):
        await provider.send([req(tok(i)) for i in range(101)])
    assert tickets_of(await provider.send([req(tok(i)) for i in range(100)]))
    assert tickets_of(await provider.send([])) == []


# ---- whole-request failures ----


def retry_later(result: object) -> TryAgain:
    assert isinstance(result, TryAgain), result
    return result


async def test_429_is_not_sent_and_honours_retry_after(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, clock: FakeClock
) -> None:
    sandbox.fail_next(1, status=429, retry_after=7)
    result = retry_later(await provider.send([req(tok(1))]))
    assert (result.retry_after, result.maybe_sent) == (7.0, False)
    assert "TOO_MANY_REQUESTS" in result.reason
    assert sandbox.received() == []
    # The client honours Retry-After: the next request waits those 7 s (on the clock).
    later = asyncio.ensure_future(provider.send([req(tok(1))]))
    await eventually(lambda: clock.sleepers > 0, what="the next send waiting")
    assert not later.done()
    clock.advance(7)
    assert tickets_of(await later)  # and then it works


async def test_the_sandbox_rate_limit_429_is_not_sent_with_retry_after(
    server: RunningSandbox, clock: FakeClock, sandbox: ExpoSandbox, provider: ExpoPushProvider
) -> None:
    sandbox.set_rate_limit(50)
    tickets_of(await provider.send([req(tok(i)) for i in range(50)]))
    result = retry_later(await provider.send([req(tok(1))]))
    assert (result.retry_after, result.maybe_sent) == (1.0, False)


async def test_a_408_request_timeout_is_not_sent(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_next(1, status=408, retry_after=None)
    assert retry_later(await provider.send([req(tok(1))])).maybe_sent is False


async def test_a_503_is_not_sent_the_server_says_it_did_not_handle_it(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_next(1, status=503, retry_after=3)
    result = retry_later(await provider.send([req(tok(1))]))
    assert (result.retry_after, result.maybe_sent) == (3.0, False)


@pytest.mark.parametrize("status", [500, 502, 504])
async def test_a_5xx_is_retried_as_expo_documents_not_left_to_the_maybe_sent_policy(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, status: int
) -> None:
    """Expo: "retry 429 and 5xx with exponential backoff"; most 5xx come before it acted."""
    sandbox.fail_next(1, status=status, retry_after=None)
    result = retry_later(await provider.send([req(tok(1))]))
    assert (result.retry_after, result.maybe_sent, result.server_error) == (None, False, True)


@pytest.mark.parametrize("status", [500, 502, 504])
async def test_a_5xx_after_expo_accepted_is_retried_and_flagged_a_possible_duplicate(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, status: int
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.ERROR, status=status)
    result = retry_later(await provider.send([req(tok(1)), req(tok(2))]))
    assert result.server_error is True and result.maybe_sent is False
    assert f"{status}" in result.reason
    assert [r["to"] for r in sandbox.received()] == [tok(1), tok(2)]  # Expo did take them


async def test_connection_refused_is_not_sent(clock: FakeClock) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with ExpoPushProvider(f"http://127.0.0.1:{port}", clock=clock, rate_limit=1e9) as p:
        sent = retry_later(await p.send([req(tok(1))]))
        assert sent.maybe_sent is False
        assert "ConnectError" in sent.reason and "before the request was sent" in sent.reason
        assert isinstance(await p.receipts(["a"]), TryAgain)


async def test_a_read_timeout_after_expo_accepted_is_maybe_sent(
    server: RunningSandbox, clock: FakeClock, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.STALL)
    async with ExpoPushProvider(server.base_url, clock=clock, rate_limit=1e9, timeout=0.3) as p:
        result = retry_later(await p.send([req(tok(1))]))
        assert result.maybe_sent is True
        assert "ReadTimeout" in result.reason and "after the request was sent" in result.reason
        assert [r["to"] for r in sandbox.received()] == [tok(1)]
        # The client hung up, which ends the stall; the next request is answered.
        await eventually(lambda: sandbox.stalled() == 0, what="the stalled answer to end")
        assert tickets_of(await p.send([req(tok(2))]))


async def test_a_connection_dropped_mid_response_after_expo_accepted_is_maybe_sent(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.DROP)
    result = retry_later(await provider.send([req(tok(1))]))
    assert result.maybe_sent is True and "RemoteProtocolError" in result.reason
    assert [r["to"] for r in sandbox.received()] == [tok(1)]
    assert tickets_of(await provider.send([req(tok(2))]))  # a fresh connection works


# ---- not sent or maybe sent, where the network cannot be made to fail on cue ----


@pytest.mark.parametrize(
    ("events", "error", "maybe_sent"),
    [
        pytest.param([], httpx.PoolTimeout("pool"), False, id="pool_timeout_is_not_sent"),
        pytest.param(
            ["connection.connect_tcp.started", "connection.connect_tcp.failed"],
            httpx.ConnectTimeout("connect"),
            False,
            id="connect_timeout_is_not_sent",
        ),
        pytest.param(
            # httpcore swallows the WriteError and reports what it then fails to read.
            BODY_CUT_SHORT,
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            False,
            id="write_error_before_the_body_went_out_whole_is_not_sent",
        ),
        pytest.param(
            BODY_CUT_SHORT,
            httpx.WriteTimeout("write"),
            False,
            id="write_timeout_is_not_sent",
        ),
        pytest.param(BODY_SENT, httpx.ReadTimeout("read"), True, id="read_timeout_after_sending"),
        pytest.param(BODY_SENT, httpx.ReadError("reset"), True, id="read_error_after_sending"),
        pytest.param(
            BODY_SENT,
            httpx.RemoteProtocolError("peer closed connection"),
            True,
            id="remote_protocol_error_after_sending",
        ),
        pytest.param(
            [], httpx.ReadTimeout("read"), True, id="untraced_read_timeout_assumes_maybe_sent"
        ),
    ],
)
async def test_not_sent_or_maybe_sent_follows_how_far_the_request_got(
    clock: FakeClock, events: list[str], error: Exception, maybe_sent: bool
) -> None:
    transport = trace_then_raise(events, error)
    async with ExpoPushProvider(
        "http://expo.test", clock=clock, rate_limit=1e9, transport=transport
    ) as p:
        result = retry_later(await p.send([req(tok(1))]))
    assert result.maybe_sent is maybe_sent


async def test_a_200_that_is_not_json_is_maybe_sent(clock: FakeClock) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>ok</html>"))
    async with ExpoPushProvider(
        "http://expo.test", clock=clock, rate_limit=1e9, transport=transport
    ) as p:
        assert retry_later(await p.send([req(tok(1))])).maybe_sent is True


async def test_bad_credentials_are_rejected(clock: FakeClock) -> None:
    sandbox = ExpoSandbox(clock=clock, access_token="s3cret")
    with running_sandbox(sandbox) as server:
        for token in (None, "wrong"):
            async with ExpoPushProvider(
                server.base_url, access_token=token, clock=clock, rate_limit=1e9
            ) as p:
                sent = await p.send([req(tok(1))])
                assert isinstance(sent, Rejected) and "UNAUTHORIZED" in sent.reason
                assert isinstance(await p.receipts(["a"]), Rejected)
        async with ExpoPushProvider(
            server.base_url, access_token="s3cret", clock=clock, rate_limit=1e9
        ) as p:
            assert tickets_of(await p.send([req(tok(1))]))
    assert sandbox.stats()["unauthorized"] == 4


async def test_other_4xx_is_rejected_with_expos_code(
    provider: ExpoPushProvider, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_next(1, status=400, code="PUSH_TOO_MANY_EXPERIENCE_IDS")
    result = await provider.send([req(tok(1))])
    assert isinstance(result, Rejected)
    assert result.reason.startswith("PUSH_TOO_MANY_EXPERIENCE_IDS:")


# ---- receipts ----


async def test_receipts_are_classified_and_absent_until_ready(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, clock: FakeClock
) -> None:
    sandbox.script_token(tok("gone"), receipt_error="DeviceNotRegistered")
    sandbox.script_token(tok("creds"), receipt_error="InvalidCredentials")
    outcomes = tickets_of(await provider.send([req(tok(1)), req(tok("gone")), req(tok("creds"))]))
    ids = [o.ticket_id for o in outcomes if isinstance(o, TicketOk)]
    assert len(ids) == 3

    assert await provider.receipts(ids) == Receipts({})  # not ready yet: simply absent
    clock.advance(900)
    result = await provider.receipts([*ids, "unknown"])
    assert isinstance(result, Receipts)
    assert set(result.by_ticket) == set(ids)
    assert result.by_ticket[ids[0]] == ReceiptOk()
    gone = result.by_ticket[ids[1]]
    assert isinstance(gone, ReceiptError)
    assert (gone.code, gone.deactivate_device) == ("DeviceNotRegistered", True)
    creds = result.by_ticket[ids[2]]
    assert isinstance(creds, ReceiptError)
    assert (creds.code, creds.deactivate_device) == ("InvalidCredentials", False)


async def test_receipts_are_asked_in_chunks_of_at_most_1000(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, clock: FakeClock
) -> None:
    outcomes = tickets_of(await provider.send([req(tok(i)) for i in range(3)]))
    real = [o.ticket_id for o in outcomes if isinstance(o, TicketOk)]
    clock.advance(900)
    unknown = [f"unknown-{i}" for i in range(2500)]
    # Real ids at the start, the end, and in the middle chunk.
    ids = [real[0], *unknown[:1500], real[1], *unknown[1500:], real[2]]
    result = await provider.receipts(ids)
    assert isinstance(result, Receipts)
    assert set(result.by_ticket) == set(real)
    assert sandbox.stats()["receipt_requests"] == 3  # 2503 ids: 1000 + 1000 + 503
    assert sandbox.stats()["bad_requests"] == 0  # never over Expo's limit


async def test_a_failed_receipt_chunk_leaves_its_ids_for_next_time(
    provider: ExpoPushProvider, sandbox: ExpoSandbox, clock: FakeClock
) -> None:
    (ok,) = tickets_of(await provider.send([req(tok(1))]))
    assert isinstance(ok, TicketOk)
    clock.advance(900)
    sandbox.fail_next(1, status=500)
    # Two chunks; whichever is answered first fails. The result is partial, never an exception.
    result = await provider.receipts([ok.ticket_id, *[f"u{i}" for i in range(1000)]])
    assert isinstance(result, Receipts)
    assert set(result.by_ticket) <= {ok.ticket_id}
    sandbox.fail_next(2, status=503, retry_after=5)
    all_failed = await provider.receipts([ok.ticket_id, *[f"u{i}" for i in range(1000)]])
    assert isinstance(all_failed, TryAgain) and all_failed.retry_after == 5.0


async def test_no_ids_no_request(provider: ExpoPushProvider, sandbox: ExpoSandbox) -> None:
    assert await provider.receipts([]) == Receipts({})
    assert sandbox.stats()["requests"] == 0


# ---- rate limiting on the client side ----


async def test_the_client_waits_for_its_rate_instead_of_provoking_429s(
    clock: FakeClock,
) -> None:
    """Client and sandbox both at 100/s on one FakeClock: the second batch waits, no 429."""
    sandbox = ExpoSandbox(clock=clock, rate_limit=100)
    with running_sandbox(sandbox) as server:
        async with ExpoPushProvider(server.base_url, clock=clock, rate_limit=100) as provider:
            tickets_of(await provider.send([req(tok(i)) for i in range(100)]))
            second = asyncio.create_task(provider.send([req(tok(i)) for i in range(100)]))
            for _ in range(100):  # let the task run up to its wait on the clock
                if clock.sleepers or second.done():
                    break
                await asyncio.sleep(0)
            assert not second.done() and sandbox.stats()["send_requests"] == 1
            clock.advance(1.0)
            assert all(isinstance(o, TicketOk) for o in tickets_of(await second))
    assert sandbox.stats()["too_many_requests"] == 0
    assert sandbox.stats()["notifications"] == 200


async def test_providers_with_the_same_credential_share_one_budget(clock: FakeClock) -> None:
    a = ExpoPushProvider("http://expo.test", access_token="t", clock=clock, rate_limit=100)
    b = ExpoPushProvider("http://expo.test/", access_token="t", clock=clock, rate_limit=100)
    c = ExpoPushProvider("http://expo.test", access_token="other", clock=clock, rate_limit=100)
    try:
        assert a.limiter is b.limiter
        assert a.limiter is not c.limiter
    finally:
        for p in (a, b, c):
            await p.close()
