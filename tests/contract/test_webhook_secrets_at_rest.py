"""Webhook signing secrets encrypted at rest (issue 19, 8f), on both stores.

With ``TEPAT_SECRETS_KEY`` the value each store holds is not the secret, and a delivery
signed with what the repository reads back still verifies; secrets stored in clear
before the key was set keep signing, and a rotation writes every secret encrypted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet

from tepat.adapters.secret_box import MARKER
from tepat.clock import FakeClock
from tepat.config import ConfigError, Settings, load_settings
from tepat.domain.webhooks import EVENT_TYPES, webhook_headers
from tepat.ports.store import Store
from tepat.services.webhooks import WebhookService
from tepat.wiring import webhook_repository
from tests.contract.test_webhooks_contract import T0
from tests.unit.test_webhook_signing import spec_verify

KEY = Fernet.generate_key().decode()
CATEGORIES = ("meal", "safety")


async def _anywhere(url: str) -> None:
    return None


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    yield FakeClock(T0)


def _service(store: Store, clock: FakeClock, settings: Settings) -> WebhookService:
    return WebhookService(
        webhook_repository(settings, store), clock, CATEGORIES, check_target=_anywhere
    )


def _verifies(secret: str, signing: list[str]) -> None:
    body = json.dumps({"type": "message.failed"})
    headers = webhook_headers(signing, "msg_1", int(T0.timestamp()), body)
    spec_verify(secret, headers, body.encode(), now=int(T0.timestamp()))


async def test_with_a_key_the_stored_value_is_not_the_secret_and_it_still_signs(
    store: Store, clock: FakeClock
) -> None:
    settings = load_settings(secrets_key=KEY)
    sub = await _service(store, clock, settings).create(
        "https://example.com/hooks", list(EVENT_TYPES)
    )
    secret = sub.secrets[0].secret
    raw = await store.get_webhook_subscription(sub.id)  # what the store holds
    assert raw is not None
    [stored] = [s.secret for s in raw.secrets]
    assert stored.startswith(MARKER) and secret not in stored
    read = await webhook_repository(settings, store).get_webhook_subscription(sub.id)
    assert read is not None and read.secrets[0].secret == secret
    _verifies(secret, read.signing_secrets(T0))


async def test_without_a_key_secrets_are_stored_plain(store: Store, clock: FakeClock) -> None:
    sub = await _service(store, clock, load_settings()).create(
        "https://example.com/hooks", list(EVENT_TYPES)
    )
    raw = await store.get_webhook_subscription(sub.id)
    assert raw is not None and raw.secrets == sub.secrets


async def test_a_plain_secret_keeps_signing_and_a_rotation_encrypts_every_secret(
    store: Store, clock: FakeClock
) -> None:
    old = await _service(store, clock, load_settings()).create(
        "https://example.com/hooks", list(EVENT_TYPES)
    )
    keyed = load_settings(secrets_key=KEY)
    read = await webhook_repository(keyed, store).get_webhook_subscription(old.id)
    assert read is not None and read.secrets == old.secrets
    _verifies(old.secrets[0].secret, read.signing_secrets(T0))

    rotated = await _service(store, clock, keyed).rotate_secret(old.id)
    raw = await store.get_webhook_subscription(old.id)
    assert raw is not None and len(raw.secrets) == 2
    assert all(s.secret.startswith(MARKER) for s in raw.secrets)
    for secret in (old.secrets[0].secret, rotated.secrets[-1].secret):
        _verifies(secret, rotated.signing_secrets(T0))


def test_a_bad_secrets_key_stops_with_one_line() -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(secrets_key="not-a-fernet-key")
    line = str(e.value)
    assert "\n" not in line and line.startswith("tepat: bad configuration: TEPAT_SECRETS_KEY: ")
    assert "Fernet" in line and "not-a-fernet-key" not in line
