"""Requests from separate batches in hand meet in provider-sized requests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tepat.clock import FakeClock
from tepat.ports.push import PushRequest, SendResult, TicketOk
from tepat.ports.try_again import TryAgain
from tepat.services.sending.push_channel import PushBatcher
from tests.support.fake_push import FakePush


def req(n: int) -> PushRequest:
    return PushRequest(f"m{n}", f"ExponentPushToken[{n}]", "t", "b", {}, "meal")


async def test_requests_submitted_together_share_one_provider_request() -> None:
    push = FakePush()
    batcher = PushBatcher(push, FakeClock())
    groups = [batcher.submit([req(10 * g + i) for i in range(3)]) for g in range(3)]
    outcomes = await asyncio.gather(*(f for group in groups for f in group))
    assert [len(b) for b in push.batches] == [9]
    assert all(isinstance(o, TicketOk) for o in outcomes)


async def test_a_request_goes_as_soon_as_a_connection_is_free() -> None:
    """No window for others to join: at a moderate rate that wait was most of the lateness."""
    push = FakePush()
    batcher = PushBatcher(push, FakeClock())
    batcher.submit([req(1)])
    await asyncio.sleep(0)  # one loop turn: the sender starts, the provider is asked at once
    assert [[r.message_id for r in b] for b in push.batches] == [["m1"]]


async def test_what_is_submitted_while_every_connection_is_busy_goes_together() -> None:
    class Held(FakePush):
        release = asyncio.Event()

        async def send(self, batch: Sequence[PushRequest]) -> SendResult:
            sent = await super().send(batch)
            await self.release.wait()
            return sent

    push = Held()
    batcher = PushBatcher(push, FakeClock(), concurrency=1)
    futures = batcher.submit([req(1)])
    await asyncio.sleep(0)
    for n in (2, 3):  # two batches, on separate loop turns, while the one connection is busy
        futures += batcher.submit([req(n)])
        await asyncio.sleep(0)
    push.release.set()
    await asyncio.gather(*futures)
    assert [[r.message_id for r in b] for b in push.batches] == [["m1"], ["m2", "m3"]]


async def test_a_large_submission_is_cut_at_the_provider_limit() -> None:
    push = FakePush()
    batcher = PushBatcher(push, FakeClock())
    outcomes = await asyncio.gather(*batcher.submit([req(n) for n in range(250)]))
    assert sorted(len(b) for b in push.batches) == [50, 100, 100]
    assert len({o.ticket_id for o in outcomes if isinstance(o, TicketOk)}) == 250


async def test_after_a_hard_stop_every_submission_goes_out_whole() -> None:
    """A sender cancelled before it ever ran (``abandon`` as it started) is not waited for:
    the next submissions start the senders they need, and none is left behind."""
    push = FakePush()
    batcher = PushBatcher(push, FakeClock())
    batcher.submit([req(n) for n in range(150)])  # two senders, not yet run
    batcher.abandon()
    await asyncio.sleep(0)  # the cancelled senders end without taking anything
    first = batcher.submit([req(n) for n in range(200, 300)])
    second = batcher.submit([req(n) for n in range(300, 350)])
    outcomes = await asyncio.wait_for(asyncio.gather(*first, *second), timeout=10)
    assert all(isinstance(o, TicketOk) for o in outcomes) and len(outcomes) == 150
    assert sorted(len(b) for b in push.batches) == [50, 100]


async def test_a_failed_request_answers_each_of_its_submitters() -> None:
    class Refusing(FakePush):
        async def send(self, batch: object) -> TryAgain:
            return TryAgain("429", retry_after=2.0)

    batcher = PushBatcher(Refusing(), FakeClock())
    outcomes = await asyncio.gather(*batcher.submit([req(1), req(2)]))
    assert outcomes == [TryAgain("429", retry_after=2.0)] * 2


async def test_each_kind_has_the_requests_in_flight_its_settings_give() -> None:
    """TEPAT_EXPO_MAX_CONNECTIONS is how many Expo requests go at once (it was a fixed 6)."""
    from tepat.config import Settings
    from tepat.domain.categories import DEFAULT_CATEGORIES, Categories
    from tepat.runtime import push_concurrency
    from tepat.services.sending.push_channel import PushChannel

    class Held(FakePush):
        max_batch = 1

        def __init__(self) -> None:
            super().__init__()
            self.in_flight = self.most = 0
            self.release = asyncio.Event()

        async def send(self, batch: Sequence[PushRequest]) -> SendResult:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await self.release.wait()
            self.in_flight -= 1
            return await super().send(batch)

    settings = Settings(expo_max_connections=3)
    expo, fcm = Held(), Held()
    channel = PushChannel(
        {"expo": expo, "fcm": fcm},
        None,  # type: ignore[arg-type]  # no device fails here
        FakeClock(),
        Categories(DEFAULT_CATEGORIES),
        concurrency=push_concurrency(settings),
    )
    futures = [
        *channel.batchers["expo"].submit([req(n) for n in range(5)]),
        *channel.batchers["fcm"].submit([req(n) for n in range(10, 20)]),
    ]
    for _ in range(1000):  # until every request that may start has (no clock involved)
        if expo.in_flight == 3 and fcm.in_flight == 6:
            break
        await asyncio.sleep(0)
    expo.release.set()
    fcm.release.set()
    await asyncio.gather(*futures)
    assert (expo.most, fcm.most) == (3, 6)
