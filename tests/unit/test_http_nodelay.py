"""The API's connections send without Nagle's delay (tepat/http_server.py).

A listening socket from ``socket.create_server`` (``tepat serve``'s) has proto 0, and
asyncio sets TCP_NODELAY only on sockets whose proto is TCP: uvicorn writes a
response's head and body apart, so the body waited for the client's delayed ACK, 40 ms
per request on a keep-alive connection.
"""

from __future__ import annotations

import asyncio
import socket

from tepat.http_server import _send_without_delay


async def test_an_accepted_connection_gets_tcp_nodelay() -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    accepted: asyncio.Future[asyncio.Transport] = asyncio.get_running_loop().create_future()

    class Accept(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            accepted.set_result(transport)

    server = await asyncio.get_running_loop().create_server(Accept, sock=listening)
    _, writer = await asyncio.open_connection(*listening.getsockname()[:2])
    try:
        transport = await accepted
        sock = transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0  # the cause
        _send_without_delay(transport)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
