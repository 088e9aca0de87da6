"""Every push provider as an app drives it, on both brokers: a device of each kind
registered through the API gets its reminder and its one-off in that provider's sandbox
(the consumer and the outbox loop running as their processes run them), and the
provider's dead-token answer shows in ``GET .../devices`` as the device deactivated,
after which nothing more is sent to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from consumers.worker import run_consumer
from scheduler.jobs import run_outbox
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.runtime import Runtime, open_runtime
from tests.api.conftest import ADMIN, ADMIN_KEY, START, make_settings
from tests.api.helpers import create_user, notification_body, ok, reminder_body
from tests.support import provider_sandboxes as providers
from tests.support.waiting import eventually, stays_false

pytestmark = providers.EVERY_KIND_AND_BROKER
ALICE = "/v1/users/alice"


@dataclass
class App:
    client: httpx.AsyncClient
    rt: Runtime
    clock: FakeClock
    provider: providers.ProviderSandbox


@pytest.fixture
async def app(kind: str, broker: str, tmp_path: Path) -> AsyncIterator[App]:
    clock = FakeClock(START)
    with providers.served(kind, clock, tmp_path) as provider:
        on = providers.on_broker(broker, clock)
        own_broker = on.pop("broker", None)
        settings = Settings.model_validate(
            {**make_settings(tmp_path).model_dump(exclude_unset=True), **provider.settings, **on}
        )
        async with open_runtime(settings, clock=clock, broker=own_broker) as rt:
            stop = asyncio.Event()
            loops = [
                asyncio.create_task(run_consumer(rt, stop)),
                asyncio.create_task(run_outbox(rt, stop)),
            ]
            try:
                await providers.subscribed(rt.broker)
                transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                    yield App(c, rt, clock, provider)
            finally:
                stop.set()
                await asyncio.gather(*loops, return_exceptions=True)


async def test_an_app_registers_a_device_and_its_notifications_arrive(app: App) -> None:
    await create_user(app.client, "alice", timezone="UTC")
    token = app.provider.token("alice-phone")
    device = {"push_token": token, "kind": app.provider.kind}
    await ok(await app.client.put(f"{ALICE}/devices/phone", json=device, headers=ADMIN))

    # A reminder a minute from now arrives at its minute, not before.
    at = START + timedelta(minutes=1)
    body = reminder_body(local_time=at.strftime("%H:%M"))
    await ok(await app.client.put(f"{ALICE}/reminders/lunch", json=body, headers=ADMIN))
    app.clock.set(at - timedelta(seconds=1))
    assert await stays_false(lambda: bool(app.provider.arrivals(token)))
    app.clock.set(at)
    await eventually(lambda: bool(app.provider.arrivals(token)), what="the reminder")
    assert app.provider.arrivals(token) == [at]

    # A one-off for now arrives now.
    one_off = notification_body()
    await ok(await app.client.post(f"{ALICE}/notifications", json=one_off, headers=ADMIN))
    await eventually(lambda: len(app.provider.arrivals(token)) == 2, what="the one-off")

    # The provider's dead-token answer deactivates the device, as the app sees it.
    app.provider.kill(token)
    body = notification_body(idempotency_key="k-2")
    await ok(await app.client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))

    async def deactivated() -> bool:
        listed = (await app.client.get(f"{ALICE}/devices", headers=ADMIN)).json()["devices"]
        return [(d["kind"], d["active"]) for d in listed] == [(app.provider.kind, False)]

    await eventually(deactivated, what="the device deactivated")
    body = notification_body(idempotency_key="k-3")
    made = await ok(await app.client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))

    async def skipped() -> bool:
        listed = (await app.client.get(f"{ALICE}/messages", headers=ADMIN)).json()["messages"]
        return [m["status"] for m in listed if m["id"] == made.json()["id"]] == ["skipped"]

    await eventually(skipped, what="the next one skipped")
    assert len(app.provider.arrivals(token)) == 2
