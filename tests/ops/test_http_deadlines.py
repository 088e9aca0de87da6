"""The slow-client deadlines of tepat/http_server.py, one case each, on a real server.

(``tests/ops/test_slow_clients.py`` runs 300 slowloris clients against ``tepat serve``.)
Each case owes the server something and never sends it: the server must close the
connection unanswered once the deadline passes. The test waits for that close (the
read's end), not for time.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tepat.config import Settings
from tepat.processes import _serve_asgi

DEADLINE = 0.3  # seconds: header and body; the reads below give ten times as long


async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body, then answers 200 with an empty body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]}
    )
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with serving(header_seconds=DEADLINE, body_seconds=DEADLINE) as port:
        yield port


@asynccontextmanager
async def serving(header_seconds: float, body_seconds: float) -> AsyncIterator[int]:
    settings = Settings(
        database_url="sqlite:///unused.db",
        http_header_timeout_seconds=header_seconds,
        http_body_timeout_seconds=body_seconds,
    )
    sock = socket.create_server(("127.0.0.1", 0))
    stop = asyncio.Event()
    server = asyncio.create_task(_serve_asgi(answer, stop, sock=sock, settings=settings))
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        await server


async def closed_unanswered(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), DEADLINE * 10) == b""


async def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await closed_unanswered(reader)
    writer.close()


async def test_headers_never_finished_are_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"PUT /x HTTP/1.1\r\nhost: a\r\n")
    assert await closed_unanswered(reader)
    writer.close()


async def test_a_body_never_finished_is_closed() -> None:
    # the headers' deadline far off: the body's own closes it
    async with serving(header_seconds=60, body_seconds=DEADLINE) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PUT /x HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nabc")
        assert await closed_unanswered(reader)
        writer.close()


async def test_after_an_answer_the_next_request_owes_its_headers(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"PUT /x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\nok")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE * 10)
    assert head.startswith(b"HTTP/1.1 200")
    writer.write(b"GET /x HTTP/1.1\r\n")  # the next request, begun and left there
    assert await closed_unanswered(reader)
    writer.close()


async def test_blank_lines_while_idle_do_not_hold_the_connection_open(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE * 10)
    writer.write(b"\r\n")
    assert await closed_unanswered(reader)
    writer.close()


async def test_a_prompt_request_is_answered_on_a_kept_connection(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(2):
        writer.write(b"PUT /x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\nok")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE * 10)
        assert head.startswith(b"HTTP/1.1 200")
    writer.close()
