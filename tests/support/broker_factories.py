"""Registry of broker harnesses for the contract suite: name -> async context manager factory.

A factory yields a :class:`BrokerHarness`: the broker under test plus what a
test needs to run the same assertions on fake time (embedded broker) and on
real time (ActiveMQ). A factory whose backing service is not configured calls
``pytest.skip(...)`` inside itself, so its tests show up as skipped, not missing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from tepat.clock import Clock, FakeClock, SystemClock
from tepat.ports.broker import Broker, RedeliveryPolicy


@dataclass
class BrokerHarness:
    """The broker under test and the means to let time pass for it.

    ``clock`` is the clock the broker runs on: a :class:`FakeClock` for the
    embedded broker, the default :class:`SystemClock` for a real broker.
    ``redelivery`` is the nack policy the broker is configured with: the
    production default on fake time, a scaled-down one where time is real.
    """

    broker: Broker
    name: str
    clock: Clock = field(default_factory=SystemClock)
    redelivery: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)

    @property
    def real_time(self) -> bool:
        """True when time passes by itself and ``advance`` only returns."""
        return not isinstance(self.clock, FakeClock)

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for the broker.

        On fake time this moves the clock; on real time it does nothing, because
        the test then waits on a condition with a timeout while real time passes.
        """
        if isinstance(self.clock, FakeClock):
            self.clock.advance(seconds)
            # Give woken sleepers a few loop turns to act on the new time.
            for _ in range(3):
                await asyncio.sleep(0)

    def unique_queue(self, name: str) -> str:
        """A queue name no other test (or earlier run on a shared broker) uses."""
        return f"{name}.{uuid.uuid4().hex[:12]}"


BrokerFactory = Callable[[], AbstractAsyncContextManager[BrokerHarness]]
BROKER_FACTORIES: dict[str, BrokerFactory] = {}

# Each adapter registers itself from its own module; imported last so that those
# modules can import the names above. activemq skips unless TEPAT_TEST_STOMP_URL is set.
# namespaced_broker_factory wraps the adapters registered before it.
from tests.support import (  # noqa: E402
    activemq_factory,  # noqa: F401
    embedded_broker_factory,  # noqa: F401
    namespaced_broker_factory,  # noqa: F401
)
