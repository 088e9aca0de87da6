"""Fixtures that run each contract suite against every adapter.

Each adapter has its own factory module in ``tests/support`` so adapters can be
added without touching this file's neighbours.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tepat.ports.broker import Broker
from tepat.ports.store import Store
from tests.support.broker_factories import BROKER_FACTORIES, BrokerHarness
from tests.support.store_factories import STORE_FACTORIES


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Store]:
    factory = STORE_FACTORIES[request.param]
    async with factory(tmp_path_factory.mktemp(request.param)) as s:
        yield s


@pytest.fixture(params=sorted(BROKER_FACTORIES))
async def broker_harness(request: pytest.FixtureRequest) -> AsyncIterator[BrokerHarness]:
    async with BROKER_FACTORIES[request.param]() as harness:
        yield harness


@pytest.fixture
def broker(broker_harness: BrokerHarness) -> Broker:
    """The broker under test; ask for ``broker_harness`` too to move time or name queues."""
    return broker_harness.broker
