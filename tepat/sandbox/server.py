"""Run a sandbox over real HTTP: in the foreground (CLI) or in a thread (tests, demo, bench)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.provider import FakeProvider
from tepat.sandbox.runner import running_app, serve_app
from tepat.sandbox.twilio import TwilioSandbox

Provider = TypeVar("Provider", bound=FakeProvider[Any])


def serve_sandbox(
    host: str,
    port: int,
    receipt_delay_seconds: float,
    access_token: str | None,
    rate_limit: float | None,
) -> None:
    """Serve a fake Expo push API until interrupted (``tepat sandbox expo``); point Tepat
    at it with ``TEPAT_EXPO_URL=http://HOST:PORT``. No rate limit (``None`` or 0): unlimited."""
    sandbox = ExpoSandbox(
        receipt_delay_seconds=receipt_delay_seconds,
        access_token=access_token,
        rate_limit=rate_limit or None,
    )
    serve_app(sandbox.app, host, port)


def serve_twilio_sandbox(
    host: str, port: int, rate_limit: float | None, callback_delay_seconds: float
) -> None:
    """Serve a fake Twilio Messages API until interrupted (``tepat sandbox twilio``); point
    Tepat at it with ``TEPAT_TWILIO_URL=http://HOST:PORT`` and the credentials it prints."""
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


@dataclass(frozen=True, slots=True)
class Running(Generic[Provider]):
    sandbox: Provider
    base_url: str  # e.g. http://127.0.0.1:54321, what TEPAT_EXPO_URL (or _TWILIO_URL) takes


RunningSandbox = Running[ExpoSandbox]
RunningTwilioSandbox = Running[TwilioSandbox]


@contextmanager
def running_sandbox(sandbox: Provider) -> Iterator[Running[Provider]]:
    """Serve ``sandbox`` over HTTP on a free port, in a daemon thread."""
    with running_app(sandbox.app, type(sandbox).__name__) as url:
        try:
            yield Running(sandbox, url)
        finally:
            # A stalled answer would hold uvicorn's graceful shutdown until its limit.
            sandbox.release_stalled()
