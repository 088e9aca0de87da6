"""The credentials' settings (issue 19): a key or secret too short to resist guessing, or an
app's event types that name nothing, stop the process with one line naming the variable."""

from __future__ import annotations

import json

import pytest

from tepat.config import ConfigError, load_settings

APP_KEYS = json.dumps({"billing": "b" * 40, "marketing": "m" * 40})


def test_secure_defaults() -> None:
    s = load_settings()
    assert s.allow_user_notifications is False
    assert (s.max_devices_per_user, s.max_reminders_per_user) == (20, 50)
    assert (s.jwt_max_lifetime_seconds, s.jwt_issuer, s.jwt_audience) == (86400, None, None)
    assert s.auth_failures_per_minute == 10
    assert s.app_event_types is None


def test_good_credentials_and_app_event_types() -> None:
    s = load_settings(
        admin_api_key="a" * 24,
        jwt_secret="j" * 32,
        jwt_issuer=" https://login.shop ",
        app_keys=APP_KEYS,
        app_event_types=json.dumps({"marketing": ["order.paid"]}),
    )
    assert s.jwt_issuer == "https://login.shop"
    assert s.app_event_types == {"marketing": ["order.paid"]}
    # empty values mean unset, as for the other secrets
    assert load_settings(admin_api_key="", jwt_secret="").jwt_secret is None


@pytest.mark.parametrize(
    ("change", "variable", "words"),
    [
        ({"admin_api_key": "a" * 23}, "TEPAT_ADMIN_API_KEY", "at least 24 characters"),
        ({"jwt_secret": "j" * 31}, "TEPAT_JWT_SECRET", "at least 32 bytes"),
        ({"jwt_max_lifetime_seconds": 0}, "TEPAT_JWT_MAX_LIFETIME_SECONDS", ""),
        ({"auth_failures_per_minute": 0}, "TEPAT_AUTH_FAILURES_PER_MINUTE", ""),
        ({"max_devices_per_user": 0}, "TEPAT_MAX_DEVICES_PER_USER", ""),
        ({"max_reminders_per_user": 0}, "TEPAT_MAX_REMINDERS_PER_USER", ""),
        ({"app_event_types": "not json"}, "TEPAT_APP_EVENT_TYPES", "expected a JSON object"),
        (
            {"app_keys": APP_KEYS, "app_event_types": json.dumps({"shop": ["order.paid"]})},
            "TEPAT_APP_EVENT_TYPES",
            "'shop': not an app of TEPAT_APP_KEYS",
        ),
        (
            {"app_keys": APP_KEYS, "app_event_types": json.dumps({"billing": ["nope"]})},
            "TEPAT_APP_EVENT_TYPES",
            "'nope' is not a configured event type",
        ),
    ],
)
def test_a_bad_credential_setting_stops_with_one_line(
    change: dict[str, object], variable: str, words: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**change)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"tepat: bad configuration: {variable}: ")
    assert words in line
