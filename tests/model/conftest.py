"""Prints what the model test exercised (tests/model/census.py) at the end of the session.
(Its examples' HTTP clients share one TLS context: tests/support/shared_ssl_context.py.)"""

from __future__ import annotations

from _pytest.terminal import TerminalReporter

from tests.model.census import REPORTS


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if REPORTS:
        terminalreporter.section("model test: expectations by kind")
        for line in REPORTS:
            terminalreporter.write_line(line)
