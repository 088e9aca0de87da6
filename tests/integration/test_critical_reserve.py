"""A critical message goes at once while other traffic floods an Expo project at five times
its ceiling: through the push channel, the Expo client and the sandbox enforcing the limit.

Without a reserve the same critical message waits behind the flood's requests; with one
(``TEPAT_CRITICAL_RESERVE``) the flood is held to the rest of the rate and the critical
message finds its share free. The same for an SMS through Twilio's client, whose
connection other traffic held at its share must not keep.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest

from tepat.adapters.expo_push import ExpoPushProvider
from tepat.adapters.twilio_sms import TwilioSmsChannel
from tepat.clock import FakeClock
from tepat.domain.categories import DEFAULT_CATEGORIES, Categories
from tepat.domain.models import Device
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Withheld
from tepat.sandbox.expo import ExpoSandbox
from tepat.services.sending.push_channel import PushChannel
from tests.support.messages import make_message

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
CEILING = 100.0
WAVE_SECONDS = 0.1
STEP = 0.01
CRITICAL_AT = 1.0  # seconds into the flood


@dataclass
class Run:
    critical_lateness: float
    bulk_sent: int
    refused: int  # the sandbox's 429s


def outgoing(n: int, **fields: object) -> Outgoing:
    m = make_message(f"k{n}", user_id=f"u{n}", **fields)
    device = Device(f"u{n}", "phone", f"ExponentPushToken[{n}]")
    return Outgoing(m, f"u{n}", devices=(device,))


async def flood_with_one_critical(reserve: float, **critical: object) -> Run:
    clock = FakeClock(START)
    sandbox = ExpoSandbox(clock=clock, receipt_delay_seconds=900)
    sandbox.set_rate_limit(CEILING)
    wave = round(5 * CEILING * WAVE_SECONDS)  # 5x the ceiling
    # In this event loop (no server thread): the clock moves only between steps.
    async with ExpoPushProvider(
        "http://expo.test",
        clock=clock,
        rate_limit=CEILING,
        critical_reserve=reserve,
        transport=httpx.ASGITransport(app=sandbox.app),
    ) as provider:
        categories = Categories(DEFAULT_CATEGORIES)
        channel = PushChannel({"expo": provider}, None, clock, categories)  # type: ignore[arg-type]
        sends: list[asyncio.Task[list[ChannelOutcome | Withheld]]] = []
        critical_task: asyncio.Task[list[ChannelOutcome | Withheld]] | None = None
        lateness: float | None = None
        waves = 0
        elapsed = 0.0
        while lateness is None or elapsed < CRITICAL_AT + 1:
            while waves * WAVE_SECONDS <= elapsed:
                items = [outgoing(waves * wave + i) for i in range(wave)]
                sends.append(asyncio.create_task(channel.send(items)))
                waves += 1
            if critical_task is None and elapsed >= CRITICAL_AT:
                critical_task = asyncio.create_task(channel.send([outgoing(-1, **critical)]))
            # Real time for the push batcher's gathering window (5 ms).
            await asyncio.sleep(0.006)
            if critical_task is not None and critical_task.done() and lateness is None:
                assert all(isinstance(o, Accepted) for o in critical_task.result())
                lateness = elapsed - CRITICAL_AT
            clock.advance(STEP)
            elapsed = (clock.now() - START).total_seconds()
        bulk_sent = len(sandbox.received()) - 1
        channel.abandon()
        for task in sends:
            task.cancel()
        await asyncio.gather(*sends, return_exceptions=True)
    return Run(lateness, bulk_sent, sandbox.stats()["too_many_requests"])


@pytest.mark.parametrize("critical", [{"priority": "critical"}, {"category": "safety"}])
async def test_a_critical_message_goes_at_once_through_a_flood_at_five_times_the_ceiling(
    critical: dict[str, str],
) -> None:
    run = await flood_with_one_critical(0.2, **critical)
    assert run.critical_lateness <= 0.2, run  # a step or two of the fake clock
    # The flood went at its share (80/s for 2 s, plus a burst) and nothing was refused.
    assert 0.8 * CEILING * 1.5 <= run.bulk_sent <= 0.8 * CEILING * (CRITICAL_AT + 1) + 100, run
    assert run.refused <= 1, run


async def test_without_a_reserve_the_critical_message_waits_behind_the_flood() -> None:
    run = await flood_with_one_critical(0.0, priority="critical")
    assert run.critical_lateness > 1.0, run


@pytest.mark.parametrize("reserve", [0.2, 0.0])
async def test_a_critical_sms_does_not_wait_for_a_connection_behind_the_flood(
    reserve: float,
) -> None:
    # One connection: other traffic held at its share must not hold it while it waits.
    clock = FakeClock(START)
    created = httpx.Response(201, json={"sid": "SM1"})
    sms = TwilioSmsChannel(
        transport=httpx.MockTransport(lambda request: created),
        account_sid="AC" + "0" * 32,
        auth_token="t" * 32,
        clock=clock,
        from_number="+14155550100",
        rate=10,
        critical_reserve=reserve,
        max_connections=1,
    )
    flood = asyncio.create_task(sms.send([sms_to(n) for n in range(50)]))  # 5 s of the rate
    for _ in range(50):  # half a second in
        await asyncio.sleep(0)
        clock.advance(STEP)
    critical = asyncio.create_task(sms.send([sms_to(-1, priority="critical")]))
    waited = 0.0
    while not critical.done():
        for _ in range(10):
            await asyncio.sleep(0)
        clock.advance(STEP)
        waited += STEP
    assert critical.result() == [Accepted("SM1")]
    if reserve:
        assert waited <= 2 * STEP
    else:
        assert waited > 1.0  # behind the flood's reservations
    flood.cancel()
    await asyncio.gather(flood, return_exceptions=True)
    await sms.close()


def sms_to(n: int, **fields: object) -> Outgoing:
    return Outgoing(make_message(f"s{n}", channel="sms", **fields), "+14155550199")
