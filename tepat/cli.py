"""The ``tepat`` command. Thin: parse options, load settings, call into the processes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from tepat.config import ConfigError, Settings, load_settings
from tepat.logging import configure_logging

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
sandbox_app = typer.Typer(
    help="Local stand-ins for the push and SMS providers.", no_args_is_help=True
)
dlq_app = typer.Typer(help="Dead letters: list and replay.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(dlq_app, name="dlq")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tepat {version('tepat')}")
        except PackageNotFoundError:
            typer.echo("tepat (not installed: no package metadata)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Tepat: every user's notifications at the right local moment, once."""


Host = Annotated[str, typer.Option(help="Interface to listen on.")]
Port = Annotated[int, typer.Option(help="TCP port to listen on.", min=1, max=65535)]


@contextmanager
def _config_errors() -> Iterator[None]:
    """A bad configuration (read, or found while starting) is its one line, exit status 2."""
    try:
        yield
    except ConfigError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def _settings(**overrides: Any) -> Settings:
    with _config_errors():
        settings = load_settings(**overrides)
        # It also starts tracing, whose OTEL_* variables may be as bad.
        configure_logging(settings.log_level, settings.log_json, settings.access_log_level)
    return settings


def _alone(settings: Settings, command: str) -> Settings:
    """``tepat api``, ``scheduler`` and ``consumers`` are parts of one deployment that talk
    through the broker: on ``embedded://`` each would hold a private queue (the API's and
    the scheduler's messages never reach a consumer), so they are refused."""
    if settings.broker_url == "embedded://":
        typer.echo(
            f"tepat: bad configuration: TEPAT_BROKER_URL: `tepat {command}` alone needs a"
            " shared broker (the embedded one lives inside one process, so nothing would be"
            " delivered): set TEPAT_BROKER_URL=stomp://…, or run everything in `tepat serve`",
            err=True,
        )
        raise typer.Exit(2)
    return settings


def _run(coro: Coroutine[Any, Any, Any], *, serves_http: bool = False) -> Any:
    """``serves_http``: on uvloop, as uvicorn's own workers run (``--workers N``): about
    a third less CPU per API request than asyncio's loop (bench api)."""
    with _config_errors():
        if not serves_http:
            return asyncio.run(coro)
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)


def _parse_instant(value: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"expected ISO 8601, got {value!r}", param_hint=name) from None
    if parsed.tzinfo is None:
        raise typer.BadParameter("needs a UTC offset, e.g. 2027-03-14T00:00:00Z", param_hint=name)
    return parsed


@app.command()
def serve(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    sandbox: Annotated[
        bool,
        typer.Option(
            help="Start the Expo sandbox in-process and send to it, and a Twilio sandbox"
            " on the next port for SMS (with the TEPAT_TWILIO_* account if set, else its own)."
        ),
    ] = False,
    sandbox_port: Annotated[
        int, typer.Option(help="Port of the in-process Expo sandbox (Twilio's: the next one).")
    ] = 8001,
) -> None:
    """API, creator jobs, consumers and the receipt poller in one process."""
    from tepat.processes import serve_all

    settings = _settings()
    _run(
        serve_all(settings, host, port, sandbox=sandbox, sandbox_port=sandbox_port),
        serves_http=True,
    )


@app.command("api")
def api_command(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    workers: Annotated[
        int,
        typer.Option(
            help="API processes on the one port (more than 1 needs a shared broker).", min=1
        ),
    ] = 1,
) -> None:
    """The HTTP API alone."""
    from tepat.processes import serve_api, serve_api_workers

    settings = _alone(_settings(), "api")
    if workers == 1:
        _run(serve_api(settings, host, port), serves_http=True)
        return
    with _config_errors():
        serve_api_workers(settings, host, port, workers)


MetricsPort = Annotated[
    int | None,
    typer.Option(
        help="Port of /metrics (overrides TEPAT_METRICS_PORT, default 9464; 0: none).",
        min=0,
        max=65535,
        show_default=False,
    ),
]
MetricsHost = Annotated[
    str | None,
    typer.Option(
        help="Interface of /metrics (overrides TEPAT_METRICS_HOST, default 127.0.0.1).",
        show_default=False,
    ),
]


def _run_alone(command: str, host: str | None, port: int | None) -> None:
    """``tepat scheduler`` or ``tepat consumers``, its metrics options over the settings."""
    from tepat import processes

    given = {"metrics_host": host, "metrics_port": port}
    settings = _settings(**{k: v for k, v in given.items() if v is not None})
    run = processes.run_scheduler if command == "scheduler" else processes.run_consumers
    _run(run(_alone(settings, command)))


@app.command("scheduler")
def scheduler_command(metrics_host: MetricsHost = None, metrics_port: MetricsPort = None) -> None:
    """Creator jobs, the sweeper, the outbox and the metrics gauges alone."""
    _run_alone("scheduler", metrics_host, metrics_port)


@app.command("consumers")
def consumers_command(metrics_host: MetricsHost = None, metrics_port: MetricsPort = None) -> None:
    """Consumers and the receipt poller alone (run as many as you need)."""
    _run_alone("consumers", metrics_host, metrics_port)


@app.command()
def plan(
    start: Annotated[str, typer.Option(help="Window start, ISO 8601 with offset.")],
    end: Annotated[str, typer.Option(help="Window end (exclusive), ISO 8601 with offset.")],
    workers: Annotated[
        int,
        typer.Option(help="Processes planning user-id ranges side by side (one per core).", min=1),
    ] = 1,
) -> None:
    """Plan an explicit window (ops backfill); prints how many messages were created.

    Users whose planning mark already covers the window are not read again ("N users"
    counts those planned). On a terminal, a progress line on stderr shows users done,
    messages created and the rate.
    """
    from tepat.cli_progress import PlanProgress
    from tepat.plan_workers import plan_parallel
    from tepat.runtime import open_runtime

    begin, finish = _parse_instant(start, "--start"), _parse_instant(end, "--end")
    if finish <= begin:
        raise typer.BadParameter("must be after --start", param_hint="--end")
    settings = _settings()
    progress = PlanProgress(sys.stderr, live=sys.stderr.isatty())

    async def go() -> None:
        async with open_runtime(settings) as rt:
            await plan_parallel(rt, begin, finish, workers, done=progress)
        typer.echo(progress.finish())

    _run(go())


@app.command()
def doctor() -> None:
    """Check the configuration, store, broker, its scheduler, Expo credentials and tz release.

    One line per check, with a fix for each failure; exits 1 if any check failed.
    """
    from tepat.doctor import diagnose

    # The verdicts are the output; library logs would only repeat them.
    configure_logging("CRITICAL")

    async def go() -> bool:
        failed = False
        async for check in diagnose(load_settings):
            typer.echo(check.line())
            failed = failed or check.failed
        return failed

    if asyncio.run(go()):
        raise typer.Exit(1)


@sandbox_app.callback()
def _sandbox() -> None:
    configure_logging()


def _serve_sandbox(app: Any, host: str, port: int, says: str = "", *, h2c: bool = False) -> None:
    """Serve a sandbox in the foreground, first printing ``says`` (how to point Tepat at it)."""
    from tepat.sandbox.runner import serve_app, serve_h2c_app

    if says:
        print(f"tepat: {says}", flush=True)
    (serve_h2c_app if h2c else serve_app)(app, host, port)


def _private_file(path: Path | str, text: str) -> None:
    Path(path).write_text(text)
    Path(path).chmod(0o600)


@sandbox_app.command("expo")
def sandbox_expo(
    host: Host = "127.0.0.1",
    port: Port = 8001,
    receipt_delay: Annotated[
        float, typer.Option(help="Seconds before a ticket's receipt is available.", min=0)
    ] = 5.0,
    access_token: Annotated[
        str | None, typer.Option(help="Require this Bearer token, as Expo does when set.")
    ] = None,
    rate_limit: Annotated[
        float | None, typer.Option(help="Notifications/s before answering 429.", min=0)
    ] = None,
    token_rate_limit: Annotated[
        float | None,
        typer.Option(help="Notifications/s per access token (per project) before 429.", min=0),
    ] = None,
) -> None:
    """A local server that behaves like Expo's push API."""
    from tepat.sandbox.expo import ExpoSandbox

    sandbox = ExpoSandbox(
        receipt_delay_seconds=receipt_delay,
        access_token=access_token,
        rate_limit=rate_limit or None,
        token_rate_limit=token_rate_limit or None,
    )
    _serve_sandbox(sandbox.app, host, port)


@sandbox_app.command("fcm")
def sandbox_fcm(
    host: Host = "127.0.0.1",
    port: Port = 8003,
    rate_limit: Annotated[
        float | None, typer.Option(help="Messages/s before answering 429 QUOTA_EXCEEDED.", min=0)
    ] = None,
    credentials: Annotated[
        Path, typer.Option(help="Where to write a service account JSON it trusts.")
    ] = Path("fcm-sandbox-service-account.json"),
) -> None:
    """A local server that behaves like FCM HTTP v1 and Google's token endpoint."""
    import json

    from tepat.sandbox.fcm import FcmSandbox

    sandbox = FcmSandbox(rate_limit=rate_limit or None)
    url = f"http://{host}:{port}"
    _private_file(credentials, json.dumps(sandbox.service_account(url)))
    says = f"FCM sandbox at {url} (TEPAT_FCM_URL={url} TEPAT_FCM_CREDENTIALS_FILE={credentials})"
    _serve_sandbox(sandbox.app, host, port, says, h2c=True)


@sandbox_app.command("twilio")
def sandbox_twilio(
    host: Host = "127.0.0.1",
    port: Port = 8002,
    rate_limit: Annotated[
        float | None, typer.Option(help="Requests/s before answering 429 (code 20429).", min=0)
    ] = None,
    callback_delay: Annotated[
        float, typer.Option(help="Seconds between a message's status callbacks.", min=0)
    ] = 1.0,
) -> None:
    """A local server that behaves like Twilio's Messages API (SMS), with signed callbacks."""
    from tepat.sandbox.twilio import TwilioSandbox

    sandbox = TwilioSandbox(rate_limit=rate_limit or None, callback_delay_seconds=callback_delay)
    says = (
        f"Twilio sandbox at http://{host}:{port} (TEPAT_TWILIO_ACCOUNT_SID={sandbox.account_sid}"
        f" TEPAT_TWILIO_AUTH_TOKEN={sandbox.auth_token})"
    )
    _serve_sandbox(sandbox.app, host, port, says)


@sandbox_app.command("apns")
def sandbox_apns(
    host: Host = "127.0.0.1",
    port: Port = 8004,
    rate_limit: Annotated[
        float | None, typer.Option(help="Requests/s before answering 429 TooManyRequests.", min=0)
    ] = None,
    key_file: Annotated[
        str, typer.Option(help="Where to write an auth key (.p8) it trusts.")
    ] = "apns-sandbox.p8",
) -> None:
    """A local server that behaves like APNs (HTTP/2 without TLS, token auth)."""
    from tepat.sandbox.apns import ApnsSandbox

    sandbox = ApnsSandbox(rate_limit=rate_limit or None)
    _private_file(key_file, sandbox.signing_key("SANDBOXKEY"))
    url = f"http://{host}:{port}"
    says = (
        f"APNs sandbox at {url} (TEPAT_APNS_URL={url} TEPAT_APNS_KEY_FILE={key_file}"
        f" TEPAT_APNS_KEY_ID=SANDBOXKEY TEPAT_APNS_TEAM_ID={sandbox.team_id}"
        f" TEPAT_APNS_TOPIC={sandbox.topic})"
    )
    _serve_sandbox(sandbox.app, host, port, says, h2c=True)


@sandbox_app.command("webpush")
def sandbox_webpush(
    host: Host = "127.0.0.1",
    port: Port = 8005,
    rate_limit: Annotated[
        float | None, typer.Option(help="Requests/s before answering 429.", min=0)
    ] = None,
    key_file: Annotated[
        str, typer.Option(help="Where to write a VAPID private key (PEM) it trusts.")
    ] = "webpush-sandbox-vapid.pem",
) -> None:
    """A local server that behaves like a browser's Web Push service (VAPID, aes128gcm);
    `POST /_sandbox/subscribe` gives a subscription to register as a `webpush` device."""
    from tepat.sandbox.webpush import WebPushSandbox

    sandbox = WebPushSandbox(rate_limit=rate_limit or None)
    _private_file(key_file, sandbox.vapid_key())
    url = f"http://{host}:{port}"
    says = (
        f"Web Push sandbox at {url} (TEPAT_WEBPUSH_URL={url}"
        f" TEPAT_WEBPUSH_VAPID_PRIVATE_KEY_FILE={key_file}"
        " TEPAT_WEBPUSH_VAPID_SUBJECT=mailto:you@example.com)"
    )
    _serve_sandbox(sandbox.app, host, port, says)


@dlq_app.command("list")
def dlq_list() -> None:
    """Broker dead letters (NACKed past the limit) and failed messages."""
    from tepat.runtime import open_runtime

    settings = _settings()

    async def go() -> None:
        async with open_runtime(settings) as rt:
            letters = await rt.broker.dead_letters(rt.queues)
            failed = await rt.store.dead_letters(limit=100)
        typer.echo(f"broker dead letters: {len(letters)}")
        for d in letters:
            typer.echo(f"  {d.id}\t{d.queue}\tattempts={d.attempts}\t{d.reason}")
        typer.echo(f"failed messages: {len(failed)}")
        for m in failed:
            typer.echo(f"  {m.id}\t{m.category}\tattempts={m.attempts}\t{m.status_reason}")

    _run(go())


@dlq_app.command("replay")
def dlq_replay(
    dead_letter_id: Annotated[str, typer.Argument(help="Id from `tepat dlq list`.")],
) -> None:
    """Put one broker dead letter back on its queue, due now."""
    from tepat.runtime import open_runtime

    settings = _settings()

    async def go() -> bool:
        async with open_runtime(settings) as rt:
            return await rt.broker.replay_dead_letter(dead_letter_id)

    if not _run(go()):
        typer.echo(f"no dead letter {dead_letter_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"replayed {dead_letter_id}")


def main() -> None:
    app(prog_name="tepat")


if __name__ == "__main__":  # pragma: no cover
    main()
