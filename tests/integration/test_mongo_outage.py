"""The API on MongoDB when its server goes away: 503 with Retry-After within the store's
timeouts (not PyMongo's 30 s, not forever), and answers again when the server is back.

The server is the Mongo-wire server of ``TEPAT_TEST_MONGO_URL``, reached through a TCP
proxy the test cuts (tests/support/tcp_proxy.py): "refuse" is a server that is down,
"blackhole" one that accepts and never answers (the wait only timeoutMS bounds).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient, monitoring

from api.app import create_app
from consumers.worker import handle_delivery
from tepat.adapters.mongo import MongoStore
from tepat.adapters.mongo.client import (
    DEFAULT_TIMEOUTS_MS,
    UNAVAILABLE_ERRORS,
    connect,
    timeout_options,
)
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.batches import Batch
from tepat.ports.broker import Delivery
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime, open_runtime
from tests.api.conftest import ADMIN_KEY, START
from tests.support.fake_push import FakePush
from tests.support.mongo_factory import server_database
from tests.support.tcp_proxy import Mode, TcpProxy, tcp_proxy

# Short waits so a cut answers quickly; the URL's options win over Tepat's defaults.
# directConnection: the server names itself in its hello reply, and without it the
# driver would go to that address, around the proxy.
OPTIONS = (
    "directConnection=true&serverSelectionTimeoutMS=1000&connectTimeoutMS=1000&socketTimeoutMS=2000"
)
# Far above the waits above: reached only if a request hangs on the cut server.
HANG = 20.0


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, TcpProxy, Runtime]]:
    async with server_database("tepat_outage") as url:
        parts = urlsplit(url)
        with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 27017) as proxy:
            through_proxy = urlunsplit(
                parts._replace(netloc=f"127.0.0.1:{proxy.port}", query=OPTIONS)
            )
            settings = Settings(
                database_url=through_proxy,
                broker_url="embedded://",
                admin_api_key=SecretStr(ADMIN_KEY),
            )
            async with open_runtime(settings, clock=FakeClock(START), push=FakePush()) as rt:
                app = create_app(rt, ADMIN_KEY)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(
                    transport=transport,
                    base_url="http://tepat",
                    headers={"X-API-Key": ADMIN_KEY},
                ) as client:
                    yield client, proxy, rt
                # Closing the runtime must not wait on a cut server either.
                proxy.set_mode("forward")


async def put_user(client: httpx.AsyncClient, user_id: str) -> httpx.Response:
    return await asyncio.wait_for(
        client.put(f"/v1/users/{user_id}", json={"timezone": "Europe/Lisbon"}), HANG
    )


@pytest.mark.parametrize("cut", ["refuse", "blackhole"])
async def test_a_cut_server_gets_503_with_retry_after_and_the_api_recovers(
    api: tuple[httpx.AsyncClient, TcpProxy, Runtime], cut: Mode
) -> None:
    client, proxy, _ = api
    assert (await put_user(client, "before")).status_code in (200, 201)

    proxy.set_mode(cut)
    during = await put_user(client, "during")
    assert during.status_code == 503, during.text
    assert during.headers["content-type"].startswith("application/problem+json")
    assert int(during.headers["Retry-After"]) > 0
    assert "store" in during.json()["detail"]

    proxy.set_mode("forward")
    assert (await put_user(client, "after")).status_code in (200, 201)
    got = await asyncio.wait_for(client.get("/v1/users/before"), HANG)
    assert got.status_code == 200, got.text


async def test_a_batch_the_cut_store_cannot_claim_is_handed_back(
    api: tuple[httpx.AsyncClient, TcpProxy, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, proxy, rt = api
    handed_back: list[tuple[Delivery, str]] = []

    async def nack(delivery: Delivery, reason: str) -> None:
        handed_back.append((delivery, reason))

    monkeypatch.setattr(rt.broker, "nack", nack)
    batch = Batch(queue="tepat.mood", due=START, ids=("m-1", "m-2"))
    delivery = Delivery(batch.queue, batch.encode(), "d-1")
    proxy.set_mode("refuse")
    await asyncio.wait_for(handle_delivery(rt, delivery, batch), HANG)
    # AutoReconnect for the pooled connection cut under it, ServerSelectionTimeoutError
    # when none was pooled: both are the store being away, not a bug.
    [(back, reason)] = handed_back
    assert back == delivery
    assert reason in (
        "store unavailable: AutoReconnect",
        "store unavailable: ServerSelectionTimeoutError",
    )


def test_the_urls_own_timeouts_win_over_tepats_defaults() -> None:
    assert timeout_options("mongodb://h/tepat") == {
        "serverSelectionTimeoutMS": 5000,
        "connectTimeoutMS": 5000,
        "socketTimeoutMS": 30000,
    }
    mine = timeout_options("mongodb://h/tepat?servERSelectionTimeoutMS=100&socketTimeoutMS=0")
    assert mine == {"connectTimeoutMS": 5000}


async def test_with_tepats_defaults_a_server_that_is_down_answers_within_seconds() -> None:
    """Not PyMongo's 30 s: a closed port fails at Tepat's server-selection bound (5 s),
    which a client-side operation timeout (timeoutMS) would silently replace."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # nothing listens once the socket is closed
    client = connect(f"mongodb://127.0.0.1:{closed_port}/tepat")
    try:
        with pytest.raises(UNAVAILABLE_ERRORS):
            await asyncio.wait_for(client["tepat"].command("ping"), 15)
    finally:
        await client.close()


class Commands(monitoring.CommandListener):
    """The commands a client sent, by name (PyMongo's command monitoring)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def named(self, name: str) -> list[dict[str, Any]]:
        return [c for c in self.sent if name in c]


async def test_scanning_queries_carry_a_server_time_limit_under_the_socket_timeout() -> None:
    """A page or a count the server could not finish in time is stopped by the server
    (ExecutionTimeout, answered as "unavailable"), not left running after the client
    gave up at its socket timeout, deepening an overload."""
    commands = Commands()
    async with server_database("tepat_maxtime") as url:
        client: Any = AsyncMongoClient(
            url, tz_aware=True, event_listeners=[commands], **timeout_options(url)
        )
        store = MongoStore(url, client=client)
        try:
            await store.open()
            commands.sent.clear()
            await store.list_messages(MessageQuery(user_id="u1", limit=10))
            await store.count_messages()
            await store.oldest_due_unsent(START)
        finally:
            await store.close()
            await client.close()
    scans = commands.named("find") + commands.named("aggregate")
    assert scans, commands.sent
    socket_ms = DEFAULT_TIMEOUTS_MS["socketTimeoutMS"]
    for command in scans:
        assert 0 < command.get("maxTimeMS", 0) < socket_ms, command
