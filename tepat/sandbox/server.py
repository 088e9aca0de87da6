"""Run a sandbox over real HTTP: in the foreground (CLI) or in a thread (tests, demo, bench).

The Expo sandbox's entry points live here, and :func:`running_provider`, which serves any
sandbox of the kit (:mod:`tepat.sandbox.twilio_server` uses it for Twilio).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.provider import FakeProvider
from tepat.sandbox.runner import STARTUP_TIMEOUT, running_app, serve_app

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


@contextmanager
def running_provider(
    sandbox: Provider, name: str, host: str = "127.0.0.1", startup_timeout: float = STARTUP_TIMEOUT
) -> Iterator[Running[Provider]]:
    """Serve ``sandbox`` over HTTP on a free port, in a daemon thread."""
    with running_app(sandbox.app, name, host, startup_timeout) as url:
        try:
            yield Running(sandbox, url)
        finally:
            # A stalled answer would hold uvicorn's graceful shutdown until its limit.
            sandbox.release_stalled()


@contextmanager
def running_sandbox(
    sandbox: ExpoSandbox | None = None,
    host: str = "127.0.0.1",
    startup_timeout: float = STARTUP_TIMEOUT,
) -> Iterator[RunningSandbox]:
    """Serve ``sandbox`` (a fresh Expo sandbox by default) on a free port, in a thread."""
    with running_provider(sandbox or ExpoSandbox(), "expo-sandbox", host, startup_timeout) as r:
        yield r
