"""The embedded broker on a FakeClock, production nack policy, registered as ``embedded``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tepat.adapters.embedded_broker import EmbeddedBroker
from tepat.clock import FakeClock
from tepat.ports.broker import RedeliveryPolicy
from tests.support.broker_factories import BROKER_FACTORIES, BrokerHarness


@asynccontextmanager
async def embedded_harness() -> AsyncIterator[BrokerHarness]:
    clock = FakeClock()
    redelivery = RedeliveryPolicy()
    broker = EmbeddedBroker(clock, redelivery=redelivery)
    await broker.connect()
    try:
        yield BrokerHarness(broker=broker, name="embedded", clock=clock, redelivery=redelivery)
    finally:
        await broker.close()


BROKER_FACTORIES["embedded"] = embedded_harness
