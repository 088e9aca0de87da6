"""TEPAT_TWILIO_* and TEPAT_SMS_MAX_SEGMENTS: a bad value stops the process with one line
naming the variable."""

from __future__ import annotations

import pytest

from tepat.config import ConfigError, load_settings

SID = "AC" + "0123456789abcdef" * 2
GOOD = {"twilio_account_sid": SID, "twilio_auth_token": "t" * 32, "twilio_from": "+14155550100"}


def test_sms_is_off_by_default() -> None:
    s = load_settings()
    assert s.twilio_account_sid is None and s.twilio_auth_token is None
    assert (s.twilio_url, s.twilio_rate, s.sms_max_segments) == ("https://api.twilio.com", 10, 3)


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"twilio_from": "Tepat"},  # alphanumeric sender id
        {"twilio_from": "72345"},  # short code
        {"twilio_from": None, "twilio_messaging_service_sid": "MG" + "ab" * 16},
        {"twilio_url": "http://127.0.0.1:8091/", "twilio_rate": 1.5, "sms_max_segments": 10},
    ],
)
def test_good_twilio_configurations(change: dict[str, object]) -> None:
    s = load_settings(**{**GOOD, **change})
    assert s.twilio_account_sid == SID
    assert not s.twilio_url.endswith("/")


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"twilio_account_sid": "AC123"}, "TEPAT_TWILIO_ACCOUNT_SID"),
        ({"twilio_account_sid": "SK" + "0" * 32}, "TEPAT_TWILIO_ACCOUNT_SID"),
        ({"twilio_auth_token": None}, "TEPAT_TWILIO_AUTH_TOKEN"),
        ({"twilio_auth_token": " "}, "TEPAT_TWILIO_AUTH_TOKEN"),
        ({"twilio_account_sid": None}, "TEPAT_TWILIO_AUTH_TOKEN"),
        ({"twilio_from": "14155550100x"}, "TEPAT_TWILIO_FROM"),
        ({"twilio_from": "+0123"}, "TEPAT_TWILIO_FROM"),
        ({"twilio_from": "TooLongSender1"}, "TEPAT_TWILIO_FROM"),
        ({"twilio_from": None}, "TEPAT_TWILIO_MESSAGING_SERVICE_SID"),
        ({"twilio_messaging_service_sid": "MG1"}, "TEPAT_TWILIO_MESSAGING_SERVICE_SID"),
        ({"twilio_url": "api.twilio.com"}, "TEPAT_TWILIO_URL"),
        ({"twilio_rate": 0}, "TEPAT_TWILIO_RATE"),
        ({"sms_max_segments": 0}, "TEPAT_SMS_MAX_SEGMENTS"),
        ({"sms_max_segments": 11}, "TEPAT_SMS_MAX_SEGMENTS"),
    ],
)
def test_bad_values_name_the_variable(change: dict[str, object], variable: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**{**GOOD, **change})
    assert str(e.value).startswith(f"tepat: bad configuration: {variable}: ")
    assert "\n" not in str(e.value)


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_TWILIO_ACCOUNT_SID", SID)
    monkeypatch.setenv("TEPAT_TWILIO_AUTH_TOKEN", "t" * 32)
    monkeypatch.setenv("TEPAT_TWILIO_FROM", "+14155550100")
    monkeypatch.setenv("TEPAT_TWILIO_RATE", "25")
    s = load_settings()
    assert s.twilio_auth_token is not None and s.twilio_auth_token.get_secret_value() == "t" * 32
    assert s.twilio_rate == 25
    monkeypatch.setenv("TEPAT_TWILIO_RATE", "fast")
    with pytest.raises(ConfigError, match="TEPAT_TWILIO_RATE"):
        load_settings()
