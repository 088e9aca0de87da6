"""The dashboard's browser session: the admin key, once, for a signed cookie.

A browser cannot send ``X-API-Key`` when it navigates, so the operator types
the admin key into a login form once and gets a session cookie:

- value ``<expires>.<nonce>.<signature>``: HMAC-SHA256 under a secret derived
  from the admin key, so rotating the admin key ends every session; the server
  keeps only the nonces of sessions logged out before their expiry, so a copied
  cookie stops working at logout (per API process: the list is in memory);
- ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
  sends it), ``Secure`` when the request came over HTTPS, ``Path=/dashboard``
  (the rest of the API never sees it and never accepts it);
- each state-changing request (replay, logout) also carries a CSRF token
  derived from the session's nonce, in the ``X-CSRF-Token`` header (or the
  form). SameSite keeps the cookie off other sites' requests, and the token
  is what a forged request cannot know (a custom header also needs a CORS
  preflight, which is never granted).

The cookie's expiry is read on the runtime's clock, like a JWT's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tepat.clock import Clock
from tepat.ports.repositories.meta import MetaRepository

COOKIE = "tepat_dashboard"
COOKIE_PATH = "/dashboard"
SESSION_SECONDS = 8 * 3600
CSRF_HEADER = "x-csrf-token"
# A logged-out session's nonce, under this prefix in the store's meta records.
REVOKED_PREFIX = "dashboard_session_revoked:"


@dataclass(frozen=True, slots=True)
class Session:
    nonce: str
    expires: int  # Unix seconds


class Sessions:
    def __init__(self, admin_key: str, clock: Clock, revoked: MetaRepository) -> None:
        if not admin_key:
            raise ValueError("the admin API key must not be empty")
        self._admin_key = admin_key.encode()
        self._secret = hmac.new(
            self._admin_key, b"tepat dashboard session v1", hashlib.sha256
        ).digest()
        self._clock = clock
        self._revoked = revoked

    def key_ok(self, key: str | None) -> bool:
        return key is not None and hmac.compare_digest(key.encode(), self._admin_key)

    def issue(self) -> str:
        """A new session's cookie value."""
        expires = int(self._clock.now().timestamp()) + SESSION_SECONDS
        payload = f"{expires}.{secrets.token_urlsafe(18)}"
        return f"{payload}.{self._sign('session', payload)}"

    async def read(self, request: Request) -> Session | None:
        """The request's valid, unexpired session, if it has one."""
        value = request.cookies.get(COOKIE)
        if not value or value.count(".") != 2:
            return None
        expires, nonce, signature = value.split(".")
        if not _equal(signature, self._sign("session", f"{expires}.{nonce}")):
            return None
        if not expires.isdigit() or int(expires) < self._clock.now().timestamp():
            return None
        # Only a cookie with a valid signature costs a store read.
        if await self._revoked.get_meta(REVOKED_PREFIX + nonce) is not None:
            return None
        return Session(nonce, int(expires))

    async def revoke(self, session: Session) -> None:
        """Logout: this session's cookie is refused from now on, wherever it was copied
        and whichever API process it reaches."""
        await self._revoked.set_meta(REVOKED_PREFIX + session.nonce, str(session.expires))

    def csrf_token(self, session: Session) -> str:
        return self._sign("csrf", session.nonce)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return token is not None and _equal(token, self.csrf_token(session))

    def _sign(self, purpose: str, payload: str) -> str:
        mac = hmac.new(self._secret, f"{purpose}|{payload}".encode(), hashlib.sha256)
        return mac.hexdigest()


def _equal(given: str, expected: str) -> bool:
    # Bytes: compare_digest refuses str with non-ASCII characters, which a client may send.
    return hmac.compare_digest(given.encode(), expected.encode())


def set_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(COOKIE, value, max_age=SESSION_SECONDS, **_cookie_attributes(request))


def clear_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE, **_cookie_attributes(request))


def _cookie_attributes(request: Request) -> dict[str, Any]:
    secure = request.url.scheme == "https"
    return {"path": COOKIE_PATH, "httponly": True, "samesite": "strict", "secure": secure}
