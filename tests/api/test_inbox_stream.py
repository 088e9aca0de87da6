"""The inbox's live stream held open over real HTTP (uvicorn on a free port).

Every wait is on a condition (an event read from the stream) with a generous timeout
that only bounds a failure; the stream's heartbeat and poll intervals are injected.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tepat.sandbox.runner import QuietServer, serving_app
from tepat.services.inbox import InboxNotifier, InboxService, StreamTiming
from tests.api.conftest import ADMIN, bearer, problem, token_for
from tests.api.helpers import create_user
from tests.support.waiting import eventually

WAIT = 15.0  # seconds: bounds a failing wait, never paces a passing test


@dataclass
class Live:
    url: str
    app: FastAPI
    server: QuietServer
    task: asyncio.Task[None]


def use_timing(app: FastAPI, rt: Runtime, timing: StreamTiming) -> InboxService:
    service = InboxService(rt.store, rt.clock, rt.categories, timing=timing)
    app.state.inbox = service
    return service


@pytest.fixture
async def live(app: FastAPI) -> AsyncIterator[Live]:
    async with serving_app(app) as server:
        try:
            yield Live(server.url, app, server.server, server.task)
        finally:
            app.state.inbox.notifier.close()


@dataclass
class Sse:
    """One parsed event block: fields, and the comments it carried."""

    fields: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)

    @property
    def item(self) -> dict[str, Any]:
        return dict(json.loads(self.fields["data"]))


class Stream:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def block(self) -> Sse | None:
        """The next event block; None when the server ended the stream."""
        sse = Sse()
        async for line in self._lines:
            if line == "":
                return sse
            if line.startswith(":"):
                sse.comments.append(line[1:].strip())
            else:
                name, _, value = line.partition(":")
                sse.fields[name] = value.removeprefix(" ")
        return None

    async def next_item(self) -> Sse:
        async def wait() -> Sse:
            while True:
                sse = await self.block()
                assert sse is not None, "the stream ended"
                if sse.fields.get("event") == "inbox":
                    return sse

        return await asyncio.wait_for(wait(), WAIT)

    async def items(self, n: int) -> list[Sse]:
        return [await self.next_item() for _ in range(n)]


@asynccontextmanager
async def open_stream(
    base_url: str, path: str, headers: dict[str, str] | None = None, **params: str
) -> AsyncIterator[Stream]:
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=WAIT) as client,
        client.stream("GET", path, headers=headers or {}, params=params) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = Stream(response)
        hello = await asyncio.wait_for(stream.block(), WAIT)
        assert hello is not None and "connected" in hello.comments
        yield stream


async def put(client: httpx.AsyncClient, user: str, key: str) -> dict[str, Any]:
    r = await client.post(
        f"/v1/users/{user}/inbox",
        json={"idempotency_key": key, "category": "custom", "title": key, "body": "b"},
        headers=ADMIN,
    )
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


async def test_items_arrive_live_and_a_reconnect_gets_exactly_the_missed_ones(
    live: Live, rt: Runtime, clock: FakeClock
) -> None:
    # A long poll: only the in-process notifier can bring these items in time.
    use_timing(live.app, rt, StreamTiming(heartbeat=3600, poll=3600))
    path = "/v1/users/alice/inbox/stream"
    async with httpx.AsyncClient(base_url=live.url) as client:
        await create_user(client, "alice")
        await create_user(client, "bob")
        before = await put(client, "alice", "before")  # stored before: not a "new" item
        async with open_stream(live.url, path, bearer("alice", clock)) as stream:
            first = await put(client, "alice", "a1")
            await put(client, "bob", "b1")  # another user's: never on this stream
            second = await put(client, "alice", "a2")
            await put(client, "alice", "a1")  # a repeat: stored once, sent once
            got = await stream.items(2)
            assert [s.item["id"] for s in got] == [first["id"], second["id"]]
            assert [s.fields["id"] for s in got] == [str(first["seq"]), str(second["seq"])]
            assert got[0].item == first
            last_seen = got[-1].fields["id"]
        # Disconnected: these are stored while nobody listens.
        missed = [await put(client, "alice", f"m{i}") for i in range(3)]
        async with open_stream(
            live.url, path, {**bearer("alice", clock), "Last-Event-ID": last_seen}
        ) as stream:
            got = await stream.items(3)
            assert [s.item["id"] for s in got] == [m["id"] for m in missed]
            after = await put(client, "alice", "after")
            [live_one] = await stream.items(1)
            assert live_one.item["id"] == after["id"]  # nothing twice, nothing old
        assert before["seq"] < first["seq"]
        # From the start, with the query forms an EventSource would use.
        async with open_stream(
            live.url, path, access_token=token_for("alice", clock), last_event_id="0"
        ) as stream:
            got = await stream.items(7)
            assert [s.item["message_id"] for s in got] == [
                "before",
                "a1",
                "a2",
                "m0",
                "m1",
                "m2",
                "after",
            ]


async def test_the_header_wins_over_the_query_on_reconnect(
    live: Live, rt: Runtime, clock: FakeClock
) -> None:
    service = use_timing(live.app, rt, StreamTiming(heartbeat=3600, poll=3600))
    async with httpx.AsyncClient(base_url=live.url) as client:
        await create_user(client, "alice")
        items = [await put(client, "alice", f"m{i}") for i in range(3)]
        # EventSource keeps its first URL (last_event_id=0) and sends the newer header.
        async with open_stream(
            live.url,
            "/v1/users/alice/inbox/stream",
            {**bearer("alice", clock), "Last-Event-ID": str(items[1]["seq"])},
            last_event_id="0",
        ) as stream:
            [got] = await stream.items(1)
            assert got.item["id"] == items[2]["id"]
            assert service.notifier.streams() == 1
    # The client left: the server notices and drops its subscription.
    await eventually(lambda: service.notifier.streams() == 0, WAIT, "the stream to close")


async def test_items_stored_by_another_process_arrive_by_polling(
    live: Live, rt: Runtime, clock: FakeClock
) -> None:
    use_timing(live.app, rt, StreamTiming(heartbeat=3600, poll=0.05))
    # Another API worker: same store, its own notifier, which never reaches this stream.
    elsewhere = InboxService(rt.store, rt.clock, rt.categories)
    async with httpx.AsyncClient(base_url=live.url) as client:
        await create_user(client, "alice")
        async with open_stream(
            live.url, "/v1/users/alice/inbox/stream", bearer("alice", clock)
        ) as stream:
            delivered = await elsewhere.deliver(
                "alice", "from-a-consumer", category="custom", title="t", body="b"
            )
            [got] = await stream.items(1)
            assert got.item["seq"] == delivered.item.seq


async def test_heartbeats_keep_an_idle_stream_talking(
    live: Live, rt: Runtime, clock: FakeClock
) -> None:
    use_timing(live.app, rt, StreamTiming(heartbeat=0.05, poll=3600))
    async with httpx.AsyncClient(base_url=live.url) as client:
        await create_user(client, "alice")
    async with open_stream(
        live.url, "/v1/users/alice/inbox/stream", bearer("alice", clock)
    ) as stream:
        for _ in range(2):
            block = await asyncio.wait_for(stream.block(), WAIT)
            assert block is not None
            assert block.comments == ["keepalive"] and not block.fields


async def test_shutdown_ends_open_streams_cleanly(
    live: Live, rt: Runtime, clock: FakeClock
) -> None:
    service = use_timing(live.app, rt, StreamTiming(heartbeat=3600, poll=3600))
    async with httpx.AsyncClient(base_url=live.url) as client:
        await create_user(client, "alice")
    async with open_stream(
        live.url, "/v1/users/alice/inbox/stream", bearer("alice", clock)
    ) as stream:
        assert service.notifier.streams() == 1
        service.notifier.close()  # what `tepat api` does on SIGTERM, before uvicorn drains
        assert await asyncio.wait_for(stream.block(), WAIT) is None  # the body ended
        live.server.should_exit = True
        await asyncio.wait_for(live.task, WAIT)  # nothing left in flight
    assert service.notifier.streams() == 0


async def test_a_stream_without_a_token_is_a_401_problem(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url) as client:
        r = await client.get("/v1/users/alice/inbox/stream")
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "WWW-Authenticate" in r.headers


async def test_the_api_process_ends_open_streams_when_it_stops(
    app: FastAPI, clock: FakeClock
) -> None:
    """What `tepat serve` / `tepat api` do on SIGTERM (``tepat/processes.py``)."""
    from tepat.processes import _serve_asgi

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    stop = asyncio.Event()
    serving = asyncio.create_task(_serve_asgi(app, stop, sock=sock))
    try:
        async with httpx.AsyncClient(base_url=url) as client:

            async def up() -> bool:
                try:
                    return (await client.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(up, WAIT, "the API to listen")
            await create_user(client, "alice")
        async with open_stream(url, "/v1/users/alice/inbox/stream", bearer("alice", clock)) as s:
            stop.set()
            assert await asyncio.wait_for(s.block(), WAIT) is None  # the body ended
            await asyncio.wait_for(serving, WAIT)
    finally:
        stop.set()
        await asyncio.wait_for(serving, WAIT)
        sock.close()


async def test_streams_are_capped_per_user_and_in_all_with_retry_after(
    live: Live, rt: Runtime, clock: FakeClock
) -> None:
    """Beyond the per-user cap a new stream is 429, beyond the total 503, both with
    Retry-After; a closed stream gives its slot back (issue 19 #5)."""
    service = InboxService(
        rt.store,
        rt.clock,
        rt.categories,
        InboxNotifier(max_streams=3, max_streams_per_user=2),
        timing=StreamTiming(heartbeat=3600, poll=3600),
    )
    live.app.state.inbox = service
    alice, bob = "/v1/users/alice/inbox/stream", "/v1/users/bob/inbox/stream"
    async with httpx.AsyncClient(base_url=live.url, timeout=WAIT) as client:
        for user in ("alice", "bob", "carol"):
            await create_user(client, user)
        async with (
            open_stream(live.url, alice, bearer("alice", clock)),
            open_stream(live.url, alice, bearer("alice", clock)),
        ):
            third = await client.get(alice, headers=bearer("alice", clock))
            assert str(problem(third, 429)["detail"]).startswith("2 inbox streams of this user")
            assert int(third.headers["retry-after"]) > 0
            async with open_stream(live.url, bob, bearer("bob", clock)):
                full = await client.get(
                    "/v1/users/carol/inbox/stream", headers=bearer("carol", clock)
                )
                assert problem(full, 503)["detail"] == "3 inbox streams are open on this server"
                assert int(full.headers["retry-after"]) > 0

        async def slots_given_back() -> bool:
            return service.notifier.reserved() == 0

        await eventually(slots_given_back, timeout=WAIT, what="the streams' slots released")
        async with (
            open_stream(live.url, alice, bearer("alice", clock)),
            open_stream(live.url, alice, bearer("alice", clock)),
        ):
            pass
