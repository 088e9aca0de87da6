"""Under TEPAT_TEST_REQUIRE_SERVICES=1 (scripts/test.sh) a skip for want of a service
fails; a skip listed as allowed, an xfail, and every skip without the variable stay."""

from __future__ import annotations

import pytest

from tests.support.require_services import ALLOWED_SKIPS, REQUIRE_ENV

# the inner run: only this plugin (pytest-asyncio would warn of its unset loop scope)
PLUGINS = ("-p", "tests.support.require_services", "-p", "no:asyncio")
ALLOWED = next(iter(ALLOWED_SKIPS))

TESTS = f"""
import os
import pytest

def test_needs_a_broker():
    pytest.skip("TEPAT_TEST_STOMP_URL is not set")

@pytest.mark.skipif(True, reason="promtool not installed")
def test_marked():
    pass

def test_allowed():
    pytest.skip("... {ALLOWED} ...")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False

def test_passes():
    pass
"""


def test_a_service_skip_fails_when_services_are_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*PLUGINS, "-rA")
    # a skip in setup (the skipif mark) fails as an error of that test
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=1, xfailed=1)
    for line in ("FAILED *test_needs_a_broker*", "ERROR *test_marked*", f"SKIPPED *{ALLOWED}*"):
        result.stdout.fnmatch_lines([line])
    assert "TEPAT_TEST_STOMP_URL is not set" in result.stdout.str()


def test_a_skip_at_collection_fails_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    pytester.makepyfile(
        "import pytest\npytest.skip('no chromium', allow_module_level=True)\n"
        "def test_x():\n    pass\n"
    )
    result = pytester.runpytest(*PLUGINS)
    result.assert_outcomes(errors=1)
    assert "no chromium" in result.stdout.str()


def test_without_the_variable_every_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*PLUGINS)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)
