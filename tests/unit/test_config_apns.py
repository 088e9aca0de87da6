"""TEPAT_APNS_*: the auth key parses at start, its companions are required with it, and the
runtime gets an ``apns`` provider only when they are set."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tepat.adapters.apns_push import ApnsPushProvider
from tepat.clock import FakeClock
from tepat.config import ConfigError, load_settings
from tepat.runtime import make_push_providers


def pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path / "AuthKey_KEYID12345.p8"
    path.write_text(pem(ec.generate_private_key(ec.SECP256R1())))
    return str(path)


def apns(key_file: str, **change: object) -> dict[str, object]:
    good = {
        "apns_key_file": key_file,
        "apns_key_id": "KEYID12345",
        "apns_team_id": "TEAM123456",
        "apns_topic": "dev.tepat.app",
    }
    return {**good, **change}


async def test_apns_is_a_provider_only_when_configured(key_file: str) -> None:
    clock = FakeClock()
    assert set(make_push_providers(load_settings(), clock)) == {"expo"}
    settings = load_settings(**apns(key_file, apns_url="http://127.0.0.1:9/"))
    providers = make_push_providers(settings, clock)
    assert set(providers) == {"expo", "apns"}
    provider = providers["apns"]
    assert isinstance(provider, ApnsPushProvider) and provider.topic == "dev.tepat.app"
    for p in providers.values():
        await p.close()


def test_the_defaults_are_apples_production_host() -> None:
    s = load_settings()
    assert (s.apns_key_file, s.apns_url, s.apns_max_streams) == (
        None,
        "https://api.push.apple.com",
        1000,
    )


@pytest.mark.parametrize(
    ("change", "variable", "words"),
    [
        ({"apns_key_id": None}, "TEPAT_APNS_KEY_ID", "TEPAT_APNS_KEY_FILE is set"),
        ({"apns_team_id": ""}, "TEPAT_APNS_TEAM_ID", "TEPAT_APNS_KEY_FILE is set"),
        ({"apns_topic": None}, "TEPAT_APNS_TOPIC", "TEPAT_APNS_KEY_FILE is set"),
        ({"apns_key_file": "/nonexistent/AuthKey.p8"}, "TEPAT_APNS_KEY_FILE", "cannot read"),
        ({"apns_url": "api.push.apple.com"}, "TEPAT_APNS_URL", "http(s) URL"),
        ({"apns_max_streams": 0}, "TEPAT_APNS_MAX_STREAMS", ""),
    ],
)
def test_a_bad_apns_setting_is_named(
    key_file: str, change: dict[str, object], variable: str, words: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**apns(key_file, **change))
    assert str(e.value).startswith(f"tepat: bad configuration: {variable}: ")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_key_that_is_not_p256_is_named(tmp_path: Path) -> None:
    rsa_key = tmp_path / "rsa.p8"
    rsa_key.write_text(pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    with pytest.raises(ConfigError, match=r"TEPAT_APNS_KEY_FILE: .* not a P-256"):
        load_settings(**apns(str(rsa_key)))
