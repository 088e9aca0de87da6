"""TEPAT_SMTP_*, TEPAT_PUBLIC_URL and TEPAT_UNSUBSCRIBE_*: a bad value stops the process
with one line naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tepat.config import ConfigError, load_settings

SECRET = "s" * 32
GOOD = {
    "smtp_host": "smtp.example.com",
    "smtp_from": "Shop <no-reply@shop.example>",
    "public_url": "https://tepat.example",
    "unsubscribe_secret": SECRET,
}


def test_email_is_off_by_default() -> None:
    s = load_settings()
    assert s.smtp_host is None and s.unsubscribe_secret is None


def test_a_complete_email_configuration() -> None:
    s = load_settings(**GOOD, smtp_tls="implicit", smtp_rate=10)
    assert s.smtp_tls == "implicit" and s.smtp_rate == 10


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"smtp_host": "smtp://x"}, "TEPAT_SMTP_HOST"),
        ({"smtp_port": 0}, "TEPAT_SMTP_PORT"),
        ({"smtp_tls": "ssl"}, "TEPAT_SMTP_TLS"),
        ({"smtp_from": None}, "TEPAT_SMTP_FROM"),
        ({"smtp_from": "nobody"}, "TEPAT_SMTP_FROM"),
        ({"smtp_username": "u"}, "TEPAT_SMTP_PASSWORD"),
        ({"smtp_password": "p"}, "TEPAT_SMTP_PASSWORD"),
        # A login over a connection without TLS: the password would cross in clear.
        ({"smtp_tls": "none", "smtp_username": "u", "smtp_password": "p"}, "TEPAT_SMTP_PASSWORD"),
        ({"smtp_rate": 0}, "TEPAT_SMTP_RATE"),
        ({"smtp_timeout": -1}, "TEPAT_SMTP_TIMEOUT"),
        ({"smtp_connections": 0}, "TEPAT_SMTP_CONNECTIONS"),
        ({"public_url": None}, "TEPAT_PUBLIC_URL"),
        ({"public_url": "http://tepat.example"}, "TEPAT_PUBLIC_URL"),
        ({"public_url": "ftp://tepat.example"}, "TEPAT_PUBLIC_URL"),
        ({"unsubscribe_secret": None}, "TEPAT_UNSUBSCRIBE_SECRET"),
        ({"unsubscribe_secret": "short"}, "TEPAT_UNSUBSCRIBE_SECRET"),
        ({"unsubscribe_mailto": "not-an-address"}, "TEPAT_UNSUBSCRIBE_MAILTO"),
        ({"unsubscribe_link_days": 0}, "TEPAT_UNSUBSCRIBE_LINK_DAYS"),
        ({"email_events_secret": "short"}, "TEPAT_EMAIL_EVENTS_SECRET"),
    ],
)
def test_a_bad_value_names_its_variable(change: dict[str, object], variable: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**{**GOOD, **change})
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith(f"tepat: bad configuration: {variable}:"), line


def test_a_missing_ca_file_names_its_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TEPAT_SMTP_CA_FILE"):
        load_settings(**GOOD, smtp_ca_file=str(tmp_path / "missing.pem"))


def test_http_public_url_on_localhost_for_development() -> None:
    s = load_settings(**{**GOOD, "public_url": "http://127.0.0.1:8000/"})
    assert s.public_url == "http://127.0.0.1:8000"


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_SMTP_HOST", "relay.internal")
    monkeypatch.setenv("TEPAT_SMTP_FROM", "no-reply@shop.example")
    monkeypatch.setenv("TEPAT_PUBLIC_URL", "https://tepat.example")
    monkeypatch.setenv("TEPAT_UNSUBSCRIBE_SECRET", SECRET)
    monkeypatch.setenv("TEPAT_SMTP_TLS", "bogus")
    with pytest.raises(ConfigError, match=r"^tepat: bad configuration: TEPAT_SMTP_TLS:"):
        load_settings()


def test_a_plaintext_login_only_when_explicitly_allowed() -> None:
    login = {"smtp_tls": "none", "smtp_username": "u", "smtp_password": "p"}
    s = load_settings(**GOOD, **login, smtp_allow_plaintext_auth=True)
    assert s.smtp_tls == "none" and s.smtp_username == "u"
    # Without a login, no TLS is no secret in clear: still allowed.
    assert load_settings(**GOOD, smtp_tls="none").smtp_tls == "none"
