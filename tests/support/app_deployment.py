"""A deployment serving several apps, in this process: ``run_parts`` with every part of
``tepat serve`` (consumers, scheduler, the HTTP API on a port), the Expo sandbox over HTTP,
on real time, on the embedded broker or ActiveMQ (queues of the test's own).

The test talks to it as an operator and the apps' backends would, over HTTP; it reads the
apps' stores through :attr:`Deployment.apps` (the process's own :class:`Apps`).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import httpx
from pydantic import SecretStr

from tepat import runtime
from tepat.clock import Clock
from tepat.config import Settings
from tepat.domain.categories import DEFAULT_CATEGORIES
from tepat.domain.models import Message
from tepat.ports.broker import Broker
from tepat.ports.repositories.messages import MessageQuery
from tepat.processes import CONSUMER_PARTS, SCHEDULER_PARTS, Part, _http_part, run_parts
from tepat.runtime import Runtime, make_broker
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import running_sandbox
from tepat.tenancy import Apps
from tests.support.activemq_factory import stomp_url
from tests.support.waiting import eventually

OPERATOR_KEY = "apps-operator-key-0123456789abcdef"
DEFAULT_TOKEN = "default-expo-token"
# Real time: the apps are re-read this often, receipts polled soon after each send.
REFRESH_SECONDS = 0.2
UNSUBSCRIBE_SECRET = "deployment-unsubscribe-secret-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_settings(broker: str, prefix: str) -> dict[str, Any]:
    """The embedded broker, or ActiveMQ with push queues of this test's own, named with
    ``prefix`` (the shared broker holds other runs' queues; an app's queues are these in
    its namespace)."""
    if broker == "embedded":
        return {"broker_url": "embedded://"}
    queues = {p.name: {"queue": f"{prefix}{p.name}"} for p in DEFAULT_CATEGORIES}
    return {"broker_url": stomp_url(), "categories": queues}


def _own_queues_only(prefix: str) -> Callable[[Settings, Clock], Broker]:
    """``make_broker`` whose consumers take this test's queues only: its push queues
    (``prefix``) and its apps' (named after them, of this test's own: :func:`app_id_for`).
    The shared broker's fixed queues (``tepat.webhooks``, ``tepat.push.critical`` …)
    hold other tests' batches, which a consumer here would take and drop."""

    def make(settings: Settings, clock: Clock) -> Broker:
        broker = make_broker(settings, clock)
        consume = broker.consume

        def ours(queues: Sequence[str], prefetch: int) -> Any:
            return consume([q for q in queues if q.startswith((prefix, "app."))], prefetch)

        broker.consume = ours  # type: ignore[method-assign]
        return broker

    return make


def app_id_for(broker: str, name: str) -> str:
    """``name`` on the embedded broker; on a shared ActiveMQ, one no other run uses (an
    app's queues are named after it)."""
    return name if broker == "embedded" else f"{name}-{uuid.uuid4().hex[:6]}"


@dataclass
class Deployment:
    url: str
    apps: Apps
    expo: ExpoSandbox
    expo_url: str
    settings: Settings
    operator: httpx.AsyncClient

    def runtime(self, app_id: str) -> Runtime:
        rt = self.apps.runtime(app_id)
        assert rt is not None, f"app {app_id} is not served"
        return rt

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"X-API-Key": key}, timeout=30)

    async def create_app(self, app_id: str, **settings: Any) -> str:
        """The app, through ``/v1/admin/apps``; its first admin key."""
        r = await self.operator.post(
            "/v1/admin/apps", json={"app_id": app_id, "name": app_id, "settings": settings}
        )
        assert r.status_code == 201, r.text
        return str(r.json()["admin_key"]["key"])

    async def patch_app(self, app_id: str, **body: Any) -> dict[str, Any]:
        r = await self.operator.patch(f"/v1/admin/apps/{app_id}", json=body)
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    async def messages(self, app_id: str, user_id: str) -> list[Message]:
        page = await self.runtime(app_id).store.list_messages(MessageQuery(user_id=user_id))
        return list(page.items)

    def received(self, token: str) -> list[dict[str, Any]]:
        return [r for r in self.expo.received() if r["to"] == token and r["status"] == "ok"]


async def add_user_with_device(client: httpx.AsyncClient, user_id: str, push_token: str) -> None:
    r = await client.put(f"/v1/users/{user_id}", json={"timezone": "UTC"})
    assert r.status_code in (200, 201), r.text
    r = await client.put(f"/v1/users/{user_id}/devices/phone", json={"push_token": push_token})
    assert r.status_code in (200, 201), r.text


async def send_one_off(client: httpx.AsyncClient, user_id: str, key: str, body: str) -> str:
    r = await client.post(
        f"/v1/users/{user_id}/notifications",
        json={"idempotency_key": key, "category": "custom", "title": "t", "body": body},
    )
    assert r.status_code in (200, 201), r.text
    return str(r.json()["id"])


@asynccontextmanager
async def deployment(
    tmp_path: Path, broker: str, *, parts: list[Part] | None = None, **overrides: Any
) -> AsyncIterator[Deployment]:
    """``tepat serve``'s parts (or ``parts``) for the default app (its Expo token
    DEFAULT_TOKEN) and every app the registry holds, until the block ends (then stopped
    as SIGTERM stops them)."""
    expo = ExpoSandbox()
    with running_sandbox(expo) as served, ExitStack() as stack:
        port, prefix = _free_port(), f"t{uuid.uuid4().hex[:8]}."
        settings = Settings.model_validate(
            {
                "database_url": f"sqlite:///{tmp_path}/tepat.db",
                "expo_url": served.base_url,
                "expo_access_token": SecretStr(DEFAULT_TOKEN),
                "admin_api_key": SecretStr(OPERATOR_KEY),
                "apps_refresh_seconds": REFRESH_SECONDS,
                "receipt_delay_seconds": 0.2,
                "receipt_poll_interval_seconds": 0.2,
                "outbox_interval_seconds": 0.2,
                "sweep_interval_seconds": 1.0,
                # Where links and provider callbacks lead: this process's API.
                "public_url": f"http://127.0.0.1:{port}",
                "unsubscribe_secret": SecretStr(UNSUBSCRIBE_SECRET),
                "metrics_port": 0,
                **broker_settings(broker, prefix),
                **overrides,
            }
        )
        served_apps: asyncio.Future[Apps] = asyncio.get_running_loop().create_future()
        done = asyncio.Event()

        async def held(apps: Apps, stop: asyncio.Event) -> None:
            served_apps.set_result(apps)
            await done.wait()  # its end stops the process's parts, as SIGTERM would

        if broker != "embedded":
            stack.enter_context(patch.object(runtime, "make_broker", _own_queues_only(prefix)))
        process = asyncio.create_task(
            run_parts(
                settings,
                [*CONSUMER_PARTS, *SCHEDULER_PARTS] if parts is None else parts,
                once=[_http_part("127.0.0.1", port, OPERATOR_KEY), held],
                restore_embedded=broker == "embedded",
            )
        )
        url = f"http://127.0.0.1:{port}"
        operator = httpx.AsyncClient(base_url=url, headers={"X-API-Key": OPERATOR_KEY}, timeout=30)
        try:
            started: list[asyncio.Future[Any]] = [process, served_apps]
            await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
            if process.done():
                process.result()  # the start failed: its error

            async def up() -> bool:
                try:
                    return (await operator.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(up, timeout=30, what="the API to start")
            yield Deployment(url, served_apps.result(), expo, served.base_url, settings, operator)
        finally:
            await operator.aclose()
            done.set()
            await asyncio.wait_for(process, timeout=60)  # a drain that hangs fails the test
