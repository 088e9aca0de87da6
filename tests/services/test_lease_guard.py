"""A claim is sent only while its lease, as this process knows it, has a margin left.

Renewal can fail or get stuck (an overloaded store); the sweeper then re-drives the
claim, and a send from here would be a second copy. What is past the margin is not
sent (left ``sending`` for the sweeper); a renewal answered past it does not count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from tepat import metrics
from tepat.adapters.twilio_sms import TwilioSmsChannel
from tepat.clock import FakeClock
from tepat.domain.models import Message, MessageStatus, User
from tepat.ports.channel import Accepted, Outgoing, Withheld
from tepat.ports.push import PushRequest, SendResult, TicketOk, Tickets
from tepat.runtime import open_runtime
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox
from tepat.services.sending.lease import ClaimsInHand, may_still_send
from tepat.services.sending.push_channel import PushBatcher
from tests.api.conftest import START, make_settings
from tests.support.fake_push import FakePush
from tests.support.messages import make_message
from tests.support.waiting import eventually

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


class StuckStore:
    """Renewals that fail, or that answer only when released."""

    def __init__(self, fail: bool = True) -> None:
        self.fail = fail
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.calls = 0

    async def renew_claims(self, message_ids: Sequence[str], now: datetime) -> int:
        self.calls += 1
        self.entered.set()
        if self.fail:
            raise TimeoutError("the store is overloaded")
        await self.release.wait()
        return len(message_ids)


def msg(i: str) -> Message:
    # ClaimsInHand reads a claimed message's id only.
    return cast(Message, SimpleNamespace(id=i))


def lapsed_count() -> float:
    sample = metrics.REGISTRY.get_sample_value(
        "tepat_lease_lapsed_unsent_total", {"channel": "push"}
    )
    return sample or 0.0


def test_a_claim_may_be_sent_until_a_quarter_of_its_lease_remains() -> None:
    assert may_still_send(T0, LEASE, T0 + timedelta(seconds=44))
    assert not may_still_send(T0, LEASE, T0 + timedelta(seconds=45))
    assert not may_still_send(T0, LEASE, T0 + LEASE)


async def test_a_claim_whose_renewals_fail_becomes_unsendable_before_its_lease_ends() -> None:
    clock = FakeClock(T0)
    claims = ClaimsInHand(StuckStore(fail=True), clock, LEASE)
    with claims.held([msg("a"), msg("b")]), claims.held([msg("c")]):
        clock.set(T0 + timedelta(seconds=40))
        assert await claims.renew_due() == 0  # failed
        assert claims.lapsed(["a", "b", "c", "elsewhere"]) == set()
        clock.set(T0 + timedelta(seconds=46))
        before = lapsed_count()
        sendable = {i: claims.may_send(i, "push") for i in ("a", "c", "elsewhere")}
        assert sendable == {"a": False, "c": False, "elsewhere": True}
        assert lapsed_count() - before == 2


async def test_a_renewal_answered_past_the_margin_does_not_keep_the_claim() -> None:
    clock = FakeClock(T0)
    store = StuckStore(fail=False)
    claims = ClaimsInHand(store, clock, LEASE)
    with claims.held([msg("a")]):
        clock.set(T0 + timedelta(seconds=35))
        renewing = asyncio.create_task(claims.renew_due())
        await store.entered.wait()
        clock.set(T0 + timedelta(seconds=50))  # the write is stuck behind a slow store
        store.release.set()
        assert await renewing == 0
        assert claims.lapsed(["a"]) == {"a"}
        assert await claims.renew_due() == 0  # nor is it renewed any more: the sweeper's now
        assert store.calls == 1


async def test_a_renewal_answered_in_time_keeps_the_claim_sendable() -> None:
    clock = FakeClock(T0)
    store = StuckStore(fail=False)
    store.release.set()
    claims = ClaimsInHand(store, clock, LEASE)
    with claims.held([msg("a")]):
        clock.set(T0 + timedelta(seconds=35))
        assert await claims.renew_due() == 1
        clock.set(T0 + timedelta(seconds=75))
        assert claims.lapsed(["a"]) == set()


class Blocking(FakePush):
    """A provider whose first request is answered only when released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        if not self.batches:
            self.batches.append(list(batch))
            self.started.set()
            await self.release.wait()
            return Tickets([TicketOk(f"t-{r.message_id}") for r in batch])
        return await super().send(batch)


async def test_a_request_whose_lease_ran_out_waiting_for_a_connection_is_not_sent() -> None:
    clock = FakeClock(T0)
    claims = ClaimsInHand(StuckStore(fail=True), clock, LEASE)
    push = Blocking()
    push.max_batch = 1
    batcher = PushBatcher(push, clock, concurrency=1)

    def req(message_id: str) -> PushRequest:
        return PushRequest(
            message_id,
            f"ExponentPushToken[{message_id}]",
            "t",
            "b",
            still_sendable=lambda: claims.may_send(message_id, "push"),
        )

    with claims.held([msg("old")]):
        first = batcher.submit([req("first")])
        await push.started.wait()
        clock.set(T0 + timedelta(seconds=30))
        with claims.held([msg("fresh")]):
            waiting = batcher.submit([req("old"), req("fresh")])
            clock.set(T0 + timedelta(seconds=50))  # "old" is past its margin, "fresh" is not
            push.release.set()
            outcomes = await asyncio.gather(*first, *waiting)
    assert isinstance(outcomes[0], TicketOk)
    assert outcomes[1] == Withheld()
    assert isinstance(outcomes[2], TicketOk)
    sent = [r.message_id for b in push.batches for r in b]
    assert sent == ["first", "fresh"]


async def test_an_inbox_message_whose_lease_ran_out_waiting_is_left_to_the_sweeper(
    tmp_path: Path,
) -> None:
    """The other channels' path asks the same before each chunk it hands an adapter:
    not sent by its claimant, then re-driven by the sweeper and delivered once."""
    clock = FakeClock(START)
    settings = make_settings(tmp_path).model_copy(update={"sending_lease_seconds": 60})
    async with open_runtime(settings, clock=clock, push=FakePush()) as rt:
        await rt.store.upsert_user(User("ana", "UTC"))
        now = clock.now()
        m = make_message(
            "test|inbox",
            user_id="ana",
            channel="inbox",
            scheduled_at=now,
            nominal_at=now,
            due_at=now,
        )
        await rt.store.insert_messages([m])
        before = metrics.REGISTRY.get_sample_value(
            "tepat_lease_lapsed_unsent_total", {"channel": "inbox"}
        )

        async def deliver() -> None:
            claimed = await rt.store.claim([m.id], clock.now())
            with rt.dispatcher.claims.held(claimed):
                clock.advance(timedelta(seconds=46))  # it waited; its renewals failed
                await rt.dispatcher.channels.process(claimed)

        await deliver()
        got = await rt.store.get_message(m.id)
        assert got is not None and got.status is MessageStatus.SENDING
        assert await rt.inbox.unread_count("ana") == 0
        after = metrics.REGISTRY.get_sample_value(
            "tepat_lease_lapsed_unsent_total", {"channel": "inbox"}
        )
        assert (after or 0.0) - (before or 0.0) == 1
        clock.advance(timedelta(seconds=15))
        assert await rt.sweeper.sweep_once() == 1
        claimed = await rt.store.claim([m.id], clock.now())
        with rt.dispatcher.claims.held(claimed):
            await rt.dispatcher.channels.process(claimed)
        got = await rt.store.get_message(m.id)
        assert got is not None and got.status is MessageStatus.DELIVERED
        assert await rt.inbox.unread_count("ana") == 1


async def test_an_sms_whose_lease_ran_out_in_the_adapters_rate_limiter_is_not_sent() -> None:
    """The gate before a chunk is not enough for an adapter that paces item by item: at
    a low rate (or behind a Retry-After pause) the chunk's last items wait long after it.
    Each item is asked again after the wait, right before its request."""
    clock = FakeClock(T0)
    claims = ClaimsInHand(StuckStore(fail=True), clock, LEASE)
    sandbox = TwilioSandbox(clock=clock)
    with running_sandbox(sandbox) as server:
        channel = TwilioSmsChannel(
            account_sid=DEFAULT_ACCOUNT_SID,
            auth_token=DEFAULT_AUTH_TOKEN,
            clock=clock,
            from_number="+14155550100",
            base_url=server.base_url,
            rate=1,  # one SMS a second: the second waits in the limiter
        )
        try:

            def item(i: int) -> Outgoing:
                m = make_message(f"sms-{i}", id=f"sms-{i}", channel="sms", body="hello")
                return Outgoing(
                    m,
                    f"+44791112340{i}",
                    still_sendable=lambda: claims.may_send(m.id, "sms"),
                )

            with claims.held([msg("sms-1"), msg("sms-2")]):
                sending = asyncio.create_task(channel.send([item(1), item(2)]))
                await eventually(
                    lambda: clock.sleepers > 0, what="the second SMS waiting for its token"
                )
                clock.advance(timedelta(seconds=46))  # its renewals failed meanwhile
                outcomes = await sending
        finally:
            await channel.close()
    assert isinstance(outcomes[0], Accepted)
    assert outcomes[1] == Withheld()
    assert [r["to"] for r in sandbox.received()] == ["+447911123401"]
