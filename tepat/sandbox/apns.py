"""A stand-in for APNs (the HTTP/2 provider API with token auth), for tests and demos.

``POST /3/device/{token}`` takes one notification, over HTTP/2 (served by
:func:`tepat.sandbox.runner.running_h2c_app`, h2c). As APNs does, it answers:

* 403 ``MissingProviderToken`` / ``InvalidProviderToken`` unless ``authorization: bearer``
  carries an ES256 JWT whose ``kid`` is a key this sandbox made (:meth:`ApnsSandbox.signing_key`),
  signed by it, with this team as ``iss``; 403 ``ExpiredProviderToken`` once its ``iat`` is
  over an hour old on the sandbox's clock;
* 400 ``MissingTopic`` / ``BadTopic`` when ``apns-topic`` is not the app's bundle id,
  400 ``BadDeviceToken`` for a token that is not 64+ hex digits, 413 ``PayloadTooLarge``
  over 4096 bytes, 429 ``TooManyRequests`` over the rate limit;
* a token scripted with an APNs reason (:data:`REASONS`): that answer (410 with a
  ``timestamp`` for ``Unregistered``);
* otherwise 200 with ``apns-id`` (the request's, else a new one), and the notification
  (token, ``apns-*`` headers, payload) is in :meth:`received`, its ``at`` the instant its
  request arrived (:class:`~tepat.sandbox.h2c_server.HotSendProvider`).

It also counts the connections its requests came on (``stats()["connections"]``) and the
provider tokens it saw (``provider_tokens``), so a test can hold a client to one
connection and to renewing its token no more than it should. The faults, counters and
``/_sandbox/`` controls are the sandbox kit's (:mod:`tepat.sandbox.provider`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.responses import JSONResponse, Response

from tepat.adapters.apns_push import MAX_PAYLOAD_BYTES, SEND_PATH
from tepat.clock import Clock
from tepat.sandbox.faults import FailNext
from tepat.sandbox.h2c_server import Answer, HotRequest, HotSendProvider, json_body
from tepat.sandbox.provider import SandboxState, Stats, private_pem

TOKEN_LIFETIME = timedelta(hours=1)
_DEVICE_TOKEN = re.compile(r"[0-9A-Fa-f]{64,}")
_NO_BODY = (b"content-length", b"0")
# a version 4 UUID's fixed bits (RFC 4122's variant, version 4), as uuid.UUID sets them
_UUID4_KEEP = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)

# APNs's reasons and the HTTP status each comes with.
REASONS: dict[str, int] = {
    "BadDeviceToken": 400,
    "BadTopic": 400,
    "DeviceTokenNotForTopic": 400,
    "MissingTopic": 400,
    "PayloadEmpty": 400,
    "ExpiredProviderToken": 403,
    "InvalidProviderToken": 403,
    "MissingProviderToken": 403,
    "Unregistered": 410,
    "PayloadTooLarge": 413,
    "TooManyRequests": 429,
    "InternalServerError": 500,
    "ServiceUnavailable": 503,
}
_REASON_OF_STATUS = {429: "TooManyRequests", 503: "ServiceUnavailable", 403: "InvalidProviderToken"}


def apns_error(reason: str, clock: Clock | None = None) -> JSONResponse:
    body: dict[str, Any] = {"reason": reason}
    if reason == "Unregistered" and clock is not None:
        body["timestamp"] = int(clock.now().timestamp() * 1000)  # when the token went stale
    return JSONResponse(body, REASONS.get(reason, 400))


@dataclass(frozen=True, slots=True)
class ApnsTokenScript:
    """What happens to notifications sent to one device token: APNs's ``reason``."""

    reason: str | None = None

    def __post_init__(self) -> None:
        if self.reason is not None and self.reason not in REASONS:
            raise ValueError(f"unknown APNs reason {self.reason!r} (one of {sorted(REASONS)})")


@dataclass(slots=True)
class _Stats(Stats):
    notifications: int = 0
    refused: int = 0
    connections: int = 0
    provider_tokens: int = 0


@dataclass(slots=True)
class _State(SandboxState):
    clients: set[tuple[str, int]] = field(default_factory=set)
    provider_tokens: set[str] = field(default_factory=set)
    stats: _Stats = field(default_factory=_Stats)


class ApnsSandbox(HotSendProvider[_State]):
    """One fake APNs team and app (see the module's docstring)."""

    _scripts_key = "tokens"
    _script_type = ApnsTokenScript
    _send_path = SEND_PATH

    def __init__(
        self,
        *,
        team_id: str = "TEAM123456",
        topic: str = "dev.tepat.app",
        clock: Clock | None = None,
        rate_limit: float | None = None,
        scripts: Mapping[str, ApnsTokenScript] | None = None,
        stall_limit_seconds: float = 60.0,
    ) -> None:
        self.team_id = team_id
        self.topic = topic
        self._keys: dict[str, ec.EllipticCurvePublicKey] = {}  # key id: public key
        # token: its iat, once its signature was checked (ES256 is most of a request's
        # cost, and a client sends one token for 20-60 minutes)
        self._verified: dict[str, float] = {}
        self._auth_problem: str | None = None
        self._ids = random.Random()  # the apns-id of a request that brings none
        super().__init__(_State, scripts, clock, rate_limit, stall_limit_seconds)

    # ---- controls ----

    def signing_key(self, key_id: str = "KEY1234567") -> str:
        """A new auth key (the PEM of a ``.p8`` file) that this sandbox trusts as ``key_id``."""
        key = ec.generate_private_key(ec.SECP256R1())
        self._keys[key_id] = key.public_key()
        self._verified.clear()  # a token of the key this one replaces no longer holds
        return private_pem(key)

    def script_token(self, token: str, reason: str | None) -> None:
        """Answer notifications to ``token`` with APNs's ``reason`` (``None``: accept them)."""
        self._set_script(token, self._script_from({"reason": reason}))

    def fail_next(self, count: int, status: int = 429, reason: str = "") -> None:
        """Answer the next ``count`` requests with HTTP ``status`` (APNs's reason for it)."""
        default = _REASON_OF_STATUS.get(status, "InternalServerError" if status >= 500 else "")
        self._refuse_next(count, status, None, reason or default)

    def _apply_own_script(self, spec: dict[str, Any]) -> None:
        """APNs's key of a ``POST /_sandbox/script`` body: ``{"fail_next": {"count",
        "status", "reason"}}``."""
        if fail := spec.get("fail_next"):
            if not isinstance(fail, dict):
                raise ValueError('"fail_next" must be {"count", "status", "reason"}')
            self.fail_next(
                int(fail.get("count", 1)),
                int(fail.get("status", 429)),
                str(fail.get("reason") or ""),
            )

    def _describe_own(self) -> dict[str, Any]:
        return {"team_id": self.team_id, "topic": self.topic, "key_ids": sorted(self._keys)}

    # ---- APNs's words ----

    def _server_error(self, status: int) -> Response:
        return JSONResponse({"reason": "InternalServerError"}, status)

    def _refusal(self, failure: FailNext) -> Response:
        self._state.stats.refused += 1
        return JSONResponse({"reason": failure.code or "BadRequest"}, failure.status)

    def _authorized(self, request: HotRequest) -> bool:
        # Under the kit's lock, and _unauthorized right after it: the problem found here
        # is the reason that one answers with.
        authorization = request.header(b"authorization") or ""
        self._auth_problem = self._token_problem(authorization, request.at)
        return self._auth_problem is None

    def _token_problem(self, authorization: str, now: datetime) -> str | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "MissingProviderToken"
        if (issued := self._verified.get(token)) is None:
            try:
                key = self._keys[str(jwt.get_unverified_header(token).get("kid"))]
                # Its age is judged below on the sandbox's clock, not on PyJWT's wall clock.
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=["ES256"],
                    options={"require": ["iat"], "verify_iat": False},
                )
            except (jwt.InvalidTokenError, KeyError):
                return "InvalidProviderToken"
            if claims.get("iss") != self.team_id:
                return "InvalidProviderToken"
            issued = self._verified[token] = float(claims["iat"])
        if now.timestamp() - issued > TOKEN_LIFETIME.total_seconds():
            return "ExpiredProviderToken"
        self._state.provider_tokens.add(token)
        self._state.stats.provider_tokens = len(self._state.provider_tokens)
        return None

    def _unauthorized(self) -> Response:
        return apns_error(self._auth_problem or "InvalidProviderToken")

    def _new_apns_id(self) -> str:
        """An apns-id as APNs makes one, ``str(uuid.uuid4()).upper()``, at a third of
        its cost (making a UUID object is most of it)."""
        digits = "%032X" % (self._ids.getrandbits(128) & _UUID4_KEEP | _UUID4_SET)
        return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"

    def _logged(self, entry: dict[str, Any]) -> dict[str, Any]:
        logged = dict(entry)
        logged["headers"] = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in entry["headers"]
            if name.startswith(b"apns-")
        }
        return logged

    def _bad_script(self, message: str) -> Response:
        return JSONResponse({"reason": "BadRequest", "message": message}, 400)

    # ---- the provider API ----

    def _request_problem(self, token: str, topic: str | None, body: bytes) -> str | None:
        if not topic:
            return "MissingTopic"
        if topic != self.topic:
            return "BadTopic"
        if not _DEVICE_TOKEN.fullmatch(token):
            return "BadDeviceToken"
        if len(body) > MAX_PAYLOAD_BYTES:
            return "PayloadTooLarge"
        return None

    def _take_send(self, request: HotRequest, body: bytes) -> tuple[Answer, list[dict[str, Any]]]:
        with self._lock:
            if request.client is not None:
                self._state.clients.add(request.client)
            self._state.stats.connections = len(self._state.clients)
        if (refused := self._admit_send(request)) is not None:
            return refused, []
        token = request.path_params["token"]
        if problem := self._request_problem(token, request.header(b"apns-topic"), body):
            return Answer.of(apns_error(problem)), []
        try:
            payload = json_body(body)
        except ValueError:
            return Answer.of(apns_error("PayloadEmpty")), []
        if self._over_rate(1):
            return Answer.of(apns_error("TooManyRequests")), []
        with self._lock:
            self._state.stats.notifications += 1
            script = self._state.scripts.get(token)
            if script is not None and script.reason is not None:
                self._state.stats.refused += 1
                return Answer.of(apns_error(script.reason, self.clock)), []
            apns_id = request.header(b"apns-id") or self._new_apns_id()
            entry = {
                "token": token,
                "apns_id": apns_id,
                # all of them, as received: the apns-* ones are picked when the log is
                # read (_logged), not on the way to the answer
                "headers": request.raw_headers,
                "payload": payload,
                "at": self._arrival(request.at),
            }
            self._state.received.append(entry)
        # as Response(status_code=200, headers={"apns-id": apns_id}) words it
        return Answer(200, ((b"apns-id", apns_id.encode("latin-1")), _NO_BODY), b""), [entry]
