"""Serve an ASGI app over real HTTP on a free port: one runner for the sandboxes, tests and bench.

* :func:`running_app`: in a daemon thread with its own loop (a sandbox beside a test
  that blocks, or beside a runtime on another loop);
* :func:`serving_app`: on the caller's running loop (an app that shares the loop's
  objects, such as the API over a runtime);
* :func:`serve_app`: in the foreground until interrupted (``tepat sandbox ...``).

:func:`running_h2c_app` and :func:`serve_h2c_app` do the same over HTTP/2 without TLS
(prior knowledge, as ``httpx`` speaks it with ``http1=False``) and HTTP/1.1 on one port,
on :mod:`tepat.sandbox.h2c_server`: uvicorn speaks HTTP/1.1 only, and APNs HTTP/2 only.

The socket is bound before the server starts, so the port is known at once and nobody
else can take it in between; callers wait on the server's start, never on a sleep.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from tepat.sandbox.h2c_server import H2cServer

STARTUP_TIMEOUT = 10.0  # seconds: bounds a server that fails to start, never paces one that does


def bind_free_port(host: str = "127.0.0.1") -> socket.socket:
    """A listening-ready socket on a free port of ``host`` (the caller closes it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


def quiet_config(app: Any) -> uvicorn.Config:
    """No access lines and no lifespan: a stand-in's requests are the test's business."""
    return uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)


class QuietServer(uvicorn.Server):
    """Leaves signals to its owner (a test, or a process that drains every part on one
    SIGTERM), and says when it is listening."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] = lambda: None) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self._on_ready = on_ready

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()
        self._on_ready()


@contextmanager
def running_app(app: Any, name: str, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` in a daemon thread; yields its base URL (``http://host:port``)."""
    sock = bind_free_port(host)
    port = sock.getsockname()[1]
    server = QuietServer(quiet_config(app))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"{name}:{port}", daemon=True
    )
    thread.start()
    try:
        if not server.ready.wait(STARTUP_TIMEOUT) or not server.started:
            raise RuntimeError(f"{name} did not start on {host}:{port}")
        yield base_url(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT)
        sock.close()


@dataclass
class ServingApp:
    url: str
    server: QuietServer
    task: asyncio.Task[None]


@asynccontextmanager
async def serving_app(app: Any, sock: socket.socket | None = None) -> AsyncIterator[ServingApp]:
    """Serve ``app`` on the running loop (``sock``: a port the caller bound already)
    until the block ends; then stop accepting and let the requests in flight finish."""
    sock = sock or bind_free_port()
    listening = asyncio.Event()
    server = QuietServer(quiet_config(app), on_ready=listening.set)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    ready = asyncio.create_task(listening.wait())
    try:
        await asyncio.wait({ready, task}, timeout=STARTUP_TIMEOUT, return_when="FIRST_COMPLETED")
        if task.done():
            task.result()  # it failed to start: its own error says why
        if not server.started:
            raise RuntimeError(f"the server did not start on {base_url(sock)}")
        yield ServingApp(base_url(sock), server, task)
        server.should_exit = True
        await asyncio.wait_for(asyncio.shield(task), STARTUP_TIMEOUT)
    finally:
        ready.cancel()
        server.should_exit = True
        if not task.done():
            await asyncio.wait({task}, timeout=STARTUP_TIMEOUT)
        sock.close()


def _spare_the_log() -> None:
    """What outlived a collection of the older generations is set aside (``gc.freeze``)
    from the later ones, as is all that was there before serving.

    A sandbox in its own process keeps everything it accepted (its log grows by the
    thousand a second under a bench), and a full collection walks all of it: 65 ms
    once a few thousand notifications were in, in which no request was read, so the
    arrivals of that second were stamped late. What outlives those collections is
    mostly that log; a cycle among it that later becomes garbage is not freed, which a
    stand-in for a provider can afford and a service could not."""

    def freeze(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] >= 1:
            gc.freeze()

    gc.collect()
    gc.freeze()
    gc.callbacks.append(freeze)


def serve_app(app: Any, host: str, port: int) -> None:
    _spare_the_log()
    # log_config=None: uvicorn logs through the caller's handler (tepat.logging: JSON lines).
    uvicorn.run(app, host=host, port=port, log_config=None)


@contextmanager
def running_h2c_app(app: Any, name: str, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` over h2c (and HTTP/1.1) in a daemon thread; yields its base URL
    (``http://host:port``).

    The socket listens before the server starts, so a client may connect at once: its
    connection waits in the backlog until the server accepts it.
    """
    sock = bind_free_port(host)
    sock.listen()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    serving = H2cServer(app).serve(sock, stop.wait)
    thread = threading.Thread(
        target=loop.run_until_complete,
        args=(serving,),
        name=f"{name}:{sock.getsockname()[1]}",
        daemon=True,
    )
    thread.start()
    try:
        yield base_url(sock)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=STARTUP_TIMEOUT)
        if not thread.is_alive():
            loop.close()
        sock.close()


def serve_h2c_app(app: Any, host: str, port: int) -> None:
    _spare_the_log()
    sock = socket.create_server((host, port))
    with sock:
        asyncio.run(H2cServer(app).serve(sock, asyncio.Event().wait))
