"""`tepat doctor`'s FCM and APNs checks: FCM's service account fetches a real access token
from the FCM sandbox's token endpoint (nothing sent); the APNs key parses and signs a
provider token (nothing goes to Apple: no request checks one without sending). No line
for a provider that is not configured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tepat.adapters.webpush_push import Vapid
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.doctor import Status, apns_check, fcm_check, webpush_check
from tepat.sandbox.fcm import FcmSandbox
from tepat.sandbox.server import Running, running_sandbox
from tepat.sandbox.webpush import WebPushSandbox
from tests.support.messages import AT


@pytest.fixture
def server() -> Iterator[Running[FcmSandbox]]:
    with running_sandbox(FcmSandbox()) as running:
        yield running


def fcm(tmp_path: Path, account: dict[str, Any], url: str) -> Settings:
    path = tmp_path / "service-account.json"
    path.write_text(json.dumps(account))
    return Settings(fcm_credentials_file=str(path), fcm_url=url)


async def test_no_lines_without_fcm_or_apns() -> None:
    assert await fcm_check(Settings(), FakeClock(AT), wait=5) is None
    assert apns_check(Settings(), FakeClock(AT)) is None


async def test_a_trusted_service_account_gets_a_token(
    server: Running[FcmSandbox], tmp_path: Path
) -> None:
    settings = fcm(tmp_path, server.sandbox.service_account(server.base_url), server.base_url)
    check = await fcm_check(settings, FakeClock(AT), wait=5)
    # The sandbox is not FCM: a warning (no real pushes), the credentials fine.
    assert check is not None and check.status is Status.WARN, check
    assert "got an access token for project tepat-test" in check.detail
    assert "not FCM itself" in check.detail
    assert "TEPAT_FCM_URL=https://fcm.googleapis.com" in check.hint
    stats = server.sandbox.stats()
    assert (stats["token_requests"], stats["messages"]) == (1, 0)  # a token, nothing sent


async def test_a_key_the_token_endpoint_does_not_trust_fails_with_the_fix(
    server: Running[FcmSandbox], tmp_path: Path
) -> None:
    stranger = FcmSandbox().service_account(server.base_url)  # a key of another sandbox
    check = await fcm_check(fcm(tmp_path, stranger, server.base_url), FakeClock(AT), wait=5)
    assert check is not None and check.status is Status.FAIL, check
    assert check.detail.startswith("service account tepat-")
    assert "refused by its token endpoint" in check.detail
    assert "invalid_grant" in check.detail
    assert "TEPAT_FCM_CREDENTIALS_FILE" in check.hint
    assert stranger["private_key"] not in check.line()


def p8(tmp_path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    path = tmp_path / "AuthKey_KEY1234567.p8"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


def apns(key_file: str, **extra: Any) -> Settings:
    return Settings(
        apns_key_file=key_file,
        apns_key_id="KEY1234567",
        apns_team_id="TEAM123456",
        apns_topic="app.tepat.test",
        **extra,
    )


def test_an_apns_key_that_signs_is_ok_and_says_apple_has_not_checked_it(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    check = apns_check(apns(p8(tmp_path, key)), FakeClock(AT))
    assert check is not None and check.status is Status.OK, check
    assert "key KEY1234567 of team TEAM123456 signs a provider token" in check.detail
    assert "APNs cannot check it without sending a notification" in check.detail
    sandbox = apns_check(apns(p8(tmp_path, key), apns_url="http://127.0.0.1:1"), FakeClock(AT))
    assert sandbox is not None and sandbox.status is Status.WARN
    assert "not APNs itself" in sandbox.detail
    assert "TEPAT_APNS_URL=https://api.push.apple.com" in sandbox.hint
    development = apns(p8(tmp_path, key), apns_url="https://api.sandbox.push.apple.com")
    assert apns_check(development, FakeClock(AT)).status is Status.OK  # type: ignore[union-attr]


def test_a_key_that_is_not_an_apns_key_fails_with_the_fix(tmp_path: Path) -> None:
    settings = Settings.model_construct(
        apns_key_file=p8(tmp_path, rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        apns_key_id="KEY1234567",
        apns_team_id="TEAM123456",
        apns_url="https://api.push.apple.com",
    )  # past the configuration's own check of the file (it changed since, say)
    check = apns_check(settings, FakeClock(AT))
    assert check is not None and check.status is Status.FAIL, check
    assert "is not a P-256 (ES256) key" in check.detail
    assert "TEPAT_APNS_KEY_FILE" in check.hint


def test_a_vapid_key_that_signs_is_ok_and_names_the_key_browsers_subscribe_with(
    tmp_path: Path,
) -> None:
    assert webpush_check(Settings(), FakeClock(AT)) is None
    pem = tmp_path / "vapid.pem"
    pem.write_text(WebPushSandbox().vapid_key())
    settings = Settings(
        webpush_vapid_private_key_file=str(pem), webpush_vapid_subject="mailto:ops@example.com"
    )
    check = webpush_check(settings, FakeClock(AT))
    assert check is not None and check.status is Status.OK, check
    key = serialization.load_pem_private_key(pem.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    public = Vapid(key, "mailto:ops@example.com", FakeClock(AT)).public_key
    assert check.detail.endswith(f"(applicationServerKey) {public}")
    assert "mailto:ops@example.com" in check.detail


def test_a_vapid_key_that_is_not_p256_fails_with_the_fix(tmp_path: Path) -> None:
    settings = Settings.model_construct(
        webpush_vapid_private_key_file=p8(
            tmp_path, rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ),
        webpush_vapid_subject="mailto:ops@example.com",
    )  # past the configuration's own check of the file (it changed since, say)
    check = webpush_check(settings, FakeClock(AT))
    assert check is not None and check.status is Status.FAIL, check
    assert "is not a P-256 (ES256) key" in check.detail
    assert "TEPAT_WEBPUSH_VAPID_PRIVATE_KEY_FILE" in check.hint
