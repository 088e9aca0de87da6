"""The embedded broker on a FakeClock, registered as ``embedded``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tepat.adapters.embedded_broker import EmbeddedBroker
from tepat.clock import FakeClock
from tests.support.broker_factories import BROKER_FACTORIES, BrokerHarness

MAX_REDELIVERIES = 3


@asynccontextmanager
async def embedded_harness() -> AsyncIterator[BrokerHarness]:
    clock = FakeClock()
    broker = EmbeddedBroker(clock, max_redeliveries=MAX_REDELIVERIES)
    await broker.connect()
    try:
        yield BrokerHarness(
            broker=broker, name="embedded", clock=clock, max_redeliveries=MAX_REDELIVERIES
        )
    finally:
        await broker.close()


BROKER_FACTORIES["embedded"] = embedded_harness
