"""The whole service on one event loop in a thread, for a browser to talk to over real HTTP.

What ``tepat serve --sandbox`` runs (the API with the dashboard, the consumer,
the receipt poller, the outbox, the sweeper and the metrics' gauge refresher, an Expo
sandbox), with SMS to the Twilio sandbox and e-mail to a real SMTP server
(``tests/support/smtp_server.py``), on SQLite and the embedded broker, but on a
:class:`FakeClock` the test moves: the browser
polls in real time while the service's time only passes when the test says.
The test thread reaches into the loop with :meth:`Live.call` / :meth:`Live.run`, and
crashes and starts the consumer (its sending loop and its heartbeat) with
:meth:`Live.crash_consumer` / :meth:`Live.start_consumer`.
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
from tepat.metrics import run_gauge_refresher
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.runner import base_url, bind_free_port, serving_app
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox
from tests.support.smtp_server import SmtpServer

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

    async def crash(self) -> None:
        """Cancel its loops where they are: no drain of the batches in hand, no last beat.
        (Cancelling still runs their ``finally``; a kill -9 would not, so its beat would
        only expire, ``LIVE_TTL`` later.)"""
        tasks, self.tasks = self.tasks or [], None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class Live:
    base_url: str
    sandbox_url: str
    rt: Runtime
    clock: FakeClock
    sandbox: ExpoSandbox
    twilio: TwilioSandbox
    smtp: SmtpServer
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

    def crash_consumer(self) -> None:
        """The consumer dies where it stands (:meth:`_Consumer.crash`)."""
        self.call(self.consumer.crash())

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
    smtp = SmtpServer().start()  # a thread and loop of its own, like a relay elsewhere
    main = asyncio.run_coroutine_threadsafe(
        _main(tmp_path, admin_key, start, settings, smtp, ready, stop), loop
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
            # What outlives the service (the Twilio sandbox's callback poster) ends too.
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(CALL_TIMEOUT)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CALL_TIMEOUT)
            loop.close()
            smtp.stop()


async def _cancel_the_rest() -> None:
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


async def _main(
    tmp_path: Path,
    admin_key: str,
    start: datetime,
    overrides: dict[str, Any],
    smtp: SmtpServer,
    ready: concurrent.futures.Future[Live],
    stop: asyncio.Event,
) -> None:
    clock = FakeClock(start)
    sandbox = ExpoSandbox(clock=clock)
    # Its status callbacks would go to the public URL, which is nowhere: never due.
    twilio = TwilioSandbox(clock=clock, callback_delay_seconds=365 * 24 * 3600)
    # Bound before the settings are made: they name the sandboxes' URLs.
    api_sock, sandbox_sock, twilio_sock = bind_free_port(), bind_free_port(), bind_free_port()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/tepat.db",
        broker_url="embedded://",
        expo_url=base_url(sandbox_sock),
        admin_api_key=SecretStr(admin_key),
        twilio_account_sid=DEFAULT_ACCOUNT_SID,
        twilio_auth_token=SecretStr(DEFAULT_AUTH_TOKEN),
        twilio_from="+14155550100",
        twilio_url=base_url(twilio_sock),
        smtp_host="127.0.0.1",
        smtp_port=smtp.port,
        smtp_tls="none",
        smtp_from="Tepat <no-reply@tepat.example>",
        public_url="https://tepat.example",  # the unsubscribe links'; nothing calls it
        unsubscribe_secret=SecretStr("browser-unsubscribe-secret-0123456789abcdef"),
        **overrides,
    )
    async with (
        open_runtime(settings, clock=clock) as rt,
        serving_app(create_app(rt, admin_key), sock=api_sock) as api,
        serving_app(sandbox.app, sock=sandbox_sock) as fake_expo,
        serving_app(twilio.app, sock=twilio_sock),
    ):
        tasks = [
            asyncio.create_task(part(rt, stop))
            for part in (run_receipt_poller, run_outbox, run_sweeper, run_gauge_refresher)
        ]
        consumer = _Consumer(rt)
        consumer.start()
        try:
            loop = asyncio.get_running_loop()
            live = Live(api.url, fake_expo.url, rt, clock, sandbox, twilio, smtp, loop, consumer)
            ready.set_result(live)
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
