"""Fixtures for tests against the Expo sandbox over real HTTP. A test module binds them
to module names (``clock = expo_fixtures.clock``): imported by name, each test that
takes one as an argument would shadow the import."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tepat.clock import FakeClock
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import RunningSandbox, running_sandbox


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sandbox(clock: FakeClock) -> ExpoSandbox:
    return ExpoSandbox(clock=clock, receipt_delay_seconds=900)


@pytest.fixture
def server(sandbox: ExpoSandbox) -> Iterator[RunningSandbox]:
    with running_sandbox(sandbox) as running:
        yield running
