"""Web Push (RFC 8030) to browsers, as a ``PushProvider``: the payload encrypted to the
subscription's keys (RFC 8291, ``aes128gcm`` through ``http_ece``), the request signed
with the deployment's VAPID key (RFC 8292, an ES256 JWT through PyJWT).

A device's token is the browser's subscription JSON (``endpoint``, ``keys.p256dh``,
``keys.auth``); each notification is one ``POST`` to its endpoint, a batch's requests
concurrent, at most ``max_connections`` at a time. The push service answers at send
time: there are no receipts (``max_receipt_batch`` is 0).

============================ ================================= ============================
answer                       outcome                           why
============================ ================================= ============================
201, 202                     ``TicketOk`` (``Location``)
404, 410                     permanent, deactivate the device  the subscription expired or
                                                               was unsubscribed
413, or over 4096 bytes      permanent refusal                 the same payload fails the
before sending                                                 same way
400, other 4xx               permanent refusal
401, 403                     ``Rejected``                      our VAPID key or subject
429                          TryAgain, throttled, Retry-After
5xx                          TryAgain, ``server_error``
network error/timeout        TryAgain, maybe sent once the     as Expo's
                             body went out (``SendProgress``)
============================ ================================= ============================

How the answers of a batch's notifications make its answer:
:func:`tepat.adapters.push_answers.send_each`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import http_ece
import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tepat.adapters.expo_outcomes import parse_retry_after
from tepat.adapters.http_pool import PooledClient
from tepat.adapters.push_answers import Answer, AnsweredAtSend, compact_json, send_each
from tepat.adapters.webhook_target import TargetRefused
from tepat.clock import Clock
from tepat.domain.b64url import b64url, unb64url
from tepat.domain.errors import DomainError
from tepat.domain.validation import check_push_token
from tepat.ports.push import (
    PushRequest,
    Rejected,
    SendResult,
    TicketError,
    TicketOk,
)
from tepat.ports.try_again import TryAgain

log = logging.getLogger(__name__)

MAX_BATCH = 500
#: What every push service must take (RFC 8030 §7.2), the encrypted body's header (86
#: bytes), tag and padding delimiter (17) included (RFC 8291 §4).
MAX_PAYLOAD_BYTES = 4096
MAX_PLAINTEXT_BYTES = MAX_PAYLOAD_BYTES - 103
DEFAULT_TTL_SECONDS = 4 * 7 * 24 * 3600
#: RFC 8030 §5.4: a ``Topic`` is at most 32 characters of the URL-safe base64 alphabet.
_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
#: RFC 8292 §2: a push service may refuse a token valid for more than 24 hours.
VAPID_LIFETIME = timedelta(hours=12)
THROTTLED_BACKOFF_SECONDS = 10.0


def public_key_bytes(key: ec.EllipticCurvePublicKey) -> bytes:
    """The uncompressed point, as Web Push writes P-256 public keys."""
    return key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )


def to_webpush_payload(request: PushRequest) -> bytes:
    """What the service worker's ``push`` event reads (``event.data.json()``)."""
    payload = {"title": request.title, "body": request.body, "data": dict(request.data)}
    return compact_json(payload).encode()


def encrypt(plaintext: bytes, p256dh: str, auth: str) -> bytes:
    """RFC 8291's ``aes128gcm`` body for one subscription, from a fresh key and salt."""
    result: bytes = http_ece.encrypt(
        plaintext,
        salt=os.urandom(16),
        private_key=ec.generate_private_key(ec.SECP256R1()),
        dh=unb64url(p256dh),
        auth_secret=unb64url(auth),
        version="aes128gcm",
    )
    return result


class Vapid:
    """The ``Authorization: vapid`` header for a push service's origin, one signed JWT per
    origin reused until it nears its expiry."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, subject: str, clock: Clock) -> None:
        self._key = key
        self._subject = subject
        self._clock = clock
        # The key browsers subscribe with (``applicationServerKey``), base64url.
        self.public_key = b64url(public_key_bytes(key.public_key()))
        self._tokens: dict[str, tuple[str, float]] = {}  # origin: (JWT, its exp)

    def header(self, origin: str) -> str:
        now = self._clock.now().timestamp()
        token, exp = self._tokens.get(origin, ("", 0.0))
        if exp - now < VAPID_LIFETIME.total_seconds() / 2:
            exp = int(now + VAPID_LIFETIME.total_seconds())
            claims = {"aud": origin, "exp": exp, "sub": self._subject}
            token = jwt.encode(claims, self._key, algorithm="ES256")
            self._tokens[origin] = (token, exp)
        return f"vapid t={token}, k={self.public_key}"


def classify(response: httpx.Response, clock: Clock) -> Answer:
    """One notification's answer (see the module's table)."""
    status = response.status_code
    if status in (201, 202):
        return TicketOk(response.headers.get("location") or str(uuid.uuid4()))
    text = f"{status} {response.text[:200] or response.reason_phrase}"
    if status == 429:
        wait = parse_retry_after(response.headers.get("retry-after"), clock.now())
        return TryAgain(text, wait or THROTTLED_BACKOFF_SECONDS, throttled=True)
    if status >= 500:
        wait = parse_retry_after(response.headers.get("retry-after"), clock.now())
        return TryAgain(text, wait, server_error=True)
    if status in (401, 403):
        log.error("A push service refused our VAPID token (%s); check TEPAT_WEBPUSH_*", text)
        return Rejected(text)
    code = {404: "NotFound", 410: "Gone", 413: "PayloadTooLarge"}.get(status, f"HTTP_{status}")
    return TicketError(code, text, permanent=True, deactivate_device=status in (404, 410))


class WebPushProvider(AnsweredAtSend, PooledClient):
    """No rate ceiling to share: Web Push publishes none, each browser vendor's service
    throttles."""

    max_batch: int = MAX_BATCH

    def __init__(
        self,
        vapid: Vapid,
        *,
        clock: Clock,
        base_url: str | None = None,
        max_connections: int = 50,
        timeout: float = 15.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            max_connections,
            timeout=timeout,
            transport=transport,
            headers={"user-agent": "tepat-webpush/0.1"},
        )
        self.vapid = vapid
        self.clock = clock
        # Set, every request goes there with its endpoint's path (the sandbox); the VAPID
        # audience stays the endpoint's own origin.
        self._base_url = base_url.rstrip("/") if base_url else None

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        return await send_each(batch, MAX_BATCH, _refused_before_sending, self._send_one)

    async def _send_one(self, request: PushRequest) -> Answer:
        subscription: dict[str, Any] = json.loads(request.push_token)
        endpoint = str(subscription["endpoint"])
        parts = urlsplit(endpoint)
        url = f"{self._base_url}{parts.path}" if self._base_url else endpoint
        keys = subscription["keys"]
        ttl = DEFAULT_TTL_SECONDS if request.ttl_seconds is None else request.ttl_seconds
        headers = {
            "authorization": self.vapid.header(f"{parts.scheme}://{parts.netloc}"),
            "content-encoding": "aes128gcm",
            "content-type": "application/octet-stream",
            "ttl": str(ttl),
            "urgency": "normal" if request.priority == "normal" else "high",
        }
        if _TOPIC.fullmatch(request.message_id):
            # A second copy of one message (sent again after a maybe-sent answer) replaces
            # the first while the push service still holds it, as apns-collapse-id does.
            headers["topic"] = request.message_id
        body = encrypt(to_webpush_payload(request), keys["p256dh"], keys["auth"])
        try:
            response = await self._post_in_slot(
                url, "the push service", content=body, headers=headers
            )
        except TargetRefused as e:
            # The endpoint is the browser's (so the user's) to name: one that resolves to a
            # private address is never sent to (``TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS``).
            return TicketError("url_refused", e.reason, permanent=True, deactivate_device=True)
        if isinstance(response, TryAgain):
            return response
        return classify(response, self.clock)


def _refused_before_sending(request: PushRequest) -> TicketError | None:
    try:
        check_push_token(request.push_token, "webpush")
    except DomainError as e:
        return TicketError("BadSubscription", e.message, permanent=True, deactivate_device=True)
    size = len(to_webpush_payload(request))
    if size > MAX_PLAINTEXT_BYTES:
        message = f"payload is {size} bytes, over Web Push's {MAX_PLAINTEXT_BYTES}; not sent"
        return TicketError("PayloadTooLarge", message, permanent=True)
    return None
