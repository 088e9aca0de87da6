"""One-click unsubscribe: the links bulk e-mail carries, and what following one does.

:class:`UnsubscribeLinks` makes ``{TEPAT_PUBLIC_URL}/u/{token}`` for a (user, category,
channel); :func:`opt_out` is what ``POST /u/{token}`` does with a valid one: the
preference ``"<category>.<channel>"`` set to false, the category's other channels kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol
from urllib.parse import urlsplit

from tepat.clock import Clock
from tepat.domain.preferences import channel_key
from tepat.domain.unsubscribe import UnsubscribeClaim, make_token, read_token
from tepat.ports.repositories.preferences import PreferenceRepository
from tepat.ports.repositories.users import UserRepository

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def check_public_url(url: str) -> str:
    """``TEPAT_PUBLIC_URL``: https (RFC 8058 requires it of the one-click URL); http only
    for a local host, for development."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("expected https://HOST[/PATH], the URL recipients reach this API at")
    if parts.scheme == "http" and parts.hostname not in _LOCAL_HOSTS:
        raise ValueError("must be https (RFC 8058); http only for localhost")
    if parts.query or parts.fragment:
        raise ValueError("expected no query or fragment")
    return url


class UnsubscribeLinks:
    def __init__(
        self,
        secret: str | bytes,
        public_url: str,
        clock: Clock,
        valid_for: timedelta = timedelta(days=90),
    ) -> None:
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self.public_url = check_public_url(public_url.rstrip("/"))
        self.clock = clock
        self.valid_for = valid_for

    def url_for(self, user_id: str, category: str, channel: str) -> str:
        claim = UnsubscribeClaim(user_id, category, channel, self.clock.now() + self.valid_for)
        return f"{self.public_url}/u/{make_token(self._secret, claim)}"

    def read(self, token: str) -> UnsubscribeClaim:
        """The claim of a token from one of our links; ``DomainError`` subclasses
        (:mod:`tepat.domain.unsubscribe`) when it is malformed, forged or expired."""
        return read_token(self._secret, token, self.clock.now())


@dataclass(frozen=True, slots=True)
class OptedOut:
    claim: UnsubscribeClaim
    known_user: bool


class OptOutRecords(UserRepository, PreferenceRepository, Protocol): ...


async def opt_out(store: OptOutRecords, claim: UnsubscribeClaim) -> OptedOut:
    """Opt the claim's user out of its category on its channel. Idempotent; a user
    deleted since the mail went out has nothing left to opt out of."""
    if await store.get_user(claim.user_id) is None:
        return OptedOut(claim, known_user=False)
    await store.set_preferences(claim.user_id, {channel_key(claim.category, claim.channel): False})
    return OptedOut(claim, known_user=True)
