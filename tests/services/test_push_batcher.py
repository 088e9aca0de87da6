"""Requests from separate batches in hand meet in provider-sized requests."""

from __future__ import annotations

import asyncio

from tepat.clock import FakeClock
from tepat.ports.push import PushRequest, TicketOk
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


async def test_a_large_submission_is_cut_at_the_provider_limit() -> None:
    push = FakePush()
    batcher = PushBatcher(push, FakeClock())
    outcomes = await asyncio.gather(*batcher.submit([req(n) for n in range(250)]))
    assert sorted(len(b) for b in push.batches) == [50, 100, 100]
    assert len({o.ticket_id for o in outcomes if isinstance(o, TicketOk)}) == 250


async def test_a_failed_request_answers_each_of_its_submitters() -> None:
    class Refusing(FakePush):
        async def send(self, batch: object) -> TryAgain:
            return TryAgain("429", retry_after=2.0)

    batcher = PushBatcher(Refusing(), FakeClock())
    outcomes = await asyncio.gather(*batcher.submit([req(1), req(2)]))
    assert outcomes == [TryAgain("429", retry_after=2.0)] * 2
