"""Who is calling, and may they reach this path.

Two kinds of credentials (issue 4):

- ``X-API-Key``: the admin key; reaches everything, ``/v1/admin`` included. Or an app
  key (``TEPAT_APP_KEYS``): the events API only, its own events only (ids namespaced
  ``<app>:<event_id>``), the event types ``TEPAT_APP_EVENT_TYPES`` gives it.
- ``Authorization: Bearer <JWT>``: an end user, HS256 with ``TEPAT_JWT_SECRET``,
  ``sub`` = user id, ``exp`` required (at most ``TEPAT_JWT_MAX_LIFETIME_SECONDS``
  ahead), ``iss``/``aud`` when configured; reaches only ``/v1/users/{sub}/…``.

Wrong API keys are throttled per client IP (:mod:`api.throttle`): 429 past the limit.

:class:`AuthMiddleware` decides for every ``/v1/`` request *before* routing
and body parsing, so a caller without valid credentials always gets 401 (not
a 404 or 422 that would tell them about the API), and a user token on another
user's path gets 403. The route dependencies (:mod:`api.deps`) re-check the same rule
against the parsed path parameter and declare the schemes for OpenAPI.

``/v1/providers/…`` (status callbacks and inbound messages from Twilio, the e-mail
provider) takes neither: a provider cannot send our credentials, so each of those
routes verifies the provider's own signature and answers 403 when it does not hold.
"""

from __future__ import annotations

import hmac
import math
from dataclasses import dataclass
from typing import TypeGuard
from urllib.parse import parse_qs

import jwt
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from api.problems import ProblemError
from api.throttle import FailureThrottle, client_ip
from tepat.clock import Clock
from tepat.config import Settings
from tepat.domain.apps import DEFAULT_APP, hash_key, valid_app_id
from tepat.tenancy import Apps

JWT_LEEWAY_SECONDS = 10
# Provider callbacks: authenticated by the provider's signature in the route, not here.
PROVIDER_PREFIX = "/v1/providers/"
# The scope state's name of the app a public path names (api/app.py AppPathMiddleware).
PATH_APP = "path_app"
_CHALLENGE = 'Bearer realm="tepat", ApiKey realm="tepat" header="X-API-Key"'
ADMIN_ONLY = "the admin API needs the X-API-Key"
OWN_USER_ONLY = "a user token reaches only that user's own resources"
OPERATOR_ONLY = "the apps are managed with the operator key (TEPAT_ADMIN_API_KEY)"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who calls, within one app (``app_id``, tepat/tenancy.py): its admin (``user_id``
    and ``poster`` None), one end user, or one event poster (an events key: the events API
    only). The operator (``TEPAT_ADMIN_API_KEY``) is the default app's admin who may also
    manage the apps (``/v1/admin/apps``)."""

    user_id: str | None = None
    # An events key's name: its events are stored as ``<poster>:<event id>``.
    poster: str | None = None
    # A poster's allowed event types (TEPAT_APP_EVENT_TYPES); None: every configured type.
    event_types: frozenset[str] | None = None
    app_id: str = DEFAULT_APP
    operator: bool = False

    @property
    def admin(self) -> bool:
        return self.user_id is None and self.poster is None

    def may_post(self, event_type: str) -> bool:
        return self.event_types is None or event_type in self.event_types

    def may_reach_user(self, user_id: str) -> bool:
        return self.admin or self.user_id == user_id


class AuthError(ProblemError):
    """401 or 403; ``field`` names the request field these credentials may not set."""

    def __init__(
        self, status: int, detail: str, challenge: str = _CHALLENGE, *, field: str | None = None
    ) -> None:
        headers = {"WWW-Authenticate": challenge} if status == 401 else {}
        # The detail is the refusal alone (no "<field>: " before it).
        super().__init__(status, detail, field, headers=headers, field_in_detail=False)


class TooManyFailures(AuthError):
    """429: this client IP sent too many wrong keys in the last minute."""

    def __init__(self, wait: int) -> None:
        super().__init__(429, "too many wrong keys from this address; try again later")
        self.headers["Retry-After"] = str(wait)


class Authenticator:
    """``apps``: the apps served (their keys, their JWT settings); the default app's alone
    when None."""

    def __init__(
        self, settings: Settings, admin_key: str, clock: Clock, apps: Apps | None = None
    ) -> None:
        if not admin_key:
            raise ValueError("the admin API key must not be empty")
        self._admin_key = admin_key.encode()
        self._app_keys = [
            (app, key.get_secret_value().encode()) for app, key in settings.app_keys.items()
        ]
        self._app_event_types = {
            app: frozenset(types) for app, types in (settings.app_event_types or {}).items()
        }
        self._settings = settings
        self._apps = apps
        self._clock = clock

    async def authenticate(self, headers: Headers) -> Principal:
        """The caller of these headers. A key it does not know is looked up again in the
        registry first (made moments ago through another process), so that a new key is
        not counted as a wrong one (the throttle) while this process has yet to read it."""
        api_key = headers.get("x-api-key")
        if api_key is not None:
            try:
                return self._key_principal(api_key)
            except AuthError:
                if self._apps is None or not await self._apps.refresh_if_stale():
                    raise
            return self._key_principal(api_key)
        authorization = headers.get("authorization")
        if authorization is None:
            raise AuthError(401, "credentials required: an X-API-Key or a Bearer token")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(401, "expected 'Authorization: Bearer <token>'")
        return self.user_principal(token.strip())

    def _key_principal(self, api_key: str) -> Principal:
        given = api_key.encode()
        if hmac.compare_digest(given, self._admin_key):
            return Principal(operator=True)
        # Every key compared, whichever matches: the time says nothing about which.
        posters = [app for app, key in self._app_keys if hmac.compare_digest(given, key)]
        if posters:
            return Principal(poster=posters[0], event_types=self._app_event_types.get(posters[0]))
        # A registered key: found by its hash, so the comparison leaks nothing of the key.
        key = self._apps.key(hash_key(api_key)) if self._apps is not None else None
        if key is None:
            raise AuthError(401, "invalid API key")
        if key.role == "admin":
            return Principal(app_id=key.app_id)
        return Principal(
            poster=key.poster or key.app_id, event_types=key.event_types, app_id=key.app_id
        )

    def user_principal(self, token: str) -> Principal:
        """The user of a JWT: from the ``Authorization`` header, or passed as
        ``?access_token=`` (the inbox stream only: :func:`stream_query_token`; never the
        admin key, which stays out of URLs)."""
        app_id = _claimed_app(token)
        return Principal(
            user_id=self._user_from_token(token, self._jwt_rules(app_id)), app_id=app_id
        )

    def _jwt_rules(self, app_id: str) -> Settings:
        """The settings of the app's JWT: the deployment's for the default app, the app's
        own otherwise (never the deployment's secret: tepat/tenancy.py app_settings)."""
        if app_id == DEFAULT_APP:
            return self._settings
        runtime = self._apps.runtime(app_id) if self._apps is not None else None
        if runtime is None:
            raise _bad_token("invalid token: no such app", "invalid token")
        return runtime.settings

    def _user_from_token(self, token: str, settings: Settings) -> str:
        secret = settings.jwt_secret.get_secret_value() if settings.jwt_secret else None
        if not secret:
            raise AuthError(
                401, "end-user tokens are not enabled on this server (TEPAT_JWT_SECRET)"
            )
        issuer, audience = settings.jwt_issuer, settings.jwt_audience
        required = ["exp", "sub"] + ["iss"] * bool(issuer) + ["aud"] * bool(audience)
        try:
            claims = jwt.decode(
                token,
                secret,
                algorithms=["HS256"],
                issuer=issuer,
                audience=audience,
                # exp and nbf are checked below against the runtime's clock, like
                # every other instant in Tepat (and fake time in tests).
                options={"require": required, "verify_exp": False, "verify_nbf": False},
            )
        except jwt.InvalidTokenError as e:
            raise _bad_token(f"invalid token: {e}", "invalid token") from None
        now = self._clock.now().timestamp()
        exp, nbf, sub = claims.get("exp"), claims.get("nbf", 0), claims.get("sub")
        if not _is_number(exp) or not _is_number(nbf):
            raise _bad_token("invalid token: exp and nbf must be numbers", "bad claims")
        if now > exp + JWT_LEEWAY_SECONDS:
            raise _bad_token("token expired", "token expired")
        if exp - now > settings.jwt_max_lifetime_seconds + JWT_LEEWAY_SECONDS:
            raise _bad_token(
                "token lives too long: exp is over TEPAT_JWT_MAX_LIFETIME_SECONDS ahead",
                "exp too far ahead",
            )
        if now < nbf - JWT_LEEWAY_SECONDS:
            raise _bad_token("token not yet valid", "token not yet valid")
        if not isinstance(sub, str) or not sub:
            raise _bad_token("invalid token: 'sub' must name a user", "no sub")
        return sub


def _claimed_app(token: str) -> str:
    """The app a user token names in its ``app`` claim (the default app without one),
    read before the signature is checked: the claim picks the secret that checks it."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as e:
        raise _bad_token(f"invalid token: {e}", "invalid token") from None
    app_id = claims.get("app", DEFAULT_APP)
    if not isinstance(app_id, str) or not valid_app_id(app_id):
        raise _bad_token("invalid token: 'app' must name an app", "bad app")
    return app_id


def _is_number(value: object) -> TypeGuard[int | float]:
    if isinstance(value, bool):
        return False
    # JSON as Python reads it may say NaN or Infinity; an exp of NaN compares false both
    # ways, which would make the token valid forever. (math.isfinite overflows on big ints.)
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _bad_token(detail: str, description: str) -> AuthError:
    challenge = f'Bearer realm="tepat", error="invalid_token", error_description="{description}"'
    return AuthError(401, detail, challenge)


def authorize(principal: Principal, path: str) -> None:
    """403 unless ``principal`` may reach ``path`` (a ``/v1/…`` path)."""
    parts = path.split("/")  # "", "v1", "users", "{user_id}", ...
    if parts[2:4] == ["admin", "apps"] and not principal.operator:
        raise AuthError(403, OPERATOR_ONLY)
    if principal.admin:
        return
    if principal.poster is not None:
        if parts[2:3] == ["events"]:
            return
        raise AuthError(403, "an app key reaches only /v1/events")
    if len(parts) >= 4 and parts[2] == "users" and principal.may_reach_user(parts[3]):
        return
    raise AuthError(403, ADMIN_ONLY if parts[2:3] == ["admin"] else OWN_USER_ONLY)


def stream_query_token(scope: Scope) -> str | None:
    """``?access_token=`` on ``/v1/users/{id}/inbox/stream`` when no header credentials came.

    A browser's ``EventSource`` cannot set headers, so the live inbox stream also takes
    the user's JWT in the query string. The trade-off: a URL is written to access logs
    and proxy logs, so use short-lived tokens there; every other path ignores it.
    """
    parts = scope["path"].split("/")  # "", "v1", "users", "{id}", "inbox", "stream"
    if len(parts) != 6 or parts[1:3] != ["v1", "users"] or parts[4:] != ["inbox", "stream"]:
        return None
    headers = Headers(scope=scope)
    if "x-api-key" in headers or "authorization" in headers:
        return None
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("access_token")
    return values[-1] if values else None


class AuthMiddleware:
    """Authenticates and authorizes every ``/v1/`` request; the principal goes in scope state."""

    def __init__(
        self, app: ASGIApp, authenticator: Authenticator, throttle: FailureThrottle
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or not path.startswith("/v1/")
            or path.startswith(PROVIDER_PREFIX)
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        ip = client_ip(scope.get("client"))
        try:
            if "x-api-key" in headers and (wait := self.throttle.retry_after(ip)) is not None:
                raise TooManyFailures(wait)
            query_token = stream_query_token(scope)
            if query_token is not None:
                principal = self.authenticator.user_principal(query_token.strip())
            else:
                principal = await self.authenticator.authenticate(headers)
            authorize(principal, scope["path"])
        except AuthError as e:
            if e.status == 401 and "x-api-key" in headers:
                self.throttle.failed(ip)
            await e.response()(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
