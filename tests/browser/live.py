"""The whole service on one event loop in a thread, for a browser to talk to over real HTTP.

What ``tepat serve --sandbox`` runs (the API with the dashboard, the consumer,
the receipt poller, the outbox and the sweeper, an Expo sandbox), on SQLite and
the embedded broker, but on a :class:`FakeClock` the test moves: the browser
polls in real time while the service's time only passes when the test says.
The test thread reaches into the loop with :meth:`Live.call` / :meth:`Live.run`, and
stops and starts the consumer (its sending loop and its heartbeat) with
:meth:`Live.stop_consumer` / :meth:`Live.start_consumer`, as an operator's crash would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr

from api.app import create_app
from consumers.rate_share import run_rate_share
from consumers.worker import run_consumer, run_receipt_poller
from scheduler.jobs import run_outbox, run_sweeper
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.runner import base_url, bind_free_port, serving_app

T = TypeVar("T")
CALL_TIMEOUT = 30.0


@dataclass
class _Consumer:
    """The consumer process's loops, stoppable on their own (the rest keeps running)."""

    rt: Runtime
    stop: asyncio.Event | None = None
    tasks: list[asyncio.Task[None]] | None = None

    def start(self) -> None:
        assert self.tasks is None, "the consumer runs already"
        self.stop = asyncio.Event()
        self.tasks = [
            asyncio.create_task(part(self.rt, self.stop)) for part in (run_consumer, run_rate_share)
        ]

    async def halt(self) -> None:
        if self.tasks is None or self.stop is None:
            return
        self.stop.set()
        tasks, self.tasks = self.tasks, None
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, Exception):
                raise result


@dataclass
class Live:
    base_url: str
    sandbox_url: str
    rt: Runtime
    clock: FakeClock
    sandbox: ExpoSandbox
    loop: asyncio.AbstractEventLoop
    consumer: _Consumer

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

    def stop_consumer(self) -> None:
        """Stop the consumer (it finishes the batches in hand and leaves its rate group)."""
        self.call(self.consumer.halt())

    def start_consumer(self) -> None:
        self.run(self.consumer.start)


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
    # Bound before the settings are made: they name the sandbox's URL.
    api_sock, sandbox_sock = bind_free_port(), bind_free_port()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/tepat.db",
        broker_url="embedded://",
        expo_url=base_url(sandbox_sock),
        admin_api_key=SecretStr(admin_key),
        **overrides,
    )
    async with (
        open_runtime(settings, clock=clock) as rt,
        serving_app(create_app(rt, admin_key), sock=api_sock) as api,
        serving_app(sandbox.app, sock=sandbox_sock) as fake_expo,
    ):
        tasks = [
            asyncio.create_task(part(rt, stop))
            for part in (run_receipt_poller, run_outbox, run_sweeper)
        ]
        consumer = _Consumer(rt)
        consumer.start()
        try:
            loop = asyncio.get_running_loop()
            ready.set_result(Live(api.url, fake_expo.url, rt, clock, sandbox, loop, consumer))
            await stop.wait()
        finally:
            stop.set()
            results: list[Any] = [None]
            try:
                await consumer.halt()
            except Exception as e:
                results = [e]
            results += await asyncio.gather(*tasks, return_exceptions=True)
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                raise errors[0]
