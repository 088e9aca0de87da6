"""A real ActiveMQ broker over STOMP, registered as ``activemq``.

Runs only where ``TEPAT_TEST_STOMP_URL`` names a broker started from
``deploy/activemq`` (``scripts/activemq.sh start BASE``); otherwise every test
that asks for it is skipped with the reason. Time is real: ``advance`` only
returns, and each test uses fresh queue names so runs on a shared broker never
see each other's messages.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest

from tepat.adapters.stomp import StompBroker
from tepat.clock import SystemClock
from tepat.ports.broker import RedeliveryPolicy
from tests.support.broker_factories import BROKER_FACTORIES, BrokerHarness

STOMP_URL_ENV = "TEPAT_TEST_STOMP_URL"
# The production policy scaled down to real-time test lengths (delays of 0.25 s,
# 0.5 s, 1 s, then 1.5 s; dead-lettered after 8 s of failing), so a test can
# nack through a whole "outage" in seconds.
REDELIVERY = RedeliveryPolicy(base_seconds=0.25, cap_seconds=1.5, retry_age=timedelta(seconds=8))


def stomp_url() -> str:
    """The broker URL from the environment, or skip the calling test."""
    url = os.environ.get(STOMP_URL_ENV, "").strip()
    if not url:
        pytest.skip(
            f"{STOMP_URL_ENV} is not set: start ActiveMQ with `scripts/activemq.sh start .broker`"
            f" and set {STOMP_URL_ENV}=stomp://127.0.0.1:61613"
        )
    return url


@asynccontextmanager
async def activemq_harness() -> AsyncIterator[BrokerHarness]:
    clock = SystemClock()
    broker = StompBroker(stomp_url(), clock=clock, redelivery=REDELIVERY)
    await broker.connect()
    try:
        yield BrokerHarness(broker=broker, name="activemq", clock=clock, redelivery=REDELIVERY)
    finally:
        await broker.close()


BROKER_FACTORIES["activemq"] = activemq_harness
