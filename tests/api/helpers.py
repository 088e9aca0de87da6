"""Setting the scene through the API (as an app backend would) and through the broker."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from api.app import create_app
from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, ADMIN_KEY

TOKEN = "ExponentPushToken[alice-phone-1]"


def reminder_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "category": "meal",
        "label": "lunch",
        "local_time": "12:00",
        "title": "Lunch",
        "body": "Time for lunch",
    }
    body.update(overrides)
    return body


def notification_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "idempotency_key": "k-1",
        "category": "custom",
        "title": "Hello",
        "body": "A one-off",
        "data": {"screen": "home"},
    }
    body.update(overrides)
    return body


@contextlib.asynccontextmanager
async def api_with(rt: Runtime, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The API over ``rt`` with these settings changed."""
    changed = dataclasses.replace(rt, settings=rt.settings.model_copy(update=settings))
    transport = httpx.ASGITransport(app=create_app(changed, ADMIN_KEY))
    async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
        yield c


async def ok(response: httpx.Response) -> httpx.Response:
    assert response.is_success, response.text
    return response


async def create_user(
    client: httpx.AsyncClient, user_id: str, timezone: str = "Asia/Jakarta", **extra: Any
) -> dict[str, Any]:
    r = await ok(
        await client.put(
            f"/v1/users/{user_id}", json={"timezone": timezone, **extra}, headers=ADMIN
        )
    )
    return dict(r.json())


async def scene(client: httpx.AsyncClient) -> None:
    """alice (with a device and a reminder) and bob."""
    await create_user(client, "alice")
    await create_user(client, "bob", "Europe/London")
    await ok(
        await client.put(
            "/v1/users/alice/devices/phone-1", json={"push_token": TOKEN}, headers=ADMIN
        )
    )
    await ok(
        await client.put("/v1/users/alice/reminders/lunch", json=reminder_body(), headers=ADMIN)
    )


async def make_broker_dead_letter(rt: Runtime) -> str:
    """Publish an unreadable batch and nack it past the retry age; returns its id.

    The fake clock moves a whole retry age after the first nack, so the second
    nack dead-letters it (2 attempts).
    """
    assert isinstance(rt.clock, FakeClock)
    clock = rt.clock
    queue = rt.categories.queues()[0]
    await rt.broker.publish(queue, b"not a batch")

    async def nack_until_dead() -> None:
        async with rt.broker.consume([queue], prefetch=1) as deliveries:
            async for delivery in deliveries:
                await rt.broker.nack(delivery, "unreadable")
                if await rt.broker.dead_letters([queue]):
                    return
                clock.advance(rt.settings.broker_retry_age_seconds)

    await asyncio.wait_for(nack_until_dead(), timeout=5)
    (dead,) = await rt.broker.dead_letters([queue])
    return dead.id


async def drain_due(rt: Runtime, idle_seconds: float = 0.2) -> int:
    """Hand every batch that is due now to the consumer code path; returns how many.

    Stops once no delivery arrives within ``idle_seconds`` of real time (the fake
    clock does not move, so nothing else becomes due meanwhile).
    """
    from consumers.worker import handle_delivery

    await rt.outbox.flush()  # what the scheduler's outbox loop would have published by now
    handled = 0
    async with rt.broker.consume(rt.queues, prefetch=100) as deliveries:
        iterator = deliveries.__aiter__()
        while True:
            try:
                delivery = await asyncio.wait_for(iterator.__anext__(), idle_seconds)
            except TimeoutError:
                return handled
            await handle_delivery(rt, delivery)
            handled += 1


def overlap_writes(monkeypatch: pytest.MonkeyPatch, rt: Runtime, method: str, n: int) -> None:
    """The worst interleaving of ``n`` concurrent requests: all of them read the old state
    before any writes (``rt.store.<method>`` waits for all ``n``), then each writes only
    after the previous writer's request has finished (its re-plan included)."""
    real_write = getattr(rt.store, method)
    writers: list[
        asyncio.Task[Any]
    ] = []  # the ASGI transport runs each request in its caller's task
    all_in = asyncio.Event()

    async def gated(*args: Any, **kwargs: Any) -> Any:
        if len(writers) < n:
            me = asyncio.current_task()
            assert me is not None
            writers.append(me)
            turn = len(writers)
            if turn == n:
                all_in.set()
            await asyncio.wait_for(all_in.wait(), timeout=5)
            if turn > 1:
                await asyncio.wait_for(asyncio.wait([writers[turn - 2]]), timeout=5)
        return await real_write(*args, **kwargs)

    monkeypatch.setattr(rt.store, method, gated)
