"""Run the Twilio sandbox over real HTTP: in the foreground (CLI) or in a thread (tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tepat.sandbox.runner import STARTUP_TIMEOUT, serve_app
from tepat.sandbox.server import Running, running_provider
from tepat.sandbox.twilio import TwilioSandbox

RunningTwilioSandbox = Running[TwilioSandbox]


def serve_twilio_sandbox(
    host: str = "127.0.0.1",
    port: int = 8002,
    rate_limit: float | None = None,
    callback_delay_seconds: float = 1.0,
) -> None:
    """Serve a fake Twilio Messages API until interrupted (``tepat sandbox twilio``).

    Point Tepat at it with ``TEPAT_TWILIO_URL=http://HOST:PORT`` and the sandbox's
    account SID and auth token (printed at start).
    """
    sandbox = TwilioSandbox(
        rate_limit=rate_limit or None, callback_delay_seconds=callback_delay_seconds
    )
    print(
        f"tepat: Twilio sandbox at http://{host}:{port}"
        f" (TEPAT_TWILIO_ACCOUNT_SID={sandbox.account_sid}"
        f" TEPAT_TWILIO_AUTH_TOKEN={sandbox.auth_token})",
        flush=True,
    )
    serve_app(sandbox.app, host, port)


@contextmanager
def running_twilio_sandbox(
    sandbox: TwilioSandbox | None = None,
    host: str = "127.0.0.1",
    startup_timeout: float = STARTUP_TIMEOUT,
) -> Iterator[RunningTwilioSandbox]:
    """Serve ``sandbox`` (a fresh one by default) on a free port, in a daemon thread."""
    with running_provider(sandbox or TwilioSandbox(), "twilio-sandbox", host, startup_timeout) as r:
        yield r
