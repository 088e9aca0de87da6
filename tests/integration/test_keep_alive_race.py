"""A pooled connection reused just as the server closes it for being idle.

The request goes out whole and no answer comes: honestly "maybe sent", which closed 100
notifications ``outcome_unknown`` in a bench run under load. The client's keep-alive
expiry (``KEEPALIVE_EXPIRY_SECONDS``) keeps it out of that race: it lets go of an idle
connection well before the servers it talks to would close it.

The race is made exact with one clock for both sides, moved by the test: httpcore's
keep-alive expiry reads it, and so does the server's idle timer, which is modelled firing
as a request arrives on a connection idle for its timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from httpcore._async import http11

from tepat.adapters import http_pool
from tepat.adapters.expo_outcomes import KEEPALIVE_EXPIRY_SECONDS
from tepat.adapters.expo_push import ExpoPushProvider
from tepat.adapters.webhook_target import GuardedTransport
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.webhooks import parse_target_policy
from tepat.ports.push import PushRequest, Tickets
from tepat.ports.try_again import TryAgain
from tepat.sandbox.runner import quiet_config
from tests.support.waiting import eventually

TICKETS = b'{"data": [{"status": "ok", "id": "ticket-1"}]}'
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(TICKETS),
    TICKETS,
)
HTTPX_DEFAULT_EXPIRY = 5.0
# The idle timeouts of the servers Tepat runs: the sandboxes' (uvicorn's default) and its API's.
SERVER_IDLE_TIMEOUTS = {
    "sandbox": quiet_config(None).timeout_keep_alive,
    "api": Settings.model_fields["http_keep_alive_seconds"].default,
}


class PoolClock:
    """``time`` as httpcore's HTTP/1.1 connections see it: only ``monotonic``, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class IdleClosingServer:
    """HTTP/1.1 with keep-alive that closes a connection idle for ``idle_timeout`` seconds
    of ``clock``. A request arriving on a connection idle that long meets the timer
    firing: it is read whole (so the client's write completes, as in the bench run) and
    the connection closed unanswered."""

    def __init__(self, clock: PoolClock, idle_timeout: float) -> None:
        self.clock = clock
        self.idle_timeout = idle_timeout
        self.connections = 0
        self.answered = 0
        self.dropped = 0
        self.closed = 0
        self._open: set[asyncio.StreamWriter] = set()

    def close_idle_now(self) -> None:
        """The idle timer firing with no request on the way (the test calls it between
        requests)."""
        for writer in self._open:
            writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        idle_since: float | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(content_length(head))
                if idle_since is not None and self.clock.now - idle_since >= self.idle_timeout:
                    self.dropped += 1
                    return
                writer.write(ANSWER)
                await writer.drain()
                self.answered += 1
                idle_since = self.clock.now
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client closed it
        finally:
            self._open.discard(writer)
            writer.close()
            await writer.wait_closed()
            self.closed += 1


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.fixture
def pool_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[PoolClock]:
    clock = PoolClock()
    monkeypatch.setattr(http11, "time", clock)
    yield clock


async def idle_closing_server(
    clock: PoolClock, idle_timeout: float
) -> tuple[IdleClosingServer, asyncio.Server]:
    server = IdleClosingServer(clock, idle_timeout)
    return server, await asyncio.start_server(server.serve, "127.0.0.1", 0)


def url_of(listening: asyncio.Server) -> str:
    host, port = listening.sockets[0].getsockname()[:2]
    return f"http://{host}:{port}"


@pytest.fixture
async def expo(pool_clock: PoolClock) -> AsyncIterator[tuple[IdleClosingServer, str]]:
    server, listening = await idle_closing_server(pool_clock, SERVER_IDLE_TIMEOUTS["sandbox"])
    async with listening:
        yield server, url_of(listening)


def push(n: int) -> list[PushRequest]:
    return [PushRequest(f"m{n}", f"ExponentPushToken[t{n}]", "Tepat", "It is time", {})]


async def send_twice_idle_between(url: str, clock: PoolClock, idle: float) -> object:
    """One send, ``idle`` seconds of nothing, a second send: its outcome."""
    async with ExpoPushProvider(url, clock=FakeClock(), rate_limit=1e9, max_connections=1) as p:
        assert isinstance(await p.send(push(1)), Tickets)
        clock.now += idle
        return await p.send(push(2))


def answered(result: object, server: IdleClosingServer) -> tuple[int, int, int]:
    """The server's connections, requests answered and requests dropped, once the last
    send got its tickets."""
    assert isinstance(result, Tickets), result
    return server.connections, server.answered, server.dropped


async def test_a_connection_reused_as_the_server_closes_it_is_maybe_sent(
    expo: tuple[IdleClosingServer, str], pool_clock: PoolClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench's failure: a client keeping idle connections as long as the server does
    (httpx's default, uvicorn's) reuses one at the instant the server's timer fires."""
    server, url = expo
    monkeypatch.setattr(http_pool, "KEEPALIVE_EXPIRY_SECONDS", HTTPX_DEFAULT_EXPIRY)
    result = await send_twice_idle_between(url, pool_clock, server.idle_timeout)
    assert isinstance(result, TryAgain) and result.maybe_sent, result
    assert "after the request was sent" in result.reason
    assert (server.connections, server.answered, server.dropped) == (1, 1, 1)


@pytest.mark.parametrize(
    "server_timeout", SERVER_IDLE_TIMEOUTS.values(), ids=list(SERVER_IDLE_TIMEOUTS)
)
async def test_the_client_lets_go_of_an_idle_connection_before_the_server_would(
    pool_clock: PoolClock, server_timeout: float
) -> None:
    """At the server's timeout the client has already dropped the connection: the
    second send goes on a fresh one and is answered."""
    assert server_timeout - 1 >= KEEPALIVE_EXPIRY_SECONDS  # the margin load eats into
    server, listening = await idle_closing_server(pool_clock, server_timeout)
    async with listening:
        result = await send_twice_idle_between(url_of(listening), pool_clock, server_timeout)
    assert answered(result, server) == (2, 2, 0)


async def test_within_the_expiry_the_connection_is_reused(
    expo: tuple[IdleClosingServer, str], pool_clock: PoolClock
) -> None:
    server, url = expo
    result = await send_twice_idle_between(url, pool_clock, KEEPALIVE_EXPIRY_SECONDS)
    assert answered(result, server) == (1, 2, 0)


async def test_a_connection_the_server_already_closed_is_replaced_before_writing(
    expo: tuple[IdleClosingServer, str], pool_clock: PoolClock
) -> None:
    """The one case provably safe to retry: the server's close arrived before the
    request was written, so nothing of it went out (httpcore sees the socket readable)."""
    server, url = expo
    async with ExpoPushProvider(url, clock=FakeClock(), rate_limit=1e9, max_connections=1) as p:
        assert isinstance(await p.send(push(1)), Tickets)
        server.close_idle_now()
        await eventually(lambda: server.closed == 1, what="the server to close it")
        result = await p.send(push(2))
    assert answered(result, server) == (2, 2, 0)


async def test_webhooks_let_go_of_an_idle_connection_before_the_server_would(
    expo: tuple[IdleClosingServer, str], pool_clock: PoolClock
) -> None:
    server, url = expo
    policy = parse_target_policy("127.0.0.1")
    async with httpx.AsyncClient(transport=GuardedTransport(policy, max_connections=1)) as c:
        answers = [await c.post(url, json={"n": 1})]
        pool_clock.now += server.idle_timeout
        answers.append(await c.post(url, json={"n": 2}))
    assert [a.status_code for a in answers] == [200, 200]
    assert (server.connections, server.dropped) == (2, 0)
