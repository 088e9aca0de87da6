"""Webhook signatures, checked by a verifier written here from the Standard Webhooks spec
(https://www.standardwebhooks.com, "Verifying webhook authenticity"), not by Tepat's code:

- the content signed is ``{webhook-id}.{webhook-timestamp}.{body}``;
- HMAC-SHA256 keyed with the secret's bytes: the base64 after the ``whsec_`` prefix;
- ``webhook-signature`` is a space-separated list of ``v1,<base64 signature>``; a receiver
  accepts the request when any ``v1`` signature matches (constant-time), and checks the
  timestamp is within a tolerance of now (against replays).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from datetime import UTC, datetime, timedelta

import pytest

from tepat.domain.errors import DomainError
from tepat.domain.webhooks import (
    EVENT_TYPES,
    ROTATION_OVERLAP,
    StatusChangeEntry,
    WebhookSecret,
    WebhookSubscription,
    check_url,
    delivery_message,
    new_secret,
    rotate,
    sign,
    status_event_id,
    status_payload,
    webhook_headers,
)

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


class Invalid(Exception):
    pass


def spec_verify(
    secret: str, headers: dict[str, str], body: bytes, now: int, tolerance: int = 300
) -> None:
    """A receiver's verification, from the spec's text alone."""
    msg_id = headers["webhook-id"]
    timestamp = headers["webhook-timestamp"]
    if not timestamp.isdigit() or abs(now - int(timestamp)) > tolerance:
        raise Invalid("timestamp outside the tolerance")
    key = base64.b64decode(secret[len("whsec_") :] if secret.startswith("whsec_") else secret)
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    for candidate in headers["webhook-signature"].split(" "):
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected):
            return
    raise Invalid("no matching signature")


def test_the_spec_librarys_published_example() -> None:
    # The reference libraries' test vector (standard-webhooks, libraries/*/tests).
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    signature = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}')
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_headers_verify_with_the_independent_implementation() -> None:
    secret = new_secret(secrets.token_bytes(32))
    body = json.dumps({"type": "message.delivered", "data": {"message_id": "m1"}})
    headers = webhook_headers([secret], "msg_abc", 1_700_000_000, body)
    spec_verify(secret, headers, body.encode(), now=1_700_000_010)
    assert headers["webhook-signature"].count(" ") == 0


@pytest.mark.parametrize(
    "tamper",
    ["body", "id", "timestamp", "secret", "stale"],
)
def test_any_change_fails_verification(tamper: str) -> None:
    secret = new_secret(secrets.token_bytes(32))
    body = '{"type":"message.sent"}'
    headers = webhook_headers([secret], "msg_abc", 1_700_000_000, body)
    now = 1_700_000_000
    if tamper == "body":
        body = '{"type":"message.failed"}'
    elif tamper == "id":
        headers["webhook-id"] = "msg_abd"
    elif tamper == "timestamp":
        headers["webhook-timestamp"] = "1700000001"
    elif tamper == "secret":
        secret = new_secret(secrets.token_bytes(32))
    else:
        now += 301
    with pytest.raises(Invalid):
        spec_verify(secret, headers, body.encode(), now=now)


def test_unicode_bodies_are_signed_as_the_bytes_sent() -> None:
    secret = new_secret(secrets.token_bytes(24))
    body = '{"title":"Pesanan ✓ — ok"}'
    headers = webhook_headers([secret], "msg_u", 1_700_000_000, body)
    spec_verify(secret, headers, body.encode("utf-8"), now=1_700_000_000)


def test_rotation_signs_with_both_secrets_for_24_hours_then_the_new_one() -> None:
    old = new_secret(secrets.token_bytes(32))
    new = new_secret(secrets.token_bytes(32))
    sub = WebhookSubscription(
        id="wh_1",
        url="https://example.com/h",
        event_types=EVENT_TYPES,
        secrets=(WebhookSecret(old, created_at=T0),),
        created_at=T0,
        updated_at=T0,
    )
    rotated = rotate(sub, new, T0 + timedelta(hours=1))
    assert rotated.version == sub.version + 1
    body = '{"type":"message.read"}'
    during = T0 + timedelta(hours=2)
    headers = webhook_headers(rotated.signing_secrets(during), "msg_r", 1, body)
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2
    # A receiver still on the old secret and one already on the new both verify.
    spec_verify(old, headers, body.encode(), now=1)
    spec_verify(new, headers, body.encode(), now=1)

    after = T0 + timedelta(hours=1) + ROTATION_OVERLAP
    assert rotated.signing_secrets(after) == [new]
    headers = webhook_headers(rotated.signing_secrets(after), "msg_r", 1, body)
    spec_verify(new, headers, body.encode(), now=1)
    with pytest.raises(Invalid):
        spec_verify(old, headers, body.encode(), now=1)
    # Rotating again drops the expired secret.
    again = rotate(rotated, new_secret(secrets.token_bytes(32)), after)
    assert [s.secret for s in again.secrets][:1] == [new] and len(again.secrets) == 2


def test_secrets_are_whsec_base64_of_24_to_64_bytes() -> None:
    s = new_secret(bytes(range(32)))
    assert s.startswith("whsec_") and base64.b64decode(s[6:]) == bytes(range(32))
    with pytest.raises(ValueError):
        new_secret(b"short")


def test_the_event_id_is_stable_per_message_and_status_and_dot_free() -> None:
    a = status_event_id("m1", "delivered")
    assert a == status_event_id("m1", "delivered")
    assert a != status_event_id("m1", "sent") and a != status_event_id("m2", "delivered")
    assert "." not in a and a.startswith("msg_")


def test_one_event_makes_one_delivery_per_subscription_with_the_same_webhook_id() -> None:
    entry = StatusChangeEntry(
        key="1", message_id="m1", status="missed", user_id="u1", category="meal", at=T0
    )
    payload = status_payload(entry, "push", "order-1")
    assert payload == {
        "type": "message.skipped",
        "timestamp": "2027-03-01T09:00:00.000Z",
        "data": {
            "message_id": "m1",
            "user_id": "u1",
            "category": "meal",
            "channel": "push",
            "status": "missed",
            "reason": None,
            "event_id": "order-1",
        },
    }
    a = delivery_message("wh_a", entry, payload, T0)
    b = delivery_message("wh_b", entry, payload, T0 + timedelta(minutes=1))
    assert a.content["event_id"] == b.content["event_id"] == status_event_id("m1", "missed")
    assert a.id != b.id and a.dedup_key == a.live_key == a.slot_key
    assert a == delivery_message("wh_a", entry, payload, T0)  # the same twice: one row
    assert json.loads(a.content["body"]) == payload


@pytest.mark.parametrize(
    ("url", "allow_http", "ok"),
    [
        ("https://example.com/hooks", False, True),
        ("http://127.0.0.1:8080/h", False, True),
        ("http://localhost/h", False, True),
        ("http://[::1]/h", False, True),
        ("http://example.com/h", False, False),
        ("http://example.com/h", True, True),
        ("ftp://example.com/h", True, False),
        ("https://user:pw@example.com/h", False, False),
        ("https:///nohost", False, False),
        ("https://example.com:99999/h", False, False),
        ("example.com/h", False, False),
    ],
)
def test_urls(url: str, allow_http: bool, ok: bool) -> None:
    if ok:
        assert check_url(url, allow_http) == url
    else:
        with pytest.raises(DomainError) as e:
            check_url(url, allow_http)
        assert e.value.field == "url"
