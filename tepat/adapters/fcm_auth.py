"""OAuth2 access tokens for FCM from a service account, through ``google-auth``.

``google-auth`` signs the JWT assertion (RS256 with the account's key) and posts it to the
account's ``token_uri``; it is synchronous, so a refresh runs in a thread, one at a time
(an ``asyncio`` lock: a hundred concurrent sends needing a token cause one refresh). A
token is renewed :data:`REFRESH_EARLY` before it expires, by the injected clock, so no
request leaves with a token about to lapse on the way.

Its HTTP goes through :class:`HttpxRequest`, a small ``google.auth.transport.Request`` on
httpx, rather than ``google.auth.transport.requests``: that one needs ``requests``, which
Tepat does not otherwise install.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import google.auth.exceptions
import google.auth.transport
import httpx
from google.oauth2 import service_account

from tepat.clock import Clock
from tepat.ports.push import Rejected
from tepat.ports.try_again import TryAgain

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
REFRESH_EARLY = timedelta(minutes=5)


class _Response(google.auth.transport.Response):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def data(self) -> bytes:
        return self._response.content


class HttpxRequest(google.auth.transport.Request):
    def __init__(self, client: httpx.Client) -> None:
        self._client = client

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _Response:
        try:
            response = self._client.request(
                method, url, content=body, headers=headers, timeout=timeout or 30.0
            )
        except httpx.HTTPError as e:
            raise google.auth.exceptions.TransportError(e) from e  # type: ignore[no-untyped-call]
        return _Response(response)


def read_service_account(path: str) -> service_account.Credentials:
    """The service account in the JSON file at ``path``; ValueError when it is not one."""
    try:
        credentials: service_account.Credentials = (
            service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                path, scopes=[SCOPE]
            )
        )
        return credentials
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(f"{path}: not a readable service account JSON file ({e})") from None


class FcmAuth:
    """The current access token of one service account, renewed before it expires."""

    def __init__(self, credentials: service_account.Credentials, clock: Clock) -> None:
        self.credentials = credentials
        self.project_id: str | None = credentials.project_id
        self.clock = clock
        self._lock = asyncio.Lock()
        self._token: str | None = None
        self._expires_at = datetime.min.replace(tzinfo=UTC)
        self._http = httpx.Client()
        self.refreshes = 0

    async def token(self, stale: str | None = None) -> str | TryAgain | Rejected:
        """A token valid for at least :data:`REFRESH_EARLY`; a new one when the current one
        is ``stale`` (the provider refused it). The reason the token endpoint refused
        instead, as a send's outcome."""
        async with self._lock:
            if self._token and self._token != stale and self._fresh():
                return self._token
            started = self.clock.now()
            wall = datetime.now(UTC)
            try:
                await asyncio.to_thread(self.credentials.refresh, HttpxRequest(self._http))
            except google.auth.exceptions.TransportError as e:
                # The assertion never got an answer: no message was sent either.
                return TryAgain(f"FCM token endpoint unreachable: {e}")
            except google.auth.exceptions.RefreshError as e:
                # Its first argument is the endpoint's words; the rest, its whole answer.
                why = e.args[0] if e.args else e
                if getattr(e, "retryable", False):
                    return TryAgain(f"FCM token endpoint failed: {why}")
                return Rejected(f"FCM service account refused by its token endpoint: {why}")
            self.refreshes += 1
            # google-auth dates the expiry by the wall clock; keep its lifetime, on ours.
            expiry = self.credentials.expiry or wall
            self._expires_at = started + (expiry.replace(tzinfo=UTC) - wall)
            self._token = str(self.credentials.token)
            return self._token

    def _fresh(self) -> bool:
        return self.clock.now() < self._expires_at - REFRESH_EARLY

    def close(self) -> None:
        self._http.close()
