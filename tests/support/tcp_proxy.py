"""A TCP proxy a test can cut: to take a server away from a client without touching it.

``forward`` passes bytes both ways; ``blackhole`` drops every open connection and
accepts new ones without ever answering (a server that hangs); ``refuse`` drops them
and closes the listening socket (a server that is down). Runs its own event loop in a
thread, so the code under test can block on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Literal

Mode = Literal["forward", "blackhole", "refuse"]


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._mode: Mode = "forward"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port: int = s.getsockname()[1]
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._call(self._listen())

    def stop(self) -> None:
        self._call(self._set("refuse"))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def set_mode(self, mode: Mode) -> None:
        self._call(self._set(mode))

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(5)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )

    async def _set(self, mode: Mode) -> None:
        self._mode = mode
        if mode != "forward":
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()
        if mode == "refuse" and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        elif mode != "refuse" and self._server is None:
            await self._listen()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._mode == "blackhole":
            self._writers.add(writer)
            with contextlib.suppress(ConnectionError):
                while await reader.read(65536):
                    pass  # swallowed: the "server" never answers
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


@contextlib.contextmanager
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
