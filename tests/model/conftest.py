"""Prints what the model test exercised (tests/model/census.py) at the end of the session,
and makes its examples cheaper to start."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import httpx._transports.default as httpx_transports
import pytest
from _pytest.terminal import TerminalReporter

from tests.model.census import REPORTS


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if REPORTS:
        terminalreporter.section("model test: expectations by kind")
        for line in REPORTS:
            terminalreporter.write_line(line)


@pytest.fixture(scope="module", autouse=True)
def shared_ssl_context() -> Iterator[None]:
    """One SSL context for every HTTP client the examples' runtimes make: building one
    reads the CA bundle (about 0.1 s), and each example's runtime makes three clients
    (Expo, Twilio, webhooks) that it never uses over TLS."""
    make = vars(httpx_transports)["create_ssl_context"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx_transports, "create_ssl_context", functools.cache(make))
        yield
