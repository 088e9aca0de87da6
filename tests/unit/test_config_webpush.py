"""TEPAT_WEBPUSH_*: the VAPID key parses at start, the subject is required with it and is a
contact URL, and the runtime gets a ``webpush`` provider only when they are set."""

from __future__ import annotations

from pathlib import Path

import pytest

from tepat.adapters.webpush_push import WebPushProvider
from tepat.clock import FakeClock
from tepat.config import ConfigError, load_settings
from tepat.runtime import make_push_providers
from tepat.sandbox.webpush import WebPushSandbox


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path / "vapid.pem"
    path.write_text(WebPushSandbox().vapid_key())
    return str(path)


def webpush(key_file: str, **change: object) -> dict[str, object]:
    good = {
        "webpush_vapid_private_key_file": key_file,
        "webpush_vapid_subject": "mailto:ops@example.com",
    }
    return {**good, **change}


async def test_webpush_is_a_provider_only_when_configured(key_file: str) -> None:
    clock = FakeClock()
    assert load_settings().webpush_url is None
    assert set(make_push_providers(load_settings(), clock)) == {"expo"}
    providers = make_push_providers(load_settings(**webpush(key_file)), clock)
    assert set(providers) == {"expo", "webpush"}
    assert isinstance(providers["webpush"], WebPushProvider)
    for p in providers.values():
        await p.close()


@pytest.mark.parametrize(
    ("change", "variable", "words"),
    [
        ({"webpush_vapid_subject": None}, "TEPAT_WEBPUSH_VAPID_SUBJECT", "KEY_FILE is set"),
        ({"webpush_vapid_subject": "ops@example.com"}, "TEPAT_WEBPUSH_VAPID_SUBJECT", "mailto:"),
        (
            {"webpush_vapid_private_key_file": "/nonexistent/vapid.pem"},
            "TEPAT_WEBPUSH_VAPID_PRIVATE_KEY_FILE",
            "cannot read",
        ),
        ({"webpush_url": "push.example.com"}, "TEPAT_WEBPUSH_URL", "http(s) URL"),
        ({"webpush_max_connections": 0}, "TEPAT_WEBPUSH_MAX_CONNECTIONS", ""),
    ],
)
def test_a_bad_webpush_setting_is_named(
    key_file: str, change: dict[str, object], variable: str, words: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**webpush(key_file, **change))
    assert str(e.value).startswith(f"tepat: bad configuration: {variable}: ")
    assert words in str(e.value) and "\n" not in str(e.value)
