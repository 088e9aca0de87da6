"""A stand-in for a browser vendor's Web Push service (RFC 8030/8291/8292), for tests and
demos.

It mints subscriptions (:meth:`WebPushSandbox.subscribe`: the JSON a browser's
``PushSubscription`` gives, at this sandbox's :attr:`~WebPushSandbox.origin`) and holds
their private keys, so it can decrypt what is pushed to them. ``POST /push/{id}`` answers:

* 401 unless ``Authorization: vapid t=…, k=…`` carries an ES256 JWT signed by a key this
  sandbox trusts (:meth:`WebPushSandbox.vapid_key`), with ``aud`` its origin, ``exp`` in
  the future and at most 24 hours ahead (on the sandbox's clock), and a ``mailto:`` or
  ``https:`` ``sub``;
* 400 without a ``TTL`` header or with a ``Content-Encoding`` other than ``aes128gcm``,
  or a body that does not decrypt with the subscription's keys; 404 for an unknown
  subscription; 413 over 4096 bytes; 429 (``Retry-After``) over the rate limit;
* a subscription scripted with an HTTP status (410 Gone for an unsubscribed browser):
  that answer;
* otherwise 201 with a ``Location``, and the notification (subscription id, ``ttl`` /
  ``urgency`` / ``topic`` headers, the decrypted ``payload``) is in :meth:`received`.

``POST /_sandbox/subscribe`` answers a new subscription, for a demo driven over HTTP.

The faults, counters and ``/_sandbox/`` controls are the sandbox kit's
(:mod:`tepat.sandbox.provider`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import http_ece
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tepat.adapters.webpush_push import MAX_PAYLOAD_BYTES, public_key_bytes
from tepat.clock import Clock
from tepat.domain.b64url import b64url, unb64url
from tepat.sandbox.faults import FailNext
from tepat.sandbox.provider import FakeProvider, SandboxState, Stats, private_pem

MAX_VAPID_LIFETIME = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class SubscriptionScript:
    """What happens to notifications pushed to one subscription: an HTTP ``status``."""

    status: int | None = None

    def __post_init__(self) -> None:
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"a scripted status is an HTTP error (4xx, 5xx), not {self.status}")


@dataclass(slots=True)
class _Stats(Stats):
    notifications: int = 0
    refused: int = 0


@dataclass(slots=True)
class _State(SandboxState):
    stats: _Stats = field(default_factory=_Stats)


class WebPushSandbox(FakeProvider[_State]):
    _scripts_key = "subscriptions"
    _script_type = SubscriptionScript

    def __init__(
        self,
        *,
        origin: str = "https://push.tepat.test",
        clock: Clock | None = None,
        rate_limit: float | None = None,
        scripts: Mapping[str, SubscriptionScript] | None = None,
        stall_limit_seconds: float = 60.0,
    ) -> None:
        self.origin = origin
        self._vapid_keys: set[str] = set()  # base64url public keys
        # subscription id: (the browser's private key, its auth secret)
        self._subscriptions: dict[str, tuple[ec.EllipticCurvePrivateKey, bytes]] = {}
        routes = [
            Route("/push/{id}", self._push, methods=["POST"]),
            Route("/_sandbox/subscribe", self._subscribe, methods=["POST"]),
        ]
        super().__init__(_State, scripts, clock, rate_limit, stall_limit_seconds, routes)

    # ---- controls ----

    def vapid_key(self) -> str:
        """A new VAPID private key (PEM) whose public key this sandbox trusts."""
        key = ec.generate_private_key(ec.SECP256R1())
        self._vapid_keys.add(b64url(public_key_bytes(key.public_key())))
        return private_pem(key)

    def subscribe(self, subscription_id: str | None = None) -> str:
        """A browser's new subscription, as the JSON string a device registers with."""
        sid = subscription_id or uuid.uuid4().hex
        key, auth = ec.generate_private_key(ec.SECP256R1()), os.urandom(16)
        with self._lock:
            self._subscriptions[sid] = (key, auth)
        keys = {"p256dh": b64url(public_key_bytes(key.public_key())), "auth": b64url(auth)}
        return json.dumps({"endpoint": f"{self.origin}/push/{sid}", "keys": keys})

    async def _subscribe(self, request: Request) -> Response:
        return Response(self.subscribe(), media_type="application/json")

    def script_subscription(self, subscription_id: str, status: int | None) -> None:
        """Answer pushes to ``subscription_id`` with HTTP ``status`` (``None``: accept)."""
        self._set_script(subscription_id, self._script_from({"status": status}))

    def fail_next(self, count: int, status: int = 429, retry_after: float | None = 1.0) -> None:
        """Answer the next ``count`` requests with HTTP ``status``."""
        self._refuse_next(count, status, retry_after)

    def _apply_own_script(self, spec: dict[str, Any]) -> None:
        """``{"fail_next": {"count", "status", "retry_after"}}`` in a ``POST
        /_sandbox/script`` body."""
        if fail := spec.get("fail_next"):
            if not isinstance(fail, dict):
                raise ValueError('"fail_next" must be {"count", "status", "retry_after"}')
            self.fail_next(
                int(fail.get("count", 1)),
                int(fail.get("status", 429)),
                None if (wait := fail.get("retry_after", 1.0)) is None else float(wait),
            )

    def _script_from(self, outcome: dict[str, Any]) -> SubscriptionScript | None:
        status = outcome.get("status")
        script = SubscriptionScript(None if status is None else int(status))
        return None if script == SubscriptionScript() else script

    def _describe_own(self) -> dict[str, Any]:
        return {"origin": self.origin, "vapid_keys": sorted(self._vapid_keys)}

    # ---- the push service's words ----

    def _server_error(self, status: int) -> Response:
        return PlainTextResponse("internal error", status)

    def _refusal(self, failure: FailNext) -> Response:
        self._state.stats.refused += 1
        headers = {}
        if failure.retry_after is not None:
            headers["retry-after"] = str(int(failure.retry_after))
        return PlainTextResponse(f"refused ({failure.status})", failure.status, headers=headers)

    def _unauthorized(self) -> Response:
        return PlainTextResponse("VAPID token refused", 401)

    def _bad_script(self, message: str) -> Response:
        return PlainTextResponse(message, 400)

    def _authorized(self, request: Request) -> bool:
        scheme, _, params = request.headers.get("authorization", "").partition(" ")
        values = dict(p.strip().partition("=")[::2] for p in params.split(","))
        token, key = values.get("t", ""), values.get("k", "")
        if scheme.lower() != "vapid" or key not in self._vapid_keys:
            return False
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
        try:
            # exp is judged below on the sandbox's clock, not on PyJWT's wall clock.
            claims = jwt.decode(
                token,
                public,
                algorithms=["ES256"],
                audience=self.origin,
                options={"require": ["aud", "exp", "sub"], "verify_exp": False},
            )
        except jwt.InvalidTokenError:
            return False
        left = float(claims["exp"]) - self.clock.now().timestamp()
        contact = str(claims["sub"]).startswith(("mailto:", "https://"))
        return contact and 0 < left <= MAX_VAPID_LIFETIME.total_seconds()

    # ---- the push API ----

    async def _push(self, request: Request) -> Response:
        body = await request.body()
        if (refused := self._gate(request)) is not None:
            return refused
        sid = request.path_params["id"]
        if request.headers.get("content-encoding") != "aes128gcm":
            return PlainTextResponse("Content-Encoding must be aes128gcm", 400)
        if "ttl" not in request.headers:
            return PlainTextResponse("a TTL header is required", 400)
        if len(body) > MAX_PAYLOAD_BYTES:
            return PlainTextResponse("payload too large", 413)
        with self._lock:
            keys = self._subscriptions.get(sid)
        if keys is None:
            return PlainTextResponse("no such subscription", 404)
        try:
            plaintext = http_ece.decrypt(
                body, private_key=keys[0], auth_secret=keys[1], version="aes128gcm"
            )
        except Exception as e:  # http_ece raises its own errors and cryptography's
            return PlainTextResponse(f"cannot decrypt: {e}", 400)
        if wait := self._over_rate(1):
            return PlainTextResponse("slow down", 429, headers={"retry-after": str(int(wait) + 1)})
        with self._lock:
            self._state.stats.notifications += 1
            script = self._state.scripts.get(sid, SubscriptionScript())
            if script.status is not None:
                self._state.stats.refused += 1
                return PlainTextResponse(f"scripted {script.status}", script.status)
            message_id = uuid.uuid4().hex
            entry = {
                "subscription": sid,
                "headers": {
                    k: v for k, v in request.headers.items() if k in ("ttl", "urgency", "topic")
                },
                "payload": _json_or_text(plaintext),
                "at": self.clock.now().isoformat(),
            }
            self._state.received.append(entry)
        answer = Response(status_code=201, headers={"location": f"/message/{message_id}"})
        return await self.lose_or_answer(answer, request, [entry])


def _json_or_text(plaintext: bytes) -> Any:
    try:
        return json.loads(plaintext)
    except ValueError:
        return plaintext.decode(errors="replace")
