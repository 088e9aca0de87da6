"""The secondary providers' settings (failover): a second Twilio account
(TEPAT_TWILIO_SECONDARY_*) checked as the first is, and a second SMTP relay
(TEPAT_SMTP_SECONDARY_URL); what the channels are built from them."""

from __future__ import annotations

import pytest

from tepat.clock import FakeClock
from tepat.config import ConfigError, load_settings
from tepat.wiring import build_sms_channel, smtp_config
from tests.unit.test_config_email import GOOD as EMAIL
from tests.unit.test_config_twilio import GOOD as SMS

SECOND = {
    "twilio_secondary_account_sid": "AC" + "ab" * 16,
    "twilio_secondary_auth_token": "s" * 32,
}


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"twilio_secondary_account_sid": "AC123"}, "TEPAT_TWILIO_SECONDARY_ACCOUNT_SID"),
        ({"twilio_secondary_auth_token": None}, "TEPAT_TWILIO_SECONDARY_AUTH_TOKEN"),
        ({"twilio_secondary_account_sid": None}, "TEPAT_TWILIO_SECONDARY_AUTH_TOKEN"),
        ({"twilio_secondary_from": "+0123"}, "TEPAT_TWILIO_SECONDARY_FROM"),
        ({"twilio_secondary_url": "api.twilio.com"}, "TEPAT_TWILIO_SECONDARY_URL"),
        ({"smtp_secondary_url": "relay2.example:25"}, "TEPAT_SMTP_SECONDARY_URL"),
        ({"smtp_secondary_url": "smtp://bad host"}, "TEPAT_SMTP_SECONDARY_URL"),
        ({"smtp_secondary_url": "smtp://relay2.example:99999"}, "TEPAT_SMTP_SECONDARY_URL"),
    ],
)
def test_bad_values_name_the_variable(change: dict[str, object], variable: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**{**SMS, **SECOND, **change})
    assert str(e.value).startswith(f"tepat: bad configuration: {variable}: ")


def test_the_second_account_sends_from_the_first_accounts_sender_unless_given_its_own() -> None:
    clock = FakeClock()
    settings = load_settings(**SMS, **SECOND, twilio_secondary_url="http://127.0.0.1:9/")
    second = build_sms_channel(settings, clock, secondary=True)
    assert second is not None and build_sms_channel(load_settings(**SMS), clock, True) is None
    assert (second.account_sid, second.from_number) == (
        SECOND["twilio_secondary_account_sid"],
        SMS["twilio_from"],
    )
    assert str(second._client.base_url).startswith("http://127.0.0.1:9")
    own = load_settings(**SMS, **SECOND, twilio_secondary_from="Tepat")
    assert build_sms_channel(own, clock, True).from_number == "Tepat"  # type: ignore[union-attr]


def test_the_second_relay_is_the_first_at_another_address() -> None:
    settings = load_settings(**EMAIL, smtp_secondary_url="smtp://ops:pw@relay2.example:2525")
    first, second = smtp_config(settings), smtp_config(settings, secondary=True)
    assert first is not None and second is not None
    assert (second.host, second.port, second.username, second.password) == (
        "relay2.example",
        2525,
        "ops",
        "pw",
    )
    assert (second.sender, second.tls, second.rate) == (first.sender, first.tls, first.rate)
    assert smtp_config(load_settings(**EMAIL), secondary=True) is None


def test_a_second_account_needs_a_sender_when_the_first_has_only_a_messaging_service() -> None:
    service = {**SMS, "twilio_from": None, "twilio_messaging_service_sid": "MG" + "ab" * 16}
    with pytest.raises(ConfigError, match="TEPAT_TWILIO_SECONDARY_FROM: needed with the second"):
        load_settings(**service, **SECOND)
