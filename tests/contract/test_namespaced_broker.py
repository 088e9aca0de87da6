"""Apps side by side on one broker (issue 23): two :class:`NamespacedBroker` over one
embedded broker instance, and over one ActiveMQ, beside the default app on the bare
names. The broker contract itself runs on the wrapper through ``namespaced-*`` in
``tests/support/namespaced_broker_factory.py``.

Every app here uses the same queue name, so a wrapper that forgot its namespace would
hand one app another's messages, counters and dead letters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import pytest

from tepat.adapters.embedded_broker import EmbeddedBroker
from tepat.adapters.namespaced_broker import NamespacedBroker, SharedBroker
from tepat.clock import FakeClock
from tests.contract.test_broker_contract import (
    dead_letters_eventually,
    expect_nothing,
    nack_until_dead_lettered,
    next_delivery,
    quiet_period,
    stats_eventually,
)
from tests.support.broker_factories import BROKER_FACTORIES, BrokerHarness
from tests.support.namespaced_broker_factory import unique_namespace


@pytest.fixture(params=["embedded", "activemq"])
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[BrokerHarness]:
    """One broker that the apps of a test share."""
    async with BROKER_FACTORIES[request.param]() as harness:
        yield harness


def apps(harness: BrokerHarness) -> tuple[SharedBroker, NamespacedBroker, NamespacedBroker]:
    """The default app (the bare broker) and apps A and B, in that order."""
    inner = cast(
        SharedBroker, harness.broker
    )  # the harness types the real adapters as plain Brokers
    return (
        inner,
        NamespacedBroker(inner, unique_namespace()),
        NamespacedBroker(inner, unique_namespace()),
    )


async def test_apps_never_receive_each_others_messages(shared: BrokerHarness) -> None:
    queue = shared.unique_queue("meal")
    brokers = apps(shared)
    for i, broker in enumerate(brokers):
        await broker.publish(queue, f"app {i}".encode())

    for i, broker in enumerate(brokers):
        async with broker.consume([queue], prefetch=10) as deliveries:
            delivery = await next_delivery(deliveries)
            assert (delivery.queue, delivery.body) == (queue, f"app {i}".encode())
            await broker.ack(delivery)
            await expect_nothing(deliveries, quiet_period(shared))


async def test_one_apps_stats_and_dead_letters_do_not_show_anothers(shared: BrokerHarness) -> None:
    queue = shared.unique_queue("poison")
    default, a, b = apps(shared)
    await a.publish(queue, b"poison")
    async with a.consume([queue], prefetch=1) as deliveries:
        await nack_until_dead_lettered(a, shared, deliveries, await next_delivery(deliveries))
    await b.publish(queue, b"waiting")
    await b.publish(queue, b"later", delay_seconds=60)

    [dead] = await dead_letters_eventually(a, queue, 1)
    assert (dead.queue, dead.body) == (queue, b"poison")
    await stats_eventually(a, queue, ready=0, scheduled=0, in_flight=0, dead_letters=1)
    assert [s.queue for s in await a.stats([queue])] == [queue]

    assert await b.dead_letters([queue]) == []
    await stats_eventually(b, queue, ready=1, scheduled=1, in_flight=0, dead_letters=0)
    assert [s.queue for s in await b.stats([queue])] == [queue]

    assert await default.dead_letters([queue]) == []
    await stats_eventually(default, queue, ready=0, scheduled=0, in_flight=0, dead_letters=0)

    # another app cannot replay A's letter, even knowing its id
    assert not await b.replay_dead_letter(dead.id)
    assert await a.dead_letters([queue]) == [dead]
    # A's letter goes back to A's queue, not to B's nor to the default app's
    assert await a.replay_dead_letter(dead.id)
    async with a.consume([queue], prefetch=1) as deliveries:
        replayed = await next_delivery(deliveries)
        assert (replayed.queue, replayed.body) == (queue, b"poison")
        await a.ack(replayed)
    await stats_eventually(b, queue, ready=1, scheduled=1, dead_letters=0)
    await stats_eventually(default, queue, ready=0, scheduled=0, dead_letters=0)


async def test_an_app_cannot_ack_another_apps_delivery(shared: BrokerHarness) -> None:
    queue = shared.unique_queue("ack")
    _, a, b = apps(shared)
    await a.publish(queue, b"a's")

    async with a.consume([queue], prefetch=1) as deliveries:
        delivery = await next_delivery(deliveries)
        await b.ack(delivery)
        await b.nack(delivery, "not b's to nack")
        await stats_eventually(a, queue, in_flight=1, ready=0, scheduled=0, dead_letters=0)
        # leaving unacked: A's message comes back to A
    async with a.consume([queue], prefetch=1) as deliveries:
        again = await next_delivery(deliveries)
        assert (again.queue, again.body, again.redelivered) == (queue, b"a's", True)
        await a.ack(again)
    await stats_eventually(a, queue, in_flight=0, ready=0, scheduled=0, dead_letters=0)


@pytest.mark.parametrize(
    "namespace", ["", "app.b", "app..", ".app.", "app b.", "a,b.", "app.>.", "app.*.", "DLQ.app."]
)
def test_a_namespace_that_could_meet_other_queues_is_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="invalid broker namespace"):
        NamespacedBroker(EmbeddedBroker(FakeClock()), namespace)


def test_the_lead_is_the_inner_brokers() -> None:
    # the doctor's scheduler probe publishes net of it
    assert (
        NamespacedBroker(EmbeddedBroker(FakeClock(), lead_seconds=0.7), "app.b.").lead_seconds
        == 0.7
    )
