"""Run a sandbox over real HTTP: in the foreground (CLI) or in a thread (tests, demo, bench)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.provider import FakeProvider
from tepat.sandbox.runner import running_app, serve_app
from tepat.sandbox.twilio import TwilioSandbox

Provider = TypeVar("Provider", bound=FakeProvider[Any])


def serve_sandbox(
    host: str = "127.0.0.1",
    port: int = 8090,
    receipt_delay_seconds: float = 0.0,
    access_token: str | None = None,
    rate_limit: float | None = 600.0,
) -> None:
    """Serve a fake Expo push API until interrupted (``tepat sandbox expo --port N``).

    Point Tepat at it with ``TEPAT_EXPO_URL=http://HOST:PORT``. The rate limit defaults to
    Expo's 600 notifications/s; pass ``None`` (or 0) to turn it off.
    """
    sandbox = ExpoSandbox(
        receipt_delay_seconds=receipt_delay_seconds,
        access_token=access_token,
        rate_limit=rate_limit or None,
    )
    serve_app(sandbox.app, host, port)


@dataclass(frozen=True, slots=True)
class Running(Generic[Provider]):
    sandbox: Provider
    base_url: str  # e.g. http://127.0.0.1:54321, what TEPAT_EXPO_URL (or _TWILIO_URL) takes


RunningSandbox = Running[ExpoSandbox]
RunningTwilioSandbox = Running[TwilioSandbox]


@contextmanager
def running_provider(sandbox: Provider, name: str) -> Iterator[Running[Provider]]:
    """Serve ``sandbox`` over HTTP on a free port, in a daemon thread."""
    with running_app(sandbox.app, name) as url:
        try:
            yield Running(sandbox, url)
        finally:
            # A stalled answer would hold uvicorn's graceful shutdown until its limit.
            sandbox.release_stalled()


def running_sandbox(sandbox: ExpoSandbox | None = None) -> AbstractContextManager[RunningSandbox]:
    """Serve ``sandbox`` (a fresh Expo sandbox by default) on a free port, in a thread."""
    return running_provider(sandbox or ExpoSandbox(), "expo-sandbox")


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


def running_twilio_sandbox(
    sandbox: TwilioSandbox | None = None,
) -> AbstractContextManager[RunningTwilioSandbox]:
    """Serve ``sandbox`` (a fresh Twilio sandbox by default) on a free port, in a thread."""
    return running_provider(sandbox or TwilioSandbox(), "twilio-sandbox")
