"""Run a sandbox over real HTTP in a thread, beside a test, the demo or a bench."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.provider import FakeProvider
from tepat.sandbox.runner import running_app, running_h2c_app
from tepat.sandbox.twilio import TwilioSandbox

Provider = TypeVar("Provider", bound=FakeProvider[Any])


@dataclass(frozen=True, slots=True)
class Running(Generic[Provider]):
    sandbox: Provider
    base_url: str  # e.g. http://127.0.0.1:54321, what TEPAT_EXPO_URL (or _TWILIO_URL) takes


RunningSandbox = Running[ExpoSandbox]
RunningTwilioSandbox = Running[TwilioSandbox]


@contextmanager
def running_sandbox(sandbox: Provider) -> Iterator[Running[Provider]]:
    run = running_h2c_app if sandbox.http2 else running_app
    with run(sandbox.app, type(sandbox).__name__) as url:
        try:
            yield Running(sandbox, url)
        finally:
            # A stalled answer would hold uvicorn's graceful shutdown until its limit.
            sandbox.release_stalled()
