"""The whole service on one event loop in a thread, for a browser to talk to over real HTTP.

What ``tepat serve --sandbox`` runs (the API with the dashboard, the consumer,
the receipt poller, the outbox and the sweeper, an Expo sandbox), on SQLite and
the embedded broker, but on a :class:`FakeClock` the test moves: the browser
polls in real time while the service's time only passes when the test says.
The test thread reaches into the loop with :meth:`Live.call` / :meth:`Live.run`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from pydantic import SecretStr

from api.app import create_app
from consumers.worker import run_consumer, run_receipt_poller
from scheduler.jobs import run_outbox, run_sweeper
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.expo import ExpoSandbox

T = TypeVar("T")
CALL_TIMEOUT = 30.0


@dataclass
class Live:
    base_url: str
    sandbox_url: str
    rt: Runtime
    clock: FakeClock
    sandbox: ExpoSandbox
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the service's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(CALL_TIMEOUT)

    def run(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` on the service's loop thread (the clock and sandbox live there)."""

        async def call() -> T:
            return fn()

        return self.call(call())

    def advance(self, seconds: float) -> None:
        self.run(lambda: self.clock.advance(seconds))


class _Server(uvicorn.Server):
    """Leaves signals alone: the test stops it."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _socket() -> socket.socket:
    # Bound before the server starts, so the port is known and nobody else can take it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


@contextmanager
def live_service(
    tmp_path: Path, *, admin_key: str, start: datetime, **settings: Any
) -> Iterator[Live]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="tepat-live", daemon=True)
    thread.start()
    ready: concurrent.futures.Future[Live] = concurrent.futures.Future()
    stop = asyncio.Event()
    main = asyncio.run_coroutine_threadsafe(
        _main(tmp_path, admin_key, start, settings, ready, stop), loop
    )
    try:
        started: list[concurrent.futures.Future[Any]] = [ready, main]
        concurrent.futures.wait(
            started, CALL_TIMEOUT, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if not ready.done() and main.done():
            main.result()  # it failed to start: its own error says why
        yield ready.result(0)
    finally:
        loop.call_soon_threadsafe(stop.set)
        try:
            main.result(CALL_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CALL_TIMEOUT)
            loop.close()


async def _main(
    tmp_path: Path,
    admin_key: str,
    start: datetime,
    overrides: dict[str, Any],
    ready: concurrent.futures.Future[Live],
    stop: asyncio.Event,
) -> None:
    clock = FakeClock(start)
    sandbox = ExpoSandbox(clock=clock)
    api_sock, sandbox_sock = _socket(), _socket()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/tepat.db",
        broker_url="embedded://",
        expo_url=_url(sandbox_sock),
        admin_api_key=SecretStr(admin_key),
        **overrides,
    )
    async with open_runtime(settings, clock=clock) as rt:
        servers = [
            _Server(uvicorn.Config(create_app(rt, admin_key), log_config=None)),
            _Server(uvicorn.Config(sandbox.app, log_config=None)),
        ]
        tasks = [
            asyncio.create_task(servers[0].serve(sockets=[api_sock])),
            asyncio.create_task(servers[1].serve(sockets=[sandbox_sock])),
            *(
                asyncio.create_task(part(rt, stop))
                for part in (run_consumer, run_receipt_poller, run_outbox, run_sweeper)
            ),
        ]
        try:
            while not all(s.started for s in servers):
                failed = [t for t in tasks if t.done()]
                if failed:
                    failed[0].result()
                await asyncio.sleep(0.01)  # real time: uvicorn binding, not the service's clock
            loop = asyncio.get_running_loop()
            ready.set_result(Live(_url(api_sock), _url(sandbox_sock), rt, clock, sandbox, loop))
            await stop.wait()
        finally:
            stop.set()
            for server in servers:
                server.should_exit = True
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for sock in (api_sock, sandbox_sock):
                sock.close()
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                raise errors[0]
