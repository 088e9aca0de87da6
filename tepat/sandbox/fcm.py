"""A stand-in for FCM HTTP v1 and Google's OAuth2 token endpoint, for tests and demos.

* ``POST /token``: the jwt-bearer grant a service account makes (what ``google-auth``
  sends). The assertion must be signed (RS256) by a key the sandbox trusts
  (:meth:`FcmSandbox.service_account` makes one), its ``aud`` Google's token endpoint
  (or this one) and unexpired;
  the answer is ``{"access_token", "expires_in", "token_type"}``, else 400
  ``invalid_grant`` as Google words it.
* ``POST /v1/projects/{id}/messages:send``: one ``{"message": {"token", ...}}``. Without a
  live access token (issued here, not expired on the sandbox's clock): 401
  ``UNAUTHENTICATED``. A token scripted with an error gets FCM's answer for it
  (google.rpc.Status with an ``FcmError`` detail and FCM's HTTP status); over the rate
  limit: 429 ``QUOTA_EXCEEDED`` with ``Retry-After``. Otherwise
  ``{"name": "projects/{id}/messages/{n}"}``, and the message is in :meth:`received`,
  its ``at`` the instant its request arrived (:class:`~tepat.sandbox.h2c_server.HotSendProvider`).

The faults, counters and ``/_sandbox/`` controls are the sandbox kit's
(:mod:`tepat.sandbox.provider`).
"""

from __future__ import annotations

import json
import math
import random
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.clock import Clock
from tepat.sandbox.faults import FailNext
from tepat.sandbox.h2c_server import Answer, HotRequest, HotSendProvider, json_body
from tepat.sandbox.provider import SandboxState, Stats, private_pem

TOKEN_PATH = "/token"
GOOGLE_TOKEN_ENDPOINT = "https://oauth2.googleapis.com/token"
SEND_PATH = "/v1/projects/{project}/messages:send"
_FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
_JSON_TYPE = (b"content-type", b"application/json")

# FCM's error codes: (HTTP status, google.rpc status, message as FCM words it)
ERRORS: dict[str, tuple[int, str, str]] = {
    "UNREGISTERED": (404, "NOT_FOUND", "Requested entity was not found."),
    "INVALID_ARGUMENT": (
        400,
        "INVALID_ARGUMENT",
        "The registration token is not a valid FCM registration token",
    ),
    "SENDER_ID_MISMATCH": (403, "PERMISSION_DENIED", "SenderId mismatch"),
    "QUOTA_EXCEEDED": (429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric"),
    "UNAVAILABLE": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "INTERNAL": (500, "INTERNAL", "Internal error encountered."),
    "THIRD_PARTY_AUTH_ERROR": (401, "UNAUTHENTICATED", "Auth error from APNS or Web Push"),
}


def fcm_error(
    code: str, retry_after: float | None = None, message: str | None = None
) -> JSONResponse:
    """An FCM error answer for ``code`` (a key of :data:`ERRORS`, or a plain status)."""
    status, rpc_status, text = ERRORS.get(code, (400, code, code))
    details: list[dict[str, Any]] = []
    if code in ERRORS:
        details.append({"@type": _FCM_ERROR, "errorCode": code})
    if code == "INVALID_ARGUMENT":
        details.append({"@type": _BAD_REQUEST, "fieldViolations": [{"field": "message.token"}]})
    error = {"code": status, "message": message or text, "status": rpc_status, "details": details}
    headers = {} if retry_after is None else {"Retry-After": str(math.ceil(retry_after))}
    return JSONResponse({"error": error}, status, headers=headers)


def _status(status: int, rpc_status: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": status, "message": message, "status": rpc_status}}, status
    )


@dataclass(frozen=True, slots=True)
class FcmTokenScript:
    """What happens to messages sent to one token: FCM's ``error`` (a key of ERRORS)."""

    error: str | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERRORS:
            raise ValueError(f"unknown FCM error {self.error!r} (one of {sorted(ERRORS)})")


@dataclass(slots=True)
class _Stats(Stats):
    token_requests: int = 0
    messages: int = 0
    refused: int = 0


@dataclass(slots=True)
class _State(SandboxState):
    access_tokens: dict[str, datetime] = field(default_factory=dict)  # token: expiry
    stats: _Stats = field(default_factory=_Stats)


class FcmSandbox(HotSendProvider[_State]):
    """One fake Firebase project and its token endpoint (see the module's docstring).
    As Google's front end: HTTP/2 (h2c here) and HTTP/1.1 on one port."""

    _scripts_key = "tokens"
    _script_type = FcmTokenScript
    _send_path = SEND_PATH

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        token_lifetime_seconds: int = 3600,
        rate_limit: float | None = None,
        scripts: Mapping[str, FcmTokenScript] | None = None,
        stall_limit_seconds: float = 60.0,
    ) -> None:
        self.token_lifetime = token_lifetime_seconds
        self._keys: dict[str, Any] = {}  # client_email: public key
        # the number ending each message's name: as unique as uuid4's was, at less cost
        self._message_numbers = random.Random()
        self._name_starts: dict[str, bytes] = {}  # project: the start of its answer
        routes = [Route(TOKEN_PATH, self._token, methods=["POST"])]
        super().__init__(_State, scripts, clock, rate_limit, stall_limit_seconds, routes)

    # ---- controls ----

    def service_account(self, base_url: str, project_id: str = "tepat-test") -> dict[str, Any]:
        """A new service account's JSON (an RSA key made here), trusted by this sandbox
        and pointing at its token endpoint at ``base_url``."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        email = f"tepat-{uuid.uuid4().hex[:8]}@{project_id}.iam.gserviceaccount.com"
        self._keys[email] = key.public_key()
        return {
            "type": "service_account",
            "project_id": project_id,
            "private_key_id": uuid.uuid4().hex,
            "private_key": private_pem(key),
            "client_email": email,
            "client_id": str(uuid.uuid4().int)[:21],
            "token_uri": f"{base_url.rstrip('/')}{TOKEN_PATH}",
        }

    def script_token(self, token: str, error: str | None) -> None:
        """Answer messages to ``token`` with FCM's ``error`` (``None``: accept them)."""
        self._set_script(token, self._script_from({"error": error}))

    def fail_next(
        self, count: int, status: int = 429, retry_after: float | None = None, code: str = ""
    ) -> None:
        """Answer the next ``count`` sends with HTTP ``status`` (FCM's code for it)."""
        default = {429: "QUOTA_EXCEEDED", 503: "UNAVAILABLE"}.get(
            status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"
        )
        self._refuse_next(count, status, retry_after, code or default)

    def revoke_tokens(self) -> None:
        """Forget every access token issued: the next sends get 401."""
        with self._lock:
            self._state.access_tokens.clear()

    def _apply_own_script(self, spec: dict[str, Any]) -> None:
        """FCM's key of a ``POST /_sandbox/script`` body: ``{"fail_next": {"count",
        "status", "retry_after", "code"}}``."""
        if fail := spec.get("fail_next"):
            if not isinstance(fail, dict):
                raise ValueError('"fail_next" must be {"count", "status", "code", "retry_after"}')
            self.fail_next(
                int(fail.get("count", 1)),
                int(fail.get("status", 429)),
                fail.get("retry_after"),
                str(fail.get("code") or ""),
            )

    def _describe_own(self) -> dict[str, Any]:
        return {"token_lifetime_seconds": self.token_lifetime}

    # ---- FCM's words ----

    def _server_error(self, status: int) -> Response:
        return fcm_error("INTERNAL")

    def _refusal(self, failure: FailNext) -> Response:
        self._state.stats.refused += 1
        code = str(failure.code)
        return fcm_error(code, failure.retry_after, f"Scripted failure {failure.status} {code}")

    def _authorized(self, request: HotRequest) -> bool:
        auth = request.header(b"authorization") or ""
        expiry = self._state.access_tokens.get(auth.removeprefix("Bearer "))
        return auth.startswith("Bearer ") and expiry is not None and request.at < expiry

    def _unauthorized(self) -> Response:
        message = "Request had invalid authentication credentials."
        return _status(401, "UNAUTHENTICATED", message)

    def _bad_script(self, message: str) -> Response:
        return _status(400, "INVALID_ARGUMENT", message)

    # ---- the token endpoint and the send API ----

    async def _token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        with self._lock:
            self._state.stats.token_requests += 1
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return JSONResponse({"error": "unsupported_grant_type"}, 400)
        assertion = form.get("assertion", "")
        try:
            issuer = jwt.decode(assertion, options={"verify_signature": False}).get("iss")
            key = self._keys[str(issuer)]
            jwt.decode(
                assertion,
                key,
                algorithms=["RS256"],
                # google-auth names Google's endpoint whatever its token_uri; real Google
                # takes that, and so does this one (or its own address).
                audience=[GOOGLE_TOKEN_ENDPOINT, str(request.url.replace(query=""))],
                options={"require": ["exp", "iat", "aud", "iss"]},
            )
        except (jwt.InvalidTokenError, KeyError) as e:
            return JSONResponse(
                {"error": "invalid_grant", "error_description": f"Invalid JWT: {e}"}, 400
            )
        token = f"ya29.sandbox-{secrets.token_urlsafe(24)}"
        with self._lock:
            expiry = self.clock.now() + timedelta(seconds=self.token_lifetime)
            self._state.access_tokens[token] = expiry
        return JSONResponse(
            {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}
        )

    def _take_send(self, request: HotRequest, raw: bytes) -> tuple[Answer, list[dict[str, Any]]]:
        if (refused := self._admit_send(request)) is not None:
            return refused, []
        try:
            body = json_body(raw)
            message = body["message"]
            token = message["token"]
            if not isinstance(token, str) or not token:
                raise TypeError
        except (ValueError, TypeError, KeyError):
            why = "Invalid JSON payload: message.token"
            return Answer.of(_status(400, "INVALID_ARGUMENT", why)), []
        if wait := self._over_rate(1):
            return Answer.of(fcm_error("QUOTA_EXCEEDED", wait)), []
        project = request.path_params["project"]
        with self._lock:
            script = self._state.scripts.get(token)
            self._state.stats.messages += 1
            if script is not None and script.error is not None:
                self._state.stats.refused += 1
                retry = 10.0 if script.error == "QUOTA_EXCEEDED" else None
                return Answer.of(fcm_error(script.error, retry)), []
            number = self._message_numbers.getrandbits(64) % 10**19
            name = f"projects/{project}/messages/{number}"
            entry = {"name": name, "message": message, "at": self._arrival(request.at)}
            self._state.received.append(entry)
        return self._named(project, number), [entry]

    def _named(self, project: str, number: int) -> Answer:
        """FCM's ``{"name": ...}`` as JSONResponse words it: only the project may need
        escaping, so its part is made once."""
        if (start := self._name_starts.get(project)) is None:
            if len(self._name_starts) >= 64:
                self._name_starts.clear()
            words = json.dumps(f"projects/{project}/messages/", ensure_ascii=False)
            start = self._name_starts[project] = b'{"name":' + words[:-1].encode()
        body = b'%s%d"}' % (start, number)
        return Answer(200, ((b"content-length", b"%d" % len(body)), _JSON_TYPE), body)
