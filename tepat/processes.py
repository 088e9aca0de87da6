"""The long-running processes: everything in one (`serve`) or each part alone.

Each process opens one :class:`~tepat.runtime.Runtime`, starts its loops and
waits for SIGTERM/SIGINT; then it stops taking new work, drains what it holds
(in-flight batches are recorded and acked, accepted HTTP requests finish) and
exits cleanly.

Metrics: `api` and `serve` answer ``/metrics`` on their HTTP port; `scheduler`
and `consumers` serve it on ``TEPAT_METRICS_PORT``. The store/broker gauges are
refreshed by one task in `scheduler` and `serve` (:mod:`tepat.metrics`).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import structlog
import uvicorn
from pydantic import SecretStr

from consumers.rate_share import run_rate_share
from consumers.worker import run_consumer, run_lease_renewal, run_receipt_poller
from scheduler.jobs import (
    run_creator,
    run_event_fanout,
    run_outbox,
    run_sweeper,
    run_webhook_emitter,
)
from tepat.app_context import app_context
from tepat.config import ConfigError, Settings
from tepat.domain.apps import DEFAULT_APP
from tepat.http_server import WORKERS_HTTP_PROTOCOL, guarded_http_for
from tepat.metrics import metrics_app, run_gauge_refresher
from tepat.runtime import Runtime, open_runtime
from tepat.tenancy import Apps

log = structlog.get_logger("tepat.process")

# A part of each app's work, run for every app served (tepat/tenancy.py) ...
Part = Callable[[Runtime, asyncio.Event], Coroutine[Any, Any, None]]
# ... or of the process's, run once (the HTTP API, a metrics server, sandboxes).
OncePart = Callable[[Apps, asyncio.Event], Coroutine[Any, Any, None]]


async def run_parts(
    settings: Settings,
    parts: list[Part],
    *,
    once: Sequence[OncePart] = (),
    restore_embedded: bool = False,
) -> None:
    """``parts`` run for every app this process serves (tepat/tenancy.py), each app's in
    tasks of its own; ``once`` runs once for the process (the HTTP API, a metrics server)."""
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with open_runtime(settings) as rt:
        apps = Apps.serving(settings, rt)
        if restore_embedded:
            await rt.recover_at_start()
        await apps.refresh()
        # What is built so far (modules, the runtimes) lives as long as the process: a
        # full collection scanning it again cost 30-65 ms of CPU, a stall every send in
        # hand waited out (the moderate-load p99). Frozen, it is never scanned again.
        gc.collect()
        gc.freeze()
        running = _AppParts(parts, apps, restore_embedded)
        default_tasks = running.start_now(rt, stop)
        for other in apps.others():
            await running.start(other)
        apps.on_open.append(running.start)
        apps.on_close.append(running.stop)
        process_tasks = [
            asyncio.create_task(part(apps, stop), name=part.__name__)
            for part in [*once, Apps.run_refresh]
        ]
        # One part failing is fatal: stop the others and surface the error. (A part of
        # another app failing closes that app alone: _AppParts.)
        await asyncio.wait(
            [*default_tasks, *process_tasks, asyncio.create_task(stop.wait())],
            return_when=asyncio.FIRST_COMPLETED,
        )
        stop.set()
        results = await asyncio.gather(*default_tasks, *process_tasks, return_exceptions=True)
        # After the API: the requests it was finishing may be another app's.
        await apps.close()
        log.info("stopped cleanly")
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r


class _AppParts:
    """Each served app's parts: started when its runtime opens, stopped (drained) before
    it closes. The default app's run for the life of the process."""

    def __init__(self, parts: list[Part], apps: Apps, restore_embedded: bool) -> None:
        self._parts = parts
        self._apps = apps
        self._restore = restore_embedded
        self._running: dict[str, tuple[asyncio.Event, list[asyncio.Task[None]]]] = {}
        self._stopping: set[str] = set()
        self._closing: set[asyncio.Task[None]] = set()

    async def start(self, rt: Runtime) -> None:
        """A registered app's parts, on a stop of their own (set when it closes)."""
        if self._restore:
            await rt.recover_at_start()
        self.start_now(rt, asyncio.Event())

    def start_now(self, rt: Runtime, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """The app's parts until ``stop`` (the process's, for the default app)."""
        with app_context(rt.app_id):  # the app of every figure its tasks count
            tasks = [
                asyncio.create_task(part(rt, stop), name=f"{part.__name__}[{rt.app_id}]")
                for part in self._parts
            ]
        if rt.app_id != DEFAULT_APP:
            for task in tasks:
                task.add_done_callback(partial(self._ended, rt))
        self._running[rt.app_id] = (stop, tasks)
        return tasks

    def _ended(self, rt: Runtime, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None or rt.app_id in self._stopping:
            return
        log.error(
            "app part failed; the app is closed",
            app=rt.app_id,
            part=task.get_name(),
            error=repr(task.exception()),
        )
        closing = asyncio.get_running_loop().create_task(self._apps.forget(rt))
        # The loop holds tasks weakly: one nobody refers to may vanish before it runs.
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def stop(self, rt: Runtime) -> None:
        stop, tasks = self._running.pop(rt.app_id, (asyncio.Event(), []))
        self._stopping.add(rt.app_id)
        stop.set()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, Exception):
                log.error("app part failed", app=rt.app_id, error=repr(result))
        self._stopping.discard(rt.app_id)


CONSUMER_PARTS: list[Part] = [run_consumer, run_lease_renewal, run_receipt_poller, run_rate_share]
SCHEDULER_PARTS: list[Part] = [
    run_creator,
    run_sweeper,
    run_outbox,
    run_event_fanout,
    run_webhook_emitter,
]


async def _default_app_gauges(apps: Apps, stop: asyncio.Event) -> None:
    """The store and broker gauges: the default app's (they carry no app label)."""
    await run_gauge_refresher(apps.default, stop)


async def run_scheduler(settings: Settings) -> None:
    await run_parts(settings, SCHEDULER_PARTS, once=[_default_app_gauges, *metrics_parts(settings)])


async def run_consumers(settings: Settings) -> None:
    await run_parts(settings, CONSUMER_PARTS, once=metrics_parts(settings))


def metrics_parts(settings: Settings) -> list[OncePart]:
    """A ``/metrics`` server on TEPAT_METRICS_PORT (none when it is 0). The port is
    bound now, before anything connects, so a taken port stops the start with one line."""
    if settings.metrics_port == 0:
        return []
    sock = _listen(settings.metrics_host, settings.metrics_port, "TEPAT_METRICS_PORT")
    port = sock.getsockname()[1]

    async def metrics_server(apps: Apps, stop: asyncio.Event) -> None:
        log.info("serving metrics", url=f"http://{settings.metrics_host}:{port}/metrics")
        await _serve_asgi(metrics_app(), stop, sock=sock)

    return [metrics_server]


def _listen(host: str, port: int, variable: str) -> socket.socket:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as e:
        raise ConfigError(
            f"tepat: bad configuration: {variable}: cannot listen on {host}:{port}"
            f" ({os.strerror(e.errno) if e.errno else e}); choose another port"
            + (", or 0 for none" if variable.startswith("TEPAT_") else "")
        ) from None


def _http_part(host: str, port: int, admin_key: str) -> OncePart:
    """The API on ``host:port``, bound now: a taken port stops the start with one line
    (uvicorn would log the error and leave the other parts running without an API)."""
    sock = _listen(host, port, "--port")

    async def http_api(apps: Apps, stop: asyncio.Event) -> None:
        from api.app import create_app

        app = create_app(apps.default, admin_key, apps=apps)
        await _serve_asgi(app, stop, sock=sock, settings=apps.default.settings)

    return http_api


def _admin_key(settings: Settings) -> str:
    from tepat.admin_key import resolve_admin_key

    key, generated = resolve_admin_key(settings)
    if generated:
        # Printed once, on the start that created it; it is kept beside the data.
        print(f"tepat: generated admin API key (X-API-Key): {key}", flush=True)
    return key


async def serve_api(settings: Settings, host: str, port: int) -> None:
    await run_parts(settings, [], once=[_http_part(host, port, _admin_key(settings))])


async def _serve_asgi(
    app: Any,
    stop: asyncio.Event,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    sock: socket.socket | None = None,
    settings: Settings | None = None,
) -> None:
    """``settings``: the API's limits on slow and idle clients (see tepat/http_server.py);
    the metrics and sandbox servers, local helpers, run without."""
    from tepat.sandbox.runner import QuietServer

    # log_config=None: uvicorn's loggers go through tepat.logging's one handler.
    limits = {} if settings is None else {"http": guarded_http_for(settings), **_limits(settings)}
    config = uvicorn.Config(app, host=host, port=port, log_config=None, **limits)
    server = QuietServer(config)  # leaves signals to us: one SIGTERM drains every part
    task = asyncio.create_task(server.serve(sockets=[sock] if sock else None))
    await stop.wait()
    # Open inbox streams never finish by themselves: end them so uvicorn's wait for
    # in-flight requests does (clients reconnect elsewhere with Last-Event-ID).
    state = getattr(app, "state", None)
    inbox = getattr(state, "inbox", None)
    if inbox is not None:
        inbox.notifier.close()
    apps: Apps | None = getattr(state, "apps", None)
    for other in apps.others() if apps is not None else []:  # every app's streams
        other.inbox.notifier.close()
    server.should_exit = True  # stops accepting, lets in-flight requests finish
    await task


def _limits(settings: Settings) -> dict[str, Any]:
    return {
        "timeout_keep_alive": settings.http_keep_alive_seconds,
        # the listen queue: connections the kernel holds until they are accepted
        "backlog": 2048,
    }


async def serve_all(
    settings: Settings, host: str, port: int, *, sandbox: bool, sandbox_port: int
) -> None:
    once = [_http_part(host, port, _admin_key(settings)), _default_app_gauges]
    if sandbox:
        settings, sandboxes = _with_sandboxes(settings, host, port, sandbox_port)
        once += sandboxes
    await run_parts(settings, [*CONSUMER_PARTS, *SCHEDULER_PARTS], once=once, restore_embedded=True)


def _with_sandboxes(
    settings: Settings, host: str, port: int, sandbox_port: int
) -> tuple[Settings, list[OncePart]]:
    """The Expo sandbox on ``sandbox_port`` and a Twilio sandbox beside it, in this process,
    and the settings that send to them: SMS with the configured account, or the sandbox's
    own when none is, its status callbacks to this API."""
    from tepat.sandbox.expo import ExpoSandbox
    from tepat.sandbox.twilio import (
        DEFAULT_ACCOUNT_SID,
        DEFAULT_AUTH_TOKEN,
        SERVICE_FROM,
        TwilioSandbox,
    )

    try:  # the port after the Expo sandbox's, or any free one if that is taken
        twilio_sock = socket.create_server(("127.0.0.1", sandbox_port + 1))
    except OSError:
        twilio_sock = socket.create_server(("127.0.0.1", 0))
    updates: dict[str, Any] = {
        "expo_url": f"http://127.0.0.1:{sandbox_port}",
        "twilio_url": f"http://127.0.0.1:{twilio_sock.getsockname()[1]}",
    }
    if "receipt_delay_seconds" not in settings.model_fields_set:
        updates["receipt_delay_seconds"] = DEMO_RECEIPT_DELAY_SECONDS
        updates["receipt_poll_interval_seconds"] = 2.0
    if settings.twilio_account_sid is None:
        updates["twilio_account_sid"] = DEFAULT_ACCOUNT_SID
        updates["twilio_auth_token"] = SecretStr(DEFAULT_AUTH_TOKEN)
    if settings.twilio_from is None and settings.twilio_messaging_service_sid is None:
        updates["twilio_from"] = SERVICE_FROM
    if settings.public_url is None:
        local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        updates["public_url"] = f"http://{local}:{port}"
    settings = settings.model_copy(update=updates)
    assert settings.twilio_account_sid and settings.twilio_auth_token
    expo = ExpoSandbox(receipt_delay_seconds=DEMO_RECEIPT_DELAY_SECONDS / 2).app
    # Callbacks a second apart, so the walkthrough shows sent, then delivered.
    twilio = TwilioSandbox(
        account_sid=settings.twilio_account_sid,
        auth_token=settings.twilio_auth_token.get_secret_value(),
        callback_delay_seconds=1.0,
    ).app

    async def expo_sandbox(apps: Apps, stop: asyncio.Event) -> None:
        await _serve_asgi(expo, stop, "127.0.0.1", sandbox_port)

    async def twilio_sandbox(apps: Apps, stop: asyncio.Event) -> None:
        await _serve_asgi(twilio, stop, sock=twilio_sock)

    for name, url in (("Expo", settings.expo_url), ("Twilio", settings.twilio_url)):
        print(f"tepat: {name} sandbox at {url} ({url}/_sandbox/received)", flush=True)
    return settings, [expo_sandbox, twilio_sandbox]


# With the in-process sandbox, receipts are polled after seconds, not Expo's 15 minutes,
# so the README walkthrough shows `delivered` while you watch.
DEMO_RECEIPT_DELAY_SECONDS = 10.0


# --- `tepat api --workers N`: several API processes on one port ---------------------------


# Far above any ordinary request; what it bounds is the wait for held-open streams.
WORKER_GRACEFUL_SHUTDOWN_SECONDS = 10


def serve_api_workers(settings: Settings, host: str, port: int, workers: int) -> None:
    """``workers`` uvicorn worker processes on one port, each with its own runtime.

    uvicorn binds the socket here and starts the workers; each builds its app from
    :func:`api_worker_app` (settings from the same environment) and opens its
    runtime in its lifespan. SIGTERM/SIGINT reach uvicorn's supervisor, which
    stops each worker the way one ``tepat api`` stops: accepted requests finish. The
    caller refuses the embedded broker, as for one ``tepat api`` (``cli._alone``).
    """
    _admin_key(settings)  # generated (and printed) once here, read by every worker
    uvicorn.run(
        "tepat.processes:api_worker_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=None,
        # each worker guards itself against slow clients as one `tepat api` does
        http=WORKERS_HTTP_PROTOCOL,
        **_limits(settings),
        # Here uvicorn handles the signal itself, so nothing ends the open inbox streams
        # (which never finish by themselves) before it waits for in-flight requests:
        # after this long it cancels them, and their clients resume with Last-Event-ID.
        timeout_graceful_shutdown=WORKER_GRACEFUL_SHUTDOWN_SECONDS,
    )


def api_worker_app() -> Any:
    """The ASGI app of one worker of ``tepat api --workers N`` (an import-string factory)."""
    from tepat.admin_key import resolve_admin_key
    from tepat.config import load_settings
    from tepat.logging import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level, settings.log_json, settings.access_log_level)
    key, _ = resolve_admin_key(settings)
    return _RuntimeApp(settings, key)


async def _stopped(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    stop.set()
    await task


class _RuntimeApp:
    """Opens a runtime on lifespan startup, serves the API over it, closes it on shutdown."""

    def __init__(self, settings: Settings, admin_key: str) -> None:
        self._settings = settings
        self._admin_key = admin_key
        self._app: Any = None
        self._stack = AsyncExitStack()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    rt = await self._stack.enter_async_context(open_runtime(self._settings))
                    apps = Apps.serving(self._settings, rt)
                    self._stack.push_async_callback(apps.close)
                    await apps.refresh()
                except Exception as e:
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                from api.app import create_app

                self._app = create_app(rt, self._admin_key, apps=apps)
                refresh_stop = asyncio.Event()
                refresh = asyncio.create_task(apps.run_refresh(refresh_stop))
                self._stack.push_async_callback(_stopped, refresh, refresh_stop)
                log.info("api worker ready", pid=os.getpid())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
