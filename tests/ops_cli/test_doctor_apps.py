"""`tepat doctor` per app (issue 23): each app's provider accounts checked with its own
Settings, against the Expo and Twilio sandboxes (nothing sent). The default app's lines
are today's; another app's are named after it, so a failing account says whose it is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from tepat.clock import SystemClock
from tepat.config import Settings
from tepat.doctor import Check, Status, check_apps, provider_checks
from tepat.domain.apps import DEFAULT_APP
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import Running, RunningTwilioSandbox, running_sandbox
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox

EXPO_TOKEN = "expo-token-of-the-default-app"


@pytest.fixture
def expo() -> Iterator[Running[ExpoSandbox]]:
    with running_sandbox(ExpoSandbox(access_token=EXPO_TOKEN)) as running:
        yield running


@pytest.fixture
def twilio() -> Iterator[RunningTwilioSandbox]:
    with running_sandbox(TwilioSandbox()) as running:
        yield running


def app_settings(expo_url: str, expo_token: str, twilio_url: str, twilio_token: str) -> Settings:
    return Settings(
        expo_url=expo_url,
        expo_access_token=SecretStr(expo_token),
        twilio_account_sid=DEFAULT_ACCOUNT_SID,
        twilio_auth_token=SecretStr(twilio_token),
        twilio_from="+14155550100",
        twilio_url=twilio_url,
        public_url="https://t.example",
    )


async def collect(apps: list[tuple[str, Settings]]) -> list[Check]:
    return [check async for check in check_apps(apps, wait=5)]


async def test_each_app_s_accounts_are_checked_with_its_own_credentials_and_named_after_it(
    expo: Running[ExpoSandbox], twilio: RunningTwilioSandbox
) -> None:
    good = app_settings(expo.base_url, EXPO_TOKEN, twilio.base_url, DEFAULT_AUTH_TOKEN)
    bogus = app_settings(expo.base_url, "not-the-token", twilio.base_url, "0" * 32)
    checks = await collect([(DEFAULT_APP, good), ("b", bogus)])

    verdicts = [(c.name, c.status) for c in checks]
    # The sandboxes are not Expo or Twilio: the right credentials warn (nothing real is
    # sent), the wrong ones fail.
    assert verdicts == [
        ("expo", Status.WARN),
        ("twilio", Status.WARN),
        ("app b: expo", Status.FAIL),
        ("app b: twilio", Status.FAIL),
    ]
    assert "accepts the access token" in checks[0].detail
    assert "refused the request" in checks[2].detail
    assert "refused the account SID and auth token (HTTP 401)" in checks[3].detail
    assert checks[3].line().startswith("FAIL  app b: twilio ")
    assert all("not-the-token" not in c.line() and "0" * 32 not in c.line() for c in checks)
    assert expo.sandbox.received() == [] and twilio.sandbox.received() == []  # nothing sent


async def test_the_default_app_s_lines_are_today_s(
    expo: Running[ExpoSandbox], twilio: RunningTwilioSandbox
) -> None:
    settings = app_settings(expo.base_url, EXPO_TOKEN, twilio.base_url, DEFAULT_AUTH_TOKEN)
    alone = [c async for c in provider_checks(settings, SystemClock(), wait=5)]
    assert await collect([(DEFAULT_APP, settings)]) == alone


async def test_an_app_without_sms_has_no_twilio_line_and_no_apps_no_lines(
    expo: Running[ExpoSandbox],
) -> None:
    only_push = Settings(expo_url=expo.base_url, expo_access_token=SecretStr(EXPO_TOKEN))
    checks = await collect([("shop", only_push)])
    assert [(c.name, c.status) for c in checks] == [("app shop: expo", Status.WARN)]
    assert await collect([]) == []
